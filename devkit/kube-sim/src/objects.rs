//! Validation and defaulting of Jobs and Pods as the API server does it, and
//! small helpers to read and write fields of JSON objects.

use crate::clock::k8s_time;
use crate::status::ApiError;
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

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

fn label_key_ok(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain)
        && !name.is_empty()
        && name.len() <= 63
        && label_value_ok(name)
}

type Causes = Vec<(String, String)>;

fn check_metadata(md: &Value, max_name: usize, causes: &mut Causes) {
    let name = md["name"].as_str().unwrap_or("");
    let generate = md["generateName"].as_str().unwrap_or("");
    if name.is_empty() && generate.is_empty() {
        causes.push((
            "metadata.name".into(),
            "Required value: name or generateName is required".into(),
        ));
    } else if !name.is_empty() && (!is_dns_subdomain(name) || name.len() > max_name) {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain of at most {max_name} characters"),
        ));
    }
    check_labels(&md["labels"], "metadata.labels", causes);
}

fn check_labels(labels: &Value, field: &str, causes: &mut Causes) {
    match labels {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                if !label_key_ok(k) {
                    causes.push((
                        field.into(),
                        format!("Invalid value: {k:?}: not a valid label key"),
                    ));
                }
                match v.as_str() {
                    Some(s) if label_value_ok(s) => {}
                    _ => causes.push((
                        field.to_string(),
                        format!("Invalid value: {v}: not a valid label value"),
                    )),
                }
            }
        }
        _ => causes.push((
            field.into(),
            "Invalid value: must be a map of strings".into(),
        )),
    }
}

fn check_pod_spec(spec: &Value, field: &str, causes: &mut Causes) {
    let containers = spec["containers"].as_array();
    match containers {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter().enumerate() {
                let cname = c["name"].as_str().unwrap_or("");
                if !is_dns_label(cname) {
                    causes.push((
                        format!("{field}.containers[{i}].name"),
                        "Required value: a DNS-1123 label".into(),
                    ));
                }
                if c["image"].as_str().unwrap_or("").is_empty() {
                    causes.push((
                        format!("{field}.containers[{i}].image"),
                        "Required value".into(),
                    ));
                }
            }
        }
        _ => causes.push((format!("{field}.containers"), "Required value".into())),
    }
    if let Some(g) = spec
        .get("terminationGracePeriodSeconds")
        .filter(|g| !g.is_null())
        && g.as_i64().is_none_or(|g| g < 0)
    {
        causes.push((
            format!("{field}.terminationGracePeriodSeconds"),
            "Invalid value: must be >= 0".into(),
        ));
    }
}

fn check_non_negative(spec: &Value, key: &str, field: &str, min: i64, causes: &mut Causes) {
    if let Some(v) = spec.get(key).filter(|v| !v.is_null())
        && v.as_i64().is_none_or(|n| n < min)
    {
        causes.push((
            format!("{field}.{key}"),
            format!("Invalid value: {v}: must be greater than or equal to {min}"),
        ));
    }
}

/// Validates a Job as the API server would on create (422 Invalid).
pub fn validate_job(job: &Value) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    check_metadata(&job["metadata"], 63, &mut causes);
    let spec = &job["spec"];
    if !spec.is_object() {
        causes.push(("spec".into(), "Required value".into()));
    } else {
        let tpl = &spec["template"];
        if !tpl["spec"].is_object() {
            causes.push(("spec.template.spec".into(), "Required value".into()));
        } else {
            check_pod_spec(&tpl["spec"], "spec.template.spec", &mut causes);
            match tpl["spec"]["restartPolicy"].as_str() {
                Some("Never" | "OnFailure") => {}
                other => causes.push((
                    "spec.template.spec.restartPolicy".into(),
                    format!(
                        "Unsupported value: {other:?}: supported values: \"OnFailure\", \"Never\""
                    ),
                )),
            }
        }
        check_labels(
            &tpl["metadata"]["labels"],
            "spec.template.metadata.labels",
            &mut causes,
        );
        check_non_negative(spec, "backoffLimit", "spec", 0, &mut causes);
        check_non_negative(spec, "activeDeadlineSeconds", "spec", 1, &mut causes);
        check_non_negative(spec, "ttlSecondsAfterFinished", "spec", 0, &mut causes);
        check_non_negative(spec, "completions", "spec", 0, &mut causes);
        check_non_negative(spec, "parallelism", "spec", 0, &mut causes);
    }
    finish(causes, "batch", "Job", job)
}

