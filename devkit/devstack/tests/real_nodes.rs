//! The dispatcher's own pod on real nodes: the chart installed on the real
//! control plane with `--node kubelet`'s cluster (`StackOptions::nodes`):
//! the upstream kubelet on containerd and runc for `node-1` and `node-2`,
//! running the dispatcher image built here (`tcab-dispatcher:dev`, the
//! Dockerfile's runtime stage: user 65532, no shell) under the chart's
//! read-only root filesystem and non-root settings, its probes run by the
//! kubelet, the API server reached through the `kubernetes` Service, the
//! backend through the node network's gateway, and what the stack reads
//! from the pod (metrics, logs) through the API server.
//!
//! Each test starts a cluster of its own (about 10 s) and prints one SKIP
//! line and passes where real nodes cannot run
//! (`tcab_real_cluster::node::ready_or_skip`; `TCAB_REAL_NODES_REQUIRED=1`
//! makes that a failure).

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::chart::{
    admin_client, condition, container, dispatcher_pods, enqueue_runs, install_ready, name_of,
    values,
};
use common::{ClusterKind, RunBy, TestStack, states};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_devstack::chart;
use tcab_devstack::{Container, NodeKind, StackOptions, wait_for};

/// A stack on real kubelets, the dispatcher left to the chart; `None`
/// (after one SKIP line) where real nodes cannot run.
async fn kubelet_stack(tune: impl FnOnce(&mut StackOptions)) -> Option<TestStack> {
    tcab_real_cluster::node::ready_or_skip()?;
    Some(
        TestStack::start(ClusterKind::Real, |o| {
            o.start_containers = false;
            o.nodes = NodeKind::Kubelet;
            tune(o);
        })
        .await,
    )
}

/// The containerd ID of the pod's container `name`.
fn container_id(pod: &Value, name: &str) -> String {
    let id = container(pod, name)["containerID"].as_str().unwrap_or("");
    id.strip_prefix("containerd://")
        .unwrap_or_else(|| panic!("{name}: not a containerd container: {id:?}"))
        .to_owned()
}

/// The real user IDs of a process (`Uid:` of `/proc/<pid>/status`).
fn uids(pid: i32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|u| u.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Enqueues `n` publishes of `ms` each.
async fn enqueue_publishes(t: &TestStack, n: usize, ms: u64) {
    for i in 0..n {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": ms}}))
            .await
            .expect("enqueue publish");
    }
}

/// (a) Install and drain: the chart's pod runs the image built here on a
/// real node (containerd's container IDs, a pod address of the node
/// network), as the chart says (image `tcab-dispatcher:dev` never pulled,
/// a read-only root filesystem, every process of user 65532), Ready by the
/// kubelet's probes; 12 runs and 3 publishes drain, the drivers reaching
/// the backend through the gateway, one Job each; the pod's metrics read
/// through the API server's pod proxy; no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_kubelets_the_charts_pod_drains_runs_and_publishes() {
    let Some(mut t) = kubelet_stack(|_| {}).await else {
        return;
    };
    let client = admin_client(&t).await;
    let (_release, pod) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    assert!(
        tcab_devstack::real::NODES.contains(&node),
        "on a real node: {node}"
    );
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.202."), "a pod address: {ip}");
    for c in pod["spec"]["containers"].as_array().expect("containers") {
        assert_eq!(c["image"], "tcab-dispatcher:dev", "{c}");
        assert_eq!(c["imagePullPolicy"], "Never", "{c}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{c}");
        assert_eq!(c["securityContext"]["runAsNonRoot"], true, "{c}");
    }
    assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532);
    for name in ["admitter", "lease-keeper", "reaper"] {
        let id = container_id(&pod, name);
        let pids = tcab_real_cluster::node::container_pids(&id);
        assert!(!pids.is_empty(), "{name}: no process in its cgroup");
        for pid in pids {
            assert_eq!(uids(pid), [65532; 4], "{name}: process {pid}");
        }
    }

    enqueue_runs(
        &t.stack.backend,
        "case",
        12,
        json!({"duration_ms": 300, "log_lines": 1}),
    )
    .await;
    enqueue_publishes(&t, 3, 300).await;
    let (runs, pubs) = t.drained(Duration::from_secs(120), RunBy::Chart).await;
    assert!(
        runs.iter().chain(&pubs).all(|j| j["state"] == "succeeded"),
        "runs: {}; publishes: {}",
        states(&runs),
        states(&pubs)
    );
    assert_eq!(runs.len() + pubs.len(), 15, "no retries were needed");
    let jobs = t.jobs_by_id().await;
    assert!(
        jobs.values().all(|names| names.len() == 1),
        "one Job per backend job: {jobs:?}"
    );

    let scrape = t
        .stack
        .scrape(Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(format!("the admitter's metrics via the pod proxy: {e:#}")));
    let (status, body) = t
        .stack
        .endpoint(Container::LeaseKeeper, "/readyz")
        .await
        .expect("the lease-keeper's /readyz via the pod proxy");
    assert_eq!(status, 200, "{body}");
    drop(scrape);
    let now = dispatcher_pods(&t).await;
    let now = now
        .iter()
        .find(|p| p["metadata"]["name"] == pod["metadata"]["name"])
        .expect("the same pod");
    assert!(condition(now, "Ready"), "{}", now["status"]);
    for name in ["admitter", "lease-keeper", "reaper"] {
        assert_eq!(container(now, name)["restartCount"], 0, "{name}");
    }
}

