//! The one fake Kubernetes API, on a free loopback port: batch/v1 Jobs (list,
//! watch as a stream of events from a resourceVersion, get, create with 201
//! or 409 AlreadyExists, delete), core/v1 pods (list by label selector,
//! logs with `tailLines`, delete with a uid precondition) and creates of
//! `events.k8s.io/v1` Events (recorded, answered 201), in any namespace.
//!
//! Every request is written to a journal (method, path and query, JSON body)
//! before it is answered, and a test may intercept any request: answer it
//! with a status of its choosing, hold it until a signal, or never answer.
//!
//! Faults: per Job kind on create (an error status, a hold until released, a
//! delay, storing the Job and never answering, never answering), failing
//! reads by name, failing log reads, and a first list held until the test
//! lets it answer. It records what was asked (creates, reads, deletes,
//! selector lists, log reads) and the most live Jobs of each kind ever
//! present at once. A Job's kind is what the `kind_of` given at start says
//! (the kit depends on no tcab crate); the Job watch list ignores label
//! selectors (every Job here is the dispatcher's), a list by
//! `tcab.dev/job-id` applies its selector.

use crate::kube::{failure_response as status, labels_match, list};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// What a create of a kind does instead of answering at once.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateFault {
    /// Answer this error status (code, reason, message); store nothing.
    Refuse(u16, String, String),
    /// Wait until [`FakeKube::release_creates`], then create normally.
    Hold,
    /// Wait until [`FakeKube::release_creates`], then answer this error
    /// status (code, reason, message); store nothing.
    HoldThenRefuse(u16, String, String),
    /// Wait this long, then create normally.
    Delay(Duration),
    /// Store the Job (watchers see it) and never answer.
    StoreThenHang,
    /// Never answer, and store nothing.
    Hang,
}

/// The kind of a Job (a lane), as the test's `kind_of` names it.
pub type KindOf = fn(&Value) -> String;

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path and query, as sent (`/api/v1/namespaces/ns/pods?&labelSelector=...`).
    pub uri: String,
    /// The JSON body (`Null` when there is none).
    pub body: Value,
}

impl std::fmt::Display for Seen {
    /// `METHOD uri`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.uri)
    }
}

/// What an intercepted request gets instead of the fake's own answer.
#[derive(Debug)]
pub enum Answer {
    /// This status code and JSON body.
    Json(u16, Value),
    /// The fake's own answer, once this fires (or its sender is dropped).
    After(oneshot::Receiver<()>),
    /// No answer, ever (a hung call).
    Hang,
}

/// Looks at every request first; `None` lets the fake answer it.
pub type Intercept = Box<dyn FnMut(&Seen) -> Option<Answer> + Send>;

pub struct KubeState {
    rv: u64,
    pub jobs: BTreeMap<String, Value>,
    pub pods: BTreeMap<String, Value>,
    /// Pod logs by pod name.
    pub logs: HashMap<String, String>,
    events: Vec<(u64, Value)>,
    watchers: Vec<mpsc::UnboundedSender<Result<Bytes, Infallible>>>,
    kind_of: KindOf,
    create_faults: HashMap<String, CreateFault>,
    /// Answer every Job read by name with this status instead.
    pub read_fault: Option<(u16, String, String)>,
    /// Answer every Job delete with this status instead (deleting nothing).
    pub delete_fault: Option<(u16, String, String)>,
    /// Job creates with `dryRun=All` received, by name (answered 201 and not
    /// stored, unless `dry_run_fault`; never counted as creates).
    pub dry_runs: Vec<String>,
    /// Answer every dry-run create with this status instead.
    pub dry_run_fault: Option<(u16, String, String)>,
    /// Create requests received per kind (answered or not).
    pub create_requests: HashMap<String, u32>,
    /// Creates answered 201 per kind.
    pub creates: HashMap<String, u32>,
    /// Job reads by name received.
    pub reads: u32,
    /// The most live Jobs of each kind ever present at once.
    pub max_live: HashMap<String, usize>,
    /// When false, a Job list (not a watch, not by job id) is held.
    pub list_ready: bool,
    /// Job lists that arrived while `list_ready` was false (each is held).
    pub held_lists: usize,
    pub log_reads: usize,
    /// When set, every log read answers 500 (the kubelet cannot be reached).
    pub logs_fail: bool,
    /// How long every log read takes (a slow kubelet).
    pub log_delay: Duration,
    /// Job deletes received, by name.
    pub deleted_jobs: Vec<String>,
    /// Job lists by `tcab.dev/job-id` selector received (not the watch's).
    pub job_lists: Vec<String>,
    /// Every request received, in order.
    pub journal: Vec<Seen>,
    /// The `events.k8s.io/v1` Events created, as sent.
    pub recorded_events: Vec<Value>,
}

