//! Bounded Kubernetes API calls. Every non-watch call the binaries make goes
//! through [`call`], so a request the API server accepted and never answers
//! costs at most the configured timeout, never a whole loop; every call is
//! timed in `tcab_dispatcher_kube_request_duration_seconds` by call and
//! outcome, and every failure is counted in
//! `tcab_dispatcher_kube_api_errors_total` by its verb and reason (the watch
//! of owned Jobs counts its own errors, in `job_cache`).

use crate::metrics::labels::ErrorReason;
pub use crate::metrics::labels::KubeCall;
use std::future::Future;
use std::time::Duration;

/// Why a Kubernetes API call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout; the request may or may not have been applied.
    #[error("the Kubernetes API did not answer within {} s", .0.as_secs_f64())]
    TimedOut(Duration),
    /// The client or the API server answered with an error.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl CallError {
    /// The HTTP status the API server answered, if it answered one.
    pub fn code(&self) -> Option<u16> {
        match self {
            CallError::Kube(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// 404: the object is not there.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: AlreadyExists on a create, Conflict on a precondition.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// Why the call failed, for the error metrics: from the error's type
    /// and the API server's status code, never from its text.
    pub fn reason(&self) -> ErrorReason {
        match self {
            CallError::TimedOut(_) => ErrorReason::Timeout,
            CallError::Kube(error) => kube_reason(error),
        }
    }

    /// Whether the call may have been applied anyway: no answer, or a
    /// server-side failure after which the write may still have landed.
    pub fn is_ambiguous(&self) -> bool {
        match self.code() {
            Some(code) => code >= 500 || code == 429,
            None => true,
        }
    }
}

/// Why a request of the Kubernetes client failed, by the error's type and
/// the API server's status code.
pub fn kube_reason(error: &kube::Error) -> ErrorReason {
    match error {
        kube::Error::Api(status) => ErrorReason::of_status(status.code),
        // No answer: the connection could not be made or broke.
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::RustlsTls(_) => ErrorReason::Connect,
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => ErrorReason::Decode,
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => ErrorReason::Request,
        _ => ErrorReason::Other,
    }
}

/// Why no Kubernetes client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Neither a kubeconfig nor the in-cluster service account was usable.
    #[error(
        "cannot find a Kubernetes config (KUBECONFIG, ~/.kube/config or the in-cluster service account)"
    )]
    Config(#[source] kube::config::InferConfigError),
    /// The config was found but the client could not be built from it.
    #[error("cannot build the Kubernetes client")]
    Build(#[source] kube::Error),
}

/// The client every binary uses, from the kubeconfig or the in-cluster
/// service account (see [`client_from`]).
pub async fn client() -> Result<kube::Client, ClientError> {
    client_with_url(None).await.map(|(client, _)| client)
}

/// The client every binary uses, and the API server's URL it talks to (for
/// the start-up line, so an API server that cannot be reached is named),
/// sending `agent` as the `User-Agent` when given.
pub async fn client_with_url(agent: Option<&str>) -> Result<(kube::Client, String), ClientError> {
    let mut config = kube::Config::infer().await.map_err(ClientError::Config)?;
    if let Some(agent) = agent.and_then(|a| http::HeaderValue::from_str(a).ok()) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let url = config.cluster_url.to_string();
    Ok((client_from(config)?, url))
}

/// Builds a client from `config` with kube-rs's own retry layer off. That
/// layer retries 429, 503 and 504 up to 15 times with backoff growing to
/// minutes: inside [`bounded`] it turns a clear "throttled" or "unavailable"
/// into an anonymous timeout and spends the whole bound on one call. Each
/// call is made once here; the loop that made it decides when to try again,
/// and the error it saw reaches the logs and the error counters.
pub fn client_from(mut config: kube::Config) -> Result<kube::Client, ClientError> {
    config.default_retry = false;
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// The Kubernetes verb of a request, as the API-errors metric names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `create`.
    Create,
    /// `get` (a pod's log read too).
    Get,
    /// `list`.
    List,
    /// `watch`.
    Watch,
    /// `delete`.
    Delete,
}

impl Verb {
    /// The label value: `create`, `get`, `list`, `watch`, `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Delete => "delete",
        }
    }
}

