//! The agent's admin API on loopback (plain HTTP, JSON), and its client.
//!
//! | call | what |
//! |---|---|
//! | `GET /nodes` | each node: name, up, kubelet port, health |
//! | `POST /nodes/{node}/lose` | the node is lost: heartbeats, status, watch, log server and programs stop |
//! | `POST /nodes/{node}/restore` | it comes back (a reboot: pods that were running end), or its stopped kubelet starts again (its pods go on) |
//! | `POST /nodes/{node}/stop-kubelet` | the kubelet stops, its programs run on: nothing reaches the API until `restore` |
//! | `POST /nodes/{node}/restart-kubelet` | the kubelet restarts with its programs running, registers again and goes on with its pods |
//! | `POST /nodes/{node}/health` `{"memoryPressure": true, ...}` | the conditions it reports |
//! | `POST /pods/{ns}/{name}/evict` `{"message"?}` | node-pressure eviction |
//! | `POST /pods/{ns}/{name}/oom` | OOM kill (`OOMKilled`, 137) |
//! | `POST /pods/{ns}/{name}/crash` `{"exit_code": N}` | the container exits with N |
//! | `POST /pods/{ns}/{name}/freeze` `{"container": C}` | a local binary's process is frozen (SIGSTOP) |
//! | `POST /pods/{ns}/{name}/hang` | the program ignores SIGTERM from now on |
//! | `POST /pods/{ns}/{name}/kill` `{"grace_seconds": N}` | the runtime stops the container: SIGTERM, SIGKILL after N s (at least 2); the pod is not deleted |
//! | `POST /images/unpullable` `{"image": "...", "unpullable": true}` | pulls fail (or work again) |
//! | `GET /pods/{ns}/{name}/logs/{container}` | the lines written so far (JSON array) |
//!
//! A refusal is `404 {"error": "..."}` (no such node or pod here) or `409`
//! (the container does not run).

use crate::agent::Handle;
use crate::node::Health;
use crate::worker::Signal;
use anyhow::Context;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::task::JoinHandle;

fn answer(r: Result<(), String>) -> Response {
    match r {
        Ok(()) => Json(json!({"ok": true})).into_response(),
        Err(e) if e.contains("not running") || e.contains("is ending") => {
            (StatusCode::CONFLICT, Json(json!({"error": e}))).into_response()
        }
        Err(e) => (StatusCode::NOT_FOUND, Json(json!({"error": e}))).into_response(),
    }
}

fn body(b: Option<Json<Value>>) -> Value {
    b.map(|Json(v)| v).unwrap_or(Value::Null)
}

pub(crate) async fn serve(
    addr: SocketAddr,
    h: Handle,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "the admin API listens on loopback only, not {addr}"
    );
    let app = axum::Router::new()
        .route("/nodes", get(|State(h): State<Handle>| async move { Json(json!(h.node_states())) }))
        .route(
            "/nodes/{node}/lose",
            post(|State(h): State<Handle>, Path(n): Path<String>| async move { answer(h.lose_node(&n)) }),
        )
        .route(
            "/nodes/{node}/restore",
            post(|State(h): State<Handle>, Path(n): Path<String>| async move {
                answer(h.restore_node(&n).await)
            }),
        )
        .route(
            "/nodes/{node}/stop-kubelet",
            post(|State(h): State<Handle>, Path(n): Path<String>| async move { answer(h.stop_kubelet(&n)) }),
        )
        .route(
            "/nodes/{node}/restart-kubelet",
            post(|State(h): State<Handle>, Path(n): Path<String>| async move {
                answer(h.restart_kubelet(&n).await)
            }),
        )
        .route(
            "/nodes/{node}/health",
            post(|State(h): State<Handle>, Path(n): Path<String>, b: Option<Json<Value>>| async move {
                match serde_json::from_value::<Health>(body(b)) {
                    Ok(health) => answer(h.set_health(&n, health)),
                    Err(e) => (StatusCode::BAD_REQUEST, Json(json!({"error": e.to_string()}))).into_response(),
                }
            }),
        )
        .route(
            "/pods/{ns}/{name}/evict",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>, b: Option<Json<Value>>| async move {
                let message = body(b)["message"].as_str().map(str::to_string);
                answer(h.evict(&ns, &name, message))
            }),
        )
        .route(
            "/pods/{ns}/{name}/oom",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>| async move {
                answer(h.signal(&ns, &name, Signal::Oom))
            }),
        )
        .route(
            "/pods/{ns}/{name}/crash",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>, b: Option<Json<Value>>| async move {
                let exit_code = body(b)["exit_code"].as_i64().unwrap_or(1) as i32;
                answer(h.signal(&ns, &name, Signal::Crash { exit_code }))
            }),
        )
        .route(
            "/pods/{ns}/{name}/freeze",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>, b: Option<Json<Value>>| async move {
                let container = body(b)["container"].as_str().unwrap_or("").to_string();
                answer(h.signal(&ns, &name, Signal::Freeze { container }))
            }),
        )
        .route(
            "/pods/{ns}/{name}/hang",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>| async move {
                answer(h.signal(&ns, &name, Signal::Hang))
            }),
        )
        .route(
            "/pods/{ns}/{name}/kill",
            post(|State(h): State<Handle>, Path((ns, name)): Path<(String, String)>, b: Option<Json<Value>>| async move {
                let grace = body(b)["grace_seconds"].as_f64().unwrap_or(0.0).max(0.0);
                answer(h.signal(&ns, &name, Signal::Kill { grace: std::time::Duration::from_secs_f64(grace) }))
            }),
        )
        .route(
            "/pods/{ns}/{name}/logs/{container}",
            get(|State(h): State<Handle>, Path((ns, name, c)): Path<(String, String, String)>| async move {
                match h.log_lines(&ns, &name, &c) {
                    Some(lines) => Json(json!(lines)).into_response(),
                    None => answer(Err(format!("no pod {ns}/{name} here"))),
                }
            }),
        )
        .route(
            "/images/unpullable",
            post(|State(h): State<Handle>, Json(b): Json<Value>| async move {
                let Some(image) = b["image"].as_str() else {
                    return (StatusCode::BAD_REQUEST, Json(json!({"error": "image is required"}))).into_response();
                };
                h.set_unpullable(image, b["unpullable"].as_bool().unwrap_or(true));
                answer(Ok(()))
            }),
        )
        .with_state(h);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin API on {addr}"))?;
    let addr = listener.local_addr().context("the admin address")?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin API stopped");
        }
    });
    Ok((addr, task))
}

