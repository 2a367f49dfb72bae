//! Pod GC of a deleted node's pods (`pkg/controller/podgc/gc_controller.go`
//! `gcOrphaned`): every 20 s it notes pods bound to a node that does not
//! exist, quarantines the node name for 40 s, and on the first pass after
//! that marks each pod `Failed` with `DisruptionTarget` `DeletionByPodGC`
//! and force-deletes it. Both are constants upstream, so the pod goes 40 to
//! 80 s after its node (cluster time on each side).

use crate::common::{pod, pod_path, running};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::GONE;
use tcab_conformance::normalise;
use tcab_conformance::{Cluster, Outcome, differential};

fn pod_state(ev: &Value) -> String {
    let p = &ev["object"];
    let dt = normalise::condition(&p["status"], "DisruptionTarget")
        .map(|c| format!(" DisruptionTarget={}", c["reason"].as_str().unwrap_or("")))
        .unwrap_or_default();
    let deleting = if p["metadata"]["deletionTimestamp"].is_string() {
        " deleting"
    } else {
        ""
    };
    format!(
        "{} {}{deleting}{dt}",
        ev["type"].as_str().unwrap_or(""),
        p["status"]["phase"].as_str().unwrap_or("-")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_node() {
    differential(
        "podgc::deleted_node",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let made = c.create(&c.pods(), &pod("p", Some(GONE), 600)).await?;
            running(c, "p").await?;
            let rv = made["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let w = c
                .watch(&format!(
                    "{}?fieldSelector=metadata.name%3Dp&resourceVersion={rv}",
                    c.pods()
                ))
                .await?
                .record();
            c.lose_node(GONE).await?;
            let a = c.delete(&format!("/api/v1/nodes/{GONE}"), None).await?;
            o.put("node delete", a.code);
            let t0 = c.now();
            let gone = w
                .saw(c, Duration::from_secs(100), |e| e["type"] == "DELETED")
                .await;
            let after = c.since(t0);
            println!("{}: the pod went {after:?} after its node", c.side.name());
            o.put("pod deleted", gone);
            let bucket = match after.as_secs() {
                s if s < 40 => "before the 40 s quarantine",
                s if s <= 80 => "40 to 80 s after the node",
                _ => "later than 80 s",
            };
            o.put("when", bucket);
            let evs = w.events();
            o.put(
                "pod states",
                normalise::dedup(
                    evs.iter()
                        .skip_while(|e| e["type"] == "ADDED")
                        .map(pod_state)
                        .collect::<Vec<_>>(),
                ),
            );
            if let Some(last) = evs.iter().rev().find(|e| e["type"] != "DELETED") {
                o.put("pod last", normalise::pod(&last["object"]));
            }
            o.put(
                "after",
                c.object(&pod_path(c, "p"))
                    .await?
                    .map(|p| normalise::pod(&p))
                    .unwrap_or(json!("gone")),
            );
            Ok(())
        },
    )
    .await
}
