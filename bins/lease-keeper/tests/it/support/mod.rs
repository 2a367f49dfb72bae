//! Test doubles: a mock backend (axum on 127.0.0.1:0, with a test clock) and
//! a fake Kubernetes API serving the few reads the lease-keeper makes.
#![allow(dead_code)]

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_shared::Secret;
use tcab_shared::backend::client::RetryPolicy;
use tcab_shared::backend::{BackendClient, JobState};
use tcab_shared::config::{BackendConfig, CommonConfig, LogFormat};

pub const SERVICE_TOKEN: &str = "svc-token";
pub const NS: &str = "ns";
pub const LEASE: SignedDuration = SignedDuration::from_secs(120);

// ---------------------------------------------------------------- backend

#[derive(Debug, Clone)]
pub struct Row {
    pub state: JobState,
    pub lease: Option<Timestamp>,
    pub token: String,
    pub publish: bool,
}

#[derive(Debug, Default)]
pub struct BackendState {
    pub down: bool,
    pub now: Option<Timestamp>,
    pub rows: BTreeMap<String, Row>,
    pub run_renewals: Vec<Vec<String>>,
    pub publish_renewals: Vec<Vec<String>>,
    /// (id, token presented, body)
    pub status_reports: Vec<(String, String, Value)>,
    pub lost_reports: Vec<(String, String)>,
    pub publish_lost_reports: Vec<(String, String)>,
    pub active_reads: usize,
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
}

#[derive(Clone)]
pub struct MockBackend {
    pub url: String,
    pub state: Arc<Mutex<BackendState>>,
}

