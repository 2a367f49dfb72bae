//! A pod's end, every way the kubelet ends one: graceful deletion, a hung
//! program, an OOM kill and a crash under the real Job controller, a
//! node-pressure eviction; and the ways it never starts: an unpullable
//! image, a missing Secret.

use crate::require_control_plane;
use crate::support::{NS, Rig, cond, is_true, plain_job, plain_pod, state};
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Records every version of pod `name` the API server sends on a watch
/// until it is deleted (or `within` passes).
fn record_pod(
    rig: &Rig,
    name: &str,
    within: Duration,
) -> tokio::task::JoinHandle<Vec<(String, Value)>> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(rig.client.clone(), NS);
    let params = kube::api::WatchParams::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let Ok(stream) = pods.watch(&params, "0").await else {
            return seen;
        };
        let mut stream = stream.boxed();
        let deadline = tokio::time::sleep(within);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return seen,
                ev = stream.next() => match ev {
                    Some(Ok(kube::api::WatchEvent::Added(p) | kube::api::WatchEvent::Modified(p))) => {
                        seen.push(("MODIFIED".to_string(), serde_json::to_value(p).unwrap()));
                    }
                    Some(Ok(kube::api::WatchEvent::Deleted(p))) => {
                        seen.push(("DELETED".to_string(), serde_json::to_value(p).unwrap()));
                        return seen;
                    }
                    Some(_) => {}
                    None => return seen,
                },
            }
        }
    })
}

async fn running(rig: &Rig, name: &str) -> Value {
    rig.until(
        &format!("pod {name} Running"),
        Duration::from_secs(30),
        || async {
            let p = rig.pod(name).await?;
            (p["status"]["phase"] == "Running").then_some(p)
        },
    )
    .await
}

