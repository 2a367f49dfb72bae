//! Nodes: the machines of the simulated cluster and the node lifecycle
//! controller (pkg/controller/nodelifecycle).
//!
//! Each node is a v1 Node object and a machine running its kubelet. A
//! machine that crashes stops everything on it at once: its programs die,
//! its kubelet reports nothing, its pods stay in the API exactly as they
//! were. The node lifecycle controller notices after the node-monitor grace
//! period (50 s, sim time): every node condition becomes `Unknown`
//! ("Kubelet stopped posting node status."), the node gets the
//! `node.kubernetes.io/unreachable` taints (NoSchedule and NoExecute), and
//! the Ready condition of its pods turns False (MarkPodsNotReady, with a
//! `NodeNotReady` Event). When the machine comes back, the node is Ready
//! again and the taints go.
//!
//! A kubelet that runs but reports `Ready=False` (`KubeletNotReady`, e.g. its
//! container runtime's network is down; [`Sim::set_node_ready`]) is another
//! path: the controller leaves the conditions and the pods' `Ready` alone
//! (`MarkPodsNotReady` runs only when the controller itself turns a Ready
//! node's condition, i.e. for a silent kubelet) and taints the node
//! `node.kubernetes.io/not-ready`, NoSchedule and NoExecute
//! (`doNoScheduleTaintingPass`, `processTaintBaseEviction`); the taint
//! manager then evicts pods past their toleration, and the kubelet, which
//! still runs, stops them. Ready again, the taints go.

use crate::admission::{TAINT_NOT_READY, TAINT_UNREACHABLE};
use crate::clock::k8s_time;
use crate::events::{EventType, Source};
use crate::objects;
use crate::podstatus;
use crate::sim::Sim;
use crate::store::{Key, Kind};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// The shape of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// Allocatable CPU (a quantity, e.g. `3920m`).
    pub cpu: String,
    /// Allocatable memory (a quantity, e.g. `15Gi`).
    pub memory: String,
    /// Allocatable pods.
    pub pods: u32,
}

impl NodeSpec {
    /// A node of the default size: 4 CPUs and 16 GiB, of which the kubelet
    /// leaves 3920m, 15 GiB and 110 pods allocatable.
    pub fn standard(name: &str) -> Self {
        NodeSpec {
            name: name.to_string(),
            cpu: "3920m".into(),
            memory: "15Gi".into(),
            pods: 110,
        }
    }

    /// `count` nodes of the default size, `sim-node-1` ... `sim-node-N`.
    pub fn cluster(count: usize) -> Vec<NodeSpec> {
        (1..=count)
            .map(|i| NodeSpec::standard(&format!("sim-node-{i}")))
            .collect()
    }
}

/// The node's InternalIP for its index (0-based).
pub fn host_ip(index: usize) -> String {
    format!("10.0.0.{}", index % 250 + 10)
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": now})
}

fn healthy_conditions(now: &str) -> Value {
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            now
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            now
        ),
    ])
}

/// The Node object a machine's kubelet registers.
pub fn node_object(spec: &NodeSpec, index: usize, now: Timestamp) -> Value {
    let t = k8s_time(now);
    let capacity = json!({"cpu": spec.cpu, "memory": spec.memory, "pods": spec.pods.to_string(),
        "ephemeral-storage": "100Gi"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": {
            "kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": format!("10.244.{}.0/24", index % 250), "podCIDRs": [format!("10.244.{}.0/24", index % 250)]},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": healthy_conditions(&t),
            "addresses": [{"type": "InternalIP", "address": host_ip(index)}, {"type": "Hostname", "address": spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{:032x}", index + 1), "systemUUID": format!("sim-{index}"),
                "bootID": format!("boot-{index}"), "kernelVersion": "6.8.0-sim", "osImage": "kube-sim Linux",
                "containerRuntimeVersion": "containerd://1.7.22", "kubeletVersion": "v1.32.0-kube-sim",
                "kubeProxyVersion": "v1.32.0-kube-sim", "operatingSystem": "linux", "architecture": "amd64"},
        },
    })
}

/// What the lifecycle controller does to one node.
#[derive(Debug, Clone, PartialEq)]
pub enum Health {
    /// Nothing.
    Unchanged,
    /// The kubelet stopped posting: conditions Unknown, unreachable taints,
    /// pods not ready.
    Lost,
    /// The kubelet posts again: Ready, taints removed.
    Back,
    /// The kubelet posts `Ready=False`: the not-ready taints.
    NotReady,
}

