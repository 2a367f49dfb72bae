//! What the dispatcher costs a real API server (prints figures; asserts
//! nothing).
//!
//! `cargo run --release -p tcab-devstack --example api_cost [-- --runs 900 --publishes 100 --window 60]`
//!
//! On a real control plane of its own (upstream kube-apiserver, built by
//! `scripts/control-plane build`; two nodes played by our node agent, each
//! admitting enough pods), the dev stack at the chart's default poll
//! interval admits `--runs` runs and `--publishes` publishes whose drivers
//! and publishers run until the end, so that many Jobs are live at once.
//! Then it measures nothing for `--window` seconds but the steady state.
//!
//! Every count comes from the API server's own audit log (every request of
//! a ServiceAccount is logged at Metadata level; see
//! `tcab_real_cluster::AUDIT_POLICY`), filtered to the dispatcher's
//! ServiceAccount, each request once, per container by its `User-Agent`:
//!
//! - **per admitted Job**: the requests from the enqueue to the last
//!   admission, by verb and resource, divided by the Jobs admitted (the
//!   containers' start-up list, watch and dry-run are counted apart: they
//!   come before the enqueue);
//! - **per minute at steady state**: the requests over the window with
//!   every Job live and its pod running, by verb and resource.
//!
//! Figure lines (`figure<TAB>api_cost<TAB>...`) are for
//! `scripts/bench-compare`. RUN_DIR keeps the run directory (default: a
//! temporary one).

use anyhow::Context;
use clap::Parser;
use jiff::Timestamp;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tcab_devstack::timeline::{self, AuditedRequest};
use tcab_devstack::{ClusterKind, Container, Stack, StackOptions, wait_for};

/// The chart's default poll interval (TCAB_DISPATCHER_POLL_INTERVAL_SECONDS).
const POLL_SECONDS: f64 = 5.0;

/// API requests of the dispatcher per admitted Job and per minute at steady
/// state, on the real control plane.
#[derive(Parser)]
#[command(name = "api_cost")]
struct Args {
    /// Runs admitted (the run lane's cap)
    #[arg(long, default_value_t = 900)]
    runs: u32,
    /// Publishes admitted (the publish lane's cap)
    #[arg(long, default_value_t = 100)]
    publishes: u32,
    /// Seconds of steady state measured
    #[arg(long, default_value_t = 60)]
    window: u64,
}

