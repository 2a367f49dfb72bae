//! Test doubles: a mock backend (axum on 127.0.0.1:0, with a test clock) and
//! a fake Kubernetes API serving the few reads the lease-keeper makes.
#![allow(dead_code)]

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_shared::Secret;
use tcab_shared::backend::client::RetryPolicy;
use tcab_shared::backend::{BackendClient, JobState};
use tcab_shared::config::{BackendConfig, CommonConfig, LogFormat};
use tcab_testkit::kube as objects;
use tcab_testkit::kube::labels_match;

pub use tcab_testkit::backend::SERVICE_TOKEN;
pub const NS: &str = "ns";

// ---------------------------------------------------------------- backend

/// The kit's mock backend, with the lease-keeper's typed helpers; the rest
/// (its state, clock and routes) is the kit's.
#[derive(Clone)]
pub struct MockBackend(pub tcab_testkit::backend::MockBackend);

impl std::ops::Deref for MockBackend {
    type Target = tcab_testkit::backend::MockBackend;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// A state as the mock holds it (its wire spelling), typed.
pub fn job_state(wire: &str) -> JobState {
    serde_json::from_value(Value::from(wire)).expect("a job state")
}

impl MockBackend {
    pub async fn start() -> Self {
        MockBackend(tcab_testkit::backend::MockBackend::start().await)
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

    /// A run claimed now, in `state`, with the claim's lease.
    pub fn add_run(&self, id: &str, state: JobState, token: &str) {
        self.0.add_run_row(id, state.as_str(), token);
    }

    pub fn add_publish(&self, id: &str, token: &str) {
        self.0.add_publish_row(id, token);
    }

    pub fn state_of(&self, id: &str) -> JobState {
        job_state(&self.0.row_state(id))
    }
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
    objects::failure_response(404, "NotFound", &format!("\"{name}\" not found"))
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
        return axum::Json(objects::list("batch/v1", "JobList", "1", items)).into_response();
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
    axum::Json(objects::list("batch/v1", "JobList", "1", items)).into_response()
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
    axum::Json(objects::list("v1", "PodList", "1", items)).into_response()
}

async fn pod_log(
    State(st): KubeShared,
    Path((_ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut s = st.lock().unwrap();
    s.log_reads += 1;
    if s.logs_fail {
        return objects::failure_response(
            500,
            "InternalError",
            "Get \"https://10.0.0.7:10250/containerLogs\": dial tcp: i/o timeout",
        );
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
