//! Typed failures of a backend call.
//!
//! Every variant names the call (`"POST /jobs/next"`, `"POST /jobs/{id}/lost"`)
//! and, where the call is about one job, that job's id. No variant ever holds
//! a token: the client scrubs the tokens it knows from anything the backend
//! sends back before it lands in an error, and never puts one in itself.
//! Messages do not repeat their source; walk [`std::error::Error::source`]
//! for the underlying transport error.

use std::fmt;
use std::time::Duration;

/// A backend call, as its method and path template: `"GET /jobs/{id}"`.
pub type Call = &'static str;

/// A backend call that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The client could not be built: a base URL that is not an absolute
    /// `http`/`https` URL, or a TLS or HTTP client setup failure.
    #[error("backend client: {reason}")]
    Config {
        /// What is wrong, naming the offending value when it is safe to show.
        reason: String,
    },

    /// A job id the caller passed is not a valid backend id (a non-empty
    /// label value); no request was sent.
    #[error(
        "{call}: job id {job_id:?} is not a valid backend id (a label value of 1-63 characters of [A-Za-z0-9._-])"
    )]
    InvalidJobId {
        /// The call that was not made.
        call: Call,
        /// The rejected id.
        job_id: String,
    },

    /// The per-job token passed in cannot be sent (it is not a valid HTTP
    /// header value); no request was sent. The token itself is not kept.
    #[error("{call}{}: the per-job token is not a valid HTTP header value; not sent", job(.job_id))]
    InvalidToken {
        /// The call that was not made.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
    },

    /// 401 or 403: the backend refused the token (the service token, or a
    /// per-job token it no longer accepts).
    #[error("{call}{}: the backend refused the token (HTTP {status}){}", job(.job_id), reason(.code, .message))]
    Unauthorized {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// 401 or 403.
        status: u16,
        /// The backend's error code, when the body was the documented error JSON.
        code: Option<String>,
        /// The backend's error message, scrubbed of tokens.
        message: Option<String>,
    },

    /// 404: no such job (or no such route).
    #[error("{call}{}: not found (HTTP 404){}", job(.job_id), reason(.code, .message))]
    NotFound {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The backend's error code, when the body was the documented error JSON.
        code: Option<String>,
        /// The backend's error message, scrubbed of tokens.
        message: Option<String>,
    },

    /// 409: the call does not fit the job's state (e.g. already terminal).
    #[error("{call}{}: conflict (HTTP 409){}", job(.job_id), reason(.code, .message))]
    Conflict {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The backend's error code, when the body was the documented error JSON.
        code: Option<String>,
        /// The backend's error message, scrubbed of tokens.
        message: Option<String>,
    },

    /// Any other 4xx except 429: the backend rejected the request.
    #[error("{call}{}: rejected (HTTP {status}){}", job(.job_id), reason(.code, .message))]
    Rejected {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The HTTP status.
        status: u16,
        /// The backend's error code, when the body was the documented error JSON.
        code: Option<String>,
        /// The backend's error message, scrubbed of tokens.
        message: Option<String>,
    },

    /// 5xx other than 503: the backend failed.
    #[error("{call}{}: server error (HTTP {status}){}", job(.job_id), reason(.code, .message))]
    Server {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The HTTP status.
        status: u16,
        /// The backend's error code, when the body was the documented error JSON.
        code: Option<String>,
        /// The backend's error message (or the start of a non-JSON body), scrubbed of tokens.
        message: Option<String>,
    },

    /// 429 or 503 on every attempt: the call was retried after each
    /// `Retry-After` (bounded) and the backend still would not take it.
    #[error("{call}{}: backend unavailable (HTTP {status}) after {attempts} attempts", job(.job_id))]
    Unavailable {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The status of the last answer (429 or 503).
        status: u16,
        /// How many times the call was sent.
        attempts: u32,
        /// The last `Retry-After` the backend advertised, as a wait.
        retry_after: Option<Duration>,
    },

    /// The request did not get an answer: connection refused or reset, DNS,
    /// TLS, or the body broke off.
    #[error("{call}{}: could not reach the backend", job(.job_id))]
    Transport {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The transport failure.
        #[source]
        source: reqwest::Error,
    },

    /// No complete answer within the client's timeout.
    #[error("{call}{}: no answer within {}", job(.job_id), secs(.timeout))]
    Timeout {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The per-request timeout that ran out.
        timeout: Duration,
    },

    /// A success status with an answer that does not fit the contract: not
    /// JSON, a missing or mistyped field (named by its path, e.g.
    /// `job.lease_expires_at`), an id that is not a label value, or an
    /// answer about another job than the one asked about.
    #[error("{call}{}: malformed answer (HTTP {status}): {what}", job(.job_id))]
    Malformed {
        /// The call.
        call: Call,
        /// The job the call was about, if any.
        job_id: Option<String>,
        /// The HTTP status of the answer.
        status: u16,
        /// What is wrong, naming the field.
        what: String,
    },
}

