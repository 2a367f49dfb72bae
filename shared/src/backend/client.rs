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

use super::error::{BackendError, BackendErrorKind, Call};
use super::types::{
    ActivePublishes, ActiveRuns, ClaimedPublish, ClaimedRun, FailureKind, JobId, JobState, JobView,
    LeaseRenewal, LeaseRequest, LostOutcome, LostReport, PublishClaim, RunClaim, StatusAck,
    StatusReport,
};
use crate::clock::WallClock;
use crate::metrics::BackendStatus;
use crate::names::is_label_value;
use crate::retry::{Backoff, Retries, Sleeper, TokioSleeper};
use crate::secret::Secret;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
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
            .user_agent(USER_AGENT)
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

    /// `POST /jobs/next`: claims the next claimable run; `None` on 204.
    pub async fn claim_run(&self) -> Result<Option<ClaimedRun>, BackendError> {
        const CALL: Call = "POST /jobs/next";
        let Some(answer) = self.claim(CALL, "/jobs/next").await? else {
            return Ok(None);
        };
        let claim: RunClaim = self.parse(CALL, None, &answer)?;
        let run = claim.job;
        self.check_id(CALL, None, &answer, "job.id", &run.id)?;
        self.check_token(CALL, Some(&run.id), &answer, "job.token", &run.token)?;
        Ok(Some(run))
    }

    /// `POST /publish-jobs/next`: claims the next queued publish; `None` on 204.
    pub async fn claim_publish(&self) -> Result<Option<ClaimedPublish>, BackendError> {
        const CALL: Call = "POST /publish-jobs/next";
        let Some(answer) = self.claim(CALL, "/publish-jobs/next").await? else {
            return Ok(None);
        };
        let claim: PublishClaim = self.parse(CALL, None, &answer)?;
        let publish = claim.publish_job;
        self.check_id(CALL, None, &answer, "publish_job.id", &publish.id)?;
        self.check_token(
            CALL,
            Some(&publish.id),
            &answer,
            "publish_job.token",
            &publish.token,
        )?;
        Ok(Some(publish))
    }

    /// `POST /jobs/leases`: renews the leases of `ids`; the answer leaves out
    /// the ids that are not driven.
    pub async fn renew_run_leases(&self, ids: &[JobId]) -> Result<LeaseRenewal, BackendError> {
        self.renew("POST /jobs/leases", "/jobs/leases", ids).await
    }

    /// `POST /publish-jobs/leases`: renews the leases of the publishes `ids`.
    pub async fn renew_publish_leases(&self, ids: &[JobId]) -> Result<LeaseRenewal, BackendError> {
        self.renew("POST /publish-jobs/leases", "/publish-jobs/leases", ids)
            .await
    }

    async fn renew(
        &self,
        call: Call,
        path: &str,
        ids: &[JobId],
    ) -> Result<LeaseRenewal, BackendError> {
        for id in ids {
            valid_input_id(call, id)?;
        }
        let body = to_body(&LeaseRequest {
            job_ids: ids.to_vec(),
        });
        let answer = self
            .send(Request {
                call,
                method: Method::POST,
                path: path.into(),
                job_id: None,
                body: Some(body),
                job_token: None,
            })
            .await?;
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
        let renewal: LeaseRenewal = self.parse(call, None, &answer)?;
        for (i, lease) in renewal.leases.iter().enumerate() {
            let field = format!("leases[{i}].id");
            self.check_id(call, None, &answer, &field, &lease.id)?;
            if !ids.contains(&lease.id) {
                return Err(BackendError::malformed(
                    call,
                    None,
                    answer.status.as_u16(),
                    format!("{field}: {:?} was not asked for", lease.id),
                ));
            }
        }
        Ok(renewal)
    }

    /// `GET /jobs/active`: the runs the backend believes are driven.
    pub async fn active_runs(&self) -> Result<ActiveRuns, BackendError> {
        const CALL: Call = "GET /jobs/active";
        let answer = self.get(CALL, "/jobs/active".into(), None).await?;
        let active: ActiveRuns = self.parse(CALL, None, &answer)?;
        for (i, run) in active.jobs.iter().enumerate() {
            self.check_id(CALL, None, &answer, &format!("jobs[{i}].id"), &run.id)?;
        }
        Ok(active)
    }

    /// `GET /publish-jobs/active`: the publishes the backend believes are driven.
    pub async fn active_publishes(&self) -> Result<ActivePublishes, BackendError> {
        const CALL: Call = "GET /publish-jobs/active";
        let answer = self.get(CALL, "/publish-jobs/active".into(), None).await?;
        let active: ActivePublishes = self.parse(CALL, None, &answer)?;
        for (i, publish) in active.publish_jobs.iter().enumerate() {
            self.check_id(
                CALL,
                None,
                &answer,
                &format!("publish_jobs[{i}].id"),
                &publish.id,
            )?;
        }
        Ok(active)
    }

    /// `GET /jobs/{id}`: one run's state.
    pub async fn get_job(&self, id: &str) -> Result<JobView, BackendError> {
        const CALL: Call = "GET /jobs/{id}";
        valid_input_id(CALL, id)?;
        let answer = self.get(CALL, format!("/jobs/{id}"), Some(id)).await?;
        let view: JobView = self.parse(CALL, Some(id), &answer)?;
        self.check_same_job(CALL, id, &answer, "id", &view.id)?;
        Ok(view)
    }

    /// `POST /jobs/{id}/lost`: reports a run whose driver is gone.
    pub async fn report_lost(&self, id: &str, detail: &str) -> Result<LostOutcome, BackendError> {
        self.lost(
            "POST /jobs/{id}/lost",
            format!("/jobs/{id}/lost"),
            id,
            detail,
        )
        .await
    }

    /// `POST /publish-jobs/{id}/lost`: reports a publish whose publisher is gone.
    pub async fn report_publish_lost(
        &self,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        self.lost(
            "POST /publish-jobs/{id}/lost",
            format!("/publish-jobs/{id}/lost"),
            id,
            detail,
        )
        .await
    }

    async fn lost(
        &self,
        call: Call,
        path: String,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        valid_input_id(call, id)?;
        let body = to_body(&LostReport {
            detail: detail.to_owned(),
        });
        let answer = self
            .send(Request {
                call,
                method: Method::POST,
                path,
                job_id: Some(id),
                body: Some(body),
                job_token: None,
            })
            .await?;
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
        const CALL: Call = "POST /jobs/{id}/status";
        valid_input_id(CALL, id)?;
        let body = to_body(&StatusReport {
            state: JobState::Failed,
            detail: Some(detail.to_owned()),
            failure_kind: Some(FailureKind::Infrastructure),
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

    /// Sends `req`, retrying on 429/503 as the policy allows, and maps any
    /// non-2xx answer to its error.
    /// Sends a claim; `None` when the backend answers 204 (nothing claimable).
    async fn claim(&self, call: Call, path: &str) -> Result<Option<Answer>, BackendError> {
        let answer = self
            .send(Request {
                call,
                method: Method::POST,
                path: path.into(),
                job_id: None,
                body: None,
                job_token: None,
            })
            .await?;
        Ok((answer.status != StatusCode::NO_CONTENT).then_some(answer))
    }

    async fn send(&self, req: Request<'_>) -> Result<Answer, BackendError> {
        let inner = &*self.inner;
        let url = format!("{}{}", inner.base, req.path);
        let token = req.job_token.unwrap_or(&inner.service_token);
        let job_id = req.job_id.map(str::to_owned);
        let mut auth = HeaderValue::from_str(&bearer(token))
            .map_err(|_| BackendError::invalid_token(req.call, job_id.clone()))?;
        auth.set_sensitive(true);

        let mut retries = inner.retry.retries();
        loop {
            let mut builder = inner
                .http
                .request(req.method.clone(), &url)
                .header(AUTHORIZATION, auth.clone())
                .header(ACCEPT, "application/json");
            builder = match &req.body {
                Some(body) => builder
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.clone()),
                None if req.method == Method::POST => builder.body(Vec::new()),
                None => builder,
            };
            let started = tokio::time::Instant::now();
            let attempt = Attempt::new(req.call, started);
            let response = match builder.send().await {
                Ok(response) => response,
                Err(e) => return Err(attempt.failed(self.transport_error(req.call, &job_id, e))),
            };
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
            {
                let advertised = retry_after(response.headers(), inner.clock.now());
                drop(response);
                attempt.answered(status);
                let Some(wait) = retries.failed(advertised) else {
                    let attempts = retries.failures();
                    tracing::warn!(
                        call = req.call,
                        job_id = req.job_id,
                        status = status.as_u16(),
                        attempts,
                        "backend unavailable, giving up"
                    );
                    return Err(BackendError::unavailable(
                        req.call,
                        job_id,
                        status.as_u16(),
                        attempts,
                        advertised,
                    ));
                };
                tracing::info!(
                    call = req.call,
                    job_id = req.job_id,
                    status = status.as_u16(),
                    attempt = retries.failures(),
                    wait_ms = wait.as_millis() as u64,
                    "backend unavailable, retrying after Retry-After"
                );
                inner.sleeper.sleep(wait).await;
                continue;
            }
            let body = match read_body(response).await {
                Ok(body) => {
                    attempt.answered(status);
                    body
                }
                Err(BodyError::TooLong) => {
                    attempt.answered(status);
                    return Err(BackendError::malformed(
                        req.call,
                        job_id.clone(),
                        status.as_u16(),
                        format!("answer body longer than {MAX_BODY_BYTES} bytes"),
                    ));
                }
                Err(BodyError::Http(e)) => {
                    return Err(attempt.failed(self.transport_error(req.call, &job_id, e)));
                }
            };
            tracing::debug!(
                call = req.call,
                job_id = req.job_id,
                status = status.as_u16(),
                attempts = retries.failures() + 1,
                "backend answered"
            );
            if status.is_success() {
                return Ok(Answer { status, body });
            }
            return Err(self.status_error(req.call, job_id, status, &body, req.job_token));
        }
    }

    fn transport_error(
        &self,
        call: Call,
        job_id: &Option<String>,
        e: reqwest::Error,
    ) -> BackendError {
        if e.is_timeout() {
            BackendError::timed_out(call, job_id.clone(), self.inner.timeout)
        } else {
            BackendError::transport(call, job_id.clone(), e)
        }
    }

    /// The error for a non-2xx answer other than 429/503.
    fn status_error(
        &self,
        call: Call,
        job_id: Option<String>,
        status: StatusCode,
        body: &[u8],
        job_token: Option<&Secret>,
    ) -> BackendError {
        let (code, message) = error_words(body);
        let scrub = |s: Option<String>| s.map(|s| self.scrub(&s, job_token));
        let (code, message) = (scrub(code), scrub(message));
        let status_u16 = status.as_u16();
        match status_u16 {
            401 | 403 => BackendError::answered(
                BackendErrorKind::Unauthorized,
                call,
                job_id,
                status_u16,
                code,
                message,
            ),
            404 => {
                BackendError::answered(BackendErrorKind::NotFound, call, job_id, 404, code, message)
            }
            409 => {
                BackendError::answered(BackendErrorKind::Conflict, call, job_id, 409, code, message)
            }
            400..=499 => BackendError::answered(
                BackendErrorKind::Rejected,
                call,
                job_id,
                status_u16,
                code,
                message,
            ),
            500..=599 => BackendError::answered(
                BackendErrorKind::Server,
                call,
                job_id,
                status_u16,
                code,
                message,
            ),
            _ => BackendError::malformed(
                call,
                job_id,
                status_u16,
                format!("unexpected status {status_u16}"),
            ),
        }
    }

    fn parse<T: DeserializeOwned>(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &Answer,
    ) -> Result<T, BackendError> {
        self.parse_scrubbing(call, job_id, answer, None)
    }

    /// Parses a 2xx body as `T`, naming the failing field by its path.
    fn parse_scrubbing<T: DeserializeOwned>(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &Answer,
        job_token: Option<&Secret>,
    ) -> Result<T, BackendError> {
        let malformed = |what: String| {
            BackendError::malformed(
                call,
                job_id.map(str::to_owned),
                answer.status.as_u16(),
                what,
            )
        };
        if answer.body.iter().all(u8::is_ascii_whitespace) {
            return Err(malformed("empty body, expected JSON".into()));
        }
        let mut de = serde_json::Deserializer::from_slice(&answer.body);
        let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let what = describe_parse_error(&e);
            malformed(self.scrub(&what, job_token))
        })?;
        de.end()
            .map_err(|e| malformed(format!("trailing data after the JSON answer: {e}")))?;
        Ok(value)
    }

    fn check_id(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &Answer,
        field: &str,
        id: &str,
    ) -> Result<(), BackendError> {
        if is_job_id(id) {
            return Ok(());
        }
        Err(BackendError::malformed(
            call,
            job_id.map(str::to_owned),
            answer.status.as_u16(),
            format!(
                "{field}: {:?} is not a valid job id (a label value of 1-63 characters of [A-Za-z0-9._-])",
                self.scrub(id, None)
            ),
        ))
    }

    fn check_same_job(
        &self,
        call: Call,
        asked: &str,
        answer: &Answer,
        field: &str,
        answered: &str,
    ) -> Result<(), BackendError> {
        if asked == answered {
            return Ok(());
        }
        self.check_id(call, Some(asked), answer, field, answered)?;
        Err(BackendError::malformed(
            call,
            Some(asked.to_owned()),
            answer.status.as_u16(),
            format!("{field}: the answer is about job {answered:?}, not the job asked about"),
        ))
    }

    fn check_token(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &Answer,
        field: &str,
        token: &Secret,
    ) -> Result<(), BackendError> {
        if !token.is_empty() && HeaderValue::from_str(&bearer(token)).is_ok() {
            return Ok(());
        }
        Err(BackendError::malformed(
            call,
            job_id.map(str::to_owned),
            answer.status.as_u16(),
            format!("{field}: empty or not usable in an HTTP header"),
        ))
    }

    /// Replaces every token the client knows with a placeholder and bounds
    /// the length, so backend words are safe to keep in an error.
    fn scrub(&self, text: &str, job_token: Option<&Secret>) -> String {
        let mut out = text.to_owned();
        for token in [Some(&self.inner.service_token), job_token]
            .into_iter()
            .flatten()
        {
            if !token.is_empty() {
                out = out.replace(token.expose(), "<redacted>");
            }
        }
        bound_message(&out)
    }
}

