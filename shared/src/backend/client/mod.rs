//! The HTTP client of the backend contract (docs/backend-contract.md).
//!
//! One method per call the dispatcher makes. Each sends the service token as
//! a Bearer token (the per-job token for [`BackendClient::report_death`]),
//! bounds the whole exchange with the configured timeout, honours
//! `Retry-After` on 429/503 (bounded, at most [`RetryPolicy::max_retries`]
//! more attempts), and checks the answer against the contract: every field
//! present and well-typed, every job id a label value, and an answer about
//! one job about the job asked for. Failures are [`BackendError`]s.
//!
//! The client is cheap to clone (one shared connection pool). Its `Debug`
//! shows the base URL only; no token ever reaches a log or an error.
//!
//! The exchange itself (sending with retries, reading a bounded body,
//! turning a status into an error, parsing and checking the answer, timing
//! each attempt) is in [`exchange`].

mod exchange;

pub use exchange::{metric_call, retry_after};

use exchange::{bearer, bound_message};

use super::error::{BackendError, Call};
use super::types::{
    ActivePublish, ActivePublishes, ActiveRun, ActiveRuns, ClaimAnswer, ClaimedPublish, ClaimedRun,
    FailureKind, JobId, JobState, JobView, LostOutcome, LostReport, PoisonedClaim, PublishClaim,
    PublishOutcome, PublishResult, RenewedLeases, RunClaim, SkippedEntry, StatusAck, StatusReport,
};
use crate::clock::WallClock;
use crate::lane::{Lane, LaneSpec};
use crate::names::is_label_value;
use crate::retry::{Backoff, Retries, Sleeper, TokioSleeper};
use crate::secret::Secret;
use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::value::RawValue;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The `User-Agent` the client sends.
pub const USER_AGENT: &str = concat!("tcab-dispatcher/", env!("CARGO_PKG_VERSION"));

/// The longest answer body the client reads; a longer one is malformed.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The longest piece of a backend error message kept in an error.
const MAX_MESSAGE_CHARS: usize = 300;

/// The longest connect phase, whatever the request timeout.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a call answered 429 or 503 is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Further attempts after the first; 2 means at most three sends.
    pub max_retries: u32,
    /// The longest wait, whatever `Retry-After` says.
    pub max_wait: Duration,
    /// The wait when the answer carries no usable `Retry-After`.
    pub default_wait: Duration,
}

impl RetryPolicy {
    /// The retries of one call under this policy.
    fn retries(&self) -> Retries {
        Retries::new(
            Backoff::constant(self.default_wait, self.max_wait),
            self.max_retries,
        )
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            max_wait: Duration::from_secs(30),
            default_wait: Duration::from_secs(1),
        }
    }
}

/// The backend client. Cheap to clone.
#[derive(Clone)]
pub struct BackendClient {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    http: reqwest::Client,
    /// Absolute base URL without a trailing slash.
    base: String,
    service_token: Secret,
    timeout: Duration,
    retry: RetryPolicy,
    sleeper: Arc<dyn Sleeper>,
    /// What an HTTP-date `Retry-After` is judged against.
    clock: WallClock,
}

impl fmt::Debug for BackendClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendClient")
            .field("base_url", &self.inner.base)
            .finish_non_exhaustive()
    }
}

/// Counts a failed call in `tcab_dispatcher_backend_errors_total` by its
/// call and reason (each public call passes its result through here once).
fn counted<T>(result: Result<T, BackendError>) -> Result<T, BackendError> {
    if let Err(error) = &result
        && let Some(call) = error.call().and_then(metric_call)
    {
        crate::metrics::common().backend_error(call, error.kind().reason());
    }
    result
}

/// One call to make: what the retry loop and the status mapping need.
struct Request<'a> {
    call: Call,
    method: Method,
    path: String,
    job_id: Option<&'a str>,
    body: Option<Vec<u8>>,
    /// The per-job token, when the call takes one instead of the service token.
    job_token: Option<&'a Secret>,
}

/// A successful (2xx) answer.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

impl BackendClient {
    /// A client for the backend at `base_url` (absolute `http`/`https`, no
    /// credentials, query or fragment), authenticating with `service_token`,
    /// each call bounded by `timeout` (connect included). Installs the rustls
    /// ring provider if no provider is installed yet.
    pub fn new(
        base_url: &str,
        service_token: Secret,
        timeout: Duration,
    ) -> Result<Self, BackendError> {
        Self::with_user_agent(base_url, service_token, timeout, USER_AGENT)
    }

