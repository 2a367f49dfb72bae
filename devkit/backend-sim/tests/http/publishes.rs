//! Publishes: claim, leases, result, lost (failed + retry), the backstop.

use crate::support::*;
use reqwest::StatusCode;
use serde_json::json;

async fn enqueue_publish(rig: &Rig, n: u32) -> String {
    let a = rig
        .post("/publish-jobs", json!({"request": {"release": n}}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    a.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn publishes_are_claimed_in_order_with_leases_and_results() {
    let rig = Rig::start().await;
    let p1 = enqueue_publish(&rig, 1).await;
    let p2 = enqueue_publish(&rig, 2).await;
    // Runs and publishes are separate queues.
    assert!(rig.claim().await.is_none());
    let (got, token, job) = rig.claim_publish().await.unwrap();
    assert_eq!(got, p1);
    assert_eq!(job["request"], json!({"release": 1}));
    let (got2, token2, _) = rig.claim_publish().await.unwrap();
    assert_eq!(got2, p2);
    assert!(rig.claim_publish().await.is_none());

    rig.advance(30.0).await;
    let r = rig
        .post("/publish-jobs/leases", json!({"job_ids": [p1, "nope"]}))
        .await;
    assert_eq!(r.body["leases"].as_array().unwrap().len(), 1);
    let active = rig.get("/publish-jobs/active").await.body;
    assert_eq!(active["publish_jobs"].as_array().unwrap().len(), 2);
    assert_eq!(
        ts(&active["now"]),
        start_time() + jiff::SignedDuration::from_secs(30)
    );

    // Results: the wrong token is refused, a second result is a conflict.
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p1}/result"),
            &token2,
            json!({"outcome": "succeeded"}),
        )
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p1}/result"),
            &token,
            json!({"outcome": "failed", "detail": "upload refused"}),
        )
        .await;
    assert_eq!(r.body, json!({"id": p1, "state": "failed"}));
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p1}/result"),
            &token,
            json!({"outcome": "succeeded"}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p2}/result"),
            &token2,
            json!({"outcome": "maybe"}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(
        rig.get("/publish-jobs?state=failed").await.body["publish_jobs"][0]["id"],
        p1.as_str()
    );
    assert_eq!(
        rig.get("/publish-jobs/active").await.body["publish_jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_lost_publish_is_recorded_failed_and_retried() {
    let rig = Rig::start().await;
    let p = enqueue_publish(&rig, 7).await;
    let r = rig
        .post(&format!("/publish-jobs/{p}/lost"), json!({"detail": "x"}))
        .await;
    assert_eq!(r.body["ignored"], true, "a queued publish is not driven");
    let (_, token, _) = rig.claim_publish().await.unwrap();
    // A lapsed publish lease does not requeue it: the dispatcher reports it lost.
    rig.advance(300.0).await;
    let later = enqueue_publish(&rig, 8).await;
    assert_eq!(rig.claim_publish().await.unwrap().0, later);
    let r = rig
        .post(
            &format!("/publish-jobs/{p}/lost"),
            json!({"detail": "publisher pod OOMKilled"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        (r.body["ignored"].clone(), r.body["state"].clone()),
        (json!(false), json!("failed"))
    );
    let retry = r.body["retry_id"].as_str().unwrap().to_string();
    let v = rig.get(&format!("/publish-jobs/{p}")).await.body;
    assert_eq!(v["state"], "failed");
    assert!(v["detail"].as_str().unwrap().contains("OOMKilled"));
    let rv = rig.get(&format!("/publish-jobs/{retry}")).await.body;
    assert_eq!(
        (
            rv["state"].clone(),
            rv["attempt"].clone(),
            rv["retry_of"].clone()
        ),
        (json!("queued"), json!(2), json!(p))
    );
    assert_eq!(rv["request"], json!({"release": 7}));
    let (got, _, _) = rig.claim_publish().await.unwrap();
    assert_eq!(got, retry);
    // The old claim's result is now a conflict; unknown ids are 404.
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p}/result"),
            &token,
            json!({"outcome": "succeeded"}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
    let r = rig
        .post("/publish-jobs/nope/lost", json!({"detail": "x"}))
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn the_backstop_fails_a_publish_dispatched_for_an_hour() {
    let rig = Rig::start().await;
    let p = enqueue_publish(&rig, 1).await;
    let (_, token, _) = rig.claim_publish().await.unwrap();
    for _ in 0..3 {
        rig.advance(1199.0).await; // keep renewing: the backstop ignores leases
        rig.post("/publish-jobs/leases", json!({"job_ids": [p]}))
            .await;
    }
    let v = rig.get(&format!("/publish-jobs/{p}")).await.body;
    assert_eq!(v["state"], "dispatched", "3597 s in");
    rig.advance(3.0).await;
    let v = rig.get(&format!("/publish-jobs/{p}")).await.body;
    assert_eq!(v["state"], "failed");
    assert!(v["detail"].as_str().unwrap().contains("backstop"));
    assert!(v["retry_id"].is_null());
    assert_eq!(
        rig.get("/publish-jobs/active").await.body["publish_jobs"],
        json!([])
    );
    let r = rig
        .post_as(
            &format!("/publish-jobs/{p}/result"),
            &token,
            json!({"outcome": "succeeded"}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
}

#[tokio::test]
async fn the_backstop_length_is_an_option() {
    let mut opts = tcab_backend_sim::SimOptions::in_memory(SERVICE);
    opts.publish_backstop = std::time::Duration::from_secs(10);
    opts.clock = std::sync::Arc::new(tcab_backend_sim::ManualClock::new(start_time()));
    let rig = Rig::with(opts).await;
    let p = enqueue_publish(&rig, 1).await;
    rig.claim_publish().await.unwrap();
    rig.sim.advance_clock(std::time::Duration::from_secs(10));
    assert_eq!(
        rig.get(&format!("/publish-jobs/{p}")).await.body["state"],
        "failed"
    );
}
