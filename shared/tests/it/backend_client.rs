//! The backend client against a scripted axum server on 127.0.0.1:0: every
//! call with the contract's example payloads (docs/contract/*.json), and each
//! error kind.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcab_shared::backend::client::RetryPolicy;
use tcab_shared::backend::{
    BackendClient, BackendError, BackendErrorKind, ClaimAnswer, JobState, PublishState,
};
use tcab_shared::retry::Sleeper;
use tcab_shared::{Lane, Secret};

const CLAIM_RUN: &str = include_str!("../../../docs/contract/claim-run.json");
const CLAIM_PUBLISH: &str = include_str!("../../../docs/contract/claim-publish.json");
const LEASE_REQUEST: &str = include_str!("../../../docs/contract/lease-request.json");
const LEASE_RENEWAL: &str = include_str!("../../../docs/contract/lease-renewal.json");
const ACTIVE_RUNS: &str = include_str!("../../../docs/contract/active-runs.json");
const ACTIVE_PUBLISHES: &str = include_str!("../../../docs/contract/active-publishes.json");
const JOB_VIEW: &str = include_str!("../../../docs/contract/job-view.json");
const LOST_REPORT: &str = include_str!("../../../docs/contract/lost-report.json");
const LOST_OUTCOME: &str = include_str!("../../../docs/contract/lost-outcome.json");
const STATUS_REPORT: &str = include_str!("../../../docs/contract/status-report.json");
const STATUS_ACK: &str = include_str!("../../../docs/contract/status-ack.json");
const ERROR: &str = include_str!("../../../docs/contract/error.json");
const PUBLISH_RESULT: &str = include_str!("../../../docs/contract/publish-result.json");

/// The service token the tests' client holds; it must never show in an error.
const SERVICE_TOKEN: &str = "svc-TOKEN-5f0e9c1d7a";
/// A per-job token for death reports; it must never show in an error either.
const JOB_TOKEN: &str = "tok_run_7d1f9a52c4e34b0f8a61";
/// The run id of the example payloads.
const RUN_ID: &str = "0d6f2c1e-5b7a-4a57-9d0e-2b3f4c5d6e7f";
/// The publish id of the example payloads.
const PUBLISH_ID: &str = "5a0c7e2b-1f3d-4c8e-9b6a-7d2e1f0c3b4a";

/// One scripted answer.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    /// Never answer.
    hang: bool,
}

impl Reply {
    fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.to_owned(),
            hang: false,
        }
    }

    fn status(status: u16) -> Self {
        Self {
            status,
            headers: vec![],
            body: String::new(),
            hang: false,
        }
    }

    fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "text/plain".into())],
            body: body.to_owned(),
            hang: false,
        }
    }

    fn hang() -> Self {
        Self {
            hang: true,
            ..Self::status(200)
        }
    }

    fn retry_after(mut self, value: &str) -> Self {
        self.headers.push(("retry-after", value.to_owned()));
        self
    }
}

/// What the server received.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    authorization: Option<String>,
    user_agent: Option<String>,
    content_type: Option<String>,
    body: Bytes,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

#[derive(Clone, Default)]
struct Rig {
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn answer(
    State(rig): State<Rig>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header").to_owned())
    };
    rig.seen.lock().unwrap().push(Seen {
        method,
        path: uri.path().to_owned(),
        authorization: header("authorization"),
        user_agent: header("user-agent"),
        content_type: header("content-type"),
        body,
    });
    let reply = rig.script.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return (StatusCode::IM_A_TEAPOT, "script exhausted").into_response();
    };
    if reply.hang {
        std::future::pending::<()>().await;
    }
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (name, value) in reply.headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// A scripted backend on 127.0.0.1:0.
struct Backend {
    rig: Rig,
    url: String,
}

impl Backend {
    async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let rig = Rig::default();
        rig.script.lock().unwrap().extend(replies);
        let app = Router::new().fallback(answer).with_state(rig.clone());
        Self {
            rig,
            url: tcab_testkit::http::serve_url(app).await,
        }
    }

    fn client(&self) -> BackendClient {
        client_for(&self.url, Duration::from_secs(5))
    }

    /// A client whose waits between attempts are recorded, not slept.
    fn recording_client(&self) -> (BackendClient, Arc<RecordingSleeper>) {
        let sleeper = Arc::new(RecordingSleeper::default());
        let client = self.client().with_sleeper(sleeper.clone());
        (client, sleeper)
    }

    fn seen(&self) -> Vec<Seen> {
        self.rig.seen.lock().unwrap().clone()
    }

    fn only_request(&self) -> Seen {
        let seen = self.seen();
        assert_eq!(seen.len(), 1, "expected exactly one request: {seen:?}");
        seen.into_iter().next().unwrap()
    }
}

fn client_for(url: &str, timeout: Duration) -> BackendClient {
    BackendClient::new(url, Secret::new(SERVICE_TOKEN), timeout).unwrap()
}

/// Records the waits it is asked for and returns at once.
#[derive(Default)]
struct RecordingSleeper {
    waits: Mutex<Vec<Duration>>,
}

impl RecordingSleeper {
    fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap().clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()> {
        self.waits.lock().unwrap().push(wait);
        Box::pin(async {})
    }
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// Sets `pointer` in a JSON text to `value` (or removes it when `None`).
fn edit(text: &str, pointer: &str, value: Option<Value>) -> String {
    let mut doc = parse(text);
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = doc.pointer_mut(parent).unwrap();
    match (parent, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(key.to_owned(), v);
        }
        (Value::Object(map), None) => {
            map.remove(key);
        }
        (Value::Array(items), Some(v)) => items[key.parse::<usize>().unwrap()] = v,
        _ => panic!("cannot edit {pointer}"),
    }
    doc.to_string()
}

