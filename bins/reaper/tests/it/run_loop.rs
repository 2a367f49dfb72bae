//! `run` against the test kit's fake API server: it reaps nothing until the
//! Job watch has delivered its first full list, lets the tick in flight
//! finish on shutdown (never cut between its LIST and its deletes), and
//! stops cleanly.

use crate::support::{Answer, FakeKube, Seen, api_with, is_confirm, is_pod_list, unreachable_api};
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, RunError, TickReport, run};
use tcab_shared::config::{CommonConfig, LogFormat};
use tcab_shared::runtime::CancellationToken;
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

fn driver_job(name: &str, id: &str, failed: bool) -> Job {
    let status = if failed {
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]})
    } else {
        json!({"active": 1})
    };
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "dispatcher", "uid": format!("uid-{name}"),
            "creationTimestamp": "2027-01-15T11:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher",
                       "tcab.dev/job-id": id, "tcab.dev/job-kind": "run"}},
        "status": status}))
    .expect("job json")
}

fn sandbox(name: &str, id: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "sandboxes", "uid": format!("uid-{name}"),
        "creationTimestamp": "2000-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/managed-by": "tcab-driver", "tcab.dev/job-id": id}}})
}

/// Waits (in virtual time) until `cond` holds, failing after a deadline.
async fn until(what: &str, cond: impl FnMut() -> bool) {
    tcab_testkit::wait::eventually(what, Duration::from_secs(60), cond).await
}

/// The fake API: Jobs `a` (failed) and `b` (live), a sandbox of each; the
/// sandbox LIST is held until `pods_released` fires, when given.
async fn cluster(pods_released: Option<oneshot::Receiver<()>>) -> (kube::Client, FakeKube) {
    let jobs = [
        driver_job("tcab-driver-a-1", "a", true),
        driver_job("tcab-driver-b-1", "b", false),
    ];
    let pods = vec![sandbox("sb-a", "a"), sandbox("sb-b", "b")];
    let mut gate = pods_released;
    api_with(pods, &jobs, move |req| {
        if is_pod_list(req) {
            return gate.take().map(Answer::After);
        }
        None
    })
    .await
}

/// The requests of `kube`'s journal that `what` picks.
fn count(kube: &FakeKube, what: fn(&Seen) -> bool) -> usize {
    kube.lock().journal.iter().filter(|s| what(s)).count()
}

/// The DELETEs received, as `METHOD uri`.
fn deletes(kube: &FakeKube) -> Vec<String> {
    kube.lock()
        .journal
        .iter()
        .filter(|s| s.method == "DELETE")
        .map(Seen::to_string)
        .collect()
}

/// Every request for the dispatcher's Jobs selects its own (managed-by),
/// and its list of its own pods only those not finished (the fake answers
/// any selector it is given, so this checks what the reaper asks).
fn assert_selectors(kube: &FakeKube) {
    for seen in &kube.lock().journal {
        if seen
            .uri
            .starts_with("/apis/batch/v1/namespaces/dispatcher/jobs?")
        {
            assert!(
                seen.uri
                    .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-dispatcher"),
                "{seen}"
            );
        }
        if seen.uri.starts_with("/api/v1/namespaces/dispatcher/pods?") {
            assert!(seen.uri.contains("fieldSelector=status.phase"), "{seen}");
        }
    }
}

/// Whether a request is the Job list a watch starts with (not a watch, not
/// a confirming read).
fn is_job_list(seen: &Seen) -> bool {
    seen.uri
        .starts_with("/apis/batch/v1/namespaces/dispatcher/jobs?")
        && !seen.uri.contains("watch=")
        && !is_confirm(seen)
}

fn deps(client: kube::Client, reports: Arc<Mutex<Vec<TickReport>>>) -> Deps {
    let mut deps = Deps::new(client, "dispatcher".into(), None);
    deps.on_tick = Some(Arc::new(move |r: &TickReport| {
        reports.lock().expect("reports").push(r.clone());
    }));
    deps
}