/// The `call` label of a backend call (docs/metrics.md): the client's
/// method name, never anything from the request itself.
pub fn metric_call(call: Call) -> &'static str {
    match call {
        "POST /jobs/next" => "claim_run",
        "POST /publish-jobs/next" => "claim_publish",
        "POST /jobs/leases" => "renew_run_leases",
        "POST /publish-jobs/leases" => "renew_publish_leases",
        "GET /jobs/active" => "active_runs",
        "GET /publish-jobs/active" => "active_publishes",
        "GET /jobs/{id}" => "get_job",
        "POST /jobs/{id}/status" => "report_death",
        "POST /jobs/{id}/lost" => "report_lost",
        "POST /publish-jobs/{id}/lost" => "report_publish_lost",
        _ => "other",
    }
}

/// One HTTP attempt of a call, timed into the backend latency histogram
/// once it has its answer (or none).
struct Attempt {
    call: &'static str,
    started: tokio::time::Instant,
}

impl Attempt {
    fn new(call: Call, started: tokio::time::Instant) -> Self {
        Attempt {
            call: metric_call(call),
            started,
        }
    }

    fn record(&self, status: BackendStatus) {
        crate::metrics::common().backend_attempt(self.call, status, self.started.elapsed());
    }

    /// The backend answered `status` (its body read, or given up on).
    fn answered(&self, status: StatusCode) {
        self.record(BackendStatus::Code(status.as_u16()));
    }

