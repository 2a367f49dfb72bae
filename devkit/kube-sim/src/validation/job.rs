//! Jobs: metadata, the generated selector and template labels, the spec's
//! bounds and enums, the pod template, and which fields an update may
//! change.
//!
//! Upstream: `pkg/apis/batch/validation/validation.go` (`ValidateJob`,
//! `ValidateGeneratedSelector`, `ValidateJobSpec`, `validateJobSpec`,
//! `validatePodTemplateSpecForJob`, `ValidateJobUpdate`) and
//! `pkg/registry/batch/job/strategy.go` (`generateSelector`, run by
//! `Validate` before the checks when `manualSelector` is not true).

use super::meta::{each_invalid, qualified_name, validate_labels, validate_object_meta};
use super::pod::{strip_null_fields, validate_pod_template};
use super::{BadValue, ErrorList, FieldError, go_string_map, path, str_of};
use crate::objects::ensure_object;
use serde_json::{Value, json};

/// The labels a generated selector relies on.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The job-name label.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The legacy controller-uid label.
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
/// The legacy job-name label.
pub const LEGACY_JOB_NAME: &str = "job-name";

/// `generateSelector`: unless `manualSelector` is true, adds the job-name
/// and controller-uid labels to the template (where absent: a conflicting
/// user label is left for validation to refuse) and the controller-uid to
/// the selector's matchLabels.
pub fn generate_selector(job: &mut Value) {
    if job["spec"]["manualSelector"] == true {
        return;
    }
    let name = str_of(&job["metadata"], "name").to_string();
    let uid = str_of(&job["metadata"], "uid").to_string();
    let spec = &mut job["spec"];
    let labels = ensure_object(&mut spec["template"]["metadata"]["labels"]);
    for (key, value) in [
        (LEGACY_JOB_NAME, &name),
        (JOB_NAME, &name),
        (LEGACY_CONTROLLER_UID, &uid),
        (CONTROLLER_UID, &uid),
    ] {
        labels.entry(key).or_insert_with(|| json!(value));
    }
    let selector = ensure_object(&mut spec["selector"]);
    let match_labels = ensure_object(selector.entry("matchLabels").or_insert(Value::Null));
    match_labels
        .entry(CONTROLLER_UID)
        .or_insert_with(|| json!(uid));
}

/// Go's rendering of a `*metav1.LabelSelector` (its generated `String()`).
fn go_selector(sel: &Value) -> String {
    let mut s = String::from("&LabelSelector{MatchLabels:map[string]string{");
    if let Some(m) = sel["matchLabels"].as_object() {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            s.push_str(&format!("{k}: {},", m[k.as_str()].as_str().unwrap_or("")));
        }
    }
    s.push_str("},MatchExpressions:[]LabelSelectorRequirement{");
    for e in super::items(sel, "matchExpressions") {
        let values: Vec<&str> = super::items(e, "values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        s.push_str(&format!(
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            str_of(e, "key"),
            str_of(e, "operator"),
            values.join(" ")
        ));
    }
    s.push_str("},}");
    s
}

