//! What the reaper logs when the sandbox namespace refuses it. Alone in its
//! own test binary: tracing caches per-callsite interest process-wide, so a
//! log line first hit by a concurrent test without a subscriber could be
//! lost to the subscriber this test installs.

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
use tcab_reaper::run::{DeleteOutcome, Reaper};
use tcab_shared::cluster::OwnedJobs;

const SANDBOXES: &str = "sandboxes";
const LIST_URI: &str =
    "/api/v1/namespaces/sandboxes/pods?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-driver";

/// One request as the mock saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    body: Value,
}

type Responder = Box<dyn FnMut(&Seen) -> (u16, Value) + Send>;

/// A client whose every request is recorded and answered by `respond`.
fn mock_client(mut respond: Responder) -> (Client, Arc<Mutex<Vec<Seen>>>) {
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

fn now() -> Timestamp {
    "2027-01-15T12:00:00Z".parse().expect("ts")
}

fn job(name: &str, id: &str, failed: bool) -> Job {
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

fn cache(jobs: Vec<Job>) -> OwnedJobs {
    let cache = OwnedJobs::new();
    cache.apply(Event::Init);
    for j in jobs {
        cache.apply(Event::InitApply(j));
    }
    cache.apply(Event::InitDone);
    cache
}

fn pod(name: &str, id: &str, managed_by: &str, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": SANDBOXES, "uid": format!("uid-{name}"),
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/managed-by": managed_by, "tcab.dev/job-id": id}},
    })
}

fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items})
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "message": format!("mock {reason}"), "reason": reason, "code": code})
}

fn settings() -> SweepSettings {
    SweepSettings {
        driver_managed_by: "tcab-driver".into(),
        dispatcher_managed_by: "tcab-dispatcher".into(),
        orphan_sweep: true,
        orphan_grace: Duration::from_secs(600),
    }
}

fn reaper(client: Client, jobs: OwnedJobs) -> Reaper {
    Reaper::new(client, SANDBOXES, jobs, settings(), Arc::new(now))
}

/// Collects formatted log lines.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

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
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn forbidden_list_is_logged_with_the_namespace_and_retried() {
    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // Forbidden twice (RBAC missing), then granted.
    let mut calls = 0;
    let listed = pod_list(vec![pod(
        "sb-a",
        "a",
        "tcab-driver",
        "2027-01-15T11:59:00Z",
    )]);
    let (client, seen) = mock_client(Box::new(move |req| match req.method {
        Method::GET => {
            calls += 1;
            if calls <= 2 {
                (403, status(403, "Forbidden"))
            } else {
                (200, listed.clone())
            }
        }
        _ => (
            200,
            json!({"kind": "Status", "status": "Success", "code": 200}),
        ),
    }));
    let r = reaper(client, cache(vec![job("tcab-driver-a-1", "a", true)]));
    for _ in 0..2 {
        let report = r.tick().await;
        assert!(report.list_failed);
        assert!(report.deletes.is_empty());
    }
    let report = r.tick().await;
    assert!(!report.list_failed);
    assert_eq!(
        report.deletes,
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 4, "three LISTs, one DELETE: {seen:?}");
    assert!(seen[..3].iter().all(|s| s.uri == LIST_URI));
    assert_eq!(seen[3].body["preconditions"]["uid"], "uid-sb-a");

    let text = logs.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{text}");
    for line in warnings {
        assert!(line.contains("namespace=sandboxes"), "{line}");
        assert!(line.contains("code=403"), "{line}");
        assert!(line.contains("RBAC"), "{line}");
    }
    let reaped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("reaped sandbox pod"))
        .collect();
    assert_eq!(reaped.len(), 1, "{text}");
    assert!(reaped[0].contains("job_id=a") && reaped[0].contains("sandboxes/sb-a"));
    assert!(
        reaped[0].contains("driver Job tcab-driver-a-1 failed"),
        "{}",
        reaped[0]
    );
}
