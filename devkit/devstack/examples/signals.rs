//! A scripted drain of the dev stack with faults, scraped as Prometheus
//! would: the data behind docs/metrics.md's picture of the dashboard.
//!
//! `cargo run --release -p tcab-devstack --example signals [-- --out DIR]`
//! (`scripts/metrics-picture` runs it, then `docs/metrics/plot.py`).
//!
//! Through a run lane of 4 and a publish lane of 2 it drains 24 runs and 4
//! publishes while it kills three drivers (an OOM kill, an eviction, a
//! SIGKILL after an ignored SIGTERM), OOM-kills a publisher (reported lost
//! once its lease lapses), takes the Kubernetes API down for 12 s, and fails
//! the lease renewals at the backend for 8 s. Every second it scrapes the
//! three containers' `/metrics` into `scrapes.jsonl` (one line per container
//! and scrape: the time, the container, its samples), and writes what it did
//! to `run.json`: the events with their times and the deaths, lost reports
//! and reaps it caused, which the final scrape must show (checked here, and
//! again by the plot through the dashboard's own queries).

use clap::Parser;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcab_devstack::scrape::Scrape;
use tcab_devstack::{Container, Stack, StackOptions, wait_for};
use tcab_kube_sim::AdminClient;

const NS: &str = "tcab";
/// Bound of each wait of the script (a hang is a failure, not a wait).
const LIMIT: Duration = Duration::from_secs(90);
/// The scrape interval.
const SCRAPE: Duration = Duration::from_secs(1);
/// The lease the backend grants (a publisher's loss is reported once it lapses).
const LEASE_S: u64 = 30;
/// Driver pods' termination grace (an evicted driver that ignores SIGTERM is
/// killed after it).
const GRACE_S: u32 = 2;

/// The dashboard's main panels' metrics, kept from each scrape (the rest of
/// each container's text is left out of the file).
const KEPT: [&str; 15] = [
    "tcab_dispatcher_lane_in_flight",
    "tcab_dispatcher_lane_cap",
    "tcab_dispatcher_lane_stale",
    "tcab_dispatcher_lane_saturated_seconds",
    "tcab_dispatcher_gate_open",
    "tcab_dispatcher_gate_max_age_seconds",
    "tcab_dispatcher_last_renewal_age_seconds",
    "tcab_dispatcher_admissions_total",
    "tcab_dispatcher_queue_wait_seconds_bucket",
    "tcab_dispatcher_death_reports_total",
    "tcab_dispatcher_lost_reports_total",
    "tcab_dispatcher_sandboxes_reaped_total",
    "tcab_dispatcher_view_current",
    "tcab_dispatcher_kube_api_errors_total",
    "tcab_dispatcher_backend_errors_total",
];

/// The scripted drain with faults, scraped every second.
#[derive(Parser)]
#[command(name = "signals")]
struct Args {
    /// Where scrapes.jsonl and run.json go
    #[arg(long, default_value = "target/signals")]
    out: PathBuf,
}

fn run(case: &str, sim: Value) -> Value {
    json!({"harness": "h", "model": "m", "case": case, "jam": null, "launch_request": {"sim": sim}})
}

/// What the script did, when (seconds from its start).
#[derive(Default)]
struct Events(Vec<(f64, String)>);

struct Script {
    stack: Stack,
    admin: AdminClient,
    started: Instant,
    events: Arc<Mutex<Events>>,
}

impl Script {
    fn note(&self, what: &str) {
        let t = self.started.elapsed().as_secs_f64();
        println!("{t:>6.1} s  {what}");
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .push((t, what.to_owned()));
    }

    /// The running pod of a job's own Job (driver or publisher).
    async fn running_pod(&self, id: &str) -> anyhow::Result<String> {
        let cluster = self.stack.cluster.clone();
        let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-dispatcher");
        wait_for(&format!("the pod of {id} running"), LIMIT, || {
            let (cluster, selector) = (cluster.clone(), selector.clone());
            async move {
                let pods = cluster.pods(NS, Some(&selector)).await?;
                Ok(pods
                    .iter()
                    .find(|p| p["status"]["phase"] == "Running")
                    .and_then(|p| p["metadata"]["name"].as_str())
                    .map(str::to_owned))
            }
        })
        .await
    }

