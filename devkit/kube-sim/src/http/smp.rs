//! Strategic merge patch (`application/strategic-merge-patch+json`), as
//! kubectl apply, edit and patch send it for built-in kinds: maps merge, a
//! null deletes, and the lists that carry a `patchMergeKey` in the Pod and
//! Job types merge item by item on that key (containers and env by name,
//! ports by containerPort, volumeMounts by mountPath, ...); other lists are
//! replaced. The directives `$patch` (replace, delete), `$retainKeys` and
//! `$deleteFromPrimitiveList/` are honoured; `$setElementOrder/` is read as
//! "no change of order" (merged items keep their place, new ones go last).
//!
//! Upstream: `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`
//! with the `patchMergeKey`/`patchStrategy` tags of `k8s.io/api/core/v1` and
//! `k8s.io/api/batch/v1`. The merge keys are looked up by field name only,
//! which is unambiguous within Pods and Jobs.

use serde_json::{Map, Value};

/// List fields merged on a key.
const MERGE_KEYS: [(&str, &str); 15] = [
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("env", "name"),
    ("volumes", "name"),
    ("imagePullSecrets", "name"),
    ("resourceClaims", "name"),
    ("schedulingGates", "name"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("ports", "containerPort"),
    ("ownerReferences", "uid"),
    ("conditions", "type"),
    ("hostAliases", "ip"),
    ("topologySpreadConstraints", "topologyKey"),
];

/// Lists of scalars merged as sets.
const MERGE_SETS: [&str; 1] = ["finalizers"];

fn is_directive(k: &str) -> bool {
    k == "$patch"
        || k == "$retainKeys"
        || k.starts_with("$setElementOrder/")
        || k.starts_with("$deleteFromPrimitiveList/")
}

/// `v` without any directive key.
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !is_directive(k))
                .map(|(k, v)| (k.clone(), clean(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|x| x["$patch"].is_null())
                .map(clean)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_list(target: &mut Value, patch: &[Value], key: &str) {
    if patch.iter().any(|i| i["$patch"] == "replace") {
        *target = Value::Array(
            patch
                .iter()
                .filter(|i| i["$patch"].is_null())
                .map(clean)
                .collect(),
        );
        return;
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Some(list) = target.as_array_mut() else {
        return;
    };
    for item in patch {
        let at = list
            .iter()
            .position(|t| !item[key].is_null() && t[key] == item[key]);
        match (item["$patch"].as_str(), at) {
            (Some("delete"), Some(i)) => {
                list.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => merge_value(&mut list[i], item),
            (_, None) => list.push(clean(item)),
        }
    }
}

fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = match clean(&Value::Object(patch.clone())) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        return;
    }
    for (k, v) in patch {
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(t), Some(gone)) = (
                target.get_mut(list).and_then(Value::as_array_mut),
                v.as_array(),
            ) {
                t.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if is_directive(k) {
            continue;
        }
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(m) if m.get("$patch").and_then(Value::as_str) == Some("delete") => {
                target.remove(k);
            }
            Value::Array(items) => {
                if let Some((_, key)) = MERGE_KEYS.iter().find(|(f, _)| f == k)
                    && items.iter().all(Value::is_object)
                {
                    merge_list(target.entry(k.clone()).or_insert(Value::Null), items, key);
                } else if MERGE_SETS.contains(&k.as_str()) {
                    let t = target
                        .entry(k.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Some(t) = t.as_array_mut() {
                        for x in items {
                            if !t.contains(x) {
                                t.push(x.clone());
                            }
                        }
                    } else {
                        *t = clean(v);
                    }
                } else {
                    target.insert(k.clone(), clean(v));
                }
            }
            _ => merge_value(target.entry(k.clone()).or_insert(Value::Null), v),
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        target.retain(|k, _| keep.iter().any(|x| x == k));
    }
}

fn merge_value(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch) {
        (Some(t), Value::Object(p)) => merge_map(t, p),
        (None, Value::Object(_)) => *target = clean(patch),
        _ => *target = clean(patch),
    }
}

/// Applies a strategic merge patch to `target`.
pub(super) fn apply(target: &mut Value, patch: &Value) {
    merge_value(target, patch);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_merge_by_name_and_directives_are_dropped() {
        let mut t = json!({"spec": {"containers": [
            {"name": "a", "image": "i:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
            {"name": "b", "image": "j:1"}]}});
        apply(
            &mut t,
            &json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}},
                "env": [{"name": "Y", "$patch": "delete"}, {"name": "Z", "value": "3"}]}]}}),
        );
        assert_eq!(
            t,
            json!({"spec": {"containers": [
                {"name": "a", "image": "i:1", "resources": {"requests": {"cpu": "1"}},
                    "env": [{"name": "X", "value": "1"}, {"name": "Z", "value": "3"}]},
                {"name": "b", "image": "j:1"}]}})
        );
    }

    #[test]
    fn maps_nulls_sets_and_replace() {
        let mut t = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"tolerations": [{"key": "k"}], "selector": {"matchLabels": {"a": "1"}}}});
        apply(
            &mut t,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}, "finalizers": ["y", "x"]},
            "spec": {"tolerations": [{"key": "n"}], "selector": {"$patch": "replace", "matchLabels": {"z": "9"}}}}),
        );
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}, "finalizers": ["x", "y"]},
                "spec": {"tolerations": [{"key": "n"}], "selector": {"matchLabels": {"z": "9"}}}})
        );
        apply(
            &mut t,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        );
        assert_eq!(t["metadata"]["finalizers"], json!(["y"]));
    }
}
