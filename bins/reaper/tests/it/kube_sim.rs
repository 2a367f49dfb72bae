//! The reaper against kube-sim (real HTTP, a real Job controller and the
//! fake driver, which creates a sandbox pod and can be OOM-killed) and a
//! mock backend answering `GET /jobs/active`.
//!
//! kube-sim counts every API request by verb and resource; the tests read
//! those counters to prove which pod LISTs the reaper makes, and take care
//! to make no pod LIST of their own while they count.

use crate::support::{Active, Logs, MockBackend, SERVICE_TOKEN};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder::driver_job;
use tcab_kube_sim::{ApiFault, ApiFaultMode, Counters, Rbac, SimHandle, SimOptions, spawn};
use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, SweepOutcome, TickReport, run};
use tcab_reaper::{KeepReason, ReapKind};
use tcab_shared::WallClock;
use tcab_shared::backend::types::ClaimedRun;
use tcab_shared::config::BinaryConfig;
use tcab_shared::runtime::CancellationToken;
use tcab_testkit::wait::until;
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;

const NS: &str = "tcab";
const SANDBOXES: &str = "sandboxes";
const POLL_SECONDS: f64 = 0.2;
const SANDBOX_SELECTOR: &str = "app.kubernetes.io/managed-by=tcab-driver";

async fn sim(rbac: Option<Rbac>) -> SimHandle {
    spawn(SimOptions {
        namespace: NS.into(),
        rbac,
        ..SimOptions::default()
    })
    .await
    .expect("kube-sim starts")
}

fn client(sim: &SimHandle, token: &str) -> Client {
    let config = sim.kube_config(Some(token)).expect("kube config");
    // The binaries' own client: errors are answered at once, never retried.
    tcab_shared::kube_api::client_from(config).expect("client")
}