/// Asserts no token appears in any rendering of `err` or its sources.
fn assert_no_token(err: &BackendError) {
    let mut renderings = vec![format!("{err:?}"), err.to_string(), format!("{err:#}")];
    let mut source = err.source();
    while let Some(s) = source {
        renderings.push(s.to_string());
        renderings.push(format!("{s:?}"));
        source = s.source();
    }
    for text in renderings {
        for token in [SERVICE_TOKEN, JOB_TOKEN, "tok_pub_0c2e4a6b8d1f3e5a7c9b"] {
            assert!(!text.contains(token), "token leaked into {text:?}");
        }
    }
}

fn assert_service_call(seen: &Seen, method: Method, path: &str) {
    assert_eq!(seen.method, method);
    assert_eq!(seen.path, path);
    assert_eq!(
        seen.authorization.as_deref(),
        Some(&*format!("Bearer {SERVICE_TOKEN}"))
    );
    let ua = seen.user_agent.as_deref().unwrap_or_default();
    assert!(ua.starts_with("tcab-dispatcher/"), "user agent {ua:?}");
}

// ---- every call, with the example payloads ----

#[tokio::test]
async fn claim_run_sends_the_service_token_and_parses_the_example() {
    let backend = Backend::start([Reply::json(200, CLAIM_RUN)]).await;
    let run = backend.client().claim_run().await.unwrap().expect("a run");
    let seen = backend.only_request();
    assert_service_call(&seen, Method::POST, "/jobs/next");
    assert!(seen.body.is_empty());

    assert_eq!(run.id, RUN_ID);
    assert_eq!(run.token.expose(), JOB_TOKEN);
    assert_eq!(run.queue_seq, 17);
    assert_eq!(run.harness, "claude-code");
    assert_eq!(run.model, "model-a");
    assert_eq!(run.case.as_deref(), Some("fix-flaky-test"));
    assert_eq!(run.jam, None);
    assert_eq!(run.attempt, 1);
    assert_eq!(
        run.launch_request,
        parse(CLAIM_RUN)["job"]["launch_request"]
    );
    assert_eq!(run.lease_expires_at.to_string(), "2026-11-29T17:02:00Z");
    assert_eq!(
        run.enqueued_at.map(|t| t.to_string()).as_deref(),
        Some("2026-11-29T16:51:37Z")
    );
    assert!(!format!("{run:?}").contains(JOB_TOKEN));
}

#[tokio::test]
async fn a_claim_without_a_readable_enqueue_time_is_still_a_claim() {
    let backend = Backend::start([
        Reply::json(200, &edit(CLAIM_RUN, "/job/enqueued_at", None)),
        Reply::json(
            200,
            &edit(CLAIM_RUN, "/job/enqueued_at", Some(json!("last week"))),
        ),
        Reply::json(
            200,
            &edit(CLAIM_PUBLISH, "/publish_job/enqueued_at", Some(json!(17))),
        ),
    ])
    .await;
    let client = backend.client();
    for _ in 0..2 {
        let run = client.claim_run().await.unwrap().expect("a run");
        assert_eq!(run.enqueued_at, None);
    }
    let publish = client.claim_publish().await.unwrap().expect("a publish");
    assert_eq!(publish.enqueued_at, None);
}

#[tokio::test]
async fn claim_publish_sends_the_service_token_and_parses_the_example() {
    let backend = Backend::start([Reply::json(200, CLAIM_PUBLISH)]).await;
    let publish = backend
        .client()
        .claim_publish()
        .await
        .unwrap()
        .expect("a publish");
    let seen = backend.only_request();
    assert_service_call(&seen, Method::POST, "/publish-jobs/next");

    assert_eq!(publish.id, PUBLISH_ID);
    assert_eq!(publish.token.expose(), "tok_pub_0c2e4a6b8d1f3e5a7c9b");
    assert_eq!(
        publish.request,
        json!({"release": "2026-11-29", "suite": "main"})
    );
    assert_eq!(publish.lease_expires_at.to_string(), "2026-11-29T17:02:00Z");
    assert_eq!(
        publish.enqueued_at.map(|t| t.to_string()).as_deref(),
        Some("2026-11-29T16:58:12Z")
    );
}

#[tokio::test]
async fn a_claim_answered_204_is_nothing_to_claim() {
    let backend = Backend::start([Reply::status(204), Reply::status(204)]).await;
    let client = backend.client();
    assert!(client.claim_run().await.unwrap().is_none());
    assert!(client.claim_publish().await.unwrap().is_none());
    let paths: Vec<_> = backend.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/jobs/next", "/publish-jobs/next"]);
}

#[tokio::test]
async fn lease_renewals_send_the_ids_and_parse_the_leases() {
    let backend = Backend::start([
        Reply::json(200, LEASE_RENEWAL),
        Reply::json(200, LEASE_RENEWAL),
    ])
    .await;
    let client = backend.client();
    let ids: Vec<String> = serde_json::from_value(parse(LEASE_REQUEST)["job_ids"].clone()).unwrap();

    let runs = client.renew_leases(Lane::Run, &ids).await.unwrap();
    let publishes = client.renew_leases(Lane::Publish, &ids).await.unwrap();

    let seen = backend.seen();
    assert_service_call(&seen[0], Method::POST, "/jobs/leases");
    assert_service_call(&seen[1], Method::POST, "/publish-jobs/leases");
    for s in &seen {
        assert_eq!(s.json(), parse(LEASE_REQUEST));
        assert_eq!(s.content_type.as_deref(), Some("application/json"));
    }
    for renewal in [runs, publishes] {
        assert_eq!(renewal.now.to_string(), "2026-11-29T17:01:00Z");
        assert_eq!(renewal.renewed.len(), 1);
        assert_eq!(ids[renewal.renewed[0]], RUN_ID);
    }
}

