//! The scheduler (pkg/scheduler, default profile, reduced to what the sim
//! models): a pending pod is bound to the node with the most room among
//! those that pass the filters, in upstream's order: `NodeUnschedulable`
//! ("node(s) were unschedulable"), `TaintToleration` (NoSchedule and
//! NoExecute taints: "node(s) had untolerated taint {key: value}"),
//! `NodeAffinity` for `nodeSelector` ("node(s) didn't match Pod's node
//! affinity/selector") and `NodeResourcesFit` ("Too many pods",
//! "Insufficient cpu", "Insufficient memory") against allocatable minus
//! the requests of the node's non-terminal pods.
//!
//! A pod that fits nowhere gets `PodScheduled=False`, reason
//! `Unschedulable`, with upstream's message shape ("0/2 nodes are available:
//! 2 Insufficient memory. preemption: 0/2 nodes are available: 2 No
//! preemption victims found for incoming pod..") and a `FailedScheduling`
//! Event; it is retried when a pod or node changes, and at least every 5
//! minutes (sim time), as the unschedulable queue is flushed.

use crate::clock::k8s_time;
use crate::events::{EventType, Source};
use crate::objects;
use crate::podstatus;
use crate::quantity;
use crate::sim::Sim;
use crate::store::{EventType as Change, Key, Kind};
use crate::taints::{Taint, tolerates};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Resources one pod asks for (or one node offers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Pods.
    pub pods: i64,
}

impl Resources {
    fn add(&mut self, o: &Resources) {
        self.cpu += o.cpu;
        self.memory += o.memory;
        self.pods += o.pods;
    }
    fn sub(&mut self, o: &Resources) {
        self.cpu -= o.cpu;
        self.memory -= o.memory;
        self.pods -= o.pods;
    }
}

/// The requests of a pod: the sum over its containers (a container with a
/// limit and no request requests its limit, as the API server defaults it).
pub fn pod_requests(pod: &Value) -> Resources {
    let mut r = Resources {
        pods: 1,
        ..Resources::default()
    };
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let res = &c["resources"];
        let get = |k: &str| {
            res["requests"][k]
                .as_str()
                .or_else(|| res["limits"][k].as_str())
        };
        r.cpu += get("cpu").and_then(quantity::cpu_millis).unwrap_or(0);
        r.memory += get("memory").and_then(quantity::bytes).unwrap_or(0);
    }
    r
}

/// What the scheduler reads of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