fn reaper_config(backend: &MockBackend, extra: &[(&str, &str)]) -> ReaperConfig {
    let mut vars: Vec<(String, String)> = vec![
        ("POD_NAMESPACE".into(), NS.into()),
        ("TCAB_K8S_NAMESPACE".into(), SANDBOXES.into()),
        (
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS".into(),
            POLL_SECONDS.to_string(),
        ),
        ("TCAB_BACKEND_URL".into(), backend.url().to_owned()),
        ("TCAB_BACKEND_SERVICE_TOKEN".into(), SERVICE_TOKEN.into()),
    ];
    vars.extend(extra.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    ReaperConfig::from_vars(vars).expect("valid reaper configuration")
}

/// A driver Job as the admitter builds it, for a run whose fake driver
/// makes a sandbox in `sandboxes` and then hangs. Its backend is a closed
/// port: the driver's reports fail, which it carries on through.
fn driver(id: &str, ttl_seconds: u32) -> Job {
    let closed_port = tcab_testkit::http::closed_addr();
    let config = AdmitterConfig::from_vars([
        ("TCAB_BACKEND_URL".into(), format!("http://{closed_port}")),
        ("TCAB_BACKEND_SERVICE_TOKEN".into(), "service".into()),
        ("TCAB_DRIVER_IMAGE".into(), "driver:test".into()),
        ("TCAB_K8S_NAMESPACE".into(), SANDBOXES.into()),
        (
            "TCAB_DISPATCHER_JOB_TTL_SECONDS".into(),
            ttl_seconds.to_string(),
        ),
    ])
    .expect("valid admitter configuration");
    let run: ClaimedRun = serde_json::from_value(json!({
        "id": id, "token": format!("token-{id}"), "queue_seq": 1,
        "harness": "h", "model": "m",
        "launch_request": {"sim": {"hang": true, "log_lines": 2}},
        "lease_expires_at": "2030-01-01T00:00:00Z",
    }))
    .expect("claimed run");
    driver_job(&config.jobs, &run)
}

async fn sandbox_of(pods: &Api<Pod>, id: &str) -> Option<Pod> {
    let selector = format!("{SANDBOX_SELECTOR},tcab.dev/job-id={id}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .expect("list sandboxes")
        .items
        .into_iter()
        .next()
}

async fn driver_pod_of(pods: &Api<Pod>, id: &str) -> Option<Pod> {
    let selector = format!("app.kubernetes.io/managed-by=tcab-dispatcher,tcab.dev/job-id={id}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .expect("list driver pods")
        .items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
}

fn failed(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
}

/// Starts a driver Job and waits until its sandbox and running pod exist.
async fn start_driver(admin: &Client, id: &str, ttl: u32) -> (Job, Pod, Pod) {
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    let job = jobs
        .create(&PostParams::default(), &driver(id, ttl))
        .await
        .expect("create driver Job");
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    let sandbox = until("the sandbox", Duration::from_secs(20), || {
        sandbox_of(&sandboxes, id)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let driver_pod = until("the driver pod", Duration::from_secs(20), || {
        driver_pod_of(&pods, id)
    })
    .await;
    (job, sandbox, driver_pod)
}

/// A sandbox made by hand in the sandbox namespace: the driver's labels,
/// no owner, no owned Job carrying its job id.
async fn make_sandbox(admin: &Client, name: &str, id: &str) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/managed-by": "tcab-driver", "tcab.dev/job-id": id}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "sandbox", "image": "tcab-sandbox:sim"}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(admin.clone(), SANDBOXES)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create sandbox")
}

/// Whether the pod is gone or going.
async fn deleted(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get_opt(name).await.expect("get pod") {
        None => true,
        Some(p) => p.metadata.deletion_timestamp.is_some(),
    }
}

fn sim_clock(sim: &SimHandle) -> WallClock {
    let sim = sim.sim().clone();
    WallClock::from_fn(move || sim.clock.now())
}

fn requests(c: &Counters, key: &str) -> u64 {
    c.requests.get(key).copied().unwrap_or(0)
}

/// A running reaper and the reports of its ticks.
struct Running {
    reports: Arc<Mutex<Vec<TickReport>>>,
    trigger: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    fn start(
        cluster: &SimHandle,
        kube: Client,
        config: ReaperConfig,
        backend: &MockBackend,
    ) -> Self {
        let reports = Arc::new(Mutex::new(Vec::new()));
        let sink = reports.clone();
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        let deps = Deps {
            kube,
            namespace: NS.into(),
            clock: sim_clock(cluster),
            backend: Some(backend.client()),
            on_tick: Some(Arc::new(move |r: &TickReport| {
                sink.lock().expect("reports").push(r.clone());
            })),
        };
        let task = tokio::spawn(run(config, deps, shutdown));
        Running {
            reports,
            trigger,
            task,
        }
    }

    fn ticks(&self) -> usize {
        self.reports.lock().expect("reports").len()
    }

    fn reports_since(&self, tick: usize) -> Vec<TickReport> {
        self.reports.lock().expect("reports")[tick..].to_vec()
    }

    /// Waits until the reports show `n` sandboxes reaped in all (a pod seen
    /// deleted may be ahead of the report of the tick that deleted it).
    async fn reaped(&self, n: usize) -> Vec<ReapKind> {
        until("the reap's report", Duration::from_secs(20), || async {
            let kinds: Vec<ReapKind> = self
                .reports_since(0)
                .iter()
                .flat_map(|r| r.reaped().collect::<Vec<_>>())
                .collect();
            (kinds.len() >= n).then_some(kinds)
        })
        .await
    }

    /// Waits until `n` more ticks than `from` have run.
    async fn ticks_after(&self, from: usize, n: usize) {
        until("more ticks", Duration::from_secs(20), || async {
            (self.ticks() >= from + n).then_some(())
        })
        .await;
    }

    async fn stop(self) {
        self.trigger.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("reaper stops")
            .expect("reaper task")
            .expect("reaper ends cleanly");
    }
}

/// Both runs' ids are driven, the sweep comes once an hour.
async fn quiet_backend() -> MockBackend {
    MockBackend::start(Active::Driven(vec!["run-a".into(), "run-b".into()])).await
}

const HOURLY_SWEEP: (&str, &str) = ("TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", "3600");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_makes_no_pod_list() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    let backend = quiet_backend().await;
    let (_, sandbox, driver_pod) = start_driver(&admin, "run-a", 3600).await;
    let reaper = Running::start(
        &cluster,
        admin.clone(),
        reaper_config(&backend, &[HOURLY_SWEEP]),
        &backend,
    );
    // The first tick sweeps (one LIST, the sandbox); reset the counters after it.
    reaper.ticks_after(0, 1).await;
    assert_eq!(reaper.reports_since(0)[0].listed, Some(1));
    cluster.admin().reset_counters().await.expect("reset");
    let from = reaper.ticks();
    reaper.ticks_after(from, 8).await;

    let counters = cluster.admin().counters().await.expect("counters");
    let pod_calls: Vec<_> = counters
        .requests
        .iter()
        .filter(|(k, _)| k.ends_with(" pods") || k.starts_with("list jobs"))
        .collect();
    assert!(pod_calls.is_empty(), "steady state called {pod_calls:?}");
    assert!(
        reaper
            .reports_since(from)
            .iter()
            .all(|r| r.listed.is_none())
    );
    assert_eq!(backend.calls(), 1, "one sweep");
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    assert!(!deleted(&pods, &driver_pod.name_any()).await);
    reaper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_drivers_sandbox_is_listed_and_reaped_once_then_nothing_is_listed() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    let backend = quiet_backend().await;
    let (doomed, doomed_sandbox, driver_pod) = start_driver(&admin, "run-a", 3600).await;
    let (_, live_sandbox, _) = start_driver(&admin, "run-b", 3600).await;
    let reaper = Running::start(
        &cluster,
        admin.clone(),
        reaper_config(&backend, &[HOURLY_SWEEP]),
        &backend,
    );
    reaper.ticks_after(0, 1).await;
    cluster.admin().reset_counters().await.expect("reset");
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);

    cluster
        .admin()
        .oom_kill(NS, &driver_pod.name_any())
        .await
        .expect("oom kill");
    until("the Job to fail", Duration::from_secs(20), || async {
        failed(&jobs.get(&doomed.name_any()).await.expect("get job")).then_some(())
    })
    .await;
    let doomed_sandbox = doomed_sandbox.name_any();
    until(
        "the sandbox to be deleted",
        Duration::from_secs(20),
        || async { deleted(&sandboxes, &doomed_sandbox).await.then_some(()) },
    )
    .await;
    assert_eq!(reaper.reaped(1).await, [ReapKind::DriverFailed]);
    let reaped_at = reaper.ticks();
    let counters = cluster.admin().counters().await.expect("counters");
    assert_eq!(requests(&counters, "list pods"), 1, "{counters:?}");
    assert_eq!(requests(&counters, "delete pods"), 1, "{counters:?}");
    assert_eq!(requests(&counters, "list jobs"), 1, "one confirming read");
    let reaped: Vec<TickReport> = reaper
        .reports_since(0)
        .into_iter()
        .filter(|r| r.reaped().count() > 0)
        .collect();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].completed, BTreeSet::from(["run-a".to_owned()]));

    // Several more ticks list nothing; the dead driver's own pod (same job
    // id) and the live run's sandbox are still there; its logs read.
    reaper.ticks_after(reaped_at, 5).await;
    let counters = cluster.admin().counters().await.expect("counters");
    assert_eq!(requests(&counters, "list pods"), 1, "{counters:?}");
    let dead = pods
        .get(&driver_pod.name_any())
        .await
        .expect("driver pod kept");
    assert!(dead.metadata.deletion_timestamp.is_none());
    let logs = pods
        .logs(&dead.name_any(), &LogParams::default())
        .await
        .expect("driver logs readable");
    assert!(logs.contains("fake driver for job run-a"), "{logs}");
    assert!(!deleted(&sandboxes, &live_sandbox.name_any()).await);
    reaper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_of_a_job_failed_and_ttl_deleted_while_the_reaper_was_down_is_swept() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    // No reaper yet. The driver dies and its Job is TTL-deleted (with its pod).
    let (doomed, sandbox, driver_pod) = start_driver(&admin, "run-c", 1).await;
    cluster
        .admin()
        .oom_kill(NS, &driver_pod.name_any())
        .await
        .expect("oom kill");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    until("the TTL deletion", Duration::from_secs(20), || async {
        jobs.get_opt(&doomed.name_any())
            .await
            .expect("get job")
            .is_none()
            .then_some(())
    })
    .await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);

    // The reaper starts; the backend no longer drives run-c; the orphan is
    // past the 1 s grace by now.
    let backend = MockBackend::start(Active::Driven(vec![])).await;
    let config = reaper_config(&backend, &[("TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS", "1")]);
    let reaper = Running::start(&cluster, admin.clone(), config, &backend);
    until("the sweep", Duration::from_secs(10), || async {
        deleted(&sandboxes, &sandbox.name_any()).await.then_some(())
    })
    .await;
    assert_eq!(reaper.reaped(1).await, [ReapKind::Orphan]);
    reaper.stop().await;
}