    /// No answer: `error` (a timeout or a broken connection) says why.
    fn failed(&self, error: BackendError) -> BackendError {
        self.record(BackendStatus::NoAnswer(error.kind()));
        error
    }
}

/// `Bearer <token>`.
fn bearer(token: &Secret) -> String {
    format!("Bearer {}", token.expose())
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

/// Serializes a request body. The wire types hold plain strings and enums,
/// so serialization cannot fail; an empty object stands in if it ever did.
fn to_body<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

enum BodyError {
    Http(reqwest::Error),
    TooLong,
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Http)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The documented error body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(serde::Deserialize)]
struct ErrorEnvelope {
    error: ErrorWords,
}

#[derive(serde::Deserialize)]
struct ErrorWords {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The backend's code and message from an error body: the documented JSON,
/// or else the start of a non-empty body as the message.
fn error_words(body: &[u8]) -> (Option<String>, Option<String>) {
    if let Ok(envelope) = serde_json::from_slice::<ErrorEnvelope>(body) {
        return (envelope.error.code, envelope.error.message);
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        (None, None)
    } else {
        (None, Some(text.to_owned()))
    }
}

/// One line of at most [`MAX_MESSAGE_CHARS`] characters, control characters
/// replaced by spaces.
fn bound_message(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > MAX_MESSAGE_CHARS {
        out.push('…');
    }
    out
}

/// Describes a parse failure by the path of the field that failed. serde's
/// own words can quote the offending value, so they are dropped when the
/// field is a token.
fn describe_parse_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path();
    let at_token = matches!(
        path.iter().next_back(),
        Some(serde_path_to_error::Segment::Map { key }) if key.contains("token")
    );
    let inner = e.inner();
    let place = path.to_string();
    if at_token {
        format!("{place}: invalid value (not shown, it is a token field)")
    } else if inner.is_syntax() || inner.is_eof() {
        format!("not valid JSON: {inner}")
    } else if place == "." {
        format!("{inner}")
    } else {
        format!("{place}: {inner}")
    }
}