/// Whether a Job has neither completed nor failed.
pub fn is_live(job: &Value) -> bool {
    !job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

impl KubeState {
    /// Stores a created Job (uid, namespace, creation time) and counts it.
    fn store_created(&mut self, ns: &str, name: &str, mut job: Value) -> Value {
        job["metadata"]["uid"] = json!(format!("uid-{name}"));
        job["metadata"]["namespace"] = json!(ns);
        job["metadata"]["creationTimestamp"] = json!("2026-11-29T17:00:00Z");
        *self.creates.entry((self.kind_of)(&job)).or_default() += 1;
        self.emit("ADDED", job);
        self.jobs[name].clone()
    }

    /// Stores a new version of a Job (a new resourceVersion) and tells
    /// every watcher.
    pub fn emit(&mut self, kind: &str, mut job: Value) {
        self.rv += 1;
        job["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let name = job["metadata"]["name"].as_str().expect("a name").to_owned();
        if kind == "DELETED" {
            self.jobs.remove(&name);
        } else {
            self.jobs.insert(name, job.clone());
        }
        let event = json!({"type": kind, "object": job});
        self.events.push((self.rv, event.clone()));
        let line = Bytes::from(format!("{event}\n"));
        self.watchers.retain(|w| w.send(Ok(line.clone())).is_ok());
        let kinds: BTreeSet<String> = self
            .jobs
            .values()
            .map(self.kind_of)
            .chain(self.max_live.keys().cloned())
            .collect();
        for kind in kinds {
            let live = self
                .jobs
                .values()
                .filter(|j| (self.kind_of)(j) == kind && is_live(j))
                .count();
            let max = self.max_live.entry(kind).or_default();
            *max = (*max).max(live);
        }
    }

    pub fn kind_of(&self, job: &Value) -> String {
        (self.kind_of)(job)
    }
}

#[derive(Clone)]
pub struct FakeKube {
    pub url: String,
    pub state: Arc<Mutex<KubeState>>,
    release: Arc<watch::Sender<bool>>,
    intercept: Arc<Mutex<Option<Intercept>>>,
}

#[derive(Clone)]
struct App {
    state: Arc<Mutex<KubeState>>,
    release: Arc<watch::Sender<bool>>,
    /// Apart from the state, so an intercept may read and change the
    /// state (it is called without the state's lock).
    intercept: Arc<Mutex<Option<Intercept>>>,
}

type Shared = State<App>;

impl FakeKube {
    /// Starts one whose Jobs' kinds `kind_of` names.
    pub async fn start(kind_of: KindOf) -> Self {
        let state = Arc::new(Mutex::new(KubeState {
            rv: 0,
            jobs: BTreeMap::new(),
            pods: BTreeMap::new(),
            logs: HashMap::new(),
            events: vec![],
            watchers: vec![],
            kind_of,
            create_faults: HashMap::new(),
            read_fault: None,
            delete_fault: None,
            dry_runs: vec![],
            dry_run_fault: None,
            create_requests: HashMap::new(),
            creates: HashMap::new(),
            reads: 0,
            max_live: HashMap::new(),
            list_ready: true,
            held_lists: 0,
            log_reads: 0,
            logs_fail: false,
            log_delay: Duration::ZERO,
            deleted_jobs: vec![],
            job_lists: vec![],
            journal: vec![],
            recorded_events: vec![],
        }));
        let release = Arc::new(watch::channel(true).0);
        let router = Router::new()
            .route(
                "/apis/batch/v1/namespaces/{ns}/jobs",
                get(list_jobs).post(create),
            )
            .route(
                "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
                get(read).delete(delete),
            )
            .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(read_pod).delete(delete_pod),
            )
            .route("/api/v1/namespaces/{ns}/pods/{name}/log", get(pod_log))
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events",
                axum::routing::post(create_event),
            );
        let intercept = Arc::new(Mutex::new(None));
        let app = App {
            state: state.clone(),
            release: release.clone(),
            intercept: Arc::clone(&intercept),
        };
        let app = router
            .layer(from_fn_with_state(app.clone(), journal))
            .with_state(app);
        let url = crate::http::serve_url(app).await;
        FakeKube {
            url,
            state,
            release,
            intercept,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, KubeState> {
        self.state.lock().expect("fake kube state")
    }

    /// Puts a Job there (watchers see it added).
    pub fn put_job(&self, job: Value) {
        self.lock().emit("ADDED", job);
    }

    /// Puts a pod there, with its log.
    pub fn put_pod(&self, pod: Value, log: &str) {
        let name = pod["metadata"]["name"].as_str().expect("a name").to_owned();
        let mut s = self.lock();
        s.logs.insert(name.clone(), log.to_owned());
        s.pods.insert(name, pod);
    }

    /// Makes every create of `kind` misbehave this way (`None`: answer normally).
    pub fn fault_creates(&self, kind: &str, fault: Option<CreateFault>) {
        if matches!(
            fault,
            Some(CreateFault::Hold | CreateFault::HoldThenRefuse(..))
        ) {
            self.release.send_replace(false);
        }
        let mut s = self.lock();
        match fault {
            Some(fault) => s.create_faults.insert(kind.to_owned(), fault),
            None => s.create_faults.remove(kind),
        };
    }

    /// Lets every held create (and every later one) go on.
    pub fn release_creates(&self) {
        self.lock()
            .create_faults
            .retain(|_, f| !matches!(f, CreateFault::Hold | CreateFault::HoldThenRefuse(..)));
        self.release.send_replace(true);
    }

    /// The `events.k8s.io/v1` Events created so far, as sent.
    pub fn recorded_events(&self) -> Vec<Value> {
        self.lock().recorded_events.clone()
    }

    /// Every request received so far, as `METHOD uri`.
    pub fn requests(&self) -> Vec<String> {
        self.lock().journal.iter().map(Seen::to_string).collect()
    }

    /// Sends every later request to `intercept` first. It is called
    /// without the state's lock held (it may read or change the fake), one
    /// request at a time.
    pub fn intercept(&self, intercept: impl FnMut(&Seen) -> Option<Answer> + Send + 'static) {
        *self.intercept.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(intercept));
    }

    /// Marks a Job succeeded.
    pub fn finish(&self, name: &str) {
        let mut s = self.lock();
        let Some(mut job) = s.jobs.get(name).cloned() else {
            return;
        };
        job["status"] =
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]});
        s.emit("MODIFIED", job);
    }

    /// Every Job of a kind.
    pub fn jobs_of(&self, kind: &str) -> Vec<Value> {
        let s = self.lock();
        s.jobs
            .values()
            .filter(|j| s.kind_of(j) == kind)
            .cloned()
            .collect()
    }
}