/// A driver that succeeded but whose own cleanup of its sandbox did not land
/// (the API server was down as it exited): its Job stays Complete until its
/// TTL, so no "orphan" rule matches, yet nothing uses the sandbox any more.
/// The sweep removes it as a leftover once the backend no longer drives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_a_succeeded_driver_left_behind_is_swept_once_the_backend_is_done_with_it() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    // A driver Job whose pod runs briefly and exits 0 (the plain program:
    // its pod is not labelled as a run), and the sandbox it left.
    let mut job = driver("run-s", 3600);
    let template = job
        .spec
        .as_mut()
        .expect("spec")
        .template
        .metadata
        .get_or_insert_with(Default::default);
    template
        .labels
        .get_or_insert_with(Default::default)
        .insert("tcab.dev/job-kind".into(), "plain".into());
    template
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kube-sim.tcab.dev/run-seconds".into(), "0.2".into());
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    let job = jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("create driver Job");
    let sandbox = make_sandbox(&admin, "tcab-sandbox-s", "run-s").await;
    until(
        "the driver Job succeeds",
        Duration::from_secs(20),
        || async {
            let j = jobs.get(&job.name_any()).await.expect("get job");
            let complete = j.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
            complete.then_some(())
        },
    )
    .await;

    // The backend still drives the run (its terminal report is in flight):
    // the sweep keeps the sandbox.
    let backend = MockBackend::start(Active::Driven(vec!["run-s".into()])).await;
    let reaper = Running::start(&cluster, admin.clone(), eager_sweep(&backend), &backend);
    until("two sweeps", Duration::from_secs(20), || async {
        let sweeps = reaper
            .reports_since(0)
            .iter()
            .filter(|r| r.sweep == SweepOutcome::Driven(1))
            .count();
        (sweeps >= 2).then_some(())
    })
    .await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);

    // The run ends at the backend: the next sweep removes the leftover.
    backend.set(Active::Driven(vec![]));
    until("the sweep", Duration::from_secs(10), || async {
        deleted(&sandboxes, &sandbox.name_any()).await.then_some(())
    })
    .await;
    assert_eq!(reaper.reaped(1).await, [ReapKind::Orphan]);
    let reason = reaper
        .reports_since(0)
        .iter()
        .find_map(|r| r.plan.delete.first().map(|d| d.reason.to_string()))
        .expect("a plan deleted it");
    assert!(
        reason.starts_with(&format!("leftover: driver Job {}", job.name_any())),
        "{reason}"
    );
    reaper.stop().await;
}

