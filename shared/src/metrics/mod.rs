//! Metrics and health endpoints (docs/metrics.md): the metrics every
//! container exports (here), the health state its probes read ([`health`]),
//! the frame of each container's status document ([`status`]), and the
//! small HTTP server that serves `/metrics`, `/healthz`, `/readyz` and
//! `/status` on `TCAB_DISPATCHER_METRICS_ADDR` ([`server`]).
//!
//! The metrics common to the three binaries live in one process-wide
//! [`Common`] ([`common`]): the Kubernetes and backend edges record into it
//! wherever they are, without a handle threaded through every call. Each
//! binary keeps its own metrics next to its code and registers them into the
//! [`Exporter`] it serves. Recording is always a side effect at an edge
//! (a call's answer, a tick's report); no decision reads a metric.

pub mod health;
pub mod labels;
pub mod process;
pub mod server;
pub mod status;

pub use health::{Beat, Health, Timed, liveness, liveness_bound, readiness, timed};
pub use server::{Endpoint, ServeError, serve, serve_if};
pub use status::StatusSource;

use crate::config::{Binary, BuildInfo};
use crate::kube_api::Verb;
use labels::{BackendCall, ErrorReason, KubeCall, LabelValue};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

/// Bucket bounds, in seconds, of the call and tick histograms
/// (docs/metrics.md).
pub const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A label set of static values: `[("lane", "run")]`.
pub type Labels<const N: usize> = [(&'static str, &'static str); N];

/// A family of histograms, each with the buckets its constructor gives.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A histogram with [`BUCKETS`].
pub fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// An empty family of histograms with [`BUCKETS`].
pub fn histogram_family<L>() -> HistogramFamily<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::new_with_constructor(histogram as fn() -> Histogram)
}

/// An empty family of histograms whose every member is made by `make`
/// (a histogram with its own buckets).
pub fn histogram_family_with<L>(make: fn() -> Histogram) -> HistogramFamily<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::new_with_constructor(make)
}

/// Creates each series of `family` at 0 (a counter) or empty (a histogram),
/// so the first event is an increase from 0 that `increase()` and `rate()`
/// see, rather than a series that appears at 1.
pub fn zero<L, M, C>(family: &Family<L, M, C>, series: impl IntoIterator<Item = L>)
where
    L: Clone + std::hash::Hash + Eq,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    for labels in series {
        drop(family.get_or_create(&labels));
    }
}

/// What one attempt of a backend call came to, for the `status` and
/// `outcome` labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendStatus {
    /// The backend answered with this HTTP status code.
    Code(u16),
    /// No answer came: why (a timeout, or a connection that failed or broke).
    NoAnswer(ErrorReason),
}

impl BackendStatus {
    /// The `status` label value: `200`, `503`, or the reason no answer came
    /// (`timeout`, `connect`).
    pub fn label(self) -> Cow<'static, str> {
        match self {
            BackendStatus::Code(code) => Cow::Owned(code.to_string()),
            BackendStatus::NoAnswer(reason) => Cow::Borrowed(reason.as_str()),
        }
    }

    /// The `outcome` label value: `ok` for a 1xx-3xx answer, else the
    /// reason, in the backend client's terms (its
    /// [`crate::backend::BackendErrorKind`]): 401 and 403 are a refused
    /// token, 429 and 503 the backend being busy, any other 4xx `http_4xx`.
    pub fn outcome(self) -> &'static str {
        let reason = match self {
            BackendStatus::Code(code) if code < 400 => return OK,
            BackendStatus::Code(401 | 403) => ErrorReason::Unauthorized,
            BackendStatus::Code(404) => ErrorReason::NotFound,
            BackendStatus::Code(409) => ErrorReason::Conflict,
            BackendStatus::Code(429 | 503) => ErrorReason::Unavailable,
            BackendStatus::Code(400..=499) => ErrorReason::Http4xx,
            BackendStatus::Code(_) => ErrorReason::Http5xx,
            BackendStatus::NoAnswer(reason) => reason,
        };
        reason.as_str()
    }
}

