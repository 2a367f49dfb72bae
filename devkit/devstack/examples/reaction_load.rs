//! Reaction times under load on the dev stack (prints figures; asserts
//! nothing).
//!
//! `cargo run --release -p tcab-devstack --example reaction_load [-- --seconds 45]`
//!
//! The stack runs with caps of 400 runs and 100 publishes, kept full: a
//! feeder keeps a backlog queued in both lanes, every fake driver and
//! publisher runs 10-30 s, so about 500 Jobs are live at once and Jobs
//! complete all the time. On top of that a killer OOM-kills and evicts
//! (Eviction API) running driver and publisher pods at a steady rate. The
//! drivers ignore SIGTERM (an evicted one is SIGKILLed at the end of its 1 s
//! grace, with no report of its own), so each death is the dispatcher's to
//! report and its sandbox the reaper's to delete. The publisher answers
//! SIGTERM with its own failed result, so an evicted publisher reports
//! itself: it is counted, not measured.
//!
//! Everything is measured afterwards from the records, not from the
//! outside: kube-sim's audit timeline (wall times of every Job and Pod
//! change) and backend-sim's history (wall times of every state change):
//!
//! - **capacity freed → next admission**: a Job of a full lane turns
//!   terminal (Complete or Failed) → the next Job the dispatcher creates in
//!   that lane (matched in order, one admission per freed slot);
//! - **death → report**: a dispatcher pod's container stops (OOM kill, or
//!   SIGKILL after an eviction's grace) → the dispatcher's death (`failed`)
//!   or lost report for that job lands at the backend;
//! - **death → sandbox deleted**: the same death → the driver's sandbox pod
//!   is being deleted (its `deletionTimestamp` set, or gone).
//!
//! Target (architecture.md §8): p99 under 100 ms for each, with 500 live
//! Jobs churning. RUN_DIR keeps the run directory (default: a temporary one).
//!
//! `--cluster real` runs the same on the upstream control plane (built by
//! `scripts/control-plane build`): the Job controller, scheduler and garbage
//! collector are Kubernetes' own, the node agent runs the pods, the kills go
//! through the node agent and the Eviction API, and the timeline comes from
//! the API server's audit log. Its two nodes admit `--node-pods` pods each,
//! so give it caps that fit (the drivers' sandboxes take a slot too).

use clap::Parser;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tcab_devstack::invariants::{self, PodLife, ReportKind, Settings};
use tcab_devstack::{ClusterAdmin, ClusterKind, Stack, StackOptions, wait_for};
use tcab_kube_sim::audit::{Actor, AuditEntry};

/// Reaction times with ~500 live Jobs churning.
#[derive(Parser)]
#[command(name = "reaction_load")]
struct Args {
    /// Seconds of churn measured, after both lanes are full
    #[arg(long, default_value_t = 45)]
    seconds: u64,
    /// The run lane's cap
    #[arg(long, default_value_t = 400)]
    runs: u32,
    /// The publish lane's cap
    #[arg(long, default_value_t = 100)]
    publishes: u32,
    /// OOM kills per second
    #[arg(long, default_value_t = 2.0)]
    oom_per_second: f64,
    /// Evictions per second
    #[arg(long, default_value_t = 2.0)]
    evictions_per_second: f64,
    /// The containers' poll interval, in seconds (no reaction waits for it)
    #[arg(long, default_value_t = 2.0)]
    poll: f64,
    /// Nodes of the simulated cluster (110 pods each)
    #[arg(long, default_value_t = 12)]
    nodes: usize,
    /// The cluster: `sim` (kube-sim) or `real` (the upstream control plane)
    #[arg(long, default_value = "sim", value_parser = parse_cluster)]
    cluster: ClusterKind,
    /// Pods each node of the real control plane admits
    #[arg(long, default_value_t = 400)]
    node_pods: u32,
}

fn parse_cluster(s: &str) -> Result<ClusterKind, String> {
    match s {
        "sim" => Ok(ClusterKind::Sim),
        "real" => Ok(ClusterKind::Real),
        other => Err(format!("--cluster is sim or real, not {other:?}")),
    }
}

fn run_request(rng: &mut impl Rng) -> Value {
    let ms: u64 = rng.random_range(10_000..30_000);
    json!({"harness": "h", "model": "m", "case": "load", "jam": null,
        "launch_request": {"sim": {"duration_ms": ms, "ignore_sigterm": true, "record": false}}})
}