/// Validates a Pod as the API server would on create (422 Invalid).
pub fn validate_pod(pod: &Value) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    check_metadata(&pod["metadata"], 253, &mut causes);
    if !pod["spec"].is_object() {
        causes.push(("spec".into(), "Required value".into()));
    } else {
        check_pod_spec(&pod["spec"], "spec", &mut causes);
    }
    finish(causes, "", "Pod", pod)
}

fn finish(causes: Causes, group: &str, kind: &str, obj: &Value) -> Result<(), ApiError> {
    if causes.is_empty() {
        return Ok(());
    }
    let shown = match name(obj) {
        "" => obj["metadata"]["generateName"].as_str().unwrap_or(""),
        n => n,
    };
    Err(ApiError::invalid(group, kind, shown, &causes))
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

fn default_pod_spec(spec: &mut Value) {
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "securityContext", json!({}));
    default(spec, "restartPolicy", json!("Always"));
    if let Some(cs) = spec["containers"].as_array_mut() {
        for c in cs {
            let image = c["image"].as_str().unwrap_or("").to_string();
            let pull = if image.ends_with(":latest") || !image.contains(':') {
                "Always"
            } else {
                "IfNotPresent"
            };
            default(c, "imagePullPolicy", json!(pull));
            default(c, "terminationMessagePath", json!("/dev/termination-log"));
            default(c, "terminationMessagePolicy", json!("File"));
            default(c, "resources", json!({}));
        }
    }
}

/// Fills the defaults the API server sets on a new Job, including a fresh
/// uid, the selector on it and the pod template's controller labels.
pub fn default_job(job: &mut Value) {
    let uid = uuid::Uuid::new_v4().to_string();
    job["metadata"]["uid"] = json!(uid);
    let spec = &mut job["spec"];
    default(spec, "parallelism", json!(1));
    default(spec, "completions", json!(1));
    default(spec, "backoffLimit", json!(6));
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    default(spec, "manualSelector", json!(false));
    let job_name = job["metadata"]["name"].as_str().unwrap_or("").to_string();
    let spec = &mut job["spec"];
    if spec["selector"].is_null() {
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    }
    let labels = ensure_object(&mut spec["template"]["metadata"]["labels"]);
    labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
    labels.insert("controller-uid".into(), json!(uid));
    if !job_name.is_empty() {
        labels.insert("batch.kubernetes.io/job-name".into(), json!(job_name));
        labels.insert("job-name".into(), json!(job_name));
    }
    default_pod_spec(&mut spec["template"]["spec"]);
    job["status"] = json!({});
}

/// Fills the defaults the API server sets on a new Pod.
pub fn default_pod(pod: &mut Value) {
    default_pod_spec(&mut pod["spec"]);
    let qos = if pod["spec"]["containers"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["resources"]["requests"].is_object() || c["resources"]["limits"].is_object())
    }) {
        "Burstable"
    } else {
        "BestEffort"
    };
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
        validate_job(&j).unwrap();
        default_job(&mut j);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "j");
        assert_eq!(
            j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            30
        );
        let p = pod_for_job(&j);
        assert_eq!(p["metadata"]["generateName"], "j-");
        assert_eq!(controller_job(&p).unwrap().0, "j");
        assert_eq!(p["status"]["phase"], "Pending");
    }

    #[test]
    fn invalid_jobs_name_their_fields() {
        let mut j = job();
        j["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        let e = validate_job(&j).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains("spec.template.spec.containers[0].image"),
            "{}",
            e.message
        );
        let mut j = job();
        j["spec"]["template"]["spec"]["containers"] = json!([]);
        assert!(validate_job(&j).unwrap_err().message.contains("containers"));
        let mut j = job();
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        assert!(
            validate_job(&j)
                .unwrap_err()
                .message
                .contains("restartPolicy")
        );
        let mut j = job();
        j["metadata"] = json!({});
        assert!(
            validate_job(&j)
                .unwrap_err()
                .message
                .contains("metadata.name")
        );
        let mut j = job();
        j["metadata"]["labels"]["bad"] = json!("-x");
        assert!(validate_job(&j).is_err());
        assert!(validate_job(&json!({"metadata": {"name": "x"}})).is_err());
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