impl MockBackend {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(BackendState {
            now: Some("2026-11-29T17:00:00Z".parse().unwrap()),
            ..Default::default()
        }));
        let app = Router::new()
            .route("/jobs/leases", post(renew_runs))
            .route("/publish-jobs/leases", post(renew_publishes))
            .route("/jobs/active", get(active_runs))
            .route("/publish-jobs/active", get(active_publishes))
            .route("/jobs/{id}", get(get_job))
            .route("/jobs/{id}/status", post(status))
            .route("/jobs/{id}/lost", post(lost))
            .route("/publish-jobs/{id}/lost", post(publish_lost))
            .with_state(state.clone());
        let url = tcab_testkit::http::serve_url(app).await;
        MockBackend { url, state }
    }

    pub fn client(&self) -> BackendClient {
        BackendClient::new(
            &self.url,
            Secret::new(SERVICE_TOKEN),
            Duration::from_secs(5),
        )
        .unwrap()
        .with_retry_policy(RetryPolicy {
            max_retries: 0,
            max_wait: Duration::ZERO,
            default_wait: Duration::ZERO,
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, BackendState> {
        self.state.lock().unwrap()
    }

    pub fn now(&self) -> Timestamp {
        self.lock().now.unwrap()
    }

    pub fn advance(&self, secs: i64) {
        let mut s = self.lock();
        s.now = Some(s.now.unwrap() + SignedDuration::from_secs(secs));
    }

    /// A run claimed now, in `state`, with the claim's lease.
    pub fn add_run(&self, id: &str, state: JobState, token: &str) {
        let now = self.now();
        self.lock().rows.insert(
            id.into(),
            Row {
                state,
                lease: Some(now + LEASE),
                token: token.into(),
                publish: false,
            },
        );
    }

    pub fn add_publish(&self, id: &str, token: &str) {
        let now = self.now();
        self.lock().rows.insert(
            id.into(),
            Row {
                state: JobState::Dispatched,
                lease: Some(now + LEASE),
                token: token.into(),
                publish: true,
            },
        );
    }

    pub fn state_of(&self, id: &str) -> JobState {
        self.lock().rows[id].state
    }

    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
}

type Shared = State<Arc<Mutex<BackendState>>>;

fn bearer(headers: &HeaderMap) -> String {
    tcab_testkit::http::bearer(headers).to_owned()
}

fn error(status: StatusCode, code: &str) -> Response {
    tcab_testkit::http::error(status, code, code)
}

/// Down or unauthorised service calls.
fn gate(s: &BackendState, headers: &HeaderMap) -> Option<Response> {
    if s.down {
        return Some(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
    }
    (bearer(headers) != SERVICE_TOKEN).then(|| error(StatusCode::UNAUTHORIZED, "unauthorized"))
}

fn renew(s: &mut BackendState, ids: &[String], publish: bool) -> Value {
    let now = s.now.unwrap();
    let mut leases = Vec::new();
    for id in ids {
        if let Some(row) = s.rows.get_mut(id)
            && row.publish == publish
            && row.state.is_driven()
        {
            row.lease = Some(now + LEASE);
            leases.push(json!({"id": id, "lease_expires_at": row.lease}));
        }
    }
    json!({"now": now, "leases": leases})
}

async fn renew_runs(State(st): Shared, headers: HeaderMap, body: axum::Json<Value>) -> Response {
    let mut s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let ids: Vec<String> = serde_json::from_value(body["job_ids"].clone()).unwrap();
    s.run_renewals.push(ids.clone());
    if s.run_renewal_no_content {
        return StatusCode::NO_CONTENT.into_response();
    }
    axum::Json(renew(&mut s, &ids, false)).into_response()
}

async fn renew_publishes(
    State(st): Shared,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    let mut s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let ids: Vec<String> = serde_json::from_value(body["job_ids"].clone()).unwrap();
    s.publish_renewals.push(ids.clone());
    if s.publish_renewal_no_content {
        return StatusCode::NO_CONTENT.into_response();
    }
    axum::Json(renew(&mut s, &ids, true)).into_response()
}

async fn active_runs(State(st): Shared, headers: HeaderMap) -> Response {
    let mut s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    s.active_reads += 1;
    let jobs: Vec<Value> = s
        .rows
        .iter()
        .filter(|(_, r)| !r.publish && r.state.is_driven())
        .map(|(id, r)| json!({"id": id, "state": r.state, "lease_expires_at": r.lease}))
        .collect();
    axum::Json(json!({"now": s.now, "jobs": jobs})).into_response()
}

async fn active_publishes(State(st): Shared, headers: HeaderMap) -> Response {
    let s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let jobs: Vec<Value> = s
        .rows
        .iter()
        .filter(|(_, r)| r.publish && r.state == JobState::Dispatched)
        .map(|(id, r)| json!({"id": id, "state": "dispatched", "lease_expires_at": r.lease}))
        .collect();
    axum::Json(json!({"now": s.now, "publish_jobs": jobs})).into_response()
}

async fn get_job(State(st): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let s = st.lock().unwrap();
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
    State(st): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let delay = {
        let mut s = st.lock().unwrap();
        s.status_received += 1;
        s.status_delay
    };
    if !delay.is_zero() {
        // Dropped here (never answered) if the caller gives up.
        tokio::time::sleep(delay).await;
    }
    let mut s = st.lock().unwrap();
    if s.down {
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    }
    s.status_answered += 1;
    let token = bearer(&headers);
    s.status_reports
        .push((id.clone(), token.clone(), body.0.clone()));
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    if row.token != token {
        return error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let new: JobState = serde_json::from_value(body["state"].clone()).unwrap();
    let late_after_lost = row.state == JobState::Failed;
    if !row.state.is_live() && !late_after_lost {
        return error(StatusCode::CONFLICT, "conflict");
    }
    row.state = new;
    axum::Json(json!({"id": id, "state": new})).into_response()
}

async fn lost(
    State(st): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let mut s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let detail = body["detail"].as_str().unwrap_or_default().to_owned();
    s.lost_reports.push((id.clone(), detail));
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    if !row.state.is_driven() {
        return axum::Json(json!({"id": id, "ignored": true, "state": row.state})).into_response();
    }
    row.state = JobState::Failed;
    axum::Json(
        json!({"id": id, "ignored": false, "state": "failed", "retry_id": format!("{id}-retry")}),
    )
    .into_response()
}

async fn publish_lost(
    State(st): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::Json<Value>,
) -> Response {
    let mut s = st.lock().unwrap();
    if let Some(r) = gate(&s, &headers) {
        return r;
    }
    let detail = body["detail"].as_str().unwrap_or_default().to_owned();
    s.publish_lost_reports.push((id.clone(), detail));
    let Some(row) = s.rows.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    row.state = JobState::Failed;
    axum::Json(json!({"id": id, "ignored": false, "state": "failed"})).into_response()
}

// ---------------------------------------------------------------- kube

#[derive(Default)]
pub struct KubeState {
    pub jobs: BTreeMap<String, Value>,
    pub pods: BTreeMap<String, Value>,
    pub logs: HashMap<String, String>,
    /// When false, the Job list never answers (the cache never becomes ready).
    pub list_ready: bool,
    /// Job lists that arrived while `list_ready` was false (each is held).
    pub held_lists: usize,
    pub log_reads: usize,
    /// When set, every log read answers 500 (the kubelet cannot be reached).
    pub logs_fail: bool,
    /// Job deletes received, by name.
    pub deleted_jobs: Vec<String>,
    /// Job lists by label selector received (not the watch's).
    pub job_lists: Vec<String>,
}

#[derive(Clone)]
pub struct FakeKube {
    pub url: String,
    pub state: Arc<Mutex<KubeState>>,
}

impl FakeKube {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(KubeState {
            list_ready: true,
            ..Default::default()
        }));
        let app = Router::new()
            .route("/apis/batch/v1/namespaces/{ns}/jobs", get(list_jobs))
            .route(
                "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
                get(get_kube_job).delete(delete_kube_job),
            )
            .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
            .route("/api/v1/namespaces/{ns}/pods/{name}/log", get(pod_log))
            .with_state(state.clone());
        let url = tcab_testkit::http::serve_url(app).await;
        FakeKube { url, state }
    }

    pub fn client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = NS.into();
        tcab_shared::kube_api::client_from(config).unwrap()
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, KubeState> {
        self.state.lock().unwrap()
    }

    pub fn put_job(&self, job: Value) {
        let name = job["metadata"]["name"].as_str().unwrap().to_owned();
        self.lock().jobs.insert(name, job);
    }

    pub fn put_pod(&self, pod: Value, log: &str) {
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        let mut s = self.lock();
        s.logs.insert(name.clone(), log.to_owned());
        s.pods.insert(name, pod);
    }
}

type KubeShared = State<Arc<Mutex<KubeState>>>;

fn not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("\"{name}\" not found"), "reason": "NotFound", "code": 404}),
        ),
    )
        .into_response()
}

