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
//! each attempt) is in `exchange`. The calls, a file per kind: `claims`
//! (the claim of a lane, a poisoned claim read as far as it can be),
//! `leases` (a lane's renewal), `reports` (a job's state, its lost and
//! death reports) and `lists` (the active lists, read an entry at a time).

mod claims;
mod exchange;
mod leases;
mod lists;
mod reports;

pub use exchange::{metric_call, retry_after};

use exchange::{bearer, bound_message};

use super::error::{BackendError, Call};
use crate::clock::WallClock;
use crate::names::is_label_value;
use crate::retry::{Backoff, JITTER_PERCENT, Retries, Sleeper, TokioSleeper};
use crate::secret::Secret;
use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
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
            Backoff::constant(self.default_wait, self.max_wait).with_jitter(JITTER_PERCENT),
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

/// Serializes a request body. The wire types hold plain strings and enums,
/// so serialization cannot fail; an empty object stands in if it ever did.
fn to_body<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
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
