//! A node whose kubelet runs but reports `Ready=False` (its runtime's
//! network down, say), the other way a node fails besides going silent:
//! the node lifecycle controller taints it `node.kubernetes.io/not-ready`
//! NoSchedule and NoExecute (`pkg/controller/nodelifecycle`
//! `doNoScheduleTaintingPass`, `processTaintBaseEviction`) and leaves its
//! pods' `Ready` alone (`MarkPodsNotReady` runs only when the controller
//! itself finds a kubelet silent); the taint manager evicts each pod once
//! its not-ready toleration (added at admission) runs out
//! (`pkg/controller/tainteviction`), and the kubelet, still running, stops
//! it. Ready again, the taints go.

use crate::common::{pod, pod_path, running};
use anyhow::Result;
use serde_json::Value;
use std::time::Duration;
use tcab_conformance::cluster::SICK;
use tcab_conformance::normalise::{self, condition, conditions, dedup};
use tcab_conformance::{Cluster, Outcome, differential};

const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The node's taints as `key:effect`, sorted (the controller's two passes
/// add them in either order).
fn taints(node: &Value) -> Vec<String> {
    let mut t: Vec<String> = node["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    format!(
                        "{}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    t.sort();
    t
}

/// The pod in short, as a watch event shows it: phase, its `Ready`,
/// deleting, `DisruptionTarget`, the container's state.
fn pod_state(ev: &Value) -> String {
    let p = &ev["object"];
    let ready = condition(&p["status"], "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("-");
    let mut s = format!(
        "{} {} Ready={ready}",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready() {
    differential(
        "nodes::not_ready",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let node_path = format!("/api/v1/nodes/{SICK}");
            c.create(&c.pods(), &pod("p", Some(SICK), 600)).await?;
            // watched from when it runs: how each kubelet starts a pod is
            // not this probe's concern
            let started = running(c, "p").await?;
            let rv = started["metadata"]["resourceVersion"]
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
            c.set_node_ready(SICK, false).await?;
            let t0 = c.now();
            let node = c
                .until(
                    "the not-ready NoExecute taint",
                    Duration::from_secs(30),
                    async || {
                        Ok(c.object(&node_path)
                            .await?
                            .filter(|n| taints(n).contains(&format!("{NOT_READY}:NoExecute"))))
                    },
                )
                .await?;
            o.put("node conditions", conditions(&node["status"]["conditions"]));
            o.put("node taints", taints(&node));
            let p = c.object(&pod_path(c, "p")).await?.unwrap_or(Value::Null);
            o.put("pod when tainted", normalise::pod(&p));
            let evicted = w
                .saw(c, Duration::from_secs(60), |e| {
                    condition(&e["object"]["status"], "DisruptionTarget").is_some()
                })
                .await;
            let after = c.since(t0);
            println!(
                "{}: evicted {after:?} after the node turned not ready",
                c.side.name()
            );
            o.put("evicted", evicted);
            o.put(
                "when",
                match after.as_secs() {
                    s if s < 10 => "before the 10 s toleration",
                    s if s <= 30 => "10 to 30 s after",
                    _ => "later than 30 s",
                },
            );
            let gone = w
                .saw(c, Duration::from_secs(60), |e| e["type"] == "DELETED")
                .await;
            o.put("pod deleted", gone);
            o.put(
                "pod states",
                dedup(
                    w.events()
                        .iter()
                        .skip_while(|e| e["type"] == "ADDED")
                        .map(pod_state)
                        .collect::<Vec<_>>(),
                ),
            );
            if let Some(last) = w.events().iter().rev().find(|e| e["type"] != "DELETED") {
                o.put("pod last", normalise::pod(&last["object"]));
            }
            // ready again: the taints go
            c.set_node_ready(SICK, true).await?;
            let node = c
                .until(
                    "the not-ready taints gone",
                    Duration::from_secs(30),
                    async || {
                        Ok(c.object(&node_path)
                            .await?
                            .filter(|n| taints(n).iter().all(|t| !t.starts_with(NOT_READY))))
                    },
                )
                .await?;
            o.put(
                "node conditions when ready",
                conditions(&node["status"]["conditions"]),
            );
            o.put("node taints when ready", taints(&node));
            Ok(())
        },
    )
    .await
}