/// Whether an object's labels match a `k=v,k2=v2` selector.
fn labels_match(obj: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .filter(|s| !s.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => obj["metadata"]["labels"][k].as_str() == Some(v),
            None => false,
        })
}

async fn list_jobs(State(st): KubeShared, Query(q): Query<HashMap<String, String>>) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    if selector.contains("tcab.dev/job-id") {
        // A direct read of one backend job's Jobs (not the watch's list).
        let mut s = st.lock().unwrap();
        s.job_lists.push(selector.clone());
        let items: Vec<Value> = s
            .jobs
            .values()
            .filter(|j| labels_match(j, &selector))
            .cloned()
            .collect();
        return axum::Json(json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "1"}, "items": items}))
            .into_response();
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        // A watch that never sends: the test feeds nothing after the list.
        let stream = futures::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
        return Response::new(Body::from_stream(stream));
    }
    let (ready, items) = {
        let mut s = st.lock().unwrap();
        if !s.list_ready {
            s.held_lists += 1;
        }
        (s.list_ready, s.jobs.values().cloned().collect::<Vec<_>>())
    };
    if !ready {
        // Hold the list until the test lets it answer.
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if st.lock().unwrap().list_ready {
                break;
            }
        }
    }
    let items: Vec<Value> = if ready {
        items
    } else {
        st.lock().unwrap().jobs.values().cloned().collect()
    };
    axum::Json(json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "1"}, "items": items}))
        .into_response()
}