    /// [`BackendClient::new`], sending `agent` as the `User-Agent` (each
    /// binary names itself: [`crate::config::Binary::user_agent`]).
    pub fn with_user_agent(
        base_url: &str,
        service_token: Secret,
        timeout: Duration,
        agent: &str,
    ) -> Result<Self, BackendError> {
        let base = normalize_base_url(base_url)?;
        if service_token.is_empty() {
            return Err(BackendError::config("the service token is empty".into()));
        }
        if HeaderValue::from_str(&bearer(&service_token)).is_err() {
            return Err(BackendError::config(
                "the service token is not a valid HTTP header value".into(),
            ));
        }
        if timeout.is_zero() {
            return Err(BackendError::config(
                "the timeout must be longer than zero".into(),
            ));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(agent)
            .timeout(timeout)
            .connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| BackendError::config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                base,
                service_token,
                timeout,
                retry: RetryPolicy::default(),
                sleeper: Arc::new(TokioSleeper),
                clock: WallClock::system(),
            }),
        })
    }

    /// The same client with another retry policy.
    pub fn with_retry_policy(self, retry: RetryPolicy) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        inner.retry = retry;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The same client waiting between attempts with `sleeper`.
    pub fn with_sleeper(self, sleeper: Arc<dyn Sleeper>) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        inner.sleeper = sleeper;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// `POST /jobs/next`: claims the next claimable run; `None` on 204. An
    /// answer that breaks the contract is a [`BackendErrorKind::Malformed`]
    /// error (the admitter reads it with [`BackendClient::claim_run_answer`]).
    ///
    /// [`BackendErrorKind::Malformed`]: crate::backend::BackendErrorKind::Malformed
    pub async fn claim_run(&self) -> Result<Option<ClaimedRun>, BackendError> {
        counted(
            async {
                let Some((spec, answer)) = self.claim(Lane::Run).await? else {
                    return Ok(None);
                };
                let read = self.read_claim(spec.claim_call, spec.claim_key, &answer, open_run);
                read.map(Some).map_err(|(error, _)| error)
            }
            .await,
        )
    }

    /// `POST /publish-jobs/next`, as [`BackendClient::claim_run`] does.
    pub async fn claim_publish(&self) -> Result<Option<ClaimedPublish>, BackendError> {
        counted(
            async {
                let Some((spec, answer)) = self.claim(Lane::Publish).await? else {
                    return Ok(None);
                };
                let read = self.read_claim(spec.claim_call, spec.claim_key, &answer, open_publish);
                read.map(Some).map_err(|(error, _)| error)
            }
            .await,
        )
    }

    /// `POST /jobs/next`: claims the next claimable run; `None` on 204. A
    /// 200 whose body breaks the contract is [`ClaimAnswer::Poisoned`] (the
    /// backend committed the claim), not an error.
    pub async fn claim_run_answer(&self) -> Result<Option<ClaimAnswer<ClaimedRun>>, BackendError> {
        counted(
            async {
                let Some((spec, answer)) = self.claim(Lane::Run).await? else {
                    return Ok(None);
                };
                Ok(Some(answered(self.read_claim(
                    spec.claim_call,
                    spec.claim_key,
                    &answer,
                    open_run,
                ))))
            }
            .await,
        )
    }

    /// `POST /publish-jobs/next`: claims the next queued publish; `None` on
    /// 204; a 200 that breaks the contract is [`ClaimAnswer::Poisoned`].
    pub async fn claim_publish_answer(
        &self,
    ) -> Result<Option<ClaimAnswer<ClaimedPublish>>, BackendError> {
        counted(
            async {
                let Some((spec, answer)) = self.claim(Lane::Publish).await? else {
                    return Ok(None);
                };
                Ok(Some(answered(self.read_claim(
                    spec.claim_call,
                    spec.claim_key,
                    &answer,
                    open_publish,
                ))))
            }
            .await,
        )
    }

    /// Reads a claim's answer: the job when it fits the contract, else the
    /// malformed-answer error and what could be read of the answer
    /// (`<key>.id` and `<key>.token` when valid) beside why the rest is
    /// unusable.
    fn read_claim<W: serde::de::DeserializeOwned, T>(
        &self,
        call: Call,
        key: &str,
        answer: &Answer,
        open: impl FnOnce(W) -> (JobId, Secret, T),
    ) -> Result<T, (BackendError, PoisonedClaim)> {
        let checked = self.parse::<W>(call, None, answer).and_then(|wrapper| {
            let (id, token, job) = open(wrapper);
            self.check_id(call, None, answer, &format!("{key}.id"), &id)?;
            self.check_token(call, Some(&id), answer, &format!("{key}.token"), &token)?;
            Ok(job)
        });
        let error = match checked {
            Ok(job) => return Ok(job),
            Err(error) => error,
        };
        let value: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(key))
                .and_then(|job| job.get(name))
                .and_then(serde_json::Value::as_str)
        };
        let id = field("id").filter(|id| is_job_id(id)).map(str::to_owned);
        let token = field("token")
            .map(Secret::new)
            .filter(|t| !t.is_empty() && HeaderValue::from_str(&bearer(t)).is_ok());
        let reason = self.scrub(error.detail(), token.as_ref());
        let poisoned = PoisonedClaim {
            status: answer.status.as_u16(),
            id,
            token,
            reason,
            shape: value.as_ref().map_or_else(|| "not JSON".to_owned(), shape),
        };
        Err((error, poisoned))
    }

    /// `POST {jobs}/leases` of `lane` (`/jobs/leases`,
    /// `/publish-jobs/leases`): renews the leases of `ids`; the answer leaves
    /// out the ids that are not driven. What was renewed comes back as
    /// positions in `ids`, so no id is copied (a round renews every live Job).
    pub async fn renew_leases<S: AsRef<str> + Sync>(
        &self,
        lane: Lane,
        ids: &[S],
    ) -> Result<RenewedLeases, BackendError> {
        counted(self.renew(lane.spec(), ids).await)
    }

    async fn renew<S: AsRef<str> + Sync>(
        &self,
        spec: &LaneSpec,
        ids: &[S],
    ) -> Result<RenewedLeases, BackendError> {
        let (call, path) = (spec.leases_call, spec.leases_path);
        let job_ids: Vec<&str> = ids.iter().map(AsRef::as_ref).collect();
        for id in &job_ids {
            valid_input_id(call, id)?;
        }
        let body = to_body(&LeaseBody { job_ids: &job_ids });
        let answer = self.post(call, path.into(), None, Some(body)).await?;
        // Only the contract's 200 body is a renewal. A 204, another 2xx or a
        // body without `now` and `leases` renewed nothing we can trust, and a
        // renewal taken for a success when it was not lets a lease lapse
        // under a live Job.
        if answer.status != StatusCode::OK {
            return Err(BackendError::malformed(
                call,
                None,
                answer.status.as_u16(),
                format!(
                    "expected 200 with the renewed leases, got {}",
                    answer.status
                ),
            ));
        }
        // One odd entry must not fail the whole renewal (and close the
        // gate): it is skipped, counted as not renewed, and named.
        let raw: RawList = self.parse(call, None, &answer)?;
        // Each lease is read and matched in turn: no list of parsed leases
        // is held beside the body.
        let ask = Ask::new(&job_ids);
        let mut renewed = Vec::with_capacity(job_ids.len());
        let mut skipped = Vec::new();
        each_entry(raw.leases, |index, item| {
            let lease: LeaseEntry = match entry(index, item, "leases") {
                Ok(lease) => lease,
                Err(skip) => return skipped.push(skip),
            };
            match ask.position(&lease.id) {
                Some(position) => renewed.push(position),
                None => skipped.push(SkippedEntry {
                    index,
                    why: format!("leases[{index}].id: {:?} was not asked for", lease.id),
                    id: Some(lease.id.into_owned()),
                }),
            }
        });
        Ok(RenewedLeases {
            now: raw.now,
            renewed,
            skipped,
        })
    }

    /// `GET /jobs/active`: the runs the backend believes are driven. An
    /// entry that cannot be read (an unknown state, an invalid id) is left
    /// out and named in `skipped`, so the rest are judged.
    pub async fn active_runs(&self) -> Result<ActiveRuns, BackendError> {
        counted(
            async {
                const SPEC: &LaneSpec = Lane::Run.spec();
                const CALL: Call = SPEC.active_call;
                let answer = self.get(CALL, SPEC.active_path.into(), None).await?;
                let raw: RawList = self.parse(CALL, None, &answer)?;
                let (jobs, skipped) = entries::<ActiveRun>(raw.jobs, "jobs");
                Ok(ActiveRuns {
                    now: raw.now,
                    jobs,
                    skipped,
                })
            }
            .await,
        )
    }

    /// `GET /publish-jobs/active`: the publishes the backend believes are
    /// driven, read as [`BackendClient::active_runs`] reads runs.
    pub async fn active_publishes(&self) -> Result<ActivePublishes, BackendError> {
        counted(
            async {
                const SPEC: &LaneSpec = Lane::Publish.spec();
                const CALL: Call = SPEC.active_call;
                let answer = self.get(CALL, SPEC.active_path.into(), None).await?;
                let raw: RawList = self.parse(CALL, None, &answer)?;
                let (publish_jobs, skipped) =
                    entries::<ActivePublish>(raw.publish_jobs, "publish_jobs");
                Ok(ActivePublishes {
                    now: raw.now,
                    publish_jobs,
                    skipped,
                })
            }
            .await,
        )
    }

    /// `GET /jobs/{id}`: one run's state.
    pub async fn get_job(&self, id: &str) -> Result<JobView, BackendError> {
        counted(
            async {
                const CALL: Call = "GET /jobs/{id}";
                valid_input_id(CALL, id)?;
                let answer = self.get(CALL, format!("/jobs/{id}"), Some(id)).await?;
                let view: JobView = self.parse(CALL, Some(id), &answer)?;
                self.check_same_job(CALL, id, &answer, "id", &view.id)?;
                Ok(view)
            }
            .await,
        )
    }

    /// `POST /jobs/{id}/lost`: reports a run whose driver is gone.
    pub async fn report_lost(&self, id: &str, detail: &str) -> Result<LostOutcome, BackendError> {
        self.report_lost_in(Lane::Run, id, detail).await
    }

    /// `POST /publish-jobs/{id}/lost`: reports a publish whose publisher is gone.
    pub async fn report_publish_lost(
        &self,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        self.report_lost_in(Lane::Publish, id, detail).await
    }

    /// `POST {jobs}/{id}/lost` of `lane` (`/jobs/{id}/lost`,
    /// `/publish-jobs/{id}/lost`): reports a job whose Job is gone.
    pub async fn report_lost_in(
        &self,
        lane: Lane,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        counted(self.lost(lane.spec(), id, detail).await)
    }

    async fn lost(
        &self,
        spec: &LaneSpec,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        let call = spec.lost_call;
        valid_input_id(call, id)?;
        let path = format!("{}/{id}/lost", spec.jobs_path);
        let body = to_body(&LostReport {
            detail: detail.to_owned(),
        });
        let answer = self.post(call, path, Some(id), Some(body)).await?;
        let outcome: LostOutcome = self.parse(call, Some(id), &answer)?;
        self.check_same_job(call, id, &answer, "id", &outcome.id)?;
        if let Some(retry_id) = &outcome.retry_id {
            self.check_id(call, Some(id), &answer, "retry_id", retry_id)?;
        }
        Ok(outcome)
    }

    /// `POST /jobs/{id}/status` with the per-job `token`: the death report of
    /// a driver that failed before reporting (`failed`, `infrastructure`,
    /// `detail`). 401 means the token is no longer accepted, 409 that the job
    /// is already terminal.
    pub async fn report_death(
        &self,
        id: &str,
        token: &Secret,
        detail: &str,
    ) -> Result<StatusAck, BackendError> {
        self.report_failed_run(id, token, FailureKind::Infrastructure, detail)
            .await
    }

    /// `POST /jobs/{id}/status` with the per-job `token`: the run failed, as
    /// `kind` says: `Infrastructure` (a dead driver: the backend retries it)
    /// or `Agent` (the job's own failure, e.g. a claim whose request can
    /// never become a Job: not retried, so a bad request does not come back
    /// forever).
    pub async fn report_failed_run(
        &self,
        id: &str,
        token: &Secret,
        kind: FailureKind,
        detail: &str,
    ) -> Result<StatusAck, BackendError> {
        counted(
            async {
                const CALL: Call = "POST /jobs/{id}/status";
                valid_input_id(CALL, id)?;
                let body = to_body(&StatusReport {
                    state: JobState::Failed,
                    detail: Some(detail.to_owned()),
                    failure_kind: Some(kind),
                });
                let answer = self
                    .send(Request {
                        call: CALL,
                        method: Method::POST,
                        path: format!("/jobs/{id}/status"),
                        job_id: Some(id),
                        body: Some(body),
                        job_token: Some(token),
                    })
                    .await?;
                let ack: StatusAck = self.parse_scrubbing(CALL, Some(id), &answer, Some(token))?;
                self.check_same_job(CALL, id, &answer, "id", &ack.id)?;
                Ok(ack)
            }
            .await,
        )
    }

    /// `POST /publish-jobs/{id}/result` with the per-job `token`: a failed
    /// result (`outcome: failed`, `detail`), which the dispatcher sends for
    /// a claimed publish that cannot become a Job. 401 means the token is no
    /// longer accepted, 409 that the publish is no longer dispatched.
    pub async fn report_publish_failed(
        &self,
        id: &str,
        token: &Secret,
        detail: &str,
    ) -> Result<(), BackendError> {
        counted(
            async {
                const CALL: Call = "POST /publish-jobs/{id}/result";
                valid_input_id(CALL, id)?;
                let body = to_body(&PublishResult {
                    outcome: PublishOutcome::Failed,
                    detail: Some(detail.to_owned()),
                });
                self.send(Request {
                    call: CALL,
                    method: Method::POST,
                    path: format!("/publish-jobs/{id}/result"),
                    job_id: Some(id),
                    body: Some(body),
                    job_token: Some(token),
                })
                .await?;
                Ok(())
            }
            .await,
        )
    }

    async fn get(
        &self,
        call: Call,
        path: String,
        job_id: Option<&str>,
    ) -> Result<Answer, BackendError> {
        self.send(Request {
            call,
            method: Method::GET,
            path,
            job_id,
            body: None,
            job_token: None,
        })
        .await
    }

    /// A POST with the service token.
    async fn post(
        &self,
        call: Call,
        path: String,
        job_id: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, BackendError> {
        self.send(Request {
            call,
            method: Method::POST,
            path,
            job_id,
            body,
            job_token: None,
        })
        .await
    }

    /// Sends `lane`'s claim; `None` when the backend answers 204 (nothing
    /// claimable), else the answer beside the lane's constants to read it by.
    async fn claim(&self, lane: Lane) -> Result<Option<(&'static LaneSpec, Answer)>, BackendError> {
        let spec = lane.spec();
        let answer = self
            .post(spec.claim_call, spec.claim_path.into(), None, None)
            .await?;
        Ok((answer.status != StatusCode::NO_CONTENT).then_some((spec, answer)))
    }
}