#[tokio::test]
async fn active_lists_parse_the_examples() {
    let backend = Backend::start([
        Reply::json(200, ACTIVE_RUNS),
        Reply::json(200, ACTIVE_PUBLISHES),
    ])
    .await;
    let client = backend.client();
    let runs = client.active_runs().await.unwrap();
    let publishes = client.active_publishes().await.unwrap();

    let seen = backend.seen();
    assert_service_call(&seen[0], Method::GET, "/jobs/active");
    assert_service_call(&seen[1], Method::GET, "/publish-jobs/active");

    assert_eq!(runs.now.to_string(), "2026-11-29T17:05:00Z");
    let states: Vec<_> = runs.jobs.iter().map(|j| (j.id.as_str(), j.state)).collect();
    assert_eq!(
        states,
        [
            (RUN_ID, JobState::Running),
            ("9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b", JobState::Storing),
            ("3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f", JobState::Dispatched),
        ]
    );
    assert_eq!(
        runs.jobs[1].lease_expires_at.unwrap().to_string(),
        "2026-11-29T17:03:00Z"
    );
    assert_eq!(publishes.publish_jobs.len(), 1);
    assert_eq!(publishes.publish_jobs[0].id, PUBLISH_ID);
    assert_eq!(publishes.publish_jobs[0].state, PublishState::Dispatched);
}

#[tokio::test]
async fn get_job_reads_the_view_and_ignores_extra_fields() {
    let backend = Backend::start([Reply::json(200, JOB_VIEW)]).await;
    let view = backend.client().get_job(RUN_ID).await.unwrap();
    assert_service_call(
        &backend.only_request(),
        Method::GET,
        &format!("/jobs/{RUN_ID}"),
    );
    assert_eq!(view.id, RUN_ID);
    assert_eq!(view.state, JobState::Running);
    assert_eq!(view.attempt, 1);
    assert_eq!(
        view.lease_expires_at.unwrap().to_string(),
        "2026-11-29T17:06:30Z"
    );
}

#[tokio::test]
async fn lost_reports_send_the_detail_and_parse_the_outcome() {
    let backend = Backend::start([
        Reply::json(200, LOST_OUTCOME),
        Reply::json(200, &edit(LOST_OUTCOME, "/id", Some(json!(PUBLISH_ID)))),
    ])
    .await;
    let client = backend.client();
    let detail = parse(LOST_REPORT)["detail"].as_str().unwrap().to_owned();

    let run = client.report_lost(RUN_ID, &detail).await.unwrap();
    let publish = client
        .report_publish_lost(PUBLISH_ID, &detail)
        .await
        .unwrap();

    let seen = backend.seen();
    assert_service_call(&seen[0], Method::POST, &format!("/jobs/{RUN_ID}/lost"));
    assert_service_call(
        &seen[1],
        Method::POST,
        &format!("/publish-jobs/{PUBLISH_ID}/lost"),
    );
    for s in &seen {
        assert_eq!(s.json(), parse(LOST_REPORT));
    }
    assert_eq!(run.id, RUN_ID);
    assert!(!run.ignored);
    assert_eq!(run.state, "failed");
    assert_eq!(
        run.retry_id.as_deref(),
        Some("b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e")
    );
    assert_eq!(publish.id, PUBLISH_ID);
}

#[tokio::test]
async fn a_death_report_presents_the_per_job_token() {
    let backend = Backend::start([Reply::json(200, STATUS_ACK)]).await;
    let detail = parse(STATUS_REPORT)["detail"].as_str().unwrap().to_owned();
    let ack = backend
        .client()
        .report_death(RUN_ID, &Secret::new(JOB_TOKEN), &detail)
        .await
        .unwrap();

    let seen = backend.only_request();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, format!("/jobs/{RUN_ID}/status"));
    assert_eq!(
        seen.authorization.as_deref(),
        Some(&*format!("Bearer {JOB_TOKEN}"))
    );
    assert_eq!(seen.json(), parse(STATUS_REPORT));
    assert_eq!(ack.id, RUN_ID);
    assert_eq!(ack.state, JobState::Failed);
}

// ---- poisoned claims and failed publish results ----

