//! End to end: the three real binaries as processes, against each cluster
//! (kube-sim, and the real control plane; under the chart's Role: anything
//! it does not grant is a 403) and the reference backend.

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, run, states};
use serde_json::json;
use std::time::Duration;
use tcab_devstack::{Container, wait_for};

/// The drain: 200 runs and 50 publishes with caps 8 and 8. Neither
/// lane ever exceeds its cap (by the cluster's own record of concurrent
/// non-terminal Jobs), each backend job gets exactly one Job, every job
/// succeeds, no sandbox is left, and nothing was forbidden by RBAC. On the
/// real control plane, in real time, a reduced drain: 80 runs and 20
/// publishes (about 35 s; the whole one takes about 90 s there).
async fn drains_200_runs_and_50_publishes_within_the_caps(kind: ClusterKind) {
    let (runs_n, pubs_n) = common::pick(kind, (200, 50), (80, 20));
    let mut t = TestStack::start(kind, |o| {
        o.max_inflight = 8;
        o.max_publish_inflight = 8;
    })
    .await;
    let runs: Vec<_> = (0..runs_n)
        .map(|i| {
            run(
                &format!("case-{i}"),
                json!({"duration_ms": 150, "log_lines": 1}),
            )
        })
        .collect();
    let ids = t
        .stack
        .backend
        .enqueue_batch(runs)
        .await
        .expect("enqueue runs");
    assert_eq!(ids.len(), runs_n);
    for i in 0..pubs_n {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 150}}))
            .await
            .expect("enqueue publish");
    }

    let (runs, pubs) = t
        .drained(
            Duration::from_secs(t.pick(240, 600)),
            common::RunBy::Processes,
        )
        .await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
    assert!(
        pubs.iter().all(|j| j["state"] == "succeeded"),
        "publishes: {}",
        states(&pubs)
    );
    assert_eq!(runs.len(), runs_n, "no retries were needed");

    let counters = t.admin().counters().await.expect("counters");
    let max = |lane: &str| counters.max_live_jobs.get(lane).copied().unwrap_or(0);
    assert!(
        max("run") <= 8 && max("publish") <= 8,
        "caps exceeded: {:?}",
        counters.max_live_jobs
    );
    assert_eq!(max("run"), 8, "the run lane should fill up to its cap");
    assert!(
        max("publish") >= 2,
        "publishes ran alongside runs: {:?}",
        counters.max_live_jobs
    );
    // Steady state never LISTs Jobs per tick: each container lists once at start.
    let job_lists = counters.requests.get("list jobs").copied().unwrap_or(0);
    assert!(
        job_lists <= 6,
        "Jobs were listed {job_lists} times: {:?}",
        counters.requests
    );

    // Each binary names itself to both APIs, so its calls can be told apart.
    let agents: Vec<&String> = counters.requests_by_agent.keys().collect();
    for c in Container::ALL {
        assert!(
            agents
                .iter()
                .any(|a| a.starts_with(&format!("{}/", c.binary()))),
            "no Kubernetes request from {}: agents {agents:?}",
            c.binary()
        );
    }
    let calls = t.stack.backend.calls(false).await.expect("backend calls");
    let claims = |agent: &str| {
        calls
            .iter()
            .filter(|(a, _)| a.starts_with(agent))
            .map(|(_, routes)| routes.get("POST /jobs/next").copied().unwrap_or(0))
            .sum::<u64>()
    };
    assert!(
        claims("tcab-admitter/") >= runs_n as u64,
        "backend calls {calls:?}"
    );
    assert_eq!(claims("tcab-lease-keeper/"), 0, "backend calls {calls:?}");

    let by_id = t.jobs_by_id().await;
    assert_eq!(by_id.len(), runs_n + pubs_n);
    assert!(
        by_id.values().all(|names| names.len() == 1),
        "a backend job got two Jobs"
    );
    wait_for("no sandbox left", Duration::from_secs(10), || async {
        Ok(t.sandboxes().await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    for c in Container::ALL {
        let log = t.stack.log(c);
        assert!(
            !log.contains("Forbidden"),
            "{} was refused by RBAC:\n{}",
            c.binary(),
            t.logs()
        );
    }
}

/// An OOM-killed driver: the lease-keeper reports the death once, with the
/// cause and the pod's last log lines; the reaper deletes the orphaned
/// sandbox and leaves the driver's own pod (and its logs) alone.
async fn an_oom_killed_driver_is_reported_and_its_sandbox_reaped(kind: ClusterKind) {
    // Debug logs everywhere: the end of the test checks no token reached them.
    let t = TestStack::start(kind, |o| o.rust_log = "debug".into()).await;
    let ns = t.ns();
    let id = t
        .stack
        .backend
        .enqueue_run(run("oom", json!({"hang": true, "log_lines": 2})))
        .await
        .expect("enqueue");
    let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-dispatcher");
    let cluster = t.stack.cluster.clone();
    let limit = Duration::from_secs(t.pick(30, 60));
    let driver = wait_for("the driver running with its sandbox", limit, || {
        let (cluster, selector, t, ns) = (cluster.clone(), selector.clone(), &t, &ns);
        async move {
            let pods = cluster.pods(ns, Some(&selector)).await?;
            let running = pods.iter().find(|p| p["status"]["phase"] == "Running");
            let sandboxes = t.sandboxes().await;
            Ok(running
                .filter(|_| !sandboxes.is_empty())
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned()))
        }
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    wait_for("the driver to report running", limit, || async {
        Ok((t.stack.backend.job(&id).await?["state"] == "running").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    t.admin().oom_kill(&ns, &driver).await.expect("oom kill");

    let job = wait_for("the death report", limit, || async {
        let j = t.stack.backend.job(&id).await?;
        Ok((j["state"] == "failed").then_some(j))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("OOMKilled"),
        "detail: {detail}\n{}",
        t.logs()
    );
    assert!(
        detail.contains("last log lines"),
        "detail carries the log tail: {detail}"
    );
    assert_eq!(job["failure_kind"], "infrastructure");
    assert!(
        job["retry_id"].is_string(),
        "an infrastructure failure is retried: {job}"
    );
    assert_eq!(
        job["lost"], false,
        "reported as a death, not as lost: {job}"
    );

    wait_for(
        "the orphaned sandbox reaped",
        Duration::from_secs(t.pick(10, 30)),
        || async {
            Ok(t.sandboxes()
                .await
                .iter()
                .all(|p| p["metadata"]["labels"]["tcab.dev/job-id"] != id.as_str())
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let pods = t
        .stack
        .cluster
        .pods(&ns, Some(&selector))
        .await
        .expect("pods");
    assert!(
        pods.iter()
            .any(|p| p["metadata"]["name"] == driver.as_str()),
        "the driver pod survives"
    );
    let log = t
        .stack
        .cluster
        .get_text(&format!("/api/v1/namespaces/{ns}/pods/{driver}/log"))
        .await
        .expect("the dead driver's log stays readable");
    assert!(!log.trim().is_empty(), "the driver's log is still there");
    let reported = t
        .stack
        .log(Container::LeaseKeeper)
        .matches("reported dead")
        .count();
    assert_eq!(reported, 1, "reported exactly once:\n{}", t.logs());

    // No secret in any log: the service token, nor the per-job token the Job carries.
    let jobs = t
        .stack
        .cluster
        .jobs(Some(&format!("tcab.dev/job-id={id}")))
        .await
        .expect("jobs");
    let env = jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let job_token = env
        .iter()
        .find(|e| e["name"] == "TCAB_JOB_TOKEN")
        .and_then(|e| e["value"].as_str())
        .expect("the driver Job carries its token")
        .to_owned();
    assert!(job_token.len() >= 16);
    for c in Container::ALL {
        let log = t.stack.log(c);
        assert!(log.len() > 1000, "{} logged at debug", c.binary());
        assert!(
            !log.contains(tcab_devstack::stack::SERVICE_TOKEN),
            "{} logged the service token",
            c.binary()
        );
        assert!(
            !log.contains(&job_token),
            "{} logged a per-job token",
            c.binary()
        );
    }
}

/// The lease-keeper is down while the driver's node dies and its Node
/// object is deleted (no driver left to report; pod GC removes the pod once
/// the node has been gone for its quarantine): after the keeper returns,
/// the job is reported lost once its lease lapses by the backend's clock,
/// naming what the cluster shows. kube-sim runs 20x, so pod GC's 20 s
/// period and 40 s quarantine take seconds; the real one takes them whole.
async fn a_driver_lost_while_the_lease_keeper_was_down_is_reported_lost(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |o| o.cluster_speed = 20.0).await;
    let ns = t.ns();
    let limit = Duration::from_secs(t.pick(30, 60));
    let id = t
        .stack
        .backend
        .enqueue_run(run("lost", json!({"hang": true})))
        .await
        .expect("enqueue");
    wait_for("the driver to report running", limit, || async {
        Ok((t.stack.backend.job(&id).await?["state"] == "running").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    assert_eq!(
        t.stack.stop_container(Container::LeaseKeeper).await,
        Some(0),
        "clean exit on SIGTERM"
    );
    let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-dispatcher");
    let pods = t
        .stack
        .cluster
        .pods(&ns, Some(&selector))
        .await
        .expect("the driver pod");
    let node = pods[0]["spec"]["nodeName"]
        .as_str()
        .expect("scheduled")
        .to_owned();
    t.admin().crash_node(&node).await.expect("crash the node");
    t.admin().delete_node(&node).await.expect("delete the node");
    // Pod GC: 20 s period and 40 s quarantine (constants upstream).
    let gc_started = std::time::Instant::now();
    wait_for(
        "pod GC to remove the pod",
        Duration::from_secs(t.pick(30, 120)),
        || async {
            Ok(t.stack
                .cluster
                .pods(&ns, Some(&selector))
                .await?
                .is_empty()
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    eprintln!(
        "{kind}: pod GC removed the lost node's pod {:?} after its Node was deleted",
        gc_started.elapsed()
    );
    t.stack
        .start_container(Container::LeaseKeeper)
        .await
        .expect("restart");

    // The restarted keeper lists its cache and renews; the lease has not
    // lapsed yet, so the job is not judged lost.
    wait_for("the restarted lease-keeper ticking", limit, || async {
        let starts = t
            .stack
            .log(Container::LeaseKeeper)
            .matches("Job view current; renewing and reporting")
            .count();
        Ok((starts >= 2).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let before = t.stack.backend.job(&id).await.expect("job");
    assert_eq!(
        before["lost"], false,
        "not judged while its lease runs: {before}"
    );
    // One lease length of backend time passes (no live Job needs renewing).
    t.stack.backend.advance_clock(125).await.expect("advance");
    let job = wait_for(
        "the lost report",
        Duration::from_secs(t.pick(15, 30)),
        || async {
            let j = t.stack.backend.job(&id).await?;
            Ok((j["lost"] == true).then_some(j))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("deleted") || detail.contains("no longer exists"),
        "detail: {detail}"
    );
    assert_eq!(job["state"], "failed");
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}

/// The README's run command works on each cluster (`--cluster sim`, the
/// default, and `--cluster real`, a control plane of its own): the dev stack
/// drains its demo workload and exits 0.
async fn the_devstack_command_drains_its_demo(kind: ClusterKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tcab-devstack"))
        .args([
            "--cluster",
            kind.name(),
            "--runs",
            "6",
            "--publishes",
            "2",
            "--exit-when-drained",
            "--dir",
        ])
        .arg(dir.path().join("stack"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(common::pick(kind, 120, 240)), out)
        .await
        .expect("the demo drains in time")
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("dev stack up"), "{stdout}");
    assert!(
        stdout.contains("failed 1, succeeded 5"),
        "one scripted agent failure, five successes:\n{stdout}"
    );
}

on_both_clusters!(
    drains_200_runs_and_50_publishes_within_the_caps,
    an_oom_killed_driver_is_reported_and_its_sandbox_reaped,
    a_driver_lost_while_the_lease_keeper_was_down_is_reported_lost,
    the_devstack_command_drains_its_demo,
);
