//! How a faulted API request is answered, as the API server answers in the
//! same situation. Plain `http` responses, so any server can send them.

use crate::book::FaultBook;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

/// A `v1.Status` failure body.
pub fn status_json(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

fn status_response(code: StatusCode, body: &Value, retry_after: Option<u64>) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from(body.to_string()));
    *res.status_mut() = code;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    res
}

/// The cause an injected 500 names.
pub const INJECTED_CAUSE: &str = "injected fault";

/// 500 InternalError, as `apierrors.NewInternalError` renders a storage
/// failure: `Internal error occurred: CAUSE`, the cause repeated in
/// `details.causes`.
pub fn internal_error() -> Response<Bytes> {
    let body = status_json(
        500,
        "InternalError",
        &format!("Internal error occurred: {INJECTED_CAUSE}"),
        Some(json!({"causes": [{"message": INJECTED_CAUSE}]})),
    );
    status_response(StatusCode::INTERNAL_SERVER_ERROR, &body, None)
}

/// 503 ServiceUnavailable (a Status; `Retry-After` when given).
pub fn unavailable(retry_after: Option<u64>) -> Response<Bytes> {
    let body = status_json(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request (injected fault)",
        retry_after.map(|s| json!({"retryAfterSeconds": s})),
    );
    status_response(StatusCode::SERVICE_UNAVAILABLE, &body, retry_after)
}

/// The flow-schema and priority-level UIDs a simulated rejection names
/// (APF sends the UIDs, not the names, of what classified the request).
const FLOW_SCHEMA_UID: &str = "9c1c7d55-5a0e-4b7e-9b1a-4f1f0f6c1a01";
const PRIORITY_LEVEL_UID: &str = "9c1c7d55-5a0e-4b7e-9b1a-4f1f0f6c1a02";

/// The body API Priority and Fairness (and the older max-in-flight
/// filter) rejects with: Go's `http.Error` text and its newline.
pub const APF_REJECTION_BODY: &str = "Too many requests, please try again later.\n";

/// 429 as API Priority and Fairness (and the older max-in-flight filter)
/// rejects a request: `Retry-After`, a plain-text body written by Go's
/// `http.Error`, and APF's classification headers. Not a Status: clients
/// see only the code and the text.
pub fn apf_rejection(retry_after: u64) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from_static(APF_REJECTION_BODY.as_bytes()));
    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = res.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        "x-kubernetes-pf-flowschema-uid",
        HeaderValue::from_static(FLOW_SCHEMA_UID),
    );
    h.insert(
        "x-kubernetes-pf-prioritylevel-uid",
        HeaderValue::from_static(PRIORITY_LEVEL_UID),
    );
    res
}

/// Accepts the request and never answers. The body is read first (up to
/// `max_body` bytes): the server then watches the connection, and drops
/// this future (and the hung count with it) as soon as the client closes
/// it; a connection cut does the same.
pub async fn hang<B, T>(book: &FaultBook, body: B, max_body: usize) -> T
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = http_body_util::Limited::new(body, max_body).collect().await;
    let _hung = book.hang_started();
    std::future::pending::<T>().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(r: &Response<Bytes>) -> Value {
        serde_json::from_slice(r.body()).unwrap()
    }

    #[test]
    fn answers_look_like_the_api_servers() {
        let r = internal_error();
        assert_eq!(r.status(), 500);
        let s = json_of(&r);
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str(), s["kind"].as_str()),
            (Some(500), Some("InternalError"), Some("Status"))
        );
        assert_eq!(s["message"], "Internal error occurred: injected fault");
        assert_eq!(s["details"]["causes"][0]["message"], "injected fault");
        let u = unavailable(Some(2));
        assert_eq!(
            (
                u.status().as_u16(),
                u.headers()["retry-after"].to_str().ok()
            ),
            (503, Some("2"))
        );
        assert_eq!(json_of(&u)["details"]["retryAfterSeconds"], 2);
        assert!(!unavailable(None).headers().contains_key("retry-after"));
        let r = apf_rejection(4);
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers()["retry-after"], "4");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.body().as_ref(), APF_REJECTION_BODY.as_bytes());
    }
}