/// A claim answered 200 whose body cannot become a Job: the claim-answer
/// call returns what it could read (a valid id and a usable token) beside
/// why the rest is unusable and the answer's shape, never a value; the
/// strict call keeps answering it as a malformed answer.
#[tokio::test]
async fn a_poisoned_claim_answer_keeps_its_id_and_token_and_names_why() {
    let mut missing = parse(CLAIM_RUN);
    missing["job"]
        .as_object_mut()
        .unwrap()
        .remove("launch_request");
    let mut bad_id = parse(CLAIM_PUBLISH);
    bad_id["publish_job"]["id"] = json!("../etc");
    let backend = Backend::start([
        Reply::json(200, &missing.to_string()),
        Reply::json(200, &bad_id.to_string()),
        Reply::text(200, "<html>oops</html>"),
        Reply::json(200, &missing.to_string()),
        Reply::json(200, CLAIM_RUN),
    ])
    .await;
    let client = backend.client();

    let ClaimAnswer::Poisoned(p) = client.claim_run_answer().await.unwrap().unwrap() else {
        panic!("a run without its launch request is poisoned");
    };
    assert_eq!(p.status, 200);
    assert_eq!(p.id.as_deref(), Some(RUN_ID));
    assert_eq!(p.token.as_ref().map(Secret::expose), Some(JOB_TOKEN));
    assert!(p.reason.contains("launch_request"), "{}", p.reason);
    assert!(
        p.shape.contains("token: string") && !p.shape.contains(JOB_TOKEN),
        "{}",
        p.shape
    );
    assert!(
        !format!("{p:?}").contains(JOB_TOKEN),
        "Debug hides the token"
    );

    let ClaimAnswer::Poisoned(p) = client.claim_publish_answer().await.unwrap().unwrap() else {
        panic!("an invalid id is poisoned");
    };
    assert_eq!(p.id, None, "an invalid id is not kept");
    assert!(p.token.is_some());
    assert!(p.reason.contains("publish_job.id"), "{}", p.reason);

    let ClaimAnswer::Poisoned(p) = client.claim_run_answer().await.unwrap().unwrap() else {
        panic!("a body that is not JSON is poisoned");
    };
    assert_eq!((p.id, p.token.is_none()), (None, true));
    assert_eq!(p.shape, "not JSON");

    let err = client.claim_run().await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    assert!(err.to_string().contains("launch_request"), "{err}");
    assert_no_token(&err);

    assert!(matches!(
        client.claim_run_answer().await.unwrap(),
        Some(ClaimAnswer::Job(run)) if run.id == RUN_ID
    ));
}

#[tokio::test]
async fn a_failed_publish_result_presents_the_per_job_token() {
    let backend = Backend::start([Reply::json(200, r#"{"id": "x", "state": "failed"}"#)]).await;
    let detail = "the dispatcher cannot make a Job of this claim: too large";
    backend
        .client()
        .report_publish_failed(PUBLISH_ID, &Secret::new(JOB_TOKEN), detail)
        .await
        .unwrap();
    let seen = backend.only_request();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, format!("/publish-jobs/{PUBLISH_ID}/result"));
    assert_eq!(
        seen.authorization.as_deref(),
        Some(&*format!("Bearer {JOB_TOKEN}"))
    );
    assert_eq!(seen.json(), json!({"outcome": "failed", "detail": detail}));
    // The documented result body has the same shape.
    let example = parse(PUBLISH_RESULT);
    assert!(example["outcome"].is_string() && example["detail"].is_string());
}

#[tokio::test]
async fn a_base_url_with_a_path_prefixes_every_call() {
    let backend = Backend::start([Reply::json(200, ACTIVE_RUNS)]).await;
    let client = client_for(&format!("{}/api/", backend.url), Duration::from_secs(5));
    client.active_runs().await.unwrap();
    assert_eq!(backend.only_request().path, "/api/jobs/active");
}

// ---- error kinds ----

#[tokio::test]
async fn refused_tokens_are_unauthorized() {
    let backend = Backend::start([
        Reply::status(401),
        Reply::json(403, r#"{"error": {"code": "forbidden", "message": "no"}}"#),
        Reply::json(
            401,
            r#"{"error": {"code": "unauthorized", "message": "token superseded"}}"#,
        ),
    ])
    .await;
    let client = backend.client();

    let err = client.claim_run().await.unwrap_err();
    assert!(err.is_unauthorized() && !err.is_transient(), "{err:?}");
    assert_eq!(err.status(), Some(401));
    assert_eq!(err.call(), Some("POST /jobs/next"));

    let err = client.active_runs().await.unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    assert_eq!(err.status(), Some(403));

    let err = client
        .report_death(RUN_ID, &Secret::new(JOB_TOKEN), "died")
        .await
        .unwrap_err();
    assert!(err.is_unauthorized(), "{err:?}");
    assert_eq!(err.job_id(), Some(RUN_ID));
    assert_eq!(err.call(), Some("POST /jobs/{id}/status"));
    assert!(err.to_string().contains("token superseded"), "{err}");
    assert!(err.to_string().contains(RUN_ID), "{err}");
    assert_no_token(&err);
}

#[tokio::test]
async fn not_found_carries_the_backends_code_and_the_job() {
    let backend = Backend::start([Reply::json(404, ERROR)]).await;
    let err = backend.client().get_job(RUN_ID).await.unwrap_err();
    assert!(err.is_not_found() && !err.is_transient(), "{err:?}");
    assert_eq!(err.code(), Some("not_found"));
    assert_eq!(err.job_id(), Some(RUN_ID));
    assert_eq!(err.call(), Some("GET /jobs/{id}"));
    let text = err.to_string();
    assert!(
        text.contains("no job with that id") && text.contains(RUN_ID),
        "{text}"
    );
}

#[tokio::test]
async fn a_terminal_job_is_a_conflict() {
    let backend = Backend::start([Reply::json(
        409,
        r#"{"error": {"code": "conflict", "message": "job is terminal"}}"#,
    )])
    .await;
    let err = backend
        .client()
        .report_death(RUN_ID, &Secret::new(JOB_TOKEN), "died")
        .await
        .unwrap_err();
    assert!(err.is_conflict() && !err.is_transient(), "{err:?}");
    assert_eq!(err.code(), Some("conflict"));
}

#[tokio::test]
async fn other_4xx_are_rejected_with_the_backends_words() {
    let backend = Backend::start([
        Reply::json(
            400,
            r#"{"error": {"code": "bad_request", "message": "job_ids must be a list"}}"#,
        ),
        Reply::text(422, "unprocessable"),
    ])
    .await;
    let client = backend.client();

    let err = client.renew_leases(Lane::Run, &[RUN_ID]).await.unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Rejected, "{err:?}");
    assert_eq!(err.call(), Some("POST /jobs/leases"));
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.code(), Some("bad_request"));
    assert_eq!(err.message(), Some("job_ids must be a list"));
    assert!(!err.is_transient());

    let err = client.report_lost(RUN_ID, "gone").await.unwrap_err();
    assert!(
        err.kind() == BackendErrorKind::Rejected && err.status() == Some(422),
        "{err:?}"
    );
    assert!(err.to_string().contains("unprocessable"), "{err}");
}

#[tokio::test]
async fn server_errors_are_transient() {
    let backend = Backend::start([
        Reply::json(
            500,
            r#"{"error": {"code": "internal", "message": "database down"}}"#,
        ),
        Reply::text(502, "Bad Gateway"),
    ])
    .await;
    let client = backend.client();

    let err = client.active_publishes().await.unwrap_err();
    assert!(
        err.kind() == BackendErrorKind::Server && err.status() == Some(500),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(err.code(), Some("internal"));

    let err = client.claim_publish().await.unwrap_err();
    assert!(
        err.kind() == BackendErrorKind::Server && err.status() == Some(502),
        "{err:?}"
    );
    assert!(err.to_string().contains("Bad Gateway"), "{err}");
    // A 5xx is not retried: one request each.
    assert_eq!(backend.seen().len(), 2);
}

#[tokio::test]
async fn retry_after_is_honoured_then_the_call_succeeds() {
    let backend = Backend::start([
        Reply::status(429).retry_after("1"),
        Reply::status(503).retry_after("2"),
        Reply::json(200, CLAIM_RUN),
    ])
    .await;
    let (client, sleeper) = backend.recording_client();
    let run = client.claim_run().await.unwrap().expect("a run");
    assert_eq!(run.id, RUN_ID);
    assert_eq!(
        sleeper.waits(),
        [Duration::from_secs(1), Duration::from_secs(2)]
    );
    let seen = backend.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.path == "/jobs/next"));
}

