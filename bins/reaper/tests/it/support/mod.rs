//! Shared test fixtures for the reaper's tests: a mocked Kubernetes API
//! (tower-test) that records every request, the kit's mock backend,
//! answering `GET /jobs/active`, Job and pod fixtures, a fixed clock, and a
//! log sink for tracing output.
#![allow(dead_code)]

use http::{Method, Request, Response};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::client::Body;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_reaper::plan::SweepSettings;
use tcab_reaper::run::{Reaper, ReaperSetup};
use tcab_shared::backend::BackendClient;
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::{Secret, WallClock};
use tcab_testkit::backend::Row;

/// The sandbox namespace the tests' reaper sweeps.
pub const SANDBOXES: &str = "sandboxes";
/// The dispatcher's namespace (its Jobs).
pub const DISPATCHER_NS: &str = "dispatcher";
/// The LIST of sandbox pods a sweep makes: the driver's managed-by value.
pub const SWEEP_LIST_URI: &str =
    "/api/v1/namespaces/sandboxes/pods?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-driver";

/// The LIST of pods a reap of these job ids makes: the job-id label alone,
/// so sandboxes of another managed-by value show up too.
pub fn reap_list_uri(ids: &[&str]) -> String {
    let selector = format!("tcab.dev/job-id in ({})", ids.join(","));
    let encoded: String = selector
        .chars()
        .map(|c| match c {
            '/' => "%2F".to_owned(),
            ' ' => "+".to_owned(),
            '(' => "%28".to_owned(),
            ')' => "%29".to_owned(),
            ',' => "%2C".to_owned(),
            c => c.to_string(),
        })
        .collect();
    format!("/api/v1/namespaces/sandboxes/pods?&labelSelector={encoded}")
}

/// Whether a request is a LIST of the sandbox namespace's pods (a reap's
/// or a sweep's).
pub fn is_pod_list(uri: &str) -> bool {
    uri.starts_with("/api/v1/namespaces/sandboxes/pods?")
}
/// The service token the mock backend expects.
pub use tcab_testkit::backend::SERVICE_TOKEN;

/// The confirming read of the owned Jobs carrying job id `id`.
pub fn jobs_uri(id: &str) -> String {
    format!(
        "/apis/batch/v1/namespaces/dispatcher/jobs?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-dispatcher%2Ctcab.dev%2Fjob-id%3D{id}"
    )
}

/// The job id a confirming read asks about, if the request is one.
pub fn confirm_id(uri: &str) -> Option<&str> {
    let rest = uri
        .strip_prefix("/apis/batch/v1/namespaces/dispatcher/jobs?")?
        .split("tcab.dev%2Fjob-id%3D")
        .nth(1)?;
    Some(rest.split('&').next().unwrap_or(rest))
}

/// One request as the mock saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: String,
    pub body: Value,
}

/// What the mock does with one request.
pub enum Answer {
    /// Answer with this code and JSON body.
    Json(u16, Value),
    /// Never answer (a hung call).
    Hang,
}

/// Answers one request.
pub type Responder = Box<dyn FnMut(&Seen) -> Answer + Send>;

/// A client whose every request is recorded and answered by `respond`.
pub fn mock_client(mut respond: Responder) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut hung = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let request = Seen {
                method: parts.method,
                uri: parts.uri.to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let answer = respond(&request);
            log.lock().expect("log").push(request);
            match answer {
                Answer::Json(code, body) => {
                    let response = Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&body).expect("json")))
                        .expect("response");
                    send.send_response(response);
                }
                Answer::Hang => hung.push(send),
            }
        }
    });
    (Client::new(service, "dispatcher"), seen)
}

/// A mock API server holding `pods` in the sandbox namespace (a DELETE
/// removes the pod; a DELETE of a pod not there answers 404) and answering
/// confirming reads from `jobs` (filtered by the job id asked).
pub fn cluster(mut pods: Vec<Value>, jobs: Vec<Job>) -> Responder {
    Box::new(move |req| match req.method {
        Method::GET if is_pod_list(&req.uri) => Answer::Json(200, pod_list(pods.clone())),
        Method::GET => match confirm_id(&req.uri) {
            Some(id) => Answer::Json(200, job_list(&jobs, id)),
            None => Answer::Json(404, status(404, "NotFound")),
        },
        Method::DELETE => {
            let name = req
                .uri
                .strip_prefix("/api/v1/namespaces/sandboxes/pods/")
                .and_then(|rest| rest.split('?').next())
                .unwrap_or("");
            let before = pods.len();
            pods.retain(|p| p["metadata"]["name"] != name);
            if pods.len() < before {
                Answer::Json(200, success())
            } else {
                Answer::Json(404, status(404, "NotFound"))
            }
        }
        _ => Answer::Json(405, status(405, "MethodNotAllowed")),
    })
}

/// The requests seen so far, as `METHOD uri`.
pub fn requests(seen: &Arc<Mutex<Vec<Seen>>>) -> Vec<String> {
    seen.lock()
        .expect("log")
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect()
}

/// The reaper's fixed "now".
pub fn now() -> Timestamp {
    "2027-01-15T12:00:00Z".parse().expect("ts")
}

/// A driver Job for job `id` with this status.
pub fn job_with_status(name: &str, id: &str, status: Value) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": DISPATCHER_NS, "uid": format!("uid-{name}"),
            "creationTimestamp": "2027-01-15T11:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher",
                       "tcab.dev/job-id": id, "tcab.dev/job-kind": "run"}},
        "spec": {"template": {"spec": {"terminationGracePeriodSeconds": 120, "containers": []}}},
        "status": status,
    }))
    .expect("job json")
}

