//! The drain test: with the reference backend (backend-sim), 200
//! queued runs and 50 publishes drain through caps of 8 and 8, and the
//! Jobs API's record of concurrent non-terminal Jobs per lane never passes
//! a cap. (The Jobs API is the test rig's fake until kube-sim lands.)

mod support;

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tcab_admitter::{Deps, SystemClock, run};
use tcab_backend_sim::{SimOptions, spawn};
use tcab_shared::tick::Shutdown;
use tcab_shared::{Lane, labels};

const RUNS: usize = 200;
const PUBLISHES: usize = 50;
const CAP: usize = 8;

async fn enqueue(http: &reqwest::Client, url: &str, runs: usize, publishes: usize) {
    let batch: Vec<_> = (0..runs)
        .map(|i| {
            json!({"harness": format!("h{}", i % 3), "model": "m", "case": format!("case-{i}"),
                        "jam": null, "launch_request": {"case": format!("case-{i}")}})
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
            .json(&json!({"request": {"release": format!("r{i}")}}))
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
    let sim = spawn(SimOptions::in_memory(backend::SERVICE_TOKEN))
        .await
        .unwrap();
    let url = sim.url();
    let http = reqwest::Client::new();
    enqueue(&http, &url, RUNS, PUBLISHES).await;

    let gate = gate::FakeGate::start().await;
    let kube = fake_kube::FakeKube::start().await;
    // A short poll: a freed slot is noticed on the next poll (the shared Job
    // cache has no change notification yet), and this test frees 250 of them.
    let config = config(
        &url,
        gate.addr,
        &[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "0.005")],
    );
    assert_eq!(
        (config.max_inflight, config.max_publish_inflight),
        (8, 8),
        "the defaults"
    );
    let deps = Deps {
        kube: kube.client(),
        namespace: fake_kube::NAMESPACE.into(),
        backend: backend_client(&url),
        clock: Arc::new(SystemClock),
    };
    let (trigger, shutdown) = Shutdown::channel();
    let admitter = tokio::spawn(run(config, deps, shutdown));

    // Jobs finish one at a time, and only from a full lane (or once the
    // lane's queue is drained), so the admitter presses against each cap.
    let totals = [(Lane::Run, RUNS), (Lane::Publish, PUBLISHES)];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let mut done = true;
        for (lane, total) in totals {
            let live = kube.live(lane);
            let all_created = kube.creates(lane) as usize >= total;
            done &= all_created && live.is_empty();
            if live.len() >= CAP || (all_created && !live.is_empty()) {
                kube.finish(&live[0]);
            }
        }
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "drain did not finish: runs created {} live {}, publishes created {} live {}, gate calls {}",
            kube.creates(Lane::Run),
            kube.live(Lane::Run).len(),
            kube.creates(Lane::Publish),
            kube.live(Lane::Publish).len(),
            gate.gate_calls()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    trigger.trigger();
    within("admitter stops", admitter).await.unwrap().unwrap();

    assert_eq!(
        kube.max_live(Lane::Run),
        CAP,
        "the run lane reached its cap and never passed it"
    );
    assert_eq!(kube.max_live(Lane::Publish), CAP);
    // Exactly one Job per backend job, and nothing left queued.
    for (lane, total) in totals {
        let mut ids: Vec<String> = kube
            .jobs(lane)
            .iter()
            .map(|j| {
                j["metadata"]["labels"][labels::JOB_ID]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), total, "{lane}: one Job per job");
        assert_eq!(
            kube.creates(lane) as usize,
            total,
            "{lane}: no duplicate creates"
        );
    }
    assert_eq!(count(&http, &url, "/jobs?state=queued", "jobs").await, 0);
    assert_eq!(
        count(&http, &url, "/publish-jobs?state=queued", "publish_jobs").await,
        0
    );
    assert_eq!(
        count(&http, &url, "/jobs?state=dispatched", "jobs").await,
        RUNS
    );
    sim.shutdown().await;
}
