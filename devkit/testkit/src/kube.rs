//! The Kubernetes API bodies every fake API server or mocked client writes:
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

/// Whether an object's labels match an equality selector (`k=v,k2=v2`).
pub fn labels_match(obj: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .filter(|s| !s.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => obj["metadata"]["labels"][k].as_str() == Some(v),
            None => false,
        })
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
        assert!(!labels_match(&pod, "a"), "only equality terms");
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