/// Whether a label selector selects a set of labels.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels[k].as_str();
    let labels_ok = sel["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    labels_ok
        && super::items(sel, "matchExpressions").iter().all(|e| {
            let key = str_of(e, "key");
            let values: Vec<&str> = super::items(e, "values")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            match str_of(e, "operator") {
                "In" => get(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            }
        })
}

fn selector_is_empty(sel: &Value) -> bool {
    sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
        && super::items(sel, "matchExpressions").is_empty()
}

/// `ValidateLabelSelector`.
fn validate_label_selector(sel: &Value, field: &str, errs: &mut ErrorList) {
    validate_labels(
        &sel["matchLabels"],
        &path::child(field, "matchLabels"),
        errs,
    );
    for (i, e) in super::items(sel, "matchExpressions").iter().enumerate() {
        let idx = path::index(&path::child(field, "matchExpressions"), i);
        let n = super::items(e, "values").len();
        match str_of(e, "operator") {
            "In" | "NotIn" if n == 0 => errs.push(FieldError::required(
                &path::child(&idx, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if n > 0 => errs.push(FieldError::forbidden(
                &path::child(&idx, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(FieldError::invalid(
                &path::child(&idx, "operator"),
                BadValue::Raw(super::go_quote(op)),
                "not a valid selector operator",
            )),
        }
        let key = str_of(e, "key");
        each_invalid(errs, &path::child(&idx, "key"), key, qualified_name(key));
    }
}

fn has_label(tpl_labels: &Value, key: &str, expected: &str, errs: &mut ErrorList) {
    let field = path::key("spec.template.metadata.labels", key);
    match tpl_labels[key].as_str() {
        None => errs.push(FieldError::required(
            &field,
            format!("must be '{expected}'"),
        )),
        Some(v) if v != expected => errs.push(FieldError::invalid(
            &field,
            BadValue::Raw(go_string_map(tpl_labels)),
            format!("must be '{expected}'"),
        )),
        Some(_) => {}
    }
}

/// `ValidateGeneratedSelector` (with the prefixed labels new Jobs require).
fn validate_generated_selector(job: &Value, errs: &mut ErrorList) {
    let spec = &job["spec"];
    if spec["manualSelector"] == true || spec["selector"].is_null() {
        return;
    }
    let name = str_of(&job["metadata"], "name");
    let uid = str_of(&job["metadata"], "uid");
    if uid.is_empty() {
        errs.push(FieldError::required("metadata.uid", ""));
    }
    let labels = &spec["template"]["metadata"]["labels"];
    has_label(labels, LEGACY_CONTROLLER_UID, uid, errs);
    has_label(labels, LEGACY_JOB_NAME, name, errs);
    has_label(labels, CONTROLLER_UID, uid, errs);
    has_label(labels, JOB_NAME, name, errs);
    let expected = json!({
        LEGACY_CONTROLLER_UID: uid, LEGACY_JOB_NAME: name, CONTROLLER_UID: uid, JOB_NAME: name,
    });
    if !selector_matches(&spec["selector"], &expected) {
        errs.push(FieldError::invalid(
            "spec.selector",
            BadValue::Raw(go_selector(&spec["selector"])),
            "`selector` not auto-generated",
        ));
    }
}

fn non_negative(spec: &Value, key: &str, errs: &mut ErrorList) {
    if let Some(n) = spec[key].as_i64()
        && n < 0
    {
        errs.push(FieldError::invalid(
            &path::child("spec", key),
            BadValue::Int(n),
            "must be greater than or equal to 0",
        ));
    }
}

/// `ValidateJobSpec`.
fn validate_job_spec(spec: &Value, errs: &mut ErrorList) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        non_negative(spec, key, errs);
    }
    if let Some(mode) = spec["completionMode"].as_str() {
        if !["NonIndexed", "Indexed"].contains(&mode) {
            errs.push(FieldError::not_supported(
                "spec.completionMode",
                BadValue::Str(mode.into()),
                &["NonIndexed", "Indexed"],
            ));
        } else if mode == "Indexed" && spec["completions"].is_null() {
            errs.push(FieldError::required(
                "spec.completions",
                "when completion mode is Indexed",
            ));
        }
    }
    if let Some(p) = spec["podReplacementPolicy"].as_str()
        && !["TerminatingOrFailed", "Failed"].contains(&p)
    {
        errs.push(FieldError::not_supported(
            "spec.podReplacementPolicy",
            BadValue::Str(p.into()),
            &["TerminatingOrFailed", "Failed"],
        ));
    }
    let tpl = &spec["template"];
    validate_pod_template(tpl, "spec.template", errs);
    let restart = str_of(&tpl["spec"], "restartPolicy");
    if restart != "OnFailure" && restart != "Never" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            BadValue::Str(restart.into()),
            &["OnFailure", "Never"],
        ));
    }
    let sel = &spec["selector"];
    if sel.is_null() {
        errs.push(FieldError::required("spec.selector", ""));
    } else {
        validate_label_selector(sel, "spec.selector", errs);
        let labels = &tpl["metadata"]["labels"];
        if !selector_is_empty(sel) && !selector_matches(sel, labels) {
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                BadValue::Raw(go_string_map(labels)),
                "`selector` does not match template `labels`",
            ));
        }
    }
}