/// A claim's answer read: the job, or what could be read of a poisoned one.
fn answered<T>(read: Result<T, (BackendError, PoisonedClaim)>) -> ClaimAnswer<T> {
    match read {
        Ok(job) => ClaimAnswer::Job(job),
        Err((_, poisoned)) => ClaimAnswer::Poisoned(poisoned),
    }
}

fn open_run(claim: RunClaim) -> (JobId, Secret, ClaimedRun) {
    let run = claim.job;
    (run.id.clone(), run.token.clone(), run)
}

fn open_publish(claim: PublishClaim) -> (JobId, Secret, ClaimedPublish) {
    let publish = claim.publish_job;
    (publish.id.clone(), publish.token.clone(), publish)
}

/// The most keys of one object, and the depth, a shape shows.
const SHAPE_KEYS: usize = 24;
const SHAPE_DEPTH: usize = 3;

/// The shape of a JSON answer: its keys and the types of their values,
/// never a value (`{job: {id: string, token: string, launch_request: {..}}}`).
pub fn shape(value: &serde_json::Value) -> String {
    fn walk(value: &serde_json::Value, depth: usize, out: &mut String) {
        use serde_json::Value;
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(_) => out.push_str("bool"),
            Value::Number(_) => out.push_str("number"),
            Value::String(_) => out.push_str("string"),
            Value::Array(items) => out.push_str(&format!("array({})", items.len())),
            Value::Object(_) if depth >= SHAPE_DEPTH => out.push_str("{..}"),
            Value::Object(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().enumerate() {
                    if i == SHAPE_KEYS {
                        out.push_str(", ..");
                        break;
                    }
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&bound_message(k));
                    out.push_str(": ");
                    walk(v, depth + 1, out);
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    walk(value, 0, &mut out);
    out
}

/// Whether `id` can be a backend job id: a non-empty label value.
pub fn is_job_id(id: &str) -> bool {
    !id.is_empty() && is_label_value(id)
}

fn valid_input_id(call: Call, id: &str) -> Result<(), BackendError> {
    if is_job_id(id) {
        Ok(())
    } else {
        Err(BackendError::invalid_job_id(call, bound_message(id)))
    }
}

/// Checks and normalizes the base URL: absolute http(s), no credentials,
/// query or fragment; returned without a trailing slash.
fn normalize_base_url(raw: &str) -> Result<String, BackendError> {
    let shown = if raw.contains('@') {
        "<a URL with credentials>".to_owned()
    } else {
        format!("{raw:?}")
    };
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| {
        BackendError::config(format!("base URL {shown} is not an absolute URL: {e}"))
    })?;
    let problem = if !matches!(url.scheme(), "http" | "https") {
        Some("its scheme is not http or https")
    } else if !url.username().is_empty() || url.password().is_some() {
        Some("it carries credentials (the service token is sent as a Bearer token)")
    } else if url.query().is_some() || url.fragment().is_some() {
        Some("it has a query or a fragment")
    } else if url.host_str().is_none_or(str::is_empty) {
        Some("it has no host")
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(BackendError::config(format!("base URL {shown}: {problem}")));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// The body of a lease renewal, borrowing the ids (the wire form of
/// [`LeaseRequest`](super::types::LeaseRequest)).
#[derive(serde::Serialize)]
struct LeaseBody<'a> {
    job_ids: &'a [&'a str],
}

/// The ids of a renewal's ask, looked up by value: the planner sends them
/// sorted, so a lookup is a binary search of the ask itself; an unsorted
/// ask is indexed once. 10,000 answered leases are never 10,000 scans.
enum Ask<'a> {
    Sorted(&'a [&'a str]),
    Indexed(Vec<(&'a str, usize)>),
}

impl<'a> Ask<'a> {
    fn new(ids: &'a [&'a str]) -> Self {
        if ids.is_sorted() {
            return Ask::Sorted(ids);
        }
        let mut index: Vec<(&str, usize)> = ids.iter().copied().zip(0..).collect();
        index.sort_unstable();
        Ask::Indexed(index)
    }

    /// The position in the ask of `id`, if it was asked for.
    fn position(&self, id: &str) -> Option<usize> {
        match self {
            Ask::Sorted(ids) => ids.binary_search(&id).ok(),
            Ask::Indexed(index) => index
                .binary_search_by(|(asked, _)| (*asked).cmp(id))
                .ok()
                .map(|at| index[at].1),
        }
    }
}