    /// Waits until the driver of run `id` reports `running` (its sandbox made).
    async fn driver_running(&self, id: &str) -> anyhow::Result<String> {
        let backend = self.stack.backend.clone();
        wait_for(&format!("{id} running"), LIMIT, || {
            let backend = backend.clone();
            async move { Ok((backend.job(id).await?["state"] == "running").then_some(())) }
        })
        .await?;
        self.running_pod(id).await
    }

    /// The sandbox pods of run `id`.
    async fn sandboxes(&self, id: &str) -> anyhow::Result<usize> {
        let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-driver");
        Ok(self.stack.cluster.pods(NS, Some(&selector)).await?.len())
    }
}

/// Scrapes the three containers every second until `stop`, appending to `file`.
async fn scrape_loop(
    stack_urls: Vec<(Container, String)>,
    file: PathBuf,
    started: Instant,
    stop: tokio_util_stop::Stop,
) -> anyhow::Result<usize> {
    let http = reqwest::Client::new();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&file)?);
    let mut ticker = tokio::time::interval(SCRAPE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scrapes = 0;
    loop {
        ticker.tick().await;
        let t = started.elapsed().as_secs_f64();
        for (c, url) in &stack_urls {
            // A scrape that fails (a container restarting) is a gap, as in
            // Prometheus.
            let Ok(answer) = http.get(url).timeout(Duration::from_secs(1)).send().await else {
                continue;
            };
            let Ok(text) = answer.text().await else {
                continue;
            };
            let Ok(scrape) = Scrape::parse(&text) else {
                continue;
            };
            let samples: Vec<Value> = scrape
                .samples
                .iter()
                .filter(|s| KEPT.contains(&s.name.as_str()))
                .map(|s| json!([s.name, s.labels, s.value]))
                .collect();
            let container = c.binary().trim_start_matches("tcab-");
            serde_json::to_writer(
                &mut out,
                &json!({"t": t, "container": container, "samples": samples}),
            )?;
            out.write_all(b"\n")?;
        }
        scrapes += 1;
        if stop.stopped() {
            out.flush()?;
            return Ok(scrapes);
        }
    }
}