impl NodeView {
    /// Reads a Node object.
    pub fn of(n: &Value) -> Self {
        let alloc = &n["status"]["allocatable"];
        NodeView {
            name: objects::name(n).to_string(),
            allocatable: Resources {
                cpu: alloc["cpu"]
                    .as_str()
                    .and_then(quantity::cpu_millis)
                    .unwrap_or(0),
                memory: alloc["memory"]
                    .as_str()
                    .and_then(quantity::bytes)
                    .unwrap_or(0),
                pods: alloc["pods"]
                    .as_str()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
            },
            taints: Taint::of_node(n),
            unschedulable: n["spec"]["unschedulable"] == true,
            labels: n["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Why a node cannot take a pod, and whether preemption could help.
fn filter(
    pod: &Value,
    req: &Resources,
    node: &NodeView,
    used: &Resources,
) -> Option<(Vec<String>, bool)> {
    if node.unschedulable {
        return Some((vec!["node(s) were unschedulable".into()], false));
    }
    let tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for t in node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
    {
        if !tolerations.iter().any(|tol| tolerates(tol, t)) {
            return Some((
                vec![format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    t.key, t.value
                )],
                false,
            ));
        }
    }
    if let Some(sel) = pod["spec"]["nodeSelector"].as_object()
        && !sel
            .iter()
            .all(|(k, v)| node.labels.get(k).map(String::as_str) == v.as_str())
    {
        return Some((
            vec!["node(s) didn't match Pod's node affinity/selector".into()],
            false,
        ));
    }
    let mut reasons = Vec::new();
    if used.pods + 1 > node.allocatable.pods {
        reasons.push("Too many pods".to_string());
    }
    if req.cpu > 0 && used.cpu + req.cpu > node.allocatable.cpu {
        reasons.push("Insufficient cpu".to_string());
    }
    if req.memory > 0 && used.memory + req.memory > node.allocatable.memory {
        reasons.push("Insufficient memory".to_string());
    }
    (!reasons.is_empty()).then_some((reasons, true))
}

fn histogram(counts: BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

/// Picks a node for `pod`, or says why none fits (the `Unschedulable`
/// message). `used` holds the requests already on each node.
pub fn place(
    pod: &Value,
    nodes: &[NodeView],
    used: &BTreeMap<String, Resources>,
) -> Result<String, String> {
    if nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    let req = pod_requests(pod);
    let zero = Resources::default();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(i64, &str)> = None;
    for n in nodes {
        let u = used.get(&n.name).unwrap_or(&zero);
        match filter(pod, &req, n, u) {
            Some((rs, resources)) => {
                for r in rs {
                    *reasons.entry(r).or_default() += 1;
                }
                let p = if resources {
                    "No preemption victims found for incoming pod"
                } else {
                    "Preemption is not helpful for scheduling"
                };
                *preemption.entry(p.to_string()).or_default() += 1;
            }
            None => {
                // LeastAllocated: the mean free fraction (per mille) of CPU and memory.
                let free = |alloc: i64, used: i64| {
                    if alloc <= 0 {
                        0
                    } else {
                        (alloc - used).max(0) * 1000 / alloc
                    }
                };
                let score = (free(n.allocatable.cpu, u.cpu + req.cpu)
                    + free(n.allocatable.memory, u.memory + req.memory))
                    / 2;
                if best.is_none_or(|(s, name)| score > s || (score == s && n.name.as_str() < name))
                {
                    best = Some((score, &n.name));
                }
            }
        }
    }
    if let Some((_, name)) = best {
        return Ok(name.to_string());
    }
    let total = nodes.len();
    Err(format!(
        "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {}..",
        histogram(reasons),
        histogram(preemption)
    ))
}

/// The scheduler's view of what is placed where, kept from pod events plus
/// its own bindings (upstream's assumed pods).
#[derive(Debug, Default)]
struct Cache {
    placed: HashMap<Key, (String, Resources)>,
    used: BTreeMap<String, Resources>,
}

impl Cache {
    fn forget(&mut self, key: &Key) {
        if let Some((node, r)) = self.placed.remove(key)
            && let Some(u) = self.used.get_mut(&node)
        {
            u.sub(&r);
        }
    }
    fn assume(&mut self, key: &Key, node: &str, r: Resources) {
        self.forget(key);
        self.used.entry(node.to_string()).or_default().add(&r);
        self.placed.insert(key.clone(), (node.to_string(), r));
    }
    fn observe(&mut self, key: &Key, pod: Option<&Value>) {
        match pod {
            Some(p) if !podstatus::terminal(p) => {
                match p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    Some(node) => self.assume(key, node, pod_requests(p)),
                    None => self.forget(key),
                }
            }
            _ => self.forget(key),
        }
    }
}

fn pod_key(p: &Value) -> Key {
    Key::new(
        Kind::Pod,
        p["metadata"]["namespace"].as_str().unwrap_or(""),
        objects::name(p),
    )
}

fn wants_scheduling(p: &Value) -> bool {
    p["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
        && !objects::deleting(p)
        && !podstatus::terminal(p)
        && p["spec"]["schedulerName"]
            .as_str()
            .is_none_or(|s| s == "default-scheduler")
}

/// The scheduler's loop.
pub async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    let mut cache = Cache::default();
    // Pods to try, with when; pods that fit nowhere wait for a change.
    let mut active: BTreeSet<(Timestamp, Key)> = BTreeSet::new();
    let mut unschedulable: BTreeSet<Key> = BTreeSet::new();
    let flush = SignedDuration::try_from(sim.timing.unschedulable_flush)
        .unwrap_or(SignedDuration::from_secs(300));
    let mut next_flush = sim.clock.now() + flush;
    resync(&sim, &mut cache, &mut active);
    loop {
        let now = sim.clock.now();
        if now >= next_flush {
            next_flush = now + flush;
            for k in std::mem::take(&mut unschedulable) {
                active.insert((now, k));
            }
        }
        while let Some((t, _)) = active.first() {
            if *t > now {
                break;
            }
            let Some((_, key)) = active.pop_first() else {
                break;
            };
            if !attempt(&sim, &key, &mut cache) {
                unschedulable.insert(key);
            }
        }
        let wake = active
            .first()
            .map(|(t, _)| *t)
            .unwrap_or(next_flush)
            .min(next_flush);
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    let moved = match ev.key.kind {
                        Kind::Pod => {
                            let gone = ev.etype == Change::Deleted;
                            cache.observe(&ev.key, (!gone).then_some(&*ev.object));
                            if !gone && ev.etype == Change::Added && wants_scheduling(&ev.object) {
                                active.insert((sim.clock.now() + delay(&sim), ev.key.clone()));
                            }
                            // A pod leaving frees room on its node.
                            gone || podstatus::terminal(&ev.object)
                        }
                        Kind::Node => true,
                        _ => false,
                    };
                    if moved && !unschedulable.is_empty() {
                        let now = sim.clock.now();
                        for k in std::mem::take(&mut unschedulable) {
                            active.insert((now, k));
                        }
                    }
                }
                Err(RecvError::Lagged(_)) => resync(&sim, &mut cache, &mut active),
                Err(RecvError::Closed) => return,
            },
            _ = sim.clock.sleep_until(wake) => {}
        }
    }
}

fn delay(sim: &Sim) -> SignedDuration {
    SignedDuration::try_from(sim.timing.schedule_delay).unwrap_or(SignedDuration::ZERO)
}