#[tokio::test]
async fn unavailable_after_two_retries_with_the_wait_capped() {
    let backend = Backend::start([
        Reply::status(503).retry_after("120"),
        Reply::status(503).retry_after("120"),
        Reply::status(503).retry_after("120"),
        Reply::json(200, LEASE_RENEWAL),
    ])
    .await;
    let (client, sleeper) = backend.recording_client();
    let err = client.renew_leases(Lane::Run, &[RUN_ID]).await.unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err:?}");
    assert_eq!(err.call(), Some("POST /jobs/leases"));
    assert_eq!(err.status(), Some(503));
    assert_eq!(err.attempts(), 3);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)));
    assert!(err.is_transient());
    // Capped at the default 30 s; the third answer is not waited on.
    assert_eq!(
        sleeper.waits(),
        [Duration::from_secs(30), Duration::from_secs(30)]
    );
    assert_eq!(backend.seen().len(), 3, "at most two retries");
    // Every attempt sent the same body.
    assert!(
        backend
            .seen()
            .iter()
            .all(|s| s.json() == json!({"job_ids": [RUN_ID]}))
    );
}

#[tokio::test]
async fn without_retry_after_the_default_wait_is_used() {
    let backend = Backend::start([
        Reply::status(429),
        Reply::status(429).retry_after("later"),
        Reply::status(204),
    ])
    .await;
    let (client, sleeper) = backend.recording_client();
    let client = client.with_retry_policy(RetryPolicy {
        max_retries: 2,
        max_wait: Duration::from_secs(30),
        default_wait: Duration::from_millis(250),
    });
    assert!(client.claim_publish().await.unwrap().is_none());
    // The default wait, each up to a fifth shorter (jitter).
    let waits = sleeper.waits();
    assert_eq!(waits.len(), 2, "{waits:?}");
    for wait in waits {
        assert!(
            (Duration::from_millis(200)..=Duration::from_millis(250)).contains(&wait),
            "{wait:?}"
        );
    }
}

#[tokio::test]
async fn the_real_sleeper_waits_between_attempts() {
    let backend = Backend::start([
        Reply::status(503).retry_after("1"),
        Reply::status(503).retry_after("1"),
        Reply::status(503).retry_after("1"),
    ])
    .await;
    let client = backend.client().with_retry_policy(RetryPolicy {
        max_retries: 2,
        max_wait: Duration::from_millis(40),
        default_wait: Duration::from_millis(40),
    });
    let start = Instant::now();
    let err = client.active_runs().await.unwrap_err();
    assert!(
        err.kind() == BackendErrorKind::Unavailable && err.attempts() == 3,
        "{err:?}"
    );
    assert!(start.elapsed() >= Duration::from_millis(80), "did not wait");
    assert!(start.elapsed() < Duration::from_secs(1), "not capped");
}

