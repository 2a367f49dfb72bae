//! The one mock backend: the service routes every binary calls, on a free
//! loopback port, over one state a test reads and changes directly.
//!
//! - Claims (the admitter): two queues, `POST /jobs/next` and
//!   `POST /publish-jobs/next`, per-lane injected failures, and a hold that
//!   keeps run claims waiting (after counting them) until released.
//! - Leases, reads and reports (the lease-keeper): rows of runs and publishes
//!   with a state, a lease and a per-job token; renewals, `GET .../active`,
//!   `GET /jobs/{id}`, status and lost reports, on a test clock (`now`).
//! - `GET /jobs/active` (also the reaper's orphan sweep), or an injected
//!   failure of it.
//!
//! States are the wire spellings ("running", "failed", ...): the kit depends
//! on no tcab crate; each binary's tests wrap it with typed helpers.

use crate::http;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// The service token the mock accepts.
pub const SERVICE_TOKEN: &str = "svc-token";
/// The lease a claim or a renewal grants.
pub const LEASE: SignedDuration = SignedDuration::from_secs(120);
/// The test clock's start.
pub const START: &str = "2026-11-29T17:00:00Z";

/// The per-job token the mock hands out with a claim of `id`.
pub fn token_for(id: &str) -> String {
    format!("tok-{id}")
}

/// Queued, then dispatched, starting, running, validating or storing.
fn is_live(state: &str) -> bool {
    !matches!(state, "succeeded" | "failed" | "cancelled")
}

/// Dispatched or past it: what the backend expects a lease for.
fn is_driven(state: &str) -> bool {
    matches!(
        state,
        "dispatched" | "starting" | "running" | "validating" | "storing"
    )
}

/// A claim lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claims {
    Run,
    Publish,
}

/// One lane's claim queue.
#[derive(Debug, Default)]
pub struct ClaimQueue {
    pub queued: VecDeque<String>,
    /// Jobs handed out, in order.
    pub claimed: Vec<String>,
    /// Claim requests received (answered or not).
    pub requests: u32,
    /// Answer every claim with this status instead.
    pub fail_with: Option<u16>,
    /// Merged into every claimed job's object while set (a key set to null
    /// is removed): a claim committed whose answer is poisoned.
    pub poison: Option<Value>,
}

/// A run or publish job as the backend holds it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The wire spelling of its state.
    pub state: String,
    pub lease: Option<Timestamp>,
    pub token: String,
    pub publish: bool,
}

#[derive(Debug, Default)]
pub struct BackendState {
    /// Every service call answers 503.
    pub down: bool,
    pub now: Option<Timestamp>,
    pub rows: BTreeMap<String, Row>,
    pub run_claims: ClaimQueue,
    pub publish_claims: ClaimQueue,
    pub run_renewals: Vec<Vec<String>>,
    pub publish_renewals: Vec<Vec<String>>,
    /// (id, token presented, body)
    pub status_reports: Vec<(String, String, Value)>,
    pub lost_reports: Vec<(String, String)>,
    pub publish_lost_reports: Vec<(String, String)>,
    /// `POST /publish-jobs/{id}/result`: (id, token presented, body).
    pub publish_results: Vec<(String, String, Value)>,
    /// `GET /jobs/active` calls answered (or failed on purpose).
    pub active_reads: usize,
    /// Answer `GET /jobs/active` with this status instead.
    pub active_fails: Option<u16>,
    /// Answer run renewals with 204 (not the contract's 200 body).
    pub run_renewal_no_content: bool,
    /// Answer publish renewals with 204.
    pub publish_renewal_no_content: bool,
    /// How long a status report takes to be answered.
    pub status_delay: Duration,
    /// Status reports received (before any delay).
    pub status_received: usize,
    /// Status reports answered (a report whose caller went away is not).
    pub status_answered: usize,
    /// Answer the status and lost reports of these jobs with this status
    /// (a backend that keeps refusing one job), changing nothing.
    pub refuse_reports: BTreeMap<String, u16>,
    /// Raw entries appended to `GET /jobs/active` (e.g. a state this
    /// dispatcher does not know).
    pub active_extra: Vec<Value>,
}