/// A sweep every tick, no grace at all: only the backend's answer and the
/// owned Jobs stand between a sandbox and its delete.
fn eager_sweep(backend: &MockBackend) -> ReaperConfig {
    let mut config = reaper_config(
        backend,
        &[("TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", "0.1")],
    );
    config.orphan_grace = Duration::ZERO;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_whose_job_the_backend_still_drives_is_not_swept_even_with_no_grace() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    // The sandbox of a live run whose Job this dispatcher's view does not
    // hold (another namespace, or not seen yet): it looks orphaned.
    let sandbox = make_sandbox(&admin, "tcab-sandbox-x", "run-x").await;
    let backend = MockBackend::start(Active::Driven(vec!["run-x".into()])).await;
    let reaper = Running::start(&cluster, admin.clone(), eager_sweep(&backend), &backend);
    until("three sweeps", Duration::from_secs(20), || async {
        let sweeps = reaper
            .reports_since(0)
            .iter()
            .filter(|r| r.sweep == SweepOutcome::Driven(1))
            .count();
        (sweeps >= 3).then_some(())
    })
    .await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);
    let kept = reaper
        .reports_since(0)
        .iter()
        .rev()
        .find_map(|r| r.plan.keep.first().map(|k| k.reason.clone()))
        .expect("a plan kept it");
    assert_eq!(kept, KeepReason::DrivenByBackend);

    // The run ends at the backend: the next sweep reaps its sandbox.
    backend.set(Active::Driven(vec![]));
    until("the sweep", Duration::from_secs(10), || async {
        deleted(&sandboxes, &sandbox.name_any()).await.then_some(())
    })
    .await;
    reaper.stop().await;
}

