//! Chaos: containers SIGKILLed at random during a drain lose nothing. Every
//! job ends terminal, no backend job ever has two Jobs, no lane exceeds its
//! cap (by the cluster's own record), and no sandbox is left behind.

mod common;

use common::{TestStack, run, states};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::time::Duration;
use tcab_devstack::{Container, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_container_kills_during_a_drain_lose_nothing() {
    const RUNS: usize = 80;
    const PUBLISHES: usize = 20;
    let mut t = TestStack::start(|o| {
        o.max_inflight = 4;
        o.max_publish_inflight = 3;
    })
    .await;
    let runs: Vec<_> = (0..RUNS)
        .map(|i| {
            run(
                &format!("case-{i}"),
                json!({"duration_ms": 300, "log_lines": 1}),
            )
        })
        .collect();
    t.stack
        .backend
        .enqueue_batch(runs)
        .await
        .expect("enqueue runs");
    for i in 0..PUBLISHES {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 200}}))
            .await
            .expect("enqueue publish");
    }

    // The schedule of kills is seeded, so a failure names a reproducible plan.
    let seed = 20261129;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kills = Vec::new();
    for _ in 0..14 {
        let victim = Container::ALL[rng.random_range(0..3)];
        let down_ms = rng.random_range(50..700);
        let pause_ms = rng.random_range(100..600);
        // Pacing of the chaos itself, not a wait for a result.
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        t.stack.kill_container(victim).await;
        tokio::time::sleep(Duration::from_millis(down_ms)).await;
        t.stack.start_container(victim).await.expect("restart");
        kills.push((victim, down_ms));
    }

    // Claims abandoned by a killed admitter lapse after the lease (2 min of
    // backend time); let that time pass in steps the lease-keeper renews within.
    let backend = t.stack.backend.clone();
    let all_done = || async {
        let runs = backend.jobs().await.unwrap_or_default();
        let pubs = backend.publish_jobs().await.unwrap_or_default();
        runs.iter()
            .chain(pubs.iter())
            .all(|j| common::terminal(&j["state"]))
    };
    for _ in 0..14 {
        if all_done().await {
            break;
        }
        t.stack
            .backend
            .advance_clock(10)
            .await
            .expect("advance clock");
        // Before the next step, the lease-keeper must have renewed at the new
        // backend time: every live Job's lease reaches 100 s past `now`.
        wait_for(
            "leases renewed at the new time",
            Duration::from_secs(30),
            || async { Ok(t.leases_renewed(100).await?.then_some(())) },
        )
        .await
        .unwrap_or_else(|e| t.fail(e));
    }

    let (runs, pubs) = t.drained(Duration::from_secs(120)).await;
    let context = format!("seed {seed}, kills {kills:?}");
    assert_eq!(
        runs.len(),
        RUNS,
        "no run was lost or retried ({context}): {}",
        states(&runs)
    );
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "{context}: {}",
        states(&runs)
    );
    assert!(
        pubs.iter().all(|j| j["state"] == "succeeded"),
        "{context}: {}",
        states(&pubs)
    );

    let counters = t.admin().counters().await.expect("counters");
    let max = |lane: &str| counters.max_live_jobs.get(lane).copied().unwrap_or(0);
    assert!(
        max("run") <= 4,
        "run cap exceeded ({context}): {:?}",
        counters.max_live_jobs
    );
    assert!(
        max("publish") <= 3,
        "publish cap exceeded ({context}): {:?}",
        counters.max_live_jobs
    );

    let by_id = t.jobs_by_id().await;
    let doubled: Vec<_> = by_id.iter().filter(|(_, names)| names.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "a backend job got two Jobs ({context}): {doubled:?}"
    );
    assert_eq!(by_id.len(), RUNS + PUBLISHES, "every job got its Job");

    wait_for("no sandbox left", Duration::from_secs(10), || async {
        Ok(t.sandboxes().await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}