/// The `outcome` of a call that succeeded.
pub const OK: &str = "ok";

/// The labels of the backend latency histogram: `call`, `status`, `outcome`.
pub type BackendLabels = [(&'static str, Cow<'static, str>); 3];

/// The metrics every container exports (docs/metrics.md, "all").
#[derive(Debug)]
pub struct Common {
    build_info: Family<Labels<4>, Gauge>,
    view_current: Gauge,
    tick_duration: HistogramFamily<Labels<1>>,
    kube_api_errors: Family<Labels<2>, Counter>,
    kube_request_duration: HistogramFamily<Labels<2>>,
    backend_request_duration: HistogramFamily<BackendLabels>,
    backend_errors: Family<Labels<2>, Counter>,
}

impl Default for Common {
    fn default() -> Self {
        Self::new()
    }
}

impl Common {
    /// Fresh metrics, registered nowhere yet.
    pub fn new() -> Self {
        Common {
            build_info: Family::default(),
            view_current: Gauge::default(),
            tick_duration: histogram_family(),
            kube_api_errors: Family::default(),
            kube_request_duration: histogram_family(),
            backend_request_duration: histogram_family(),
            backend_errors: Family::default(),
        }
    }

    /// Registers the common metrics (the registry shares them, not copies).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcab_dispatcher_build_info",
            "Always 1; the version and git revision of the running binary, and the backend contract it speaks",
            self.build_info.clone(),
        );
        registry.register(
            "tcab_dispatcher_view_current",
            "1 while the container's watch-backed view of owned Jobs is current, else 0",
            self.view_current.clone(),
        );
        registry.register(
            "tcab_dispatcher_tick_duration_seconds",
            "Time of one pass of a loop",
            self.tick_duration.clone(),
        );
        registry.register(
            "tcab_dispatcher_kube_api_errors",
            "Failed Kubernetes API requests and watch errors, by verb and reason",
            self.kube_api_errors.clone(),
        );
        registry.register(
            "tcab_dispatcher_kube_request_duration_seconds",
            "Time of one bounded Kubernetes API call, by call and outcome",
            self.kube_request_duration.clone(),
        );
        registry.register(
            "tcab_dispatcher_backend_request_duration_seconds",
            "Time of one HTTP attempt to the backend, by call, status and outcome",
            self.backend_request_duration.clone(),
        );
        registry.register(
            "tcab_dispatcher_backend_errors",
            "Backend calls that failed (after the client's retry), by call and reason",
            self.backend_errors.clone(),
        );
    }

    /// Records which binary this is, its version and revision and the backend
    /// contract it speaks, and creates at 0 every error series the binary can
    /// emit: each verb and reason of a Kubernetes call, each backend call it
    /// makes and reason.
    pub fn start(&self, binary: Binary, build: &BuildInfo) {
        self.build_info
            .get_or_create(&[
                ("version", build.version),
                ("revision", build.revision),
                ("binary", binary.name()),
                ("contract", crate::backend::CONTRACT_VERSION),
            ])
            .set(1);
        zero(
            &self.kube_api_errors,
            Verb::ALL.iter().flat_map(|verb| {
                ErrorReason::KUBE
                    .iter()
                    .map(move |reason| [("verb", verb.as_str()), ("reason", reason.as_str())])
            }),
        );
        zero(
            &self.backend_errors,
            BackendCall::of(binary).flat_map(|call| {
                ErrorReason::BACKEND
                    .iter()
                    .map(move |reason| [("call", call.as_str()), ("reason", reason.as_str())])
            }),
        );
    }

    /// Records whether the Job view is current.
    pub fn set_view_current(&self, current: bool) {
        self.view_current.set(i64::from(current));
    }

    /// Records one pass of the loop `name`.
    pub fn observe_tick(&self, name: &'static str, took: Duration) {
        self.tick_duration
            .get_or_create(&[("loop", name)])
            .observe(took.as_secs_f64());
    }

    /// Counts one failed Kubernetes API request or watch error.
    pub fn kube_api_error(&self, verb: Verb, reason: ErrorReason) {
        self.kube_api_errors
            .get_or_create(&[("verb", verb.as_str()), ("reason", reason.as_str())])
            .inc();
    }

    /// Records one bounded Kubernetes call: `outcome` is [`OK`] or the
    /// reason it failed.
    pub fn kube_call(&self, call: KubeCall, outcome: &'static str, took: Duration) {
        self.kube_request_duration
            .get_or_create(&[("call", call.as_str()), ("outcome", outcome)])
            .observe(took.as_secs_f64());
    }

    /// Records one HTTP attempt of the backend call `call`.
    pub fn backend_attempt(&self, call: BackendCall, status: BackendStatus, took: Duration) {
        self.backend_request_duration
            .get_or_create(&[
                ("call", Cow::Borrowed(call.as_str())),
                ("status", status.label()),
                ("outcome", Cow::Borrowed(status.outcome())),
            ])
            .observe(took.as_secs_f64());
    }

    /// Counts one backend call that failed, after the client's retry.
    pub fn backend_error(&self, call: BackendCall, reason: ErrorReason) {
        self.backend_errors
            .get_or_create(&[("call", call.as_str()), ("reason", reason.as_str())])
            .inc();
    }
}

