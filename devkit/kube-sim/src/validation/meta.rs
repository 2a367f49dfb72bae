//! Object metadata and the string formats Kubernetes checks everywhere:
//! DNS-1123 labels and subdomains, label keys (qualified names) and values,
//! annotations, environment variable names, port names.
//!
//! Upstream: `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`
//! (the formats and their messages), `.../pkg/api/validate/content/kube.go`
//! (label keys and values), `.../pkg/api/validation/objectmeta.go`
//! (`ValidateObjectMetaAccessor`, `ValidateAnnotations`, owner references,
//! finalizers) and `.../pkg/apis/meta/v1/validation/validation.go`
//! (`ValidateLabels`).

use super::{BadValue, ErrorList, FieldError, path};
use serde_json::Value;

/// Total size of all annotation keys and values (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const ENV_NAME_MSG: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";
const ENV_NAME_FMT: &str = "[-._a-zA-Z][-._a-zA-Z0-9]*";

/// `MaxLenError`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `RegexError`: the message, examples and the pattern.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

/// `InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_label_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_label_char(b[0])
        && is_label_char(b[b.len() - 1])
        && b.iter().all(|c| is_label_char(*c) || *c == b'-')
}

fn matches_dns_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns_label)
}

/// `IsDNS1123Label`: the problems with `s` (none when valid).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns_label(s) {
        if matches_dns_subdomain(s) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `NameIsDNSSubdomain(name, prefix)`: a generateName prefix has its
/// trailing dash masked first (upstream replaces the last two characters by
/// `a`, a quirk kept here).
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix && name.len() > 1 && name.ends_with('-') {
        let cut = name.char_indices().rev().nth(1).map_or(0, |(i, _)| i);
        return dns1123_subdomain(&format!("{}a", &name[..cut]));
    }
    dns1123_subdomain(name)
}

