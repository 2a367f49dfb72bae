//! v1 Events, recorded the way client-go's event recorder does: one Event
//! per (object, type, reason, message, source); a repeat bumps `count` and
//! `lastTimestamp` of the same Event (the correlator's aggregation). Events
//! of a cluster-scoped object (a Node) go to the `default` namespace.

use crate::clock::k8s_time;
use crate::objects;
use crate::store::{Key, Kind, Store};
use jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Who reports an event: the component and, for the kubelet, its node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Source {
    /// `job-controller`, `default-scheduler`, `kubelet`, ...
    pub component: &'static str,
    /// The node, for the kubelet.
    pub host: Option<String>,
}

impl Source {
    /// A control-plane component.
    pub fn component(component: &'static str) -> Self {
        Source {
            component,
            host: None,
        }
    }
    /// The kubelet of a node.
    pub fn kubelet(node: &str) -> Self {
        Source {
            component: "kubelet",
            host: Some(node.to_string()),
        }
    }
}

/// The `involvedObject` reference of an object.
pub fn reference(kind: Kind, obj: &Value) -> Value {
    let mut r = json!({
        "kind": kind.kind(), "apiVersion": kind.api_version(), "name": objects::name(obj),
        "uid": objects::uid(obj),
        "resourceVersion": obj["metadata"]["resourceVersion"].clone(),
    });
    if kind.namespaced() {
        r["namespace"] = obj["metadata"]["namespace"].clone();
    }
    r
}

/// A new Event about `obj` (pure).
pub fn new_event(
    kind: Kind,
    obj: &Value,
    etype: EventType,
    reason: &str,
    message: &str,
    source: &Source,
    now: Timestamp,
) -> Value {
    let ns = if kind.namespaced() {
        obj["metadata"]["namespace"].as_str().unwrap_or("default")
    } else {
        "default"
    };
    let mut src = json!({"component": source.component});
    if let Some(h) = &source.host {
        src["host"] = json!(h);
    }
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{}.{:x}", objects::name(obj), now.as_nanosecond()), "namespace": ns},
        "involvedObject": reference(kind, obj),
        "reason": reason, "message": message, "source": src, "type": etype.as_str(),
        "firstTimestamp": k8s_time(now), "lastTimestamp": k8s_time(now), "count": 1,
        "eventTime": null, "reportingComponent": source.component,
        "reportingInstance": source.host.clone().unwrap_or_default(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Aggregate {
    kind: Kind,
    ns: String,
    name: String,
    uid: String,
    etype: EventType,
    reason: String,
    message: String,
    source: Source,
}

/// Records Events into the store, aggregating repeats.
#[derive(Debug, Default)]
pub struct Recorder {
    seen: Mutex<HashMap<Aggregate, Key>>,
    seq: AtomicU64,
}

impl Recorder {
    /// Records (or bumps) an Event about `obj`. Failures to store are
    /// dropped, as a real recorder drops them.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        store: &Store,
        kind: Kind,
        obj: &Value,
        etype: EventType,
        reason: &str,
        message: &str,
        source: &Source,
        now: Timestamp,
    ) {
        let agg = Aggregate {
            kind,
            ns: obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            name: objects::name(obj).to_string(),
            uid: objects::uid(obj).to_string(),
            etype,
            reason: reason.to_string(),
            message: message.to_string(),
            source: source.clone(),
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = seen.get(&agg)
            && store
                .update(key, |e| {
                    let n = e["count"].as_i64().unwrap_or(1);
                    e["count"] = json!(n + 1);
                    e["lastTimestamp"] = json!(k8s_time(now));
                    Ok(true)
                })
                .is_ok()
        {
            return;
        }
        let mut ev = new_event(kind, obj, etype, reason, message, source, now);
        // Names are the object's name and a unique hex suffix, as client-go's.
        let n = self.seq.fetch_add(1, Ordering::Relaxed) as i128;
        ev["metadata"]["name"] = json!(format!(
            "{}.{:x}",
            objects::name(obj),
            now.as_nanosecond() + n
        ));
        let ns = ev["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        if let Ok(created) = store.create(Kind::Event, &ns, ev, now) {
            seen.insert(agg, Key::new(Kind::Event, &ns, objects::name(&created)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_aggregated() {
        let store = Store::new(100);
        let rec = Recorder::default();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}});
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let src = Source::component("default-scheduler");
        for _ in 0..3 {
            rec.record(
                &store,
                Kind::Pod,
                &pod,
                EventType::Warning,
                "FailedScheduling",
                "0/2 nodes are available",
                &src,
                now,
            );
        }
        rec.record(
            &store,
            Kind::Pod,
            &pod,
            EventType::Normal,
            "Scheduled",
            "ok",
            &src,
            now,
        );
        let (_, evs) = store.list(Kind::Event, Some("ns"), |_| true);
        assert_eq!(evs.len(), 2);
        let failed = evs
            .iter()
            .find(|e| e["reason"] == "FailedScheduling")
            .unwrap();
        assert_eq!(failed["count"], 3);
        assert_eq!(failed["involvedObject"]["kind"], "Pod");
        assert_eq!(failed["involvedObject"]["uid"], "u1");
        assert_eq!(failed["type"], "Warning");
        assert_eq!(failed["source"]["component"], "default-scheduler");
        let node = json!({"metadata": {"name": "n1", "uid": "n"}});
        rec.record(
            &store,
            Kind::Node,
            &node,
            EventType::Normal,
            "NodeNotReady",
            "x",
            &src,
            now,
        );
        assert_eq!(
            store.list(Kind::Event, Some("default"), |_| true).1.len(),
            1
        );
    }
}
