//! The admission plugins a pod create passes through on a default API
//! server, as far as the sim models them:
//!
//! - `ServiceAccount` (plugin/pkg/admission/serviceaccount): an empty
//!   `serviceAccountName` becomes `default`; a name with no ServiceAccount in
//!   the namespace refuses the create with 403 Forbidden. (The token volume
//!   it also mounts is not modelled.)
//! - `DefaultTolerationSeconds` (plugin/pkg/admission/defaulttolerationseconds):
//!   tolerations for the `not-ready` and `unreachable` NoExecute taints,
//!   300 s, unless the pod already tolerates them.
//! - `Priority`: `priority: 0` and `preemptionPolicy: PreemptLowerPriority`
//!   when the pod names no PriorityClass.
//!
//! Pure functions over the pod JSON.

use crate::objects::ensure_object;
use crate::status::ApiError;
use serde_json::{Value, json};

/// Taint key of a node whose Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint key of a node whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// The 403 a pod create gets when a plugin refuses it, worded as
/// `admission.NewForbidden` words it (the generateName stands in for a name
/// not generated yet).
pub fn forbidden(pod: &Value, why: &str) -> ApiError {
    let md = &pod["metadata"];
    let name = md["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| md["generateName"].as_str().filter(|n| !n.is_empty()))
        .unwrap_or("Unknown");
    let mut e = ApiError::forbidden(format!("pods \"{name}\" is forbidden: {why}"));
    e.details = Some(json!({"name": name, "kind": "pods"}));
    e
}

/// The ServiceAccount plugin: defaults the name, refuses a missing account.
pub fn service_account(
    pod: &mut Value,
    ns: &str,
    exists: impl Fn(&str) -> bool,
) -> Result<(), ApiError> {
    let spec = ensure_object(&mut pod["spec"]);
    let name = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            spec.get("serviceAccount")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
        })
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(name));
    spec.insert("serviceAccount".into(), json!(name));
    if exists(&name) {
        return Ok(());
    }
    Err(forbidden(
        pod,
        &format!(
            "error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
        ),
    ))
}

fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t["key"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

/// The DefaultTolerationSeconds plugin.
pub fn default_tolerations(pod: &mut Value, seconds: i64) {
    let spec = ensure_object(&mut pod["spec"]);
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(tolerations) = list.as_array_mut() else {
        return;
    };
    for key in [TAINT_NOT_READY, TAINT_UNREACHABLE] {
        if !tolerates(tolerations, key) {
            tolerations.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": seconds}),
            );
        }
    }
}

/// The Priority plugin, for pods without a PriorityClass.
pub fn priority(pod: &mut Value) {
    let spec = ensure_object(&mut pod["spec"]);
    if spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        spec.entry("priority").or_insert(json!(0));
        spec.entry("preemptionPolicy")
            .or_insert(json!("PreemptLowerPriority"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_service_account_is_forbidden_as_upstream_words_it() {
        let mut pod =
            json!({"metadata": {"generateName": "job-"}, "spec": {"serviceAccountName": "runner"}});
        let e = service_account(&mut pod, "tcab", |n| n == "default").unwrap_err();
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "pods \"job-\" is forbidden: error looking up service account tcab/runner: serviceaccount \"runner\" not found"
        );
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {}});
        service_account(&mut pod, "tcab", |n| n == "default").unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
    }

    #[test]
    fn default_tolerations_are_added_once() {
        let mut pod =
            json!({"spec": {"tolerations": [{"key": TAINT_UNREACHABLE, "operator": "Exists"}]}});
        default_tolerations(&mut pod, 300);
        let t = pod["spec"]["tolerations"].as_array().unwrap().clone();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["key"], TAINT_NOT_READY);
        assert_eq!(t[1]["tolerationSeconds"], 300);
        default_tolerations(&mut pod, 300);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let mut bare = json!({"spec": {}});
        default_tolerations(&mut bare, 300);
        assert_eq!(bare["spec"]["tolerations"].as_array().unwrap().len(), 2);
        priority(&mut bare);
        assert_eq!(bare["spec"]["priority"], 0);
    }
}
