//! Lease renewal, lapse and requeue, and the old token's refusal.

use crate::support::*;
use jiff::SignedDuration;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn renewal_sets_two_minutes_past_now_for_driven_jobs_only() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let b = rig.enqueue("h", "m", None).await;
    let (got, token, job) = rig.claim().await.unwrap();
    assert_eq!(got, a);
    assert_eq!(
        ts(&job["lease_expires_at"]),
        start_time() + SignedDuration::from_secs(120)
    );

    rig.advance(60.0).await;
    let third = rig.enqueue("h", "m", None).await;
    let r = rig
        .post(
            "/jobs/leases",
            json!({"job_ids": [a, b, "no-such-job", a, third]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let now = start_time() + SignedDuration::from_secs(60);
    assert_eq!(ts(&r.body["now"]), now);
    let leases = r.body["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "only the driven job, once: {leases:?}");
    assert_eq!(leases[0]["id"], a.as_str());
    assert_eq!(
        ts(&leases[0]["lease_expires_at"]),
        now + SignedDuration::from_secs(120)
    );
    assert_eq!(
        ts(&rig.job(&a).await["lease_expires_at"]),
        now + SignedDuration::from_secs(120)
    );

    // Every driven state renews; a terminal one does not.
    for state in ["starting", "running", "validating", "storing"] {
        rig.report(&a, &token, json!({"state": state})).await;
        let r = rig.post("/jobs/leases", json!({"job_ids": [a]})).await;
        assert_eq!(r.body["leases"].as_array().unwrap().len(), 1, "{state}");
    }
    rig.report(&a, &token, json!({"state": "succeeded"})).await;
    let r = rig.post("/jobs/leases", json!({"job_ids": [a]})).await;
    assert_eq!(r.body["leases"], json!([]));
    assert_eq!(
        rig.job(&a).await["lease_expires_at"],
        serde_json::Value::Null
    );

    // A renewed lease outlives the original one.
    let (claimed, _, _) = rig.claim().await.unwrap();
    assert_eq!(claimed, b);
    rig.advance(100.0).await;
    rig.post("/jobs/leases", json!({"job_ids": [b]})).await;
    rig.advance(100.0).await; // 200 s after the claim, 100 s after the renewal
    let next = rig.claim().await.unwrap().0;
    assert_eq!(next, third, "b kept its claim");
    assert_eq!(rig.state(&b).await, "dispatched");
}

#[tokio::test]
async fn a_lapsed_dispatched_job_returns_to_its_place_with_a_fresh_token() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let b = rig.enqueue("h", "m", None).await;
    let (_, old_token, first) = rig.claim().await.unwrap();
    let seq = first["queue_seq"].clone();

    rig.advance(120.5).await;
    // The lapse is judged at the next claim: until then the job is dispatched
    // and listed active with its lapsed lease against the backend's now.
    let active = rig.get("/jobs/active").await.body;
    assert_eq!(active["jobs"][0]["id"], a.as_str());
    assert!(ts(&active["jobs"][0]["lease_expires_at"]) < ts(&active["now"]));

    let (again, new_token, job) = rig.claim().await.unwrap();
    assert_eq!(again, a, "back at its original position, ahead of b");
    assert_eq!(job["queue_seq"], seq);
    assert_eq!(job["attempt"], 1, "no attempt counted");
    assert_ne!(new_token, old_token);
    let view = rig.job(&a).await;
    let states: Vec<&str> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["queued", "dispatched", "queued", "dispatched"]);
    assert!(
        view["history"][2]["detail"]
            .as_str()
            .unwrap()
            .contains("lease lapsed")
    );

    // The old token is refused on every per-job call.
    let before = rig.job(&a).await;
    for (path, body) in [
        (format!("/jobs/{a}/status"), json!({"state": "starting"})),
        (
            format!("/jobs/{a}/status"),
            json!({"state": "failed", "failure_kind": "infrastructure", "detail": "x"}),
        ),
        (
            format!("/jobs/{a}/record"),
            json!({"state_reached": "running", "record": {}}),
        ),
    ] {
        let r = rig.post_as(&path, &old_token, body).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert_eq!(rig.job(&a).await, before, "refused calls change nothing");
    // The new one works.
    let r = rig
        .report(&a, &new_token, json!({"state": "starting"}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(rig.claim().await.unwrap().0, b);
}

#[tokio::test]
async fn a_job_past_dispatched_is_not_requeued_by_a_lapse() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    rig.report(&a, &token, json!({"state": "running"})).await;
    rig.advance(600.0).await;
    assert!(rig.claim().await.is_none());
    assert_eq!(rig.state(&a).await, "running");
    let active = rig.get("/jobs/active").await.body;
    assert_eq!(active["jobs"][0]["state"], "running");
}

#[tokio::test]
async fn the_old_token_is_refused_as_soon_as_the_job_is_requeued() {
    let rig = Rig::start().await;
    // y holds jam J, so x waits; a is claimed past it.
    let y = rig.enqueue("h", "m", Some("J")).await;
    let (_, ty, _) = rig.claim().await.unwrap();
    let x = rig.enqueue("h", "m", Some("J")).await;
    let a = rig.enqueue("h", "m", None).await;
    let (got, old_token, _) = rig.claim().await.unwrap();
    assert_eq!(got, a);
    rig.report(&y, &ty, json!({"state": "succeeded"})).await;
    rig.advance(121.0).await;
    // This claim requeues a (lapsed) and hands out x, which sits ahead of it.
    assert_eq!(rig.claim().await.unwrap().0, x);
    assert_eq!(rig.state(&a).await, "queued");
    let before = rig.job(&a).await;
    for (path, body) in [
        (format!("/jobs/{a}/status"), json!({"state": "running"})),
        (format!("/jobs/{a}/status"), json!({"state": "succeeded"})),
        (
            format!("/jobs/{a}/record"),
            json!({"state_reached": "running", "record": {}}),
        ),
    ] {
        let r = rig.post_as(&path, &old_token, body).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert_eq!(rig.job(&a).await, before);
    let (again, new_token, _) = rig.claim().await.unwrap();
    assert_eq!(again, a);
    assert_ne!(new_token, old_token);
}

/// Seeded jobs are driven as if claimed: their leases renew and the active
/// lists show them; seeding an id twice is refused and changes nothing.
#[tokio::test]
async fn seeded_jobs_are_driven_renewed_and_listed() {
    let rig = Rig::start().await;
    let r = rig
        .post(
            "/admin/driven",
            json!({"runs": ["seed-r1", "seed-r2"], "publish_jobs": ["seed-p1"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, json!({"runs": 2, "publish_jobs": 1}));
    let renewed = rig
        .post(
            "/jobs/leases",
            json!({"job_ids": ["seed-r1", "seed-r2", "other"]}),
        )
        .await;
    let ids: Vec<&str> = renewed.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["seed-r1", "seed-r2"]);
    let renewed = rig
        .post("/publish-jobs/leases", json!({"job_ids": ["seed-p1"]}))
        .await;
    assert_eq!(renewed.body["leases"][0]["id"], "seed-p1");
    let active = rig.get("/jobs/active").await;
    assert_eq!(
        active.body["jobs"].as_array().unwrap().len(),
        2,
        "{:?}",
        active.body
    );
    assert_eq!(active.body["jobs"][0]["state"], "running");
    let again = rig
        .post("/admin/driven", json!({"runs": ["seed-r3", "seed-r1"]}))
        .await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST, "{:?}", again.body);
    let active = rig.get("/jobs/active").await;
    assert_eq!(
        active.body["jobs"].as_array().unwrap().len(),
        2,
        "seed-r3 was not kept"
    );
}
