//! Metrics and health endpoints (docs/metrics.md): the metrics every
//! container exports, the health state its probes read, and the small HTTP
//! server that serves `/metrics`, `/healthz` and `/readyz` on
//! `TCAB_DISPATCHER_METRICS_ADDR`.
//!
//! The metrics common to the three binaries live in one process-wide
//! [`Common`] ([`common`]): the Kubernetes and backend edges record into it
//! wherever they are, without a handle threaded through every call. Each
//! binary keeps its own metrics next to its code and registers them into the
//! [`Exporter`] it serves. Recording is always a side effect at an edge
//! (a call's answer, a tick's report); no decision reads a metric.
//!
//! # Health
//!
//! `/healthz` fails when a loop has not finished a tick within
//! [`liveness_bound`] (the poll interval plus [`TICK_CALLS`] of the longest
//! bounded call a tick makes), counted from its previous tick or from its
//! start: a wedged loop gets its container restarted. Before the loops
//! start (the first list of the owned Jobs) it passes: the wait is the Job
//! watch's, which recovers by itself, and `/readyz` shows it.
//!
//! `/readyz` passes once every loop of the container has finished a tick
//! and while the container's Job view is current.

use crate::backend::{BackendErrorKind, LOOP_RETRY};
use crate::config::{Binary, BuildInfo};
use crate::job_cache::{OwnedJobs, ViewState};
use crate::kube_api::Verb;
use crate::tick::{Tick, TickOutcome};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio::time::Instant;

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

/// The bound `/healthz` holds each loop to: the poll interval (the longest
/// idle sleep between two ticks) plus [`TICK_CALLS`] times the longest one
/// bounded call can take, which is the Kubernetes call timeout or, with a
/// backend, a backend call with the loops' retry ([`LOOP_RETRY`]: every
/// attempt timing out and the longest wait in between), whichever is longer.
///
/// With the defaults (poll 5 s, Kubernetes 15 s, backend 10 s: a backend
/// call takes at most 2 × 10 s + 5 s = 25 s) that is 5 + 12 × 25 = 305 s.
pub fn liveness_bound(
    poll: Duration,
    kube_timeout: Duration,
    backend_timeout: Option<Duration>,
) -> Duration {
    let retries = LOOP_RETRY.max_retries;
    let backend = backend_timeout
        .map(|t| t.saturating_mul(retries + 1) + LOOP_RETRY.max_wait.saturating_mul(retries))
        .unwrap_or_default();
    poll + kube_timeout.max(backend).saturating_mul(TICK_CALLS)
}

/// One loop's heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// When the loop last finished a tick, or started when it has not yet.
    pub since: Instant,
    /// Whether it has finished a tick.
    pub ticked: bool,
}

/// Whether every loop finished a tick within `bound` of `now`: `Ok` with a
/// short word for the probe, or `Err` naming the first loop that did not.
pub fn liveness(
    now: Instant,
    bound: Duration,
    loops: &BTreeMap<&'static str, Beat>,
) -> Result<String, String> {
    for (name, beat) in loops {
        let quiet = now.saturating_duration_since(beat.since);
        if quiet > bound {
            let what = if beat.ticked {
                "finished no tick"
            } else {
                "has not finished its first tick"
            };
            return Err(format!(
                "loop {name} {what} for {:.1}s (bound {:.1}s)",
                quiet.as_secs_f64(),
                bound.as_secs_f64()
            ));
        }
    }
    if loops.is_empty() {
        Ok("ok: the loops have not started (waiting for the first list of the owned Jobs)".into())
    } else {
        Ok("ok".into())
    }
}

/// Whether the container is ready: its Job view is current and every loop
/// has finished a tick. `Err` says why not.
pub fn readiness(
    view: Option<&ViewState>,
    loops: &BTreeMap<&'static str, Beat>,
) -> Result<String, String> {
    match view {
        None => return Err("the Job view has not started".into()),
        Some(ViewState::Current) => {}
        Some(ViewState::Listing) => return Err("the owned Jobs are not listed yet".into()),
        Some(ViewState::Failed(why)) => {
            return Err(format!(
                "the Job view is not current: the watch failed ({why})"
            ));
        }
    }
    if loops.is_empty() {
        return Err("the loops have not started".into());
    }
    if let Some(name) = loops.iter().find(|(_, b)| !b.ticked).map(|(n, _)| n) {
        return Err(format!("loop {name} has not finished its first tick"));
    }
    Ok("ok".into())
}

struct HealthState {
    bound: Duration,
    view: Option<OwnedJobs>,
    loops: BTreeMap<&'static str, Beat>,
}

/// What the probes read: each loop's heartbeat and the Job view. Cheap to
/// clone; every clone shares the same state.
#[derive(Clone)]
pub struct Health(Arc<Mutex<HealthState>>);

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Health")
            .field("bound", &state.bound)
            .field("view", &state.view.as_ref().map(OwnedJobs::view_state))
            .field("loops", &state.loops)
            .finish()
    }
}

