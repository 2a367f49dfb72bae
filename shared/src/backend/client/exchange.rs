//! One exchange with the backend: the request sent (with the loops' bounded
//! retry on 429/503), the body read within its bound, a status turned into
//! a [`BackendError`] with the backend's own words (scrubbed of tokens), the
//! answer parsed and checked against the contract, and each attempt timed
//! into the latency histogram.

use crate::backend::error::{BackendError, BackendErrorKind, Call};
use crate::metrics::BackendStatus;
use crate::metrics::labels::BackendCall;
use crate::secret::Secret;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use std::time::Duration;

use super::*;

impl BackendClient {
    /// Sends `req`, retrying on 429/503 as the policy allows, and maps any
    /// non-2xx answer to its error.
    pub(super) async fn send(&self, req: Request<'_>) -> Result<Answer, BackendError> {
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

    pub(super) fn transport_error(
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
    pub(super) fn status_error(
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

    pub(super) fn parse<'a, T: Deserialize<'a>>(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &'a Answer,
    ) -> Result<T, BackendError> {
        self.parse_scrubbing(call, job_id, answer, None)
    }

    /// Parses a 2xx body as `T`, naming the failing field by its path.
    pub(super) fn parse_scrubbing<'a, T: Deserialize<'a>>(
        &self,
        call: Call,
        job_id: Option<&str>,
        answer: &'a Answer,
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

    pub(super) fn check_id(
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

    pub(super) fn check_same_job(
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

    pub(super) fn check_token(
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
    pub(super) fn scrub(&self, text: &str, job_token: Option<&Secret>) -> String {
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
/// call as its method and path template, named; `None` for a call the
/// metrics do not know (a test's own).
pub fn metric_call(call: Call) -> Option<BackendCall> {
    Some(match call {
        "POST /jobs/next" => BackendCall::ClaimRun,
        "POST /publish-jobs/next" => BackendCall::ClaimPublish,
        "POST /jobs/leases" => BackendCall::RenewRunLeases,
        "POST /publish-jobs/leases" => BackendCall::RenewPublishLeases,
        "GET /jobs/active" => BackendCall::ActiveRuns,
        "GET /publish-jobs/active" => BackendCall::ActivePublishes,
        "GET /jobs/{id}" => BackendCall::GetJob,
        "POST /jobs/{id}/status" => BackendCall::ReportDeath,
        "POST /jobs/{id}/lost" => BackendCall::ReportLost,
        "POST /publish-jobs/{id}/lost" => BackendCall::ReportPublishLost,
        "POST /publish-jobs/{id}/result" => BackendCall::ReportPublishFailed,
        _ => return None,
    })
}

/// One HTTP attempt of a call, timed into the backend latency histogram
/// once it has its answer (or none).
struct Attempt {
    call: Option<BackendCall>,
    started: tokio::time::Instant,
}

impl Attempt {
    pub(super) fn new(call: Call, started: tokio::time::Instant) -> Self {
        Attempt {
            call: metric_call(call),
            started,
        }
    }

    pub(super) fn record(&self, status: BackendStatus) {
        if let Some(call) = self.call {
            crate::metrics::common().backend_attempt(call, status, self.started.elapsed());
        }
    }

    /// The backend answered `status` (its body read, or given up on).
    pub(super) fn answered(&self, status: StatusCode) {
        self.record(BackendStatus::Code(status.as_u16()));
    }

    /// No answer: `error` (a timeout or a broken connection) says why.
    pub(super) fn failed(&self, error: BackendError) -> BackendError {
        self.record(BackendStatus::NoAnswer(error.kind().reason()));
        error
    }
}

/// `Bearer <token>`.
pub(super) fn bearer(token: &Secret) -> String {
    format!("Bearer {}", token.expose())
}

pub(super) enum BodyError {
    Http(reqwest::Error),
    TooLong,
}

pub(super) async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    // Sized once from the announced length (within the bound): a body of
    // 100,000 leases is not grown by doubling, which held up to twice its
    // size (three times while copying) at the peak of every renewal.
    let announced = response.content_length().unwrap_or(0);
    let mut body = Vec::with_capacity(announced.min(MAX_BODY_BYTES as u64) as usize);
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
pub(super) fn error_words(body: &[u8]) -> (Option<String>, Option<String>) {
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
pub(super) fn bound_message(text: &str) -> String {
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
pub(super) fn describe_parse_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
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
    fn error_words_read_the_documented_body_or_the_text() {
        let (code, message) = error_words(include_bytes!("../../../../docs/contract/error.json"));
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
            ("POST /publish-jobs/{id}/result", "report_publish_failed"),
        ];
        for (call, name) in calls {
            assert_eq!(metric_call(call).map(BackendCall::as_str), Some(name));
        }
        // Every call the client makes is one of them (a new call needs a
        // name): those written in the client, and each lane's in the table.
        let sources = [
            include_str!("mod.rs"),
            include_str!("claims.rs"),
            include_str!("leases.rs"),
            include_str!("lists.rs"),
            include_str!("reports.rs"),
        ];
        let mut made: std::collections::BTreeSet<&str> = sources
            .iter()
            .flat_map(|source| source.split('"'))
            .filter(|s| {
                s.split_once(' ').is_some_and(|(method, path)| {
                    matches!(method, "GET" | "POST") && path.len() > 1 && !path.contains(' ')
                })
            })
            .collect();
        for lane in crate::Lane::ALL {
            let spec = lane.spec();
            made.extend([
                spec.claim_call,
                spec.leases_call,
                spec.active_call,
                spec.lost_call,
            ]);
        }
        for call in &made {
            assert!(metric_call(call).is_some(), "{call} has no metric name");
        }
        assert_eq!(made.len(), calls.len(), "{made:?}");
    }
}
