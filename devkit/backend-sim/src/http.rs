//! The HTTP routes: authentication, body parsing and the mapping of
//! operation results to status codes. Errors are always
//! `{"error": {"code", "message"}}`.

use crate::model::{PublishState, RunState};
use crate::ops::{self, OpError};
use crate::sim::Sim;
use crate::wire::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", "unauthorized")
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Unauthorized => Self::unauthorized(),
            OpError::NotFound(m) => Self::new(StatusCode::NOT_FOUND, "not_found", m),
            OpError::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            OpError::BadRequest(m) => Self::bad_request(m),
            err @ (OpError::Db(_) | OpError::Internal(_)) => {
                tracing::error!(error = %err, "operation failed");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

fn ok<T: Serialize>(status: StatusCode, body: T) -> ApiResult {
    Ok((status, axum::Json(body)).into_response())
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn require_service(sim: &Sim, headers: &HeaderMap) -> Result<(), ApiError> {
    match bearer(headers) {
        Some(t) if sim.is_service_token(t) => Ok(()),
        _ => Err(ApiError::unauthorized()),
    }
}

/// The hash of the per-job token a request presents.
fn job_token_hash(headers: &HeaderMap) -> Result<String, ApiError> {
    bearer(headers)
        .map(ops::hash_token)
        .ok_or_else(ApiError::unauthorized)
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

/// The value of `state=` in a query string, if present.
fn state_param(query: Option<&str>) -> Result<Option<&str>, ApiError> {
    let Some(q) = query else { return Ok(None) };
    let mut state = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("state", v)) if !v.is_empty() => state = Some(v),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {pair:?}; only state=<state> is accepted"
                )));
            }
        }
    }
    Ok(state)
}

/// Builds the router. `test_clock` adds `POST /admin/clock/advance`.
pub(crate) fn router(sim: Arc<Sim>, test_clock: bool) -> Router {
    let mut router = Router::new()
        .route("/jobs", post(enqueue_run).get(list_runs))
        .route("/jobs/batch", post(enqueue_batch))
        .route("/jobs/next", post(claim_run))
        .route("/jobs/leases", post(renew_run_leases))
        .route("/jobs/active", get(active_runs))
        .route("/jobs/{id}", get(get_run))
        .route("/jobs/{id}/lost", post(report_lost))
        .route("/jobs/{id}/status", post(report_status))
        .route("/jobs/{id}/record", post(hold_record))
        .route("/publish-jobs", post(enqueue_publish).get(list_publishes))
        .route("/publish-jobs/next", post(claim_publish))
        .route("/publish-jobs/leases", post(renew_publish_leases))
        .route("/publish-jobs/active", get(active_publishes))
        .route("/publish-jobs/{id}", get(get_publish))
        .route("/publish-jobs/{id}/lost", post(report_publish_lost))
        .route("/publish-jobs/{id}/result", post(publish_result))
        .route("/harnesses/{name}", put(set_harness));
    if test_clock {
        router = router
            .route("/admin/clock/advance", post(advance_clock))
            .route("/admin/faults", post(add_fault).get(list_faults))
            .route("/admin/faults/clear", post(clear_faults))
            .route("/admin/history", get(audit_history))
            .route("/admin/calls", get(call_counts).post(call_counts_reset))
            .route("/admin/driven", post(seed_driven));
    }
    let faults = sim.faults.clone();
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        // Inside the fault layer, so a stalled request keeps its caller.
        .layer(middleware::from_fn_with_state(sim.clone(), with_caller))
        .layer(middleware::from_fn_with_state(faults, crate::faults::apply))
        .layer(middleware::from_fn(log_request))
        .with_state(sim)
}

/// Serves the request with its caller known to the operations (see
/// [`crate::audit`]).
async fn with_caller(State(sim): State<Arc<Sim>>, req: Request, next: Next) -> Response {
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    if let Some(route) = req.extensions().get::<axum::extract::MatchedPath>()
        && !route.as_str().starts_with("/admin/")
    {
        sim.calls
            .count(agent, &format!("{} {}", req.method(), route.as_str()));
    }
    let caller = crate::audit::Caller::new(req.method().as_str(), req.uri().path(), agent);
    crate::audit::CALLER.scope(caller, next.run(req)).await
}

/// Keeps a per-job call refused for its token, then passes the error on.
fn refused<T>(
    sim: &Sim,
    id: &str,
    token_hash: &str,
    result: Result<T, OpError>,
) -> Result<T, OpError> {
    if let Err(OpError::Unauthorized) = &result {
        sim.note_refusal(id, token_hash);
    }
    result
}

/// Logs each request at debug: method, path and status, never a header.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    tracing::debug!(
        %method,
        %path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

// ---- runs ----

