//! A fake Kubernetes API that serves pod creates and deletes and keeps every
//! request it saw.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tcab_testkit::kube::failure_response;

/// One request the fake API saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub authorization: String,
    pub body: Value,
}

/// The fake API: namespace `refused` answers 403, a pod named `gone` 404;
/// a created pod is named from its `generateName` plus `x1`.
pub struct FakeApi {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

type Seens = Arc<Mutex<Vec<Seen>>>;

fn record(seen: &Seens, method: Method, path: String, headers: &HeaderMap, body: &Bytes) {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = serde_json::from_slice(body).unwrap_or(Value::Null);
    seen.lock().unwrap().push(Seen {
        method,
        path,
        authorization,
        body,
    });
}

async fn create(
    State(seen): State<Seens>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(
        &seen,
        Method::POST,
        format!("/api/v1/namespaces/{ns}/pods"),
        &headers,
        &body,
    );
    if ns == "refused" {
        return failure_response(
            403,
            "Forbidden",
            "pods is forbidden: User \"system:serviceaccount:refused:default\" cannot create resource \"pods\"",
        );
    }
    let mut pod: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = format!(
        "{}x1",
        pod["metadata"]["generateName"].as_str().unwrap_or("")
    );
    pod["metadata"]["name"] = json!(name);
    (StatusCode::CREATED, axum::Json(pod)).into_response()
}

async fn remove(
    State(seen): State<Seens>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(
        &seen,
        Method::DELETE,
        format!("/api/v1/namespaces/{ns}/pods/{name}"),
        &headers,
        &body,
    );
    if name == "gone" {
        return failure_response(404, "NotFound", "pods \"gone\" not found");
    }
    axum::Json(json!({"kind": "Pod", "metadata": {"name": name}})).into_response()
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let seen: Seens = Arc::default();
        let app = Router::new()
            .route("/api/v1/namespaces/{ns}/pods", post(create))
            .route("/api/v1/namespaces/{ns}/pods/{name}", delete(remove))
            .with_state(seen.clone());
        let url = tcab_testkit::http::serve_url(app).await;
        FakeApi { url, seen }
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}
