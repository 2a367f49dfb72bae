//! Injected faults: a stalled request is applied late even when its caller
//! gave up; an errored one changes nothing.

use crate::support::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_stalled_claim_is_applied_late_even_after_its_caller_gave_up() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/next"], "mode": "stall", "seconds": 0.6}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    // The caller gives up long before the stall ends.
    let impatient = rig
        .http
        .post(format!("{}/jobs/next", rig.base))
        .bearer_auth(SERVICE)
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(impatient.is_err(), "the caller timed out");
    assert_eq!(rig.state(&id).await, "queued", "not applied yet");
    // Once the window ends the held claim is applied.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.state(&id).await != "dispatched" {
        assert!(
            Instant::now() < deadline,
            "the held claim was never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_errored_renewal_answers_500_and_changes_nothing() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let (claimed, _, claim) = rig.claim().await.expect("claimable");
    assert_eq!(claimed, id);
    let lease = ts(&claim["lease_expires_at"]);
    rig.advance(30.0).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/leases", "/jobs/*/lost"], "mode": "error", "seconds": 30}),
        )
        .await;
    assert_eq!(a.status, 200);
    let a = rig.post("/jobs/leases", json!({"job_ids": [id]})).await;
    assert_error(&a, reqwest::StatusCode::INTERNAL_SERVER_ERROR, "internal");
    assert_eq!(
        ts(&rig.job(&id).await["lease_expires_at"]),
        lease,
        "lease untouched"
    );
    // Other calls are not faulted; clearing ends the window.
    assert_eq!(rig.get("/jobs/active").await.status, 200);
    assert_eq!(rig.post("/admin/faults/clear", json!({})).await.status, 200);
    assert_eq!(
        rig.post("/jobs/leases", json!({"job_ids": [id]}))
            .await
            .status,
        200
    );
    // Bad rules are refused.
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": [], "mode": "error", "seconds": 1}),
        )
        .await;
    assert_eq!(a.status, 400);
}

#[tokio::test]
async fn a_status_fault_answers_its_status_with_the_error_body_and_changes_nothing() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.expect("claimable");
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/*/status"], "mode": "status", "status": 400, "seconds": 30}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let a = rig
        .report(
            &id,
            &token,
            json!({"state": "failed", "failure_kind": "infrastructure", "detail": "x"}),
        )
        .await;
    assert_error(&a, reqwest::StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(rig.state(&id).await, "dispatched", "nothing changed");
    let status = rig.get("/admin/faults").await.body;
    assert_eq!(status["refused"], 1, "{status}");
    assert_eq!(status["rules"][0]["mode"], "status");
    // A status outside 400..=599, or none, is refused.
    for bad in [
        json!({"paths": ["/jobs/next"], "mode": "status", "seconds": 1}),
        json!({"paths": ["/jobs/next"], "mode": "status", "status": 204, "seconds": 1}),
    ] {
        assert_eq!(rig.post("/admin/faults", bad).await.status, 400);
    }
}

#[tokio::test]
async fn a_body_fault_applies_the_call_and_answers_its_body_instead() {
    let rig = Rig::start().await;
    let first = rig.enqueue("h", "m", None).await;
    let second = rig.enqueue("h", "m", None).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/next"], "mode": "body", "body": {"job": {"id": "../bad"}}, "seconds": 30}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let a = rig.post("/jobs/next", json!({})).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body, json!({"job": {"id": "../bad"}}), "replaced whole");
    assert_eq!(
        rig.state(&first).await,
        "dispatched",
        "the claim was committed"
    );

    // Merged: one field poisoned, the id and token the real ones.
    rig.post("/admin/faults/clear", json!({})).await;
    rig.post(
        "/admin/faults",
        json!({"paths": ["/jobs/next"], "mode": "body", "merge": true,
               "body": {"job": {"launch_request": null, "harness": 7}}, "seconds": 30}),
    )
    .await;
    let a = rig.post("/jobs/next", json!({})).await;
    assert_eq!(a.status, 200);
    let job = &a.body["job"];
    assert_eq!(job["id"], second.as_str());
    assert!(job["token"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(job.get("launch_request").is_none(), "{job}");
    assert_eq!(job["harness"], 7);
    assert_eq!(rig.state(&second).await, "dispatched");
    // An empty queue's 204 passes unchanged: nothing was committed.
    let a = rig.post("/jobs/next", json!({})).await;
    assert_eq!(a.status, 204);
    assert_eq!(rig.get("/admin/faults").await.body["replaced"], 2);
    let bad = json!({"paths": ["/jobs/next"], "mode": "body", "seconds": 1});
    assert_eq!(rig.post("/admin/faults", bad).await.status, 400);
}

#[tokio::test]
async fn a_delayed_call_is_served_as_usual_and_counted() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/**"], "mode": "delay", "delay_ms": 5, "seconds": 60}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let (claimed, _, _) = rig.claim().await.expect("claimable");
    assert_eq!(claimed, id);
    assert_eq!(rig.get("/jobs/active").await.status, 200);
    let faults = rig.get("/admin/faults").await;
    assert_eq!(faults.body["delayed"], 2, "{:?}", faults.body);
    assert_eq!(faults.body["rules"][0]["mode"], "delay");
    // Without its delay a delay rule is refused.
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/next"], "mode": "delay", "seconds": 1}),
        )
        .await;
    assert_error(&a, reqwest::StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn a_delayed_call_is_not_applied_before_its_delay_ends() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/next"], "mode": "delay", "delay_ms": 60000, "seconds": 60}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let impatient = rig
        .http
        .post(format!("{}/jobs/next", rig.base))
        .bearer_auth(SERVICE)
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(impatient.is_err(), "the caller gave up");
    assert_eq!(rig.state(&id).await, "queued", "not applied yet");
    // Clearing the rule does not release the call held, but new calls pass.
    assert_eq!(rig.post("/admin/faults/clear", json!({})).await.status, 200);
    let (claimed, _, _) = rig.claim().await.expect("claimable");
    assert_eq!(claimed, id);
}