/// The Ready condition a running kubelet posts when it is not ready
/// (`nodestatus.ReadyCondition` with a runtime error).
pub const NOT_READY_MESSAGE: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

fn ready_status(node: &Value) -> Option<&str> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
}

fn has_taint(node: &Value, key: &str, effect: &str) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == key && t["effect"] == effect))
}

/// Whether the node carries a taint the lifecycle controller manages
/// (not-ready or unreachable).
fn has_controller_taint(node: &Value) -> bool {
    node["spec"]["taints"].as_array().is_some_and(|ts| {
        ts.iter()
            .any(|t| t["key"] == TAINT_NOT_READY || t["key"] == TAINT_UNREACHABLE)
    })
}

/// Whether a node's Ready condition is True.
pub fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// `monitorNodeHealth` for one node: `down_since` is when its kubelet last
/// posted (None while it runs); `kubelet_ready` is what a running kubelet
/// reports.
pub fn health(
    node: &Value,
    down_since: Option<Timestamp>,
    kubelet_ready: bool,
    now: Timestamp,
    grace: SignedDuration,
) -> Health {
    let is_ready = ready(node);
    match down_since {
        Some(t) if now >= t + grace => {
            let unknown = node["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
            });
            if unknown {
                Health::Unchanged
            } else {
                Health::Lost
            }
        }
        Some(_) => Health::Unchanged,
        None if !kubelet_ready => {
            let tainted = has_taint(node, TAINT_NOT_READY, "NoSchedule")
                && has_taint(node, TAINT_NOT_READY, "NoExecute")
                && !has_taint(node, TAINT_UNREACHABLE, "NoExecute");
            if ready_status(node) == Some("False") && tainted {
                Health::Unchanged
            } else {
                Health::NotReady
            }
        }
        None if !is_ready || has_controller_taint(node) => Health::Back,
        None => Health::Unchanged,
    }
}

/// Applies [`Health::Lost`] to a Node object.
pub fn mark_lost(node: &mut Value, now: Timestamp) {
    let t = k8s_time(now);
    let has_ready = node["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready"));
    if !has_ready {
        node["status"]["conditions"] = healthy_conditions(&t);
    }
    if let Some(cs) = node["status"]["conditions"].as_array_mut() {
        for c in cs {
            c["status"] = json!("Unknown");
            c["reason"] = json!("NodeStatusUnknown");
            c["message"] = json!("Kubelet stopped posting node status.");
            c["lastTransitionTime"] = json!(t);
        }
    }
    let taints = objects::ensure_object(&mut node["spec"])
        .entry("taints")
        .or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    if let Some(ts) = taints.as_array_mut() {
        ts.retain(|x| x["key"] != TAINT_UNREACHABLE && x["key"] != TAINT_NOT_READY);
        ts.push(json!({"key": TAINT_UNREACHABLE, "effect": "NoSchedule", "timeAdded": t}));
        ts.push(json!({"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": t}));
    }
}

/// The Ready condition a kubelet posts (`ready`: `KubeletReady`, else
/// `KubeletNotReady` with [`NOT_READY_MESSAGE`]); the transition time moves
/// only when the status changes.
pub fn post_ready(node: &mut Value, ready: bool, now: Timestamp) {
    let t = k8s_time(now);
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        ("False", "KubeletNotReady", NOT_READY_MESSAGE)
    };
    if node["status"]["conditions"].as_array().is_none() {
        node["status"]["conditions"] = healthy_conditions(&t);
    }
    if let Some(cs) = node["status"]["conditions"].as_array_mut() {
        if !cs.iter().any(|c| c["type"] == "Ready") {
            cs.push(condition("Ready", status, reason, message, &t));
        }
        for c in cs.iter_mut().filter(|c| c["type"] == "Ready") {
            if c["status"] != status {
                c["lastTransitionTime"] = json!(t);
            }
            c["status"] = json!(status);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            c["lastHeartbeatTime"] = json!(t);
        }
    }
}

