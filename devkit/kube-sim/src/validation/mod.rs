//! Validation of Jobs and Pods as the API server does it: field errors with
//! upstream's types, paths and wording, gathered into one `422 Invalid`
//! Status.
//!
//! Followed upstream sources (Kubernetes 1.31 and later):
//! - `staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`:
//!   the error types ([`ErrorType`]) and how a cause's message is written
//!   ([`FieldError::body`]);
//! - `staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go` (`NewInvalid`):
//!   the Status built from them ([`invalid`]);
//! - the per-kind rules in [`meta`], [`pod`] and [`job`], and quantities in
//!   [`crate::quantity`].
//!
//! Everything here is a pure function of JSON values.

pub mod job;
pub mod meta;
pub mod pod;

use crate::objects::{self, ensure_object};
use crate::quantity;
use crate::status::ApiError;
use crate::store::{Kind, random_suffix};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// Kinds of field error, as `metav1.CauseType` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueTooLong`.
    TooLong,
}

impl ErrorType {
    /// The cause `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    /// The words that start a cause's message.
    fn words(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// The offending value, rendered the way Go's `%v`/`%q`/`%#v` would.
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    /// A string: quoted.
    Str(String),
    /// A number: bare.
    Int(i64),
    /// Already rendered (Go's rendering of a struct, map, list or a
    /// `Stringer`): written as is.
    Raw(String),
}

impl BadValue {
    fn render(&self, out: &mut String) {
        match self {
            BadValue::Str(s) => {
                let _ = write!(out, "{}", go_quote(s));
            }
            BadValue::Int(n) => {
                let _ = write!(out, "{n}");
            }
            BadValue::Raw(s) => out.push_str(s),
        }
    }
}

/// `strconv.Quote`-like quoting (close to Go's for the ASCII a client sends).
pub fn go_quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            '\r' => q.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(q, "\\x{:02x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// One field error: type, path, value, detail.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Which kind of error.
    pub etype: ErrorType,
    /// The field path, e.g. `spec.template.spec.containers[0].env[1].name`.
    pub field: String,
    /// The value shown in the message (none for Required, Forbidden and
    /// TooLong, as upstream).
    pub value: Option<BadValue>,
    /// Extra words after the value.
    pub detail: String,
}

impl FieldError {
    /// `field.Invalid`.
    pub fn invalid(field: &str, value: BadValue, detail: impl Into<String>) -> Self {
        FieldError {
            etype: ErrorType::Invalid,
            field: field.to_string(),
            value: Some(value),
            detail: detail.into(),
        }
    }
    /// `field.Required`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            etype: ErrorType::Required,
            field: field.to_string(),
            value: None,
            detail: detail.into(),
        }
    }
    /// `field.Duplicate`.
    pub fn duplicate(field: &str, value: BadValue) -> Self {
        FieldError {
            etype: ErrorType::Duplicate,
            field: field.to_string(),
            value: Some(value),
            detail: String::new(),
        }
    }
    /// `field.NotFound`.
    pub fn not_found(field: &str, value: BadValue) -> Self {
        FieldError {
            etype: ErrorType::NotFound,
            field: field.to_string(),
            value: Some(value),
            detail: String::new(),
        }
    }
    /// `field.NotSupported` with the quoted list of supported values.
    pub fn not_supported(field: &str, value: BadValue, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError {
            etype: ErrorType::NotSupported,
            field: field.to_string(),
            value: Some(value),
            detail,
        }
    }
    /// `field.Forbidden`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            etype: ErrorType::Forbidden,
            field: field.to_string(),
            value: None,
            detail: detail.into(),
        }
    }
    /// `field.TooLong` (the value is never shown).
    pub fn too_long(field: &str, max: usize) -> Self {
        FieldError {
            etype: ErrorType::TooLong,
            field: field.to_string(),
            value: None,
            detail: format!("must have at most {max} bytes"),
        }
    }

    /// The message without the field (upstream's `ErrorBody`).
    pub fn body(&self) -> String {
        let mut s = self.etype.words().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            v.render(&mut s);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A list of field errors.
pub type ErrorList = Vec<FieldError>;

/// Field paths: `a.b`, `a[0]`, `a[key]`.
pub mod path {
    /// `parent.child` (or `child` at the root).
    pub fn child(parent: &str, name: &str) -> String {
        if parent.is_empty() {
            name.to_string()
        } else {
            format!("{parent}.{name}")
        }
    }
    /// `parent[i]`.
    pub fn index(parent: &str, i: usize) -> String {
        format!("{parent}[{i}]")
    }
    /// `parent[key]`.
    pub fn key(parent: &str, key: &str) -> String {
        format!("{parent}[{key}]")
    }
}

/// The `422 Invalid` Status for a list of errors on an object of
/// `group`/`kind` named `name` (upstream's `NewInvalid`): one cause per
/// error, and a message that joins the distinct errors (in brackets when
/// there are several).
pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> ApiError {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut distinct: Vec<String> = Vec::new();
    for e in errs {
        let m = e.to_string();
        if !distinct.contains(&m) {
            distinct.push(m);
        }
    }
    let message = match distinct.len() {
        0 => format!("{qualified} {} is invalid", go_quote(name)),
        1 => format!("{qualified} {} is invalid: {}", go_quote(name), distinct[0]),
        _ => format!(
            "{qualified} {} is invalid: [{}]",
            go_quote(name),
            distinct.join(", ")
        ),
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.etype.reason(), "message": e.body(), "field": e.field}))
        .collect();
    let mut err = ApiError::unprocessable(message);
    err.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
    err
}

