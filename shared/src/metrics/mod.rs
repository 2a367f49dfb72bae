//! Metrics and health endpoints (docs/metrics.md): the metrics every
//! container exports (here), the health state its probes read ([`health`]),
//! and the small HTTP server that serves `/metrics`, `/healthz` and `/readyz`
//! on `TCAB_DISPATCHER_METRICS_ADDR` ([`server`]).
//!
//! The metrics common to the three binaries live in one process-wide
//! [`Common`] ([`common`]): the Kubernetes and backend edges record into it
//! wherever they are, without a handle threaded through every call. Each
//! binary keeps its own metrics next to its code and registers them into the
//! [`Exporter`] it serves. Recording is always a side effect at an edge
//! (a call's answer, a tick's report); no decision reads a metric.

pub mod health;
pub mod server;

pub use health::{Beat, Health, Timed, liveness, liveness_bound, readiness, timed};
pub use server::{Endpoint, ServeError, serve, serve_if};

use crate::backend::BackendErrorKind;
use crate::config::{Binary, BuildInfo};
use crate::kube_api::Verb;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

/// Bucket bounds, in seconds, of every histogram (docs/metrics.md).
pub const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A label set of static values: `[("lane", "run")]`.
pub type Labels<const N: usize> = [(&'static str, &'static str); N];

/// A family of histograms with [`BUCKETS`].
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

/// What one attempt of a backend call came to, for the `status` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendStatus {
    /// The backend answered with this HTTP status code.
    Code(u16),
    /// No answer came: the kind of the failure (a timeout, or a connection
    /// that failed or broke).
    NoAnswer(BackendErrorKind),
}

impl BackendStatus {
    /// The label value: `200`, `503`, or the failure's kind when no answer
    /// came (`timeout`, `transport`).
    pub fn label(self) -> Cow<'static, str> {
        match self {
            BackendStatus::Code(code) => Cow::Owned(code.to_string()),
            BackendStatus::NoAnswer(kind) => Cow::Borrowed(kind.as_str()),
        }
    }
}

/// The labels of the backend latency histogram: `call` and `status`.
pub type BackendLabels = [(&'static str, Cow<'static, str>); 2];

/// The metrics every container exports (docs/metrics.md, "all").
#[derive(Debug)]
pub struct Common {
    build_info: Family<Labels<3>, Gauge>,
    view_current: Gauge,
    tick_duration: HistogramFamily<Labels<1>>,
    kube_api_errors: Family<Labels<1>, Counter>,
    backend_request_duration: HistogramFamily<BackendLabels>,
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
            backend_request_duration: histogram_family(),
        }
    }

    /// Registers the common metrics (the registry shares them, not copies).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcab_dispatcher_build_info",
            "Always 1; the version and git revision of the running binary",
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
            "Failed Kubernetes API requests and watch errors, by verb",
            self.kube_api_errors.clone(),
        );
        registry.register(
            "tcab_dispatcher_backend_request_duration_seconds",
            "Time of one HTTP attempt to the backend, by call and status",
            self.backend_request_duration.clone(),
        );
    }

    /// Records which binary this is, its version and revision.
    pub fn set_build_info(&self, binary: Binary, build: &BuildInfo) {
        self.build_info
            .get_or_create(&[
                ("version", build.version),
                ("revision", build.revision),
                ("binary", binary.name()),
            ])
            .set(1);
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
    pub fn kube_api_error(&self, verb: Verb) {
        self.kube_api_errors
            .get_or_create(&[("verb", verb.as_str())])
            .inc();
    }

    /// Records one HTTP attempt of the backend call `call`.
    pub fn backend_attempt(&self, call: &'static str, status: BackendStatus, took: Duration) {
        self.backend_request_duration
            .get_or_create(&[("call", Cow::Borrowed(call)), ("status", status.label())])
            .observe(took.as_secs_f64());
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
        common.set_build_info(
            Binary::Reaper,
            &BuildInfo {
                version: "0.1.0",
                revision: "abc123",
            },
        );
        common.set_view_current(true);
        common.observe_tick("reap", Duration::from_millis(30));
        common.kube_api_error(Verb::Delete);
        common.kube_api_error(Verb::Delete);
        common.backend_attempt(
            "active_runs",
            BackendStatus::Code(200),
            Duration::from_millis(7),
        );
        common.backend_attempt(
            "claim_run",
            BackendStatus::NoAnswer(BackendErrorKind::Timeout),
            Duration::from_secs(10),
        );
        let text = exporter.encode();
        for line in [
            "# TYPE tcab_dispatcher_build_info gauge",
            r#"tcab_dispatcher_build_info{version="0.1.0",revision="abc123",binary="tcab-reaper"} 1"#,
            "# TYPE tcab_dispatcher_view_current gauge",
            "tcab_dispatcher_view_current 1",
            "# TYPE tcab_dispatcher_tick_duration_seconds histogram",
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="0.025"} 0"#,
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="0.05"} 1"#,
            r#"tcab_dispatcher_tick_duration_seconds_bucket{loop="reap",le="+Inf"} 1"#,
            r#"tcab_dispatcher_tick_duration_seconds_count{loop="reap"} 1"#,
            "# TYPE tcab_dispatcher_kube_api_errors_total counter",
            r#"tcab_dispatcher_kube_api_errors_total{verb="delete"} 2"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_count{call="active_runs",status="200"} 1"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_bucket{call="claim_run",status="timeout",le="5"} 0"#,
            r#"tcab_dispatcher_backend_request_duration_seconds_bucket{call="claim_run",status="timeout",le="10"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
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
