//! The Kubernetes API bodies every fake API server writes:
//! failure and success `Status` objects, lists, and label-selector matching.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A failure `Status` object.
pub fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A failure `Status` answer: `code` with [`failure`]'s body.
pub fn failure_response(code: u16, reason: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(failure(code, reason, message))).into_response()
}

/// A success `Status` object, as a DELETE may answer.
pub fn success() -> Value {
    json!({"kind": "Status", "status": "Success", "code": 200})
}

/// A list (`kind` such as `JobList`, of `api_version`) at `resource_version`.
pub fn list(api_version: &str, kind: &str, resource_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"resourceVersion": resource_version}, "items": items})
}

/// Whether an object's labels match a label selector, every term of it:
/// `k=v` (or `k==v`), `k!=v`, `k in (v1,v2)`, `k notin (v1,v2)`, `k` (the
/// label exists) and `!k` (it does not), as the API server reads them.
pub fn labels_match(obj: &Value, selector: &str) -> bool {
    let label = |k: &str| obj["metadata"]["labels"][k.trim()].as_str();
    let set = |values: &str| -> Vec<String> {
        let values = values.trim().trim_start_matches('(').trim_end_matches(')');
        values.split(',').map(|v| v.trim().to_owned()).collect()
    };
    selector_terms(selector).all(|term| {
        if let Some((k, values)) = term.split_once(" notin ") {
            return label(k).is_none_or(|v| !set(values).iter().any(|s| s == v));
        }
        if let Some((k, values)) = term.split_once(" in ") {
            return label(k).is_some_and(|v| set(values).iter().any(|s| s == v));
        }
        if let Some((k, v)) = term.split_once("!=") {
            return label(k) != Some(v.trim());
        }
        if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            return label(k) == Some(v.trim());
        }
        match term.strip_prefix('!') {
            Some(k) => label(k).is_none(),
            None => label(term).is_some(),
        }
    })
}

/// A selector's terms: split at the commas outside a set's parentheses.
fn selector_terms(selector: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0_u32;
    selector
        .split(move |c| match c {
            '(' => {
                depth += 1;
                false
            }
            ')' => {
                depth = depth.saturating_sub(1);
                false
            }
            ',' => depth == 0,
            _ => false,
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equality_selector_matches_every_term() {
        let pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        assert!(labels_match(&pod, "a=1,b=2"));
        assert!(labels_match(&pod, ""));
        assert!(!labels_match(&pod, "a=1,b=3"));
        assert!(labels_match(&pod, "a==1,b!=3"));
        assert!(!labels_match(&pod, "a!=1"));
    }

    #[test]
    fn existence_terms_ask_whether_the_label_is_there() {
        let pod = json!({"metadata": {"labels": {"tcab.dev/job-id": "b"}}});
        assert!(labels_match(&pod, "tcab.dev/job-id"));
        assert!(!labels_match(&pod, "!tcab.dev/job-id"));
        assert!(labels_match(&pod, "!other"));
        assert!(!labels_match(&pod, "other"));
    }

    #[test]
    fn a_set_selector_matches_any_value_of_its_set() {
        let pod = json!({"metadata": {"labels": {"tcab.dev/job-id": "b", "x": "1"}}});
        assert!(labels_match(&pod, "tcab.dev/job-id in (a,b)"));
        assert!(labels_match(&pod, "tcab.dev/job-id in (b),x=1"));
        assert!(!labels_match(&pod, "tcab.dev/job-id in (a,c)"));
        assert!(!labels_match(&pod, "tcab.dev/job-id in (a,b),x=2"));
        assert!(
            !labels_match(&pod, "y in (b)"),
            "a missing label is in no set"
        );
    }

    #[test]
    fn a_failure_names_its_code_and_reason() {
        let body = failure(404, "NotFound", "gone");
        assert_eq!(
            (body["code"].as_u64(), &body["reason"]),
            (Some(404), &json!("NotFound"))
        );
        assert_eq!(failure_response(404, "NotFound", "gone").status(), 404);
    }
}