/// One entry of a renewal answer, its id borrowed from the body. The
/// expiry is read only to check the entry is a lease.
#[derive(serde::Deserialize)]
struct LeaseEntry<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[allow(dead_code)]
    lease_expires_at: jiff::Timestamp,
}

/// Serializes a request body. The wire types hold plain strings and enums,
/// so serialization cannot fail; an empty object stands in if it ever did.
fn to_body<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

/// A list answer read loosely: the backend's `now` and each list's entries
/// as raw JSON borrowed from the body, so one entry that does not fit is
/// skipped, not the whole answer, and a list of 10,000 entries is never
/// held as a tree of values (one entry at a time is read into its type).
#[derive(Debug, serde::Deserialize)]
struct RawList<'a> {
    now: jiff::Timestamp,
    #[serde(borrow, default)]
    leases: Option<&'a RawValue>,
    #[serde(borrow, default)]
    jobs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    publish_jobs: Option<&'a RawValue>,
}

/// Calls `each` with every entry of a list field, in order, as raw JSON
/// borrowed from the body (none when absent or not a list), without
/// collecting them first.
fn each_entry<'de>(list: Option<&'de RawValue>, each: impl FnMut(usize, &'de RawValue)) {
    struct Each<F>(F);
    impl<'de, F: FnMut(usize, &'de RawValue)> serde::de::Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            let mut index = 0;
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                (self.0)(index, item);
                index += 1;
            }
            Ok(())
        }
    }
    if let Some(raw) = list {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        // Not a list: no entry (the body as a whole was read already).
        let _ = serde::Deserializer::deserialize_seq(&mut de, Each(each));
    }
}

