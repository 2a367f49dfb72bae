//! The sim against the example payloads of docs/contract/: it accepts every
//! example request, and its answers have the examples' fields and types.

use crate::support::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const CLAIM_RUN: &str = include_str!("../../../../docs/contract/claim-run.json");
const CLAIM_PUBLISH: &str = include_str!("../../../../docs/contract/claim-publish.json");
const ENQUEUE_RUN: &str = include_str!("../../../../docs/contract/enqueue-run.json");
const ERROR: &str = include_str!("../../../../docs/contract/error.json");
const JOB_VIEW: &str = include_str!("../../../../docs/contract/job-view.json");
const LEASE_REQUEST: &str = include_str!("../../../../docs/contract/lease-request.json");
const LEASE_RENEWAL: &str = include_str!("../../../../docs/contract/lease-renewal.json");
const ACTIVE_RUNS: &str = include_str!("../../../../docs/contract/active-runs.json");
const ACTIVE_PUBLISHES: &str = include_str!("../../../../docs/contract/active-publishes.json");
const LOST_REPORT: &str = include_str!("../../../../docs/contract/lost-report.json");
const LOST_OUTCOME: &str = include_str!("../../../../docs/contract/lost-outcome.json");
const STATUS_REPORT: &str = include_str!("../../../../docs/contract/status-report.json");
const STATUS_ACK: &str = include_str!("../../../../docs/contract/status-ack.json");
const RECORD: &str = include_str!("../../../../docs/contract/record.json");
const PUBLISH_RESULT: &str = include_str!("../../../../docs/contract/publish-result.json");

/// Fields whose contents are the caller's own data: only their type is compared.
const OPAQUE: [&str; 3] = ["launch_request", "request", "record"];

fn example(text: &str) -> Value {
    serde_json::from_str(text).expect("example parses")
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Asserts that `actual` has the shape of `example`: the same JSON types all
/// the way down, the same keys in every object (a superset when `extra_ok`),
/// timestamps where the example has timestamps.
fn assert_shape(example: &Value, actual: &Value, path: &str, extra_ok: bool) {
    assert_eq!(
        kind(example),
        kind(actual),
        "{path}: example is {example}, sim sent {actual}"
    );
    match (example, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for key in e.keys() {
                assert!(
                    a.contains_key(key),
                    "{path}: sim's answer lacks {key:?}: {actual}"
                );
            }
            if !extra_ok {
                let extra: Vec<&String> = a.keys().filter(|k| !e.contains_key(*k)).collect();
                assert!(extra.is_empty(), "{path}: sim sent extra keys {extra:?}");
            }
            for (key, ev) in e {
                if OPAQUE.contains(&key.as_str()) {
                    assert_eq!(kind(ev), kind(&a[key]), "{path}.{key}");
                } else {
                    assert_shape(ev, &a[key], &format!("{path}.{key}"), extra_ok);
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if let Some(first) = e.first() {
                assert!(!a.is_empty(), "{path}: sim sent an empty list");
                for (i, item) in a.iter().enumerate() {
                    assert_shape(first, item, &format!("{path}[{i}]"), extra_ok);
                }
            }
        }
        (Value::String(e), Value::String(a)) if e.parse::<jiff::Timestamp>().is_ok() => {
            assert!(
                a.parse::<jiff::Timestamp>().is_ok(),
                "{path}: {a:?} is not an RFC 3339 timestamp"
            );
            assert!(a.ends_with('Z'), "{path}: {a:?} is not UTC");
        }
        _ => {}
    }
}

fn is_label_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Enqueues the enqueue-run.json example itself and claims it.
async fn claimed_example(rig: &Rig) -> (String, String, Value) {
    let a = rig.post("/jobs", example(ENQUEUE_RUN)).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_shape(
        &json!({"id": "x", "queue_seq": 1}),
        &a.body,
        "enqueue",
        false,
    );
    rig.claim().await.expect("the example run is claimable")
}

#[tokio::test]
async fn claim_run_matches_the_example() {
    let rig = Rig::start().await;
    let (id, token, _) = claimed_example(&rig).await;
    let a = rig.get(&format!("/jobs/{id}")).await;
    assert_eq!(a.status, StatusCode::OK);
    // Claim a second one to compare the full answer, not just the job.
    rig.post("/jobs", example(ENQUEUE_RUN)).await;
    let raw = rig
        .call(reqwest::Method::POST, "/jobs/next", Some(SERVICE), None)
        .await;
    assert_eq!(raw.status, StatusCode::OK);
    assert_shape(&example(CLAIM_RUN), &raw.body, "claim-run", false);
    let job = &raw.body["job"];
    assert_eq!(
        job["launch_request"],
        example(ENQUEUE_RUN)["launch_request"]
    );
    assert_eq!(job["attempt"], 1);
    assert!(is_label_value(&id), "{id} is not a label value");
    assert!(uuid_v4(&id));
    assert!(token.len() >= 24);
    assert_ne!(
        job["token"].as_str().unwrap(),
        token,
        "tokens are fresh per claim"
    );
    assert_eq!(
        ts(&job["lease_expires_at"]),
        start_time() + jiff::SignedDuration::from_secs(120)
    );
}

fn uuid_v4(s: &str) -> bool {
    s.len() == 36 && s.as_bytes()[14] == b'4' && s.split('-').count() == 5
}

#[tokio::test]
async fn leases_and_active_runs_match_the_examples() {
    let rig = Rig::start().await;
    // The example request itself parses; its ids are unknown, so no lease.
    let a = rig.post("/jobs/leases", example(LEASE_REQUEST)).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.body["leases"], json!([]));
    assert!(ts(&a.body["now"]) == start_time());

    let (id, token, _) = claimed_example(&rig).await;
    let a = rig.post("/jobs/leases", json!({"job_ids": [id]})).await;
    assert_shape(&example(LEASE_RENEWAL), &a.body, "lease-renewal", false);

    assert_eq!(
        rig.report(&id, &token, json!({"state": "running"}))
            .await
            .status,
        StatusCode::OK
    );
    let a = rig.get("/jobs/active").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_shape(&example(ACTIVE_RUNS), &a.body, "active-runs", false);
}

#[tokio::test]
async fn job_view_has_the_example_fields() {
    let rig = Rig::start().await;
    let (id, token, _) = claimed_example(&rig).await;
    for state in ["starting", "running"] {
        assert_eq!(
            rig.report(&id, &token, json!({"state": state}))
                .await
                .status,
            StatusCode::OK
        );
    }
    let view = rig.job(&id).await;
    // The console adds fields (failure_kind, retry_id, ...); the example's are all there.
    assert_shape(&example(JOB_VIEW), &view, "job-view", true);
    let states: Vec<&str> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["queued", "dispatched", "starting", "running"]);
    let history_keys: Vec<String> = view["history"][0]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(history_keys.len(), 3, "{history_keys:?}");
}

