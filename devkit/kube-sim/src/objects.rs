//! Defaulting of Jobs and Pods as the API server does it, and small helpers
//! to read and write fields of JSON objects. Validation lives in
//! [`crate::validation`].

use crate::clock::k8s_time;
use jiff::Timestamp;
use serde_json::{Map, Value, json};

/// `metadata.name` ("" when absent).
pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

/// `metadata.uid` ("" when absent).
pub fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or("")
}

/// A label value.
pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

/// Whether the object is being deleted.
pub fn deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// Whether a condition of this type is true.
pub fn condition_true(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

/// Adds (or replaces) a true condition; returns whether anything changed.
pub fn set_condition(
    obj: &mut Value,
    kind: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if condition_true(obj, kind) {
        return false;
    }
    let cond = json!({
        "type": kind, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": k8s_time(now), "lastTransitionTime": k8s_time(now),
    });
    let status = ensure_object(&mut obj["status"]);
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if let Some(arr) = list.as_array_mut() {
        arr.retain(|c| c["type"] != kind);
        arr.push(cond);
    } else {
        *list = json!([cond]);
    }
    true
}

/// Makes `v` an object (replacing null) and returns its map.
pub fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// Sets `obj[key]` when it is absent or null.
fn default(obj: &mut Value, key: &str, value: Value) {
    let m = ensure_object(obj);
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// Removes fields a client may not set on create (uid, resourceVersion,
/// timestamps, status).
pub fn strip_server_fields(obj: &mut Value, keep_status: bool) {
    let md = ensure_object(&mut obj["metadata"]);
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "managedFields",
        "selfLink",
    ] {
        md.remove(k);
    }
    if !keep_status && let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// `imagePullPolicy` for an image: `Always` for `:latest` or no tag (and no
/// digest), else `IfNotPresent`.
fn default_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_containers(list: &mut Value) {
    let Some(cs) = list.as_array_mut() else {
        return;
    };
    for c in cs {
        if !c.is_object() {
            continue;
        }
        let image = c["image"].as_str().unwrap_or("").to_string();
        default(c, "imagePullPolicy", json!(default_pull_policy(&image)));
        default(c, "terminationMessagePath", json!("/dev/termination-log"));
        default(c, "terminationMessagePolicy", json!("File"));
        default(c, "resources", json!({}));
        if let Some(ports) = c.pointer_mut("/ports").and_then(Value::as_array_mut) {
            for p in ports.iter_mut().filter(|p| p.is_object()) {
                default(p, "protocol", json!("TCP"));
            }
        }
        if let Some(env) = c.pointer_mut("/env").and_then(Value::as_array_mut) {
            for e in env
                .iter_mut()
                .filter(|e| e["valueFrom"]["fieldRef"].is_object())
            {
                default(&mut e["valueFrom"]["fieldRef"], "apiVersion", json!("v1"));
            }
        }
    }
}

/// The defaults of a pod spec (of a pod or a pod template).
pub fn default_pod_spec(spec: &mut Value) {
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "securityContext", json!({}));
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "enableServiceLinks", json!(true));
    for key in ["/containers", "/initContainers"] {
        if let Some(list) = spec.pointer_mut(key) {
            default_containers(list);
        }
    }
    if let Some(vols) = spec.pointer_mut("/volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut() {
            for key in ["secret", "configMap"] {
                if v[key].is_object() {
                    default(&mut v[key], "defaultMode", json!(0o644));
                }
            }
        }
    }
}

/// The defaults of a Job spec and its pod template (create and update).
pub fn default_job_spec(spec: &mut Value) {
    default(spec, "parallelism", json!(1));
    default(spec, "completions", json!(1));
    default(spec, "backoffLimit", json!(6));
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    default(spec, "manualSelector", json!(false));
    default_pod_spec(&mut spec["template"]["spec"]);
}

/// Fills the defaults the API server sets on a new Job: a fresh uid, the
/// spec's defaults, and (unless `manualSelector`) the generated selector and
/// the template's controller labels.
pub fn default_job(job: &mut Value) {
    let uid = uuid::Uuid::new_v4().to_string();
    job["metadata"]["uid"] = json!(uid);
    default_job_spec(&mut job["spec"]);
    crate::validation::job::generate_selector(job);
    job["status"] = json!({});
}

