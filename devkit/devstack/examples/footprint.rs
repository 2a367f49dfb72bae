//! Footprint and steady-state benchmark (prints figures; asserts nothing).
//!
//! `cargo run --release -p tcab-devstack --example footprint [-- SIZES...]`
//!
//! For each size (default `1 10000 100000`): a fresh dev stack, that many
//! owned Jobs that never get a pod (a fifth of them publishes; each named
//! and labelled as the admitter names a claim's Job), each driven
//! by the backend as if claimed (so every renewal answers with every lease
//! and every active list names every job, as in production; with
//! `--unknown-to-backend` the backend knows none of them, the method before
//! 2026-12-02's second round), the three
//! containers restarted so each lists them into its cache, then 10 s of
//! steady state at a 1 s poll. Prints each container's resident memory
//! (at the window's end, its lowest and highest over the window, sampled
//! every 250 ms, and the peak), the memory per cached Job from the smallest and largest
//! sizes, and, per container, the Kubernetes requests (by verb and
//! resource, from kube-sim's counters by `User-Agent`) and the backend
//! calls (by route, from backend-sim's) over the window. Figure lines
//! (`figure<TAB>...`) are for `scripts/bench-compare`.

use clap::Parser;
use futures::StreamExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tcab_devstack::{Container, Stack, StackOptions, wait_for};
use tcab_kube_sim::AdminClient;
use tcab_shared::{Lane, names};

/// The steady-state window and the poll interval in it.
const WINDOW: Duration = Duration::from_secs(10);
const POLL_SECONDS: f64 = 1.0;
/// How often resident memory is sampled in the window: a lease-keeper with
/// 100,000 Jobs holds a renewal round's bodies for part of each second, so
/// one sample lands in or out of a round by chance.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Resident memory of the three containers with each number of owned Jobs,
/// and their API and backend calls at steady state.
#[derive(Parser)]
#[command(name = "footprint")]
struct Args {
    /// Numbers of owned Jobs, one fresh stack each
    #[arg(default_values_t = [1usize, 10_000, 100_000])]
    sizes: Vec<usize>,
    /// Leave the Jobs' ids unknown to the backend (renewals and active
    /// lists then answer with nothing)
    #[arg(long)]
    unknown_to_backend: bool,
}

/// What one size measured.
struct Measured {
    jobs: usize,
    /// Per container: its memory in KiB.
    memory: BTreeMap<&'static str, Memory>,
    /// Per container: Kubernetes requests by `"<verb> <resource>"`.
    kube: BTreeMap<&'static str, BTreeMap<String, u64>>,
    /// Per container: backend calls by route.
    backend: BTreeMap<&'static str, BTreeMap<String, u64>>,
}