impl BackendState {
    pub fn claims(&mut self, lane: Claims) -> &mut ClaimQueue {
        match lane {
            Claims::Run => &mut self.run_claims,
            Claims::Publish => &mut self.publish_claims,
        }
    }
}

#[derive(Clone)]
pub struct MockBackend {
    pub url: String,
    pub state: Arc<Mutex<BackendState>>,
    /// While false, run claims wait (after counting the request).
    run_release: watch::Sender<bool>,
}

#[derive(Clone)]
struct App {
    state: Arc<Mutex<BackendState>>,
    run_release: watch::Receiver<bool>,
}

type Shared = State<App>;

impl MockBackend {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(BackendState {
            now: Some(START.parse().expect("a timestamp")),
            ..Default::default()
        }));
        let (run_release, rx) = watch::channel(true);
        let app = Router::new()
            .route("/jobs/next", post(claim_run))
            .route("/publish-jobs/next", post(claim_publish))
            .route("/jobs/leases", post(renew_runs))
            .route("/publish-jobs/leases", post(renew_publishes))
            .route("/jobs/active", get(active_runs))
            .route("/publish-jobs/active", get(active_publishes))
            .route("/jobs/{id}", get(get_job))
            .route("/jobs/{id}/status", post(status))
            .route("/jobs/{id}/lost", post(lost))
            .route("/publish-jobs/{id}/lost", post(publish_lost))
            .route("/publish-jobs/{id}/result", post(publish_result))
            .with_state(App {
                state: state.clone(),
                run_release: rx,
            });
        let url = http::serve_url(app).await;
        MockBackend {
            url,
            state,
            run_release,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, BackendState> {
        self.state.lock().expect("mock backend state")
    }

    // ------------------------------------------------------------ clock

    pub fn now(&self) -> Timestamp {
        self.lock().now.expect("a clock")
    }

    pub fn advance(&self, secs: i64) {
        let mut s = self.lock();
        s.now = Some(s.now.expect("a clock") + SignedDuration::from_secs(secs));
    }

    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    // ------------------------------------------------------------ rows

    /// A run claimed now, in `state`, with the claim's lease.
    pub fn add_run_row(&self, id: &str, state: &str, token: &str) {
        self.add_row(id, state, token, false);
    }

    /// A publish claimed now (dispatched), with the claim's lease.
    pub fn add_publish_row(&self, id: &str, token: &str) {
        self.add_row(id, "dispatched", token, true);
    }

    fn add_row(&self, id: &str, state: &str, token: &str, publish: bool) {
        let lease = Some(self.now() + LEASE);
        self.lock().rows.insert(
            id.into(),
            Row {
                state: state.into(),
                lease,
                token: token.into(),
                publish,
            },
        );
    }

    /// The wire spelling of `id`'s state.
    pub fn row_state(&self, id: &str) -> String {
        self.lock().rows[id].state.clone()
    }

    // ------------------------------------------------------------ claims

    /// Queues `n` more jobs in a lane (`run-N` or `pub-N`).
    pub fn queue(&self, lane: Claims, n: usize) {
        let prefix = match lane {
            Claims::Run => "run",
            Claims::Publish => "pub",
        };
        let mut s = self.lock();
        let q = s.claims(lane);
        let start = q.queued.len() + q.claimed.len();
        q.queued
            .extend((start..start + n).map(|i| format!("{prefix}-{i}")));
    }

    pub fn fail_claims(&self, lane: Claims, status: Option<u16>) {
        self.lock().claims(lane).fail_with = status;
    }

    /// Merges `patch` into every job a lane's claims hand out from now on
    /// (`None` ends it): `{"launch_request": null}` drops a field.
    pub fn poison_claims(&self, lane: Claims, patch: Option<Value>) {
        self.lock().claims(lane).poison = patch;
    }

    /// Claim requests received in a lane.
    pub fn requests(&self, lane: Claims) -> u32 {
        self.lock().claims(lane).requests
    }

    /// Jobs handed out in a lane, in order.
    pub fn claimed(&self, lane: Claims) -> Vec<String> {
        self.lock().claims(lane).claimed.clone()
    }

    pub fn queued(&self, lane: Claims) -> usize {
        self.lock().claims(lane).queued.len()
    }

    /// Makes run claims wait until [`MockBackend::release_runs`].
    pub fn hold_runs(&self) {
        self.run_release.send_replace(false);
    }

    pub fn release_runs(&self) {
        self.run_release.send_replace(true);
    }
}

