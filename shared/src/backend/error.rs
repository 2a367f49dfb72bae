//! Typed failures of a backend call: one [`BackendError`] struct whose
//! [`BackendErrorKind`] says what went wrong, with the call, the job and
//! whatever the backend answered as fields.
//!
//! Every error but [`BackendErrorKind::Config`] names the call
//! (`"POST /jobs/next"`, `"POST /jobs/{id}/lost"`) and, where the call is
//! about one job, that job's id. No error ever holds a token: the client
//! scrubs the tokens it knows from anything the backend sends back before it
//! lands in an error, and never puts one in itself. Messages do not repeat
//! their source; walk [`std::error::Error::source`] (or use
//! [`crate::error_chain`]) for the underlying transport error.

use crate::metrics::labels::ErrorReason;
use std::fmt;
use std::time::Duration;

/// A backend call, as its method and path template: `"GET /jobs/{id}"`.
pub type Call = &'static str;

/// What kind of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The client could not be built: a base URL that is not an absolute
    /// `http`/`https` URL, or a TLS or HTTP client setup failure.
    Config,
    /// A job id the caller passed is not a valid backend id (a non-empty
    /// label value); no request was sent.
    InvalidJobId,
    /// The per-job token passed in cannot be sent (it is not a valid HTTP
    /// header value); no request was sent. The token itself is not kept.
    InvalidToken,
    /// 401 or 403: the backend refused the token (the service token, or a
    /// per-job token it no longer accepts).
    Unauthorized,
    /// 404: no such job (or no such route).
    NotFound,
    /// 409: the call does not fit the job's state (e.g. already terminal).
    Conflict,
    /// Any other 4xx except 429: the backend rejected the request.
    Rejected,
    /// 5xx other than 503: the backend failed.
    Server,
    /// 429 or 503 on every attempt: the call was retried after each
    /// `Retry-After` (bounded) and the backend still would not take it.
    Unavailable,
    /// The request did not get an answer: connection refused or reset, DNS,
    /// TLS, or the body broke off.
    Transport,
    /// No complete answer within the client's timeout.
    Timeout,
    /// A success status with an answer that does not fit the contract: not
    /// JSON, a missing or mistyped field (named by its path, e.g.
    /// `job.lease_expires_at`), an id that is not a label value, or an
    /// answer about another job than the one asked about.
    Malformed,
}

impl BackendErrorKind {
    /// Every kind, in a stable order.
    pub const ALL: [BackendErrorKind; 12] = [
        BackendErrorKind::Config,
        BackendErrorKind::InvalidJobId,
        BackendErrorKind::InvalidToken,
        BackendErrorKind::Unauthorized,
        BackendErrorKind::NotFound,
        BackendErrorKind::Conflict,
        BackendErrorKind::Rejected,
        BackendErrorKind::Server,
        BackendErrorKind::Unavailable,
        BackendErrorKind::Transport,
        BackendErrorKind::Timeout,
        BackendErrorKind::Malformed,
    ];

    /// The kind's label value in metrics and logs (`not_found`,
    /// `unavailable`, ...): the one place a kind gets its name.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendErrorKind::Config => "config",
            BackendErrorKind::InvalidJobId => "invalid_job_id",
            BackendErrorKind::InvalidToken => "invalid_token",
            BackendErrorKind::Unauthorized => "unauthorized",
            BackendErrorKind::NotFound => "not_found",
            BackendErrorKind::Conflict => "conflict",
            BackendErrorKind::Rejected => "rejected",
            BackendErrorKind::Server => "server",
            BackendErrorKind::Unavailable => "unavailable",
            BackendErrorKind::Transport => "transport",
            BackendErrorKind::Timeout => "timeout",
            BackendErrorKind::Malformed => "malformed",
        }
    }

    /// The `reason` label of the failure in the error metrics.
    pub fn reason(self) -> ErrorReason {
        match self {
            BackendErrorKind::Config
            | BackendErrorKind::InvalidJobId
            | BackendErrorKind::InvalidToken => ErrorReason::Request,
            BackendErrorKind::Unauthorized => ErrorReason::Unauthorized,
            BackendErrorKind::NotFound => ErrorReason::NotFound,
            BackendErrorKind::Conflict => ErrorReason::Conflict,
            BackendErrorKind::Rejected => ErrorReason::Http4xx,
            BackendErrorKind::Server => ErrorReason::Http5xx,
            BackendErrorKind::Unavailable => ErrorReason::Unavailable,
            BackendErrorKind::Transport => ErrorReason::Connect,
            BackendErrorKind::Timeout => ErrorReason::Timeout,
            BackendErrorKind::Malformed => ErrorReason::Decode,
        }
    }

    /// A failure that may pass by itself: unavailable, a 5xx, a transport
    /// failure or a timeout.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            BackendErrorKind::Unavailable
                | BackendErrorKind::Server
                | BackendErrorKind::Transport
                | BackendErrorKind::Timeout
        )
    }
}

