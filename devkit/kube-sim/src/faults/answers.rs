//! How a faulted API request is answered, as the API server answers in the
//! same situation.

use super::Faults;
use crate::status::ApiError;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// 500 InternalError, as `apierrors.NewInternalError` renders a storage
/// failure: `Internal error occurred: CAUSE`, the cause repeated in
/// `details.causes`.
pub fn internal_error() -> ApiError {
    let cause = "injected fault";
    let mut e = ApiError::internal(format!("Internal error occurred: {cause}"));
    e.details = Some(json!({"causes": [{"message": cause}]}));
    e
}

/// 503 ServiceUnavailable (a Status; `Retry-After` when given).
pub fn unavailable(retry_after: Option<u64>) -> ApiError {
    ApiError {
        code: 503,
        reason: "ServiceUnavailable",
        message: "the server is currently unable to handle the request (injected fault)".into(),
        details: retry_after.map(|s| json!({"retryAfterSeconds": s})),
        retry_after,
    }
}

/// The flow-schema and priority-level UIDs the sim's rejections name (APF
/// sends the UIDs, not the names, of what classified the request).
const FLOW_SCHEMA_UID: &str = "9c1c7d55-5a0e-4b7e-9b1a-4f1f0f6c1a01";
const PRIORITY_LEVEL_UID: &str = "9c1c7d55-5a0e-4b7e-9b1a-4f1f0f6c1a02";

/// 429 as API Priority and Fairness (and the older max-in-flight filter)
/// rejects a request: `Retry-After`, a plain-text body written by Go's
/// `http.Error`, and APF's classification headers. Not a Status: clients
/// see only the code and the text.
pub fn apf_rejection(retry_after: u64) -> Response {
    let mut res = (
        StatusCode::TOO_MANY_REQUESTS,
        "Too many requests, please try again later.\n",
    )
        .into_response();
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

/// Accepts the request and never answers. The body is read first: hyper
/// then watches the connection, and drops this future (and the hung count
/// with it) as soon as the client closes it; a restart's connection cut
/// does the same.
pub async fn hang(faults: &Faults, body: Body, max_body: usize) -> Response {
    let _ = axum::body::to_bytes(body, max_body).await;
    let _hung = faults.hang_started();
    std::future::pending::<Response>().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_look_like_the_api_servers() {
        let s = internal_error().to_status();
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str()),
            (Some(500), Some("InternalError"))
        );
        assert_eq!(s["message"], "Internal error occurred: injected fault");
        assert_eq!(s["details"]["causes"][0]["message"], "injected fault");
        let u = unavailable(Some(2));
        assert_eq!((u.code, u.retry_after), (503, Some(2)));
        assert_eq!(u.to_status()["details"]["retryAfterSeconds"], 2);
        let r = apf_rejection(4);
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers()["retry-after"], "4");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    }
}