fn error(status: StatusCode, code: &str) -> Response {
    http::error(status, code, code)
}

fn injected(status: u16) -> Response {
    http::error(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        "internal",
        "injected failure",
    )
}

/// Down or unauthorised service calls.
fn gate(s: &BackendState, headers: &HeaderMap) -> Option<Response> {
    if s.down {
        return Some(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
    }
    (http::bearer(headers) != SERVICE_TOKEN)
        .then(|| error(StatusCode::UNAUTHORIZED, "unauthorized"))
}

/// `job` with the lane's poison merged in, if any.
fn poisoned(app: &App, lane: Claims, mut job: Value) -> Value {
    let mut s = app.state.lock().expect("mock backend state");
    if let (Some(patch), Some(fields)) = (s.claims(lane).poison.as_ref(), job.as_object_mut()) {
        for (key, value) in patch.as_object().into_iter().flatten() {
            if value.is_null() {
                fields.remove(key);
            } else {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
    job
}

/// Pops the lane's next job (or fails) in one step; the request is counted
/// already.
#[allow(clippy::result_large_err)]
fn claim(app: &App, lane: Claims, headers: &HeaderMap) -> Result<Option<String>, Response> {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, headers) {
        return Err(r);
    }
    let q = s.claims(lane);
    if let Some(status) = q.fail_with {
        return Err(injected(status));
    }
    let Some(id) = q.queued.pop_front() else {
        return Ok(None);
    };
    q.claimed.push(id.clone());
    Ok(Some(id))
}

async fn claim_run(State(app): Shared, headers: HeaderMap) -> Response {
    app.state
        .lock()
        .expect("mock backend state")
        .run_claims
        .requests += 1;
    let mut release = app.run_release.clone();
    let _ = release.wait_for(|go| *go).await;
    match claim(&app, Claims::Run, &headers) {
        Err(r) => r,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(id)) => {
            let job = json!({
                "id": id, "token": token_for(&id), "queue_seq": 1, "harness": "h", "model": "m",
                "attempt": 1, "launch_request": {"case": "c"},
                "lease_expires_at": "2026-11-29T17:02:00Z", "enqueued_at": "2026-11-29T16:55:00Z"
            });
            axum::Json(json!({"job": poisoned(&app, Claims::Run, job)})).into_response()
        }
    }
}

async fn claim_publish(State(app): Shared, headers: HeaderMap) -> Response {
    app.state
        .lock()
        .expect("mock backend state")
        .publish_claims
        .requests += 1;
    match claim(&app, Claims::Publish, &headers) {
        Err(r) => r,
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(id)) => {
            let job = json!({
                "id": id, "token": token_for(&id), "request": {"suite": "main"},
                "lease_expires_at": "2026-11-29T17:02:00Z", "enqueued_at": "2026-11-29T16:58:00Z"
            });
            axum::Json(json!({"publish_job": poisoned(&app, Claims::Publish, job)})).into_response()
        }
    }
}

fn renew(s: &mut BackendState, ids: &[String], publish: bool) -> Value {
    let now = s.now.expect("a clock");
    let mut leases = Vec::new();
    for id in ids {
        if let Some(row) = s.rows.get_mut(id)
            && row.publish == publish
            && is_driven(&row.state)
        {
            row.lease = Some(now + LEASE);
            leases.push(json!({"id": id, "lease_expires_at": row.lease}));
        }
    }
    json!({"now": now, "leases": leases})
}

fn job_ids(body: &Value) -> Vec<String> {
    serde_json::from_value(body["job_ids"].clone()).expect("job_ids")
}

async fn renew_runs(State(app): Shared, headers: HeaderMap, body: axum::Json<Value>) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let ids = job_ids(&body);
    s.run_renewals.push(ids.clone());
    if s.run_renewal_no_content {
        return StatusCode::NO_CONTENT.into_response();
    }
    axum::Json(renew(&mut s, &ids, false)).into_response()
}