#[tokio::test(start_paused = true)]
async fn reaps_nothing_before_the_first_job_list_then_ticks_until_shutdown() {
    let (client, kube) = cluster(None).await;
    // The first Job list is held until the test lets it answer.
    kube.lock().list_ready = false;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let task = tokio::spawn(run(config(), deps(client, reports.clone()), shutdown));

    // The Job list is asked for and held; a minute of (paused,
    // auto-advanced) time passes without its answer: no tick.
    until("the Job list request", || kube.lock().held_lists >= 1).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        count(&kube, is_pod_list),
        0,
        "ticked before the view listed"
    );
    assert!(reports.lock().expect("reports").is_empty());

    kube.lock().list_ready = true;
    // The failed driver's sandbox is reaped; ticks follow, one per poll
    // interval, and list nothing more.
    until("three ticks after the list", || {
        reports.lock().expect("reports").len() >= 3
    })
    .await;
    assert_eq!(
        deletes(&kube),
        ["DELETE /api/v1/namespaces/sandboxes/pods/sb-a?"],
        "only the failed driver's sandbox"
    );
    assert_eq!(
        (count(&kube, is_pod_list), count(&kube, is_confirm)),
        (1, 1)
    );
    assert_selectors(&kube);
    assert!(
        kube.lock()
            .journal
            .iter()
            .any(|s| s.uri.starts_with("/api/v1/namespaces/dispatcher/pods?")),
        "the dispatcher's own pods were listed"
    );

    trigger.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_tick_lets_it_finish_its_deletes() {
    let (release_pods, pods_released) = oneshot::channel::<()>();
    let (client, kube) = cluster(Some(pods_released)).await;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let task = tokio::spawn(run(config(), deps(client, reports.clone()), shutdown));

    // SIGTERM arrives while the tick's LIST is in flight.
    until("the pod LIST", || count(&kube, is_pod_list) == 1).await;
    trigger.cancel();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished(), "the tick was cut short");
    release_pods.send(()).expect("the fake holds the LIST");

    let result = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("run stops after the tick")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        deletes(&kube),
        ["DELETE /api/v1/namespaces/sandboxes/pods/sb-a?"],
        "the tick's delete was sent before the reaper stopped"
    );
    let reports = reports.lock().expect("reports");
    assert_eq!(reports.len(), 1, "no tick after shutdown");
    assert_eq!(reports[0].reaped().count(), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_before_the_first_list_stops_cleanly() {
    // Never answer anything.
    let (client, kube) = api_with(vec![], &[], |_| Some(Answer::Hang)).await;
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let task = tokio::spawn(run(
        config(),
        Deps::new(client, "dispatcher".into(), None),
        shutdown,
    ));
    // Shut down while the first Job list is unanswered.
    until("the Job list request", || count(&kube, is_job_list) >= 1).await;
    trigger.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok());
}

#[tokio::test]
async fn the_sweep_without_a_backend_client_is_refused_at_start() {
    let sweeping = ReaperConfig {
        orphan_sweep: true,
        ..config()
    };
    let error = run(
        sweeping,
        Deps::new(unreachable_api(), "dispatcher".into(), None),
        CancellationToken::new(),
    )
    .await
    .expect_err("refused");
    assert!(matches!(
        error.downcast_ref::<RunError>(),
        Some(RunError::NoBackend)
    ));
}

/// The reaper's `/status`, read over HTTP from `run()` as the binary serves
/// it: of two dead drivers' sandboxes, one is reaped and one refused (403);
/// the document names the reaped pod, and the refused one's job id as the
/// last error and as backing off.
#[tokio::test]
async fn status_names_the_last_reap_and_the_refused_one_by_job_id() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let jobs = [
        driver_job("tcab-driver-a-1", "a", true),
        driver_job("tcab-driver-c-1", "c", true),
    ];
    let pods = vec![sandbox("sb-a", "a"), sandbox("sb-c", "c")];
    let (client, _kube) = api_with(pods, &jobs, |req| {
        (req.method == "DELETE" && req.uri.contains("/pods/sb-c")).then(|| {
            Answer::Json(
                403,
                tcab_testkit::kube::failure(403, "Forbidden", "pods \"sb-c\" is forbidden: test"),
            )
        })
    })
    .await;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut config = config();
    config.common.metrics_addr = Some(metrics);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(config, deps(client, reports.clone()), shutdown.clone()));
    let url = format!("http://{metrics}/status");
    let doc: Value = tcab_testkit::wait::within(
        "the status after the first reap",
        Duration::from_secs(15),
        async {
            loop {
                if let Ok(answer) = reqwest::get(&url).await
                    && let Ok(text) = answer.text().await
                    && let Ok(doc) = serde_json::from_str::<Value>(&text)
                    && !doc["last_error"].is_null()
                    && !doc["last_reaped"].is_null()
                {
                    return doc;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(doc["binary"], "tcab-reaper");
    assert_eq!(doc["view_current"], true);
    assert_eq!(doc["last_reaped"]["pod"], "sandboxes/sb-a", "{doc}");
    assert_eq!(doc["last_reaped"]["job_id"], "a");
    assert_eq!(doc["last_error"]["job_id"], "c", "{doc}");
    assert_eq!(doc["last_error"]["step"], "delete pods");
    assert!(
        doc["last_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("forbidden")),
        "{doc}"
    );
    assert_eq!(doc["backing_off"][0]["job_id"], "c", "{doc}");
    assert!(doc["last_sweep"].is_null(), "the sweep is off: {doc}");
    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops on shutdown")
        .expect("run task");
    assert!(result.is_ok(), "{result:?}");
}
