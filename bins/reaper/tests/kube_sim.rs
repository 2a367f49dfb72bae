//! The reaper against kube-sim: real HTTP, a real Job controller and the
//! fake driver, which creates a sandbox pod and is then OOM-killed.

mod support;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::Logs;
use tcab_kube_sim::{Rbac, SimHandle, SimOptions, spawn};
use tcab_reaper::run::{Deps, run};
use tcab_shared::backend::types::ClaimedRun;
use tcab_shared::config::{AdmitterConfig, BinaryConfig, ReaperConfig};
use tcab_shared::job_builder::driver_job;
use tcab_shared::tick::Shutdown;
use tracing::instrument::WithSubscriber;

const NS: &str = "tcab";
const SANDBOXES: &str = "sandboxes";
const POLL_SECONDS: f64 = 0.5;
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
    let mut config = sim.kube_config(Some(token)).expect("kube config");
    // Errors are the point of some tests: answer them now, do not retry.
    config.default_retry = false;
    Client::try_from(config).expect("client")
}

fn reaper_config(extra: &[(&str, &str)]) -> ReaperConfig {
    let poll = POLL_SECONDS.to_string();
    let mut vars: Vec<(String, String)> = vec![
        ("POD_NAMESPACE".into(), NS.into()),
        ("TCAB_K8S_NAMESPACE".into(), SANDBOXES.into()),
        ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS".into(), poll),
    ];
    vars.extend(extra.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    ReaperConfig::from_vars(vars).expect("valid reaper configuration")
}

/// A driver Job as the admitter builds it, for a run whose fake driver
/// makes a sandbox in `sandboxes` and then hangs. Its backend is a closed
/// port: the driver's reports fail, which it carries on through.
fn driver(id: &str, ttl_seconds: u32) -> Job {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
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

/// Polls `check` every 50 ms until it returns `Some`, or panics after `limit`.
async fn until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

fn sim_clock(sim: &SimHandle) -> Arc<dyn Fn() -> Timestamp + Send + Sync> {
    let sim = sim.sim().clone();
    Arc::new(move || sim.clock.now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_killed_driver_sandbox_is_reaped_within_one_tick_and_the_driver_pod_survives() {
    let cluster = sim(None).await;
    let admin = client(&cluster, cluster.admin_token());
    let (trigger, shutdown) = Shutdown::channel();
    let deps = Deps {
        client: admin.clone(),
        clock: sim_clock(&cluster),
    };
    let reaper = tokio::spawn(run(reaper_config(&[]), deps, shutdown));

    let (doomed, doomed_sandbox, driver_pod) = start_driver(&admin, "run-a", 3600).await;
    let (_, live_sandbox, _) = start_driver(&admin, "run-b", 3600).await;
    let sandboxes: Api<Pod> = Api::namespaced(admin.clone(), SANDBOXES);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    // Each reaper tick makes exactly one LIST of pods; the test itself only
    // GETs pods from here on, so this counter counts the reaper's ticks.
    let lists = |c: tcab_kube_sim::Counters| c.requests.get("list pods").copied().unwrap_or(0);
    let ticks_so_far = async || lists(cluster.admin().counters().await.expect("counters"));

    cluster
        .admin()
        .oom_kill(NS, &driver_pod.name_any())
        .await
        .expect("oom kill");
    until("the Job to fail", Duration::from_secs(20), || async {
        failed(&jobs.get(&doomed.name_any()).await.expect("get job")).then_some(())
    })
    .await;
    let ticks_at_failure = ticks_so_far().await;
    // The deadline is only a guard against a hang; "one tick" is counted.
    let doomed_sandbox = doomed_sandbox.name_any();
    until(
        "the sandbox to be deleted",
        Duration::from_secs(20),
        || async {
            match sandboxes
                .get_opt(&doomed_sandbox)
                .await
                .expect("get sandbox")
            {
                None => Some(()),
                Some(p) => p.metadata.deletion_timestamp.map(drop),
            }
        },
    )
    .await;
    // The tick under way when the Job failed may have listed before it saw
    // the failure; the next one must reap. Its LIST is the second at most.
    let ticks_to_reap = ticks_so_far().await - ticks_at_failure;
    assert!(
        ticks_to_reap <= 2,
        "reaped {ticks_to_reap} pod LISTs after the driver Job failed, not within one tick"
    );
    until(
        "the sandbox to be gone",
        Duration::from_secs(10),
        || async {
            sandboxes
                .get_opt(&doomed_sandbox)
                .await
                .expect("get sandbox")
                .is_none()
                .then_some(())
        },
    )
    .await;

    // Several more ticks: the driver's own pod (same job id) and the live
    // run's sandbox are still there, and the dead driver's logs read.
    let seen = ticks_so_far().await;
    until("three more ticks", Duration::from_secs(10), || async {
        (ticks_so_far().await >= seen + 3).then_some(())
    })
    .await;
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
    let live = sandboxes
        .get(&live_sandbox.name_any())
        .await
        .expect("live run's sandbox kept");
    assert!(live.metadata.deletion_timestamp.is_none());

    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), reaper)
        .await
        .expect("reaper stops")
        .expect("reaper task")
        .expect("reaper ends cleanly");
    eprintln!(
        "sandbox reaped within {ticks_to_reap} pod LIST(s) after its driver Job failed (poll {POLL_SECONDS}s)"
    );
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
    let left = sandboxes
        .get(&sandbox.name_any())
        .await
        .expect("the orphan is still there");
    assert!(left.metadata.deletion_timestamp.is_none());

    // The reaper starts; the orphan is past the 1 s grace by now.
    let (trigger, shutdown) = Shutdown::channel();
    let deps = Deps {
        client: admin.clone(),
        clock: sim_clock(&cluster),
    };
    let config = reaper_config(&[("TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS", "1")]);
    let reaper = tokio::spawn(run(config, deps, shutdown));
    until("the sweep", Duration::from_secs(10), || async {
        sandbox_of(&sandboxes, "run-c")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), reaper)
        .await
        .expect("reaper stops")
        .expect("reaper task")
        .expect("reaper ends cleanly");
}

const ROLE_WITHOUT_PODS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tcab-dispatcher}
rules:
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["get", "list", "watch"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_sandbox_namespace_is_logged_retried_and_not_fatal() {
    let rbac = Rbac::parse(ROLE_WITHOUT_PODS, "reaper-token").expect("role");
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
    let (trigger, shutdown) = Shutdown::channel();
    let deps = Deps {
        client: client(&cluster, "reaper-token"),
        clock: sim_clock(&cluster),
    };
    let reaper = tokio::spawn(run(reaper_config(&[]), deps, shutdown).with_subscriber(subscriber));

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
    assert!(
        sandboxes
            .get_opt(&sandbox.name_any())
            .await
            .expect("get")
            .is_some()
    );

    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), reaper)
        .await
        .expect("reaper stops")
        .expect("reaper task")
        .expect("reaper ends cleanly");
}