/// An entry of the active list the client cannot read (a state it does not
/// know) is still a job the backend drives: its sandbox is not swept; an
/// entry without even a readable id stops the sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_active_entry_still_protects_its_sandbox() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    let sandbox = make_sandbox(&admin, "tcab-sandbox-z", "run-z").await;
    let odd = |id: serde_json::Value| serde_json::json!({"id": id, "state": "teleporting", "lease_expires_at": null});
    let backend = MockBackend::start(Active::Odd(vec![odd("run-z".into())])).await;
    let reaper = Running::start(&cluster, admin.clone(), eager_sweep(&backend), &backend);
    until("three sweeps", Duration::from_secs(20), || async {
        let sweeps = reaper
            .reports_since(0)
            .iter()
            .filter(|r| r.sweep == SweepOutcome::Driven(1))
            .count();
        (sweeps >= 3).then_some(())
    })
    .await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);

    backend.set(Active::Odd(vec![odd(serde_json::Value::Null)]));
    let from = reaper.reports_since(0).len();
    until("three sweeps stopped", Duration::from_secs(20), || async {
        let stopped = reaper
            .reports_since(from)
            .iter()
            .filter(|r| matches!(r.sweep, SweepOutcome::BackendFailed(_)))
            .count();
        (stopped >= 3).then_some(())
    })
    .await;
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);
    reaper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backends_active_list_failing_stops_the_sweep() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    let sandbox = make_sandbox(&admin, "tcab-sandbox-y", "run-y").await;
    let backend = MockBackend::start(Active::Fails(500)).await;
    let reaper = Running::start(&cluster, admin.clone(), eager_sweep(&backend), &backend);
    until("three failed sweeps", Duration::from_secs(20), || async {
        let failed = reaper
            .reports_since(0)
            .iter()
            .filter(|r| matches!(r.sweep, SweepOutcome::BackendFailed(_)))
            .count();
        (failed >= 3).then_some(())
    })
    .await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);
    assert!(reaper.reports_since(0).iter().all(|r| r.deletes.is_empty()));

    backend.set(Active::Driven(vec![]));
    until("the sweep", Duration::from_secs(10), || async {
        deleted(&sandboxes, &sandbox.name_any()).await.then_some(())
    })
    .await;
    reaper.stop().await;
}