/// QoS class of a pod spec: Guaranteed when every container has cpu and
/// memory limits equal to its requests, BestEffort when none has any,
/// else Burstable.
fn qos_class(spec: &Value) -> &'static str {
    let cs = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let any = cs.iter().any(|c| {
        ["requests", "limits"]
            .iter()
            .any(|k| c["resources"][k].as_object().is_some_and(|m| !m.is_empty()))
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = cs.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let l = &c["resources"]["limits"][r];
            !l.is_null() && c["resources"]["requests"][r] == *l
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Fills the defaults the API server sets on a new Pod (requests default to
/// the limits) and its initial status.
pub fn default_pod(pod: &mut Value) {
    default_pod_spec(&mut pod["spec"]);
    for key in ["/spec/containers", "/spec/initContainers"] {
        if let Some(cs) = pod.pointer_mut(key).and_then(Value::as_array_mut) {
            for c in cs.iter_mut() {
                let limits = c["resources"]["limits"].clone();
                if let Some(l) = limits.as_object()
                    && !l.is_empty()
                {
                    let req = ensure_object(&mut c["resources"]["requests"]);
                    for (k, v) in l {
                        req.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
        }
    }
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// The pod a Job's controller creates from its template.
pub fn pod_for_job(job: &Value) -> Value {
    let tpl = &job["spec"]["template"];
    let job_name = name(job);
    let mut md = json!({
        "generateName": format!("{job_name}-"),
        "labels": tpl["metadata"]["labels"].clone(),
        "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": uid(job),
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    if tpl["metadata"]["annotations"].is_object() {
        md["annotations"] = tpl["metadata"]["annotations"].clone();
    }
    let mut pod = json!({"metadata": md, "spec": tpl["spec"].clone()});
    default_pod(&mut pod);
    pod
}

/// The Job (name) that controls a pod, from its ownerReferences.
pub fn controller_job(pod: &Value) -> Option<(&str, &str)> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find_map(|r| {
            (r["kind"] == "Job" && r["controller"] == true).then(|| {
                (
                    r["name"].as_str().unwrap_or(""),
                    r["uid"].as_str().unwrap_or(""),
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"metadata": {"name": "j", "labels": {"a": "b"}}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "driver", "image": "img:1"}]}}}})
    }

    #[test]
    fn valid_job_gets_defaults() {
        let mut j = job();
        default_job(&mut j);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "j");
        assert_eq!(
            j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            30
        );
        let errs = crate::validation::job::validate_job(&j);
        assert!(errs.is_empty(), "{errs:?}");
        let p = pod_for_job(&j);
        assert_eq!(p["metadata"]["generateName"], "j-");
        assert_eq!(controller_job(&p).unwrap().0, "j");
        assert_eq!(p["status"]["phase"], "Pending");
    }

    #[test]
    fn pod_defaults() {
        assert_eq!(default_pull_policy("img"), "Always");
        assert_eq!(default_pull_policy("img:latest"), "Always");
        assert_eq!(default_pull_policy("reg:5000/img"), "Always");
        assert_eq!(default_pull_policy("reg:5000/img:1"), "IfNotPresent");
        assert_eq!(default_pull_policy("img@sha256:ab"), "IfNotPresent");
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "i:1",
            "ports": [{"containerPort": 80}],
            "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "volumes": [{"name": "s", "secret": {"secretName": "x"}}]}});
        default_pod(&mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(c["resources"]["requests"]["memory"], "1Gi");
        assert_eq!(p["spec"]["volumes"][0]["secret"]["defaultMode"], 420);
        assert_eq!(p["status"]["qosClass"], "Guaranteed");
    }

    #[test]
    fn conditions() {
        let mut j = job();
        let now = Timestamp::now();
        assert!(set_condition(&mut j, "Complete", "Completed", "", now));
        assert!(!set_condition(&mut j, "Complete", "Completed", "", now));
        assert!(condition_true(&j, "Complete"));
    }
}