impl fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A backend call that failed. Which fields are set follows from its
/// [`kind`](BackendError::kind): a status for an answer, the backend's code
/// and message when it sent the documented error JSON, the attempts and the
/// advertised wait when it stayed unavailable, the timeout that ran out, the
/// transport error as the [`source`](std::error::Error::source).
///
/// Boxed, so a `Result` carrying it stays one pointer wide on the happy path.
#[derive(Debug)]
pub struct BackendError(Box<Details>);

/// The fields of a [`BackendError`].
#[derive(Debug)]
struct Details {
    kind: BackendErrorKind,
    /// The call (`None` only for a client that could not be built).
    call: Option<Call>,
    /// The job the call was about, if any (the rejected id for
    /// [`BackendErrorKind::InvalidJobId`]).
    job_id: Option<String>,
    /// The HTTP status of the answer, when there was one.
    status: Option<u16>,
    /// The backend's error code, when the body was the documented error JSON.
    code: Option<String>,
    /// The backend's error message (or the start of a non-JSON body),
    /// scrubbed of tokens.
    message: Option<String>,
    /// The client's own words: what is wrong with the configuration or with
    /// the answer (naming the field), scrubbed of tokens.
    detail: String,
    /// How many times the call was sent ([`BackendErrorKind::Unavailable`]).
    attempts: u32,
    /// The last `Retry-After` the backend advertised, as a wait.
    retry_after: Option<Duration>,
    /// The per-request timeout that ran out ([`BackendErrorKind::Timeout`]).
    timeout: Option<Duration>,
    /// The transport failure ([`BackendErrorKind::Transport`]).
    source: Option<reqwest::Error>,
}

impl BackendError {
    fn details(kind: BackendErrorKind, call: Option<Call>, job_id: Option<String>) -> Details {
        Details {
            kind,
            call,
            job_id,
            status: None,
            code: None,
            message: None,
            detail: String::new(),
            attempts: 0,
            retry_after: None,
            timeout: None,
            source: None,
        }
    }

    /// The client could not be built, for `reason` (naming the offending
    /// value only when it is safe to show).
    pub(crate) fn config(reason: String) -> Self {
        BackendError(Box::new(Details {
            detail: reason,
            ..Self::details(BackendErrorKind::Config, None, None)
        }))
    }

    /// `job_id` (already bounded for showing) is not a backend id; nothing sent.
    pub(crate) fn invalid_job_id(call: Call, job_id: String) -> Self {
        BackendError(Box::new(Self::details(
            BackendErrorKind::InvalidJobId,
            Some(call),
            Some(job_id),
        )))
    }

    /// The per-job token cannot be sent; nothing sent.
    pub(crate) fn invalid_token(call: Call, job_id: Option<String>) -> Self {
        BackendError(Box::new(Self::details(
            BackendErrorKind::InvalidToken,
            Some(call),
            job_id,
        )))
    }

    /// A non-2xx answer of `kind` (one of the answered kinds: unauthorized,
    /// not found, conflict, rejected, server), with the backend's words.
    pub(crate) fn answered(
        kind: BackendErrorKind,
        call: Call,
        job_id: Option<String>,
        status: u16,
        code: Option<String>,
        message: Option<String>,
    ) -> Self {
        BackendError(Box::new(Details {
            status: Some(status),
            code,
            message,
            ..Self::details(kind, Some(call), job_id)
        }))
    }

    /// 429 or 503 on each of `attempts` sends.
    pub(crate) fn unavailable(
        call: Call,
        job_id: Option<String>,
        status: u16,
        attempts: u32,
        retry_after: Option<Duration>,
    ) -> Self {
        BackendError(Box::new(Details {
            status: Some(status),
            attempts,
            retry_after,
            ..Self::details(BackendErrorKind::Unavailable, Some(call), job_id)
        }))
    }

