//! A node as its kubelet keeps it in the API: the Node object and its
//! status, and the Lease heartbeat.
//!
//! Upstream (v1.36):
//! - registration (pkg/kubelet/kubelet_node_status.go `initialNode`,
//!   `registerWithAPIServer`): the Node is created with its labels
//!   (`kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`
//!   and the beta ones), the attach-detach annotation, the taints to
//!   register with, and its full status; an existing Node is kept;
//! - status (pkg/kubelet/nodestatus/setters.go): addresses, capacity and
//!   allocatable, nodeInfo, `daemonEndpoints.kubeletEndpoint.Port`, and the
//!   conditions in the kubelet's order, MemoryPressure, DiskPressure,
//!   PIDPressure, Ready, with its reasons and messages; every
//!   `nodeStatusUpdateFrequency` (10 s) the kubelet recomputes it and
//!   patches `nodes/status` (a strategic merge patch) only when something
//!   but the heartbeat times changed or `nodeStatusReportFrequency` (5 min)
//!   passed (`tryUpdateNodeStatus`);
//! - heartbeat (component-helpers/apimachinery/lease/controller.go,
//!   pkg/kubelet/util/nodelease.go): a Lease named after the node in
//!   `kube-node-lease`, holder the node, owner-referenced to the Node,
//!   renewed (an update of the last Lease seen) every quarter of its
//!   duration (`nodeLeaseRenewIntervalFraction`, 40 s by default).

use crate::smp;
use jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Namespace of the node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A node's conditions as the kubelet would report them. All healthy by
/// default; the admin API can set pressure (or NotReady) for a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Health {
    /// MemoryPressure True.
    pub memory_pressure: bool,
    /// DiskPressure True.
    pub disk_pressure: bool,
    /// PIDPressure True.
    pub pid_pressure: bool,
    /// Ready False (`KubeletNotReady`).
    pub not_ready: bool,
}

/// What goes into a Node's status besides the conditions.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The node's name.
    pub name: String,
    /// `capacity`.
    pub capacity: BTreeMap<String, String>,
    /// `allocatable`.
    pub allocatable: BTreeMap<String, String>,
    /// The kubelet's HTTPS port.
    pub port: u16,
    /// The version the kubelet reports (the API server's).
    pub kubelet_version: String,
    /// Stable per node: machine ID, system UUID.
    pub machine_id: String,
    /// New per start of the node: boot ID.
    pub boot_id: String,
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The labels the kubelet puts on its Node (plus the spec's own).
pub fn labels(name: &str, extra: &BTreeMap<String, String>) -> Value {
    let mut l = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch(),
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch(),
    });
    for (k, v) in extra {
        l[k] = json!(v);
    }
    l
}

fn condition(kind: &str, status: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" },
        "lastHeartbeatTime": now, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

/// The conditions the kubelet's setters write, in their order.
fn conditions(h: &Health, now: &str) -> Vec<Value> {
    let (mr, mm) = if h.memory_pressure {
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
    } else {
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )
    };
    let (dr, dm) = if h.disk_pressure {
        ("KubeletHasDiskPressure", "kubelet has disk pressure")
    } else {
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    };
    let (pr, pm) = if h.pid_pressure {
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )
    } else {
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        )
    };
    let ready = if h.not_ready {
        condition(
            "Ready",
            false,
            "KubeletNotReady",
            "node is not ready (set through the node agent's admin API)",
            now,
        )
    } else {
        condition(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            now,
        )
    };
    vec![
        condition("MemoryPressure", h.memory_pressure, mr, mm, now),
        condition("DiskPressure", h.disk_pressure, dr, dm, now),
        condition("PIDPressure", h.pid_pressure, pr, pm, now),
        ready,
    ]
}

/// The Node's status at `now` given the previous one (`old`, as the API
/// has it): a condition whose status holds keeps its transition time.
pub fn status(facts: &Facts, health: &Health, old: &Value, now: &str) -> Value {
    let mut conds = conditions(health, now);
    for c in &mut conds {
        if let Some(prev) = old["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["type"] == c["type"])
            && prev["status"] == c["status"]
        {
            c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
        }
    }
    json!({
        "capacity": facts.capacity,
        "allocatable": facts.allocatable,
        "conditions": conds,
        // Only the InternalIP: the API server prefers a Hostname address
        // for pods/log (`--kubelet-preferred-address-types` starts with
        // Hostname), and node names do not resolve here.
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": facts.port}},
        "nodeInfo": {
            "machineID": facts.machine_id,
            "systemUUID": facts.machine_id,
            "bootID": facts.boot_id,
            "kernelVersion": "6.1.0-tcab",
            "osImage": "tcab node agent",
            "containerRuntimeVersion": format!("tcab-node-agent://{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": facts.kubelet_version,
            "operatingSystem": "linux",
            "architecture": arch(),
        },
    })
}

/// The Node to register.
pub fn initial(
    facts: &Facts,
    extra_labels: &BTreeMap<String, String>,
    taints: &[Value],
    health: &Health,
) -> Value {
    let now = k8s_now();
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": facts.name,
            "labels": labels(&facts.name, extra_labels),
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
        "status": status(facts, health, &Value::Null, &now),
    });
    if !taints.is_empty() {
        node["spec"]["taints"] = json!(taints);
    }
    node
}

