//! Manifests and steps the probes share.

use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::Cluster;

/// How long a plain program runs (`kube-sim.tcab.dev/run-seconds`, read by
/// kube-sim's kubelet and the node agent alike).
pub const RUN_SECONDS: &str = "kube-sim.tcab.dev/run-seconds";
/// How many lines a plain program writes to its log as it starts
/// (`kube-sim.tcab.dev/log-lines`: `line 1`, `line 2`, ...).
pub const LOG_LINES: &str = "kube-sim.tcab.dev/log-lines";
/// A node that does not exist.
pub const NOWHERE: &str = "conf-nowhere";

/// A pod spec running the plain program on `node` (`None`: on a node
/// labelled as none is, so it stays unscheduled).
pub fn pod_spec(node: Option<&str>) -> Value {
    let selector = match node {
        Some(n) => json!({"kubernetes.io/hostname": n}),
        None => json!({"conformance.tcab.dev/none": "true"}),
    };
    json!({
        "restartPolicy": "Never",
        "nodeSelector": selector,
        "containers": [{"name": "main", "image": "busybox:1.36"}],
    })
}

/// A pod running for `run_seconds` on `node` (`None`: never scheduled).
pub fn pod(name: &str, node: Option<&str>, run_seconds: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {RUN_SECONDS: run_seconds.to_string()}},
        "spec": pod_spec(node),
    })
}

/// A pod bound to a node that does not exist: no scheduler, kubelet or
/// controller changes it (pod GC would delete it 40 s on), so only the
/// probe's own writes show in a watch.
pub fn bound_nowhere(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": NOWHERE, "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
}

/// A Job of one pod on `node`, no retries, running `run_seconds`.
pub fn job(name: &str, node: Option<&str>, run_seconds: u32) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {RUN_SECONDS: run_seconds.to_string()}},
                "spec": pod_spec(node),
            },
        },
    })
}

/// The path of a pod.
pub fn pod_path(c: &Cluster, name: &str) -> String {
    format!("{}/{name}", c.pods())
}

/// The path of a Job.
pub fn job_path(c: &Cluster, name: &str) -> String {
    format!("{}/{name}", c.jobs())
}

/// Waits until the pod runs (its container `running`).
pub async fn running(c: &Cluster, name: &str) -> Result<Value> {
    let path = pod_path(c, name);
    c.until(
        &format!("pod {name} running"),
        Duration::from_secs(60),
        async || {
            Ok(c.object(&path)
                .await?
                .filter(|p| !p["status"]["containerStatuses"][0]["state"]["running"].is_null()))
        },
    )
    .await
}

/// The Job's pods (by the controller's label), in creation order.
pub async fn job_pods(c: &Cluster, job: &str) -> Result<Vec<Value>> {
    let a = c
        .get(&format!(
            "{}?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}",
            c.pods()
        ))
        .await?;
    let mut items = a.body["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|p| {
        p["metadata"]["creationTimestamp"]
            .as_str()
            .map(str::to_string)
    });
    Ok(items)
}

/// Waits for the Job's pod to run; its name.
pub async fn job_pod_running(c: &Cluster, job: &str) -> Result<String> {
    let name = c
        .until(
            &format!("a pod of job {job}"),
            Duration::from_secs(60),
            async || {
                Ok(job_pods(c, job)
                    .await?
                    .first()
                    .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string()))
            },
        )
        .await?;
    running(c, &name).await?;
    Ok(name)
}

/// Waits until the pod's container is terminated; the pod then.
pub async fn terminated(c: &Cluster, name: &str) -> Result<Value> {
    let path = pod_path(c, name);
    c.until(
        &format!("pod {name} terminated"),
        Duration::from_secs(60),
        async || {
            Ok(c.object(&path)
                .await?
                .filter(|p| !p["status"]["containerStatuses"][0]["state"]["terminated"].is_null()))
        },
    )
    .await
}