fn figure(name: &str, value: f64, unit: &str) {
    println!("figure\tapi_cost\t{name}\t{value:.3}\t{unit}");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let live = (args.runs + args.publishes) as usize;
    let keep = std::env::var_os("RUN_DIR");
    let temp = tempfile::tempdir()?;
    let dir = keep.map_or_else(|| temp.path().to_owned(), Into::into);

    let mut options = StackOptions::new(&dir);
    options.cluster = ClusterKind::Real;
    options.shared_control_plane = false;
    options.max_inflight = args.runs;
    options.max_publish_inflight = args.publishes;
    options.poll_seconds = POLL_SECONDS;
    options.rust_log = "info".into();
    // Room for every pod on the two nodes: tiny requests, a high pod cap.
    options.node_pods = Some(live as u32);
    for (k, v) in [
        ("TCAB_DISPATCHER_DRIVER_CPU_REQUEST", "1m"),
        ("TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST", "1Mi"),
        ("TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST", "1m"),
        ("TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST", "1Mi"),
    ] {
        options.extra_env.push((k.into(), v.into()));
    }
    let started = Instant::now();
    let stack = Stack::start(options).await?;
    println!(
        "stack up on the real control plane in {:.1?}",
        started.elapsed()
    );
    let real = stack
        .real
        .as_ref()
        .context("the stack runs on the real control plane")?;
    let admin = real.admin();
    let namespaces: Vec<&str> = admin.namespaces.iter().map(String::as_str).collect();
    let namespace = admin.namespaces[0].clone();

    // Everything before here is start-up (lists, watches, the dry-run).
    for c in Container::ALL {
        wait_for("the Job view current", Duration::from_secs(120), || {
            let current = stack.log(c).contains("Job view current");
            async move { Ok(current.then_some(())) }
        })
        .await?;
    }
    let enqueued_at = Timestamp::now();
    let runs: Vec<_> = (0..args.runs)
        .map(|i| {
            json!({"harness": "h", "model": "m", "case": format!("case-{i}"), "jam": null,
                "launch_request": {"sim": {"hang": true, "sandbox": false, "record": false}}})
        })
        .collect();
    stack.backend.enqueue_batch(runs).await?;
    for i in 0..args.publishes {
        stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 3_600_000}}))
            .await?;
    }
    let admitting = Instant::now();
    let selector = "app.kubernetes.io/managed-by=tcab-dispatcher";
    wait_for("every job admitted", Duration::from_secs(900), || async {
        let jobs = stack.cluster.jobs(Some(selector)).await?;
        Ok((jobs.len() >= live).then_some(()))
    })
    .await?;
    let admitted_at = Timestamp::now();
    println!("{live} Jobs admitted in {:.1?}", admitting.elapsed());
    wait_for("every pod running", Duration::from_secs(900), || async {
        let pods = stack.cluster.pods(&namespace, Some(selector)).await?;
        let running = pods
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        Ok((running >= live).then_some(()))
    })
    .await?;
    println!("{live} pods running after {:.1?}", admitting.elapsed());

    let window_from = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(args.window)).await;
    let window_to = Timestamp::now();
    let jobs_now = stack.cluster.jobs(Some(selector)).await?.len();

    let text = timeline::read_audit_log(&admin.audit_log, &namespaces)?;
    let requests = timeline::requests_of(&text, &admin.dispatcher_user);
    let per_container = |from: Timestamp, to: Timestamp| {
        let mut out: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
        for c in Container::ALL {
            let prefix = format!("{}/", c.binary());
            let mine: Vec<&AuditedRequest> = requests
                .iter()
                .filter(|r| r.agent.starts_with(&prefix))
                .collect();
            out.insert(c.binary(), timeline::count_calls(mine, from, to));
        }
        out
    };
    let startup = per_container(Timestamp::MIN, enqueued_at);
    let admission = per_container(enqueued_at, admitted_at);
    let steady = per_container(window_from, window_to);
    let others = requests
        .iter()
        .filter(|r| {
            !Container::ALL
                .iter()
                .any(|c| r.agent.starts_with(&format!("{}/", c.binary())))
        })
        .count();

    println!("\nstart-up (before the enqueue), by container:");
    print_calls(&startup, 1.0, "");
    let total_admission: u64 = admission.values().flat_map(|m| m.values()).sum();
    println!(
        "\nadmission of {live} Jobs: {total_admission} requests, {:.2} per admitted Job:",
        total_admission as f64 / live as f64
    );
    print_calls(&admission, live as f64, "per Job");
    figure(
        "requests per admitted job",
        total_admission as f64 / live as f64,
        "requests",
    );
    for (call, n) in merged(&admission) {
        figure(
            &format!("{call} per admitted job"),
            n as f64 / live as f64,
            "requests",
        );
    }

    let minutes = window_to.duration_since(window_from).as_secs_f64() / 60.0;
    let total_steady: u64 = steady.values().flat_map(|m| m.values()).sum();
    println!(
        "\nsteady state with {jobs_now} live Jobs over {:.0} s: {total_steady} requests, {:.2} per minute:",
        minutes * 60.0,
        total_steady as f64 / minutes
    );
    print_calls(&steady, minutes, "per minute");
    let lists: u64 = merged(&steady)
        .iter()
        .filter(|(call, _)| call.starts_with("list "))
        .map(|(_, n)| n)
        .sum();
    figure(
        &format!("requests per minute at {live} live jobs"),
        total_steady as f64 / minutes,
        "requests",
    );
    figure(
        &format!("lists at {live} live jobs"),
        lists as f64,
        "requests",
    );
    for c in Container::ALL {
        let n: u64 = steady.get(c.binary()).map_or(0, |m| m.values().sum());
        figure(
            &format!("{} requests per minute at {live} live jobs", c.binary()),
            n as f64 / minutes,
            "requests",
        );
    }
    if others > 0 {
        println!("\n({others} requests of the dispatcher's user came with another User-Agent)");
    }
    drop(stack);
    Ok(())
}

/// Every container's calls summed by call.
fn merged(calls: &BTreeMap<&'static str, BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in calls.values() {
        for (call, n) in m {
            *out.entry(call.clone()).or_default() += n;
        }
    }
    out
}

fn print_calls(calls: &BTreeMap<&'static str, BTreeMap<String, u64>>, per: f64, unit: &str) {
    for (binary, m) in calls {
        let total: u64 = m.values().sum();
        println!("  {binary}: {total}");
        for (call, n) in m {
            if unit.is_empty() {
                println!("    {call:<28} {n:>6}");
            } else {
                println!("    {call:<28} {n:>6}  ({:.3} {unit})", *n as f64 / per);
            }
        }
    }
}