async fn renew_publishes(
    State(app): Shared,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let ids = job_ids(&body);
    s.publish_renewals.push(ids.clone());
    if s.publish_renewal_no_content {
        return StatusCode::NO_CONTENT.into_response();
    }
    axum::Json(renew(&mut s, &ids, true)).into_response()
}

async fn active_runs(State(app): Shared, headers: HeaderMap) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    s.active_reads += 1;
    if let Some(status) = s.active_fails {
        return injected(status);
    }
    let jobs: Vec<Value> = s
        .rows
        .iter()
        .filter(|(_, r)| !r.publish && is_driven(&r.state))
        .map(|(id, r)| json!({"id": id, "state": r.state, "lease_expires_at": r.lease}))
        .chain(s.active_extra.iter().cloned())
        .collect();
    axum::Json(json!({"now": s.now, "jobs": jobs})).into_response()
}

async fn active_publishes(State(app): Shared, headers: HeaderMap) -> Response {
    let s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let jobs: Vec<Value> = s
        .rows
        .iter()
        .filter(|(_, r)| r.publish && r.state == "dispatched")
        .map(|(id, r)| json!({"id": id, "state": "dispatched", "lease_expires_at": r.lease}))
        .collect();
    axum::Json(json!({"now": s.now, "publish_jobs": jobs})).into_response()
}

async fn get_job(State(app): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    match s.rows.get(&id) {
        Some(r) => axum::Json(
            json!({"id": id, "state": r.state, "attempt": 1, "lease_expires_at": r.lease}),
        )
        .into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found"),
    }
}