async fn get_kube_job(
    State(st): KubeShared,
    Path((_ns, name)): Path<(String, String)>,
) -> Response {
    match st.lock().unwrap().jobs.get(&name) {
        Some(job) => axum::Json(job.clone()).into_response(),
        None => not_found(&name),
    }
}

async fn delete_kube_job(
    State(st): KubeShared,
    Path((_ns, name)): Path<(String, String)>,
) -> Response {
    let mut s = st.lock().unwrap();
    s.deleted_jobs.push(name.clone());
    match s.jobs.remove(&name) {
        Some(job) => {
            s.pods
                .retain(|_, p| p["metadata"]["labels"]["job-name"].as_str() != Some(name.as_str()));
            axum::Json(job).into_response()
        }
        None => not_found(&name),
    }
}

async fn list_pods(State(st): KubeShared, Query(q): Query<HashMap<String, String>>) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let items: Vec<Value> = st
        .lock()
        .unwrap()
        .pods
        .values()
        .filter(|p| labels_match(p, &selector))
        .cloned()
        .collect();
    axum::Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}))
        .into_response()
}

async fn pod_log(
    State(st): KubeShared,
    Path((_ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut s = st.lock().unwrap();
    s.log_reads += 1;
    if s.logs_fail {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "Get \"https://10.0.0.7:10250/containerLogs\": dial tcp: i/o timeout", "reason": "InternalError", "code": 500})),
        )
            .into_response();
    }
    let Some(log) = s.logs.get(&name) else {
        return not_found(&name);
    };
    let tail: usize = q
        .get("tailLines")
        .and_then(|t| t.parse().ok())
        .unwrap_or(usize::MAX);
    let lines: Vec<&str> = log.lines().collect();
    let kept = lines[lines.len().saturating_sub(tail)..].join("\n");
    kept.into_response()
}

// ---------------------------------------------------------------- objects

pub fn job_json(name: &str, id: &str, claim: &str, kind: &str, status: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T16:59:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher", "tcab.dev/job-id": id,
                       "tcab.dev/claim": claim, "tcab.dev/job-kind": kind}},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": "driver"}], "restartPolicy": "Never"}}},
        "status": status,
    })
}

pub fn live_status() -> Value {
    json!({"active": 1})
}

/// A Job bound to fail whose pod still terminates (Kubernetes 1.31+).
pub fn failure_target_status() -> Value {
    json!({"failed": 1, "terminating": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
}

pub fn failed_status(failed: i32) -> Value {
    json!({"failed": failed, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
}

pub fn complete_status() -> Value {
    json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
}

pub fn pod_json(job_name: &str, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job_name}-abcde"), "namespace": NS,
            "creationTimestamp": "2026-11-29T16:59:01Z",
            "labels": {"job-name": job_name}},
        "spec": {"containers": [{"name": "driver", "image": "driver"}], "restartPolicy": "Never"},
        "status": status,
    })
}

pub fn oom_pod_status() -> Value {
    json!({"phase": "Failed", "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
}

pub fn evicted_pod_status() -> Value {
    json!({"phase": "Failed",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}],
        "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]})
}

// ---------------------------------------------------------------- config

pub fn config(publishing: bool, poll: Duration) -> LeaseKeeperConfig {
    LeaseKeeperConfig {
        common: CommonConfig {
            namespace: Some(NS.into()),
            managed_by: "tcab-dispatcher".into(),
            poll_interval: poll,
            log_format: LogFormat::Text,
            vault_addr: "127.0.0.1:0".parse().unwrap(),
            kube_timeout: Duration::from_secs(5),
            watch_timeout: Duration::from_secs(60),
            metrics_addr: None,
        },
        backend: BackendConfig {
            url: String::new(),
            service_token: Secret::new(SERVICE_TOKEN),
            timeout: Duration::from_secs(5),
        },
        publishing,
        vault_allow_non_loopback: false,
        lease_length: Duration::from_secs(120),
        log_tail_lines: 3,
        start_grace: Duration::from_secs(300),
        unschedulable_grace: Duration::from_secs(1800),
        terminating_margin: Duration::from_secs(60),
    }
}