/// `old` reduced to the fields `shape` has (recursively through maps): the
/// part of the API's status the kubelet writes.
fn project(old: &Value, shape: &Value) -> Value {
    match (old, shape) {
        (Value::Object(o), Value::Object(s)) => Value::Object(
            s.iter()
                .filter_map(|(k, sv)| o.get(k).map(|ov| (k.clone(), project(ov, sv))))
                .collect(),
        ),
        _ => old.clone(),
    }
}

fn without_heartbeats(status: &Value) -> Value {
    let mut v = status.clone();
    if let Some(cs) = v["conditions"].as_array_mut() {
        for c in cs {
            if let Some(m) = c.as_object_mut() {
                m.remove("lastHeartbeatTime");
            }
        }
    }
    v
}

/// Whether the kubelet's part of the status differs in more than its
/// heartbeat times (`nodeStatusHasChanged`).
pub fn changed(old: &Value, new: &Value) -> bool {
    patch(&without_heartbeats(old), &without_heartbeats(new)).is_some()
}

/// The strategic merge patch of `nodes/status` from `old` to `new`
/// (`PatchNodeStatus`); `None` when equal. Only the fields the kubelet
/// writes are compared, so what others write (or the API server adds) is
/// left alone.
pub fn patch(old_status: &Value, new_status: &Value) -> Option<Value> {
    let p = smp::two_way(
        &json!({"status": project(old_status, new_status)}),
        &json!({"status": new_status}),
        smp::node_keys,
    );
    (p.as_object().is_some_and(|m| !m.is_empty())).then_some(p)
}

/// The Lease of a node (created by it, renewed with `renewTime`).
pub fn lease(name: &str, node_uid: &str, duration_seconds: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": name, "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": micro_now(),
        },
    })
}

/// Now, as Kubernetes writes times: RFC 3339, UTC, whole seconds.
pub fn k8s_now() -> String {
    k8s_time(Timestamp::now())
}

/// A time as Kubernetes writes it: RFC 3339, UTC, whole seconds.
pub fn k8s_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as a `MicroTime` (RFC 3339 with microseconds), as leases carry it.
pub fn micro_now() -> String {
    Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            name: "n1".into(),
            capacity: BTreeMap::from([("cpu".into(), "8".into()), ("pods".into(), "110".into())]),
            allocatable: BTreeMap::from([
                ("cpu".into(), "8".into()),
                ("pods".into(), "110".into()),
            ]),
            port: 10250,
            kubelet_version: "v1.36.3".into(),
            machine_id: "m".into(),
            boot_id: "b".into(),
        }
    }

    #[test]
    fn registration_carries_the_kubelets_status() {
        let n = initial(
            &facts(),
            &BTreeMap::from([("pool".into(), "a".into())]),
            &[],
            &Health::default(),
        );
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
        assert_eq!(n["metadata"]["labels"]["pool"], "a");
        let s = &n["status"];
        assert_eq!(s["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(
            s["addresses"][0],
            json!({"type": "InternalIP", "address": "127.0.0.1"})
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert_eq!(s["conditions"][3]["reason"], "KubeletReady");
        assert!(n["spec"].get("taints").is_none());
    }

    #[test]
    fn heartbeats_alone_are_no_change_and_transitions_keep_their_time() {
        let f = facts();
        let h = Health::default();
        let a = status(&f, &h, &Value::Null, "t1");
        let b = status(&f, &h, &a, "t2");
        assert!(!changed(&a, &b));
        assert_eq!(b["conditions"][3]["lastTransitionTime"], "t1");
        assert_eq!(b["conditions"][3]["lastHeartbeatTime"], "t2");
        let pressured = Health {
            memory_pressure: true,
            ..h
        };
        let c = status(&f, &pressured, &b, "t3");
        assert!(changed(&b, &c));
        assert_eq!(c["conditions"][0]["lastTransitionTime"], "t3");
        let p = patch(&b, &c).unwrap();
        assert_eq!(
            p["status"]["conditions"][0]["reason"],
            "KubeletHasInsufficientMemory"
        );
    }

    #[test]
    fn fields_the_kubelet_does_not_write_are_no_change() {
        let f = facts();
        let h = Health::default();
        let mine = status(&f, &h, &Value::Null, "t1");
        let mut api = mine.clone();
        api["nodeInfo"]["kubeProxyVersion"] = json!("");
        api["images"] = json!([{"names": ["x"]}]);
        api["conditions"][0]["lastHeartbeatTime"] = json!("t0");
        assert!(!changed(&api, &status(&f, &h, &api, "t2")));
        let p = patch(&api, &status(&f, &h, &api, "t2")).unwrap();
        assert!(p["status"].get("images").is_none() && p["status"].get("nodeInfo").is_none());
    }

    #[test]
    fn leases_are_owned_by_their_node() {
        let l = lease("n1", "uid-1", 40);
        assert_eq!(l["metadata"]["namespace"], LEASE_NAMESPACE);
        assert_eq!(l["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(l["spec"]["holderIdentity"], "n1");
        assert!(l["spec"]["renewTime"].as_str().unwrap().len() > 20);
    }
}
