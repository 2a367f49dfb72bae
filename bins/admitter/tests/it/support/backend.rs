//! A mock backend on 127.0.0.1:0: two claim queues, per-lane failure modes,
//! and a hold that keeps run claims waiting until released.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tcab_shared::Lane;
use tokio::sync::watch;

pub const SERVICE_TOKEN: &str = "svc-token";

#[derive(Default)]
struct LaneQueue {
    queued: VecDeque<String>,
    claimed: Vec<String>,
    /// Claim requests received (answered or not).
    requests: u32,
    /// Answer every claim with this status instead.
    fail_with: Option<u16>,
}

#[derive(Default)]
struct Inner {
    run: LaneQueue,
    publish: LaneQueue,
}

#[derive(Clone)]
pub struct MockBackend {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    /// While false, run claims wait (after counting the request).
    run_release: watch::Sender<bool>,
}

#[derive(Clone)]
struct AppState {
    inner: Arc<Mutex<Inner>>,
    run_release: watch::Receiver<bool>,
}

/// The per-job token the mock hands out for a job id.
pub fn token_for(id: &str) -> String {
    format!("tok-{id}")
}

impl MockBackend {
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let (run_release, rx) = watch::channel(true);
        let app = Router::new()
            .route("/jobs/next", post(claim_run))
            .route("/publish-jobs/next", post(claim_publish))
            .with_state(AppState {
                inner: inner.clone(),
                run_release: rx,
            });
        let url = tcab_testkit::http::serve_url(app).await;
        MockBackend {
            url,
            inner,
            run_release,
        }
    }

    fn with_lane<T>(&self, lane: Lane, f: impl FnOnce(&mut LaneQueue) -> T) -> T {
        let mut inner = self.inner.lock().unwrap();
        match lane {
            Lane::Run => f(&mut inner.run),
            Lane::Publish => f(&mut inner.publish),
        }
    }

    /// Queues `n` jobs named `<prefix>-<i>`.
    pub fn queue(&self, lane: Lane, n: usize) {
        let prefix = match lane {
            Lane::Run => "run",
            Lane::Publish => "pub",
        };
        self.with_lane(lane, |q| {
            let start = q.queued.len() + q.claimed.len();
            q.queued
                .extend((start..start + n).map(|i| format!("{prefix}-{i}")));
        });
    }

    pub fn fail_claims(&self, lane: Lane, status: Option<u16>) {
        self.with_lane(lane, |q| q.fail_with = status);
    }

    /// Claim requests received in a lane.
    pub fn requests(&self, lane: Lane) -> u32 {
        self.with_lane(lane, |q| q.requests)
    }

    /// Jobs handed out in a lane, in order.
    pub fn claimed(&self, lane: Lane) -> Vec<String> {
        self.with_lane(lane, |q| q.claimed.clone())
    }

    pub fn queued(&self, lane: Lane) -> usize {
        self.with_lane(lane, |q| q.queued.len())
    }

    /// Makes run claims wait until [`MockBackend::release_runs`].
    pub fn hold_runs(&self) {
        self.run_release.send_replace(false);
    }

    pub fn release_runs(&self) {
        self.run_release.send_replace(true);
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {SERVICE_TOKEN}"))
}

fn error(status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap();
    (
        code,
        axum::Json(json!({"error": {"code": "internal", "message": "injected failure"}})),
    )
        .into_response()
}

/// Counts the request, then pops (or fails) in one step.
#[allow(clippy::result_large_err)]
fn claim(
    state: &AppState,
    lane: Lane,
    headers: &HeaderMap,
    counted: bool,
) -> Result<Option<String>, Response> {
    if !authorized(headers) {
        return Err(error(401));
    }
    let mut inner = state.inner.lock().unwrap();
    let q = match lane {
        Lane::Run => &mut inner.run,
        Lane::Publish => &mut inner.publish,
    };
    if !counted {
        q.requests += 1;
    }
    if let Some(status) = q.fail_with {
        return Err(error(status));
    }
    let Some(id) = q.queued.pop_front() else {
        return Ok(None);
    };
    q.claimed.push(id.clone());
    Ok(Some(id))
}

async fn claim_run(State(state): State<AppState>, headers: HeaderMap) -> Response {
    state.inner.lock().unwrap().run.requests += 1;
    let mut release = state.run_release.clone();
    let _ = release.wait_for(|go| *go).await;
    match claim(&state, Lane::Run, &headers, true) {
        Err(r) => r,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(id)) => axum::Json(json!({"job": {
            "id": id, "token": token_for(&id), "queue_seq": 1, "harness": "h", "model": "m",
            "attempt": 1, "launch_request": {"case": "c"},
            "lease_expires_at": "2026-11-29T17:02:00Z"
        }}))
        .into_response(),
    }
}

async fn claim_publish(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match claim(&state, Lane::Publish, &headers, false) {
        Err(r) => r,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(id)) => axum::Json(json!({"publish_job": {
            "id": id, "token": token_for(&id), "request": {"suite": "main"},
            "lease_expires_at": "2026-11-29T17:02:00Z"
        }}))
        .into_response(),
    }
}