/// A string field of a JSON object ("" when absent or not a string).
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// The elements of an array field (none when absent).
pub(crate) fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Go's `%#v` of a `map[string]string`, keys sorted (as fmt prints maps).
pub(crate) fn go_string_map(v: &Value) -> String {
    let mut s = String::from("map[string]string{");
    if let Some(m) = v.as_object() {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let val = m[k.as_str()].as_str().unwrap_or("");
            let _ = write!(s, "{}:{}", go_quote(k), go_quote(val));
        }
    }
    s.push('}');
    s
}

/// Upstream's generated names: the prefix cut to 58 bytes, then five
/// random characters.
pub fn generate_name(prefix: &str) -> String {
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{}", &prefix[..cut], random_suffix())
}

/// Rewrites every container resource quantity in its canonical form (the
/// API server stores what it parsed, rounded up to thousandths by v1
/// defaulting, printed again).
fn canonicalize_quantities(spec: &mut Value) {
    for key in ["/containers", "/initContainers"] {
        let cs = spec.pointer_mut(key).and_then(Value::as_array_mut);
        for c in cs.into_iter().flatten() {
            for list in ["/resources/requests", "/resources/limits"] {
                if let Some(m) = c.pointer_mut(list).and_then(Value::as_object_mut) {
                    for v in m.values_mut() {
                        let s = match v {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            _ => continue,
                        };
                        if let Ok(q) = quantity::parse(&s) {
                            *v = json!(q.round_up_milli().canonical());
                        }
                    }
                }
            }
        }
    }
}

/// Whether `metadata.resourceVersion` holds a version other than 0: the
/// storage layer refuses to create such an object (a non-numeric value is
/// ignored, as upstream's versioner fails to parse it and moves on).
fn resource_version_set(obj: &Value) -> bool {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|v| v != 0)
}

/// The create path before storage, as the generic registry runs it: drop
/// server-set fields, generate the name, default, validate (`422 Invalid`),
/// and refuse a set `metadata.resourceVersion` (upstream's etcd store answers
/// a plain error, so a `500` with no reason). A dry run skips that last
/// check, as upstream's dry-run storage does, and keeps the given
/// resourceVersion in its answer.
pub fn admit_create(kind: Kind, mut obj: Value, dry_run: bool) -> Result<Value, ApiError> {
    let given_rv = obj["metadata"]["resourceVersion"].clone();
    let rv_set = resource_version_set(&obj);
    objects::strip_server_fields(&mut obj, false);
    let md = ensure_object(&mut obj["metadata"]);
    let name = md.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty()
        && let Some(prefix) = md
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
    {
        let generated = generate_name(prefix);
        md.insert("name".into(), json!(generated));
    }
    let errs = match kind {
        Kind::Job => {
            objects::default_job(&mut obj);
            canonicalize_quantities(&mut obj["spec"]["template"]["spec"]);
            job::validate_job(&obj)
        }
        Kind::Pod => {
            objects::default_pod(&mut obj);
            canonicalize_quantities(&mut obj["spec"]);
            pod::validate_pod(&obj)
        }
        // Secrets, ServiceAccounts, Nodes and Events are checked where they
        // are stored (`Sim::create_object`).
        _ => ErrorList::new(),
    };
    if !errs.is_empty() {
        return Err(invalid(
            kind.group(),
            kind.kind(),
            objects::name(&obj),
            &errs,
        ));
    }
    if dry_run {
        if !given_rv.is_null() {
            obj["metadata"]["resourceVersion"] = given_rv;
        }
    } else if rv_set {
        return Err(ApiError::unknown_internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    Ok(obj)
}

/// The update path's validation of the object an update or patch would
/// store (`new`, already merged over `old`): defaults re-applied to the
/// spec, then upstream's update rules. A status update checks only the
/// metadata.
pub fn admit_update(
    kind: Kind,
    new: &mut Value,
    old: &Value,
    status_only: bool,
) -> Result<(), ApiError> {
    let errs = if status_only {
        let mut errs = ErrorList::new();
        meta::validate_object_meta_update(&new["metadata"], &old["metadata"], &mut errs);
        errs
    } else {
        match kind {
            Kind::Job => {
                objects::default_job_spec(&mut new["spec"]);
                canonicalize_quantities(&mut new["spec"]["template"]["spec"]);
                job::validate_job_update(new, old)
            }
            Kind::Pod => {
                objects::default_pod_spec(&mut new["spec"]);
                canonicalize_quantities(&mut new["spec"]);
                pod::validate_pod_update(new, old)
            }
            _ => {
                let mut errs = ErrorList::new();
                meta::validate_object_meta_update(&new["metadata"], &old["metadata"], &mut errs);
                errs
            }
        }
    };
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(
            kind.group(),
            kind.kind(),
            objects::name(old),
            &errs,
        ))
    }
}