/// `ValidateJob` on a defaulted Job whose selector was generated.
pub fn validate_job(job: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    validate_object_meta(&job["metadata"], &mut errs);
    validate_generated_selector(job, &mut errs);
    validate_job_spec(&job["spec"], &mut errs);
    errs
}

/// `ValidateJobUpdate`: metadata, the spec again, and the immutable
/// `completions`, `selector` and `template`.
pub fn validate_job_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    super::meta::validate_object_meta_update(&new["metadata"], &old["metadata"], &mut errs);
    validate_job_spec(&new["spec"], &mut errs);
    for key in ["completions", "selector", "template"] {
        let (n, o) = (&new["spec"][key], &old["spec"][key]);
        if strip_null_fields(n) != strip_null_fields(o) {
            errs.push(FieldError::invalid(
                &path::child("spec", key),
                BadValue::Raw(n.to_string()),
                "field is immutable",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePolicy": "File"}]}}}})
    }

    #[test]
    fn the_generated_selector_validates() {
        let mut j = job();
        generate_selector(&mut j);
        assert_eq!(j["spec"]["selector"]["matchLabels"][CONTROLLER_UID], "u1");
        assert_eq!(j["spec"]["template"]["metadata"]["labels"][JOB_NAME], "j");
        assert!(validate_job(&j).is_empty(), "{:?}", validate_job(&j));
    }

    #[test]
    fn a_selector_needs_manual_selector() {
        let mut j = job();
        j["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        j["spec"]["template"]["metadata"] = json!({"labels": {"app": "x"}});
        generate_selector(&mut j);
        let errs = validate_job(&j);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.selector");
        assert!(
            errs[0]
                .to_string()
                .ends_with("`selector` not auto-generated")
        );
        assert!(errs[0].to_string().contains("&LabelSelector{MatchLabels:map[string]string{app: x,batch.kubernetes.io/controller-uid: u1,}"));
        // with manualSelector the selector must only match the template
        let mut j = job();
        j["spec"]["manualSelector"] = json!(true);
        j["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        j["spec"]["template"]["metadata"] = json!({"labels": {"app": "y"}});
        generate_selector(&mut j);
        let errs = validate_job(&j);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].to_string(),
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"y\"}: `selector` does not match template `labels`"
        );
    }

    #[test]
    fn conflicting_template_labels_and_bounds() {
        let mut j = job();
        j["spec"]["template"]["metadata"] = json!({"labels": {"job-name": "other"}});
        j["spec"]["backoffLimit"] = json!(-1);
        j["spec"]["ttlSecondsAfterFinished"] = json!(-2);
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        generate_selector(&mut j);
        let errs: Vec<String> = validate_job(&j).iter().map(ToString::to_string).collect();
        for needle in [
            "spec.template.metadata.labels[job-name]: Invalid value: map[string]string{",
            "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            "spec.ttlSecondsAfterFinished: Invalid value: -2: must be greater than or equal to 0",
            "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(needle)),
                "{needle} not in {errs:#?}"
            );
        }
    }

    #[test]
    fn a_long_name_breaks_the_job_name_label() {
        let mut j = job();
        let long = "a".repeat(64);
        j["metadata"]["name"] = json!(long);
        generate_selector(&mut j);
        let errs: Vec<String> = validate_job(&j).iter().map(ToString::to_string).collect();
        assert!(
            errs.iter().any(|e| e.starts_with(&format!("spec.template.labels: Invalid value: \"{long}\": must be no more than 63 characters"))),
            "{errs:#?}"
        );
    }

    #[test]
    fn updates_keep_the_template() {
        let mut old = job();
        generate_selector(&mut old);
        let mut new = old.clone();
        new["spec"]["activeDeadlineSeconds"] = json!(10);
        assert!(validate_job_update(&new, &old).is_empty());
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("i:2");
        let errs = validate_job_update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template");
    }
}