/// A client of the admin API.
#[derive(Clone)]
pub struct AdminClient {
    base: String,
    http: reqwest::Client,
}

impl AdminClient {
    /// For the admin API at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: &str) -> Self {
        AdminClient {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let code = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        anyhow::ensure!(code.is_success(), "POST {path}: {code} {}", v["error"]);
        Ok(v)
    }

    /// Every node's state.
    pub async fn nodes(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}/nodes", self.base))
            .send()
            .await?
            .json()
            .await?)
    }
    /// Loses a node.
    pub async fn lose_node(&self, node: &str) -> anyhow::Result<()> {
        self.post(&format!("/nodes/{node}/lose"), json!({}))
            .await
            .map(drop)
    }
    /// Brings a lost node back (a reboot), or starts a stopped kubelet again.
    pub async fn restore_node(&self, node: &str) -> anyhow::Result<()> {
        self.post(&format!("/nodes/{node}/restore"), json!({}))
            .await
            .map(drop)
    }
    /// Stops a node's kubelet, its programs running on.
    pub async fn stop_kubelet(&self, node: &str) -> anyhow::Result<()> {
        self.post(&format!("/nodes/{node}/stop-kubelet"), json!({}))
            .await
            .map(drop)
    }
    /// Restarts a node's kubelet with its programs running.
    pub async fn restart_kubelet(&self, node: &str) -> anyhow::Result<()> {
        self.post(&format!("/nodes/{node}/restart-kubelet"), json!({}))
            .await
            .map(drop)
    }
    /// Sets a node's conditions.
    pub async fn set_health(&self, node: &str, health: Health) -> anyhow::Result<()> {
        self.post(&format!("/nodes/{node}/health"), json!(health))
            .await
            .map(drop)
    }
    /// Node-pressure eviction.
    pub async fn evict(&self, ns: &str, pod: &str) -> anyhow::Result<()> {
        self.post(&format!("/pods/{ns}/{pod}/evict"), json!({}))
            .await
            .map(drop)
    }
    /// OOM kill.
    pub async fn oom_kill(&self, ns: &str, pod: &str) -> anyhow::Result<()> {
        self.post(&format!("/pods/{ns}/{pod}/oom"), json!({}))
            .await
            .map(drop)
    }
    /// The container exits with `exit_code`.
    pub async fn crash(&self, ns: &str, pod: &str, exit_code: i32) -> anyhow::Result<()> {
        self.post(
            &format!("/pods/{ns}/{pod}/crash"),
            json!({"exit_code": exit_code}),
        )
        .await
        .map(drop)
    }
    /// A container of a local binary is frozen (SIGSTOP): a wedged process
    /// for its liveness probe to find.
    pub async fn freeze(&self, ns: &str, pod: &str, container: &str) -> anyhow::Result<()> {
        self.post(
            &format!("/pods/{ns}/{pod}/freeze"),
            json!({"container": container}),
        )
        .await
        .map(drop)
    }
    /// The program ignores SIGTERM from now on.
    pub async fn hang(&self, ns: &str, pod: &str) -> anyhow::Result<()> {
        self.post(&format!("/pods/{ns}/{pod}/hang"), json!({}))
            .await
            .map(drop)
    }
    /// The runtime stops the container: SIGTERM, SIGKILL after
    /// `grace_seconds` (at least 2 s); the pod is not deleted.
    pub async fn kill(&self, ns: &str, pod: &str, grace_seconds: f64) -> anyhow::Result<()> {
        self.post(
            &format!("/pods/{ns}/{pod}/kill"),
            json!({"grace_seconds": grace_seconds}),
        )
        .await
        .map(drop)
    }
    /// Pulls of `image` fail (or work again).
    pub async fn set_unpullable(&self, image: &str, unpullable: bool) -> anyhow::Result<()> {
        self.post(
            "/images/unpullable",
            json!({"image": image, "unpullable": unpullable}),
        )
        .await
        .map(drop)
    }
}
