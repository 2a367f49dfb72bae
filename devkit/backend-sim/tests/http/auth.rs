//! Auth (service token vs per-job token, 401 bodies that reveal nothing),
//! bad input, and the test-clock endpoint's gate.

use crate::support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn unauthorized_body() -> Value {
    json!({"error": {"code": "unauthorized", "message": "unauthorized"}})
}

#[tokio::test]
async fn service_calls_need_the_service_token() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let (_, job_token, _) = rig.claim().await.unwrap();
    let calls: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::POST,
            "/jobs".into(),
            Some(json!({"harness": "h", "model": "m", "launch_request": {}})),
        ),
        (
            Method::POST,
            "/jobs/batch".into(),
            Some(json!({"runs": []})),
        ),
        (Method::GET, "/jobs".into(), None),
        (Method::POST, "/jobs/next".into(), None),
        (
            Method::POST,
            "/jobs/leases".into(),
            Some(json!({"job_ids": [id]})),
        ),
        (Method::GET, "/jobs/active".into(), None),
        (Method::GET, format!("/jobs/{id}"), None),
        (
            Method::POST,
            format!("/jobs/{id}/lost"),
            Some(json!({"detail": "x"})),
        ),
        (
            Method::POST,
            "/publish-jobs".into(),
            Some(json!({"request": {}})),
        ),
        (Method::GET, "/publish-jobs".into(), None),
        (Method::POST, "/publish-jobs/next".into(), None),
        (
            Method::POST,
            "/publish-jobs/leases".into(),
            Some(json!({"job_ids": []})),
        ),
        (Method::GET, "/publish-jobs/active".into(), None),
        (Method::GET, "/publish-jobs/x".into(), None),
        (
            Method::POST,
            "/publish-jobs/x/lost".into(),
            Some(json!({"detail": "x"})),
        ),
        (
            Method::PUT,
            "/harnesses/h".into(),
            Some(json!({"max_parallel": 0})),
        ),
        (
            Method::POST,
            "/admin/clock/advance".into(),
            Some(json!({"seconds": 1000})),
        ),
    ];
    let before = rig.job(&id).await;
    for (method, path, body) in &calls {
        for token in [None, Some("wrong"), Some(job_token.as_str())] {
            let a = rig.call(method.clone(), path, token, body.clone()).await;
            assert_eq!(
                a.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}"
            );
            assert_eq!(a.body, unauthorized_body(), "{method} {path}");
        }
    }
    assert_eq!(rig.job(&id).await, before, "refused calls change nothing");
    assert_eq!(
        rig.get("/jobs").await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(rig.sim.now(), start_time(), "the clock did not move");
}