/// The process's common metrics.
pub fn common() -> &'static Common {
    static COMMON: LazyLock<Common> = LazyLock::new(Common::new);
    &COMMON
}

/// A registry to serve and what to refresh in it before each scrape (the
/// values that are read, not counted: a view state, an age).
pub struct Exporter {
    registry: Registry,
    refresh: Vec<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// An exporter of `common` and nothing else yet.
    pub fn new(common: &Common) -> Self {
        let mut registry = Registry::default();
        common.register(&mut registry);
        process::register(&mut registry);
        Exporter {
            registry,
            refresh: Vec::new(),
        }
    }

    /// The registry, for a binary to register its own metrics.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Runs `refresh` before each scrape.
    pub fn on_scrape(&mut self, refresh: impl Fn() + Send + Sync + 'static) {
        self.refresh.push(Box::new(refresh));
    }

    /// The metrics in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        for refresh in &self.refresh {
            refresh();
        }
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would be a bug in
        // the encoder, and the scrape then shows what was written.
        if let Err(error) = prometheus_text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "encoding the metrics failed");
        }
        out
    }
}

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// How many of the longest bounded call one tick may take before
/// `/healthz` calls its loop stuck. The longest tick in normal operation
/// is an admission whose create has to be settled: a claim, a vault `Put`,
/// up to eight creates and reads (`SETTLE_CALLS`) and a `Forget`.
pub const TICK_CALLS: u32 = 12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_metrics_encode_under_their_documented_names() {
        let common = Common::new();
        let exporter = Exporter::new(&common);
        common.start(
            Binary::Reaper,
            &BuildInfo {
                version: "0.1.0",
                revision: "abc123",
            },
        );
        common.set_view_current(true);
        common.observe_tick("reap", Duration::from_millis(30));
        common.kube_api_error(Verb::Delete, ErrorReason::Forbidden);
        common.kube_api_error(Verb::Delete, ErrorReason::Forbidden);
        common.kube_call(KubeCall::DeletePod, OK, Duration::from_millis(3));
        common.backend_attempt(
            BackendCall::ActiveRuns,
            BackendStatus::Code(200),
            Duration::from_millis(7),
        );
        common.backend_attempt(
            BackendCall::ClaimRun,
            BackendStatus::NoAnswer(ErrorReason::Timeout),
            Duration::from_secs(10),
        );
        common.backend_error(BackendCall::ActiveRuns, ErrorReason::Http5xx);
        let text = exporter.encode();
        for line in [
            "# TYPE tcab_dispatcher_build_info gauge",
            r#"tcab_dispatcher_build_info{version="0.1.0",revision="abc123",binary="tcab-reaper",contract="1"} 1"#,
            "# TYPE tcab_dispatcher_view_current gauge",
            "tcab_dispatcher_view_current 1",
            "# TYPE tcab_dispatcher_tick_duration_seconds histogram",
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="0.025"} 0"#,
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="0.05"} 1"#,
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="+Inf"} 1"#,
            r#"tcab_dispatcher_tick_duration_seconds_count{loop="reap"} 1"#,
            "# TYPE tcab_dispatcher_kube_api_errors_total counter",
            r#"tcab_dispatcher_kube_api_errors_total{verb="delete",reason="forbidden"} 2"#,
            // Created at 0 at the start: every verb and reason.
            r#"tcab_dispatcher_kube_api_errors_total{verb="watch",reason="connect"} 0"#,
            r#"tcab_dispatcher_kube_request_duration_seconds_count{call="delete_pod",outcome="ok"} 1"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_count{call="active_runs",status="200",outcome="ok"} 1"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_bucket{call="claim_run",status="timeout",outcome="timeout",le="5"} 0"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_bucket{call="claim_run",status="timeout",outcome="timeout",le="10"} 1"#,
            "# TYPE tcab_dispatcher_backend_errors_total counter",
            r#"tcab_dispatcher_backend_errors_total{call="active_runs",reason="http_5xx"} 1"#,
            // The reaper makes one backend call: its other reasons at 0.
            r#"tcab_dispatcher_backend_errors_total{call="active_runs",reason="timeout"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert!(
            !text.contains(r#"backend_errors_total{call="claim_run""#),
            "the reaper makes no claim:\n{text}"
        );
        // Every bucket bound of docs/metrics.md, and no other.
        let bounds: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with(r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap""#)
            })
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(
            bounds,
            [
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
                "30", "+Inf"
            ]
        );
    }

    #[test]
    fn a_backend_attempt_has_its_outcome() {
        let outcome = |s| BackendStatus::outcome(s);
        assert_eq!(outcome(BackendStatus::Code(200)), "ok");
        assert_eq!(outcome(BackendStatus::Code(204)), "ok");
        assert_eq!(outcome(BackendStatus::Code(401)), "unauthorized");
        assert_eq!(outcome(BackendStatus::Code(403)), "unauthorized");
        assert_eq!(outcome(BackendStatus::Code(409)), "conflict");
        assert_eq!(outcome(BackendStatus::Code(429)), "unavailable");
        assert_eq!(outcome(BackendStatus::Code(503)), "unavailable");
        assert_eq!(outcome(BackendStatus::Code(500)), "http_5xx");
        assert_eq!(outcome(BackendStatus::Code(422)), "http_4xx");
        assert_eq!(
            outcome(BackendStatus::NoAnswer(ErrorReason::Connect)),
            "connect"
        );
        assert_eq!(
            BackendStatus::NoAnswer(ErrorReason::Connect).label(),
            "connect"
        );
    }

    #[test]
    fn refreshers_run_before_each_scrape() {
        let common = Common::new();
        let mut exporter = Exporter::new(&common);
        let age: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        exporter
            .registry_mut()
            .register("tcab_dispatcher_test_age_seconds", "An age", age.clone());
        let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (seen, gauge) = (scrapes.clone(), age.clone());
        exporter.on_scrape(move || {
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            gauge.set(f64::from(n) * 1.5);
        });
        assert!(
            exporter
                .encode()
                .contains("tcab_dispatcher_test_age_seconds 1.5\n")
        );
        assert!(
            exporter
                .encode()
                .contains("tcab_dispatcher_test_age_seconds 3.0\n")
        );
    }
}