async fn enqueue_run(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: EnqueueRun = parse(&body)?;
    let out = sim
        .run(move |tx, ctx| ops::enqueue_run(tx, ctx, &req))
        .await?;
    tracing::info!(id = %out.id, queue_seq = out.queue_seq, "run enqueued");
    ok(StatusCode::CREATED, out)
}

async fn enqueue_batch(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: EnqueueBatch = parse(&body)?;
    let out = sim
        .run(move |tx, ctx| ops::enqueue_batch(tx, ctx, &req))
        .await?;
    tracing::info!(count = out.ids.len(), "batch enqueued");
    ok(StatusCode::CREATED, out)
}

async fn list_runs(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let state = state_param(query.as_deref())?
        .map(|s| {
            RunState::parse(s).ok_or_else(|| ApiError::bad_request(format!("unknown state {s:?}")))
        })
        .transpose()?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, _| ops::list_runs(tx, state)).await?,
    )
}

async fn claim_run(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    match sim.run(ops::claim_run).await? {
        Some(claim) => {
            tracing::info!(id = %claim.job.id, attempt = claim.job.attempt, "run claimed");
            ok(StatusCode::OK, claim)
        }
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

async fn renew_run_leases(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: LeaseRequest = parse(&body)?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, ctx| ops::renew_run_leases(tx, ctx, &req))
            .await?,
    )
}

async fn active_runs(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(StatusCode::OK, sim.run(ops::active_runs).await?)
}

async fn get_run(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, _| ops::get_run(tx, &id)).await?,
    )
}

async fn report_lost(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: LostReport = parse(&body)?;
    let out = sim
        .run(move |tx, ctx| ops::report_lost(tx, ctx, &id, &req))
        .await?;
    tracing::info!(id = %out.id, ignored = out.ignored, state = %out.state, "run reported lost");
    ok(StatusCode::OK, out)
}

async fn report_status(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let token = job_token_hash(&headers)?;
    // The token is checked before the body, so a wrong token learns nothing.
    let parsed: Result<StatusReport, ApiError> = parse(&body);
    let (path_id, hash) = (id.clone(), token.clone());
    let out = sim
        .run(move |tx, ctx| {
            let req = match parsed {
                Ok(req) => req,
                Err(e) => {
                    crate::ops::check_run_token(tx, &id, &token)?;
                    return Err(OpError::BadRequest(e.message));
                }
            };
            ops::report_status(tx, ctx, &id, &token, &req)
        })
        .await;
    let out = refused(&sim, &path_id, &hash, out)?;
    tracing::info!(id = %out.id, state = %out.state, "status reported");
    ok(StatusCode::OK, out)
}

async fn hold_record(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let token = job_token_hash(&headers)?;
    let parsed: Result<RecordReport, ApiError> = parse(&body);
    let (path_id, hash) = (id.clone(), token.clone());
    let out = sim
        .run(move |tx, _| {
            let req = match parsed {
                Ok(req) => req,
                Err(e) => {
                    crate::ops::check_run_token(tx, &id, &token)?;
                    return Err(OpError::BadRequest(e.message));
                }
            };
            ops::hold_record(tx, &id, &token, &req)
        })
        .await;
    let out = refused(&sim, &path_id, &hash, out)?;
    tracing::info!(id = %out.id, "record held");
    ok(StatusCode::OK, out)
}

async fn set_harness(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: HarnessLimit = parse(&body)?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, _| ops::set_harness(tx, &name, &req))
            .await?,
    )
}

// ---- publishes ----

async fn enqueue_publish(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: EnqueuePublish = parse(&body)?;
    let out = sim
        .run(move |tx, ctx| ops::enqueue_publish(tx, ctx, &req))
        .await?;
    tracing::info!(id = %out.id, "publish enqueued");
    ok(StatusCode::CREATED, out)
}

async fn list_publishes(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let state = state_param(query.as_deref())?
        .map(|s| {
            PublishState::parse(s)
                .ok_or_else(|| ApiError::bad_request(format!("unknown state {s:?}")))
        })
        .transpose()?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, _| ops::list_publishes(tx, state)).await?,
    )
}

async fn claim_publish(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    match sim.run(ops::claim_publish).await? {
        Some(claim) => {
            tracing::info!(id = %claim.publish_job.id, "publish claimed");
            ok(StatusCode::OK, claim)
        }
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

async fn renew_publish_leases(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: LeaseRequest = parse(&body)?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, ctx| ops::renew_publish_leases(tx, ctx, &req))
            .await?,
    )
}

async fn active_publishes(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(StatusCode::OK, sim.run(ops::active_publishes).await?)
}

async fn get_publish(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(
        StatusCode::OK,
        sim.run(move |tx, _| ops::get_publish(tx, &id)).await?,
    )
}