#[tokio::test]
async fn per_job_calls_need_that_jobs_token() {
    let rig = Rig::start().await;
    let a = rig.enqueue("h", "m", None).await;
    let b = rig.enqueue("h", "m", None).await;
    let (_, ta, _) = rig.claim().await.unwrap();
    let (_, tb, _) = rig.claim().await.unwrap();
    let p = rig.post("/publish-jobs", json!({"request": {}})).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, tp, _) = rig.claim_publish().await.unwrap();
    let before = (rig.job(&a).await, rig.job(&b).await);
    let cases: Vec<(String, Option<&str>, Value)> = vec![
        (
            format!("/jobs/{a}/status"),
            None,
            json!({"state": "running"}),
        ),
        (
            format!("/jobs/{a}/status"),
            Some(SERVICE),
            json!({"state": "running"}),
        ),
        (
            format!("/jobs/{a}/status"),
            Some(&tb),
            json!({"state": "running"}),
        ),
        (
            format!("/jobs/{a}/status"),
            Some(&tp),
            json!({"state": "running"}),
        ),
        (
            format!("/jobs/{a}/record"),
            Some(&tb),
            json!({"state_reached": "running", "record": {}}),
        ),
        (
            "/jobs/unknown-id/status".to_string(),
            Some(&ta),
            json!({"state": "running"}),
        ),
        (
            format!("/publish-jobs/{p}/result"),
            Some(&ta),
            json!({"outcome": "succeeded"}),
        ),
        (
            format!("/publish-jobs/{p}/result"),
            Some(SERVICE),
            json!({"outcome": "succeeded"}),
        ),
        // A wrong token with a malformed body still learns only 401.
        (
            format!("/jobs/{a}/status"),
            Some("wrong"),
            json!({"state": 7}),
        ),
        (
            format!("/publish-jobs/{p}/result"),
            Some("wrong"),
            json!({"outcome": 7}),
        ),
    ];
    for (path, token, body) in cases {
        let r = rig.call(Method::POST, &path, token, Some(body)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path} {token:?}");
        assert_eq!(r.body, unauthorized_body());
    }
    assert_eq!((rig.job(&a).await, rig.job(&b).await), before);
    assert_eq!(
        rig.get(&format!("/publish-jobs/{p}")).await.body["state"],
        "dispatched"
    );
    assert_eq!(
        rig.report(&a, &ta, json!({"state": "running"}))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn malformed_input_is_a_json_400_and_changes_nothing() {
    let rig = Rig::start().await;
    let bad_enqueues = [
        json!({"model": "m", "launch_request": {}}),
        json!({"harness": "", "model": "m", "launch_request": {}}),
        json!({"harness": "h", "model": "m", "launch_request": "not an object"}),
        json!({"harness": "h", "model": "m", "jam": 3, "launch_request": {}}),
        json!([1, 2]),
    ];
    for body in bad_enqueues {
        assert_error(
            &rig.post("/jobs", body).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    assert_error(
        &rig.post_raw("/jobs", SERVICE, "{not json").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    // A batch with one bad run enqueues none of it.
    let batch = json!({"runs": [
        {"harness": "h", "model": "m", "launch_request": {}},
        {"harness": "h", "model": "m", "launch_request": null}
    ]});
    let r = rig.post("/jobs/batch", batch).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("runs[1]")
    );
    assert_eq!(rig.get("/jobs").await.body["jobs"], json!([]));

    for (path, body) in [
        ("/jobs/leases", json!({"job_ids": "x"})),
        ("/publish-jobs/leases", json!({})),
        ("/publish-jobs", json!({"request": [1]})),
        ("/jobs/x/lost", json!({"detail": 5})),
        ("/admin/clock/advance", json!({"seconds": -1})),
        ("/admin/clock/advance", json!({})),
    ] {
        assert_error(
            &rig.post(path, body).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    let r = rig
        .call(
            Method::PUT,
            "/harnesses/h",
            Some(SERVICE),
            Some(json!({"max_parallel": -1})),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    assert_error(
        &rig.get("/jobs?state=bogus").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_error(
        &rig.get("/publish-jobs?state=running").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    let r = rig
        .call(Method::DELETE, "/jobs/next", Some(SERVICE), None)
        .await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert_eq!(
        rig.get("/publish-jobs").await.body["publish_jobs"],
        json!([])
    );
    assert_eq!(rig.sim.now(), start_time());
}

#[tokio::test]
async fn the_test_clock_endpoint_exists_only_when_enabled() {
    let mut opts = tcab_backend_sim::SimOptions::in_memory(SERVICE);
    opts.clock = std::sync::Arc::new(tcab_backend_sim::ManualClock::new(start_time()));
    let rig = Rig::with(opts).await;
    let r = rig
        .post("/admin/clock/advance", json!({"seconds": 60}))
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(rig.sim.now(), start_time());

    let on = Rig::start().await;
    let r = on
        .post("/admin/clock/advance", json!({"seconds": 90.5}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        ts(&r.body["now"]),
        start_time() + jiff::SignedDuration::from_millis(90_500)
    );
    assert_eq!(
        ts(&on.get("/jobs/active").await.body["now"]),
        ts(&r.body["now"])
    );
}