/// The warnings upstream's strategy adds on create or update of an object.
pub fn warnings(kind: Kind, obj: &Value) -> Vec<String> {
    match kind {
        Kind::Job => {
            pod::warnings_for_pod_spec(&obj["spec"]["template"]["spec"], "spec.template.spec")
        }
        Kind::Pod => pod::warnings_for_pod_spec(&obj["spec"], "spec"),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_read_like_upstream() {
        let e = FieldError::invalid("metadata.name", BadValue::Str("A".into()), "bad");
        assert_eq!(e.to_string(), "metadata.name: Invalid value: \"A\": bad");
        assert_eq!(
            FieldError::required("spec.selector", "").body(),
            "Required value"
        );
        assert_eq!(
            FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                BadValue::Str("Always".into()),
                &["OnFailure", "Never"]
            )
            .body(),
            "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
        assert_eq!(
            FieldError::too_long("metadata.annotations", 262144).body(),
            "Too long: must have at most 262144 bytes"
        );
        assert_eq!(
            FieldError::invalid("x", BadValue::Int(-1), "must be greater than or equal to 0")
                .body(),
            "Invalid value: -1: must be greater than or equal to 0"
        );
    }

    #[test]
    fn invalid_status_joins_distinct_errors() {
        let one = invalid(
            "batch",
            "Job",
            "j",
            &[FieldError::required("spec.template.spec.containers", "")],
        );
        assert_eq!(one.code, 422);
        assert_eq!(
            one.message,
            "Job.batch \"j\" is invalid: spec.template.spec.containers: Required value"
        );
        let e = FieldError::required("a", "");
        let two = invalid(
            "",
            "Pod",
            "p",
            &[e.clone(), e, FieldError::required("b", "")],
        );
        assert_eq!(
            two.message,
            "Pod \"p\" is invalid: [a: Required value, b: Required value]"
        );
        let st = two.to_status();
        assert_eq!(st["reason"], "Invalid");
        assert_eq!(st["details"]["causes"].as_array().unwrap().len(), 3);
        assert_eq!(st["details"]["causes"][2]["reason"], "FieldValueRequired");
        assert_eq!(st["details"]["kind"], "Pod");
    }

    #[test]
    fn admit_create_defaults_validates_and_refuses_a_resource_version() {
        let job = json!({"metadata": {"generateName": "tcab-driver-", "resourceVersion": "12"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i:1", "resources": {"requests": {"cpu": "0.5"}}}]}}}});
        let e = admit_create(Kind::Job, job.clone(), false).unwrap_err();
        assert_eq!((e.code, e.reason), (500, ""));
        assert_eq!(
            e.message,
            "resourceVersion should not be set on objects to be created"
        );
        let dry = admit_create(Kind::Job, job.clone(), true).unwrap();
        assert_eq!(dry["metadata"]["resourceVersion"], "12");
        let name = dry["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with("tcab-driver-") && name.len() == 17,
            "{name}"
        );
        assert_eq!(
            dry["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "500m"
        );
        let mut ok = job.clone();
        ok["metadata"]["resourceVersion"] = json!("0");
        assert!(admit_create(Kind::Job, ok, false).is_ok());
        let mut bad = job;
        bad["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        let e = admit_create(Kind::Job, bad, false).unwrap_err();
        assert_eq!(
            e.code, 422,
            "validation comes before the resourceVersion check"
        );
        assert!(
            e.message.starts_with("Job.batch \"tcab-driver-"),
            "{}",
            e.message
        );
    }

    #[test]
    fn go_renderings() {
        assert_eq!(go_quote("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(
            go_string_map(&json!({"b": "2", "a": "1"})),
            "map[string]string{\"a\":\"1\", \"b\":\"2\"}"
        );
    }
}
