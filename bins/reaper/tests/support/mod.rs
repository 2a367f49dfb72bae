//! Shared test fixtures for the reaper's tests: a mocked Kubernetes API
//! (tower-test) that records every request, Job and pod fixtures, a fixed
//! clock, and a log sink for tracing output.
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
use tcab_reaper::run::Reaper;
use tcab_shared::cluster::OwnedJobs;

/// The sandbox namespace the tests' reaper sweeps.
pub const SANDBOXES: &str = "sandboxes";
/// The one LIST of sandbox pods a tick makes.
pub const LIST_URI: &str =
    "/api/v1/namespaces/sandboxes/pods?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-driver";

/// One request as the mock saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: String,
    pub body: Value,
}

/// Answers one request with a status code and a JSON body.
pub type Responder = Box<dyn FnMut(&Seen) -> (u16, Value) + Send>;

/// A client whose every request is recorded and answered by `respond`.
pub fn mock_client(mut respond: Responder) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let request = Seen {
                method: parts.method,
                uri: parts.uri.to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, answer) = respond(&request);
            log.lock().expect("log").push(request);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                .expect("response");
            send.send_response(response);
        }
    });
    (Client::new(service, "dispatcher"), seen)
}

/// The reaper's fixed "now".
pub fn now() -> Timestamp {
    "2027-01-15T12:00:00Z".parse().expect("ts")
}

/// A driver Job for job `id`, failed or still running.
pub fn job(name: &str, id: &str, failed: bool) -> Job {
    let conditions = if failed {
        json!([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "dispatcher",
            "creationTimestamp": "2027-01-15T11:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher",
                       "tcab.dev/job-id": id, "tcab.dev/job-kind": "run"}},
        "status": {"failed": i32::from(failed), "conditions": conditions},
    }))
    .expect("job json")
}

/// A Job cache that has listed exactly `jobs`.
pub fn cache(jobs: Vec<Job>) -> OwnedJobs {
    let cache = OwnedJobs::new();
    cache.apply(Event::Init);
    for j in jobs {
        cache.apply(Event::InitApply(j));
    }
    cache.apply(Event::InitDone);
    cache
}

/// A pod in the sandbox namespace, as the API would list it.
pub fn pod(name: &str, id: &str, managed_by: &str, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": SANDBOXES, "uid": format!("uid-{name}"),
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/managed-by": managed_by, "tcab.dev/job-id": id}},
    })
}

/// A PodList of `items`.
pub fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items})
}

/// A failure `Status` body.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "message": format!("mock {reason}"), "reason": reason, "code": code})
}

/// A success `Status` body, as a DELETE may answer.
pub fn success() -> Value {
    json!({"kind": "Status", "status": "Success", "code": 200})
}

/// Sweep settings with the orphan sweep on and a 10-minute grace.
pub fn settings() -> SweepSettings {
    SweepSettings {
        driver_managed_by: "tcab-driver".into(),
        dispatcher_managed_by: "tcab-dispatcher".into(),
        orphan_sweep: true,
        orphan_grace: Duration::from_secs(600),
    }
}

/// A reaper over `client` and `jobs`, on the fixed clock.
pub fn reaper(client: Client, jobs: OwnedJobs) -> Reaper {
    Reaper::new(client, SANDBOXES, jobs, settings(), Arc::new(now))
}

/// Collects formatted log lines (a `tracing_subscriber` writer).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}
