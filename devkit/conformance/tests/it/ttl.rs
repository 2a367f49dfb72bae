//! `ttlSecondsAfterFinished`, which the dispatcher sets on every Job: the
//! TTL-after-finished controller (`pkg/controller/ttlafterfinished`
//! `processJob`) deletes a finished Job once its TTL has passed, with
//! Foreground propagation and the Job's uid as a precondition; the garbage
//! collector then deletes its pods, and the Job goes only when none is
//! left (`pkg/controller/garbagecollector`, `store.go`
//! `deletionFinalizersForGarbageCollection`).
//!
//! Recorded: what the Job's and its pod's watches saw from the Job's
//! finish on, in resourceVersion order (both clusters number every write
//! with one counter), and whether the deletion waited for the TTL.

use crate::common::{job, job_path};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::WORKER;
use tcab_conformance::normalise::{condition, dedup};
use tcab_conformance::{Cluster, Outcome, differential};

/// The TTL of the probe's Job, in seconds.
const TTL: i64 = 2;

fn finished(job: &Value) -> bool {
    ["Complete", "Failed"]
        .iter()
        .any(|k| condition(&job["status"], k).is_some_and(|c| c["status"] == "True"))
}

/// One watch event in short: the object, the event type, and for a Job
/// whether it is finished, being deleted and its finalizers; for a pod its
/// phase, whether it is being deleted and its finalizers.
fn step(what: &str, ev: &Value) -> String {
    let o = &ev["object"];
    let md = &o["metadata"];
    let mut s = format!("{what} {}", ev["type"].as_str().unwrap_or(""));
    if what == "job" && finished(o) {
        s.push_str(" finished");
    }
    if what == "pod" {
        s.push_str(&format!(
            " {}",
            o["status"]["phase"].as_str().unwrap_or("-")
        ));
    }
    if md["deletionTimestamp"].is_string() {
        s.push_str(" deleting");
    }
    if let Some(fs) = md["finalizers"].as_array().filter(|fs| !fs.is_empty()) {
        s.push_str(&format!(" {}", Value::Array(fs.clone())));
    }
    s
}

fn rv_of(ev: &Value) -> u64 {
    ev["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn time_of(v: &Value) -> Option<jiff::Timestamp> {
    v.as_str().and_then(|t| t.parse().ok())
}

/// A Job whose pod succeeds at once, with a TTL of two seconds: marked for
/// deletion with `foregroundDeletion` no sooner than the TTL after it
/// finished, its pod deleted, then the Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_job() {
    differential(
        "ttl::finished_job",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let mut manifest = job("j", Some(WORKER), 1);
            manifest["spec"]["ttlSecondsAfterFinished"] = json!(TTL);
            let made = c.create(&c.jobs(), &manifest).await?;
            let rv = made["metadata"]["resourceVersion"].as_str().unwrap_or("");
            let jobs = c
                .watch(&format!(
                    "{}?fieldSelector=metadata.name%3Dj&resourceVersion={rv}",
                    c.jobs()
                ))
                .await?
                .record();
            let pods = c
                .watch(&format!(
                    "{}?labelSelector=batch.kubernetes.io%2Fjob-name%3Dj&resourceVersion={rv}",
                    c.pods()
                ))
                .await?
                .record();
            let gone = jobs
                .saw(c, Duration::from_secs(60), |e| e["type"] == "DELETED")
                .await;
            o.put("job deleted", gone);
            // the pod's DELETED came first: the collector's order
            let pod_gone = pods
                .saw(c, Duration::from_secs(10), |e| e["type"] == "DELETED")
                .await;
            o.put("pod deleted", pod_gone);
            let mut all: Vec<(u64, String, Value)> = jobs
                .events()
                .into_iter()
                .map(|e| (rv_of(&e), "job".to_string(), e))
                .chain(
                    pods.events()
                        .into_iter()
                        .map(|e| (rv_of(&e), "pod".to_string(), e)),
                )
                .collect();
            all.sort_by_key(|(rv, _, _)| *rv);
            let from = all
                .iter()
                .position(|(_, what, e)| what == "job" && finished(&e["object"]))
                .unwrap_or(all.len());
            let steps: Vec<String> = all[from..]
                .iter()
                .map(|(_, what, e)| step(what, e))
                .collect();
            o.put("after it finished", dedup(steps));
            // the deletion waited for the TTL: the Job was marked at least TTL
            // seconds after its finishing condition's transition
            let marked = all.iter().find_map(|(_, what, e)| {
                (what == "job").then(|| time_of(&e["object"]["metadata"]["deletionTimestamp"]))?
            });
            let done_at = all.iter().find_map(|(_, what, e)| {
                let o = &e["object"];
                (what == "job" && finished(o)).then(|| {
                    ["Complete", "Failed"]
                        .iter()
                        .find_map(|k| condition(&o["status"], k))
                        .and_then(|c| time_of(&c["lastTransitionTime"]))
                })?
            });
            o.put(
                "marked after the TTL",
                match (marked, done_at) {
                    (Some(m), Some(d)) => json!(m.duration_since(d).as_secs() >= TTL),
                    _ => json!("unknown"),
                },
            );
            o.put(
                "stored at the end",
                c.object(&job_path(c, "j")).await?.is_some(),
            );
            Ok(())
        },
    )
    .await
}