fn publish_request(rng: &mut impl Rng) -> Value {
    let ms: u64 = rng.random_range(10_000..30_000);
    json!({"release": "load", "sim": {"duration_ms": ms}})
}

/// Keeps at least `low` runs and a quarter of that of publishes queued,
/// checking every 200 ms, until `stop`.
async fn feed(stack_backend: tcab_devstack::console::Backend, low: usize, stop: Arc<AtomicBool>) {
    let mut rng = StdRng::from_os_rng();
    while !stop.load(Ordering::Relaxed) {
        let queued = stack_backend
            .jobs_in_state("queued")
            .await
            .map_or(low, |v| v.len());
        if queued < low {
            let runs: Vec<Value> = (0..low).map(|_| run_request(&mut rng)).collect();
            if let Err(e) = stack_backend.enqueue_batch(runs).await {
                eprintln!("feeder: enqueueing runs failed: {e:#}");
            }
        }
        let queued = stack_backend
            .publish_jobs_in_state("queued")
            .await
            .map_or(low / 4, |v| v.len());
        for _ in queued..low / 4 {
            if let Err(e) = stack_backend
                .enqueue_publish(publish_request(&mut rng))
                .await
            {
                eprintln!("feeder: enqueueing a publish failed: {e:#}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Running dispatcher pods (drivers and publishers) not being deleted.
async fn running_pods(stack: &Stack) -> anyhow::Result<Vec<String>> {
    let pods = stack
        .cluster
        .pods(
            stack.namespace(),
            Some("app.kubernetes.io/managed-by=tcab-dispatcher"),
        )
        .await?;
    Ok(pods
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["state"]["running"].is_object()))
        })
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect())
}

#[derive(Default)]
struct Kills {
    oom: AtomicU64,
    evicted: AtomicU64,
    failed: AtomicU64,
}

/// Kills running pods at the given rates until `stop` (one pod list a
/// second; the kills of that second spread over it).
async fn kill(
    stack: &Stack,
    admin: &ClusterAdmin,
    oom_rate: f64,
    evict_rate: f64,
    stop: &AtomicBool,
    kills: &Kills,
) {
    let mut rng = StdRng::from_os_rng();
    let (mut oom_due, mut evict_due) = (0.0, 0.0);
    while !stop.load(Ordering::Relaxed) {
        let second = Instant::now();
        oom_due += oom_rate;
        evict_due += evict_rate;
        let pods = running_pods(stack).await.unwrap_or_default();
        let n = (oom_due.floor() + evict_due.floor()) as usize;
        let chosen: Vec<String> = pods.choose_multiple(&mut rng, n).cloned().collect();
        let step = Duration::from_secs(1) / (n.max(1) as u32);
        for pod in chosen {
            let oom = if oom_due >= 1.0 && evict_due >= 1.0 {
                rng.random_bool(0.5)
            } else {
                oom_due >= 1.0
            };
            let result = if oom {
                oom_due -= 1.0;
                admin
                    .oom_kill(stack.namespace(), &pod)
                    .await
                    .map(|()| &kills.oom)
            } else {
                evict_due -= 1.0;
                admin
                    .evict(stack.namespace(), &pod)
                    .await
                    .map(|()| &kills.evicted)
            };
            match result {
                Ok(counter) => counter.fetch_add(1, Ordering::Relaxed),
                Err(_) => kills.failed.fetch_add(1, Ordering::Relaxed),
            };
            tokio::time::sleep(step).await;
        }
        if let Some(rest) = Duration::from_secs(1).checked_sub(second.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(bench: &str, name: &str, samples: &[f64]) {
    let mut ms = samples.to_vec();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        println!("  {name:<34} no samples");
        return;
    }
    let p99 = pct(&ms, 99.0);
    // For scripts/bench-compare and docs/performance/plot.py.
    for (q, value) in [
        ("p50", pct(&ms, 50.0)),
        ("p95", pct(&ms, 95.0)),
        ("p99", p99),
        ("max", ms[ms.len() - 1]),
    ] {
        println!("figure\t{bench}\t{name} {q}\t{value:.3}\tms");
    }
    println!(
        "  {name:<34} n={:<5} p50 {:>6.1} ms  p95 {:>6.1} ms  p99 {:>6.1} ms  max {:>7.1} ms  (p99 target 100 ms: {})",
        ms.len(),
        pct(&ms, 50.0),
        pct(&ms, 95.0),
        p99,
        ms[ms.len() - 1],
        if p99 < 100.0 { "met" } else { "MISSED" },
    );
}

fn label<'a>(e: &'a AuditEntry, key: &str) -> Option<&'a str> {
    e.labels.get(key).map(String::as_str)
}

fn between_ms(from: jiff::Timestamp, to: jiff::Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e6
}

/// Capacity freed → next admission, per lane, from the audit timeline:
/// a Job turning terminal while its lane was at `cap`, matched in order to
/// the dispatcher's next Job creates in that lane, within `window`.
fn freed_to_admitted(
    audit: &[AuditEntry],
    caps: &BTreeMap<&str, u32>,
    window: (jiff::Timestamp, jiff::Timestamp),
) -> BTreeMap<String, Vec<f64>> {
    let mut live: BTreeMap<String, u32> = BTreeMap::new();
    let mut ended: std::collections::HashSet<String> = Default::default();
    let mut freed: BTreeMap<String, VecDeque<jiff::Timestamp>> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for e in audit.iter().filter(|e| e.kind == "Job") {
        if label(e, "app.kubernetes.io/managed-by") != Some("tcab-dispatcher") {
            continue;
        }
        let Some(lane) = label(e, "tcab.dev/job-kind") else {
            continue;
        };
        let cap = caps.get(lane).copied().unwrap_or(u32::MAX);
        let count = live.entry(lane.to_owned()).or_default();
        if e.event == "ADDED" {
            *count += 1;
            if e.actor == Actor::Rbac
                && let Some(at) = freed.get_mut(lane).and_then(VecDeque::pop_front)
            {
                out.entry(lane.to_owned())
                    .or_default()
                    .push(between_ms(at, e.at));
            }
        } else if (e.finished.is_some() || e.event == "DELETED") && ended.insert(e.uid.clone()) {
            if *count >= cap && e.at >= window.0 && e.at < window.1 {
                freed.entry(lane.to_owned()).or_default().push_back(e.at);
            }
            *count = count.saturating_sub(1);
        }
    }
    out
}

/// When each dispatcher pod's container stopped running (its death),
/// within `window`.
fn deaths(
    audit: &[AuditEntry],
    window: (jiff::Timestamp, jiff::Timestamp),
) -> Vec<(PodLife, jiff::Timestamp)> {
    invariants::pod_lives(audit, &Settings::default())
        .into_iter()
        .filter_map(|life| {
            let to = life.running.last()?.to?;
            (to >= window.0 && to < window.1).then_some((life, to))
        })
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let run_dir = std::env::var("RUN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_owned());
    let mut options = StackOptions::new(run_dir.clone());
    options.poll_seconds = args.poll;
    options.max_inflight = args.runs;
    options.max_publish_inflight = args.publishes;
    options.cluster_nodes = args.nodes;
    options.cluster = args.cluster;
    if args.cluster.is_real() {
        options.node_pods = Some(args.node_pods);
    }
    options.driver_grace_seconds = 1;
    options.rust_log = "warn".into();
    // Small requests, so 500 drivers and publishers and 400 sandboxes fit
    // the nodes' pod slots rather than their memory.
    for (k, v) in [
        ("TCAB_DISPATCHER_DRIVER_CPU_REQUEST", "10m"),
        ("TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST", "32Mi"),
        ("TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST", "10m"),
        ("TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST", "32Mi"),
    ] {
        options.extra_env.push((k.into(), v.into()));
    }
    let started = Instant::now();
    let mut stack = Stack::start(options).await?;
    let admin = stack.admin();
    let stop_feeding = Arc::new(AtomicBool::new(false));
    let feeder = tokio::spawn(feed(
        stack.backend.clone(),
        (args.runs / 2).max(20) as usize,
        stop_feeding.clone(),
    ));

    // Both lanes full: ~500 live Jobs.
    let full = (args.runs + args.publishes) as usize;
    let cluster = stack.cluster.clone();
    wait_for("both lanes to fill", Duration::from_secs(120), || {
        let cluster = cluster.clone();
        async move {
            let live = cluster
                .jobs(Some("app.kubernetes.io/managed-by=tcab-dispatcher"))
                .await?
                .iter()
                .filter(|j| {
                    !j["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            (c["type"] == "Complete" || c["type"] == "Failed")
                                && c["status"] == "True"
                        })
                    })
                })
                .count();
            Ok((live >= full).then_some(()))
        }
    })
    .await?;
    let from = jiff::Timestamp::now();
    println!(
        "both lanes full ({full} live Jobs) after {:.1} s; churning for {} s ...",
        started.elapsed().as_secs_f64(),
        args.seconds
    );

    let stop_killing = AtomicBool::new(false);
    let kills = Kills::default();
    let churn = async {
        tokio::time::sleep(Duration::from_secs(args.seconds)).await;
        stop_killing.store(true, Ordering::Relaxed);
    };
    tokio::join!(
        churn,
        kill(
            &stack,
            &admin,
            args.oom_per_second,
            args.evictions_per_second,
            &stop_killing,
            &kills
        )
    );
    let to = jiff::Timestamp::now();
    // Let the last deaths be reported and reaped before reading the records
    // (on the real cluster a Job takes seconds to be Failed; see below).
    tokio::time::sleep(Duration::from_secs(if args.cluster.is_real() {
        15
    } else {
        3
    }))
    .await;
    stop_feeding.store(true, Ordering::Relaxed);
    let _ = feeder.await;
    stack.check_alive()?;

    let audit = admin.audit().await?;
    let history = stack.backend.history().await?;
    // The API server's own record, kept with the run for a closer look.
    if let Some(log) = stack
        .real
        .as_ref()
        .and_then(|r| r.access.audit_log.as_ref())
    {
        std::fs::copy(log, run_dir.join("audit.jsonl"))?;
    }
    let window = (from, to);

    let caps = BTreeMap::from([("run", args.runs), ("publish", args.publishes)]);
    let freed = freed_to_admitted(&audit, &caps, window);
    let reports = invariants::reports(&history);
    let mut first_report: BTreeMap<&str, Vec<(jiff::Timestamp, ReportKind)>> = BTreeMap::new();
    for r in &reports {
        first_report
            .entry(r.job_id.as_str())
            .or_default()
            .push((r.wall_at, r.kind));
    }
    // The terminal state each job reached first, and when (whoever reported).
    let mut terminal: BTreeMap<&str, jiff::Timestamp> = BTreeMap::new();
    for e in &history.entries {
        if matches!(e.state.as_str(), "succeeded" | "failed" | "cancelled")
            && let Some(at) = e.wall_at
        {
            terminal.entry(e.job_id.as_str()).or_insert(at);
        }
    }
    // Sandbox pods by job id: when each was first being deleted.
    let mut sandbox_deleted: BTreeMap<&str, jiff::Timestamp> = BTreeMap::new();
    for e in audit.iter().filter(|e| e.kind == "Pod") {
        if label(e, "app.kubernetes.io/managed-by") == Some("tcab-driver")
            && (e.deleting || e.event == "DELETED")
            && let Some(id) = label(e, "tcab.dev/job-id")
        {
            sandbox_deleted.entry(id).or_insert(e.at);
        }
    }
    let sandbox_of: std::collections::HashSet<&str> = audit
        .iter()
        .filter(|e| {
            e.kind == "Pod" && label(e, "app.kubernetes.io/managed-by") == Some("tcab-driver")
        })
        .filter_map(|e| label(e, "tcab.dev/job-id"))
        .collect();

    // When each Job (by name) was first seen Failed: the cluster's part of
    // a death, before which the dispatcher does not report it.
    let mut job_failed: BTreeMap<&str, jiff::Timestamp> = BTreeMap::new();
    for e in audit.iter().filter(|e| e.kind == "Job") {
        if e.finished.as_deref() == Some("Failed") {
            job_failed.entry(e.name.as_str()).or_insert(e.at);
        }
    }
    let (mut to_failed, mut failed_to_report) = (Vec::new(), Vec::new());
    let (mut to_report, mut to_reap) = (Vec::new(), Vec::new());
    let (mut by_self, mut finished, mut unreported, mut no_sandbox, mut unreaped) = (0, 0, 0, 0, 0);
    let lane_of: BTreeMap<String, String> = invariants::job_lives(&audit, &Settings::default())
        .into_iter()
        .map(|l| (l.job_id, l.lane))
        .collect();
    let died = deaths(&audit, window);
    let mut by_kind: BTreeMap<&str, u32> = BTreeMap::new();
    for (life, at) in &died {
        let id = life.job_id.as_str();
        let report = first_report
            .get(id)
            .and_then(|rs| rs.iter().find(|(t, _)| *t >= *at));
        match (report, terminal.get(id)) {
            (Some((t, kind)), _) => {
                to_report.push(between_ms(*at, *t));
                if *kind == ReportKind::Dead
                    && let Some(failed) = life.owner.as_deref().and_then(|j| job_failed.get(j))
                    && failed >= at
                    && failed <= t
                {
                    to_failed.push(between_ms(*at, *failed));
                    failed_to_report.push(between_ms(*failed, *t));
                }
                *by_kind
                    .entry(match kind {
                        ReportKind::Dead => "death (failed)",
                        ReportKind::Lost => "lost",
                    })
                    .or_default() += 1;
            }
            // The workload's own last report landed before its container
            // stopped: a finished driver, or a publisher answering SIGTERM.
            (None, Some(t)) if *t <= *at => {
                if reports.iter().any(|r| r.job_id == id) {
                    unreported += 1;
                } else if lane_of.get(id).map(String::as_str) == Some("publish") {
                    by_self += 1;
                } else {
                    finished += 1;
                }
            }
            _ => unreported += 1,
        }
        if sandbox_of.contains(id) && report.is_some() {
            match sandbox_deleted.get(id) {
                Some(t) if *t >= *at => to_reap.push(between_ms(*at, *t)),
                Some(_) => {}
                None => unreaped += 1,
            }
        } else if report.is_some() && !sandbox_of.contains(id) {
            no_sandbox += 1;
        }
    }

    println!(
        "reaction times under load on the {} cluster: caps {} runs + {} publishes, {} s of churn, poll interval {} s",
        args.cluster.name(),
        args.runs,
        args.publishes,
        args.seconds,
        args.poll
    );
    println!(
        "  churn: {} Jobs ended in the window ({} completed), {} OOM kills and {} evictions sent ({} refused: the pod had stopped)",
        audit
            .iter()
            .filter(|e| e.kind == "Job" && e.finished.is_some() && e.at >= from && e.at < to)
            .count(),
        audit
            .iter()
            .filter(|e| e.kind == "Job"
                && e.finished.as_deref() == Some("Complete")
                && e.at >= from
                && e.at < to)
            .count(),
        kills.oom.load(Ordering::Relaxed),
        kills.evicted.load(Ordering::Relaxed),
        kills.failed.load(Ordering::Relaxed),
    );
    println!(
        "  deaths: {} pods stopped in the window; reported by the dispatcher {:?}; finished by their own report first {} (completions); publishers that reported their own SIGTERM {}; no dispatcher report after death {}; reported runs without a sandbox {}; sandboxes never deleted {}",
        died.len(),
        by_kind,
        finished,
        by_self,
        unreported,
        no_sandbox,
        unreaped,
    );
    // The real cluster's figures are kept apart from the simulated one's.
    let bench = match args.cluster {
        ClusterKind::Sim => "reaction-load",
        ClusterKind::Real => "reaction-load-real",
    };
    for (lane, samples) in &freed {
        summary(
            bench,
            &format!("capacity freed -> next admission ({lane})"),
            samples,
        );
    }
    let all: Vec<f64> = freed.values().flatten().copied().collect();
    summary(bench, "capacity freed -> next admission", &all);
    summary(bench, "death -> report at the backend", &to_report);
    summary(bench, "death -> sandbox deleted", &to_reap);
    // A death report waits for the Job to be Failed (its pods stopped): the
    // part of the cluster's Job controller, then the dispatcher's part.
    summary(bench, "death -> its Job Failed (cluster)", &to_failed);
    summary(
        bench,
        "Job Failed -> death report (dispatcher)",
        &failed_to_report,
    );
    println!(
        "  whole run {:.0} s; the records: {} audit entries, {} backend history entries",
        started.elapsed().as_secs_f64(),
        audit.len(),
        history.entries.len()
    );
    stack.shutdown().await;
    Ok(())
}
