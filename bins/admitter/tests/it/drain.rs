//! The drain test: with the reference backend (backend-sim) and
//! kube-sim (its Job controller runs the fake driver and publisher, which
//! report to the backend), 200 queued runs and 50 publishes drain through
//! caps of 8 and 8, and kube-sim's record of concurrent non-terminal Jobs
//! per lane never passes a cap.

use crate::support::*;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;
use tcab_admitter::{Deps, run};
use tcab_backend_sim::{SimOptions, spawn};
use tcab_shared::names;
use tcab_shared::runtime::CancellationToken;
use tcab_testkit::wait::settled;

const RUNS: usize = 200;
const PUBLISHES: usize = 50;
const CAP: i64 = 8;
const NS: &str = "tcab";

async fn enqueue(http: &reqwest::Client, url: &str, runs: usize, publishes: usize) {
    let batch: Vec<_> = (0..runs)
        .map(|i| {
            // Each run lasts 300 ms of real time (3 s at the cluster's
            // speed of 10), long enough that a busy machine still fills the
            // lane before the first run ends.
            json!({"harness": format!("h{}", i % 3), "model": "m", "case": format!("case-{i}"),
                        "jam": null, "launch_request": {"case": format!("case-{i}"),
                        "sim": {"duration_ms": 3000, "log_lines": 0}}})
        })
        .collect();
    let answer = http
        .post(format!("{url}/jobs/batch"))
        .bearer_auth(backend::SERVICE_TOKEN)
        .json(&json!({"runs": batch}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201, "{}", answer.text().await.unwrap());
    for i in 0..publishes {
        let answer = http
            .post(format!("{url}/publish-jobs"))
            .bearer_auth(backend::SERVICE_TOKEN)
            .json(&json!({"request": {"release": format!("r{i}"),
                                       "sim": {"duration_ms": 100, "log_lines": 0}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201);
    }
}

async fn count(http: &reqwest::Client, url: &str, path: &str, key: &str) -> usize {
    let body: serde_json::Value = http
        .get(format!("{url}{path}"))
        .bearer_auth(backend::SERVICE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body[key].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_runs_and_fifty_publishes_drain_within_caps_of_eight() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let backend = spawn(SimOptions::in_memory(backend::SERVICE_TOKEN))
        .await
        .unwrap();
    let url = backend.url();
    let http = reqwest::Client::new();
    enqueue(&http, &url, RUNS, PUBLISHES).await;

    let cluster = tcab_kube_sim::spawn(tcab_kube_sim::SimOptions {
        namespace: NS.into(),
        speed: 10.0,
        ..Default::default()
    })
    .await
    .unwrap();
    let kube = tcab_shared::kube_api::client_from(cluster.kube_config(None).unwrap()).unwrap();

    let gate = gate::FakeGate::start().await;
    // A Job that finishes wakes the admitter at once (the Job cache's
    // finish notification, `OwnedJobs::finishes`), so a freed slot is
    // refilled without waiting for a poll. The poll is the production
    // default of 5 s: a drain paced by polls would blow the deadline.
    let config = config(
        &url,
        gate.addr,
        &[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "5")],
    );
    assert_eq!(
        (config.max_inflight, config.max_publish_inflight),
        (8, 8),
        "the defaults"
    );
    let deps = Deps {
        kube,
        namespace: NS.into(),
        backend: backend_client(&url),
    };
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let admitter = tokio::spawn(run(config, deps, shutdown));

    // Drained: nothing queued, and every job finished by its fake driver or publisher.
    settled("the drain", Duration::from_secs(60), async || {
        let runs_done = count(&http, &url, "/jobs?state=succeeded", "jobs").await;
        let publishes_done =
            count(&http, &url, "/publish-jobs?state=succeeded", "publish_jobs").await;
        if runs_done == RUNS && publishes_done == PUBLISHES {
            Ok(())
        } else {
            Err(format!(
                "{runs_done}/{RUNS} runs and {publishes_done}/{PUBLISHES} publishes succeeded"
            ))
        }
    })
    .await;
    trigger.cancel();
    within("admitter stops", admitter).await.unwrap().unwrap();

    let counters = cluster.admin().counters().await.unwrap();
    let max = |kind: &str| counters.max_live_jobs.get(kind).copied().unwrap_or(0);
    assert!(max("run") <= CAP, "run lane exceeded its cap: {counters:?}");
    assert!(
        max("publish") <= CAP,
        "publish lane exceeded its cap: {counters:?}"
    );
    assert_eq!(max("run"), CAP, "the run lane filled up: {counters:?}");
    assert!(max("publish") >= 1);
    assert_eq!(max(""), 0, "every Job labelled with its lane");
    // One Job per backend job (no claim was ever made twice).
    let jobs: kube::Api<Job> = kube::Api::namespaced(
        tcab_shared::kube_api::client_from(cluster.kube_config(None).unwrap()).unwrap(),
        NS,
    );
    let list = jobs.list(&Default::default()).await.unwrap();
    let mut ids: Vec<String> = list
        .items
        .iter()
        .filter_map(|j| j.labels().get(names::JOB_ID).cloned())
        .collect();
    let total = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "a backend job with two Jobs");
    backend.shutdown().await;
}