#[tokio::test]
async fn a_backend_that_never_answers_times_out() {
    let backend = Backend::start([Reply::hang()]).await;
    let client = client_for(&backend.url, Duration::from_millis(200));
    let start = Instant::now();
    let err = client.report_lost(RUN_ID, "gone").await.unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        err.kind() == BackendErrorKind::Timeout
            && err.timeout() == Some(Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(err.job_id(), Some(RUN_ID));
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let addr = tcab_testkit::http::closed_addr();
    let client = client_for(&format!("http://{addr}"), Duration::from_secs(2));
    let err = client.claim_run().await.unwrap_err();
    assert!(
        err.kind() == BackendErrorKind::Transport,
        "expected Transport, got {err:?}"
    );
    assert!(err.is_transient());
    assert!(err.source().is_some(), "the transport error is the source");
    // The message does not repeat its source.
    let source = err.source().unwrap().to_string();
    assert!(!err.to_string().contains(&source), "{err}");
    assert_no_token(&err);
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_malformed() {
    let backend = Backend::start([
        Reply::text(200, "<html>hello</html>"),
        Reply::status(200),
        Reply::json(200, &format!("{ACTIVE_RUNS} trailing")),
    ])
    .await;
    let client = backend.client();

    let err = client.claim_run().await.unwrap_err();
    assert!(err.is_malformed() && !err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");

    let err = client.active_runs().await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    assert!(err.to_string().contains("empty body"), "{err}");

    let err = client.active_runs().await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    assert!(err.to_string().contains("trailing"), "{err}");
}

#[tokio::test]
async fn a_missing_or_mistyped_field_is_named_by_its_path() {
    let backend = Backend::start([
        Reply::json(200, &edit(CLAIM_RUN, "/job/lease_expires_at", None)),
        Reply::json(
            200,
            &edit(ACTIVE_RUNS, "/jobs/1/state", Some(json!("zombie"))),
        ),
        Reply::json(200, &edit(LEASE_RENEWAL, "/now", Some(json!("yesterday")))),
    ])
    .await;
    let client = backend.client();

    let err = client.claim_run().await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("job") && text.contains("missing field `lease_expires_at`"),
        "{text}"
    );

    // One entry in a state this client does not know is skipped; the rest
    // of the list is judged.
    let active = client.active_runs().await.expect("the list stands");
    let listed: Vec<&str> = active.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        active.jobs.len() + 1,
        serde_json::from_str::<serde_json::Value>(ACTIVE_RUNS).unwrap()["jobs"]
            .as_array()
            .unwrap()
            .len(),
        "{listed:?}"
    );
    assert_eq!(active.skipped.len(), 1);
    assert_eq!(active.skipped[0].index, 1);
    assert!(active.skipped[0].id.is_some(), "its id was readable");
    assert!(
        active.skipped[0].why.contains("jobs[1].state"),
        "{:?}",
        active.skipped
    );

    let err = client
        .renew_leases(Lane::Run, &[] as &[&str])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("now:"), "{err}");
}

#[tokio::test]
async fn an_id_that_is_not_a_label_value_is_malformed() {
    let backend = Backend::start([
        Reply::json(200, &edit(CLAIM_RUN, "/job/id", Some(json!("bad/id")))),
        Reply::json(
            200,
            &edit(ACTIVE_RUNS, "/jobs/2/id", Some(json!("-starts-with-dash"))),
        ),
        Reply::json(
            200,
            &edit(CLAIM_PUBLISH, "/publish_job/id", Some(json!(""))),
        ),
        Reply::json(200, &edit(JOB_VIEW, "/id", Some(json!("another-job")))),
    ])
    .await;
    let client = backend.client();

    let err = client.claim_run().await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    assert!(err.to_string().contains("job.id"), "{err}");

    let active = client.active_runs().await.expect("the list stands");
    assert_eq!(active.skipped.len(), 1);
    assert_eq!(
        active.skipped[0].id, None,
        "an invalid id is not repeated as an id"
    );
    assert!(
        active.skipped[0].why.contains("jobs[2].id"),
        "{:?}",
        active.skipped
    );
    assert!(active.jobs.iter().all(|j| j.id != "-starts-with-dash"));

    let err = client.claim_publish().await.unwrap_err();
    assert!(err.to_string().contains("publish_job.id"), "{err}");

    // An answer about another job than the one asked about.
    let err = client.get_job(RUN_ID).await.unwrap_err();
    assert!(err.is_malformed(), "{err:?}");
    assert!(err.to_string().contains("another-job"), "{err}");
}

