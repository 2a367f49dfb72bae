//! `run` against a mocked API server: it reaps nothing until the Job watch
//! has delivered its first full list, lets the tick in flight finish on
//! shutdown (never cut between its LIST and its deletes), and stops cleanly.

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, RunError, TickReport, run};
use tcab_shared::config::{CommonConfig, LogFormat};
use tcab_shared::runtime::CancellationToken;
use tcab_testkit::kube as objects;
use tokio::sync::oneshot;

fn config() -> ReaperConfig {
    ReaperConfig {
        common: CommonConfig {
            namespace: Some("dispatcher".into()),
            managed_by: "tcab-dispatcher".into(),
            poll_interval: Duration::from_secs(5),
            log_format: LogFormat::Text,
            vault_addr: SocketAddr::from(([127, 0, 0, 1], 50051)),
            kube_timeout: Duration::from_secs(15),
            watch_timeout: Duration::from_secs(60),
            metrics_addr: None,
        },
        sandbox_namespace: Some("sandboxes".into()),
        driver_managed_by: "tcab-driver".into(),
        // The sweep needs a backend (real sockets); these tests run on a
        // paused clock and reap failed drivers only.
        orphan_sweep: false,
        orphan_grace: Duration::from_secs(600),
        orphan_sweep_interval: Duration::from_secs(300),
        terminating_margin: Duration::from_secs(60),
        backend: None,
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

fn driver_job(name: &str, id: &str, failed: bool) -> Value {
    let status = if failed {
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]})
    } else {
        json!({"active": 1})
    };
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "dispatcher", "uid": format!("uid-{name}"),
            "resourceVersion": "3", "creationTimestamp": "2027-01-15T11:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher",
                       "tcab.dev/job-id": id, "tcab.dev/job-kind": "run"}},
        "status": status})
}

fn sandbox(name: &str, id: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "sandboxes", "uid": format!("uid-{name}"),
        "creationTimestamp": "2000-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/managed-by": "tcab-driver", "tcab.dev/job-id": id}}})
}

#[derive(Default)]
struct Seen {
    /// Whether the first Job list has arrived (and is being held).
    job_list_held: bool,
    /// Whether a pod LIST is being held.
    pod_list_held: bool,
    pod_lists: usize,
    reads: usize,
    deletes: Vec<String>,
}

/// Waits (in virtual time) until `cond` holds, failing after a deadline.
async fn until(what: &str, cond: impl FnMut() -> bool) {
    tcab_testkit::wait::eventually(what, Duration::from_secs(60), cond).await
}

/// Gates the mock holds an answer at until the test opens them.
struct Gates {
    job_list: Option<oneshot::Receiver<()>>,
    pod_list: Option<oneshot::Receiver<()>>,
}

/// A mock API server: Jobs `a` (failed) and `b` (live), a sandbox of each.
fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    seen: Arc<Mutex<Seen>>,
    mut gates: Gates,
) {
    tokio::spawn(async move {
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
                let confirm = uri.contains("tcab.dev%2Fjob-id%3D");
                if confirm {
                    seen.lock().expect("log").reads += 1;
                } else if let Some(gate) = gates.job_list.take() {
                    seen.lock().expect("log").job_list_held = true;
                    let _ = gate.await;
                }
                let mut items = vec![driver_job("tcab-driver-a-1", "a", true)];
                if !confirm {
                    items.push(driver_job("tcab-driver-b-1", "b", false));
                }
                respond(send, &objects::list("batch/v1", "JobList", "5", items));
            } else if uri.starts_with("/api/v1/namespaces/dispatcher/pods?") {
                // The list of the dispatcher's own live pods (after the Job
                // list): none outlived its Job.
                assert!(uri.contains("fieldSelector=status.phase"), "{uri}");
                respond(send, &objects::list("v1", "PodList", "5", vec![]));
            } else if method == Method::GET && uri.starts_with("/api/v1/namespaces/sandboxes/pods?")
            {
                seen.lock().expect("log").pod_lists += 1;
                if let Some(gate) = gates.pod_list.take() {
                    seen.lock().expect("log").pod_list_held = true;
                    let _ = gate.await;
                }
                respond(
                    send,
                    &objects::list(
                        "v1",
                        "PodList",
                        "9",
                        vec![sandbox("sb-a", "a"), sandbox("sb-b", "b")],
                    ),
                );
            } else {
                seen.lock()
                    .expect("log")
                    .deletes
                    .push(format!("{method} {uri}"));
                respond(send, &objects::success());
            }
        }
    });
}