/// The wait a `Retry-After` header asks for, either delay-seconds or an
/// HTTP-date (judged against `now`); `None` when absent or unreadable.
pub fn retry_after(headers: &HeaderMap, now: jiff::Timestamp) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = at.duration_since(now);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now: jiff::Timestamp = "2026-11-29T17:00:00Z".parse().unwrap();
        assert_eq!(
            retry_after(&headers("7"), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(" 0 "), now),
            Some(Duration::from_secs(0))
        );
        assert_eq!(
            retry_after(&headers("Sun, 29 Nov 2026 17:00:12 GMT"), now),
            Some(Duration::from_secs(12))
        );
        // A date in the past asks for no wait.
        assert_eq!(
            retry_after(&headers("Sun, 29 Nov 2026 16:00:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers("soon"), now), None);
        assert_eq!(retry_after(&headers("-3"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

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
            assert!(err.kind() == BackendErrorKind::Config, "{bad}: {err}");
            assert!(!err.to_string().contains("pw"), "{err}");
        }
    }

    #[test]
    fn error_words_read_the_documented_body_or_the_text() {
        let (code, message) = error_words(include_bytes!("../../../docs/contract/error.json"));
        assert_eq!(code.as_deref(), Some("not_found"));
        assert_eq!(message.as_deref(), Some("no job with that id"));
        assert_eq!(
            error_words(b"Bad Gateway\n"),
            (None, Some("Bad Gateway".into()))
        );
        assert_eq!(error_words(b"  "), (None, None));
    }

    #[test]
    fn messages_are_bounded_to_one_line() {
        let long = "x".repeat(1000);
        assert_eq!(bound_message(&long).chars().count(), MAX_MESSAGE_CHARS + 1);
        assert_eq!(bound_message("a\nb\tc"), "a b c");
    }

    #[test]
    fn every_call_has_its_metric_name() {
        let calls = [
            ("POST /jobs/next", "claim_run"),
            ("POST /publish-jobs/next", "claim_publish"),
            ("POST /jobs/leases", "renew_run_leases"),
            ("POST /publish-jobs/leases", "renew_publish_leases"),
            ("GET /jobs/active", "active_runs"),
            ("GET /publish-jobs/active", "active_publishes"),
            ("GET /jobs/{id}", "get_job"),
            ("POST /jobs/{id}/status", "report_death"),
            ("POST /jobs/{id}/lost", "report_lost"),
            ("POST /publish-jobs/{id}/lost", "report_publish_lost"),
        ];
        for (call, name) in calls {
            assert_eq!(metric_call(call), name);
        }
        // Every call the client makes is one of them (a new call needs a name).
        let source = include_str!("client.rs");
        let made: std::collections::BTreeSet<&str> = source
            .split('"')
            .filter(|s| {
                s.split_once(' ').is_some_and(|(method, path)| {
                    matches!(method, "GET" | "POST") && path.len() > 1 && !path.contains(' ')
                })
            })
            .collect();
        for call in &made {
            assert_ne!(metric_call(call), "other", "{call} has no metric name");
        }
        assert_eq!(made.len(), calls.len(), "{made:?}");
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