/// Applies [`Health::NotReady`] to a Node object: the controller's
/// not-ready taints (NoSchedule and NoExecute) in place of any unreachable
/// ones; the kubelet's own condition is left as it posted it.
pub fn mark_not_ready(node: &mut Value, now: Timestamp) {
    let t = k8s_time(now);
    let taints = objects::ensure_object(&mut node["spec"])
        .entry("taints")
        .or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    if let Some(ts) = taints.as_array_mut() {
        ts.retain(|x| x["key"] != TAINT_UNREACHABLE);
        for effect in ["NoSchedule", "NoExecute"] {
            if !ts
                .iter()
                .any(|x| x["key"] == TAINT_NOT_READY && x["effect"] == effect)
            {
                ts.push(json!({"key": TAINT_NOT_READY, "effect": effect, "timeAdded": t}));
            }
        }
    }
}

/// Applies [`Health::Back`] to a Node object.
pub fn mark_back(node: &mut Value, now: Timestamp) {
    node["status"]["conditions"] = healthy_conditions(&k8s_time(now));
    if let Some(ts) = node["spec"]["taints"].as_array_mut() {
        ts.retain(|x| x["key"] != TAINT_UNREACHABLE && x["key"] != TAINT_NOT_READY);
    }
}

/// The node lifecycle controller's loop.
pub async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    let grace = SignedDuration::try_from(sim.timing.node_monitor_grace)
        .unwrap_or(SignedDuration::from_secs(50));
    loop {
        let now = sim.clock.now();
        let machines = sim.machines();
        let mut next: Option<Timestamp> = None;
        for node in sim.store.list(Kind::Node, None, |_| true).1 {
            let name = objects::name(&node).to_string();
            // A Node with no machine behind it never posts.
            let (down, kubelet_ready) = match machines.get(&name) {
                Some(m) => (m.down_since, !m.not_ready),
                None => (Some(parse_created(&node).unwrap_or(now)), true),
            };
            if let Some(t) = down
                && now < t + grace
            {
                let due = t + grace;
                next = Some(next.map_or(due, |n: Timestamp| n.min(due)));
            }
            match health(&node, down, kubelet_ready, now, grace) {
                Health::Unchanged => {}
                Health::Lost => lost(&sim, &name, now),
                Health::Back => back(&sim, &name, now),
                Health::NotReady => not_ready(&sim, &name, now),
            }
        }
        // Wait for a node change, a machine change or the next deadline.
        let timer = async {
            match next {
                Some(t) => sim.clock.sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(timer);
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(ev) if ev.key.kind == Kind::Node => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                },
                _ = sim.machines_changed.notified() => break,
                _ = &mut timer => break,
            }
        }
    }
}

fn parse_created(node: &Value) -> Option<Timestamp> {
    crate::clock::parse_time(&node["metadata"]["creationTimestamp"])
}

fn lost(sim: &Sim, name: &str, now: Timestamp) {
    let key = Key::new(Kind::Node, "", name);
    let Ok(node) = sim.store.update(&key, |n| {
        mark_lost(n, now);
        Ok(true)
    }) else {
        return;
    };
    let src = Source::component("node-controller");
    sim.record(
        Kind::Node,
        &node,
        EventType::Normal,
        "NodeNotReady",
        &format!("Node {name} status is now: NodeNotReady"),
        &src,
    );
    let t = k8s_time(now);
    for p in sim
        .store
        .list(Kind::Pod, None, |p| p["spec"]["nodeName"] == name)
        .1
    {
        let pk = Key::new(
            Kind::Pod,
            p["metadata"]["namespace"].as_str().unwrap_or(""),
            objects::name(&p),
        );
        let mut changed = false;
        let updated = sim.store.update(&pk, |p| {
            changed = podstatus::mark_not_ready(p, &t);
            Ok(changed)
        });
        if changed && let Ok(p) = updated {
            sim.record(
                Kind::Pod,
                &p,
                EventType::Warning,
                "NodeNotReady",
                "Node is not ready",
                &src,
            );
        }
    }
}

/// A running kubelet posts `Ready=False` (again, after a crash that left the
/// conditions Unknown), and the controller taints the node.
fn not_ready(sim: &Sim, name: &str, now: Timestamp) {
    let key = Key::new(Kind::Node, "", name);
    let _ = sim.store.update(&key, |n| {
        let before = n.clone();
        if ready_status(n) != Some("False") {
            post_ready(n, false, now);
        }
        mark_not_ready(n, now);
        Ok(*n != before)
    });
}