/// The bench's name in its figure lines: `footprint` for the method the
/// recorded figures before 2026-12-02's second round used (Jobs unknown to
/// the backend), `footprint-driven` for the default, so `bench-compare`
/// never sets one method's figure beside the other's.
static BENCH: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn figure(name: &str, value: f64, unit: &str) {
    let bench = BENCH.get().copied().unwrap_or("footprint");
    println!("figure\t{bench}\t{name}\t{value:.3}\t{unit}");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args {
        sizes,
        unknown_to_backend,
    } = Args::parse();
    let bench = if unknown_to_backend {
        "footprint"
    } else {
        "footprint-driven"
    };
    BENCH.set(bench).expect("set once");
    let mut all = Vec::new();
    for jobs in sizes {
        let m = measure(jobs, !unknown_to_backend).await?;
        println!("\nresident memory with {} owned Jobs cached:", m.jobs);
        for (binary, mem) in &m.memory {
            let Memory {
                rss,
                hwm,
                anon,
                file,
                window: (low, high),
            } = mem;
            println!(
                "  {binary:<18} RSS {:>6.1} MiB   over the window {:>5.1}–{:<5.1} MiB   peak {:>6.1} MiB   (heap and stacks {:>6.1} MiB, mapped binary {:>5.1} MiB)",
                mib(*rss),
                mib(*low),
                mib(*high),
                mib(*hwm),
                mib(*anon),
                mib(*file)
            );
            figure(
                &format!("{binary} rss low over the window at {} jobs", m.jobs),
                mib(*low),
                "MiB",
            );
            figure(
                &format!("{binary} rss high over the window at {} jobs", m.jobs),
                mib(*high),
                "MiB",
            );
            figure(
                &format!("{binary} anonymous at {} jobs", m.jobs),
                mib(*anon),
                "MiB",
            );
            figure(
                &format!("{binary} rss at {} jobs", m.jobs),
                mib(*rss),
                "MiB",
            );
            figure(
                &format!("{binary} peak at {} jobs", m.jobs),
                mib(*hwm),
                "MiB",
            );
        }
        let ticks = WINDOW.as_secs_f64() / POLL_SECONDS;
        println!(
            "calls over {WINDOW:?} of steady state (poll {POLL_SECONDS} s: {ticks} ticks), per container:"
        );
        for c in Container::ALL {
            let binary = c.binary();
            let kube = m.kube.get(binary).cloned().unwrap_or_default();
            let backend = m.backend.get(binary).cloned().unwrap_or_default();
            let lists: u64 = kube
                .iter()
                .filter(|(k, _)| k.starts_with("list "))
                .map(|(_, v)| v)
                .sum();
            let kube_total: u64 = kube.values().sum();
            let backend_total: u64 = backend.values().sum();
            println!(
                "  {binary}: {kube_total} Kubernetes requests ({lists} LISTs), {backend_total} backend calls"
            );
            for (k, v) in kube.iter() {
                println!(
                    "    kube    {k:<28} {v:>4}  ({:.1} per tick)",
                    *v as f64 / ticks
                );
            }
            for (k, v) in backend.iter() {
                println!(
                    "    backend {k:<28} {v:>4}  ({:.1} per tick)",
                    *v as f64 / ticks
                );
            }
            figure(
                &format!("{binary} kube requests per tick at {} jobs", m.jobs),
                kube_total as f64 / ticks,
                "requests",
            );
            figure(
                &format!("{binary} kube lists at {} jobs", m.jobs),
                lists as f64,
                "requests",
            );
            figure(
                &format!("{binary} backend calls per tick at {} jobs", m.jobs),
                backend_total as f64 / ticks,
                "calls",
            );
        }
        all.push(m);
    }
    if let (Some(small), Some(large)) = (all.first(), all.last())
        && large.jobs > small.jobs
    {
        println!(
            "\nmemory per cached Job, from {} and {} Jobs (RSS difference / Job difference):",
            small.jobs, large.jobs
        );
        for (binary, mem) in &large.memory {
            let base = small.memory.get(binary).map_or(0, |m| m.rss);
            let per_job =
                (mem.rss as f64 - base as f64) * 1024.0 / (large.jobs - small.jobs) as f64;
            println!("  {binary:<18} {per_job:>6.0} bytes per Job");
            figure(&format!("{binary} bytes per job"), per_job, "bytes");
        }
    }
    Ok(())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn measure(jobs: usize, driven: bool) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir()?;
    let mut options = StackOptions::new(dir.path());
    options.poll_seconds = POLL_SECONDS;
    // The Jobs never get a pod: past the start grace the lease-keeper would
    // read why (the FailedCreate Events) and count them as waiting. That is
    // not the steady state measured here, and a large size's setup can
    // outlast the default 300 s, so the grace is set past any run.
    options
        .extra_env
        .push(("TCAB_DISPATCHER_START_GRACE_SECONDS".into(), "86400".into()));
    let mut stack = Stack::start(options).await?;
    let admin = AdminClient::new(stack.cluster.url());
    admin.never_pod_next(jobs as u32).await?;
    if driven {
        let (publishes, runs): (Vec<usize>, Vec<usize>) = (0..jobs).partition(|i| is_publish(*i));
        let ids = |of: Vec<usize>| of.into_iter().map(job_id).collect::<Vec<_>>();
        stack
            .backend
            .seed_driven(&ids(runs), &ids(publishes))
            .await?;
    }

    let started = Instant::now();
    let created = create_jobs(&stack, jobs).await?;
    println!(
        "\n== {jobs} Jobs: created {created} owned Jobs in {:.1?}",
        started.elapsed()
    );

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
            Duration::from_secs(300),
            || {
                let found = stack.log(c).contains(&marker(c));
                async move { Ok(found.then_some(())) }
            },
        )
        .await?;
    }
    // Settle: the first ticks after the list do their one-off work.
    tokio::time::sleep(Duration::from_secs(2)).await;
    admin.reset_counters().await?;
    stack.backend.calls(true).await?;
    let mut window: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let end = Instant::now() + WINDOW;
    while Instant::now() < end {
        for c in Container::ALL {
            let rss = memory_kib(stack.pid(c).unwrap_or(0)).rss;
            let (low, high) = window.entry(c.binary()).or_insert((rss, rss));
            *low = (*low).min(rss);
            *high = (*high).max(rss);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }

    let counters = admin.counters().await?;
    let backend = stack.backend.calls(false).await?;
    let mut m = Measured {
        jobs: created,
        memory: BTreeMap::new(),
        kube: BTreeMap::new(),
        backend: BTreeMap::new(),
    };
    for c in Container::ALL {
        let binary = c.binary();
        let pid = stack.pid(c).unwrap_or(0);
        let mut memory = memory_kib(pid);
        if let Some(&range) = window.get(binary) {
            memory.window = range;
        }
        m.memory.insert(binary, memory);
        let mine = |agent: &String| agent.starts_with(&format!("{binary}/"));
        let kube = counters
            .requests_by_agent
            .iter()
            .filter(|(a, _)| mine(a))
            .flat_map(|(_, calls)| calls.clone())
            .collect();
        m.kube.insert(binary, kube);
        let calls = backend
            .iter()
            .filter(|(a, _)| mine(a))
            .flat_map(|(_, calls)| calls.clone())
            .collect();
        m.backend.insert(binary, calls);
    }
    stack.shutdown().await;
    Ok(m)
}