/// (b) `kubectl logs -c <container>`: each container's log is served by
/// its kubelet through the API server (`pods/log?container=`), and each
/// holds its own binary's lines; without a container the API server asks
/// for one (the chart's `kubectl.kubernetes.io/default-container` is
/// kubectl's, not the API server's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_kubelets_each_containers_log_is_read_through_the_api_server() {
    let Some(t) = kubelet_stack(|_| {}).await else {
        return;
    };
    let ns = t.ns();
    let client = admin_client(&t).await;
    let (_release, pod) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let pod_name = name_of(&pod);
    let base = format!("/api/v1/namespaces/{ns}/pods/{pod_name}/log");
    for (name, binary, others) in [
        (
            "admitter",
            "tcab-admitter",
            ["tcab-lease-keeper", "tcab-reaper"],
        ),
        (
            "lease-keeper",
            "tcab-lease-keeper",
            ["tcab-admitter", "tcab-reaper"],
        ),
        (
            "reaper",
            "tcab-reaper",
            ["tcab-admitter", "tcab-lease-keeper"],
        ),
    ] {
        let log = t
            .stack
            .cluster
            .get_text(&format!("{base}?container={name}"))
            .await
            .unwrap_or_else(|e| t.fail(format!("the {name}'s log: {e:#}")));
        assert!(log.contains(binary), "{name}: {log}");
        for other in others {
            assert!(!log.contains(other), "{name}'s log holds {other}'s: {log}");
        }
    }
    let (status, answer) = t.stack.cluster.get_answer(&base).await.expect("GET");
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("a container name must be specified"),
        "{answer}"
    );
}

