//! Discovery documents, built from the kind table: enough for kubectl and
//! kube-rs to find every kind the sim serves.

use crate::store::Kind;
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

fn events_group() -> Value {
    json!({"name": "events.k8s.io", "versions": [{"groupVersion": "events.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "events.k8s.io/v1", "version": "v1"}})
}

/// `GET /apis`.
pub fn apis() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [batch_group(), events_group()]})
}

/// `GET /apis/events.k8s.io`.
pub fn events() -> Value {
    let mut g = events_group();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

/// `GET /apis/events.k8s.io/v1`: the events.k8s.io view of the Events.
pub fn events_v1() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "events.k8s.io/v1",
        "resources": resources_of("events.k8s.io")})
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

fn resource(name: &str, singular: &str, kind: &str, namespaced: bool, verbs: &[&str]) -> Value {
    json!({"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs})
}

/// The APIResourceList entries of every kind served in `group`, with their
/// subresources.
fn resources_of(group: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for k in Kind::ALL.into_iter().filter(|k| k.group() == group) {
        let i = k.info();
        let mut r = resource(i.resource, i.singular, i.kind, i.namespaced, &ALL_VERBS);
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        if !i.categories.is_empty() {
            r["categories"] = json!(i.categories);
        }
        out.push(r);
        for (sub, verbs) in i.subresources {
            let sub_kind = if *sub == "eviction" {
                "Eviction"
            } else {
                i.kind
            };
            let mut r = resource(
                &format!("{}/{sub}", i.resource),
                "",
                sub_kind,
                i.namespaced,
                verbs,
            );
            if *sub == "eviction" {
                r["group"] = json!("policy");
                r["version"] = json!("v1");
            }
            out.push(r);
        }
    }
    out
}

/// `GET /api/v1`.
pub fn core_v1() -> Value {
    let mut resources = vec![{
        let mut r = resource(
            "namespaces",
            "namespace",
            "Namespace",
            false,
            &["get", "list"],
        );
        r["shortNames"] = json!(["ns"]);
        r
    }];
    resources.extend(resources_of(""));
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources})
}

/// `GET /apis/batch/v1`.
pub fn batch_v1() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1",
        "resources": resources_of("batch")})
}

/// A Namespace object (every namespace exists in the sim).
pub fn namespace(name: &str) -> Value {
    json!({"kind": "Namespace", "apiVersion": "v1",
        "metadata": {"name": name, "uid": format!("ns-{name}"), "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}