/// A status report with the per-job token: the driver's or a death report.
/// A terminal report after a lost report supersedes it.
async fn status(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let delay = {
        let mut s = app.state.lock().expect("mock backend state");
        s.status_received += 1;
        s.status_delay
    };
    if !delay.is_zero() {
        // The backend is slow on purpose (the test's injected latency); the
        // answer is dropped here, never sent, if the caller gives up.
        tokio::time::sleep(delay).await;
    }
    let mut s = app.state.lock().expect("mock backend state");
    if s.down {
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    }
    s.status_answered += 1;
    let token = http::bearer(&headers).to_owned();
    s.status_reports
        .push((id.clone(), token.clone(), body.0.clone()));
    if let Some(code) = s.refuse_reports.get(&id).copied() {
        return injected(code);
    }
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    if row.token != token {
        return error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let new = body["state"].as_str().unwrap_or_default().to_owned();
    let late_after_lost = row.state == "failed";
    if !is_live(&row.state) && !late_after_lost {
        return error(StatusCode::CONFLICT, "conflict");
    }
    row.state = new.clone();
    axum::Json(json!({"id": id, "state": new})).into_response()
}

/// `POST /publish-jobs/{id}/result` (per-job token): recorded; a dispatched
/// publish of that token takes the outcome.
async fn publish_result(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if s.down {
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    }
    let token = http::bearer(&headers).to_owned();
    s.publish_results
        .push((id.clone(), token.clone(), body.0.clone()));
    let Some(row) = s
        .rows
        .get_mut(&id)
        .filter(|r| r.publish && r.token == token)
    else {
        return error(StatusCode::UNAUTHORIZED, "unauthorized");
    };
    if row.state != "dispatched" {
        return error(StatusCode::CONFLICT, "conflict");
    }
    row.state = body["outcome"].as_str().unwrap_or("failed").to_owned();
    axum::Json(json!({"id": id, "state": row.state})).into_response()
}

async fn lost(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let detail = body["detail"].as_str().unwrap_or_default().to_owned();
    s.lost_reports.push((id.clone(), detail));
    if let Some(code) = s.refuse_reports.get(&id).copied() {
        return injected(code);
    }
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    if !is_driven(&row.state) {
        return axum::Json(json!({"id": id, "ignored": true, "state": row.state})).into_response();
    }
    row.state = "failed".into();
    axum::Json(
        json!({"id": id, "ignored": false, "state": "failed", "retry_id": format!("{id}-retry")}),
    )
    .into_response()
}

async fn publish_lost(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let mut s = app.state.lock().expect("mock backend state");
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let detail = body["detail"].as_str().unwrap_or_default().to_owned();
    s.publish_lost_reports.push((id.clone(), detail));
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    row.state = "failed".into();
    axum::Json(json!({"id": id, "ignored": false, "state": "failed"})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 request; the status line's code and the body.
    async fn call(url: &str, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
        let addr = url.strip_prefix("http://").unwrap();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let code = answer[9..12].parse().unwrap();
        let body = answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (code, body)
    }

    #[tokio::test]
    async fn a_claim_hands_out_the_next_queued_job_to_the_service_token_only() {
        let backend = MockBackend::start().await;
        backend.queue(Claims::Run, 1);
        let (code, _) = call(&backend.url, "POST", "/jobs/next", "wrong", "").await;
        assert_eq!(code, 401);
        let (code, body) = call(&backend.url, "POST", "/jobs/next", SERVICE_TOKEN, "").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(&token_for("run-0")), "{body}");
        assert_eq!(backend.claimed(Claims::Run), ["run-0"]);
        assert_eq!(backend.requests(Claims::Run), 2);
        let (code, _) = call(&backend.url, "POST", "/jobs/next", SERVICE_TOKEN, "").await;
        assert_eq!(code, 204, "the queue is empty");
    }

    #[tokio::test]
    async fn a_lost_report_fails_a_driven_run_and_ignores_a_finished_one() {
        let backend = MockBackend::start().await;
        backend.add_run_row("a", "running", "t");
        backend.add_run_row("b", "succeeded", "t");
        let lost = r#"{"detail":"gone"}"#;
        let (code, body) = call(&backend.url, "POST", "/jobs/a/lost", SERVICE_TOKEN, lost).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(backend.row_state("a"), "failed");
        let (_, body) = call(&backend.url, "POST", "/jobs/b/lost", SERVICE_TOKEN, lost).await;
        assert!(body.contains(r#""ignored":true"#), "{body}");
        assert_eq!(backend.row_state("b"), "succeeded");
    }

    #[tokio::test]
    async fn active_runs_list_the_driven_rows_or_the_injected_failure() {
        let backend = MockBackend::start().await;
        backend.add_run_row("a", "running", "t");
        backend.add_run_row("q", "queued", "t");
        let (code, body) = call(&backend.url, "GET", "/jobs/active", SERVICE_TOKEN, "").await;
        assert_eq!(code, 200);
        assert!(
            body.contains(r#""id":"a""#) && !body.contains(r#""id":"q""#),
            "{body}"
        );
        backend.lock().active_fails = Some(500);
        let (code, _) = call(&backend.url, "GET", "/jobs/active", SERVICE_TOKEN, "").await;
        assert_eq!(code, 500);
        assert_eq!(backend.lock().active_reads, 2);
    }
}
