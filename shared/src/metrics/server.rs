//! The HTTP server of `/metrics`, `/healthz`, `/readyz` and `/status`,
//! bound only when `TCAB_DISPATCHER_METRICS_ADDR` is set.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;

use super::*;
/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error(
        "cannot listen on {addr} for /metrics, /healthz, /readyz and /status (TCAB_DISPATCHER_METRICS_ADDR): {error}"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// The endpoints being served; dropping it stops them.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// The address the endpoints listen on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Served {
    exporter: Exporter,
    health: Health,
    status: StatusSource,
}

async fn metrics(State(served): State<Arc<Served>>) -> impl IntoResponse {
    common().set_view_current(served.health.view_current());
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        served.exporter.encode(),
    )
}

fn probe(result: Result<String, String>) -> (StatusCode, String) {
    match result {
        Ok(word) => (StatusCode::OK, format!("{word}\n")),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn healthz(State(served): State<Arc<Served>>) -> impl IntoResponse {
    probe(served.health.live())
}

async fn readyz(State(served): State<Arc<Served>>) -> impl IntoResponse {
    probe(served.health.ready())
}

async fn status_document(State(served): State<Arc<Served>>) -> impl IntoResponse {
    let health = &served.health;
    Json(
        served
            .status
            .document(health.ready().is_ok(), health.view_current()),
    )
}

/// Binds `addr` and serves `/metrics` (the exporter, with
/// `tcab_dispatcher_view_current` read from `health` at each scrape),
/// `/healthz`, `/readyz` and `/status` (the container's status document,
/// JSON) on a task of its own until the [`Endpoint`] is dropped.
pub async fn serve(
    addr: SocketAddr,
    exporter: Exporter,
    health: Health,
    status: StatusSource,
) -> Result<Endpoint, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| ServeError::Bind { addr, error })?;
    let local = listener
        .local_addr()
        .map_err(|error| ServeError::Bind { addr, error })?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status_document))
        .with_state(Arc::new(Served {
            exporter,
            health,
            status,
        }));
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    tracing::info!(addr = %local, "serving /metrics, /healthz, /readyz and /status on http://{local}");
    Ok(Endpoint { addr: local, task })
}

/// [`serve`] when an address is configured; nothing listens otherwise.
pub async fn serve_if(
    addr: Option<SocketAddr>,
    exporter: Exporter,
    health: Health,
    status: StatusSource,
) -> Result<Option<Endpoint>, ServeError> {
    match addr {
        Some(addr) => serve(addr, exporter, health, status).await.map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_cache::OwnedJobs;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let response = reqwest::get(format!("http://{addr}{path}"))
            .await
            .expect("the endpoint answers");
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.text().await.expect("body"))
    }

    #[tokio::test]
    async fn the_endpoints_answer_over_http() {
        let health = Health::new(Duration::from_secs(300));
        let endpoint = serve(
            "127.0.0.1:0".parse().unwrap(),
            Exporter::new(common()),
            health.clone(),
            StatusSource::new(
                "tcab-reaper",
                || serde_json::json!({"last_sweep": {"removed": 2}}),
            ),
        )
        .await
        .expect("serves");
        let addr = endpoint.addr();
        assert_ne!(addr.port(), 0);

        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!((status, body.trim()), (503, "the Job view has not started"));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        let view = OwnedJobs::listed([]);
        health.watch_view(view.clone());
        health.start_loops(&["reap"]);
        health.ticked("reap");
        assert_eq!(get(addr, "/readyz").await.0, 200);

        let (status, kind, body) = get(addr, "/status").await;
        assert_eq!((status, kind.as_str()), (200, "application/json"));
        let doc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(doc["binary"], "tcab-reaper");
        assert_eq!(doc["ready"], true);
        assert_eq!(doc["view_current"], true);
        assert_eq!(doc["last_sweep"]["removed"], 2);

        let (status, kind, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
        assert!(
            body.contains("\ntcab_dispatcher_view_current 1\n"),
            "{body}"
        );
        view.mark_failed("boom");
        let (_, _, body) = get(addr, "/metrics").await;
        assert!(
            body.contains("\ntcab_dispatcher_view_current 0\n"),
            "{body}"
        );
        assert_eq!(get(addr, "/readyz").await.0, 503);
        let (_, _, body) = get(addr, "/status").await;
        assert!(body.contains(r#""ready":false"#), "{body}");
        assert_eq!(get(addr, "/nothing").await.0, 404);

        drop(endpoint);
        let gone = wait_refused(addr).await;
        assert!(gone, "dropping the endpoint stops the server");
    }

    /// Whether connecting to `addr` is refused within a few seconds.
    async fn wait_refused(addr: SocketAddr) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }

    #[tokio::test]
    async fn an_address_in_use_is_a_clear_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let error = serve(
            addr,
            Exporter::new(&Common::new()),
            Health::new(Duration::from_secs(1)),
            StatusSource::empty("tcab-reaper"),
        )
        .await
        .expect_err("the port is taken");
        let text = error.to_string();
        assert!(
            text.contains(&addr.to_string()) && text.contains("TCAB_DISPATCHER_METRICS_ADDR"),
            "{text}"
        );
        assert!(
            serve_if(
                None,
                Exporter::new(&Common::new()),
                Health::new(Duration::from_secs(1)),
                StatusSource::empty("tcab-reaper"),
            )
            .await
            .expect("nothing to bind")
            .is_none()
        );
    }
}