fn back(sim: &Sim, name: &str, now: Timestamp) {
    let key = Key::new(Kind::Node, "", name);
    if let Ok(node) = sim.store.update(&key, |n| {
        mark_back(n, now);
        Ok(true)
    }) {
        sim.record(
            Kind::Node,
            &node,
            EventType::Normal,
            "NodeReady",
            &format!("Node {name} status is now: NodeReady"),
            &Source::component("node-controller"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_silent_node_is_lost_after_the_grace_period_and_back_when_it_posts() {
        let spec = NodeSpec::standard("n1");
        let mut n = node_object(&spec, 0, t(0));
        let g = SignedDuration::from_secs(50);
        assert!(ready(&n));
        assert_eq!(health(&n, None, true, t(10), g), Health::Unchanged);
        assert_eq!(health(&n, Some(t(10)), true, t(59), g), Health::Unchanged);
        assert_eq!(health(&n, Some(t(10)), true, t(60), g), Health::Lost);
        mark_lost(&mut n, t(60));
        assert!(!ready(&n));
        assert_eq!(health(&n, Some(t(10)), true, t(70), g), Health::Unchanged);
        let conds = n["status"]["conditions"].as_array().unwrap();
        assert!(conds.iter().all(|c| c["status"] == "Unknown"
            && c["reason"] == "NodeStatusUnknown"
            && c["message"] == "Kubelet stopped posting node status."));
        let taints = n["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 2);
        assert!(
            taints
                .iter()
                .any(|t| t["effect"] == "NoExecute" && t["key"] == TAINT_UNREACHABLE)
        );
        assert_eq!(health(&n, None, true, t(80), g), Health::Back);
        mark_back(&mut n, t(80));
        assert!(ready(&n) && n["spec"]["taints"].as_array().unwrap().is_empty());
    }

    fn taints(n: &Value) -> Vec<String> {
        n["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{}:{}",
                    t["key"].as_str().unwrap(),
                    t["effect"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn a_kubelet_that_posts_not_ready_gets_the_not_ready_taints_until_it_is_ready() {
        let mut n = node_object(&NodeSpec::standard("n1"), 0, t(0));
        let g = SignedDuration::from_secs(50);
        post_ready(&mut n, false, t(10));
        let cond = |n: &Value| {
            n["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .cloned()
                .unwrap()
        };
        let c = cond(&n);
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("KubeletNotReady"))
        );
        assert_eq!(c["lastTransitionTime"], json!(k8s_time(t(10))));
        assert_eq!(health(&n, None, false, t(11), g), Health::NotReady);
        mark_not_ready(&mut n, t(11));
        assert_eq!(
            taints(&n),
            [
                format!("{TAINT_NOT_READY}:NoSchedule"),
                format!("{TAINT_NOT_READY}:NoExecute")
            ]
        );
        // the pressure conditions stay as the kubelet posted them
        assert!(
            n["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["type"] != "Ready")
                .all(|c| c["status"] == "False")
        );
        assert_eq!(health(&n, None, false, t(12), g), Health::Unchanged);
        mark_not_ready(&mut n, t(13));
        assert_eq!(taints(&n).len(), 2, "taints are not added twice");
        // lost while not ready: unreachable replaces not-ready
        mark_lost(&mut n, t(70));
        assert_eq!(
            taints(&n),
            [
                format!("{TAINT_UNREACHABLE}:NoSchedule"),
                format!("{TAINT_UNREACHABLE}:NoExecute")
            ]
        );
        // back, still not ready: not-ready again
        assert_eq!(health(&n, None, false, t(80), g), Health::NotReady);
        mark_not_ready(&mut n, t(80));
        assert_eq!(
            taints(&n),
            [
                format!("{TAINT_NOT_READY}:NoSchedule"),
                format!("{TAINT_NOT_READY}:NoExecute")
            ]
        );
        // ready again: the kubelet posts True, the controller drops the taints
        post_ready(&mut n, true, t(90));
        assert!(ready(&n));
        assert_eq!(health(&n, None, true, t(91), g), Health::Back);
        mark_back(&mut n, t(91));
        assert!(taints(&n).is_empty());
        assert_eq!(health(&n, None, true, t(92), g), Health::Unchanged);
    }
}
