//! Two-way strategic merge patches over JSON, as client-go's
//! `strategicpatch.CreateTwoWayMergePatch` computes them
//! (staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go): maps
//! are diffed key by key (a removed key becomes `null`); a list with a merge
//! key is diffed element by element (changed elements carry their key, a
//! removed one is `{"$patch": "delete", key}`) and gets a
//! `$setElementOrder/<field>` directive; any other list is replaced whole.
//!
//! The kubelet's status manager (pkg/util/pod/pod.go `PatchPodStatus`) and
//! its node status updater (`nodeutil.PatchNodeStatus`) send exactly such a
//! patch of the old against the new object to the `status` subresource.

use serde_json::{Map, Value};

/// The merge key of the list at a dotted path (`status.conditions`), if it
/// is a merging list.
pub type MergeKeys = fn(&str) -> Option<&'static str>;

/// The merge keys of the Pod fields the kubelet writes (k8s.io/api
/// core/v1 `PodStatus`: conditions by `type`, host and pod IPs by `ip`;
/// `containerStatuses` is atomic).
pub fn pod_keys(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" => Some("type"),
        "status.hostIPs" | "status.podIPs" => Some("ip"),
        _ => None,
    }
}

/// The merge keys of the Node fields the kubelet writes (`NodeStatus`:
/// conditions and addresses by `type`, volumes attached by `name`).
pub fn node_keys(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" | "status.addresses" => Some("type"),
        "status.volumesAttached" => Some("name"),
        _ => None,
    }
}

/// The patch that turns `old` into `new` (`{}` when they are equal).
pub fn two_way(old: &Value, new: &Value, keys: MergeKeys) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => Value::Object(diff_maps(o, n, "", keys)),
        _ => new.clone(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn diff_maps(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    path: &str,
    keys: MergeKeys,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, nv) in new {
        let here = join(path, k);
        match old.get(k) {
            None if nv.is_null() => {}
            None => {
                out.insert(k.clone(), nv.clone());
            }
            Some(ov) if ov == nv => {}
            Some(Value::Object(o)) => match nv {
                Value::Object(n) => {
                    let d = diff_maps(o, n, &here, keys);
                    if !d.is_empty() {
                        out.insert(k.clone(), Value::Object(d));
                    }
                }
                _ => {
                    out.insert(k.clone(), nv.clone());
                }
            },
            Some(Value::Array(o)) => match (nv, keys(&here)) {
                (Value::Array(n), Some(key)) => {
                    if let Some((patch, order)) = diff_keyed_lists(o, n, key, &here, keys) {
                        out.insert(format!("$setElementOrder/{k}"), Value::Array(order));
                        out.insert(k.clone(), Value::Array(patch));
                    }
                }
                _ => {
                    out.insert(k.clone(), nv.clone());
                }
            },
            Some(_) => {
                out.insert(k.clone(), nv.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    out
}

/// The element patches and the new order of a list merged on `key`; `None`
/// when nothing changed.
fn diff_keyed_lists(
    old: &[Value],
    new: &[Value],
    key: &str,
    path: &str,
    keys: MergeKeys,
) -> Option<(Vec<Value>, Vec<Value>)> {
    let mut patch = Vec::new();
    for n in new {
        let id = &n[key];
        match old.iter().find(|o| &o[key] == id) {
            None => patch.push(n.clone()),
            Some(o) if o == n => {}
            Some(o) => match (o, n) {
                (Value::Object(om), Value::Object(nm)) => {
                    let mut d = diff_maps(om, nm, path, keys);
                    if !d.is_empty() {
                        d.insert(key.to_string(), id.clone());
                        patch.push(Value::Object(d));
                    }
                }
                _ => patch.push(n.clone()),
            },
        }
    }
    for o in old {
        let id = &o[key];
        if !new.iter().any(|n| &n[key] == id) {
            let mut d = Map::new();
            d.insert("$patch".into(), Value::String("delete".into()));
            d.insert(key.to_string(), id.clone());
            patch.push(Value::Object(d));
        }
    }
    if patch.is_empty() {
        return None;
    }
    let order = new
        .iter()
        .map(|n| {
            let mut m = Map::new();
            m.insert(key.to_string(), n[key].clone());
            Value::Object(m)
        })
        .collect();
    Some((patch, order))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_objects_give_an_empty_patch() {
        let v = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(two_way(&v, &v, pod_keys), json!({}));
    }

    #[test]
    fn maps_are_diffed_and_removed_keys_become_null() {
        let old = json!({"status": {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}], "reason": "x"}});
        let new = json!({"status": {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t"}}}]}});
        assert_eq!(
            two_way(&old, &new, pod_keys),
            json!({"status": {"phase": "Running", "reason": null,
                "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t"}}}]}})
        );
    }

    #[test]
    fn merge_lists_patch_changed_elements_and_set_the_order() {
        let old = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "Gone", "status": "True"}]}});
        let new = json!({"status": {"conditions": [
            {"type": "DisruptionTarget", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            two_way(&old, &new, pod_keys),
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "DisruptionTarget"}, {"type": "PodScheduled"}, {"type": "Ready"}],
                "conditions": [
                    {"type": "DisruptionTarget", "status": "True"},
                    {"type": "Ready", "status": "True", "reason": null},
                    {"$patch": "delete", "type": "Gone"}]}})
        );
    }

    #[test]
    fn new_nulls_are_not_sent() {
        let old = json!({"metadata": {"uid": "u"}});
        let new = json!({"metadata": {"uid": "u", "x": null}});
        assert_eq!(two_way(&old, &new, node_keys), json!({}));
    }
}