fn deps(client: Client, reports: Arc<Mutex<Vec<TickReport>>>) -> Deps {
    let mut deps = Deps::new(client, "dispatcher".into(), None);
    deps.on_tick = Some(Arc::new(move |r: &TickReport| {
        reports.lock().expect("reports").push(r.clone());
    }));
    deps
}

#[tokio::test(start_paused = true)]
async fn reaps_nothing_before_the_first_job_list_then_ticks_until_shutdown() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (release_jobs, jobs_released) = oneshot::channel::<()>();
    serve(
        handle,
        seen.clone(),
        Gates {
            job_list: Some(jobs_released),
            pod_list: None,
        },
    );
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let client = Client::new(service, "default");
    let task = tokio::spawn(run(config(), deps(client, reports.clone()), shutdown));

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
        "ticked before the view listed"
    );
    assert!(reports.lock().expect("reports").is_empty());

    release_jobs.send(()).expect("mock alive");
    // The failed driver's sandbox is reaped; ticks follow, one per poll
    // interval, and list nothing more.
    until("three ticks after the list", || {
        reports.lock().expect("reports").len() >= 3
    })
    .await;
    {
        let seen = seen.lock().expect("log");
        assert_eq!(
            seen.deletes,
            ["DELETE /api/v1/namespaces/sandboxes/pods/sb-a?"],
            "only the failed driver's sandbox"
        );
        assert_eq!((seen.pod_lists, seen.reads), (1, 1));
    }

    trigger.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_tick_lets_it_finish_its_deletes() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (release_pods, pods_released) = oneshot::channel::<()>();
    serve(
        handle,
        seen.clone(),
        Gates {
            job_list: None,
            pod_list: Some(pods_released),
        },
    );
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let client = Client::new(service, "default");
    let task = tokio::spawn(run(config(), deps(client, reports.clone()), shutdown));

    // SIGTERM arrives while the tick's LIST is in flight.
    until("the pod LIST", || seen.lock().expect("log").pod_list_held).await;
    trigger.cancel();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished(), "the tick was cut short");
    release_pods.send(()).expect("mock alive");

    let result = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("run stops after the tick")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
    let seen = seen.lock().expect("log");
    assert_eq!(
        seen.deletes,
        ["DELETE /api/v1/namespaces/sandboxes/pods/sb-a?"],
        "the tick's delete was sent before the reaper stopped"
    );
    let reports = reports.lock().expect("reports");
    assert_eq!(reports.len(), 1, "no tick after shutdown");
    assert_eq!(reports[0].reaped().count(), 1);
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
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let task = tokio::spawn(run(
        config(),
        Deps::new(Client::new(service, "default"), "dispatcher".into(), None),
        shutdown,
    ));
    // Shut down while the first Job list is unanswered.
    until("the Job list request", || {
        *asked.lock().expect("count") >= 1
    })
    .await;
    trigger.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok());
}

#[tokio::test]
async fn the_sweep_without_a_backend_client_is_refused_at_start() {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let sweeping = ReaperConfig {
        orphan_sweep: true,
        ..config()
    };
    let error = run(
        sweeping,
        Deps::new(Client::new(service, "default"), "dispatcher".into(), None),
        CancellationToken::new(),
    )
    .await
    .expect_err("refused");
    assert!(matches!(
        error.downcast_ref::<RunError>(),
        Some(RunError::NoBackend)
    ));
}
