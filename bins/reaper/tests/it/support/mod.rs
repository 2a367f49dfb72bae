//! Shared test fixtures for the reaper's tests: the test kit's fake
//! Kubernetes API (which records every request and lets a test intercept
//! any), the kit's mock backend answering `GET /jobs/active`, Job and pod
//! fixtures, a fixed clock, and a log sink for tracing output.
#![allow(dead_code)]

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_reaper::SweepSettings;
use tcab_reaper::run::{Reaper, ReaperSetup};
use tcab_shared::backend::BackendClient;
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::{Secret, WallClock};
use tcab_testkit::backend::Row;
pub use tcab_testkit::fake_kube::{Answer, FakeKube, Seen};

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
pub fn is_pod_list(seen: &Seen) -> bool {
    seen.method == "GET" && seen.uri.starts_with("/api/v1/namespaces/sandboxes/pods?")
}

/// Whether a request is a DELETE.
pub fn is_delete(seen: &Seen) -> bool {
    seen.method == "DELETE"
}

/// The service token the mock backend expects.
pub use tcab_testkit::backend::SERVICE_TOKEN;

/// The confirming read of the owned Jobs carrying job id `id`.
pub fn jobs_uri(id: &str) -> String {
    format!(
        "/apis/batch/v1/namespaces/dispatcher/jobs?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-dispatcher%2Ctcab.dev%2Fjob-id%3D{id}"
    )
}

/// Whether a request is a confirming read (of the owned Jobs of one job id).
pub fn is_confirm(seen: &Seen) -> bool {
    seen.uri
        .strip_prefix("/apis/batch/v1/namespaces/dispatcher/jobs?")
        .is_some_and(|query| query.contains("tcab.dev%2Fjob-id%3D"))
}

/// The kit's fake API holding `pods` (the sandbox namespace's) and `jobs`
/// (the dispatcher's, which confirming reads find), and a client of it.
pub async fn api(pods: Vec<Value>, jobs: &[Job]) -> (Client, FakeKube) {
    let kube = FakeKube::start(|job| {
        job["metadata"]["labels"]["tcab.dev/job-kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
    .await;
    for pod in pods {
        kube.put_pod(pod, "");
    }
    for job in jobs {
        kube.put_job(serde_json::to_value(job).expect("job json"));
    }
    let mut config = kube::Config::new(kube.url.parse().expect("url"));
    config.default_namespace = DISPATCHER_NS.into();
    let client = tcab_shared::kube_api::client_from(config).expect("client");
    (client, kube)
}

/// [`api`], with every request shown to `intercept` first (`None`: the
/// fake answers it).
pub async fn api_with(
    pods: Vec<Value>,
    jobs: &[Job],
    intercept: impl FnMut(&Seen) -> Option<Answer> + Send + 'static,
) -> (Client, FakeKube) {
    let (client, kube) = api(pods, jobs).await;
    kube.intercept(intercept);
    (client, kube)
}

/// A client of an address nothing listens on: every call fails in transport.
pub fn unreachable_api() -> Client {
    let url = format!("http://{}", tcab_testkit::http::closed_addr());
    let mut config = kube::Config::new(url.parse().expect("url"));
    config.default_namespace = DISPATCHER_NS.into();
    tcab_shared::kube_api::client_from(config).expect("client")
}

/// The requests the fake API received so far, as `METHOD uri`, leaving out
/// the Events the reaper leaves on Jobs (created off the tick, by their
/// own writer, whenever it gets to them: see `events_about`).
pub fn requests(kube: &FakeKube) -> Vec<String> {
    journal(kube).iter().map(Seen::to_string).collect()
}

/// The requests the fake API received so far, without the Event creates.
pub fn journal(kube: &FakeKube) -> Vec<Seen> {
    kube.lock()
        .journal
        .iter()
        .filter(|s| !s.uri.starts_with("/apis/events.k8s.io/"))
        .cloned()
        .collect()
}

/// The Events recorded about the Job `name`, once there are at least `n`.
pub async fn events_about(kube: &FakeKube, name: &str, n: usize) -> Vec<Value> {
    tcab_testkit::wait::until(
        &format!("{n} Events about {name}"),
        std::time::Duration::from_secs(10),
        || async move {
            let about: Vec<Value> = kube
                .recorded_events()
                .into_iter()
                .filter(|e| e["regarding"]["name"] == name)
                .collect();
            (about.len() >= n).then_some(about)
        },
    )
    .await
}

/// The status answer of a failed call.
pub fn refuse(code: u16, reason: &str) -> Option<Answer> {
    Some(Answer::Json(code, status(code, reason)))
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