/// A flag the script raises when the scraping may stop.
mod tokio_util_stop {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Clone, Default)]
    pub struct Stop(Arc<AtomicBool>);

    impl Stop {
        pub fn stop(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        pub fn stopped(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { out } = Args::parse();
    std::fs::create_dir_all(&out)?;
    let dir = tempfile::tempdir()?;
    let mut options = StackOptions::new(dir.path());
    options.max_inflight = 4;
    options.max_publish_inflight = 2;
    options.poll_seconds = 0.2;
    options.lease_seconds = LEASE_S;
    options.driver_grace_seconds = GRACE_S;
    options.cluster_nodes = 3;
    options
        .extra_env
        .push(("TCAB_DISPATCHER_LOG_FORMAT".into(), "json".into()));
    let stack = Stack::start(options).await?;
    let urls: Vec<(Container, String)> = Container::ALL
        .iter()
        .map(|c| (*c, stack.metrics_url(*c)))
        .collect();
    let admin = AdminClient::new(stack.cluster.url());
    let started = Instant::now();
    let script = Script {
        stack,
        admin,
        started,
        events: Arc::new(Mutex::new(Events::default())),
    };
    let stop = tokio_util_stop::Stop::default();
    let scraping = tokio::spawn(scrape_loop(
        urls,
        out.join("scrapes.jsonl"),
        started,
        stop.clone(),
    ));
    // A few seconds of an idle dispatcher first: every series at 0.
    tokio::time::sleep(Duration::from_secs(5)).await;

    // The work: three long runs to kill (they ignore SIGTERM, as a driver
    // busy with its run might; their retries run to the end), then the rest.
    let long = json!({"duration_ms": 20000, "ignore_sigterm": true, "log_lines": 3});
    let mut runs = vec![
        run("oom", long.clone()),
        run("evict", long.clone()),
        run("sigkill", long),
    ];
    for i in 0..21 {
        let ms = 3000 + (i % 4) * 1000;
        runs.push(run(
            &format!("case-{i}"),
            json!({"duration_ms": ms, "log_lines": 2}),
        ));
    }
    let ids = script.stack.backend.enqueue_batch(runs).await?;
    let publisher = script
        .stack
        .backend
        .enqueue_publish(json!({"release": "r-oom", "sim": {"duration_ms": 20000}}))
        .await?;
    for i in 0..3 {
        script
            .stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 2000}}))
            .await?;
    }
    script.note("enqueued 24 runs and 4 publishes");

    // The deaths, each once its driver runs (and has its sandbox).
    let mut killed = Vec::new();
    for (id, how) in ids.iter().take(3).zip(["oom", "evict", "sigkill"]) {
        let pod = script.driver_running(id).await?;
        let sandboxes = script.sandboxes(id).await?;
        match how {
            "oom" => script.admin.oom_kill(NS, &pod).await?,
            "evict" => script.admin.evict(NS, &pod).await?,
            _ => script.admin.kill(NS, &pod, f64::from(GRACE_S)).await?,
        }
        script.note(&format!("driver {how}: {pod}"));
        killed.push((id.clone(), sandboxes));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let pod = script.running_pod(&publisher).await?;
    script.admin.oom_kill(NS, &pod).await?;
    script.note(&format!(
        "publisher OOM-killed: {pod} (lost once its lease lapses)"
    ));

    // The Kubernetes API down for 12 s: every Job view stops being current.
    tokio::time::sleep(Duration::from_secs(5)).await;
    script.admin.restart(12.0).await?;
    script.note("Kubernetes API down for 12 s");
    tokio::time::sleep(Duration::from_secs(12)).await;
    script.note("Kubernetes API back");

    // The backend refuses lease renewals for 8 s: the gate closes.
    tokio::time::sleep(Duration::from_secs(8)).await;
    script
        .stack
        .backend
        .add_fault(&["/jobs/leases", "/publish-jobs/leases"], "error", 8.0)
        .await?;
    script.note("backend renewals failing for 8 s");

    // Drained: every run and publish terminal (the killed runs' retries and
    // the lost publish's included).
    let backend = script.stack.backend.clone();
    wait_for("the drain", Duration::from_secs(300), || {
        let backend = backend.clone();
        async move {
            let terminal = |j: &Value| {
                matches!(
                    j["state"].as_str(),
                    Some("succeeded" | "failed" | "cancelled")
                )
            };
            let runs = backend.jobs().await?;
            let pubs = backend.publish_jobs().await?;
            Ok(runs.iter().chain(pubs.iter()).all(terminal).then_some(()))
        }
    })
    .await?;
    script.note("drained");
    // And the reaper done: no sandbox of a killed run left.
    for (id, _) in &killed {
        let stack = &script.stack;
        let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-driver");
        wait_for("the sandboxes reaped", LIMIT, || async {
            Ok(stack
                .cluster
                .pods(NS, Some(&selector))
                .await?
                .is_empty()
                .then_some(()))
        })
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.stop();
    let scrapes = scraping.await??;

    // What the run caused, and what the containers counted.
    let deaths = killed.len();
    let reaped: usize = killed.iter().map(|(_, n)| n).sum();
    let keeper = script.stack.scrape(Container::LeaseKeeper).await?;
    let reaper = script.stack.scrape(Container::Reaper).await?;
    let counted = (
        keeper.sum("tcab_dispatcher_death_reports_total", &[]),
        keeper.sum("tcab_dispatcher_lost_reports_total", &[]),
        reaper.sum("tcab_dispatcher_sandboxes_reaped_total", &[]),
    );
    let caused = (deaths as f64, 1.0, reaped as f64);
    let events = std::mem::take(&mut script.events.lock().unwrap_or_else(|e| e.into_inner()).0);
    let record = json!({
        "scrape_interval_seconds": SCRAPE.as_secs_f64(),
        "caused": {"deaths": caused.0, "lost": caused.1, "reaped": caused.2},
        "counted": {"deaths": counted.0, "lost": counted.1, "reaped": counted.2},
        "events": events.iter().map(|(t, what)| json!({"t": t, "what": what})).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("run.json"), serde_json::to_string_pretty(&record)?)?;
    println!(
        "{scrapes} scrapes in {}; deaths {}/{}, lost {}/{}, reaped {}/{} (counted/caused)",
        out.display(),
        counted.0,
        caused.0,
        counted.1,
        caused.1,
        counted.2,
        caused.2
    );
    script.stack.shutdown().await;
    anyhow::ensure!(
        counted == caused,
        "the containers counted {counted:?} (deaths, lost, reaped), the run caused {caused:?}"
    );
    Ok(())
}
