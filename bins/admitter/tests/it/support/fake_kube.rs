//! A minimal Kubernetes API for batch/v1 Jobs on 127.0.0.1:0, enough for the
//! admitter: list, watch (a stream of events from a resourceVersion), get by
//! name, create (201, 409 AlreadyExists). Faults per lane on create: an
//! error status, a hold until released, a delay, or storing the Job and
//! never answering; reads can be made to fail. It records the highest number
//! of non-terminal Jobs per lane ever present at once.
//! (Label selectors are not applied: every Job here is the admitter's.)

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_shared::{Lane, names};
use tokio::sync::{mpsc, watch};

pub const NAMESPACE: &str = "ns";

/// What a create of a lane does instead of answering at once.
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

struct Inner {
    rv: u64,
    jobs: BTreeMap<String, Value>,
    log: Vec<(u64, Value)>,
    watchers: Vec<mpsc::UnboundedSender<Result<Bytes, Infallible>>>,
    create_faults: HashMap<Lane, CreateFault>,
    /// Answer every read by name with this status instead.
    read_fault: Option<(u16, String, String)>,
    /// Create requests received per lane (answered or not).
    create_requests: HashMap<Lane, u32>,
    /// Creates answered 201 per lane.
    creates: HashMap<Lane, u32>,
    reads: u32,
    max_live: HashMap<Lane, usize>,
    release: watch::Sender<bool>,
}

#[derive(Clone)]
pub struct FakeKube {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

fn lane_of(job: &Value) -> Lane {
    let labels: BTreeMap<String, String> =
        serde_json::from_value(job["metadata"]["labels"].clone()).unwrap_or_default();
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    Lane::classify(&labels, name)
}

fn is_live(job: &Value) -> bool {
    !job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    tcab_testkit::kube::failure_response(code, reason, message)
}

impl Inner {
    /// Stores a created Job (uid, namespace, creation time) and counts it.
    fn store_created(&mut self, lane: Lane, name: &str, mut job: Value) -> Value {
        job["metadata"]["uid"] = json!(format!("uid-{name}"));
        job["metadata"]["namespace"] = json!(NAMESPACE);
        job["metadata"]["creationTimestamp"] = json!("2026-11-29T17:00:00Z");
        *self.creates.entry(lane).or_default() += 1;
        self.emit("ADDED", job);
        self.jobs[name].clone()
    }

    /// Stores a new version of a Job and tells every watcher.
    fn emit(&mut self, kind: &str, mut job: Value) {
        self.rv += 1;
        job["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let name = job["metadata"]["name"].as_str().unwrap().to_owned();
        if kind == "DELETED" {
            self.jobs.remove(&name);
        } else {
            self.jobs.insert(name, job.clone());
        }
        let event = json!({"type": kind, "object": job});
        self.log.push((self.rv, event.clone()));
        let line = Bytes::from(format!("{event}\n"));
        self.watchers.retain(|w| w.send(Ok(line.clone())).is_ok());
        for lane in Lane::ALL {
            let live = self
                .jobs
                .values()
                .filter(|j| lane_of(j) == lane && is_live(j))
                .count();
            let max = self.max_live.entry(lane).or_default();
            *max = (*max).max(live);
        }
    }
}

impl FakeKube {
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            rv: 0,
            jobs: BTreeMap::new(),
            log: vec![],
            watchers: vec![],
            create_faults: HashMap::new(),
            read_fault: None,
            create_requests: HashMap::new(),
            creates: HashMap::new(),
            reads: 0,
            max_live: HashMap::new(),
            release: watch::channel(true).0,
        }));
        let app = Router::new()
            .route(
                &format!("/apis/batch/v1/namespaces/{NAMESPACE}/jobs"),
                get(list_or_watch).post(create),
            )
            .route(
                &format!("/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{{name}}"),
                get(read),
            )
            .with_state(inner.clone());
        let url = tcab_testkit::http::serve_url(app).await;
        FakeKube { url, inner }
    }

    pub fn client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = NAMESPACE.into();
        tcab_shared::kube_api::client_from(config).unwrap()
    }

    /// Puts a Job there as another admitter would have (labelled, live).
    pub fn seed(&self, lane: Lane, id: &str, claim: &str, managed_by: &str) -> String {
        let name = names::job_name(lane, id, claim);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-11-29T17:00:00Z",
            "labels": {names::MANAGED_BY: managed_by, names::JOB_ID: id,
                       names::JOB_KIND: lane.label_value(), names::CLAIM: claim}},
            "spec": {"template": {"spec": {"containers": []}}}, "status": {}});
        self.inner.lock().unwrap().emit("ADDED", job);
        name
    }

    /// Makes every create of `lane` answer this error status.
    pub fn refuse(&self, lane: Lane, refusal: Option<(u16, &str, &str)>) {
        self.fault_creates(
            lane,
            refusal.map(|(code, reason, message)| {
                CreateFault::Refuse(code, reason.into(), message.into())
            }),
        );
    }

    /// Makes every create of `lane` misbehave this way (`None`: answer normally).
    pub fn fault_creates(&self, lane: Lane, fault: Option<CreateFault>) {
        let mut inner = self.inner.lock().unwrap();
        if matches!(
            fault,
            Some(CreateFault::Hold | CreateFault::HoldThenRefuse(..))
        ) {
            inner.release.send_replace(false);
        }
        match fault {
            Some(fault) => inner.create_faults.insert(lane, fault),
            None => inner.create_faults.remove(&lane),
        };
    }

    /// Lets every held create (and every later one) go on.
    pub fn release_creates(&self) {
        let mut inner = self.inner.lock().unwrap();
        inner
            .create_faults
            .retain(|_, f| !matches!(f, CreateFault::Hold | CreateFault::HoldThenRefuse(..)));
        inner.release.send_replace(true);
    }

    /// Makes every read by name answer this error status (`None`: answer normally).
    pub fn fail_reads(&self, failure: Option<(u16, &str, &str)>) {
        self.inner.lock().unwrap().read_fault =
            failure.map(|(code, reason, message)| (code, reason.into(), message.into()));
    }

    /// Marks a Job succeeded.
    pub fn finish(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        let Some(mut job) = inner.jobs.get(name).cloned() else {
            return;
        };
        job["status"] =
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]});
        inner.emit("MODIFIED", job);
    }

    /// Names of the live Jobs of a lane.
    pub fn live(&self, lane: Lane) -> Vec<String> {
        let inner = self.inner.lock().unwrap();
        inner
            .jobs
            .iter()
            .filter(|(_, j)| lane_of(j) == lane && is_live(j))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every Job of a lane.
    pub fn jobs(&self, lane: Lane) -> Vec<Value> {
        let inner = self.inner.lock().unwrap();
        inner
            .jobs
            .values()
            .filter(|j| lane_of(j) == lane)
            .cloned()
            .collect()
    }

    /// Create requests received in a lane (answered or not).
    pub fn create_requests(&self, lane: Lane) -> u32 {
        self.inner
            .lock()
            .unwrap()
            .create_requests
            .get(&lane)
            .copied()
            .unwrap_or(0)
    }

    /// Reads by name received.
    pub fn reads(&self) -> u32 {
        self.inner.lock().unwrap().reads
    }

    /// Create requests answered 201 in a lane.
    pub fn creates(&self, lane: Lane) -> u32 {
        self.inner
            .lock()
            .unwrap()
            .creates
            .get(&lane)
            .copied()
            .unwrap_or(0)
    }

    /// The most non-terminal Jobs of a lane ever present at once.
    pub fn max_live(&self, lane: Lane) -> usize {
        self.inner
            .lock()
            .unwrap()
            .max_live
            .get(&lane)
            .copied()
            .unwrap_or(0)
    }
}