fn matches_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` / `IsLabelKey`: an optional DNS subdomain prefix and
/// `/`, then a name of at most 63 characters.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !matches_label_key_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsEnvVarName` (the rule of Kubernetes 1.31; see the README for the
/// relaxed rule of later releases).
pub fn env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && !b[0].is_ascii_digit()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(
            ENV_NAME_MSG,
            ENV_NAME_FMT,
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    match value {
        "." => errs.push("must not be '.'".to_string()),
        ".." => errs.push("must not be '..'".to_string()),
        v if v.starts_with("..") => errs.push("must not start with '..'".to_string()),
        _ => {}
    }
    errs
}

/// `IsValidPortName`.
pub fn port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// Every message of `msgs` as an Invalid error of `field` with `value`.
pub fn each_invalid(errs: &mut ErrorList, field: &str, value: &str, msgs: Vec<String>) {
    for m in msgs {
        errs.push(FieldError::invalid(
            field,
            BadValue::Str(value.to_string()),
            m,
        ));
    }
}

/// `ValidateLabels`: every key and value, reported on the map's path.
pub fn validate_labels(labels: &Value, field: &str, errs: &mut ErrorList) {
    let Some(m) = labels.as_object() else {
        return;
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for k in keys {
        each_invalid(errs, field, k, qualified_name(k));
        let v = m[k.as_str()].as_str().unwrap_or("");
        each_invalid(errs, field, v, label_value(v));
    }
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitive), and
/// all keys and values together fit in 256 KiB.
pub fn validate_annotations(annotations: &Value, field: &str, errs: &mut ErrorList) {
    let Some(m) = annotations.as_object() else {
        return;
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let mut total = 0usize;
    for k in keys {
        each_invalid(errs, field, k, qualified_name(&k.to_lowercase()));
        total += k.len() + m[k.as_str()].as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn validate_owner_references(refs: &Value, field: &str, errs: &mut ErrorList) {
    let mut controller: Option<String> = None;
    for r in refs.as_array().into_iter().flatten() {
        let api_version = super::str_of(r, "apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or("");
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &path::child(field, "apiVersion"),
                BadValue::Str(api_version.into()),
                "version must not be empty",
            ));
        }
        for (key, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
            let v = super::str_of(r, key);
            if v.is_empty() {
                errs.push(FieldError::invalid(
                    &path::child(field, what),
                    BadValue::Str(String::new()),
                    "must not be empty",
                ));
            }
        }
        if r["controller"] == true {
            let this = format!("{}/{}", super::str_of(r, "kind"), super::str_of(r, "name"));
            match &controller {
                Some(first) => errs.push(FieldError::invalid(
                    field,
                    BadValue::Raw(refs.to_string()),
                    format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                )),
                None => controller = Some(this),
            }
        }
    }
}

fn validate_finalizers(finalizers: &Value, field: &str, errs: &mut ErrorList) {
    let list: Vec<&str> = finalizers
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for f in &list {
        each_invalid(errs, field, f, qualified_name(f));
    }
    if list.contains(&"orphan") && list.contains(&"foregroundDeletion") {
        errs.push(FieldError::invalid(
            field,
            BadValue::Raw(finalizers.to_string()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

/// `ValidateObjectMeta` on create, after name generation: name (or
/// generateName) as a DNS subdomain, labels, annotations, owner references
/// and finalizers.
pub fn validate_object_meta(md: &Value, errs: &mut ErrorList) {
    let name = super::str_of(md, "name");
    let generate = super::str_of(md, "generateName");
    if !generate.is_empty() {
        each_invalid(
            errs,
            "metadata.generateName",
            generate,
            name_is_dns_subdomain(generate, true),
        );
    }
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        each_invalid(
            errs,
            "metadata.name",
            name,
            name_is_dns_subdomain(name, false),
        );
    }
    validate_common_meta(md, errs);
}

/// The parts of metadata checked on create and on update alike.
pub fn validate_common_meta(md: &Value, errs: &mut ErrorList) {
    validate_labels(&md["labels"], "metadata.labels", errs);
    validate_annotations(&md["annotations"], "metadata.annotations", errs);
    validate_owner_references(&md["ownerReferences"], "metadata.ownerReferences", errs);
    validate_finalizers(&md["finalizers"], "metadata.finalizers", errs);
}

/// `ValidateObjectMetaUpdate`: name, namespace, uid and creationTimestamp
/// never change; labels and the rest are checked again.
pub fn validate_object_meta_update(new: &Value, old: &Value, errs: &mut ErrorList) {
    for key in ["name", "namespace", "uid", "creationTimestamp"] {
        let n = &new[key];
        if !n.is_null() && n != &old[key] {
            errs.push(FieldError::invalid(
                &path::child("metadata", key),
                BadValue::Str(n.as_str().unwrap_or("").to_string()),
                "field is immutable",
            ));
        }
    }
    validate_common_meta(new, errs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dns_formats() {
        assert!(dns1123_label("my-name").is_empty());
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert!(dns1123_label("-a")[0].starts_with("a lowercase RFC 1123 label must consist"));
        assert!(dns1123_label(&"a".repeat(64))[0] == "must be no more than 63 characters");
        assert!(dns1123_subdomain("a.b-c").is_empty());
        assert_eq!(dns1123_subdomain("A").len(), 1);
        assert_eq!(
            dns1123_subdomain("A")[0],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        // a generateName prefix may end with a dash
        assert!(name_is_dns_subdomain("tcab-sandbox-", true).is_empty());
        assert!(!name_is_dns_subdomain("tcab-sandbox-", false).is_empty());
    }

    #[test]
    fn label_keys_and_values() {
        assert!(qualified_name("tcab.dev/job-id").is_empty());
        assert!(qualified_name("app.kubernetes.io/managed-by").is_empty());
        assert_eq!(qualified_name("/a"), ["prefix part must be non-empty"]);
        assert!(qualified_name("a/b/c")[0].starts_with("a valid label key must consist"));
        assert!(qualified_name("Bad_Prefix/x")[0].starts_with("prefix part a lowercase RFC 1123"));
        assert!(label_value("").is_empty());
        assert!(label_value("run-1_A.b").is_empty());
        assert_eq!(label_value("-x").len(), 1);
        assert_eq!(
            label_value(&"x".repeat(64)),
            ["must be no more than 63 characters"]
        );
    }

    #[test]
    fn env_and_port_names() {
        assert!(env_var_name("TCAB_JOB_ID").is_empty());
        assert!(env_var_name("my.env-name").is_empty());
        assert_eq!(env_var_name("1ABC").len(), 1);
        assert_eq!(env_var_name("A=B").len(), 1);
        assert_eq!(env_var_name(".."), ["must not be '..'"]);
        assert!(port_name("http").is_empty());
        assert_eq!(
            port_name("8080"),
            ["must contain at least one letter (a-z)"]
        );
        assert_eq!(port_name("a--b"), ["must not contain consecutive hyphens"]);
        assert_eq!(
            port_name("abcdefghijklmnop"),
            ["must be no more than 15 characters"]
        );
    }

    #[test]
    fn metadata_errors() {
        let mut errs = ErrorList::new();
        validate_object_meta(
            &json!({"name": "Bad", "labels": {"ok": "-bad"}, "annotations": {"x/y/z": "1"}}),
            &mut errs,
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["metadata.name", "metadata.labels", "metadata.annotations"]
        );
        let mut errs = ErrorList::new();
        validate_object_meta(
            &json!({"name": "a", "annotations": {"k": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT)}}),
            &mut errs,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].etype.reason(), "FieldValueTooLong");
        let mut errs = ErrorList::new();
        validate_object_meta(&json!({}), &mut errs);
        assert_eq!(
            errs[0].to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
    }
}
