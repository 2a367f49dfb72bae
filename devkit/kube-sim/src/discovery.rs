//! Discovery documents: enough for kubectl and kube-rs to find Jobs and Pods.

use serde_json::{Value, json};

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-kube-sim", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn api(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn batch_group() -> Value {
    json!({"name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}})
}

/// `GET /apis`.
pub fn apis() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [batch_group()]})
}

/// `GET /apis/batch`.
pub fn batch() -> Value {
    let mut g = batch_group();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource(
    name: &str,
    kind: &str,
    namespaced: bool,
    verbs: &[&str],
    short: &[&str],
    categories: &[&str],
) -> Value {
    let mut r = json!({"name": name, "singularName": if name.contains('/') { "" } else { kind_singular(kind) },
        "namespaced": namespaced, "kind": kind, "verbs": verbs});
    if !short.is_empty() {
        r["shortNames"] = json!(short);
    }
    if !categories.is_empty() {
        r["categories"] = json!(categories);
    }
    r
}

fn kind_singular(kind: &str) -> &'static str {
    match kind {
        "Pod" => "pod",
        "Job" => "job",
        "Namespace" => "namespace",
        _ => "",
    }
}

/// `GET /api/v1`.
pub fn core_v1() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        resource("namespaces", "Namespace", false, &["get", "list"], &["ns"], &[]),
        resource("pods", "Pod", true, &ALL_VERBS, &["po"], &["all"]),
        resource("pods/eviction", "Eviction", true, &["create"], &[], &[]),
        resource("pods/log", "Pod", true, &["get"], &[], &[]),
        resource("pods/status", "Pod", true, &["get", "patch", "update"], &[], &[]),
    ]})
}

/// `GET /apis/batch/v1`.
pub fn batch_v1() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1", "resources": [
        resource("jobs", "Job", true, &ALL_VERBS, &[], &["all"]),
        resource("jobs/status", "Job", true, &["get", "patch", "update"], &[], &[]),
    ]})
}

/// A Namespace object (every namespace exists in the sim).
pub fn namespace(name: &str) -> Value {
    json!({"kind": "Namespace", "apiVersion": "v1",
        "metadata": {"name": name, "uid": format!("ns-{name}"), "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}