/// A driver Job for job `id`, failed (its pod finished) or still running.
pub fn job(name: &str, id: &str, failed: bool) -> Job {
    if failed {
        job_with_status(
            name,
            id,
            json!({"failed": 1, "terminating": 0, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"},
                {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}),
        )
    } else {
        job_with_status(name, id, json!({"active": 1, "ready": 1}))
    }
}

/// A JobList of the `jobs` carrying job id `id`.
pub fn job_list(jobs: &[Job], id: &str) -> Value {
    let items: Vec<&Job> = jobs
        .iter()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("tcab.dev/job-id"))
                .is_some_and(|v| v == id)
        })
        .collect();
    let items = items.iter().map(|j| json!(j)).collect();
    tcab_testkit::kube::list("batch/v1", "JobList", "11", items)
}

/// A Job cache that has listed exactly `jobs`.
pub fn cache(jobs: Vec<Job>) -> OwnedJobs {
    let cache = OwnedJobs::new();
    relist(&cache, jobs);
    cache
}

/// Makes `cache` list `jobs` afresh (a completed relist: current again).
pub fn relist(cache: &OwnedJobs, jobs: Vec<Job>) {
    cache.apply(Event::Init);
    for j in jobs {
        cache.apply(Event::InitApply(j));
    }
    cache.apply(Event::InitDone);
}

/// A pod in the sandbox namespace, as the API would list it.
pub fn pod(name: &str, id: &str, managed_by: &str, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": SANDBOXES, "uid": format!("uid-{name}"),
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/managed-by": managed_by, "tcab.dev/job-id": id}},
    })
}

/// A sandbox of job `id` created a minute before [`now`].
pub fn sandbox(name: &str, id: &str) -> Value {
    pod(name, id, "tcab-driver", "2027-01-15T11:59:00Z")
}

/// A PodList of `items`.
pub fn pod_list(items: Vec<Value>) -> Value {
    tcab_testkit::kube::list("v1", "PodList", "7", items)
}

/// A failure `Status` body.
pub fn status(code: u16, reason: &str) -> Value {
    tcab_testkit::kube::failure(code, reason, &format!("mock {reason}"))
}

/// A success `Status` body, as a DELETE may answer.
pub fn success() -> Value {
    tcab_testkit::kube::success()
}

/// Settings with the orphan sweep off (the reaper then never asks a backend).
pub fn settings() -> SweepSettings {
    SweepSettings {
        driver_managed_by: "tcab-driver".into(),
        dispatcher_managed_by: "tcab-dispatcher".into(),
        orphan_sweep: false,
        orphan_grace: Duration::from_secs(600),
        orphan_sweep_interval: Duration::from_secs(300),
        terminating_margin: Duration::from_secs(60),
    }
}

/// The bound of every Kubernetes call in these tests.
pub const KUBE_TIMEOUT: Duration = Duration::from_secs(15);

/// A reaper over `client` and `jobs` with `settings`, on the fixed clock.
pub fn reaper_with(
    client: Client,
    jobs: OwnedJobs,
    settings: SweepSettings,
    backend: Option<BackendClient>,
) -> Reaper {
    Reaper::new(ReaperSetup {
        kube: client,
        job_namespace: DISPATCHER_NS.into(),
        sandbox_namespace: SANDBOXES.into(),
        jobs,
        settings,
        clock: WallClock::from_fn(now),
        backend,
        kube_timeout: KUBE_TIMEOUT,
    })
}

/// A reaper over `client` and `jobs`, sweep off, on the fixed clock.
pub fn reaper(client: Client, jobs: OwnedJobs) -> Reaper {
    reaper_with(client, jobs, settings(), None)
}

/// What the mock backend answers to `GET /jobs/active`.
#[derive(Debug, Clone)]
pub enum Active {
    /// These job ids are driven.
    Driven(Vec<String>),
    /// These raw entries, e.g. in a state this dispatcher does not know.
    Odd(Vec<serde_json::Value>),
    /// An error with this HTTP status.
    Fails(u16),
}

/// The kit's mock backend, answering the reaper's `GET /jobs/active` from
/// an [`Active`], on the reaper tests' fixed clock.
#[derive(Clone)]
pub struct MockBackend(tcab_testkit::backend::MockBackend);

impl MockBackend {
    /// Starts one answering `active`.
    pub async fn start(active: Active) -> MockBackend {
        let backend = MockBackend(tcab_testkit::backend::MockBackend::start().await);
        backend.0.lock().now = Some(now());
        backend.set(active);
        backend
    }

    /// Its base URL.
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// Changes what `GET /jobs/active` answers from now on.
    pub fn set(&self, active: Active) {
        let mut state = self.0.lock();
        state.rows.clear();
        state.active_fails = None;
        state.active_extra.clear();
        match active {
            Active::Driven(ids) => {
                let lease = Some("2030-01-01T00:00:00Z".parse().expect("ts"));
                for id in ids {
                    state.rows.insert(
                        id.clone(),
                        Row {
                            state: "running".into(),
                            lease,
                            token: tcab_testkit::backend::token_for(&id),
                            publish: false,
                        },
                    );
                }
            }
            Active::Fails(code) => state.active_fails = Some(code),
            Active::Odd(entries) => state.active_extra = entries,
        }
    }

    /// How many times `GET /jobs/active` was called.
    pub fn calls(&self) -> usize {
        self.0.lock().active_reads
    }

    /// A client of it, as the reaper builds one.
    pub fn client(&self) -> BackendClient {
        BackendClient::new(
            &self.0.url,
            Secret::new(SERVICE_TOKEN.to_owned()),
            Duration::from_secs(5),
        )
        .expect("backend client")
    }
}

pub use tcab_testkit::logs::Logs;
