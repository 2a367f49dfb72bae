//! A running Job deleted with each propagation policy: the answer, what a
//! watch on the Job and on its pods sees, and what is left of the pod
//! (`registry/generic/registry/store.go` `Delete` with its orphan and
//! foreground finalizers, `pkg/controller/garbagecollector`, the Job
//! controller removing its tracking finalizer from pods it no longer owns).

use crate::common::{job, job_pod_running, pod_path};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::WORKER;
use tcab_conformance::normalise::{self, dedup};
use tcab_conformance::{Cluster, Outcome, differential};

fn job_event(ev: &Value) -> String {
    let md = &ev["object"]["metadata"];
    let mut s = ev["type"].as_str().unwrap_or("").to_string();
    if md["deletionTimestamp"].is_string() {
        s.push_str(" deleting");
    }
    if let Some(f) = md["finalizers"].as_array().filter(|f| !f.is_empty()) {
        let f: Vec<&str> = f.iter().filter_map(Value::as_str).collect();
        s.push_str(&format!(" finalizers={}", f.join(",")));
    }
    s
}

fn pod_event(ev: &Value) -> String {
    let p = &ev["object"];
    let md = &p["metadata"];
    let mut s = format!(
        "{} {}",
        ev["type"].as_str().unwrap_or(""),
        p["status"]["phase"].as_str().unwrap_or("-")
    );
    if md["deletionTimestamp"].is_string() {
        s.push_str(" deleting");
    }
    let owners = md["ownerReferences"].as_array().map_or(0, Vec::len);
    s.push_str(&format!(" owners={owners}"));
    s
}

/// The pod's states as the watch saw them, each once while it lasts, from
/// the state it was in when the Job was deleted (not shown). The tracking
/// finalizer is left out: the Job controller takes it off while the garbage
/// collector deletes the pod, two controllers racing, so on a real cluster
/// either write may come first; whether it went is its own line.
fn pod_states(events: &[Value]) -> Vec<String> {
    let mut states = vec!["MODIFIED Running owners=1".to_string()];
    states.extend(events.iter().map(pod_event));
    dedup(states).split_off(1)
}

/// Whether the pod's tracking finalizer came off before it went (or while
/// it stays).
fn finalizer_released(events: &[Value]) -> bool {
    events.iter().filter(|e| e["type"] != "DELETED").any(|e| {
        e["object"]["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
    })
}

async fn delete_with(probe: &str, policy: &'static str) {
    differential(probe, async |c: &Cluster, o: &mut Outcome| -> Result<()> {
        c.create(&c.jobs(), &job("j", Some(WORKER), 600)).await?;
        let pod = job_pod_running(c, "j").await?;
        let list = c.get(&c.pods()).await?;
        let rv = list.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
        let jobs = c
            .watch(&format!("{}?fieldSelector=metadata.name%3Dj&resourceVersion={rv}", c.jobs()))
            .await?
            .record();
        let pods = c
            .watch(&format!("{}?labelSelector=batch.kubernetes.io%2Fjob-name%3Dj&resourceVersion={rv}", c.pods()))
            .await?
            .record();
        let a = c
            .delete(
                &format!("{}/j", c.jobs()),
                Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy})),
            )
            .await?;
        o.answer("delete", a.code, &a.body);
        let limit = Duration::from_secs(90);
        let job_gone = jobs.saw(c, limit, |e| e["type"] == "DELETED").await;
        o.put("job deleted", job_gone);
        let settled = match policy {
            "Orphan" => {
                pods.saw(c, Duration::from_secs(30), |e| {
                    e["object"]["metadata"]["ownerReferences"].as_array().is_none_or(Vec::is_empty)
                        && e["object"]["metadata"]["finalizers"].as_array().is_none_or(Vec::is_empty)
                })
                .await
            }
            _ => pods.saw(c, limit, |e| e["type"] == "DELETED").await,
        };
        o.put("pod settled", settled);
        c.sleep(Duration::from_secs(2)).await;
        o.put("job events", dedup(jobs.events().iter().map(job_event).collect::<Vec<_>>()));
        o.put("pod events", pod_states(&pods.events()));
        o.put("pod finalizer released", finalizer_released(&pods.events()));
        o.put(
            "pod after",
            c.object(&pod_path(c, &pod)).await?.map(|p| normalise::pod(&p)).unwrap_or(json!("gone")),
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan() {
    delete_with("propagation::orphan", "Orphan").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background() {
    delete_with("propagation::background", "Background").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground() {
    delete_with("propagation::foreground", "Foreground").await
}
