//! Atomic claims, queue order, per-harness parallelism, jam serialization.

use crate::support::*;
use reqwest::StatusCode;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

#[tokio::test]
async fn sixteen_parallel_claimers_get_each_job_exactly_once() {
    let rig = Arc::new(Rig::start().await);
    let runs: Vec<_> = (0..40)
        .map(|i| {
            json!({"harness": format!("h{}", i % 3), "model": "m", "case": format!("c{i}"),
                        "jam": null, "launch_request": {"i": i}})
        })
        .collect();
    let a = rig.post("/jobs/batch", json!({"runs": runs})).await;
    assert_eq!(a.status, StatusCode::CREATED);
    let enqueued: Vec<String> = serde_json::from_value(a.body["ids"].clone()).unwrap();

    let claimers = (0..16).map(|_| {
        let rig = Arc::clone(&rig);
        tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some((id, token, _)) = rig.claim().await {
                got.push((id, token));
            }
            got
        })
    });
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut tokens = std::collections::BTreeSet::new();
    for handle in futures::future::join_all(claimers).await {
        for (id, token) in handle.unwrap() {
            *seen.entry(id).or_default() += 1;
            assert!(tokens.insert(token), "a token was handed out twice");
        }
    }
    assert_eq!(seen.len(), enqueued.len(), "every job claimed");
    assert!(
        seen.values().all(|n| *n == 1),
        "a job was claimed twice: {seen:?}"
    );
    let dispatched = rig.get("/jobs?state=dispatched").await;
    assert_eq!(dispatched.body["jobs"].as_array().unwrap().len(), 40);
}

#[tokio::test]
async fn claims_follow_queue_seq_and_a_batch_runs_in_listed_order() {
    let rig = Rig::start().await;
    let first = rig.enqueue("h", "m", None).await;
    let cases = ["zeta", "alpha", "mu", "beta", "omega"];
    let runs: Vec<_> = cases
        .iter()
        .map(|c| {
            json!({"harness": "h", "model": "m", "case": c, "jam": null,
                        "launch_request": {"case": c}})
        })
        .collect();
    rig.advance(1.5).await;
    let a = rig.post("/jobs/batch", json!({"runs": runs})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let batch: Vec<String> = serde_json::from_value(a.body["ids"].clone()).unwrap();
    assert_eq!(batch.len(), cases.len());
    rig.advance(1.0).await;
    let last = rig.enqueue("h", "m", None).await;

    // One shared enqueue timestamp, strictly increasing queue_seq in listed order.
    let mut stamps = Vec::new();
    let mut seqs = Vec::new();
    for (id, case) in batch.iter().zip(cases) {
        let v = rig.job(id).await;
        assert_eq!(v["case"], case);
        stamps.push(v["enqueued_at"].clone());
        seqs.push(v["queue_seq"].as_i64().unwrap());
    }
    assert!(stamps.windows(2).all(|w| w[0] == w[1]), "{stamps:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    let mut expected = vec![first];
    expected.extend(batch);
    expected.push(last);
    let mut claimed = Vec::new();
    while let Some((id, _, job)) = rig.claim().await {
        assert_eq!(job["queue_seq"], rig.job(&id).await["queue_seq"]);
        claimed.push(id);
    }
    assert_eq!(claimed, expected);
}

#[tokio::test]
async fn a_full_harness_holds_its_next_job_pending() {
    let rig = Rig::start().await;
    let a = rig
        .call(
            reqwest::Method::PUT,
            "/harnesses/a",
            Some(SERVICE),
            Some(json!({"max_parallel": 1})),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.body["max_parallel"], 1);
    let a1 = rig.enqueue("a", "m", None).await;
    let a2 = rig.enqueue("a", "m", None).await;
    let b1 = rig.enqueue("b", "m", None).await;

    let (got, token, _) = rig.claim().await.unwrap();
    assert_eq!(got, a1);
    let view = rig.job(&a2).await;
    assert_eq!(view["state"], "pending");
    let last = view["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["state"], "pending");
    assert!(
        last["detail"].as_str().unwrap().contains("harness a"),
        "{last}"
    );

    // The claim skips the held job.
    assert_eq!(rig.claim().await.unwrap().0, b1);
    assert!(rig.claim().await.is_none());

    // A slot frees: the held job becomes claimable again.
    let r = rig.report(&a1, &token, json!({"state": "succeeded"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(rig.state(&a2).await, "queued");
    assert_eq!(rig.claim().await.unwrap().0, a2);

    // Raising the limit releases at once.
    let a3 = rig.enqueue("a", "m", None).await;
    assert_eq!(rig.state(&a3).await, "pending");
    rig.call(
        reqwest::Method::PUT,
        "/harnesses/a",
        Some(SERVICE),
        Some(json!({"max_parallel": 2})),
    )
    .await;
    assert_eq!(rig.state(&a3).await, "queued");
}

#[tokio::test]
async fn one_jam_entry_per_jam_and_model_across_harnesses() {
    let rig = Rig::start().await;
    let j_m_h1 = rig.enqueue("h1", "m", Some("jam1")).await;
    let j_m_h2 = rig.enqueue("h2", "m", Some("jam1")).await;
    let j_n_h1 = rig.enqueue("h1", "n", Some("jam1")).await;
    let k_m_h1 = rig.enqueue("h1", "m", Some("jam2")).await;

    let (first, token, _) = rig.claim().await.unwrap();
    assert_eq!(first, j_m_h1);
    let held = rig.job(&j_m_h2).await;
    assert_eq!(held["state"], "pending");
    let reason = held["history"].as_array().unwrap().last().unwrap()["detail"].clone();
    assert!(reason.as_str().unwrap().contains("jam jam1"), "{reason}");

    assert_eq!(
        rig.claim().await.unwrap().0,
        j_n_h1,
        "another model's entry runs"
    );
    assert_eq!(rig.claim().await.unwrap().0, k_m_h1, "another jam runs");
    assert!(rig.claim().await.is_none());

    let r = rig
        .report(
            &first,
            &token,
            json!({"state": "failed", "failure_kind": "agent"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(rig.claim().await.unwrap().0, j_m_h2);
}