async fn report_publish_lost(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: LostReport = parse(&body)?;
    let out = sim
        .run(move |tx, ctx| ops::report_publish_lost(tx, ctx, &id, &req))
        .await?;
    tracing::info!(id = %out.id, ignored = out.ignored, "publish reported lost");
    ok(StatusCode::OK, out)
}

async fn publish_result(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let token = job_token_hash(&headers)?;
    let parsed: Result<PublishResult, ApiError> = parse(&body);
    let (path_id, hash) = (id.clone(), token.clone());
    let out = sim
        .run(move |tx, ctx| {
            let req = match parsed {
                Ok(req) => req,
                Err(e) => {
                    crate::ops::check_publish_token(tx, &id, &token)?;
                    return Err(OpError::BadRequest(e.message));
                }
            };
            ops::publish_result(tx, ctx, &id, &token, &req)
        })
        .await;
    let out = refused(&sim, &path_id, &hash, out)?;
    tracing::info!(id = %out.id, state = %out.state, "publish result");
    ok(StatusCode::OK, out)
}

// ---- admin ----

async fn advance_clock(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: ClockAdvance = parse(&body)?;
    if !req.seconds.is_finite() || req.seconds < 0.0 || req.seconds > 1e9 {
        return Err(ApiError::bad_request(
            "seconds must be a number between 0 and 1e9",
        ));
    }
    sim.clock.advance_ms((req.seconds * 1000.0).round() as i64);
    let now = crate::clock::ts_from_ms(sim.clock.now_ms());
    tracing::info!(seconds = req.seconds, %now, "test clock advanced");
    ok(StatusCode::OK, ClockView { now })
}

async fn add_fault(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: crate::faults::FaultRequest = parse(&body)?;
    let what = format!("{:?} {:?} for {} s", req.mode, req.paths, req.seconds);
    sim.faults
        .add(req, std::time::Instant::now())
        .map_err(ApiError::bad_request)?;
    tracing::info!(fault = %what, "injected backend fault");
    ok(StatusCode::OK, serde_json::json!({"ok": true}))
}

async fn list_faults(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(StatusCode::OK, sim.faults.status(std::time::Instant::now()))
}

/// `GET /admin/history?after=N&limit=M`: history entries after position N
/// (default 0), at most M (default and maximum 100000), with the refusals.
/// `GET /admin/calls`: the calls served so far per caller `User-Agent` and
/// route (`{"tcab-admitter/0.1.0": {"POST /jobs/next": 12}}`).
async fn call_counts(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(StatusCode::OK, sim.calls.take(false))
}

/// `POST /admin/driven`: holds the given run and publish ids as claimed and
/// driven (see `ops::seed_driven`); answers with what it seeded.
async fn seed_driven(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    require_service(&sim, &headers)?;
    let req: SeedDriven = parse(&body)?;
    let seeded = sim
        .run(move |tx, ctx| ops::seed_driven(tx, ctx, &req))
        .await?;
    tracing::info!(
        runs = seeded.runs.len(),
        publish_jobs = seeded.publish_jobs.len(),
        "seeded driven jobs"
    );
    ok(
        StatusCode::OK,
        serde_json::json!({"runs": seeded.runs.len(), "publish_jobs": seeded.publish_jobs.len()}),
    )
}

/// `POST /admin/calls`: the same, and the counts start again from none.
async fn call_counts_reset(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    ok(StatusCode::OK, sim.calls.take(true))
}

async fn audit_history(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    require_service(&sim, &headers)?;
    let (mut after, mut limit) = (0i64, MAX_HISTORY_PAGE);
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "{key} must be a whole number >= 0, got {value:?}"
                    ))
                })
        };
        match key {
            "after" => after = number()?,
            "limit" => limit = number()?.min(MAX_HISTORY_PAGE),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {pair:?}; after=<seq> and limit=<n> are accepted"
                )));
            }
        }
    }
    let entries = sim
        .run(move |tx, _| Ok(crate::db::audit_history(tx, after, limit)?))
        .await?;
    ok(
        StatusCode::OK,
        crate::audit::HistoryDump {
            entries,
            refused: sim.refusals.all(),
        },
    )
}

/// The most history entries one `GET /admin/history` answers.
const MAX_HISTORY_PAGE: i64 = 100_000;

async fn clear_faults(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> ApiResult {
    require_service(&sim, &headers)?;
    sim.faults.clear();
    ok(StatusCode::OK, serde_json::json!({"ok": true}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn state_query() {
        assert_eq!(state_param(None).unwrap(), None);
        assert_eq!(state_param(Some("state=queued")).unwrap(), Some("queued"));
        assert!(state_param(Some("foo=bar")).is_err());
    }
}