async fn list_or_watch(
    State(inner): State<Arc<Mutex<Inner>>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut inner = inner.lock().unwrap();
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    if !watching {
        let items: Vec<Value> = inner.jobs.values().cloned().collect();
        let body = tcab_testkit::kube::list("batch/v1", "JobList", &inner.rv.to_string(), items);
        return axum::Json(body).into_response();
    }
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = mpsc::unbounded_channel();
    for (rv, event) in &inner.log {
        if *rv > from {
            let _ = tx.send(Ok(Bytes::from(format!("{event}\n"))));
        }
    }
    inner.watchers.push(tx);
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn create(
    State(inner): State<Arc<Mutex<Inner>>>,
    axum::Json(job): axum::Json<Value>,
) -> Response {
    let lane = lane_of(&job);
    let Some(name) = job["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(422, "Invalid", "metadata.name: Required value");
    };
    let (fault, mut release) = {
        let mut inner = inner.lock().unwrap();
        *inner.create_requests.entry(lane).or_default() += 1;
        (
            inner.create_faults.get(&lane).cloned(),
            inner.release.subscribe(),
        )
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
        Some(CreateFault::Delay(wait)) => tokio::time::sleep(wait).await,
        Some(CreateFault::StoreThenHang) => {
            {
                let mut inner = inner.lock().unwrap();
                if !inner.jobs.contains_key(&name) {
                    inner.store_created(lane, &name, job.clone());
                }
            }
            std::future::pending::<()>().await;
        }
        Some(CreateFault::Hang) => std::future::pending::<()>().await,
        None => {}
    }
    let mut inner = inner.lock().unwrap();
    if inner.jobs.contains_key(&name) {
        return status(
            409,
            "AlreadyExists",
            &format!("jobs.batch \"{name}\" already exists"),
        );
    }
    let stored = inner.store_created(lane, &name, job);
    (StatusCode::CREATED, axum::Json(stored)).into_response()
}

async fn read(
    State(inner): State<Arc<Mutex<Inner>>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let mut inner = inner.lock().unwrap();
    inner.reads += 1;
    if let Some((code, reason, message)) = inner.read_fault.clone() {
        return status(code, &reason, &message);
    }
    match inner.jobs.get(&name) {
        Some(job) => axum::Json(job.clone()).into_response(),
        None => status(404, "NotFound", &format!("jobs.batch \"{name}\" not found")),
    }
}

/// The Jobs API of the fake's namespace.
pub fn jobs_api(kube: &FakeKube) -> kube::Api<k8s_openapi::api::batch::v1::Job> {
    kube::Api::namespaced(kube.client(), NAMESPACE)
}