/// Whether Job `i` is a publish (a fifth of them are).
fn is_publish(i: usize) -> bool {
    i.is_multiple_of(5)
}

/// The backend job id of Job `i`.
fn job_id(i: usize) -> String {
    format!("bench-{i}")
}

/// Creates `jobs` owned Jobs through the API (32 in flight); answers how
/// many were created.
async fn create_jobs(stack: &Stack, jobs: usize) -> anyhow::Result<usize> {
    let client = reqwest::Client::new();
    let url = format!("{}/apis/batch/v1/namespaces/tcab/jobs", stack.cluster.url());
    let kubeconfig = std::fs::read_to_string(&stack.admin_kubeconfig)?;
    let token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap_or_default()
        .to_owned();
    let created = futures::stream::iter(0..jobs)
        .map(|i| {
            let (client, url, token) = (client.clone(), url.clone(), token.clone());
            async move {
                let lane = if is_publish(i) {
                    Lane::Publish
                } else {
                    Lane::Run
                };
                // Named and labelled as the admitter names a claim's Job.
                let (id, claim) = (job_id(i), names::claim_tag(&format!("token-{i}")));
                let job = json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": names::job_name(lane, &id, &claim), "labels": {
                        "app.kubernetes.io/managed-by": "tcab-dispatcher",
                        "tcab.dev/job-kind": lane.label_value(), "tcab.dev/job-id": id,
                        "tcab.dev/claim": claim}},
                    "spec": {"backoffLimit": 0, "template": {
                        "metadata": {"labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher"}},
                        "spec": {"restartPolicy": "Never",
                                 "containers": [{"name": "driver", "image": "bench"}]}}}
                });
                client
                    .post(url)
                    .bearer_auth(token)
                    .json(&job)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        })
        .buffer_unordered(32)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    Ok(created)
}

/// One process's memory from `/proc/<pid>/status`, in KiB: resident now
/// and at its peak, and what is resident now split into anonymous memory
/// (heap, stacks) and file pages (the binary's text mapped in); `window`
/// is the lowest and highest resident size sampled over the window.
struct Memory {
    rss: u64,
    hwm: u64,
    anon: u64,
    file: u64,
    window: (u64, u64),
}

fn memory_kib(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
        window: (0, 0),
    }
}