#[tokio::test]
async fn an_invalid_id_from_the_caller_is_never_sent() {
    let backend = Backend::start([]).await;
    let client = backend.client();
    for bad in ["", "a/../b", "has space", &"x".repeat(64)] {
        let err = client.get_job(bad).await.unwrap_err();
        assert!(
            err.kind() == BackendErrorKind::InvalidJobId && err.call() == Some("GET /jobs/{id}"),
            "{err:?}"
        );
        let err = client
            .report_death(bad, &Secret::new(JOB_TOKEN), "x")
            .await
            .unwrap_err();
        assert!(err.kind() == BackendErrorKind::InvalidJobId, "{err:?}");
    }
    let err = client
        .renew_leases(Lane::Publish, &[PUBLISH_ID, "no/slash"])
        .await
        .unwrap_err();
    assert!(err.kind() == BackendErrorKind::InvalidJobId, "{err:?}");
    assert!(backend.seen().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn tokens_never_reach_an_error() {
    let echo = |code: u16, token: &str| {
        Reply::json(
            code,
            &json!({"error": {"code": "x", "message": format!("token {token} refused")}})
                .to_string(),
        )
    };
    let backend = Backend::start([
        echo(401, SERVICE_TOKEN),
        echo(400, SERVICE_TOKEN),
        echo(500, SERVICE_TOKEN),
        echo(409, JOB_TOKEN),
        Reply::text(502, &format!("upstream said Bearer {JOB_TOKEN}")),
        // A claimed token of the wrong type: serde would quote the value.
        Reply::json(
            200,
            &edit(
                CLAIM_RUN,
                "/job/token",
                Some(json!(["tok_run_7d1f9a52c4e34b0f8a61"])),
            ),
        ),
        Reply::json(200, &edit(CLAIM_RUN, "/job/token", Some(json!("")))),
        Reply::status(503),
        Reply::status(503),
        Reply::status(503),
    ])
    .await;
    let (client, _) = backend.recording_client();
    let job_token = Secret::new(JOB_TOKEN);

    let mut errors = vec![
        client.claim_run().await.unwrap_err(),
        client.active_runs().await.unwrap_err(),
        client.claim_publish().await.unwrap_err(),
        client
            .report_death(RUN_ID, &job_token, "d")
            .await
            .unwrap_err(),
        client
            .report_death(RUN_ID, &job_token, "d")
            .await
            .unwrap_err(),
        client.claim_run().await.unwrap_err(),
        client.claim_run().await.unwrap_err(),
        client.active_publishes().await.unwrap_err(),
    ];
    assert!(errors[5].to_string().contains("job.token"), "{}", errors[5]);
    assert!(errors[6].to_string().contains("job.token"), "{}", errors[6]);
    assert!(
        errors[0].to_string().contains("<redacted>"),
        "{}",
        errors[0]
    );
    assert!(
        errors[4].to_string().contains("<redacted>"),
        "{}",
        errors[4]
    );

    // Transport and timeout errors too.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    errors.push(
        client_for(&dead, Duration::from_secs(2))
            .report_death(RUN_ID, &job_token, "d")
            .await
            .unwrap_err(),
    );
    let hanging = Backend::start([Reply::hang()]).await;
    errors.push(
        client_for(&hanging.url, Duration::from_millis(200))
            .report_death(RUN_ID, &job_token, "d")
            .await
            .unwrap_err(),
    );
    // A per-job token that cannot be a header value is not sent.
    errors.push(
        client
            .report_death(RUN_ID, &Secret::new(format!("{JOB_TOKEN}\n")), "d")
            .await
            .unwrap_err(),
    );
    assert!(
        errors.last().map(BackendError::kind) == Some(BackendErrorKind::InvalidToken),
        "{:?}",
        errors.last()
    );
    for err in &errors {
        assert_no_token(err);
    }
}

#[test]
fn the_client_debug_shows_the_base_url_only() {
    let client = client_for("http://backend.tcab:8080", Duration::from_secs(1));
    let debug = format!("{client:?}");
    assert!(debug.contains("http://backend.tcab:8080"), "{debug}");
    assert!(!debug.contains(SERVICE_TOKEN), "{debug}");
    assert_eq!(client.base_url(), "http://backend.tcab:8080");
    assert_eq!(client.timeout(), Duration::from_secs(1));
}

#[test]
fn a_client_is_not_built_from_bad_settings() {
    let token = || Secret::new(SERVICE_TOKEN);
    let second = Duration::from_secs(1);
    for (url, tok, timeout) in [
        ("not a url", token(), second),
        ("ftp://backend", token(), second),
        ("http://backend", Secret::new(""), second),
        ("http://backend", Secret::new("line\nbreak"), second),
        ("http://backend", token(), Duration::ZERO),
    ] {
        let err = BackendClient::new(url, tok, timeout).unwrap_err();
        assert!(err.kind() == BackendErrorKind::Config, "{url}: {err:?}");
        assert_no_token(&err);
    }
}

/// Only the contract's 200 body is a renewal: a 204, a body without `now`, or
/// a lease nobody asked for is a failed renewal (it must close the gate).
#[tokio::test]
async fn a_renewal_that_is_not_the_contracts_200_body_fails() {
    use axum::routing::post;
    let app = axum::Router::new()
        .route(
            "/jobs/leases",
            post(|| async { axum::http::StatusCode::NO_CONTENT }),
        )
        .route(
            "/publish-jobs/leases",
            post(|| async { axum::Json(serde_json::json!({"leases": []})) }),
        )
        .route(
            "/other/jobs/leases",
            post(|| async {
                axum::Json(serde_json::json!({"now": "2026-11-29T17:01:00Z",
                    "leases": [{"id": "never-asked", "lease_expires_at": "2026-11-29T17:03:00Z"}]}))
            }),
        )
        .route(
            "/other/publish-jobs/leases",
            post(|| async {
                (
                    axum::http::StatusCode::ACCEPTED,
                    axum::Json(serde_json::json!({"now": "2026-11-29T17:01:00Z", "leases": []})),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = |base: &str| {
        tcab_shared::backend::BackendClient::new(
            base,
            tcab_shared::Secret::new("svc-token-xyz"),
            std::time::Duration::from_secs(5),
        )
        .unwrap()
    };
    let err = client(&url)
        .renew_leases(Lane::Run, &["a"])
        .await
        .expect_err("204 is not a renewal");
    assert!(
        err.is_malformed() && err.to_string().contains("204"),
        "{err}"
    );
    let err = client(&url)
        .renew_leases(Lane::Publish, &[] as &[&str])
        .await
        .expect_err("a body without `now` is not the contract's");
    assert!(
        err.is_malformed() && err.to_string().contains("now"),
        "{err}"
    );
    let other = format!("{url}/other");
    // A lease nobody asked for is one odd entry: skipped and named, the
    // renewal itself stands (one entry must not close the gate).
    let renewal = client(&other)
        .renew_leases(Lane::Run, &["a"])
        .await
        .expect("a renewal with one odd entry");
    assert!(renewal.renewed.is_empty());
    assert_eq!(renewal.skipped.len(), 1);
    assert_eq!(renewal.skipped[0].id.as_deref(), Some("never-asked"));
    assert!(
        renewal.skipped[0].why.contains("was not asked for"),
        "{:?}",
        renewal.skipped
    );
    let err = client(&other)
        .renew_leases(Lane::Publish, &[] as &[&str])
        .await
        .expect_err("202 is not 200");
    assert!(
        err.is_malformed() && err.to_string().contains("202"),
        "{err}"
    );
}

// ---- the latency metric ----

/// How many attempts of `call` answered `status` (its outcome `outcome`)
/// the process's metrics hold.
fn attempts(call: &str, status: &str, outcome: &str) -> u64 {
    count(&format!(
        "tcab_dispatcher_backend_request_duration_seconds_count{{call=\"{call}\",status=\"{status}\",outcome=\"{outcome}\"}} "
    ))
}

/// How many calls of `call` failed for `reason`.
fn failures(call: &str, reason: &str) -> u64 {
    count(&format!(
        "tcab_dispatcher_backend_errors_total{{call=\"{call}\",reason=\"{reason}\"}} "
    ))
}

fn count(prefix: &str) -> u64 {
    let text = tcab_shared::metrics::Exporter::new(tcab_shared::metrics::common()).encode();
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0, |v| v.parse().expect("a count"))
}

/// Each HTTP attempt is timed under the call's name, its status and its
/// outcome: a retried 503 and the 200 after it are two attempts, a hung
/// backend a `timeout`, a refused connection `connect`; each call that
/// failed is counted by its reason. (Counts only grow, and other tests of
/// this binary may run alongside, so each is checked to grow by at least
/// what this test did.)
#[tokio::test]
async fn every_attempt_is_timed_by_call_status_and_outcome() {
    let before = |c, s, o| attempts(c, s, o);
    let (p503, p200) = (
        before("active_publishes", "503", "unavailable"),
        before("active_publishes", "200", "ok"),
    );
    let backend = Backend::start([
        Reply::status(503).retry_after("0"),
        Reply::json(200, ACTIVE_PUBLISHES),
    ])
    .await;
    let (client, _) = backend.recording_client();
    client
        .active_publishes()
        .await
        .expect("answered after a retry");
    assert!(attempts("active_publishes", "503", "unavailable") > p503);
    assert!(attempts("active_publishes", "200", "ok") > p200);

    let timeouts = before("report_publish_lost", "timeout", "timeout");
    let timed_out = failures("report_publish_lost", "timeout");
    let hung = Backend::start([Reply::hang()]).await;
    let client = client_for(&hung.url, Duration::from_millis(100));
    let err = client
        .report_publish_lost(PUBLISH_ID, "gone")
        .await
        .unwrap_err();
    assert!(err.kind() == BackendErrorKind::Timeout, "{err:?}");
    assert!(attempts("report_publish_lost", "timeout", "timeout") > timeouts);
    assert!(failures("report_publish_lost", "timeout") > timed_out);

    let refused = before("claim_publish", "connect", "connect");
    let unreachable = failures("claim_publish", "connect");
    let url = format!("http://{}", tcab_testkit::http::closed_addr());
    let err = client_for(&url, Duration::from_secs(2))
        .claim_publish()
        .await
        .unwrap_err();
    assert!(err.kind() == BackendErrorKind::Transport, "{err:?}");
    assert!(attempts("claim_publish", "connect", "connect") > refused);
    assert!(failures("claim_publish", "connect") > unreachable);

    // The labels hold the call's name and the status, never a path with an
    // id or a token.
    let text = tcab_shared::metrics::Exporter::new(tcab_shared::metrics::common()).encode();
    for secret in [SERVICE_TOKEN, PUBLISH_ID, "/publish-jobs"] {
        assert!(!text.contains(secret), "{secret} in the metrics:\n{text}");
    }
}

/// A renewal answer is checked against the ask whatever the ask's order:
/// every asked lease of a long answer is kept, the one nobody asked for is
/// skipped, and a `leases` that is not a list renews nothing.
#[tokio::test]
async fn a_long_renewal_is_matched_to_an_unsorted_ask() {
    use axum::routing::post;
    let app = axum::Router::new()
        .route(
            "/jobs/leases",
            post(|axum::Json(ask): axum::Json<serde_json::Value>| async move {
                let mut leases: Vec<serde_json::Value> = ask["job_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|id| serde_json::json!({"id": id, "lease_expires_at": "2026-11-29T17:03:00Z"}))
                    .collect();
                leases.push(serde_json::json!({"id": "stranger", "lease_expires_at": "2026-11-29T17:03:00Z"}));
                axum::Json(serde_json::json!({"now": "2026-11-29T17:01:00Z", "leases": leases}))
            }),
        )
        .route(
            "/publish-jobs/leases",
            post(|| async {
                axum::Json(serde_json::json!({"now": "2026-11-29T17:01:00Z", "leases": {"id": "p"}}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = BackendClient::new(
        &url,
        tcab_shared::Secret::new("svc-token-xyz"),
        std::time::Duration::from_secs(5),
    )
    .unwrap();
    let mut ask: Vec<String> = (0..1000).rev().map(|i| format!("r-{i}")).collect();
    let renewal = client.renew_leases(Lane::Run, &ask).await.unwrap();
    assert_eq!(renewal.renewed.len(), 1000);
    assert_eq!(
        ask[renewal.renewed[0]], "r-999",
        "the answer's order is kept"
    );
    let positions: std::collections::BTreeSet<usize> = renewal.renewed.iter().copied().collect();
    assert_eq!(positions.len(), 1000, "every asked id is renewed once");
    assert_eq!(renewal.skipped.len(), 1);
    assert_eq!(renewal.skipped[0].index, 1000);
    assert_eq!(renewal.skipped[0].id.as_deref(), Some("stranger"));
    // The planner's sorted ask is searched in place: same answer.
    ask.sort();
    let renewal = client.renew_leases(Lane::Run, &ask).await.unwrap();
    let renewed: Vec<&str> = renewal.renewed.iter().map(|&at| ask[at].as_str()).collect();
    assert_eq!(
        renewed, ask,
        "a sorted ask comes back in order, each id at its place"
    );
    assert_eq!(renewal.skipped.len(), 1);
    let renewal = client.renew_leases(Lane::Publish, &["p"]).await.unwrap();
    assert!(renewal.renewed.is_empty() && renewal.skipped.is_empty());
}