fn jobs_fault(verb: &str) -> ApiFault {
    ApiFault {
        mode: ApiFaultMode::Error500,
        count: 1_000_000,
        retry_after_seconds: None,
        delay_ms: None,
        resource: Some("jobs".into()),
        verb: Some(verb.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_view_that_is_not_current_reaps_nothing() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    // The backend drives nothing and there is no grace: only the Job view
    // stands between a new run's sandbox and the sweep.
    let backend = MockBackend::start(Active::Driven(vec![])).await;
    let mut config = eager_sweep(&backend);
    config.common.watch_timeout = Duration::from_secs(1);
    let reaper = Running::start(&cluster, admin.clone(), config, &backend);
    reaper.ticks_after(0, 1).await;

    // The Job list and watch fail from now on (creates still work): the
    // watch ends within its 1 s timeout and cannot come back.
    cluster
        .admin()
        .api_fault(&jobs_fault("watch"))
        .await
        .expect("fault");
    cluster
        .admin()
        .api_fault(&jobs_fault("list"))
        .await
        .expect("fault");
    let paused_at = until(
        "the view to stop being current",
        Duration::from_secs(20),
        || async {
            let reports = reaper.reports_since(0);
            reports
                .iter()
                .rposition(|r| r.view_not_current.is_none())
                .filter(|last_current| reports.len() > last_current + 1)
                .map(|last_current| last_current + 1)
        },
    )
    .await;

    // A new run starts while the view is blind to it.
    let (_, sandbox, _) = start_driver(&admin, "run-n", 3600).await;
    let from = reaper.ticks();
    reaper.ticks_after(from, 5).await;
    let while_blind = reaper.reports_since(paused_at);
    assert!(
        while_blind.iter().all(|r| r.view_not_current.is_some()),
        "the view came back while the faults were on"
    );
    assert!(
        while_blind.iter().all(|r| r.deletes.is_empty()),
        "deleted from a view that was not current"
    );
    // The first blind tick may have listed before the view failed (then it
    // planned nothing); every later one starts blind and lists nothing.
    assert!(
        while_blind[1..].iter().all(|r| r.listed.is_none()),
        "listed from a view that was not current"
    );
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);

    // The faults clear: a fresh list shows the live Job, which keeps its sandbox.
    cluster.admin().clear_faults().await.expect("clear");
    let resumed_at = reaper.ticks();
    until(
        "a sweep from a current view",
        Duration::from_secs(30),
        || async {
            reaper
                .reports_since(resumed_at)
                .iter()
                .any(|r| {
                    r.listed.is_some() && r.view_not_current.is_none() && !r.plan.keep.is_empty()
                })
                .then_some(())
        },
    )
    .await;
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);
    let kept = reaper
        .reports_since(resumed_at)
        .iter()
        .rev()
        .find_map(|r| r.plan.keep.first().map(|k| k.reason.clone()))
        .expect("kept");
    assert!(matches!(kept, KeepReason::LiveJob { .. }), "{kept:?}");
    reaper.stop().await;
}

/// The chart's grants in the dispatcher's namespace (the reaper lists its
/// own live pods there), none in the sandbox namespace.
const ROLE_WITHOUT_SANDBOX_PODS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tcab-dispatcher, namespace: tcab}
rules:
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_sandbox_namespace_is_logged_retried_and_not_fatal() {
    let rbac = Rbac::parse(ROLE_WITHOUT_SANDBOX_PODS, "reaper-token").expect("role");
    let cluster = sim(Some(rbac)).await;
    let admin = client(&cluster, cluster.admin_token());
    let (doomed, sandbox, driver_pod) = start_driver(&admin, "run-d", 3600).await;
    cluster
        .admin()
        .oom_kill(NS, &driver_pod.name_any())
        .await
        .expect("oom kill");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    until("the Job to fail", Duration::from_secs(20), || async {
        failed(&jobs.get(&doomed.name_any()).await.expect("get job")).then_some(())
    })
    .await;

    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let backend = quiet_backend().await;
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let deps = Deps {
        kube: client(&cluster, "reaper-token"),
        namespace: NS.into(),
        clock: sim_clock(&cluster),
        backend: Some(backend.client()),
        on_tick: None,
    };
    let reaper =
        tokio::spawn(run(reaper_config(&backend, &[]), deps, shutdown).with_subscriber(subscriber));

    let forbidden = || {
        logs.text()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("cannot list sandbox pods"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    until("three refused ticks", Duration::from_secs(10), || async {
        (forbidden().len() >= 3).then_some(())
    })
    .await;
    assert!(!reaper.is_finished(), "the reaper keeps running");
    for line in forbidden() {
        assert!(line.contains("namespace=sandboxes"), "{line}");
        assert!(line.contains("code=403"), "{line}");
        assert!(line.contains("RBAC"), "{line}");
    }
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    assert!(!deleted(&sandboxes, &sandbox.name_any()).await);

    trigger.cancel();
    tokio::time::timeout(Duration::from_secs(10), reaper)
        .await
        .expect("reaper stops")
        .expect("reaper task")
        .expect("reaper ends cleanly");
}
