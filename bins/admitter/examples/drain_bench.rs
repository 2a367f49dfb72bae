//! Drain-rate benchmark: the admitter against the raw floor, with no latency
//! and under a latency profile.
//!
//! Both sides drain the same number of queued runs from a fresh reference
//! backend (backend-sim, in memory) into a fresh kube-sim (controller off, so
//! Jobs never get pods and nothing but the API is measured):
//!
//! - **raw floor**: a bare loop of `claim_run` + create of the driver Job,
//!   back to back, one at a time;
//! - **admitter**: `run()` as the binary runs it (watch-backed cache, a gate
//!   call before every claim, vault `Put`, the publish lane on its own loop
//!   claiming too), caps high enough not to bind, timed from start until the
//!   last Job exists.
//!
//! Each profile is measured in the same run, rounds alternating the two
//! sides to share any machine noise:
//!
//! - **zero latency**: the sims answer in microseconds;
//! - **latency** (`--kube-ms`, default 20; `--backend-ms`, default 10):
//!   kube-sim's `delay` fault on every Job and pod call (create, get, list,
//!   watch, delete: a watch waits before it opens; events then flow at once)
//!   and backend-sim's `delay` fault on every backend call (claims, reports,
//!   renewals). The gate and the vault are the lease-keeper in the same pod
//!   (localhost gRPC) and stay undelayed.
//!
//! Then, per profile, what one admission is made of: the median of single
//! gate calls, claims, vault `Put`s and creates, and the ratio those predict
//! (floor = claim + create; the admitter adds the gate call and the `Put`,
//! which the rules keep in line: a gate answer is never reused across
//! claims, and the `Put` must precede the create).
//!
//! Targets (architecture.md §8): at least 80% of the floor at zero latency,
//! at least 90% under 20 ms Kubernetes / 10 ms backend calls.
//!
//! `cargo run --release -p tcab-admitter --example drain_bench -- [JOBS] [ROUNDS]
//!  [--latency-jobs N] [--kube-ms MS] [--backend-ms MS]`
//! (JOBS per round at zero latency, default 300; ROUNDS default 5;
//! `--latency-jobs` per round under latency, default 100.)

#[path = "../tests/it/support/gate.rs"]
#[allow(dead_code)]
mod gate;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder;
use tcab_admitter::keeper_client::{KeeperClient, KeeperClientSettings};
use tcab_admitter::{Deps, run};
use tcab_backend_sim::faults::{FaultMode, FaultRequest};
use tcab_kube_sim::faults::{ApiFaultMode, FaultRule};
use tcab_shared::Lane;
use tcab_shared::backend::BackendClient;
use tcab_shared::config::{BinaryConfig, Env};
use tcab_shared::runtime::CancellationToken;

const TOKEN: &str = "bench-token";
const NS: &str = "bench";
/// The maximum age the timed gate calls ask with (their answer is not used).
const GATE_MAX_AGE: Duration = Duration::from_secs(60);
/// How long a profile's faults last: longer than any round.
const PROFILE_SECONDS: f64 = 3600.0;

/// A latency profile: how late each simulator answers.
#[derive(Debug, Clone, Copy)]
struct Profile {
    kube: Duration,
    backend: Duration,
    /// Runs drained per round.
    jobs: usize,
}

impl Profile {
    fn name(&self) -> String {
        if self.kube.is_zero() && self.backend.is_zero() {
            "zero latency".into()
        } else {
            format!(
                "{} ms Kubernetes / {} ms backend",
                self.kube.as_millis(),
                self.backend.as_millis()
            )
        }
    }

    fn target(&self) -> f64 {
        if self.kube.is_zero() && self.backend.is_zero() {
            0.80
        } else {
            0.90
        }
    }
}

struct World {
    backend: tcab_backend_sim::SimHandle,
    cluster: tcab_kube_sim::SimHandle,
    kube: kube::Client,
}