/// An entry type with an id checked as a job id.
trait WithId {
    fn id(&self) -> &str;
}

impl WithId for LeaseEntry<'_> {
    fn id(&self) -> &str {
        &self.id
    }
}

impl WithId for ActiveRun {
    fn id(&self) -> &str {
        &self.id
    }
}

impl WithId for ActivePublish {
    fn id(&self) -> &str {
        &self.id
    }
}

/// The entries of list `field` (none when absent or not a list) read as
/// `T`, and the ones skipped with why. Read straight from the body into a
/// vector sized by a first pass that only counts them: no vector of raw
/// entries, no second copy (at 100,000 entries those were 2 and 5 MB
/// beside the body).
fn entries<'de, T: serde::Deserialize<'de> + WithId>(
    list: Option<&'de RawValue>,
    field: &str,
) -> (Vec<T>, Vec<SkippedEntry>) {
    let mut count = 0;
    each_entry(list, |_, _| count += 1);
    let mut read = Vec::with_capacity(count);
    let mut skipped = Vec::new();
    each_entry(list, |index, item| match entry(index, item, field) {
        Ok(entry) => read.push(entry),
        Err(skip) => skipped.push(skip),
    });
    (read, skipped)
}

/// Entry `index` of list `field` read as `T` (with a valid job id), or
/// why it is skipped.
fn entry<'de, T: serde::Deserialize<'de> + WithId>(
    index: usize,
    item: &'de RawValue,
    field: &str,
) -> Result<T, SkippedEntry> {
    let mut de = serde_json::Deserializer::from_str(item.get());
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(entry) if is_job_id(entry.id()) => Ok(entry),
        Ok(_) => Err(SkippedEntry {
            index,
            id: None,
            why: format!("{field}[{index}].id: not a valid job id"),
        }),
        Err(error) => Err(SkippedEntry {
            index,
            id: readable_id(item),
            why: format!("{field}[{index}].{}: {}", error.path(), error.inner()),
        }),
    }
}