impl BackendError {
    /// 401 or 403: the token was refused.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, BackendError::Unauthorized { .. })
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BackendError::NotFound { .. })
    }

    /// 409.
    pub fn is_conflict(&self) -> bool {
        matches!(self, BackendError::Conflict { .. })
    }

    /// A failure that may pass by itself: unavailable, a 5xx, a transport
    /// failure or a timeout. Worth trying again on a later tick.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BackendError::Unavailable { .. }
                | BackendError::Server { .. }
                | BackendError::Transport { .. }
                | BackendError::Timeout { .. }
        )
    }

    /// A malformed answer.
    pub fn is_malformed(&self) -> bool {
        matches!(self, BackendError::Malformed { .. })
    }

    /// The call that failed (`None` only for [`BackendError::Config`]).
    pub fn call(&self) -> Option<Call> {
        match self {
            BackendError::Config { .. } => None,
            BackendError::InvalidJobId { call, .. }
            | BackendError::InvalidToken { call, .. }
            | BackendError::Unauthorized { call, .. }
            | BackendError::NotFound { call, .. }
            | BackendError::Conflict { call, .. }
            | BackendError::Rejected { call, .. }
            | BackendError::Server { call, .. }
            | BackendError::Unavailable { call, .. }
            | BackendError::Transport { call, .. }
            | BackendError::Timeout { call, .. }
            | BackendError::Malformed { call, .. } => Some(call),
        }
    }

    /// The job the failed call was about, if any.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            BackendError::Config { .. } => None,
            BackendError::InvalidJobId { job_id, .. } => Some(job_id),
            BackendError::InvalidToken { job_id, .. }
            | BackendError::Unauthorized { job_id, .. }
            | BackendError::NotFound { job_id, .. }
            | BackendError::Conflict { job_id, .. }
            | BackendError::Rejected { job_id, .. }
            | BackendError::Server { job_id, .. }
            | BackendError::Unavailable { job_id, .. }
            | BackendError::Transport { job_id, .. }
            | BackendError::Timeout { job_id, .. }
            | BackendError::Malformed { job_id, .. } => job_id.as_deref(),
        }
    }

    /// The HTTP status of the backend's answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            BackendError::Unauthorized { status, .. }
            | BackendError::Rejected { status, .. }
            | BackendError::Server { status, .. }
            | BackendError::Unavailable { status, .. }
            | BackendError::Malformed { status, .. } => Some(*status),
            BackendError::NotFound { .. } => Some(404),
            BackendError::Conflict { .. } => Some(409),
            BackendError::Config { .. }
            | BackendError::InvalidJobId { .. }
            | BackendError::InvalidToken { .. }
            | BackendError::Transport { .. }
            | BackendError::Timeout { .. } => None,
        }
    }

    /// The backend's error code (`bad_request`, `not_found`, ...) when its
    /// answer carried the documented error JSON.
    pub fn code(&self) -> Option<&str> {
        match self {
            BackendError::Unauthorized { code, .. }
            | BackendError::NotFound { code, .. }
            | BackendError::Conflict { code, .. }
            | BackendError::Rejected { code, .. }
            | BackendError::Server { code, .. } => code.as_deref(),
            _ => None,
        }
    }
}

/// Formats `" (job <id>)"` for a call about one job, nothing otherwise.
fn job(job_id: &Option<String>) -> JobSuffix<'_> {
    JobSuffix(job_id.as_deref())
}

struct JobSuffix<'a>(Option<&'a str>);

impl fmt::Display for JobSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, " (job {id})"),
            None => Ok(()),
        }
    }
}

/// Formats the backend's own words, `": <code>: <message>"`, when it sent any.
fn reason<'a>(code: &'a Option<String>, message: &'a Option<String>) -> Reason<'a> {
    Reason(code.as_deref(), message.as_deref())
}

struct Reason<'a>(Option<&'a str>, Option<&'a str>);

impl fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(code), Some(message)) => write!(f, ": {code}: {message}"),
            (Some(one), None) | (None, Some(one)) => write!(f, ": {one}"),
            (None, None) => Ok(()),
        }
    }
}

/// Formats a duration as seconds, `"0.2 s"`.
fn secs(d: &Duration) -> Secs {
    Secs(*d)
}

struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s", self.0.as_secs_f64())
    }
}
