//! Benchmark: time to create and list 10,000 Jobs through the HTTP API.
//!
//! `cargo run --release -p tcab-kube-sim --example bench [-- N [CONTROLLER_N]]`

use clap::Parser;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Instant;
use tcab_kube_sim::{SimOptions, spawn};

fn job(i: usize) -> Value {
    let kind = if i.is_multiple_of(5) {
        "publish"
    } else {
        "run"
    };
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("tcab-driver-bench-{i:05}"), "labels": {
            "app.kubernetes.io/managed-by": "tcab-dispatcher", "tcab.dev/job-kind": kind, "tcab.dev/job-id": format!("bench-{i}")}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 600, "template": {
            "metadata": {"labels": {"tcab.dev/job-kind": kind}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "driver", "image": "driver:sha",
                "env": [{"name": "TCAB_JOB_ID", "value": format!("bench-{i}")}]}]}}}
    })
}

/// Times creating and listing Jobs through the HTTP API, then Jobs run
/// through the Job controller and kubelet.
#[derive(Parser)]
#[command(name = "bench")]
struct Args {
    /// Jobs to create and list
    #[arg(default_value_t = 10_000)]
    n: usize,
    /// Jobs to run through the Job controller and kubelet
    #[arg(default_value_t = 250)]
    controller_n: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { n, controller_n } = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sim = spawn(SimOptions {
        namespace: "bench".into(),
        controller: false,
        ..SimOptions::default()
    })
    .await?;
    let url = format!("{}/apis/batch/v1/namespaces/bench/jobs", sim.url());
    let client = reqwest::Client::new();

    let t = Instant::now();
    let results: Vec<u16> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                client
                    .post(&url)
                    .json(&job(i))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let create = t.elapsed();
    let created = results.iter().filter(|c| **c == 201).count();
    anyhow::ensure!(created == n, "only {created} of {n} creates answered 201");

    let t = Instant::now();
    let all: Value = client.get(&url).send().await?.json().await?;
    let list_all = t.elapsed();
    let items = all["items"].as_array().map_or(0, Vec::len);

    let t = Instant::now();
    let sel: Value = client
        .get(format!("{url}?labelSelector=tcab.dev%2Fjob-kind%3Dpublish"))
        .send()
        .await?
        .json()
        .await?;
    let list_sel = t.elapsed();

    let t = Instant::now();
    let mut pages = 0;
    let mut cont = String::new();
    loop {
        let page: Value = client
            .get(format!("{url}?limit=500&continue={cont}"))
            .send()
            .await?
            .json()
            .await?;
        pages += 1;
        match page["metadata"]["continue"].as_str() {
            Some(c) => cont = c.to_string(),
            None => break,
        }
    }
    let paged = t.elapsed();

    println!(
        "created {n} Jobs in {:.2?} ({:.0}/s, 16 concurrent)",
        create,
        n as f64 / create.as_secs_f64()
    );
    println!("listed {items} Jobs in {list_all:.2?}");
    println!(
        "listed {} Jobs by label selector in {list_sel:.2?}",
        sel["items"].as_array().map_or(0, Vec::len)
    );
    println!("listed {n} Jobs in {pages} pages of 500 in {paged:.2?}");
    println!("total create + list: {:.2?}", create + list_all);
    drop(sim);
    controller_phase(&client, controller_n).await
}

/// The dev stack's scale: `n` Jobs through the Job controller and kubelet,
/// timed from the first create until every Job is Complete.
async fn controller_phase(client: &reqwest::Client, n: usize) -> anyhow::Result<()> {
    let sim = spawn(SimOptions {
        namespace: "bench".into(),
        ..SimOptions::default()
    })
    .await?;
    let url = format!("{}/apis/batch/v1/namespaces/bench/jobs", sim.url());
    let t = Instant::now();
    for i in 0..n {
        let mut j = job(i);
        j["metadata"]["labels"]["tcab.dev/job-kind"] = json!("bench");
        j["spec"]["template"]["metadata"]["labels"]["tcab.dev/job-kind"] = json!("bench");
        let code = client.post(&url).json(&j).send().await?.status().as_u16();
        anyhow::ensure!(code == 201, "create answered {code}");
    }
    loop {
        let all: Value = client.get(&url).send().await?.json().await?;
        let done = all["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|j| j["status"]["succeeded"] == 1)
                .count()
        });
        if done == n {
            break;
        }
        anyhow::ensure!(
            t.elapsed().as_secs() < 60,
            "only {done} of {n} Jobs completed in 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    println!(
        "{n} Jobs created and run to Complete (one pod each) in {:.2?}",
        t.elapsed()
    );
    Ok(())
}
