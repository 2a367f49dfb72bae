//! Reaction-time benchmark on the dev stack (prints figures; asserts nothing).
//!
//! `cargo run --release -p tcab-devstack --example reaction [-- ROUNDS]`
//!
//! With a 2 s poll interval, measures from the outside (polling every 20 ms):
//! capacity freed -> next admission, driver OOM-killed -> death report at the
//! backend, and driver OOM-killed -> its sandbox gone. The architecture's
//! target for each is well under one poll interval.

use clap::Parser;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tcab_devstack::{Stack, StackOptions, wait_for};
use tcab_kube_sim::AdminClient;

const POLL: f64 = 2.0;
const TICK: Duration = Duration::from_millis(20);

fn run(case: &str, sim: Value) -> Value {
    json!({"harness": "h", "model": "m", "case": case, "jam": null, "launch_request": {"sim": sim}})
}

fn complete(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True")
    })
}

async fn until<F, Fut>(what: &str, mut check: F) -> anyhow::Result<Instant>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    wait_for(what, Duration::from_secs(60), || {
        let fut = check();
        async move { Ok(fut.await?.then(Instant::now)) }
    })
    .await
}

fn summary(name: &str, samples: &[Duration]) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    let max = ms[ms.len() - 1];
    println!(
        "  {name:<34} median {median:>6.0} ms   max {max:>6.0} ms   ({:.0}% of the {POLL} s poll interval at the median)",
        median / (POLL * 10.0)
    );
}

/// Reaction times on the dev stack: freed slot, pod death, sandbox reap.
/// REACTION_DIR keeps the run directory (default: a temporary one).
#[derive(Parser)]
#[command(name = "reaction")]
struct Args {
    /// Rounds to measure
    #[arg(default_value_t = 5)]
    rounds: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { rounds } = Args::parse();
    let dir = tempfile::tempdir()?;
    let run_dir = std::env::var("REACTION_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_owned());
    let mut options = StackOptions::new(run_dir);
    options.poll_seconds = POLL;
    // Freed capacity is measured on the publish lane (cap 1). The run lane
    // has room for the retries of the OOM-killed hanging runs, which the
    // backend rightly enqueues (an infrastructure failure) and which hang too.
    options.max_inflight = 50;
    options.max_publish_inflight = 1;
    // Room for 50 drivers at their 1Gi request.
    options.cluster_nodes = 4;
    let stack = Stack::start(options).await?;
    let admin = AdminClient::new(stack.cluster.url());
    let (mut admit, mut report, mut reap) = (Vec::new(), Vec::new(), Vec::new());

    for i in 0..rounds {
        // Capacity freed -> next admission (publish lane cap 1).
        let publish = |name: String, ms: u64| {
            let backend = stack.backend.clone();
            async move {
                backend
                    .enqueue_publish(json!({"release": name, "sim": {"duration_ms": ms}}))
                    .await
            }
        };
        let a = publish(format!("a{i}"), 800).await?;
        let b = publish(format!("b{i}"), 300).await?;
        let cluster = stack.cluster.clone();
        let jobs_of = |id: String| {
            let cluster = cluster.clone();
            async move { cluster.jobs(Some(&format!("tcab.dev/job-id={id}"))).await }
        };
        let freed = until("the first Job to complete", || {
            let f = jobs_of(a.clone());
            async move { Ok(f.await?.iter().any(complete)) }
        })
        .await?;
        let admitted = until("the second Job to be created", || {
            let f = jobs_of(b.clone());
            async move { Ok(!f.await?.is_empty()) }
        })
        .await?;
        admit.push(admitted.saturating_duration_since(freed));
        until("the second publish to finish", || {
            let (backend, b) = (stack.backend.clone(), b.clone());
            async move { Ok(backend.publish_job(&b).await?["state"] == "succeeded") }
        })
        .await?;

        // Pod death -> report, failed driver -> sandbox reaped.
        let c = stack
            .backend
            .enqueue_run(run(&format!("c{i}"), json!({"hang": true})))
            .await?;
        until("the driver to report running", || {
            let (backend, c) = (stack.backend.clone(), c.clone());
            async move { Ok(backend.job(&c).await?["state"] == "running") }
        })
        .await?;
        let pods = stack
            .cluster
            .pods(
                "tcab",
                Some(&format!(
                    "tcab.dev/job-id={c},app.kubernetes.io/managed-by=tcab-dispatcher"
                )),
            )
            .await?;
        let pod = pods
            .first()
            .and_then(|p| p["metadata"]["name"].as_str())
            .unwrap_or_default()
            .to_owned();
        tokio::time::sleep(TICK).await;
        let killed = Instant::now();
        admin.oom_kill("tcab", &pod).await?;
        let (mut reported, mut reaped) = (None, None);
        while reported.is_none() || reaped.is_none() {
            if reported.is_none() && stack.backend.job(&c).await?["state"] == "failed" {
                reported = Some(killed.elapsed());
            }
            let sandboxes = stack
                .cluster
                .pods(
                    "tcab",
                    Some(&format!(
                        "tcab.dev/job-id={c},app.kubernetes.io/managed-by=tcab-driver"
                    )),
                )
                .await?;
            if reaped.is_none() && sandboxes.is_empty() {
                reaped = Some(killed.elapsed());
            }
            anyhow::ensure!(
                killed.elapsed() < Duration::from_secs(60),
                "no reaction within a minute"
            );
            tokio::time::sleep(TICK).await;
        }
        report.extend(reported);
        reap.extend(reaped);
    }

    println!(
        "reaction times over {rounds} rounds (poll interval {POLL} s, observed every {TICK:?}):"
    );
    summary("capacity freed -> next admission", &admit);
    summary("pod death -> death report", &report);
    summary("failed driver -> sandbox reaped", &reap);
    stack.shutdown().await;
    Ok(())
}
