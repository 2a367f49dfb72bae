//! `run` against a mocked API server: it sweeps nothing until the Job
//! watch has delivered its first full list, then ticks every poll interval,
//! and stops cleanly on shutdown.

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_reaper::run::{Deps, run};
use tcab_shared::config::{CommonConfig, LogFormat, ReaperConfig};
use tcab_shared::tick::Shutdown;
use tokio::sync::oneshot;

fn config() -> ReaperConfig {
    ReaperConfig {
        common: CommonConfig {
            namespace: Some("dispatcher".into()),
            managed_by: "tcab-dispatcher".into(),
            poll_interval: Duration::from_secs(5),
            log_format: LogFormat::Text,
            vault_addr: SocketAddr::from(([127, 0, 0, 1], 50051)),
            metrics_addr: None,
        },
        sandbox_namespace: Some("sandboxes".into()),
        driver_managed_by: "tcab-driver".into(),
        orphan_sweep: true,
        orphan_grace: Duration::from_secs(600),
    }
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, body: &Value) {
    send.send_response(
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response"),
    );
}

#[derive(Default)]
struct Seen {
    /// Whether the first Job list has arrived (and is being held).
    job_list_held: bool,
    pod_lists: usize,
    deletes: Vec<String>,
}

/// Waits (in virtual time) until `cond` holds, failing after a deadline.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn sweeps_nothing_before_the_first_job_list_then_ticks_until_shutdown() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let log = seen.clone();
    let (release_jobs, jobs_released) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut jobs_released = Some(jobs_released);
        let mut held_watches = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let uri = request.uri().to_string();
            let method = request.method().clone();
            if uri.starts_with("/apis/batch/v1/namespaces/dispatcher/jobs") {
                assert!(
                    uri.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-dispatcher"),
                    "{uri}"
                );
                if uri.contains("watch=true") {
                    // Keep the watch open and silent.
                    held_watches.push(send);
                    continue;
                }
                // The first list answers only when the test says so.
                if let Some(gate) = jobs_released.take() {
                    log.lock().expect("log").job_list_held = true;
                    let _ = gate.await;
                }
                let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": "tcab-driver-a-1", "namespace": "dispatcher",
                        "resourceVersion": "3", "creationTimestamp": "2027-01-15T11:00:00Z",
                        "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher",
                                   "tcab.dev/job-id": "a", "tcab.dev/job-kind": "run"}},
                    "status": {"active": 1}});
                respond(
                    send,
                    &json!({"apiVersion": "batch/v1", "kind": "JobList",
                    "metadata": {"resourceVersion": "5"}, "items": [job]}),
                );
            } else if method == Method::GET && uri.starts_with("/api/v1/namespaces/sandboxes/pods?")
            {
                log.lock().expect("log").pod_lists += 1;
                // A long-lived sandbox of the live Job "a": an orphan to a
                // reaper that swept against an empty cache.
                let pod = json!({"metadata": {"name": "sb-a", "namespace": "sandboxes", "uid": "u",
                    "creationTimestamp": "2000-01-01T00:00:00Z",
                    "labels": {"app.kubernetes.io/managed-by": "tcab-driver", "tcab.dev/job-id": "a"}}});
                respond(
                    send,
                    &json!({"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": "9"}, "items": [pod]}),
                );
            } else {
                log.lock()
                    .expect("log")
                    .deletes
                    .push(format!("{method} {uri}"));
                respond(
                    send,
                    &json!({"kind": "Status", "status": "Success", "code": 200}),
                );
            }
        }
    });

    let (trigger, shutdown) = Shutdown::channel();
    let client = Client::new(service, "default");
    let task = tokio::spawn(run(config(), Deps::new(client), shutdown));

    // The Job list is asked for and held; a minute of (paused,
    // auto-advanced) time passes without its answer: no tick.
    until("the Job list request", || {
        seen.lock().expect("log").job_list_held
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        seen.lock().expect("log").pod_lists,
        0,
        "ticked before the cache listed"
    );

    release_jobs.send(()).expect("mock alive");
    // Ticks follow, one per poll interval; wait (in virtual time) for three.
    until("three ticks after the list", || {
        seen.lock().expect("log").pod_lists >= 3
    })
    .await;
    assert!(
        seen.lock().expect("log").deletes.is_empty(),
        "the live Job's sandbox was deleted"
    );

    trigger.trigger();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_before_the_first_list_stops_cleanly() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    // Never answer anything; count what is asked.
    let asked = Arc::new(Mutex::new(0_usize));
    let count = asked.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((_, send)) = handle.next_request().await {
            *count.lock().expect("count") += 1;
            held.push(send);
        }
    });
    let (trigger, shutdown) = Shutdown::channel();
    let task = tokio::spawn(run(
        config(),
        Deps::new(Client::new(service, "default")),
        shutdown,
    ));
    // Shut down while the first Job list is unanswered.
    until("the Job list request", || {
        *asked.lock().expect("count") >= 1
    })
    .await;
    trigger.trigger();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok());
}