#[tokio::test]
async fn status_record_and_lost_examples() {
    let rig = Rig::start().await;
    let (id, token, _) = claimed_example(&rig).await;
    // The example record is accepted and held.
    let a = rig
        .post_as(&format!("/jobs/{id}/record"), &token, example(RECORD))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(rig.job(&id).await["has_record"], true);

    // The example status report (a death report) is accepted: status-ack.json.
    let (id2, token2, _) = claimed_example(&rig).await;
    let a = rig.report(&id2, &token2, example(STATUS_REPORT)).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_shape(&example(STATUS_ACK), &a.body, "status-ack", false);
    assert_eq!(a.body["state"], "failed");
    let view = rig.job(&id2).await;
    assert_eq!(view["failure_kind"], "infrastructure");
    assert_eq!(view["detail"], example(STATUS_REPORT)["detail"]);

    // The example lost report on a run with no record: lost-outcome.json.
    let (id3, _, _) = claimed_example(&rig).await;
    let a = rig
        .post(&format!("/jobs/{id3}/lost"), example(LOST_REPORT))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_shape(&example(LOST_OUTCOME), &a.body, "lost-outcome", false);
    assert!(is_label_value(a.body["retry_id"].as_str().unwrap()));
}

#[tokio::test]
async fn publish_examples() {
    let rig = Rig::start().await;
    let request = example(CLAIM_PUBLISH)["publish_job"]["request"].clone();
    let a = rig.post("/publish-jobs", json!({"request": request})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert!(a.body["id"].is_string());
    let raw = rig
        .call(
            reqwest::Method::POST,
            "/publish-jobs/next",
            Some(SERVICE),
            None,
        )
        .await;
    assert_shape(&example(CLAIM_PUBLISH), &raw.body, "claim-publish", false);
    assert_eq!(raw.body["publish_job"]["request"], request);
    let id = raw.body["publish_job"]["id"].as_str().unwrap().to_string();
    let token = raw.body["publish_job"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(token.len() >= 24 && is_label_value(&id));

    let a = rig.get("/publish-jobs/active").await;
    assert_shape(
        &example(ACTIVE_PUBLISHES),
        &a.body,
        "active-publishes",
        false,
    );
    let a = rig
        .post("/publish-jobs/leases", example(LEASE_REQUEST))
        .await;
    assert_shape(
        &json!({"now": "2026-11-29T17:01:00Z", "leases": []}),
        &a.body,
        "publish leases",
        false,
    );

    let a = rig
        .post_as(
            &format!("/publish-jobs/{id}/result"),
            &token,
            example(PUBLISH_RESULT),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let view = rig.get(&format!("/publish-jobs/{id}")).await.body;
    assert_eq!(view["state"], "succeeded");
    assert_eq!(view["detail"], "released 120 results");
}

#[tokio::test]
async fn errors_have_the_example_shape() {
    let rig = Rig::start().await;
    let a = rig.get("/jobs/0d6f2c1e-5b7a-4a57-9d0e-2b3f4c5d6e7f").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_shape(&example(ERROR), &a.body, "error", false);
    let a = rig.get("/no/such/route").await;
    assert_error(&a, StatusCode::NOT_FOUND, "not_found");
}