/// (c) An upgrade with runs in flight (the run lane's cap 3 to 5) under a
/// 20 s lease and runs of 15 s: the pod rolls (Recreate) on a real node,
/// every run succeeds with one Job and no retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_kubelets_an_upgrade_with_runs_in_flight_loses_nothing() {
    let Some(mut t) = kubelet_stack(|o| o.lease_seconds = 20).await else {
        return;
    };
    let client = admin_client(&t).await;
    let before = values(&t, json!({"dispatcher": {"maxInflight": 3}}));
    let mut after = before.clone();
    after["dispatcher"]["maxInflight"] = json!(5);
    let (release, old_pod) = install_ready(&t, &client, &before).await;
    let old_name = name_of(&old_pod);
    enqueue_runs(
        &t.stack.backend,
        "up",
        8,
        json!({"duration_ms": 15_000, "log_lines": 1}),
    )
    .await;
    let live = |jobs: &[Value]| jobs.iter().filter(|j| !common::job_finished(j)).count();
    wait_for("three runs in flight", Duration::from_secs(60), || async {
        let jobs = t.stack.cluster.jobs(None).await?;
        Ok((live(&jobs) == 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    chart::upgrade(&client, &release, &after)
        .await
        .unwrap_or_else(|e| t.fail(format!("upgrading: {e:#}")));
    let new_pod = wait_for("the rolled pod Ready", Duration::from_secs(90), || async {
        let pods = dispatcher_pods(&t).await;
        Ok(pods
            .into_iter()
            .find(|p| p["metadata"]["name"] != old_name.as_str() && condition(p, "Ready")))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let env = new_pod["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e["name"] == "TCAB_DISPATCHER_MAX_INFLIGHT" && e["value"] == "5"),
        "the new pod has the new cap: {env:?}"
    );
    let in_flight = live(&t.stack.cluster.jobs(None).await.expect("jobs"));
    assert!(in_flight > 0, "runs were in flight across the rollout");
    let (runs, _) = t.drained(Duration::from_secs(120), RunBy::Chart).await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
    assert_eq!(runs.len(), 8, "no retries were needed");
    let jobs = t.jobs_by_id().await;
    assert_eq!(jobs.len(), 8, "{jobs:?}");
    assert!(
        jobs.values().all(|names| names.len() == 1),
        "one Job per backend job: {jobs:?}"
    );
}

/// (d) A wedged container (every process of the lease-keeper stopped with
/// SIGSTOP, found through its cgroup on the real node) is found by the
/// chart's liveness probe, tightened through values, run by the kubelet:
/// it is killed (SIGTERM ignored while stopped, SIGKILL after the pod's
/// 3 s grace: exit 137) and restarted, the pod Ready again, the other
/// containers untouched, and runs drain after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_kubelets_a_wedged_container_is_restarted_by_its_liveness_probe() {
    let Some(mut t) = kubelet_stack(|_| {}).await else {
        return;
    };
    let client = admin_client(&t).await;
    let probe = json!({"initialDelaySeconds": 2, "periodSeconds": 1, "timeoutSeconds": 1,
        "failureThreshold": 3});
    let tight = json!({"terminationGracePeriodSeconds": 3, "metrics": {"livenessProbe": probe}});
    let (_release, pod) = install_ready(&t, &client, &values(&t, tight)).await;
    let pod_name = name_of(&pod);
    let pids = tcab_real_cluster::node::container_pids(&container_id(&pod, "lease-keeper"));
    assert!(!pids.is_empty(), "the lease-keeper's processes");
    for pid in &pids {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .expect("SIGSTOP");
    }
    let restarted = wait_for(
        "the lease-keeper restarted and the pod Ready again",
        Duration::from_secs(60),
        || async {
            let pods = dispatcher_pods(&t).await;
            Ok(pods.into_iter().find(|p| {
                p["metadata"]["name"] == pod_name.as_str()
                    && container(p, "lease-keeper")["restartCount"] == 1
                    && condition(p, "Ready")
            }))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let lk = container(&restarted, "lease-keeper");
    let last = &lk["lastState"]["terminated"];
    assert_eq!(
        (last["exitCode"].as_i64(), last["reason"].as_str()),
        (Some(137), Some("Error")),
        "SIGKILLed after the grace: {lk}"
    );
    for other in ["admitter", "reaper"] {
        assert_eq!(container(&restarted, other)["restartCount"], 0, "{other}");
    }
    let events = t
        .stack
        .cluster
        .get(&format!(
            "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name%3D{pod_name}",
            t.ns()
        ))
        .await
        .expect("the pod's Events");
    let unhealthy = events["items"].as_array().into_iter().flatten().any(|e| {
        e["reason"] == "Unhealthy"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Liveness probe failed"))
    });
    assert!(unhealthy, "the kubelet's Unhealthy Event: {events}");

    enqueue_runs(
        &t.stack.backend,
        "after",
        6,
        json!({"duration_ms": 300, "log_lines": 1}),
    )
    .await;
    let (runs, _) = t.drained(Duration::from_secs(90), RunBy::Chart).await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
}

/// (e) The node lost under the dispatcher itself: the kubelet of the node
/// running the dispatcher's pod stops (its containers go on, its Lease is
/// no longer renewed); the node is tainted unreachable after the
/// launcher's node-monitor grace, the pod evicted after its toleration,
/// and its ReplicaSet's new pod runs on the other node; runs enqueued then
/// drain there. Unlike the node agent's lost node, whose programs stop,
/// the old pod's containers still run on the node without a kubelet (as on
/// a partitioned node): two dispatchers run at once from then on, and the
/// drain holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_kubelets_the_dispatchers_node_lost_its_pod_moves_and_runs_drain() {
    let Some(mut t) = kubelet_stack(|_| {}).await else {
        return;
    };
    let client = admin_client(&t).await;
    let (_release, pod) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let pod_name = name_of(&pod);
    let lost = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let old_admitter = container_id(&pod, "admitter");
    {
        let real = t.stack.real.as_ref().expect("a real cluster");
        let kubelets = real.kubelets().expect("real kubelets");
        let mut kubelets = kubelets.lock().await;
        kubelets
            .stop_kubelet(&lost)
            .await
            .unwrap_or_else(|e| t.fail(format!("stopping the kubelet of {lost}: {e}")));
    }
    let moved = wait_for(
        "a new dispatcher pod Ready on the other node",
        // The node-monitor grace and the toleration (10 s each), the
        // eviction, a new pod scheduled, started and probed Ready: about
        // 30 s alone, over 90 s once on a loaded CI machine.
        Duration::from_secs(180),
        || async {
            let pods = dispatcher_pods(&t).await;
            Ok(pods.into_iter().find(|p| {
                p["metadata"]["name"] != pod_name.as_str()
                    && p["spec"]["nodeName"] != lost.as_str()
                    && condition(p, "Ready")
            }))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let old = dispatcher_pods(&t)
        .await
        .into_iter()
        .find(|p| p["metadata"]["name"] == pod_name.as_str());
    if let Some(old) = &old {
        assert!(
            !old["metadata"]["deletionTimestamp"].is_null(),
            "the lost node's pod is being deleted: {}",
            old["metadata"]
        );
    }
    assert!(
        !tcab_real_cluster::node::container_pids(&old_admitter).is_empty(),
        "the old pod's admitter still runs on the node without a kubelet"
    );
    enqueue_runs(
        &t.stack.backend,
        "after",
        6,
        json!({"duration_ms": 300, "log_lines": 1}),
    )
    .await;
    let (runs, _) = t.drained(Duration::from_secs(90), RunBy::Chart).await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
    let kept = container(&moved, "admitter");
    assert!(kept["state"]["running"].is_object(), "{kept}");
}

/// `--node kubelet` without `--cluster real`, or without `--install chart`,
/// stops at once with exit status 2 and a line saying what it needs (no
/// cluster is started, so this runs everywhere).
#[test]
fn node_kubelet_needs_the_real_cluster_and_the_chart() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (args, needs) in [
        (
            &["--node", "kubelet", "--install", "chart"][..],
            "--node kubelet needs --cluster real",
        ),
        (
            &["--cluster", "real", "--node", "kubelet"][..],
            "--node kubelet needs --install chart",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcab-devstack"))
            .args(args)
            .arg("--dir")
            .arg(dir.path().join("stack"))
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needs), "{args:?}: {stderr}");
        assert!(!dir.path().join("stack").exists(), "nothing was started");
    }
}