/// Whether a failed call counts as a Kubernetes API error. An answer the
/// callers expect and act on is an outcome, not an error: `AlreadyExists`
/// on a create (the admitter's repeated create of one claim), `NotFound` on
/// a get or a delete (the object is gone), and `Conflict` on a delete (its
/// precondition no longer holds: the object was replaced).
pub fn counts_as_error(verb: Verb, error: &CallError) -> bool {
    !matches!(
        (verb, error.code()),
        (Verb::Create, Some(409))
            | (Verb::Get | Verb::Delete, Some(404))
            | (Verb::Delete, Some(409))
    )
}

/// Runs one API call with a timeout (see [`bounded`]), times it by call and
/// outcome, and counts its failure by verb and reason, unless it is an
/// expected answer ([`counts_as_error`]).
pub async fn call<T, F>(call: KubeCall, limit: Duration, request: F) -> Result<T, CallError>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    let started = tokio::time::Instant::now();
    let result = bounded(limit, request).await;
    let metrics = crate::metrics::common();
    let outcome = match &result {
        Ok(_) => crate::metrics::OK,
        Err(error) => error.reason().as_str(),
    };
    metrics.kube_call(call, outcome, started.elapsed());
    if let Err(error) = &result
        && counts_as_error(call.verb(), error)
    {
        metrics.kube_api_error(call.verb(), error.reason());
    }
    result
}

