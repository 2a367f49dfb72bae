//! Driver reports: the forward-only state machine, failure kinds, held records.

use crate::support::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn states_move_forward_only() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    let ok = |state: &'static str| json!({"state": state});

    assert_eq!(
        rig.report(&a, &token, ok("starting")).await.body,
        json!({"id": a, "state": "starting"})
    );
    assert_eq!(
        rig.report(&a, &token, ok("running")).await.status,
        StatusCode::OK
    );
    // A repeated report (a retried call) is acknowledged and changes nothing.
    let history_len = rig.job(&a).await["history"].as_array().unwrap().len();
    assert_eq!(
        rig.report(&a, &token, ok("running")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        rig.job(&a).await["history"].as_array().unwrap().len(),
        history_len
    );
    // Backwards: 409, nothing changes.
    let r = rig.report(&a, &token, ok("starting")).await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
    assert_eq!(rig.state(&a).await, "running");
    // States may be skipped forward.
    assert_eq!(
        rig.report(&a, &token, ok("storing")).await.status,
        StatusCode::OK
    );
    assert_error(
        &rig.report(&a, &token, ok("validating")).await,
        StatusCode::CONFLICT,
        "conflict",
    );
    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "succeeded", "detail": "all good"}),
        )
        .await;
    assert_eq!(r.body["state"], "succeeded");
    // Terminal: every further report is 409.
    for body in [
        ok("running"),
        ok("succeeded"),
        json!({"state": "failed", "failure_kind": "infrastructure"}),
    ] {
        assert_error(
            &rig.report(&a, &token, body).await,
            StatusCode::CONFLICT,
            "conflict",
        );
    }
    let view = rig.job(&a).await;
    assert_eq!(view["state"], "succeeded");
    assert_eq!(view["detail"], "all good");
    let states: Vec<&str> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        [
            "queued",
            "dispatched",
            "starting",
            "running",
            "storing",
            "succeeded"
        ]
    );
}

#[tokio::test]
async fn failure_kinds_decide_the_retry() {
    let rig = Rig::start().await;
    // An agent failure (explicit or by default) is not retried.
    for body in [
        json!({"state": "failed", "failure_kind": "agent"}),
        json!({"state": "failed"}),
    ] {
        let id = rig.enqueue("h", "m", None).await;
        let (_, token, _) = rig.claim().await.unwrap();
        assert_eq!(rig.report(&id, &token, body).await.status, StatusCode::OK);
        let v = rig.job(&id).await;
        assert_eq!(
            (v["state"].as_str(), v["failure_kind"].as_str()),
            (Some("failed"), Some("agent"))
        );
        assert!(v["retry_id"].is_null());
    }
    assert_eq!(rig.get("/jobs?state=queued").await.body["jobs"], json!([]));

    // An infrastructure failure with no record is retried at the back of the queue.
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    let later = rig.enqueue("h", "m", None).await;
    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "failed", "failure_kind": "infrastructure", "detail": "pod evicted"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = rig.job(&a).await;
    assert_eq!(v["failure_kind"], "infrastructure");
    let retry = v["retry_id"].as_str().expect("a retry").to_string();
    let rv = rig.job(&retry).await;
    assert_eq!(
        (rv["state"].as_str(), rv["attempt"].as_i64()),
        (Some("queued"), Some(2))
    );
    assert_eq!(rv["retry_of"], a.as_str());
    assert_eq!(rv["launch_request"], v["launch_request"]);
    assert!(rv["queue_seq"].as_i64() > rig.job(&later).await["queue_seq"].as_i64());
    assert_eq!(rig.claim().await.unwrap().0, later);
    let (got, _, job) = rig.claim().await.unwrap();
    assert_eq!((got, job["attempt"].as_i64()), (retry, Some(2)));
}

#[tokio::test]
async fn a_held_record_finishes_an_infrastructure_failure_without_retry() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    rig.report(&a, &token, json!({"state": "validating"})).await;
    let r = rig
        .post_as(
            &format!("/jobs/{a}/record"),
            &token,
            json!({"state_reached": "storing", "record": {"score": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = rig
        .report(
            &a,
            &token,
            json!({"state": "failed", "failure_kind": "infrastructure", "detail": "OOMKilled"}),
        )
        .await;
    assert_eq!(
        r.body["state"], "succeeded",
        "the record reached storing: {:?}",
        r.body
    );
    let v = rig.job(&a).await;
    assert_eq!(v["finished_from_record"], true);
    assert_eq!(v["record_state_reached"], "storing");
    assert!(v["retry_id"].is_null());
    assert!(rig.claim().await.is_none(), "no retry enqueued");
}

#[tokio::test]
async fn bad_reports_are_refused_and_change_nothing() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    rig.report(&a, &token, json!({"state": "running"})).await;
    let before = rig.job(&a).await;
    for body in [
        json!({"state": "bogus"}),
        json!({"state": "queued"}),
        json!({"state": "dispatched"}),
        json!({"state": "cancelled"}),
        json!({"state": "running", "failure_kind": "agent"}),
        json!({"state": "failed", "failure_kind": "cosmic-rays"}),
        json!({"detail": "no state"}),
    ] {
        let r = rig.report(&a, &token, body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    }
    let r = rig
        .post_raw(&format!("/jobs/{a}/status"), &token, "{\"state\": ")
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    for body in [
        json!({"state_reached": "dispatched", "record": {}}),
        json!({"state_reached": "running", "record": null}),
        json!({"record": {}}),
    ] {
        let r = rig
            .post_as(&format!("/jobs/{a}/record"), &token, body)
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    }
    assert_eq!(rig.job(&a).await, before);

    // A record on a finished job is a conflict.
    rig.report(&a, &token, json!({"state": "succeeded"})).await;
    let r = rig
        .post_as(
            &format!("/jobs/{a}/record"),
            &token,
            json!({"state_reached": "storing", "record": {}}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "conflict");
}
