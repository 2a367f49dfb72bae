//! Node conformance: each death cause on the node agent and on the
//! upstream kubelet (containerd 1.6, runc), each side on a control plane
//! of its own, compared field by field (`tcab_conformance::node_kinds`).
//! Differences the node agent keeps are listed, with their reasons, in
//! `devkit/node-agent/README.md` under "Known divergences from the real
//! kubelet"; a row that no longer differs fails, as does a difference it
//! does not list. Without real nodes each scenario prints one SKIP line.
//!
//! The dispatcher's own conclusion (its death report) is not run here: it
//! reads exactly the fields compared (the pod's phase, reason,
//! `DisruptionTarget`, the container's terminated state, the Job's
//! conditions and the log), so equal fields give an equal report.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tcab_conformance::Outcome;
use tcab_conformance::node_kinds::{
    NODE, NodeSide, node_differential, plain_pod, record_job, record_logs, record_pod,
    waiting_reasons,
};

fn running(p: &Value) -> bool {
    p["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

fn terminal(p: &Value) -> bool {
    matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
}

/// Waits until the pod's log holds `needle` (the program is past its start,
/// its SIGTERM handler installed).
async fn wait_log(side: &NodeSide, pod: &str, needle: &str) -> Result<()> {
    side.until(
        &format!("log of {pod} holding {needle:?}"),
        Duration::from_secs(30),
        async || {
            let a = side
                .get(&format!("{}/{pod}/log?container=main", side.pods()))
                .await?;
            Ok(
                (a.code == 200 && a.body.as_str().is_some_and(|t| t.contains(needle)))
                    .then_some(()),
            )
        },
    )
    .await
}

/// Creates a plain pod that logs two lines and runs until stopped; waits
/// until it runs and has logged.
async fn start_running(side: &NodeSide, mut pod: Value) -> Result<String> {
    pod["metadata"]["annotations"]["kube-sim.tcab.dev/log-lines"] = json!("2");
    let env = pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .context("env")?;
    env.push(json!({"name": "TCAB_LOG_LINES", "value": "2"}));
    let name = side.create_pod(&pod).await?;
    side.pod_until(&name, "the pod runs", Duration::from_secs(60), running)
        .await?;
    wait_log(side, &name, "line 2").await?;
    Ok(name)
}

/// Deletes the pod with `options` and follows it until it is gone: the pod
/// as the DELETED event carries it (the last status its kubelet wrote), and
/// the container states its MODIFIED events went through.
async fn delete_and_follow(
    side: &NodeSide,
    name: &str,
    options: Value,
    limit: Duration,
) -> Result<(Value, Vec<Value>)> {
    let pod = side.pod(name).await?.context("the pod is gone already")?;
    let rv = pod["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let mut watch = side
        .watch(&format!(
            "{}?fieldSelector=metadata.name%3D{name}&resourceVersion={rv}",
            side.pods()
        ))
        .await?;
    let a = side
        .delete(&format!("{}/{name}", side.pods()), Some(&options))
        .await?;
    if a.code != 200 {
        bail!("DELETE {name}: {} {}", a.code, a.body);
    }
    let deadline = Instant::now() + limit;
    let mut states = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(ev) = watch.next(left).await? else {
            bail!("pod {name} not gone within {limit:?}");
        };
        let state = ev["object"]["status"]["containerStatuses"][0]["state"].clone();
        if states.last() != Some(&state) {
            states.push(state);
        }
        if ev["type"] == "DELETED" {
            return Ok((ev["object"].clone(), states));
        }
    }
}

/// The reasons of the Events about the pod, sorted, each once.
async fn event_reasons(side: &NodeSide, pod: &str) -> Result<Vec<String>> {
    let a = side
        .get(&format!(
            "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name%3D{pod}",
            side.ns
        ))
        .await?;
    let mut r: Vec<String> = a.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    r.sort();
    r.dedup();
    Ok(r)
}

/// The Ready condition of a node as `Status/Reason`.
async fn node_ready(side: &NodeSide, node: &str) -> Result<String> {
    let n = side
        .object(&format!("/api/v1/nodes/{node}"))
        .await?
        .context("no node")?;
    let c = tcab_conformance::normalise::condition(&n["status"], "Ready").cloned();
    Ok(c.map(|c| {
        format!(
            "{}/{}",
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or("")
        )
    })
    .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oom_kill_by_a_memory_limit() {
    node_differential("oom_kill", async |side, o: &mut Outcome| {
        let mut pod = plain_pod("x", &[("allocate-mib", "96"), ("run-seconds", "30")]);
        pod["spec"]["containers"][0]["resources"] =
            json!({"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}});
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "oom"},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": pod["metadata"]["annotations"]},
                "spec": pod["spec"]}}
        });
        side.create(&side.jobs(), &job).await?;
        let job = side
            .until("the Job fails", Duration::from_secs(90), async || {
                let j = side.object(&format!("{}/oom", side.jobs())).await?;
                Ok(j.filter(|j| {
                    tcab_conformance::normalise::condition(&j["status"], "Failed")
                        .is_some_and(|c| c["status"] == "True")
                }))
            })
            .await?;
        let pods = side
            .get(&format!("{}?labelSelector=job-name%3Doom", side.pods()))
            .await?;
        let pod = pods.body["items"][0].clone();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        record_pod(o, "pod", &pod);
        record_job(o, "job", &job);
        record_logs(side, o, "pod", &name).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_within_the_grace_period() {
    node_differential("sigterm_within_grace", async |side, o: &mut Outcome| {
        let name = start_running(side, plain_pod("term", &[])).await?;
        record_pod(o, "running", &side.pod(&name).await?.context("pod")?);
        record_logs(side, o, "running", &name).await?;
        // The default grace (30 s): the program exits 143 on SIGTERM.
        let (pod, states) =
            delete_and_follow(side, &name, json!({}), Duration::from_secs(40)).await?;
        record_pod(o, "deleted", &pod);
        o.put("deleted.states", json!(states.len()));
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_ignored_past_the_grace_period() {
    node_differential("sigterm_past_grace", async |side, o: &mut Outcome| {
        let mut pod = plain_pod("stubborn", &[("ignore-sigterm", "true")]);
        pod["spec"]["terminationGracePeriodSeconds"] = json!(3);
        let name = start_running(side, pod).await?;
        let t = Instant::now();
        let (pod, _) = delete_and_follow(side, &name, json!({}), Duration::from_secs(30)).await?;
        record_pod(o, "deleted", &pod);
        // SIGKILL at the end of the grace, not before.
        o.put("deleted.after_grace", t.elapsed() >= Duration::from_secs(3));
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forced_delete() {
    node_differential("force_delete", async |side, o: &mut Outcome| {
        let name = start_running(side, plain_pod("forced", &[])).await?;
        let (pod, _) = delete_and_follow(
            side,
            &name,
            json!({"gracePeriodSeconds": 0}),
            Duration::from_secs(10),
        )
        .await?;
        record_pod(o, "deleted", &pod);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_that_cannot_be_pulled() {
    node_differential("image_pull", async |side, o: &mut Outcome| {
        side.unpullable("tcab/missing:1").await?;
        let mut pod = plain_pod("nopull", &[]);
        pod["spec"]["containers"][0]["image"] = json!("tcab/missing:1");
        let (seen, pod) = waiting_reasons(
            side,
            &pod,
            &["ErrImagePull", "ImagePullBackOff"],
            Duration::from_secs(60),
        )
        .await?;
        o.put("waiting", json!(seen));
        record_pod(o, "pod", &pod);
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        record_logs(side, o, "pod", &name).await?;
        o.put("events", json!(event_reasons(side, &name).await?));
        Ok(())
    })
    .await;
}

/// A pod whose env names a missing key of an existing Secret or ConfigMap.
async fn missing_key(side: &NodeSide, o: &mut Outcome, kind: &str) -> Result<()> {
    let (path, object, source) = match kind {
        "Secret" => (
            format!("/api/v1/namespaces/{}/secrets", side.ns),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cfg"},
                   "stringData": {"present": "x"}}),
            "secretKeyRef",
        ),
        _ => (
            format!("/api/v1/namespaces/{}/configmaps", side.ns),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                   "data": {"present": "x"}}),
            "configMapKeyRef",
        ),
    };
    side.create(&path, &object).await?;
    let mut pod = plain_pod("nokey", &[]);
    pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .context("env")?
        .push(json!({"name": "WANTED", "valueFrom": {source: {"name": "cfg", "key": "absent"}}}));
    let name = side.create_pod(&pod).await?;
    let pod = side
        .pod_until(
            &name,
            "the container waits with CreateContainerConfigError",
            Duration::from_secs(60),
            |p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CreateContainerConfigError"
            },
        )
        .await?;
    record_pod(o, "pod", &pod);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_secret_key_in_env() {
    node_differential("missing_secret_key", async |side, o: &mut Outcome| {
        missing_key(side, o, "Secret").await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_configmap_key_in_env() {
    node_differential("missing_configmap_key", async |side, o: &mut Outcome| {
        missing_key(side, o, "ConfigMap").await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_secret_volume() {
    node_differential("missing_secret_volume", async |side, o: &mut Outcome| {
        let mut pod = plain_pod("novolume", &[]);
        pod["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "absent"}}]);
        pod["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "s", "mountPath": "/s"}]);
        let name = side.create_pod(&pod).await?;
        side.until("a FailedMount Event", Duration::from_secs(60), async || {
            Ok(event_reasons(side, &name)
                .await?
                .contains(&"FailedMount".to_string())
                .then_some(()))
        })
        .await?;
        record_pod(o, "pod", &side.pod(&name).await?.context("pod")?);
        o.put("events", json!(event_reasons(side, &name).await?));
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unschedulable() {
    node_differential("unschedulable", async |side, o: &mut Outcome| {
        let mut pod = plain_pod("nowhere", &[]);
        pod["spec"]["nodeSelector"] = json!({"pool": "none"});
        let name = side.create_pod(&pod).await?;
        let pod = side
            .pod_until(&name, "PodScheduled=False", Duration::from_secs(30), |p| {
                tcab_conformance::normalise::condition(&p["status"], "PodScheduled")
                    .is_some_and(|c| c["status"] == "False")
            })
            .await?;
        record_pod(o, "pod", &pod);
        let c = tcab_conformance::normalise::condition(&pod["status"], "PodScheduled");
        o.put(
            "pod.scheduled",
            c.and_then(|c| c["message"].as_str()).unwrap_or(""),
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_node() {
    node_differential("node_lost", async |side, o: &mut Outcome| {
        let name = start_running(side, plain_pod("stranded", &[])).await?;
        side.stop_kubelet(NODE).await?;
        let pod = side
            .pod_until(
                &name,
                "the taint manager marks the pod",
                // The node-monitor grace and the toleration (10 s each) make
                // about 25 s alone; a loaded CI machine once took over 90 s.
                Duration::from_secs(180),
                |p| p["metadata"]["deletionTimestamp"].is_string(),
            )
            .await?;
        record_pod(o, "pod", &pod);
        o.put("node.ready", node_ready(side, NODE).await?);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kubelet_restarted_with_its_container_running() {
    node_differential("kubelet_restart", async |side, o: &mut Outcome| {
        let name = start_running(side, plain_pod("survivor", &[])).await?;
        side.stop_kubelet(NODE).await?;
        side.start_kubelet(NODE).await?;
        // Back: the node Ready, and the kubelet has had the time of a few
        // status updates (2 s each) to change the pod if it would.
        side.until(
            "the node Ready again",
            Duration::from_secs(60),
            async || {
                Ok(node_ready(side, NODE)
                    .await?
                    .starts_with("True/")
                    .then_some(()))
            },
        )
        .await?;
        let _ = side
            .wait_for(Duration::from_secs(8), async || {
                Ok(side.pod(&name).await?.filter(terminal))
            })
            .await?;
        record_pod(o, "after", &side.pod(&name).await?.context("pod")?);
        record_logs(side, o, "after", &name).await?;
        // Whoever runs the container now stops it on a delete.
        let (pod, _) = delete_and_follow(side, &name, json!({}), Duration::from_secs(40)).await?;
        record_pod(o, "deleted", &pod);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reboot() {
    node_differential("reboot", async |side, o: &mut Outcome| {
        let name = start_running(side, plain_pod("rebooted", &[])).await?;
        side.reboot(NODE).await?;
        let pod = side
            .pod_until(&name, "the pod ends", Duration::from_secs(90), terminal)
            .await?;
        record_pod(o, "pod", &pod);
        // containerd's reason for the dead container varies between runs
        // (`Error` or `Unknown`): a line of its own, so the rest of the
        // state (exit code, message) is compared every time.
        let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
        o.put("pod.state.reason", t["reason"].clone());
        o.put(
            "pod.state",
            tcab_conformance::normalise::compact(
                &json!({"exitCode": t["exitCode"], "signal": t["signal"], "message": t["message"]}),
            ),
        );
        record_logs(side, o, "pod", &name).await?;
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ephemeral_storage_limit_exceeded() {
    node_differential(
        "ephemeral_storage_eviction",
        async |side, o: &mut Outcome| {
            // 48 MiB written to the container's writable layer (/tmp of its
            // image) under a 16Mi limit: the kubelet's eviction manager, which
            // looks every 10 s, evicts the pod.
            let mut pod = plain_pod("filler", &[("write-mib", "48")]);
            pod["spec"]["containers"][0]["resources"] =
                json!({"limits": {"ephemeral-storage": "16Mi"}});
            let name = start_running(side, pod).await?;
            let t = Instant::now();
            let pod = side
                .pod_until(
                    &name,
                    "the pod is evicted",
                    Duration::from_secs(90),
                    terminal,
                )
                .await?;
            println!(
                "{:?}: evicted {:.1} s after its log showed the write done",
                side.kind,
                t.elapsed().as_secs_f64()
            );
            record_pod(o, "pod", &pod);
            // The kubelet removes an evicted pod's dead containers at once
            // (`cleanUpContainersInPod` on their ContainerDied event): first
            // the log file, then the container. Its log then answers 200
            // with the kubelet's error as the text; wait for the end of the
            // removal (the runtime no longer knows the container), then read.
            side.until(
                "the evicted container is removed",
                Duration::from_secs(30),
                async || {
                    let a = side
                        .get(&format!("{}/{name}/log?container=main", side.pods()))
                        .await?;
                    let gone = a
                        .body
                        .as_str()
                        .is_some_and(|t| t.starts_with("unable to retrieve container logs"));
                    Ok((a.code != 200 || gone).then_some(()))
                },
            )
            .await?;
            record_logs(side, o, "pod", &name).await?;
            o.put(
                "events.Evicted",
                event_reasons(side, &name)
                    .await?
                    .contains(&"Evicted".to_string()),
            );
            Ok(())
        },
    )
    .await;
}
