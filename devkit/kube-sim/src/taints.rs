//! Taints, tolerations and the taint manager
//! (pkg/controller/tainteviction/taint_eviction.go).
//!
//! For every pod bound to a node with `NoExecute` taints: when a taint is
//! not tolerated the pod is deleted at once; when every taint is tolerated
//! for a bounded time, it is deleted once the shortest `tolerationSeconds`
//! has passed since the controller noticed the taint; tolerated forever, it
//! stays. Deleting means: an Event `TaintManagerEviction` ("Marking for
//! deletion Pod ns/name"), the `DisruptionTarget` condition
//! (`DeletionByTaintManager`), then a delete with the pod's default grace
//! period. Removing the taints before that cancels the deletion ("Cancelling
//! deletion of Pod ns/name").

use crate::clock::k8s_time;
use crate::events::{EventType, Source};
use crate::objects;
use crate::podstatus;
use crate::sim::Sim;
use crate::store::{EventType as Change, Key, Kind};
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Taint added to a node that is out of service (a node shut down for good).
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// One taint of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value ("" when none).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// Reads `spec.taints` of a node.
    pub fn of_node(node: &Value) -> Vec<Taint> {
        node["spec"]["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| Taint {
                        key: t["key"].as_str().unwrap_or("").to_string(),
                        value: t["value"].as_str().unwrap_or("").to_string(),
                        effect: t["effect"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Whether a toleration (JSON) tolerates a taint (`Toleration.ToleratesTaint`).
pub fn tolerates(t: &Value, taint: &Taint) -> bool {
    let effect = t["effect"].as_str().unwrap_or("");
    let key = t["key"].as_str().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t["value"].as_str().unwrap_or("") == taint.value,
        _ => false,
    }
}

/// The tolerations of a pod.
pub fn tolerations(pod: &Value) -> Vec<Value> {
    pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// What the taint manager does about one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing scheduled (no NoExecute taint, or tolerated forever).
    Cancel,
    /// Delete at this time; `created` is when the eviction was first planned.
    At {
        /// When the planned eviction was created.
        created: Timestamp,
        /// When it fires.
        fire: Timestamp,
    },
}

/// `processPodOnNode`: the pod's tolerations against the node's NoExecute
/// taints, given the eviction already planned (if any).
pub fn decide(
    tolerations: &[Value],
    taints: &[Taint],
    planned: Option<(Timestamp, Timestamp)>,
    now: Timestamp,
) -> Decision {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Decision::Cancel;
    }
    let mut used = Vec::new();
    for taint in &no_execute {
        match tolerations.iter().find(|t| tolerates(t, taint)) {
            Some(t) => used.push(t),
            None => {
                return Decision::At {
                    created: now,
                    fire: now,
                };
            }
        }
    }
    // Shortest tolerationSeconds; none at all = forever.
    let mut min: Option<i64> = None;
    for t in used {
        if let Some(s) = t["tolerationSeconds"].as_i64() {
            min = Some(min.map_or(s.max(0), |m: i64| m.min(s.max(0))));
        }
    }
    let Some(secs) = min else {
        return Decision::Cancel;
    };
    let wait = SignedDuration::from_secs(secs);
    let trigger = now + wait;
    if let Some((created, fire)) = planned
        && created + wait < trigger
    {
        return Decision::At { created, fire };
    }
    Decision::At {
        created: planned.map_or(now, |(c, _)| c),
        fire: trigger,
    }
}

#[derive(Debug, Clone, Copy)]
struct Planned {
    created: Timestamp,
    fire: Timestamp,
    fired: bool,
}

/// The taint manager's loop.
pub async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    let mut planned: HashMap<Key, Planned> = HashMap::new();
    let mut tainted: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
    resync(&sim, &mut tainted, &mut planned);
    loop {
        fire_due(&sim, &mut planned);
        let next = planned.values().filter(|p| !p.fired).map(|p| p.fire).min();
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => match ev.key.kind {
                    Kind::Node => node_changed(&sim, &ev.key.name, &mut tainted, &mut planned),
                    Kind::Pod if ev.etype == Change::Deleted => cancel(&sim, &ev.key, &ev.object, &mut planned),
                    Kind::Pod => pod_changed(&sim, &ev.key, &ev.object, &tainted, &mut planned),
                    _ => {}
                },
                Err(RecvError::Lagged(_)) => resync(&sim, &mut tainted, &mut planned),
                Err(RecvError::Closed) => return,
            },
            _ = async {
                match next {
                    Some(t) => sim.clock.sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

fn pods_on(sim: &Sim, node: &str) -> Vec<Arc<Value>> {
    sim.store
        .list(Kind::Pod, None, |p| p["spec"]["nodeName"] == node)
        .1
}

fn pod_key(p: &Value) -> Key {
    Key::new(
        Kind::Pod,
        p["metadata"]["namespace"].as_str().unwrap_or(""),
        objects::name(p),
    )
}

fn resync(
    sim: &Sim,
    tainted: &mut BTreeMap<String, Vec<Taint>>,
    planned: &mut HashMap<Key, Planned>,
) {
    tainted.clear();
    for n in sim.store.list(Kind::Node, None, |_| true).1 {
        node_changed(sim, objects::name(&n), tainted, planned);
    }
}

fn node_changed(
    sim: &Sim,
    node: &str,
    tainted: &mut BTreeMap<String, Vec<Taint>>,
    planned: &mut HashMap<Key, Planned>,
) {
    let taints: Vec<Taint> = sim
        .store
        .get(&Key::new(Kind::Node, "", node))
        .map(|n| Taint::of_node(&n))
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.effect == "NoExecute")
        .collect();
    if tainted.get(node) == Some(&taints) {
        return;
    }
    if taints.is_empty() {
        tainted.remove(node);
    } else {
        tainted.insert(node.to_string(), taints.clone());
    }
    let now = sim.clock.now();
    for p in pods_on(sim, node) {
        apply(sim, &pod_key(&p), &p, &taints, planned, now);
    }
}

fn pod_changed(
    sim: &Sim,
    key: &Key,
    pod: &Value,
    tainted: &BTreeMap<String, Vec<Taint>>,
    planned: &mut HashMap<Key, Planned>,
) {
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
    match tainted.get(node) {
        Some(taints) => apply(sim, key, pod, taints, planned, sim.clock.now()),
        None if planned.contains_key(key) => cancel(sim, key, pod, planned),
        None => {}
    }
}

fn apply(
    sim: &Sim,
    key: &Key,
    pod: &Value,
    taints: &[Taint],
    planned: &mut HashMap<Key, Planned>,
    now: Timestamp,
) {
    if taints.is_empty() {
        return cancel(sim, key, pod, planned);
    }
    if planned.get(key).is_some_and(|p| p.fired) {
        return; // already handed to the deleting worker
    }
    let current = planned.get(key).map(|p| (p.created, p.fire));
    match decide(&tolerations(pod), taints, current, now) {
        Decision::Cancel => cancel(sim, key, pod, planned),
        Decision::At { created, fire } => {
            planned.insert(
                key.clone(),
                Planned {
                    created,
                    fire,
                    fired: false,
                },
            );
        }
    }
}

fn cancel(sim: &Sim, key: &Key, pod: &Value, planned: &mut HashMap<Key, Planned>) {
    if planned.remove(key).is_some() {
        sim.record(
            Kind::Pod,
            pod,
            EventType::Normal,
            "TaintManagerEviction",
            &format!("Cancelling deletion of Pod {}/{}", key.ns, key.name),
            &Source::component("taint-eviction-controller"),
        );
    }
}

fn fire_due(sim: &Sim, planned: &mut HashMap<Key, Planned>) {
    let now = sim.clock.now();
    for (key, p) in planned.iter_mut() {
        if p.fired || p.fire > now {
            continue;
        }
        p.fired = true;
        let Some(pod) = sim.store.get(key) else {
            continue;
        };
        sim.record(
            Kind::Pod,
            &pod,
            EventType::Normal,
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {}/{}", key.ns, key.name),
            &Source::component("taint-eviction-controller"),
        );
        let at = k8s_time(now);
        let _ = sim.store.update(key, |p| {
            Ok(podstatus::set_condition(
                p,
                "DisruptionTarget",
                "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint",
                &at,
            ))
        });
        let _ = sim.delete_pod(&key.ns, &key.name, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn unreachable() -> Vec<Taint> {
        vec![
            Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
            },
            Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoExecute".into(),
            },
        ]
    }
    fn defaults() -> Vec<Value> {
        vec![
            json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
            json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
        ]
    }

    #[test]
    fn default_tolerations_hold_for_300_seconds_from_when_the_taint_was_seen() {
        assert_eq!(
            decide(&defaults(), &unreachable(), None, t(0)),
            Decision::At {
                created: t(0),
                fire: t(300)
            }
        );
        // seen again later: the first plan stands
        assert_eq!(
            decide(&defaults(), &unreachable(), Some((t(0), t(300))), t(100)),
            Decision::At {
                created: t(0),
                fire: t(300)
            }
        );
    }

    #[test]
    fn untolerated_is_now_and_forever_is_never() {
        assert_eq!(
            decide(&[], &unreachable(), None, t(5)),
            Decision::At {
                created: t(5),
                fire: t(5)
            }
        );
        let forever = vec![json!({"operator": "Exists"})];
        assert_eq!(
            decide(&forever, &unreachable(), None, t(5)),
            Decision::Cancel
        );
        assert_eq!(decide(&defaults(), &[], None, t(5)), Decision::Cancel);
        let oos = vec![Taint {
            key: TAINT_OUT_OF_SERVICE.into(),
            value: "nodeshutdown".into(),
            effect: "NoExecute".into(),
        }];
        assert_eq!(
            decide(&defaults(), &oos, Some((t(0), t(300))), t(7)),
            Decision::At {
                created: t(7),
                fire: t(7)
            }
        );
    }

    #[test]
    fn toleration_matching() {
        let taint = &unreachable()[1];
        assert!(tolerates(
            &json!({"key": taint.key, "operator": "Exists"}),
            taint
        ));
        assert!(!tolerates(
            &json!({"key": taint.key, "operator": "Exists", "effect": "NoSchedule"}),
            taint
        ));
        assert!(tolerates(&json!({"key": taint.key, "value": ""}), taint));
        assert!(!tolerates(
            &json!({"key": "other", "operator": "Exists"}),
            taint
        ));
    }
}