/// Runs one API call with a timeout, without counting a failure: use
/// [`call`], which names the verb for the API-errors metric.
pub async fn bounded<T, F>(limit: Duration, call: F) -> Result<T, CallError>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result.map_err(CallError::Kube),
        Err(_) => Err(CallError::TimedOut(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("boom", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_times_out() {
        let limit = Duration::from_secs(15);
        let started = tokio::time::Instant::now();
        let result: Result<(), _> = bounded(limit, std::future::pending()).await;
        let error = result.expect_err("a hung call fails");
        assert!(matches!(error, CallError::TimedOut(d) if d == limit));
        assert_eq!(started.elapsed(), limit);
        assert!(error.is_ambiguous());
        assert!(error.to_string().contains("15 s"), "{error}");
    }

    #[test]
    fn expected_answers_are_not_api_errors() {
        let api = |code| CallError::Kube(api_error(code));
        let timeout = CallError::TimedOut(Duration::from_secs(1));
        assert!(!counts_as_error(Verb::Create, &api(409)), "AlreadyExists");
        assert!(!counts_as_error(Verb::Delete, &api(404)), "already gone");
        assert!(!counts_as_error(Verb::Delete, &api(409)), "precondition");
        assert!(!counts_as_error(Verb::Get, &api(404)), "not there");
        assert!(counts_as_error(Verb::List, &api(404)));
        assert!(counts_as_error(Verb::Create, &api(403)));
        assert!(counts_as_error(Verb::Create, &api(500)));
        assert!(counts_as_error(Verb::Get, &api(500)));
        assert!(counts_as_error(Verb::Delete, &timeout));
        assert!(counts_as_error(Verb::Create, &timeout));
        assert_eq!(
            [
                Verb::Create,
                Verb::Get,
                Verb::List,
                Verb::Watch,
                Verb::Delete
            ]
            .map(Verb::as_str),
            ["create", "get", "list", "watch", "delete"]
        );
    }

    /// The series of `name` with exactly these labels in the process's
    /// metrics, 0 when absent.
    fn scraped(name: &str, labels: &str) -> f64 {
        let text = crate::metrics::Exporter::new(crate::metrics::common()).encode();
        let line = format!("{name}{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))
            .map_or(0.0, |v| v.parse().expect("a number"))
    }

    fn counted(verb: Verb, reason: &str) -> f64 {
        scraped(
            "tcab_dispatcher_kube_api_errors_total",
            &format!("verb=\"{}\",reason=\"{reason}\"", verb.as_str()),
        )
    }

    fn timed(call: KubeCall, outcome: &str) -> f64 {
        scraped(
            "tcab_dispatcher_kube_request_duration_seconds_count",
            &format!("call=\"{}\",outcome=\"{outcome}\"", call.as_str()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_timed_and_counts_its_failure_by_verb_and_reason() {
        // Only this test makes calls of these kinds in this crate's tests, so
        // the counts move by what it does alone.
        let lists = counted(Verb::List, "timeout");
        let (refused, exists) = (
            counted(Verb::Create, "forbidden"),
            counted(Verb::Create, "conflict"),
        );
        let (listed, creates_ok) = (
            timed(KubeCall::ListPods, "ok"),
            timed(KubeCall::CreateJob, "conflict"),
        );
        let limit = Duration::from_secs(1);
        let ok = call(KubeCall::ListPods, limit, async { Ok::<_, kube::Error>(1) }).await;
        assert_eq!(ok.expect("ok"), 1);
        assert_eq!(
            timed(KubeCall::ListPods, "ok"),
            listed + 1.0,
            "a success is timed"
        );
        let hung: Result<(), _> = call(KubeCall::ListPods, limit, std::future::pending()).await;
        assert!(matches!(hung, Err(CallError::TimedOut(_))));
        assert_eq!(
            counted(Verb::List, "timeout"),
            lists + 1.0,
            "a timeout is counted"
        );
        assert_eq!(timed(KubeCall::ListPods, "timeout"), 1.0);
        let already = call(KubeCall::CreateJob, limit, async {
            Err::<(), _>(api_error(409))
        })
        .await;
        assert!(already.expect_err("409").is_conflict());
        assert_eq!(
            counted(Verb::Create, "conflict"),
            exists,
            "AlreadyExists is an outcome"
        );
        assert_eq!(
            timed(KubeCall::CreateJob, "conflict"),
            creates_ok + 1.0,
            "but it is timed"
        );
        let denied = call(KubeCall::CreateJob, limit, async {
            Err::<(), _>(api_error(403))
        })
        .await;
        assert_eq!(denied.expect_err("403").code(), Some(403));
        assert_eq!(counted(Verb::Create, "forbidden"), refused + 1.0);
    }

    #[test]
    fn errors_have_their_reason_from_their_type_and_code() {
        let api = |code| CallError::Kube(api_error(code));
        assert_eq!(
            CallError::TimedOut(Duration::from_secs(1)).reason(),
            ErrorReason::Timeout
        );
        assert_eq!(api(403).reason(), ErrorReason::Forbidden);
        assert_eq!(api(422).reason(), ErrorReason::Invalid);
        assert_eq!(api(500).reason(), ErrorReason::Http5xx);
        let decode = serde_json::from_str::<u8>("x").expect_err("not a number");
        assert_eq!(
            CallError::Kube(kube::Error::SerdeError(decode)).reason(),
            ErrorReason::Decode
        );
        let connect = kube::Error::Service("connection refused".into());
        assert_eq!(CallError::Kube(connect).reason(), ErrorReason::Connect);
    }

    #[tokio::test]
    async fn answers_pass_through_with_their_code() {
        let ok = bounded(Duration::from_secs(1), async { Ok::<_, kube::Error>(7) }).await;
        assert_eq!(ok.expect("ok"), 7);
        let not_found = bounded(Duration::from_secs(1), async {
            Err::<(), _>(api_error(404))
        })
        .await
        .expect_err("404");
        assert!(not_found.is_not_found() && !not_found.is_ambiguous());
        let conflict = bounded(Duration::from_secs(1), async {
            Err::<(), _>(api_error(409))
        })
        .await
        .expect_err("409");
        assert!(conflict.is_conflict());
        let server = bounded(Duration::from_secs(1), async {
            Err::<(), _>(api_error(500))
        })
        .await
        .expect_err("500");
        assert!(server.is_ambiguous());
    }
}