/// Fresh sims with `jobs` queued runs, answering as `profile` says.
async fn world(jobs: usize, profile: Profile) -> anyhow::Result<World> {
    let backend = tcab_backend_sim::spawn(tcab_backend_sim::SimOptions::in_memory(TOKEN)).await?;
    let cluster = tcab_kube_sim::spawn(tcab_kube_sim::SimOptions {
        namespace: NS.into(),
        controller: false,
        ..Default::default()
    })
    .await?;
    let kube = cluster.kube_client(None)?;
    let runs: Vec<_> = (0..jobs)
        .map(|i| {
            json!({"harness": "h", "model": "m", "case": format!("c{i}"), "jam": null,
                        "launch_request": {"case": format!("c{i}")}})
        })
        .collect();
    let answer = reqwest::Client::new()
        .post(format!("{}/jobs/batch", backend.url()))
        .bearer_auth(TOKEN)
        .json(&json!({"runs": runs}))
        .send()
        .await?;
    anyhow::ensure!(
        answer.status() == 201,
        "enqueue answered {}",
        answer.status()
    );
    // The profile applies from here on: the queue is filled already.
    if !profile.backend.is_zero() {
        backend
            .add_fault(FaultRequest {
                paths: vec!["/**".into()],
                mode: FaultMode::Delay,
                seconds: PROFILE_SECONDS,
                status: None,
                body: None,
                merge: false,
                delay_ms: Some(millis(profile.backend)),
            })
            .map_err(anyhow::Error::msg)?;
    }
    if !profile.kube.is_zero() {
        cluster.sim().faults.book.add_rule(
            FaultRule::new(ApiFaultMode::Delay)
                .verbs(["create", "get", "list", "watch", "delete"])
                .resources(["jobs", "pods"])
                .delay(profile.kube)
                .for_seconds(PROFILE_SECONDS),
        );
    }
    Ok(World {
        backend,
        cluster,
        kube,
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn config(
    backend_url: &str,
    vault: std::net::SocketAddr,
    cap: usize,
) -> anyhow::Result<AdmitterConfig> {
    config_with_metrics(backend_url, vault, cap, None)
}

/// [`config`], serving the admitter's metrics on `metrics` when given.
fn config_with_metrics(
    backend_url: &str,
    vault: std::net::SocketAddr,
    cap: usize,
    metrics: Option<std::net::SocketAddr>,
) -> anyhow::Result<AdmitterConfig> {
    let mut vars = vec![
        ("TCAB_BACKEND_URL", backend_url.to_owned()),
        ("TCAB_BACKEND_SERVICE_TOKEN", TOKEN.to_owned()),
        ("TCAB_DRIVER_IMAGE", "driver:bench".to_owned()),
        ("TCAB_PUBLISHER_IMAGE", "publisher:bench".to_owned()),
        ("TCAB_DISPATCHER_VAULT_ADDR", vault.to_string()),
        ("TCAB_DISPATCHER_MAX_INFLIGHT", cap.to_string()),
        ("POD_NAMESPACE", NS.to_owned()),
    ];
    if let Some(addr) = metrics {
        vars.push(("TCAB_DISPATCHER_METRICS_ADDR", addr.to_string()));
    }
    let env = Env::from_vars(vars.into_iter().map(|(k, v)| (k.to_owned(), v)))?;
    Ok(AdmitterConfig::from_env(&env)?)
}

fn live_runs(world: &World) -> i64 {
    let (live, _) = world.cluster.sim().store.job_counts();
    live.get("run").copied().unwrap_or(0)
}

/// One side's drain: the whole time, the span from its first Job's create
/// to its last (the cluster's own record), which leaves out the admitter's
/// start-up (its dry-run create and first list of Jobs), and the longest
/// pause between two creates (a lane that went idle and waited for its poll
/// interval shows here, not only as a lower rate).
#[derive(Debug, Clone)]
struct Drain {
    whole: Duration,
    steady: Duration,
    longest_pause: Duration,
    /// What the admitter's admission attempts came to (its own counters),
    /// so a pause can be told apart: an error, an empty claim, a closed
    /// gate. Empty for the raw floor.
    admissions: String,
}

impl Drain {
    fn new(whole: Duration, times: &[jiff::Timestamp]) -> Self {
        Drain {
            whole,
            steady: span(times),
            longest_pause: longest_pause(times),
            admissions: String::new(),
        }
    }
}

/// The admitter's non-zero `admissions_total` and `admission_errors_total`
/// series, read from its `/metrics`, as `lane/outcome n` (errors: their
/// labels and count).
async fn admission_counts(metrics: std::net::SocketAddr) -> anyhow::Result<String> {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    let mut counts = Vec::new();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        if value == 0.0 {
            continue;
        }
        let label = |name: &str| {
            series
                .split(['{', ',', '}'])
                .find_map(|part| part.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        if series.starts_with("tcab_dispatcher_admissions_total{") {
            counts.push(format!("{}/{} {value}", label("lane"), label("outcome")));
        } else if series.starts_with("tcab_dispatcher_admission_errors_total{") {
            counts.push(format!(
                "{}/error at {} ({}) {value}",
                label("lane"),
                label("step"),
                label("reason")
            ));
        }
    }
    counts.sort();
    Ok(counts.join(", "))
}

/// When each Job was created, by the cluster's audit timeline.
fn creates(world: &World) -> Vec<jiff::Timestamp> {
    world
        .cluster
        .sim()
        .store
        .audit_page(0, usize::MAX)
        .entries
        .into_iter()
        .filter(|e| e.kind == "Job" && e.event == "ADDED")
        .map(|e| e.at)
        .collect()
}

/// The longest time between two consecutive creates.
fn longest_pause(times: &[jiff::Timestamp]) -> Duration {
    times
        .windows(2)
        .map(|w| Duration::try_from(w[1] - w[0]).unwrap_or_default())
        .max()
        .unwrap_or_default()
}

fn span(times: &[jiff::Timestamp]) -> Duration {
    match (times.first(), times.last()) {
        (Some(first), Some(last)) => Duration::try_from(*last - *first).unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// Bare claim + create, back to back.
async fn raw_floor(profile: Profile, vault: std::net::SocketAddr) -> anyhow::Result<Drain> {
    let jobs = profile.jobs;
    let world = world(jobs, profile).await?;
    let config = config(&world.backend.url(), vault, jobs)?;
    let client = BackendClient::new(&world.backend.url(), TOKEN.into(), Duration::from_secs(10))?;
    let api: Api<Job> = Api::namespaced(world.kube.clone(), NS);
    let start = Instant::now();
    let mut made = 0;
    while let Some(run) = client.claim_run().await? {
        api.create(
            &PostParams::default(),
            &job_builder::driver_job(&config.jobs, &run),
        )
        .await?;
        made += 1;
    }
    let whole = start.elapsed();
    anyhow::ensure!(made == jobs, "raw floor created {made} of {jobs}");
    let drain = Drain::new(whole, &creates(&world));
    world.backend.shutdown().await;
    Ok(drain)
}

/// The admitter's `run()`, from its start until every Job exists (the
/// last create's time by the cluster's record: the bench looks only every
/// 2 ms, so as not to take CPU from the admitter).
async fn admitter(profile: Profile, vault: std::net::SocketAddr) -> anyhow::Result<Drain> {
    let jobs = profile.jobs;
    let world = world(jobs, profile).await?;
    // A free port for the admitter's metrics (released for it to bind).
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let config = config_with_metrics(&world.backend.url(), vault, jobs, Some(metrics))?;
    let deps = Deps {
        kube: world.kube.clone(),
        namespace: NS.into(),
        backend: BackendClient::new(&world.backend.url(), TOKEN.into(), Duration::from_secs(10))?,
    };
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let start = Instant::now();
    let started = jiff::Timestamp::now();
    let task = tokio::spawn(run(config, deps, shutdown));
    while live_runs(&world) < jobs as i64 {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "admitter drain timed out"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let admissions = admission_counts(metrics)
        .await
        .unwrap_or_else(|e| format!("(its metrics could not be read: {e})"));
    trigger.cancel();
    task.await??;
    let times = creates(&world);
    let last = times.last().copied().unwrap_or(started);
    let whole = Duration::try_from(last - started).unwrap_or_default();
    world.backend.shutdown().await;
    Ok(Drain {
        admissions,
        ..Drain::new(whole, &times)
    })
}

/// The median single call of each step of one admission, under `profile`.
#[derive(Debug)]
struct Steps {
    gate: Duration,
    claim: Duration,
    put: Duration,
    create: Duration,
}

/// Each step timed on its own, over a whole drain of the same queue (the
/// reference backend's claim slows as its queue grows, so a shorter queue
/// would make the claim look cheaper than in the rounds).
async fn steps(profile: Profile, vault: std::net::SocketAddr) -> anyhow::Result<Steps> {
    let n = profile.jobs;
    let world = world(n, profile).await?;
    let config = config(&world.backend.url(), vault, n)?;
    let client = BackendClient::new(&world.backend.url(), TOKEN.into(), Duration::from_secs(10))?;
    let keeper = KeeperClient::connect_lazy(vault, KeeperClientSettings::default())?;
    let api: Api<Job> = Api::namespaced(world.kube.clone(), NS);
    // One call of each first, so connections are open.
    keeper.verdict(Lane::Run, GATE_MAX_AGE).await?;
    let (mut gate, mut claim, mut put, mut create) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let t = Instant::now();
        keeper.verdict(Lane::Run, GATE_MAX_AGE).await?;
        gate.push(t.elapsed());
        let t = Instant::now();
        let Some(run) = client.claim_run().await? else {
            anyhow::bail!("the queue ran out early");
        };
        claim.push(t.elapsed());
        let t = Instant::now();
        keeper.put(Lane::Run, &run.id, "c", &run.token).await?;
        put.push(t.elapsed());
        let job = job_builder::driver_job(&config.jobs, &run);
        let t = Instant::now();
        api.create(&PostParams::default(), &job).await?;
        create.push(t.elapsed());
    }
    world.backend.shutdown().await;
    Ok(Steps {
        gate: median(gate),
        claim: median(claim),
        put: median(put),
        create: median(create),
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rate(jobs: usize, took: Duration) -> f64 {
    jobs as f64 / took.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One profile's rounds; returns the lines of its summary.
async fn measure(
    profile: Profile,
    rounds: usize,
    vault: std::net::SocketAddr,
) -> anyhow::Result<Vec<String>> {
    let jobs = profile.jobs;
    println!("{} ({jobs} runs per round):", profile.name());
    let (mut floors, mut admits) = (vec![], vec![]);
    for round in 1..=rounds {
        let floor = raw_floor(profile, vault).await?;
        let adm = admitter(profile, vault).await?;
        println!(
            "  round {round}: raw floor {:>7.1} jobs/s ({:?}), admitter {:>7.1} jobs/s ({:?}; first to last Job {:?}, floor's {:?}; longest pause between creates {:?}, floor's {:?}; admissions: {})",
            rate(jobs, floor.whole),
            floor.whole,
            rate(jobs, adm.whole),
            adm.whole,
            adm.steady,
            floor.steady,
            adm.longest_pause,
            floor.longest_pause,
            adm.admissions,
        );
        floors.push(floor);
        admits.push(adm);
    }
    let floor = median(floors.iter().map(|d| d.whole).collect());
    let adm = median(admits.iter().map(|d| d.whole).collect());
    let floor_steady = median(floors.iter().map(|d| d.steady).collect());
    let adm_steady = median(admits.iter().map(|d| d.steady).collect());
    let adm_pause = median(admits.iter().map(|d| d.longest_pause).collect());
    let ratio = floor.as_secs_f64() / adm.as_secs_f64();
    let steady_ratio = floor_steady.as_secs_f64() / adm_steady.as_secs_f64();
    let s = steps(profile, vault).await?;
    let (floor_job, admit_job) = (s.claim + s.create, s.gate + s.claim + s.put + s.create);
    println!(
        "  one admission's calls, each timed alone over a drain (median): gate {:.3} ms, claim {:.3} ms, vault Put {:.3} ms, create {:.3} ms",
        ms(s.gate),
        ms(s.claim),
        ms(s.put),
        ms(s.create)
    );
    let per_job = |d: Duration| ms(d) / jobs as f64;
    println!(
        "  per job: floor {:.3} ms, admitter {:.3} ms (start-up {:.1} ms in all); these calls alone predict {:.0}% (the gate call and the Put are {:.0}% of an admission's calls)",
        per_job(floor),
        per_job(adm),
        ms(adm.saturating_sub(adm_steady)),
        100.0 * floor_job.as_secs_f64() / admit_job.as_secs_f64(),
        100.0 * (s.gate + s.put).as_secs_f64() / admit_job.as_secs_f64(),
    );
    // For scripts/bench-compare.
    let key = profile.name();
    for (name, value, unit) in [
        ("raw floor", rate(jobs, floor), "jobs/s"),
        ("admitter", rate(jobs, adm), "jobs/s"),
        ("admitter/floor", ratio * 100.0, "%"),
        (
            "admitter/floor first to last Job",
            steady_ratio * 100.0,
            "%",
        ),
        (
            "admitter longest pause between creates",
            ms(adm_pause),
            "ms",
        ),
    ] {
        println!("figure\tdrain\t{key} {name}\t{value:.3}\t{unit}");
    }
    let verdict = if ratio >= profile.target() {
        "met"
    } else {
        "MISSED"
    };
    Ok(vec![
        format!(
            "{:<32} raw floor {:>7.1} jobs/s, admitter {:>7.1} jobs/s, admitter/floor = {:>3.0}% (target {:.0}%: {verdict})",
            profile.name(),
            rate(jobs, floor),
            rate(jobs, adm),
            ratio * 100.0,
            profile.target() * 100.0,
        ),
        format!(
            "{:<32} first Job to last: floor {:.3} ms a Job, admitter {:.3} ms a Job, admitter/floor = {:>3.0}% (start-up left out)",
            "",
            ms(floor_steady) / (jobs.max(2) - 1) as f64,
            ms(adm_steady) / (jobs.max(2) - 1) as f64,
            steady_ratio * 100.0,
        ),
    ])
}

/// Options: `[JOBS] [ROUNDS] [--latency-jobs N] [--kube-ms MS] [--backend-ms MS]`.
struct Args {
    jobs: usize,
    rounds: usize,
    latency_jobs: usize,
    kube_ms: u64,
    backend_ms: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut out = Args {
        jobs: 300,
        rounds: 5,
        latency_jobs: 100,
        kube_ms: 20,
        backend_ms: 10,
    };
    let mut positional = 0;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<u64> {
            let v = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
            Ok(v.parse()?)
        };
        match a.as_str() {
            "--latency-jobs" => out.latency_jobs = usize::try_from(value(&a)?)?,
            "--kube-ms" => out.kube_ms = value(&a)?,
            "--backend-ms" => out.backend_ms = value(&a)?,
            flag if flag.starts_with('-') => anyhow::bail!(
                "unknown option {flag}; usage: drain_bench [JOBS] [ROUNDS] [--latency-jobs N] [--kube-ms MS] [--backend-ms MS]"
            ),
            n => {
                match positional {
                    0 => out.jobs = n.parse()?,
                    1 => out.rounds = n.parse()?,
                    _ => anyhow::bail!("too many arguments"),
                }
                positional += 1;
            }
        }
    }
    anyhow::ensure!(
        out.jobs > 0 && out.latency_jobs > 0 && out.rounds > 0,
        "JOBS, ROUNDS and --latency-jobs must be positive"
    );
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // RUST_LOG shows what the admitter did (on stderr), e.g. to find what
    // a round's longest pause between creates was.
    if let Ok(spec) = std::env::var("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(spec.as_str())
            .with_writer(std::io::stderr)
            .init();
    }
    let args = args()?;
    let gate = gate::FakeGate::start().await;
    let profiles = [
        Profile {
            kube: Duration::ZERO,
            backend: Duration::ZERO,
            jobs: args.jobs,
        },
        Profile {
            kube: Duration::from_millis(args.kube_ms),
            backend: Duration::from_millis(args.backend_ms),
            jobs: args.latency_jobs,
        },
    ];
    let mut summary = vec![];
    for profile in profiles {
        summary.extend(measure(profile, args.rounds, gate.addr).await?);
    }
    println!("median over {} rounds:", args.rounds);
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}