fn count(map: &HashMap<String, u32>, kind: &str) -> u32 {
    map.get(kind).copied().unwrap_or(0)
}

impl KubeState {
    /// Create requests received for a kind.
    pub fn create_requests_of(&self, kind: &str) -> u32 {
        count(&self.create_requests, kind)
    }

    /// Creates answered 201 for a kind.
    pub fn creates_of(&self, kind: &str) -> u32 {
        count(&self.creates, kind)
    }

    /// The most live Jobs of a kind ever present at once.
    pub fn max_live_of(&self, kind: &str) -> usize {
        self.max_live.get(kind).copied().unwrap_or(0)
    }
}

fn lock(app: &App) -> MutexGuard<'_, KubeState> {
    app.state.lock().expect("fake kube state")
}

/// Writes every request to the journal, then lets the test's intercept
/// answer it, hold it or hang it, or the routes answer it.
async fn journal(State(app): Shared, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return status(400, "BadRequest", "the request body could not be read");
    };
    let seen = Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    lock(&app).journal.push(seen.clone());
    let answer = app
        .intercept
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|intercept| intercept(&seen));
    match answer {
        Some(Answer::Json(code, body)) => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (code, axum::Json(body)).into_response()
        }
        Some(Answer::Hang) => std::future::pending().await,
        Some(Answer::After(signal)) => {
            let _ = signal.await;
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        None => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// Records an `events.k8s.io/v1` Event and answers it back with 201.
async fn create_event(State(app): Shared, axum::Json(event): axum::Json<Value>) -> Response {
    lock(&app).recorded_events.push(event.clone());
    (StatusCode::CREATED, axum::Json(event)).into_response()
}

async fn list_jobs(State(app): Shared, Query(q): Query<HashMap<String, String>>) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    if selector.contains("tcab.dev/job-id") {
        // A direct read of one backend job's Jobs (not the watch's list).
        let mut s = lock(&app);
        s.job_lists.push(selector.clone());
        let items: Vec<Value> = s
            .jobs
            .values()
            .filter(|j| labels_match(j, &selector))
            .cloned()
            .collect();
        return axum::Json(list("batch/v1", "JobList", &s.rv.to_string(), items)).into_response();
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = lock(&app);
        for (rv, event) in &s.events {
            if *rv > from {
                let _ = tx.send(Ok(Bytes::from(format!("{event}\n"))));
            }
        }
        s.watchers.push(tx);
        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .expect("a response");
    }
    let held = {
        let mut s = lock(&app);
        if !s.list_ready {
            s.held_lists += 1;
        }
        !s.list_ready
    };
    if held {
        // Held until the test lets the list answer (the fake's own wait,
        // not a test's: it looks again every 10 ms).
        while !lock(&app).list_ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let s = lock(&app);
    let items: Vec<Value> = s.jobs.values().cloned().collect();
    axum::Json(list("batch/v1", "JobList", &s.rv.to_string(), items)).into_response()
}

async fn create(
    State(app): Shared,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    axum::Json(job): axum::Json<Value>,
) -> Response {
    let Some(name) = job["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(422, "Invalid", "metadata.name: Required value");
    };
    if q.get("dryRun").map(String::as_str) == Some("All") {
        // Validated and answered, nothing stored; create faults do not apply.
        let mut s = lock(&app);
        s.dry_runs.push(name);
        if let Some((code, reason, message)) = s.dry_run_fault.clone() {
            return status(code, &reason, &message);
        }
        return (axum::http::StatusCode::CREATED, axum::Json(job)).into_response();
    }
    let (fault, mut release) = {
        let mut s = lock(&app);
        let kind = s.kind_of(&job);
        *s.create_requests.entry(kind.clone()).or_default() += 1;
        (s.create_faults.get(&kind).cloned(), app.release.subscribe())
    };
    match fault {
        Some(CreateFault::Refuse(code, reason, message)) => return status(code, &reason, &message),
        Some(CreateFault::Hold) => {
            let _ = release.wait_for(|go| *go).await;
        }
        Some(CreateFault::HoldThenRefuse(code, reason, message)) => {
            let _ = release.wait_for(|go| *go).await;
            return status(code, &reason, &message);
        }
        // The API server is slow on purpose (the test's injected latency).
        Some(CreateFault::Delay(wait)) => tokio::time::sleep(wait).await,
        Some(CreateFault::StoreThenHang) => {
            {
                let mut s = lock(&app);
                if !s.jobs.contains_key(&name) {
                    s.store_created(&ns, &name, job.clone());
                }
            }
            std::future::pending::<()>().await;
        }
        Some(CreateFault::Hang) => std::future::pending::<()>().await,
        None => {}
    }
    let mut s = lock(&app);
    if s.jobs.contains_key(&name) {
        return status(
            409,
            "AlreadyExists",
            &format!("jobs.batch \"{name}\" already exists"),
        );
    }
    let stored = s.store_created(&ns, &name, job);
    (StatusCode::CREATED, axum::Json(stored)).into_response()
}

async fn read(State(app): Shared, Path((_ns, name)): Path<(String, String)>) -> Response {
    let mut s = lock(&app);
    s.reads += 1;
    if let Some((code, reason, message)) = s.read_fault.clone() {
        return status(code, &reason, &message);
    }
    match s.jobs.get(&name) {
        Some(job) => axum::Json(job.clone()).into_response(),
        None => status(404, "NotFound", &format!("jobs.batch \"{name}\" not found")),
    }
}

/// Deletes a Job and its pods (no watch event: tests that delete feed their
/// caches themselves).
async fn delete(State(app): Shared, Path((_ns, name)): Path<(String, String)>) -> Response {
    let mut s = lock(&app);
    s.deleted_jobs.push(name.clone());
    if let Some((code, reason, message)) = s.delete_fault.clone() {
        return status(code, &reason, &message);
    }
    match s.jobs.remove(&name) {
        Some(job) => {
            s.pods
                .retain(|_, p| p["metadata"]["labels"]["job-name"].as_str() != Some(name.as_str()));
            axum::Json(job).into_response()
        }
        None => status(404, "NotFound", &format!("jobs.batch \"{name}\" not found")),
    }
}

/// Lists pods by label selector; with a field selector on `status.phase`
/// (the dispatcher's list of its live pods) only the pods not finished.
async fn list_pods(State(app): Shared, Query(q): Query<HashMap<String, String>>) -> Response {
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let live_only = q
        .get("fieldSelector")
        .is_some_and(|f| f.contains("status.phase!="));
    let items: Vec<Value> = lock(&app)
        .pods
        .values()
        .filter(|p| labels_match(p, &selector))
        .filter(|p| {
            !live_only || !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .cloned()
        .collect();
    axum::Json(list("v1", "PodList", "1", items)).into_response()
}

async fn read_pod(State(app): Shared, Path((_ns, name)): Path<(String, String)>) -> Response {
    match lock(&app).pods.get(&name) {
        Some(pod) => axum::Json(pod.clone()).into_response(),
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

/// Deletes a pod at once (no grace), unless the uid precondition names
/// another pod of that name (409 Conflict, as the API server answers).
async fn delete_pod(
    State(app): Shared,
    Path((_ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut s = lock(&app);
    let Some(pod) = s.pods.get(&name) else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    if let Some(wanted) = options["preconditions"]["uid"].as_str()
        && wanted != uid
    {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods \"{name}\": Precondition failed: UID in precondition: {wanted}, UID in object meta: {uid}"
            ),
        );
    }
    s.logs.remove(&name);
    let mut pod = s.pods.remove(&name).unwrap_or(Value::Null);
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    axum::Json(pod).into_response()
}

async fn pod_log(
    State(app): Shared,
    Path((_ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let delay = lock(&app).log_delay;
    if !delay.is_zero() {
        // The kubelet is slow on purpose (the test's injected latency).
        tokio::time::sleep(delay).await;
    }
    let mut s = lock(&app);
    s.log_reads += 1;
    if s.logs_fail {
        return status(
            500,
            "InternalError",
            "Get \"https://10.0.0.7:10250/containerLogs\": dial tcp: i/o timeout",
        );
    }
    let Some(log) = s.logs.get(&name) else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let tail: usize = q
        .get("tailLines")
        .and_then(|t| t.parse().ok())
        .unwrap_or(usize::MAX);
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(tail)..]
        .join("\n")
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(job: &Value) -> String {
        job["metadata"]["labels"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn job(name: &str, kind: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"kind": kind}}, "status": {}})
    }

    #[tokio::test]
    async fn the_most_live_jobs_of_a_kind_are_remembered() {
        let kube = FakeKube::start(kind).await;
        kube.put_job(job("a", "run"));
        kube.put_job(job("b", "run"));
        kube.put_job(job("p", "publish"));
        kube.finish("a");
        kube.put_job(job("c", "run"));
        let s = kube.lock();
        assert_eq!((s.max_live_of("run"), s.max_live_of("publish")), (2, 1));
        assert!(!is_live(&s.jobs["a"]) && is_live(&s.jobs["c"]));
    }

    fn pod(name: &str, uid: &str, id: &str) -> Value {
        json!({"metadata": {"name": name, "uid": uid, "labels": {"tcab.dev/job-id": id}}})
    }

    async fn send(kube: &FakeKube, method: &str, path: &str, body: Value) -> (u16, Value) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = kube.url.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = body.to_string();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: fake\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let code = answer[9..12].parse().unwrap();
        let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        (code, serde_json::from_str(json).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn a_pod_delete_honours_its_uid_precondition_and_is_journaled() {
        let kube = FakeKube::start(kind).await;
        kube.put_pod(pod("sb-a", "uid-new", "a"), "");
        let path = "/api/v1/namespaces/sandboxes/pods/sb-a?";
        let old = json!({"preconditions": {"uid": "uid-old"}});
        let (code, body) = send(&kube, "DELETE", path, old.clone()).await;
        assert_eq!((code, &body["reason"]), (409, &json!("Conflict")));
        assert!(
            kube.lock().pods.contains_key("sb-a"),
            "another pod of that name is kept"
        );
        let new = json!({"preconditions": {"uid": "uid-new"}});
        assert_eq!(send(&kube, "DELETE", path, new.clone()).await.0, 200);
        assert_eq!(send(&kube, "DELETE", path, new).await.0, 404);
        assert_eq!(kube.requests(), vec![format!("DELETE {path}"); 3]);
        assert_eq!(kube.lock().journal[0].body, old);
    }

    #[tokio::test]
    async fn an_intercept_answers_holds_or_passes_a_request() {
        let kube = FakeKube::start(kind).await;
        kube.put_pod(pod("sb-a", "uid-a", "a"), "");
        kube.put_pod(pod("sb-b", "uid-b", "b"), "");
        let (open, gate) = oneshot::channel();
        let mut gate = Some(gate);
        kube.intercept(move |seen| {
            if seen.uri.contains("sb-b") {
                return Some(Answer::Json(500, json!({"reason": "InternalError"})));
            }
            seen.uri
                .contains("job-id")
                .then(|| Answer::After(gate.take().unwrap()))
        });
        let delete_b = send(
            &kube,
            "DELETE",
            "/api/v1/namespaces/sb/pods/sb-b",
            Value::Null,
        )
        .await;
        assert_eq!(delete_b.0, 500);
        assert!(
            kube.lock().pods.contains_key("sb-b"),
            "answered by the intercept alone"
        );
        let listing = "/api/v1/namespaces/sb/pods?labelSelector=tcab.dev%2Fjob-id+in+%28a%2Cb%29";
        let list = {
            let kube = kube.clone();
            tokio::spawn(async move { send(&kube, "GET", listing, Value::Null).await })
        };
        crate::wait::eventually("the list to arrive", Duration::from_secs(5), || {
            kube.lock().journal.len() == 2
        })
        .await;
        assert!(!list.is_finished(), "held");
        open.send(()).unwrap();
        let (code, body) = list.await.unwrap();
        assert_eq!(
            (code, body["items"].as_array().map(Vec::len)),
            (200, Some(2))
        );
    }

    #[tokio::test]
    async fn a_held_create_waits_for_the_release() {
        let kube = FakeKube::start(kind).await;
        kube.fault_creates("run", Some(CreateFault::Hold));
        let app = App {
            state: kube.state.clone(),
            release: kube.release.clone(),
            intercept: kube.intercept.clone(),
        };
        let created = tokio::spawn(create(
            State(app),
            Path("ns".into()),
            Query(HashMap::new()),
            axum::Json(job("a", "run")),
        ));
        crate::wait::eventually("the create to arrive", Duration::from_secs(5), || {
            kube.lock().create_requests_of("run") == 1
        })
        .await;
        assert!(!created.is_finished(), "held");
        kube.release_creates();
        let answer = crate::wait::within("the create", Duration::from_secs(5), created)
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::CREATED);
        assert_eq!(kube.lock().creates_of("run"), 1);
    }
}
