//! The pod garbage collector (pkg/controller/podgc/gc_controller.go). Every
//! 20 s (sim time) it force-deletes:
//!
//! - `gcTerminating`: terminating pods on a node that is not Ready and has
//!   the `node.kubernetes.io/out-of-service` taint;
//! - `gcOrphaned`: pods bound to a node that no longer exists, once the
//!   node has been missing for the 40 s quarantine (with `DisruptionTarget`
//!   `DeletionByPodGC`, "PodGC: node no longer exists");
//! - `gcUnscheduledTerminating`: terminating pods never bound to a node.
//!
//! Force-deleting is `markFailedAndDeletePod`: a pod not yet terminal is
//! first patched to phase `Failed` (with the condition, for orphans), then
//! deleted with grace 0. The terminated-pod threshold (12 500) is not
//! modelled.

use crate::clock::k8s_time;
use crate::objects;
use crate::podstatus;
use crate::sim::Sim;
use crate::store::{Key, Kind};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Why pod GC deletes a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Terminating on an out-of-service node.
    TerminatingOutOfService,
    /// Bound to a node that is gone.
    Orphaned,
    /// Terminating and never scheduled.
    TerminatingUnscheduled,
}

/// What pod GC reads of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Where it lives.
    pub key: Key,
    /// `spec.nodeName` ("" when unscheduled).
    pub node: String,
    /// Has a deletionTimestamp.
    pub deleting: bool,
}

/// What pod GC reads of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeView {
    /// Its Ready condition is True.
    pub ready: bool,
    /// It has the out-of-service taint.
    pub out_of_service: bool,
}

/// One pass of the collector. `quarantine` holds, per missing node, when
/// its quarantine ends; it is updated in place.
pub fn pass(
    pods: &[PodView],
    nodes: &BTreeMap<String, NodeView>,
    quarantine: &mut BTreeMap<String, Timestamp>,
    now: Timestamp,
    quarantine_time: SignedDuration,
) -> Vec<(Key, Reason)> {
    let mut out = Vec::new();
    for p in pods.iter().filter(|p| p.deleting) {
        if let Some(n) = nodes.get(&p.node)
            && !n.ready
            && n.out_of_service
        {
            out.push((p.key.clone(), Reason::TerminatingOutOfService));
        }
    }
    for p in pods {
        if !p.node.is_empty() && !nodes.contains_key(&p.node) {
            quarantine
                .entry(p.node.clone())
                .or_insert(now + quarantine_time);
        }
    }
    let due: Vec<String> = quarantine
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(n, _)| n.clone())
        .collect();
    let mut deleted_nodes = BTreeSet::new();
    for n in due {
        quarantine.remove(&n);
        if !nodes.contains_key(&n) {
            deleted_nodes.insert(n);
        }
    }
    for p in pods {
        if deleted_nodes.contains(&p.node) {
            out.push((p.key.clone(), Reason::Orphaned));
        }
    }
    for p in pods.iter().filter(|p| p.deleting && p.node.is_empty()) {
        out.push((p.key.clone(), Reason::TerminatingUnscheduled));
    }
    out
}

fn node_view(n: &Value) -> NodeView {
    let ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let out_of_service = n["spec"]["taints"].as_array().is_some_and(|ts| {
        ts.iter()
            .any(|t| t["key"] == crate::taints::TAINT_OUT_OF_SERVICE)
    });
    NodeView {
        ready,
        out_of_service,
    }
}

/// The collector's loop: one pass every `Timing::pod_gc_period`.
pub async fn run(sim: Arc<Sim>) {
    let mut quarantine = BTreeMap::new();
    loop {
        sim.clock.sleep(sim.timing.pod_gc_period).await;
        let nodes: BTreeMap<String, NodeView> = sim
            .store
            .list(Kind::Node, None, |_| true)
            .1
            .iter()
            .map(|n| (objects::name(n).to_string(), node_view(n)))
            .collect();
        let pods: Vec<PodView> = sim
            .store
            .list(Kind::Pod, None, |_| true)
            .1
            .iter()
            .map(|p| PodView {
                key: Key::new(
                    Kind::Pod,
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    objects::name(p),
                ),
                node: p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                deleting: objects::deleting(p),
            })
            .collect();
        let quarantine_time =
            SignedDuration::try_from(sim.timing.pod_gc_quarantine).unwrap_or(SignedDuration::ZERO);
        for (key, reason) in pass(
            &pods,
            &nodes,
            &mut quarantine,
            sim.clock.now(),
            quarantine_time,
        ) {
            mark_failed_and_delete(&sim, &key, reason);
        }
    }
}

/// `markFailedAndDeletePod(WithCondition)`.
fn mark_failed_and_delete(sim: &Sim, key: &Key, reason: Reason) {
    let now = k8s_time(sim.clock.now());
    let _ = sim.store.update(key, |p| {
        if podstatus::terminal(p) {
            return Ok(false);
        }
        p["status"]["phase"] = json!("Failed");
        if reason == Reason::Orphaned {
            podstatus::set_condition(
                p,
                "DisruptionTarget",
                "DeletionByPodGC",
                "PodGC: node no longer exists",
                &now,
            );
        }
        Ok(true)
    });
    let _ = sim.delete_pod(&key.ns, &key.name, Some(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn pod(name: &str, node: &str, deleting: bool) -> PodView {
        PodView {
            key: Key::new(Kind::Pod, "ns", name),
            node: node.into(),
            deleting,
        }
    }

    #[test]
    fn terminating_pods_go_only_from_a_not_ready_out_of_service_node() {
        let pods = [
            pod("a", "n1", true),
            pod("b", "n1", false),
            pod("c", "n2", true),
        ];
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "n1".to_string(),
            NodeView {
                ready: false,
                out_of_service: false,
            },
        );
        nodes.insert(
            "n2".to_string(),
            NodeView {
                ready: true,
                out_of_service: true,
            },
        );
        let mut q = BTreeMap::new();
        let q40 = SignedDuration::from_secs(40);
        assert!(pass(&pods, &nodes, &mut q, t(0), q40).is_empty());
        nodes.insert(
            "n1".to_string(),
            NodeView {
                ready: false,
                out_of_service: true,
            },
        );
        assert_eq!(
            pass(&pods, &nodes, &mut q, t(0), q40),
            vec![(
                Key::new(Kind::Pod, "ns", "a"),
                Reason::TerminatingOutOfService
            )]
        );
    }

    #[test]
    fn orphans_wait_out_the_quarantine() {
        let pods = [
            pod("a", "gone", false),
            pod("u", "", true),
            pod("v", "", false),
        ];
        let nodes = BTreeMap::new();
        let mut q = BTreeMap::new();
        let q40 = SignedDuration::from_secs(40);
        let unscheduled = (
            Key::new(Kind::Pod, "ns", "u"),
            Reason::TerminatingUnscheduled,
        );
        assert_eq!(
            pass(&pods, &nodes, &mut q, t(0), q40),
            vec![unscheduled.clone()]
        );
        assert_eq!(
            pass(&pods, &nodes, &mut q, t(20), q40),
            vec![unscheduled.clone()]
        );
        assert_eq!(
            pass(&pods, &nodes, &mut q, t(40), q40),
            vec![
                (Key::new(Kind::Pod, "ns", "a"), Reason::Orphaned),
                unscheduled
            ]
        );
        assert!(q.is_empty());
    }
}