    /// No answer: `source` says why.
    pub(crate) fn transport(call: Call, job_id: Option<String>, source: reqwest::Error) -> Self {
        BackendError(Box::new(Details {
            source: Some(source),
            ..Self::details(BackendErrorKind::Transport, Some(call), job_id)
        }))
    }

    /// No complete answer within `timeout`.
    pub(crate) fn timed_out(call: Call, job_id: Option<String>, timeout: Duration) -> Self {
        BackendError(Box::new(Details {
            timeout: Some(timeout),
            ..Self::details(BackendErrorKind::Timeout, Some(call), job_id)
        }))
    }

    /// A success status (`status`) whose answer breaks the contract: `what`.
    pub(crate) fn malformed(call: Call, job_id: Option<String>, status: u16, what: String) -> Self {
        BackendError(Box::new(Details {
            status: Some(status),
            detail: what,
            ..Self::details(BackendErrorKind::Malformed, Some(call), job_id)
        }))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BackendErrorKind {
        self.0.kind
    }

    /// 401 or 403: the token was refused.
    pub fn is_unauthorized(&self) -> bool {
        self.0.kind == BackendErrorKind::Unauthorized
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.0.kind == BackendErrorKind::NotFound
    }

    /// 409.
    pub fn is_conflict(&self) -> bool {
        self.0.kind == BackendErrorKind::Conflict
    }

    /// A failure that may pass by itself: unavailable, a 5xx, a transport
    /// failure or a timeout. Worth trying again on a later tick.
    pub fn is_transient(&self) -> bool {
        self.0.kind.is_transient()
    }

    /// A malformed answer.
    pub fn is_malformed(&self) -> bool {
        self.0.kind == BackendErrorKind::Malformed
    }

    /// The call that failed (`None` only for [`BackendErrorKind::Config`]).
    pub fn call(&self) -> Option<Call> {
        self.0.call
    }

    /// The job the failed call was about, if any (for
    /// [`BackendErrorKind::InvalidJobId`], the id that was refused).
    pub fn job_id(&self) -> Option<&str> {
        self.0.job_id.as_deref()
    }

    /// The HTTP status of the backend's answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        self.0.status
    }

    /// The backend's error code (`bad_request`, `not_found`, ...) when its
    /// answer carried the documented error JSON.
    pub fn code(&self) -> Option<&str> {
        self.0.code.as_deref()
    }

    /// The client's own words about a malformed answer or a configuration
    /// (naming the field, scrubbed of tokens); empty for the other kinds.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// The backend's error message (scrubbed of tokens), when it sent one.
    pub fn message(&self) -> Option<&str> {
        self.0.message.as_deref()
    }

    /// How many times the call was sent, for [`BackendErrorKind::Unavailable`]
    /// (0 for the other kinds).
    pub fn attempts(&self) -> u32 {
        self.0.attempts
    }

