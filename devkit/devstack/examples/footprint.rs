//! Footprint and steady-state benchmark (prints figures; asserts nothing).
//!
//! `cargo run --release -p tcab-devstack --example footprint [-- JOBS]`
//!
//! Creates JOBS (default 10,000) owned Jobs that never get a pod, restarts the
//! three containers so each lists them into its cache, then reports each
//! container's resident memory, and the API and backend calls made over a
//! number of ticks at steady state.

use clap::Parser;
use serde_json::json;
use std::time::{Duration, Instant};
use tcab_devstack::{Container, Stack, StackOptions, wait_for};
use tcab_kube_sim::AdminClient;

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resident memory of the three containers with JOBS owned Jobs, and their
/// API and backend calls at steady state.
#[derive(Parser)]
#[command(name = "footprint")]
struct Args {
    /// Owned Jobs that never get a pod
    #[arg(default_value_t = 10_000)]
    jobs: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { jobs } = Args::parse();
    let dir = tempfile::tempdir()?;
    let mut options = StackOptions::new(dir.path());
    options.poll_seconds = 1.0;
    let mut stack = Stack::start(options).await?;
    let admin = AdminClient::new(stack.cluster.url());
    admin.never_pod_next(jobs as u32).await?;

    let started = Instant::now();
    let client = reqwest::Client::new();
    let url = format!("{}/apis/batch/v1/namespaces/tcab/jobs", stack.cluster.url());
    let token = std::fs::read_to_string(&stack.admin_kubeconfig)?;
    let token = token
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap_or_default()
        .to_owned();
    let mut pending = futures_lite(jobs, move |i| {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        async move {
            let kind = if i % 5 == 0 { "publish" } else { "run" };
            let job = json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("bench-{kind}-{i}"), "labels": {
                    "app.kubernetes.io/managed-by": "tcab-dispatcher",
                    "tcab.dev/job-kind": kind, "tcab.dev/job-id": format!("bench-{i}"),
                    "tcab.dev/claim": "00000000"}},
                "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "driver", "image": "bench"}]}}}
            });
            client
                .post(url)
                .bearer_auth(token)
                .json(&job)
                .send()
                .await
                .map(|r| r.status().is_success())
        }
    });
    let mut created = 0;
    while let Some(ok) = pending.next().await {
        if matches!(ok, Ok(true)) {
            created += 1;
        }
    }
    println!("created {created} owned Jobs in {:.1?}", started.elapsed());

    for c in Container::ALL {
        stack.stop_container(c).await;
        stack.start_container(c).await?;
    }
    let marker = |c: Container| match c {
        Container::Admitter => format!("owned_jobs={created}"),
        Container::LeaseKeeper | Container::Reaper => format!("jobs={created}"),
    };
    for c in Container::ALL {
        wait_for(
            "the cache to list every Job",
            Duration::from_secs(120),
            || {
                let found = stack.log(c).contains(&marker(c));
                async move { Ok(found.then_some(())) }
            },
        )
        .await?;
    }
    admin.reset_counters().await?;
    let backend_before = count_lines(&stack, "backend-sim.log");
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;

    println!(
        "\nresident memory with {created} owned Jobs cached (debug builds are larger than release):"
    );
    for c in Container::ALL {
        let pid = stack_pid(&mut stack, c);
        let (rss, hwm) = rss_kib(pid);
        println!(
            "  {:<18} RSS {:>6.1} MiB   peak {:>6.1} MiB",
            c.binary(),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
    let counters = admin.counters().await?;
    println!("\nAPI requests over {window:?} of steady state (poll 1 s, 3 containers):");
    for (k, v) in &counters.requests {
        println!("  {k:<24} {v}");
    }
    let backend_lines = count_lines(&stack, "backend-sim.log").saturating_sub(backend_before);
    println!("  (backend log lines in the window: {backend_lines})");
    stack.shutdown().await;
    Ok(())
}

fn count_lines(stack: &Stack, file: &str) -> usize {
    std::fs::read_to_string(stack.options.run_dir.join(file))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn stack_pid(stack: &mut Stack, c: Container) -> u32 {
    stack.pid(c).unwrap_or(0)
}

/// Runs `n` futures with at most 32 in flight, yielding results as they finish.
fn futures_lite<F, Fut, T>(n: usize, make: F) -> futures::stream::BoxStream<'static, T>
where
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .map(make)
        .buffer_unordered(32)
        .boxed()
}

use futures::StreamExt;
