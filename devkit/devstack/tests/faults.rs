//! End to end under injected faults (issue 11): the three real binaries as
//! processes against kube-sim (under the chart's Role) and backend-sim,
//! each test a reproduction of one defect, checked from the cluster's and
//! the backend's own records.

mod common;

use common::{TestStack, run, states};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_devstack::wait_for;

const DRIVER_IMAGE: &str = "tcab/driver:dev";

/// The live driver Jobs of a backend job, by name, with their claim tags.
async fn live_jobs_of(t: &TestStack, id: &str) -> anyhow::Result<Vec<(String, String)>> {
    let jobs = t
        .stack
        .cluster
        .jobs(Some(&format!("tcab.dev/job-id={id}")))
        .await?;
    Ok(jobs
        .iter()
        .filter(|j| !finished(j))
        .map(|j| {
            (
                j["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                j["metadata"]["labels"]["tcab.dev/claim"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect())
}

fn finished(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

/// Issue 11 item 2, the race that remains: with a 10 s lease and the gate
/// at most 5 s old, a claim already in flight when the backend stalls for
/// longer than the lease minus the gate age is applied late, and the
/// requeue it does first returns two dispatched runs whose Jobs are alive
/// but whose pods have not started (their image cannot be pulled yet): the
/// late claim takes the first, the next claim the second, which then has
/// two live Jobs. The stale claims' drivers are stopped at their first
/// report (the backend refuses the token: 401), they exit, their Jobs end,
/// no death is reported for them, and both runs finish through newer
/// claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_applied_late_requeues_an_unstarted_run_and_its_stale_driver_is_stopped() {
    let t = TestStack::start(|o| {
        o.lease_seconds = 10;
        // Image pull back-offs (10 s doubling, in sim time) pass quickly.
        o.cluster_speed = 20.0;
    })
    .await;
    let admin = t.admin();
    admin
        .set_unpullable(DRIVER_IMAGE, true)
        .await
        .expect("unpullable");
    let ids = t
        .stack
        .backend
        .enqueue_batch(vec![
            run("first", json!({"duration_ms": 4000})),
            run("second", json!({"duration_ms": 4000})),
        ])
        .await
        .expect("enqueue");
    let (x1, x2) = (ids[0].clone(), ids[1].clone());

    // Both runs dispatched, their Jobs alive, their pods unable to start,
    // their leases renewed.
    wait_for(
        "two Jobs whose pods cannot pull their image",
        Duration::from_secs(30),
        || async {
            let pods = t
                .stack
                .cluster
                .pods("tcab", Some("app.kubernetes.io/managed-by=tcab-dispatcher"))
                .await?;
            let waiting = pods
                .iter()
                .filter(|p| {
                    let reason = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
                    reason == "ErrImagePull" || reason == "ImagePullBackOff"
                })
                .count();
            Ok((waiting == 2).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let stale: Vec<(String, String)> = {
        let mut v = live_jobs_of(&t, &x1).await.expect("jobs");
        v.extend(live_jobs_of(&t, &x2).await.expect("jobs"));
        v
    };
    assert_eq!(stale.len(), 2, "{stale:?}");
    wait_for("leases renewed", Duration::from_secs(10), || async {
        Ok(t.leases_renewed(8).await?.then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    for id in [&x1, &x2] {
        assert_eq!(
            t.stack.backend.job(id).await.expect("job")["state"],
            "dispatched"
        );
    }

    // The backend stalls claims for 13 s (longer than the lease); once a
    // claim (sent while the gate was open) is held, renewals fail too.
    let backend = &t.stack.backend;
    backend
        .add_fault(&["/jobs/next"], "stall", 13.0)
        .await
        .expect("stall claims");
    wait_for(
        "a claim held by the stall",
        Duration::from_secs(10),
        || async {
            let faults = backend.faults().await?;
            Ok(faults["held"]
                .as_array()
                .is_some_and(|h| h.iter().any(|p| p == "/jobs/next"))
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    backend
        .add_fault(&["/jobs/leases"], "error", 14.0)
        .await
        .expect("fail renewals");

    // The late claim requeued both lapsed runs and took the first; the
    // second is claimed again once renewals succeed: two live Jobs.
    let doubled = wait_for(
        "a second live Job for the second run",
        Duration::from_secs(40),
        || async {
            let live = live_jobs_of(&t, &x2).await?;
            Ok((live.len() == 2).then_some(live))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let (_, stale_claim_2) = stale
        .iter()
        .find(|(name, _)| name.contains(x2.as_str()))
        .cloned()
        .expect("the second run's first Job");
    assert!(
        doubled.iter().any(|(_, c)| *c == stale_claim_2),
        "{doubled:?}"
    );
    admin
        .set_unpullable(DRIVER_IMAGE, false)
        .await
        .expect("pullable");

    // Both runs finish, through claims other than their first, with no
    // retry and no death or lost report.
    let mut t = t;
    let (runs, _) = t.drained(Duration::from_secs(90)).await;
    assert_eq!(runs.len(), 2, "no retry: {}", states(&runs));
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "{}",
        states(&runs)
    );
    let record = t.stack.backend.history().await.expect("history");
    let verdict = t.verdict().await;
    let context = format!(
        "verdict: {verdict:#?}\nrefused: {:#?}{}",
        record.refused,
        t.logs()
    );
    assert!(verdict.violations.is_empty(), "{context}");
    assert!(
        verdict.reports.is_empty(),
        "no death or lost report: {context}"
    );
    // The second run had two live Jobs: the race, its stale driver refused.
    assert_eq!(verdict.races.len(), 1, "{context}");
    let race = &verdict.races[0];
    assert_eq!(
        (race.job_id.as_str(), race.stale_claim.as_str()),
        (x2.as_str(), stale_claim_2.as_str()),
        "{context}"
    );
    assert!(
        race.stale_driver_ran,
        "the stale driver started and was refused: {context}"
    );
    // Each stale claim was refused and its Job ended Failed; each run
    // finished through another claim.
    let jobs = t.stack.cluster.jobs(None).await.expect("jobs");
    for (name, claim) in &stale {
        let id = if name.contains(x1.as_str()) { &x1 } else { &x2 };
        assert!(
            record
                .refused
                .iter()
                .any(|r| r.job_id == *id && r.claim == *claim),
            "the stale claim {claim} of {id} was refused at its first report: {context}"
        );
        let job = jobs
            .iter()
            .find(|j| j["metadata"]["name"] == name.as_str())
            .expect("the stale Job is kept (TTL)");
        assert!(
            job["status"]["conditions"].as_array().is_some_and(|cs| cs
                .iter()
                .any(|c| c["type"] == "Failed" && c["status"] == "True")),
            "the stale Job {name} ended Failed: {job}"
        );
        let done = record
            .entries
            .iter()
            .find(|e| e.job_id == *id && e.state == "succeeded")
            .expect("finished");
        assert!(
            done.claim.as_deref().is_some_and(|c| c != claim),
            "{id} finished through a newer claim: {done:?}"
        );
    }
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}
