//! Job status as the Job controller writes it when its pod fails in each
//! way the dispatcher meets (`pkg/controller/job/job_controller.go`): an OOM
//! kill, an eviction through the Eviction API, a passed
//! `activeDeadlineSeconds`, the pod deleted under the running Job, and a
//! lost node (heartbeats stop, a second node stays healthy), which pod GC
//! finishes once the node is tainted out-of-service.
//!
//! Recorded: every status the Job went through (counts and conditions, in
//! order, consecutive repeats once), the order in which conditions first
//! appeared (FailureTarget before Failed), the pod's states as a watch saw
//! them, and its last content (phase, container state, `DisruptionTarget`).

use crate::common::{job, job_path, job_pod_running};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::{LOST, WORKER};
use tcab_conformance::normalise::{self, condition, dedup};
use tcab_conformance::{Cluster, Outcome, Recording, differential};

/// A Job and watches on it and its pods from its creation.
struct Watched {
    jobs: Recording,
    pods: Recording,
    pod: String,
}

async fn start(c: &Cluster, manifest: &Value, wait_running: bool) -> Result<Watched> {
    let made = c.create(&c.jobs(), manifest).await?;
    let name = made["metadata"]["name"].as_str().unwrap_or("").to_string();
    let rv = made["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let jobs = c
        .watch(&format!(
            "{}?fieldSelector=metadata.name%3D{name}&resourceVersion={rv}",
            c.jobs()
        ))
        .await?
        .record();
    let pods = c
        .watch(&format!(
            "{}?labelSelector=batch.kubernetes.io%2Fjob-name%3D{name}&resourceVersion={rv}",
            c.pods()
        ))
        .await?
        .record();
    let pod = if wait_running {
        let pod = job_pod_running(c, &name).await?;
        // the controller has seen it ready
        c.until(
            "the Job counts its pod ready",
            Duration::from_secs(30),
            async || {
                let j = c.object(&job_path(c, &name)).await?;
                Ok(j.filter(|j| j["status"]["ready"] == 1).map(drop))
            },
        )
        .await?;
        pod
    } else {
        String::new()
    };
    Ok(Watched { jobs, pods, pod })
}

fn has_condition(ev: &Value, kind: &str) -> bool {
    condition(&ev["object"]["status"], kind).is_some_and(|c| c["status"] == "True")
}

/// The pod in short, as one watch event shows it. Not its tracking
/// finalizer: when the Job controller takes it off while the kubelet stops
/// the pod (a deadline), either write may come first on a real cluster.
fn pod_state(ev: &Value) -> String {
    let p = &ev["object"];
    let mut s = format!(
        "{} {}",
        ev["type"].as_str().unwrap_or(""),
        p["status"]["phase"].as_str().unwrap_or("-")
    );
    if p["metadata"]["deletionTimestamp"].is_string() {
        s.push_str(" deleting");
    }
    if let Some(c) = condition(&p["status"], "DisruptionTarget") {
        s.push_str(&format!(
            " DisruptionTarget={}",
            c["reason"].as_str().unwrap_or("")
        ));
    }
    s.push_str(&format!(" {}", normalise::container_state(p)));
    s
}

/// Waits for the end (a Failed Job and its pod gone, at most `limit`), then
/// records the sequences.
async fn finish(c: &Cluster, o: &mut Outcome, w: &Watched, limit: Duration) -> Result<()> {
    let failed = w.jobs.saw(c, limit, |e| has_condition(e, "Failed")).await;
    o.put("job failed", failed);
    // the pod settles: gone, or terminal without the finalizer (kept)
    let settled = |e: &Value| {
        e["type"] == "DELETED"
            || (matches!(
                e["object"]["status"]["phase"].as_str(),
                Some("Failed" | "Succeeded")
            ) && e["object"]["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
                && e["object"]["metadata"]["deletionTimestamp"].is_null())
    };
    w.pods.saw(c, Duration::from_secs(30), settled).await;
    let gone = w.pods.events().iter().any(|e| e["type"] == "DELETED");
    o.put("pod deleted", gone);
    // what comes right after
    c.sleep(Duration::from_secs(2)).await;
    record(o, w);
    Ok(())
}

fn record(o: &mut Outcome, w: &Watched) {
    let jobs = w.jobs.events();
    let statuses: Vec<String> = jobs
        .iter()
        .map(|e| normalise::job_status(&e["object"]["status"]))
        .collect();
    o.put("job statuses", dedup(statuses));
    let mut firsts: Vec<String> = Vec::new();
    for e in &jobs {
        for c in e["object"]["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let s = format!(
                "{}={}/{}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            );
            if !firsts.contains(&s) {
                firsts.push(s);
            }
        }
    }
    o.put("job conditions in order", firsts);
    if let Some(last) = jobs.last() {
        let c = &last["object"]["status"]["conditions"];
        let messages: Vec<String> = c
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{}: {}",
                    c["type"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        o.put("job condition messages", messages);
    }
    let pods = w.pods.events();
    // from the first event showing it Running: how a pod starts (the node
    // agent shows ContainerCreating first, as a kubelet does; kube-sim's
    // kubelet starts it in one write) is not what these probes are about
    let from_running = pods
        .iter()
        .position(|e| e["object"]["status"]["phase"] == "Running")
        .unwrap_or(0);
    o.put(
        "pod states",
        dedup(
            pods[from_running..]
                .iter()
                .map(pod_state)
                .collect::<Vec<_>>(),
        ),
    );
    if let Some(last) = pods.iter().rev().find(|e| e["type"] != "DELETED") {
        // without the tracking finalizer (see `pod_state`): whether it was
        // still on depends on which of the kubelet and the Job controller
        // wrote last
        let mut p = normalise::pod(&last["object"]);
        if let Some(m) = p.as_object_mut() {
            m.remove("finalizers");
        }
        o.put("pod last", p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_kill() {
    differential("jobs::oom_kill", async |c: &Cluster, o: &mut Outcome| {
        let w = start(c, &job("j", Some(WORKER), 600), true).await?;
        c.oom_kill(&w.pod).await?;
        finish(c, o, &w, Duration::from_secs(60)).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_api() {
    differential(
        "jobs::eviction_api",
        async |c: &Cluster, o: &mut Outcome| {
            let w = start(c, &job("j", Some(WORKER), 600), true).await?;
            let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": w.pod, "namespace": c.ns}});
            let a = c
                .post(&format!("{}/{}/eviction", c.pods(), w.pod), &eviction)
                .await?;
            o.answer("eviction", a.code, &a.body);
            finish(c, o, &w, Duration::from_secs(90)).await
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline() {
    differential(
        "jobs::active_deadline",
        async |c: &Cluster, o: &mut Outcome| {
            let mut j = job("j", Some(WORKER), 600);
            j["spec"]["activeDeadlineSeconds"] = json!(8);
            let w = start(c, &j, false).await?;
            finish(c, o, &w, Duration::from_secs(90)).await
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_deleted() {
    differential("jobs::pod_deleted", async |c: &Cluster, o: &mut Outcome| {
        let w = start(c, &job("j", Some(WORKER), 600), true).await?;
        let a = c.delete(&format!("{}/{}", c.pods(), w.pod), None).await?;
        o.answer("delete", a.code, &a.body);
        finish(c, o, &w, Duration::from_secs(90)).await
    })
    .await
}

/// The Node's Ready condition and taints in short.
async fn node_state(c: &Cluster, node: &str) -> Result<Value> {
    let n = c
        .object(&format!("/api/v1/nodes/{node}"))
        .await?
        .unwrap_or(Value::Null);
    let ready = condition(&n["status"], "Ready")
        .map(|r| {
            format!(
                "{}/{}",
                r["status"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_default();
    let mut taints: Vec<String> = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            format!(
                "{}:{}",
                t["key"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or("")
            )
        })
        .collect();
    taints.sort();
    Ok(json!({"Ready": ready, "taints": taints}))
}

/// Heartbeats stop: after the node-monitor grace the node is `Unknown` and
/// tainted unreachable, its pod not Ready; after the toleration the taint
/// manager marks the pod `DisruptionTarget` and deletes it, the Job shows
/// `FailureTarget` but not `Failed` (nothing confirms the pod's end); the
/// out-of-service taint then lets pod GC force-delete it and the Job fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_node() {
    differential("jobs::lost_node", async |c: &Cluster, o: &mut Outcome| {
        let w = start(c, &job("j", Some(LOST), 600), true).await?;
        let t0 = c.now();
        c.lose_node(LOST).await?;
        let limit = Duration::from_secs(60);
        let marked = w
            .pods
            .saw(c, limit, |e| condition(&e["object"]["status"], "DisruptionTarget").is_some())
            .await;
        let after = c.since(t0);
        println!("{}: the pod was marked {after:?} after the node was lost", c.side.name());
        o.put("pod marked", marked);
        // node-monitor grace (10 s) + toleration (10 s), each counted from a
        // periodic check
        o.put("marked after grace and toleration", (18..=40).contains(&after.as_secs()));
        o.put("node when marked", node_state(c, LOST).await?);
        let target = w
            .jobs
            .saw(c, Duration::from_secs(30), |e| has_condition(e, "FailureTarget"))
            .await;
        o.put("job FailureTarget", target);
        c.sleep(Duration::from_secs(5)).await;
        o.put(
            "job failed before out-of-service",
            w.jobs.events().iter().any(|e| has_condition(e, "Failed")),
        );
        // the out-of-service taint, as an operator adds it
        let n = c.object(&format!("/api/v1/nodes/{LOST}")).await?.unwrap_or(Value::Null);
        let mut taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        taints.push(json!({"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}));
        let a = c
            .merge_patch(&format!("/api/v1/nodes/{LOST}"), &json!({"spec": {"taints": taints}}))
            .await?;
        o.put("taint out-of-service", a.code);
        finish(c, o, &w, Duration::from_secs(60)).await
    })
    .await
}