fn resync(sim: &Sim, cache: &mut Cache, active: &mut BTreeSet<(Timestamp, Key)>) {
    *cache = Cache::default();
    let now = sim.clock.now();
    for p in sim.store.list(Kind::Pod, None, |_| true).1 {
        let key = pod_key(&p);
        cache.observe(&key, Some(&p));
        if wants_scheduling(&p) {
            active.insert((now, key));
        }
    }
}

/// Tries to place one pod; `false` when it fits nowhere.
fn attempt(sim: &Sim, key: &Key, cache: &mut Cache) -> bool {
    let Some(pod) = sim.store.get(key) else {
        return true;
    };
    if !wants_scheduling(&pod) {
        return true;
    }
    let nodes: Vec<NodeView> = sim
        .store
        .list(Kind::Node, None, |_| true)
        .1
        .iter()
        .map(|n| NodeView::of(n))
        .collect();
    let now = k8s_time(sim.clock.now());
    match place(&pod, &nodes, &cache.used) {
        Ok(node) => {
            let uid = objects::uid(&pod).to_string();
            let bound = sim.store.update(key, |p| {
                if objects::uid(p) != uid || !wants_scheduling(p) {
                    return Ok(false);
                }
                p["spec"]["nodeName"] = json!(node);
                set_scheduled(p, true, None, &now);
                Ok(true)
            });
            if let Ok(p) = bound
                && p["spec"]["nodeName"] == node.as_str()
            {
                cache.assume(key, &node, pod_requests(&p));
                sim.record(
                    Kind::Pod,
                    &p,
                    EventType::Normal,
                    "Scheduled",
                    &format!("Successfully assigned {}/{} to {node}", key.ns, key.name),
                    &Source::component("default-scheduler"),
                );
            }
            true
        }
        Err(message) => {
            let uid = objects::uid(&pod).to_string();
            let _ = sim.store.update(key, |p| {
                if objects::uid(p) != uid || !wants_scheduling(p) {
                    return Ok(false);
                }
                Ok(set_scheduled(p, false, Some(&message), &now))
            });
            sim.record(
                Kind::Pod,
                &pod,
                EventType::Warning,
                "FailedScheduling",
                &message,
                &Source::component("default-scheduler"),
            );
            false
        }
    }
}

/// Sets the PodScheduled condition; returns whether it changed.
fn set_scheduled(p: &mut Value, ok: bool, message: Option<&str>, now: &str) -> bool {
    let mut c = json!({"type": "PodScheduled", "status": if ok { "True" } else { "False" },
        "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(m) = message {
        c["reason"] = json!("Unschedulable");
        c["message"] = json!(m);
    }
    let status = objects::ensure_object(&mut p["status"]);
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(arr) = list.as_array_mut() else {
        return false;
    };
    match arr.iter_mut().find(|x| x["type"] == "PodScheduled") {
        Some(x) if x["status"] == c["status"] && x["message"] == c["message"] => false,
        Some(x) => {
            if x["status"] == c["status"] {
                c["lastTransitionTime"] = x["lastTransitionTime"].clone();
            }
            *x = c;
            true
        }
        None => {
            arr.push(c);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, mem: &str) -> NodeView {
        NodeView::of(&json!({"metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"}}}))
    }
    fn pod(cpu: &str, mem: &str) -> Value {
        json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}})
    }

    #[test]
    fn picks_the_emptiest_node_that_fits() {
        let nodes = [node("a", "4", "16Gi"), node("b", "4", "16Gi")];
        let mut used = BTreeMap::new();
        assert_eq!(place(&pod("1", "1Gi"), &nodes, &used), Ok("a".into()));
        used.insert("a".to_string(), pod_requests(&pod("1", "1Gi")));
        assert_eq!(place(&pod("1", "1Gi"), &nodes, &used), Ok("b".into()));
    }

    #[test]
    fn too_big_for_every_node_says_so_as_upstream() {
        let nodes = [node("a", "4", "16Gi"), node("b", "4", "16Gi")];
        assert_eq!(
            place(&pod("250m", "64Gi"), &nodes, &BTreeMap::new()),
            Err("0/2 nodes are available: 2 Insufficient memory. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod..".into())
        );
        assert_eq!(
            place(&pod("8", "64Gi"), &nodes, &BTreeMap::new()).unwrap_err(),
            "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
        );
    }

    #[test]
    fn taints_and_limits() {
        let mut tainted = node("a", "4", "16Gi");
        tainted.taints.push(Taint {
            key: "node.kubernetes.io/unreachable".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
        let nodes = [tainted, node("b", "1", "16Gi")];
        assert_eq!(
            place(&pod("2", "1Gi"), &nodes, &BTreeMap::new()).unwrap_err(),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.."
        );
        let limits_only = json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}});
        assert_eq!(
            pod_requests(&limits_only),
            Resources {
                cpu: 500,
                memory: 1 << 30,
                pods: 1
            }
        );
        assert_eq!(
            place(&pod("1", "1Gi"), &[], &BTreeMap::new()).unwrap_err(),
            "no nodes available to schedule pods"
        );
    }
}
