//! Raw JSON calls to the API server through a kube-rs client: the agent
//! reads and writes whole objects as JSON, so fields newer than the typed
//! structs survive a read-modify-write.

use serde_json::Value;
use std::time::Duration;

/// A failed call: the API's status code and message, or a transport error
/// (code 0).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} ({code})")]
pub struct ApiError {
    /// HTTP status; 0 when the request got no answer.
    pub code: u16,
    /// The Status message, or the transport error.
    pub message: String,
}

impl ApiError {
    /// 404.
    pub fn not_found(&self) -> bool {
        self.code == 404
    }
    /// 409.
    pub fn conflict(&self) -> bool {
        self.code == 409
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => ApiError {
                code: s.code,
                message: s.message,
            },
            other => ApiError {
                code: 0,
                message: crate::error_chain(&other),
            },
        }
    }
}

/// How long one call may take (a watch is not a call).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

async fn send(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    body: Option<&Value>,
    content_type: &str,
) -> Result<Value, ApiError> {
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let mut req = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, content_type);
    }
    let req = req.body(bytes).map_err(|e| ApiError {
        code: 0,
        message: e.to_string(),
    })?;
    match tokio::time::timeout(CALL_TIMEOUT, client.request::<Value>(req)).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(_) => Err(ApiError {
            code: 0,
            message: format!("no answer within {CALL_TIMEOUT:?}"),
        }),
    }
}

/// GET; `None` on 404.
pub async fn get(client: &kube::Client, path: &str) -> Result<Option<Value>, ApiError> {
    match send(client, http::Method::GET, path, None, "").await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// POST a JSON body.
pub async fn post(client: &kube::Client, path: &str, body: &Value) -> Result<Value, ApiError> {
    send(
        client,
        http::Method::POST,
        path,
        Some(body),
        "application/json",
    )
    .await
}

/// PUT a JSON body.
pub async fn put(client: &kube::Client, path: &str, body: &Value) -> Result<Value, ApiError> {
    send(
        client,
        http::Method::PUT,
        path,
        Some(body),
        "application/json",
    )
    .await
}

/// PATCH with a strategic merge patch.
pub async fn patch_strategic(
    client: &kube::Client,
    path: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    send(
        client,
        http::Method::PATCH,
        path,
        Some(body),
        "application/strategic-merge-patch+json",
    )
    .await
}

/// DELETE with a body of DeleteOptions.
pub async fn delete(client: &kube::Client, path: &str, options: &Value) -> Result<Value, ApiError> {
    send(
        client,
        http::Method::DELETE,
        path,
        Some(options),
        "application/json",
    )
    .await
}

/// `/api/v1/namespaces/{ns}/pods/{name}`.
pub fn pod_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}")
}