    /// The last `Retry-After` the backend advertised, as a wait
    /// ([`BackendErrorKind::Unavailable`]).
    pub fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after
    }

    /// The per-request timeout that ran out ([`BackendErrorKind::Timeout`]).
    pub fn timeout(&self) -> Option<Duration> {
        self.0.timeout
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use BackendErrorKind as K;
        if self.0.kind == K::Config {
            return write!(f, "backend client: {}", self.0.detail);
        }
        f.write_str(self.0.call.unwrap_or("backend call"))?;
        if self.0.kind == K::InvalidJobId {
            let id = self.0.job_id.as_deref().unwrap_or_default();
            return write!(
                f,
                ": job id {id:?} is not a valid backend id (a label value of 1-63 characters of [A-Za-z0-9._-])"
            );
        }
        if let Some(id) = &self.0.job_id {
            write!(f, " (job {id})")?;
        }
        let status = self.0.status.unwrap_or_default();
        match self.0.kind {
            K::Config | K::InvalidJobId => Ok(()),
            K::InvalidToken => {
                f.write_str(": the per-job token is not a valid HTTP header value; not sent")
            }
            K::Unauthorized => write!(f, ": the backend refused the token (HTTP {status})"),
            K::NotFound => f.write_str(": not found (HTTP 404)"),
            K::Conflict => f.write_str(": conflict (HTTP 409)"),
            K::Rejected => write!(f, ": rejected (HTTP {status})"),
            K::Server => write!(f, ": server error (HTTP {status})"),
            K::Unavailable => write!(
                f,
                ": backend unavailable (HTTP {status}) after {} attempts",
                self.0.attempts
            ),
            K::Transport => f.write_str(": could not reach the backend"),
            K::Timeout => write!(
                f,
                ": no answer within {} s",
                self.0.timeout.unwrap_or_default().as_secs_f64()
            ),
            K::Malformed => write!(f, ": malformed answer (HTTP {status}): {}", self.0.detail),
        }?;
        // The backend's own words, when it sent any.
        match (self.0.code.as_deref(), self.0.message.as_deref()) {
            (Some(code), Some(message)) => write!(f, ": {code}: {message}"),
            (Some(one), None) | (None, Some(one)) => write!(f, ": {one}"),
            (None, None) => Ok(()),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_label_value() {
        let names: std::collections::BTreeSet<&str> =
            BackendErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), BackendErrorKind::ALL.len());
        assert!(names.iter().all(|n| crate::names::is_label_value(n)));
    }

    #[test]
    fn messages_name_the_call_the_job_and_the_backends_words() {
        let call = "POST /jobs/{id}/lost";
        let id = || Some("r1".to_owned());
        let words = |c: &str, m: &str| (Some(c.to_owned()), Some(m.to_owned()));
        let (code, message) = words("not_found", "no job");
        let cases = [
            (
                BackendError::config("base URL \"x\": it has no host".into()),
                "backend client: base URL \"x\": it has no host",
            ),
            (
                BackendError::invalid_job_id("GET /jobs/{id}", "a/b".into()),
                "GET /jobs/{id}: job id \"a/b\" is not a valid backend id (a label value of 1-63 characters of [A-Za-z0-9._-])",
            ),
            (
                BackendError::invalid_token("POST /jobs/{id}/status", id()),
                "POST /jobs/{id}/status (job r1): the per-job token is not a valid HTTP header value; not sent",
            ),
            (
                BackendError::answered(
                    BackendErrorKind::Unauthorized,
                    "POST /jobs/next",
                    None,
                    401,
                    None,
                    None,
                ),
                "POST /jobs/next: the backend refused the token (HTTP 401)",
            ),
            (
                BackendError::answered(BackendErrorKind::NotFound, call, id(), 404, code, message),
                "POST /jobs/{id}/lost (job r1): not found (HTTP 404): not_found: no job",
            ),
            (
                BackendError::answered(
                    BackendErrorKind::Conflict,
                    call,
                    id(),
                    409,
                    Some("conflict".into()),
                    None,
                ),
                "POST /jobs/{id}/lost (job r1): conflict (HTTP 409): conflict",
            ),
            (
                BackendError::answered(
                    BackendErrorKind::Rejected,
                    call,
                    id(),
                    422,
                    None,
                    Some("bad".into()),
                ),
                "POST /jobs/{id}/lost (job r1): rejected (HTTP 422): bad",
            ),
            (
                BackendError::answered(BackendErrorKind::Server, call, None, 502, None, None),
                "POST /jobs/{id}/lost: server error (HTTP 502)",
            ),
            (
                BackendError::unavailable(call, id(), 503, 3, Some(Duration::from_secs(9))),
                "POST /jobs/{id}/lost (job r1): backend unavailable (HTTP 503) after 3 attempts",
            ),
            (
                BackendError::timed_out(call, id(), Duration::from_millis(200)),
                "POST /jobs/{id}/lost (job r1): no answer within 0.2 s",
            ),
            (
                BackendError::malformed(call, None, 200, "id: missing field".into()),
                "POST /jobs/{id}/lost: malformed answer (HTTP 200): id: missing field",
            ),
        ];
        for (error, shown) in cases {
            assert_eq!(error.to_string(), shown, "{:?}", error.kind());
        }
    }

    #[test]
    fn the_predicates_follow_the_kind() {
        let of = |kind| BackendError::answered(kind, "GET /jobs/{id}", None, 400, None, None);
        assert!(of(BackendErrorKind::Unauthorized).is_unauthorized());
        assert!(of(BackendErrorKind::NotFound).is_not_found());
        assert!(of(BackendErrorKind::Conflict).is_conflict());
        assert!(of(BackendErrorKind::Malformed).is_malformed());
        let transient: Vec<_> = BackendErrorKind::ALL
            .into_iter()
            .filter(|k| of(*k).is_transient())
            .collect();
        assert_eq!(
            transient,
            [
                BackendErrorKind::Server,
                BackendErrorKind::Unavailable,
                BackendErrorKind::Transport,
                BackendErrorKind::Timeout
            ]
        );
    }
}