impl Health {
    /// Health with no view and no loop yet; loops are held to `bound`.
    pub fn new(bound: Duration) -> Self {
        Health(Arc::new(Mutex::new(HealthState {
            bound,
            view: None,
            loops: BTreeMap::new(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bound each loop is held to.
    pub fn bound(&self) -> Duration {
        self.lock().bound
    }

    /// The Job view readiness follows.
    pub fn watch_view(&self, view: OwnedJobs) {
        self.lock().view = Some(view);
    }

    /// Whether the Job view is current (false before there is one).
    pub fn view_current(&self) -> bool {
        self.lock().view.as_ref().is_some_and(OwnedJobs::is_current)
    }

    /// The container's loops start now: each is held to the bound from
    /// here, and readiness waits for each one's first tick. Call once with
    /// every loop, before any of them ticks.
    pub fn start_loops(&self, names: &[&'static str]) {
        let now = Instant::now();
        let mut state = self.lock();
        for name in names {
            state.loops.insert(
                name,
                Beat {
                    since: now,
                    ticked: false,
                },
            );
        }
    }

    /// The loop `name` finished a tick now.
    pub fn ticked(&self, name: &'static str) {
        let now = Instant::now();
        self.lock().loops.insert(
            name,
            Beat {
                since: now,
                ticked: true,
            },
        );
    }

    /// `/healthz`: see [`liveness`].
    pub fn live(&self) -> Result<String, String> {
        let state = self.lock();
        liveness(Instant::now(), state.bound, &state.loops)
    }

    /// `/readyz`: see [`readiness`].
    pub fn ready(&self) -> Result<String, String> {
        let state = self.lock();
        let view = state.view.as_ref().map(OwnedJobs::view_state);
        readiness(view.as_ref(), &state.loops)
    }
}

/// A loop that times each tick into the tick-duration histogram and beats
/// its heart in [`Health`].
pub struct Timed<T> {
    name: &'static str,
    tick: T,
    health: Health,
}

/// Wraps `tick`, the loop named `name` (the `loop` label).
pub fn timed<T: Tick>(name: &'static str, health: &Health, tick: T) -> Timed<T> {
    Timed {
        name,
        tick,
        health: health.clone(),
    }
}

impl<T: Tick + Send> Tick for Timed<T> {
    async fn tick(&mut self) -> TickOutcome {
        let started = Instant::now();
        let outcome = self.tick.tick().await;
        common().observe_tick(self.name, started.elapsed());
        self.health.ticked(self.name);
        outcome
    }
}

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error(
        "cannot listen on {addr} for /metrics, /healthz and /readyz (TCAB_DISPATCHER_METRICS_ADDR): {error}"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// The endpoints being served; dropping it stops them.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// The address the endpoints listen on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Served {
    exporter: Exporter,
    health: Health,
}

async fn metrics(State(served): State<Arc<Served>>) -> impl IntoResponse {
    common().set_view_current(served.health.view_current());
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        served.exporter.encode(),
    )
}

fn probe(result: Result<String, String>) -> (StatusCode, String) {
    match result {
        Ok(word) => (StatusCode::OK, format!("{word}\n")),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn healthz(State(served): State<Arc<Served>>) -> impl IntoResponse {
    probe(served.health.live())
}

async fn readyz(State(served): State<Arc<Served>>) -> impl IntoResponse {
    probe(served.health.ready())
}

/// Binds `addr` and serves `/metrics` (the exporter, with
/// `tcab_dispatcher_view_current` read from `health` at each scrape),
/// `/healthz` and `/readyz` on a task of its own until the [`Endpoint`]
/// is dropped.
pub async fn serve(
    addr: SocketAddr,
    exporter: Exporter,
    health: Health,
) -> Result<Endpoint, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| ServeError::Bind { addr, error })?;
    let local = listener
        .local_addr()
        .map_err(|error| ServeError::Bind { addr, error })?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(Served { exporter, health }));
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    tracing::info!(addr = %local, "serving /metrics, /healthz and /readyz on http://{local}");
    Ok(Endpoint { addr: local, task })
}

/// [`serve`] when an address is configured; nothing listens otherwise.
pub async fn serve_if(
    addr: Option<SocketAddr>,
    exporter: Exporter,
    health: Health,
) -> Result<Option<Endpoint>, ServeError> {
    match addr {
        Some(addr) => serve(addr, exporter, health).await.map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn listed() -> OwnedJobs {
        let view = OwnedJobs::new();
        view.apply(Event::Init);
        view.apply(Event::InitDone);
        view
    }

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
        let scrapes = Arc::new(std::sync::atomic::AtomicU32::new(0));
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

    #[test]
    fn the_bound_grows_with_the_poll_interval_and_the_timeouts() {
        let s = Duration::from_secs;
        // The documented defaults: a backend call takes at most 2 x 10 + 5 s.
        assert_eq!(liveness_bound(s(5), s(15), Some(s(10))), s(305));
        // Without a backend (the reaper with the sweep off) the Kubernetes timeout rules.
        assert_eq!(liveness_bound(s(5), s(15), None), s(5 + 12 * 15));
        // A longer Kubernetes timeout wins over the backend's.
        assert_eq!(liveness_bound(s(1), s(40), Some(s(1))), s(1 + 12 * 40));
        assert!(
            liveness_bound(s(60), s(15), Some(s(10))) > liveness_bound(s(5), s(15), Some(s(10)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_ticking_fails_liveness_after_the_bound() {
        let bound = Duration::from_secs(100);
        let health = Health::new(bound);
        assert!(health.live().is_ok(), "no loop has started: alive");
        health.start_loops(&["renew", "report"]);
        tokio::time::advance(Duration::from_secs(60)).await;
        health.ticked("renew");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(health.live().is_ok(), "exactly at the bound is still alive");
        tokio::time::advance(Duration::from_millis(1)).await;
        let why = health.live().expect_err("report never finished a tick");
        assert!(
            why.contains("report") && why.contains("first tick"),
            "{why}"
        );
        health.ticked("report");
        assert_eq!(health.live(), Ok("ok".into()));
        tokio::time::advance(Duration::from_secs(61)).await;
        let why = health.live().expect_err("renew's last tick is 101 s old");
        assert!(
            why.starts_with("loop renew finished no tick for 101.0s"),
            "{why}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ready_once_the_view_is_current_and_every_loop_ticked() {
        let health = Health::new(Duration::from_secs(10));
        assert!(health.ready().unwrap_err().contains("not started"));
        let view = OwnedJobs::new();
        health.watch_view(view.clone());
        assert!(health.ready().unwrap_err().contains("not listed"));
        view.apply(Event::Init);
        view.apply(Event::InitDone);
        assert!(health.ready().unwrap_err().contains("loops"));
        health.start_loops(&["admit_run", "admit_publish"]);
        health.ticked("admit_run");
        let why = health.ready().unwrap_err();
        assert!(why.contains("admit_publish"), "{why}");
        health.ticked("admit_publish");
        assert!(health.ready().is_ok());
        view.mark_failed("410 Gone");
        let why = health.ready().unwrap_err();
        assert!(why.contains("410"), "{why}");
        assert!(!health.view_current());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_loop_beats_and_is_timed() {
        let health = Health::new(Duration::from_secs(10));
        health.start_loops(&["test_timed_loop"]);
        struct Slow;
        impl Tick for Slow {
            async fn tick(&mut self) -> TickOutcome {
                tokio::time::sleep(Duration::from_millis(20)).await;
                TickOutcome::Busy
            }
        }
        let mut loop_ = timed("test_timed_loop", &health, Slow);
        assert_eq!(loop_.tick().await, TickOutcome::Busy);
        health.watch_view(listed());
        assert!(health.ready().is_ok(), "the first tick is done");
        let text = Exporter::new(common()).encode();
        assert!(
            text.contains(
                r#"tcab_dispatcher_tick_duration_seconds_count{loop="test_timed_loop"} 1"#
            ),
            "{text}"
        );
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let response = reqwest::get(format!("http://{addr}{path}"))
            .await
            .expect("the endpoint answers");
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.text().await.expect("body"))
    }

    #[tokio::test]
    async fn the_endpoints_answer_over_http() {
        let health = Health::new(Duration::from_secs(300));
        let endpoint = serve(
            "127.0.0.1:0".parse().unwrap(),
            Exporter::new(common()),
            health.clone(),
        )
        .await
        .expect("serves");
        let addr = endpoint.addr();
        assert_ne!(addr.port(), 0);

        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!((status, body.trim()), (503, "the Job view has not started"));
        assert_eq!(get(addr, "/healthz").await.0, 200);
        let view = listed();
        health.watch_view(view.clone());
        health.start_loops(&["reap"]);
        health.ticked("reap");
        assert_eq!(get(addr, "/readyz").await.0, 200);

        let (status, kind, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
        assert!(
            body.contains("\ntcab_dispatcher_view_current 1\n"),
            "{body}"
        );
        view.mark_failed("boom");
        let (_, _, body) = get(addr, "/metrics").await;
        assert!(
            body.contains("\ntcab_dispatcher_view_current 0\n"),
            "{body}"
        );
        assert_eq!(get(addr, "/readyz").await.0, 503);
        assert_eq!(get(addr, "/nothing").await.0, 404);

        drop(endpoint);
        let gone = wait_refused(addr).await;
        assert!(gone, "dropping the endpoint stops the server");
    }

    /// Whether connecting to `addr` is refused within a few seconds.
    async fn wait_refused(addr: SocketAddr) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }

    #[tokio::test]
    async fn an_address_in_use_is_a_clear_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let error = serve(
            addr,
            Exporter::new(&Common::new()),
            Health::new(Duration::from_secs(1)),
        )
        .await
        .expect_err("the port is taken");
        let text = error.to_string();
        assert!(
            text.contains(&addr.to_string()) && text.contains("TCAB_DISPATCHER_METRICS_ADDR"),
            "{text}"
        );
        assert!(
            serve_if(
                None,
                Exporter::new(&Common::new()),
                Health::new(Duration::from_secs(1))
            )
            .await
            .expect("nothing to bind")
            .is_none()
        );
    }
}