/// The id of an entry that could not be read as a whole, when it has a
/// valid one (only for naming the skipped entry).
fn readable_id(item: &RawValue) -> Option<JobId> {
    serde_json::from_str::<serde_json::Value>(item.get())
        .ok()?
        .get("id")
        .and_then(serde_json::Value::as_str)
        .filter(|id| is_job_id(id))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn base_urls_are_checked_and_normalized() {
        assert_eq!(
            normalize_base_url("http://backend.tcab:8080").unwrap(),
            "http://backend.tcab:8080"
        );
        assert_eq!(
            normalize_base_url("https://h/api/").unwrap(),
            "https://h/api"
        );
        for bad in [
            "backend:8080",
            "ftp://h",
            "http://user:pw@h",
            "http://h/?a=b",
            "",
        ] {
            let err = normalize_base_url(bad).unwrap_err();
            assert!(
                err.kind() == crate::backend::BackendErrorKind::Config,
                "{bad}: {err}"
            );
            assert!(!err.to_string().contains("pw"), "{err}");
        }
    }

    #[test]
    fn a_shape_shows_keys_and_types_never_values() {
        let v = serde_json::json!({"job": {"id": "a", "token": "tok-secret", "n": 3,
            "launch_request": {"deep": {"deeper": 1}}, "tags": [1, 2], "x": null, "b": true}});
        let s = shape(&v);
        assert_eq!(
            s,
            "{job: {b: bool, id: string, launch_request: {deep: {..}}, n: number, tags: array(2), token: string, x: null}}"
        );
        assert!(!s.contains("tok-secret"));
        assert_eq!(shape(&serde_json::json!("x")), "string");
    }

    #[test]
    fn job_ids_are_non_empty_label_values() {
        assert!(is_job_id("0d6f2c1e-5b7a-4a57-9d0e-2b3f4c5d6e7f"));
        assert!(is_job_id("A.b_c-9"));
        for bad in ["", "-a", "a/b", "a b", "../x", &"a".repeat(64)] {
            assert!(!is_job_id(bad), "{bad}");
        }
    }
}
