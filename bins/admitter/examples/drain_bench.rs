//! Drain-rate benchmark: the admitter against the raw floor.
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
//! Rounds alternate the two to share any machine noise. Target: the admitter
//! drains at 80% of the floor or better (architecture.md §8).
//!
//! `cargo run -p tcab-admitter --example drain_bench -- [JOBS] [ROUNDS]`

#[path = "../tests/it/support/gate.rs"]
#[allow(dead_code)]
mod gate;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder;
use tcab_admitter::{Deps, run};
use tcab_shared::backend::BackendClient;
use tcab_shared::config::{BinaryConfig, Env};
use tcab_shared::runtime::CancellationToken;

const TOKEN: &str = "bench-token";
const NS: &str = "bench";

struct World {
    backend: tcab_backend_sim::SimHandle,
    cluster: tcab_kube_sim::SimHandle,
    kube: kube::Client,
}

async fn world(jobs: usize) -> anyhow::Result<World> {
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
    Ok(World {
        backend,
        cluster,
        kube,
    })
}

fn config(
    backend_url: &str,
    vault: std::net::SocketAddr,
    cap: usize,
) -> anyhow::Result<AdmitterConfig> {
    let vars = [
        ("TCAB_BACKEND_URL", backend_url.to_owned()),
        ("TCAB_BACKEND_SERVICE_TOKEN", TOKEN.to_owned()),
        ("TCAB_DRIVER_IMAGE", "driver:bench".to_owned()),
        ("TCAB_PUBLISHER_IMAGE", "publisher:bench".to_owned()),
        ("TCAB_DISPATCHER_VAULT_ADDR", vault.to_string()),
        ("TCAB_DISPATCHER_MAX_INFLIGHT", cap.to_string()),
        ("POD_NAMESPACE", NS.to_owned()),
    ];
    let env = Env::from_vars(vars.into_iter().map(|(k, v)| (k.to_owned(), v)))?;
    Ok(AdmitterConfig::from_env(&env)?)
}

fn live_runs(world: &World) -> i64 {
    let (live, _) = world.cluster.sim().store.job_counts();
    live.get("run").copied().unwrap_or(0)
}

/// Bare claim + create, back to back; returns the time to drain `jobs`.
async fn raw_floor(jobs: usize, vault: std::net::SocketAddr) -> anyhow::Result<Duration> {
    let world = world(jobs).await?;
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
    let took = start.elapsed();
    anyhow::ensure!(made == jobs, "raw floor created {made} of {jobs}");
    world.backend.shutdown().await;
    Ok(took)
}

/// The admitter's `run()`; returns the time until every Job exists.
async fn admitter(jobs: usize, vault: std::net::SocketAddr) -> anyhow::Result<Duration> {
    let world = world(jobs).await?;
    let config = config(&world.backend.url(), vault, jobs)?;
    let deps = Deps {
        kube: world.kube.clone(),
        namespace: NS.into(),
        backend: BackendClient::new(&world.backend.url(), TOKEN.into(), Duration::from_secs(10))?,
    };
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let start = Instant::now();
    let task = tokio::spawn(run(config, deps, shutdown));
    while live_runs(&world) < jobs as i64 {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "admitter drain timed out"
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = start.elapsed();
    trigger.cancel();
    task.await??;
    world.backend.shutdown().await;
    Ok(took)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let gate = gate::FakeGate::start().await;

    let (mut floors, mut admits) = (vec![], vec![]);
    for round in 1..=rounds {
        let floor = raw_floor(jobs, gate.addr).await?;
        let adm = admitter(jobs, gate.addr).await?;
        println!(
            "round {round}: raw floor {:>7.1} jobs/s ({:?}), admitter {:>7.1} jobs/s ({:?})",
            jobs as f64 / floor.as_secs_f64(),
            floor,
            jobs as f64 / adm.as_secs_f64(),
            adm
        );
        floors.push(floor);
        admits.push(adm);
    }
    let (floor, adm) = (median(floors), median(admits));
    let ratio = floor.as_secs_f64() / adm.as_secs_f64();
    println!(
        "median over {rounds} rounds of {jobs} runs: raw floor {:.1} jobs/s, admitter {:.1} jobs/s, admitter/floor = {:.0}% (target 80%)",
        jobs as f64 / floor.as_secs_f64(),
        jobs as f64 / adm.as_secs_f64(),
        ratio * 100.0
    );
    Ok(())
}
