//! Lost reports: finish from the held record, or fail + retry; ignored when
//! not driven; superseded by a late terminal report that withdraws the retry.

use crate::support::*;
use reqwest::StatusCode;
use serde_json::json;

fn lost(detail: &str) -> serde_json::Value {
    json!({"detail": detail})
}

#[tokio::test]
async fn lost_without_record_fails_as_infrastructure_and_retries_at_the_back() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, _, _) = rig.claim().await.unwrap();
    let c = rig.enqueue("h", "m", None).await;
    let r = rig
        .post(&format!("/jobs/{a}/lost"), lost("Job no longer exists"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["ignored"], false);
    assert_eq!(r.body["state"], "failed");
    let retry = r.body["retry_id"].as_str().unwrap().to_string();
    let v = rig.job(&a).await;
    assert_eq!(v["failure_kind"], "infrastructure");
    assert_eq!(v["lost"], true);
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("Job no longer exists")
    );
    assert_eq!(v["retry_id"], retry.as_str());
    // The retry is a fresh enqueue: behind c, attempt 2.
    assert_eq!(rig.claim().await.unwrap().0, c);
    let (got, _, job) = rig.claim().await.unwrap();
    assert_eq!(got, retry);
    assert_eq!(job["attempt"], 2);
}

#[tokio::test]
async fn lost_with_a_record_finishes_from_it_with_no_retry() {
    let rig = Rig::start().await;
    for (reached, final_state) in [
        ("storing", "succeeded"),
        ("validating", "succeeded"),
        ("running", "failed"),
    ] {
        let a = rig.enqueue("h", "m", None).await;
        let (_, token, _) = rig.claim().await.unwrap();
        rig.report(&a, &token, json!({"state": "running"})).await;
        rig.post_as(
            &format!("/jobs/{a}/record"),
            &token,
            json!({"state_reached": reached, "record": {"score": 0.5}}),
        )
        .await;
        let r = rig
            .post(&format!("/jobs/{a}/lost"), lost("driver exited"))
            .await;
        assert_eq!(r.body["ignored"], false);
        assert_eq!(r.body["state"], final_state, "{reached}");
        assert!(r.body["retry_id"].is_null());
        let v = rig.job(&a).await;
        assert_eq!(v["finished_from_record"], true);
        assert!(
            v["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("reached {reached}"))
        );
        assert!(rig.claim().await.is_none(), "no retry enqueued");
    }
}

#[tokio::test]
async fn lost_is_ignored_for_a_job_not_driven() {
    let rig = Rig::start().await;
    let finished = rig.enqueue("h", "m", None).await;
    let waiting = rig.enqueue("h", "m", None).await;
    let (first, token, _) = rig.claim().await.unwrap();
    assert_eq!(first, finished);
    rig.report(&finished, &token, json!({"state": "succeeded"}))
        .await;
    for id in [&finished, &waiting] {
        let before = rig.job(id).await;
        let r = rig.post(&format!("/jobs/{id}/lost"), lost("x")).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["ignored"], true);
        assert_eq!(r.body["state"], before["state"]);
        assert!(r.body["retry_id"].is_null());
        assert_eq!(rig.job(id).await, before);
    }
    let r = rig.post("/jobs/no-such-job/lost", lost("x")).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    // Reporting a lost job twice: the second is ignored.
    let (d, _, _) = rig.claim().await.unwrap();
    let r1 = rig.post(&format!("/jobs/{d}/lost"), lost("x")).await;
    let r2 = rig.post(&format!("/jobs/{d}/lost"), lost("x")).await;
    assert_eq!(
        (r1.body["ignored"].clone(), r2.body["ignored"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(
        rig.get("/jobs?state=queued").await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_late_terminal_report_supersedes_the_lost_outcome_and_withdraws_the_retry() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    rig.report(&a, &token, json!({"state": "storing"})).await;
    let r = rig
        .post(&format!("/jobs/{a}/lost"), lost("lease lapsed"))
        .await;
    let retry = r.body["retry_id"].as_str().unwrap().to_string();
    assert_eq!(rig.state(&retry).await, "queued");

    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "succeeded", "detail": "stored at last"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["state"], "succeeded");
    let v = rig.job(&a).await;
    assert_eq!(v["state"], "succeeded");
    assert_eq!(v["lost_superseded"], true);
    assert!(v["failure_kind"].is_null());
    let rv = rig.job(&retry).await;
    assert_eq!(rv["state"], "cancelled");
    assert!(
        rv["history"].as_array().unwrap().last().unwrap()["detail"]
            .as_str()
            .unwrap()
            .contains("withdrawn")
    );
    assert!(rig.claim().await.is_none());
    // Only one late report is taken.
    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "failed", "failure_kind": "agent"}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
    // A non-terminal report on the lost job is a conflict too.
    let b = rig.enqueue("h", "m", None).await;
    let (_, tb, _) = rig.claim().await.unwrap();
    rig.post(&format!("/jobs/{b}/lost"), lost("x")).await;
    assert_error(
        &rig.report(&b, &tb, json!({"state": "running"})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
}

#[tokio::test]
async fn a_late_report_leaves_a_retry_that_already_started_or_is_still_needed() {
    let rig = Rig::start().await;
    // The retry was already claimed: it is not withdrawn.
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    let retry = rig.post(&format!("/jobs/{a}/lost"), lost("x")).await.body["retry_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rig.claim().await.unwrap().0, retry);
    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "failed", "failure_kind": "agent"}),
        )
        .await;
    assert_eq!(r.body["state"], "failed");
    assert_eq!(rig.job(&a).await["failure_kind"], "agent");
    assert_eq!(rig.state(&retry).await, "dispatched");

    // A late infrastructure failure still needs the retry: it is kept.
    let b = rig.enqueue("h", "m", None).await;
    let (_, tb, _) = rig.claim().await.unwrap();
    let retry_b = rig.post(&format!("/jobs/{b}/lost"), lost("x")).await.body["retry_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = rig
        .report(
            &b,
            &tb,
            json!({"state": "failed", "failure_kind": "infrastructure", "detail": "death report"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(rig.state(&retry_b).await, "queued");
    assert_eq!(rig.job(&b).await["retry_id"], retry_b.as_str());
    assert_eq!(
        rig.get("/jobs?state=queued").await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}