async fn delete(rig: &Rig, name: &str, grace: u32) {
    tcab_node_agent::api::delete(
        &rig.client,
        &tcab_node_agent::api::pod_path(NS, name),
        &json!({"gracePeriodSeconds": grace}),
    )
    .await
    .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_stops_it_gracefully_and_the_object_goes_and_a_hung_one_is_killed() {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    rig.create_pod(&plain_pod("graceful", "n1")).await;
    rig.create_pod(&plain_pod("hung", "n1")).await;
    let p = running(&rig, "graceful").await;
    let c = &p["status"]["containerStatuses"][0];
    assert_eq!(
        (c["ready"].as_bool(), c["started"].as_bool()),
        (Some(true), Some(true))
    );
    assert!(state(&p)["running"]["startedAt"].is_string());
    assert!(is_true(&p["status"], "Ready") && is_true(&p["status"], "ContainersReady"));

    let seen = record_pod(&rig, "graceful", Duration::from_secs(30));
    tokio::time::sleep(Duration::from_millis(300)).await;
    delete(&rig, "graceful", 5).await;
    let seen = seen.await.unwrap();
    let (last_kind, _) = seen.last().expect("events");
    assert_eq!(last_kind, "DELETED", "the object goes");
    let terminal = seen
        .iter()
        .map(|(_, p)| p)
        .find(|p| p["status"]["phase"] == "Failed")
        .expect("the terminal status before the delete");
    let t = &state(terminal)["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(143), Some("Error"))
    );
    assert!(terminal["metadata"]["deletionTimestamp"].is_string());

    // A program that ignores SIGTERM is killed after the grace period.
    running(&rig, "hung").await;
    rig.agent.hang(NS, "hung").unwrap();
    let seen = record_pod(&rig, "hung", Duration::from_secs(30));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    delete(&rig, "hung", 3).await;
    let seen = seen.await.unwrap();
    let took = began.elapsed();
    let terminal = seen
        .iter()
        .map(|(_, p)| p)
        .find(|p| p["status"]["phase"] == "Failed")
        .expect("the terminal status");
    let t = &state(terminal)["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(137), Some("Error"))
    );
    assert!(
        took >= Duration::from_secs(3),
        "SIGKILL only after the grace: {took:?}"
    );
    assert_eq!(seen.last().unwrap().0, "DELETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_fails_the_job_through_failure_target_and_a_crash_keeps_its_exit_code() {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    rig.create_job(&plain_job("oom", "n1", Some(300.0), |_| {}))
        .await;
    rig.create_job(&plain_job("crash", "n1", Some(300.0), |_| {}))
        .await;
    let pod = rig
        .job_pod_where("oom", "the oom Job's pod Running", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    let name = pod["metadata"]["name"].as_str().unwrap();
    rig.agent.oom_kill(NS, name).unwrap();
    let job = rig
        .until("the oom Job Failed", Duration::from_secs(30), || async {
            let j = rig.job("oom").await?;
            is_true(&j["status"], "Failed").then_some(j)
        })
        .await;
    let ft = cond(&job["status"], "FailureTarget").expect("FailureTarget before Failed");
    assert_eq!(ft["reason"], "BackoffLimitExceeded");
    let failed_at = cond(&job["status"], "Failed").unwrap()["lastTransitionTime"].clone();
    assert!(
        ft["lastTransitionTime"].as_str() <= failed_at.as_str(),
        "FailureTarget first"
    );
    assert_eq!(
        cond(&job["status"], "Failed").unwrap()["reason"],
        "BackoffLimitExceeded"
    );
    assert_eq!(job["status"]["failed"], 1);
    let pod = rig.pod(name).await.expect("the pod stays");
    assert_eq!(pod["status"]["phase"], "Failed");
    let t = &state(&pod)["terminated"];
    assert_eq!(
        (t["reason"].as_str(), t["exitCode"].as_i64()),
        (Some("OOMKilled"), Some(137))
    );
    assert!(t.get("signal").is_none());
    assert!(
        pod["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "the Job controller removed its tracking finalizer"
    );

    let pod = rig
        .job_pod_where("crash", "the crash Job's pod Running", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    rig.agent.crash(NS, &name, 3).unwrap();
    let pod = rig
        .until(
            "the crashed pod Failed",
            Duration::from_secs(30),
            || async {
                let p = rig.pod(&name).await?;
                (p["status"]["phase"] == "Failed").then_some(p)
            },
        )
        .await;
    let t = &state(&pod)["terminated"];
    assert_eq!(
        (t["reason"].as_str(), t["exitCode"].as_i64()),
        (Some("Error"), Some(3))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_pressure_eviction_keeps_the_pod_failed_and_evicted() {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    rig.create_pod(&plain_pod("victim", "n1")).await;
    running(&rig, "victim").await;
    let began = Instant::now();
    // Through the admin API.
    let admin = tcab_node_agent::AdminClient::new(&rig.agent.admin_url().unwrap());
    admin.evict(NS, "victim").await.unwrap();
    let pod = rig
        .until(
            "the evicted pod Failed",
            Duration::from_secs(30),
            || async {
                let p = rig.pod("victim").await?;
                (p["status"]["phase"] == "Failed").then_some(p)
            },
        )
        .await;
    let s = &pod["status"];
    assert_eq!(s["reason"], "Evicted");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .starts_with("The node was low on resource: memory.")
    );
    let dt = cond(s, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(
        (dt["status"].as_str(), dt["reason"].as_str()),
        (Some("True"), Some("TerminationByKubelet"))
    );
    // The plain program stops at SIGTERM.
    assert_eq!(state(&pod)["terminated"]["exitCode"], 143);
    assert!(began.elapsed() < Duration::from_secs(10));
    // The pod is kept.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = rig
        .pod("victim")
        .await
        .expect("an evicted pod is not deleted");
    assert!(kept["metadata"]["deletionTimestamp"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_over_its_ephemeral_storage_limit_is_evicted_without_a_disruption_target() {
    let bin = require_control_plane!();
    let rig = Rig::start_with(&bin, &["n1"], Default::default(), |o| {
        o.timing.eviction_monitoring = Duration::from_secs(1);
    })
    .await;
    let mut pod = plain_pod("filler", "n1");
    pod["metadata"]["annotations"] =
        json!({"kube-sim.tcab.dev/write-mib": "48", "kube-sim.tcab.dev/log-lines": "2"});
    pod["spec"]["containers"][0]["resources"] = json!({"limits": {"ephemeral-storage": "16Mi"}});
    rig.create_pod(&pod).await;
    let pod = rig
        .until("the pod evicted", Duration::from_secs(30), || async {
            let p = rig.pod("filler").await?;
            (p["status"]["phase"] == "Failed").then_some(p)
        })
        .await;
    let s = &pod["status"];
    assert_eq!(s["reason"], "Evicted");
    assert_eq!(
        s["message"],
        "Pod ephemeral local storage usage exceeds the total limit of containers 16Mi. "
    );
    assert!(cond(s, "DisruptionTarget").is_none());
    assert_eq!(state(&pod)["terminated"]["exitCode"], 143);
    // Its container is removed, its log file with it: the kubelet streams
    // its error (status 200); the agent still has the lines.
    let text = rig
        .get_text(&format!("/api/v1/namespaces/{NS}/pods/filler/log"))
        .await;
    assert!(
        text.starts_with("unable to retrieve container logs for containerd://"),
        "{text}"
    );
    assert_eq!(
        rig.agent.log_lines(NS, "filler", "main").unwrap(),
        ["line 1", "line 2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpullable_image_backs_off_and_a_missing_secret_is_a_config_error_until_they_are_fixed()
{
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    rig.agent.set_unpullable("registry.example/missing:1", true);
    let mut pod = plain_pod("unpullable", "n1");
    pod["spec"]["containers"][0]["image"] = json!("registry.example/missing:1");
    rig.create_pod(&pod).await;
    let mut secretless = plain_pod("secretless", "n1");
    secretless["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "absent"}}]);
    rig.create_pod(&secretless).await;

    let waiting = |name: &'static str, reason: &'static str| {
        let rig = &rig;
        async move {
            rig.until(
                &format!("{name} waiting {reason}"),
                Duration::from_secs(30),
                || async {
                    let p = rig.pod(name).await?;
                    (state(&p)["waiting"]["reason"] == reason).then_some(p)
                },
            )
            .await
        }
    };
    let p = waiting("unpullable", "ErrImagePull").await;
    assert!(
        state(&p)["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("not found")
    );
    assert_eq!(p["status"]["phase"], "Pending");
    waiting("unpullable", "ImagePullBackOff").await;
    let p = waiting("secretless", "CreateContainerConfigError").await;
    assert_eq!(
        state(&p)["waiting"]["message"],
        "secret \"absent\" not found"
    );
    assert!(is_true(&p["status"], "PodReadyToStartContainers"));
    assert!(p["status"]["podIP"].is_string());

    // The kubelet refuses logs of a container that waits.
    let r = tcab_node_agent::api::get(
        &rig.client,
        &format!("/api/v1/namespaces/{NS}/pods/secretless/log"),
    )
    .await;
    let e = r.expect_err("no logs while waiting");
    assert!(
        e.message
            .contains("is waiting to start: CreateContainerConfigError"),
        "{e}"
    );

    rig.agent
        .set_unpullable("registry.example/missing:1", false);
    rig.post(
        &format!("/api/v1/namespaces/{NS}/secrets"),
        &json!({"metadata": {"name": "absent"}, "stringData": {"K": "v"}}),
    )
    .await;
    running(&rig, "unpullable").await;
    running(&rig, "secretless").await;
}
