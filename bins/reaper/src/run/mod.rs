//! The reaper's I/O: the tick (decide what is due, LIST the sandbox pods
//! when something is, ask the backend on a sweep tick, plan, confirm,
//! delete) and the loop that runs it until shutdown.
//!
//! Every Kubernetes call is bounded by `TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS`.
//! A failed LIST, read or delete is logged with the namespace and planned
//! again on a later tick; it never stops the reaper. Nothing is decided from
//! a Job view that is not current: the view is checked before the tick
//! decides anything, read again (and checked) after the LIST, and checked
//! once more before each delete; any transition in between stops the
//! remaining deletes of the tick.
//!
//! - `tick`: the tick's skeleton, [`Reaper::tick`], and reading the Job
//!   view (and checking it is still current);
//! - `list`: listing the sandbox pods that are due;
//! - `sweep`: asking the backend which jobs it drives;
//! - `delete`: confirming and deleting, job id by job id;
//! - this module: the loop ([`run`]) under the shared supervisor.

mod delete;
mod list;
mod sweep;
mod tick;

pub use crate::report::{
    ApiFailure, DeleteOutcome, DeleteRecord, SkipReason, SweepOutcome, TickReport,
};
pub use tick::{Reaper, ReaperSetup};

use crate::config::ReaperConfig;
use crate::metrics::{REAP_LOOP, ReaperMetrics};
use crate::plan::SweepSettings;
use crate::status::StatusCell;
use kube::Client;
use std::sync::Arc;
use tcab_shared::WallClock;
use tcab_shared::backend::BackendClient;
use tcab_shared::job_cache::{OwnedJobs, WatchSettings};
use tcab_shared::metrics::{Exporter, Health, common, liveness_bound, serve_if};
use tcab_shared::runtime::{CancellationToken, Supervisor};
use tcab_shared::tick::{Tick, TickOutcome};

/// Sees the report of every tick (tests).
pub type TickObserver = Arc<dyn Fn(&TickReport) + Send + Sync>;

/// What [`run`] needs from outside.
#[derive(Clone)]
pub struct Deps {
    /// The Kubernetes client.
    pub kube: Client,
    /// The namespace of the owned Jobs (the sandboxes' too, unless
    /// `TCAB_K8S_NAMESPACE` says otherwise).
    pub namespace: String,
    /// The backend, which the orphan sweep asks what it still drives;
    /// required while the sweep is on.
    pub backend: Option<BackendClient>,
    /// The clock the orphan sweep measures ages with.
    pub clock: WallClock,
    /// Called with each tick's report.
    pub on_tick: Option<TickObserver>,
}

impl Deps {
    /// A client, the Jobs' namespace and a backend client, with the system clock.
    pub fn new(kube: Client, namespace: String, backend: Option<BackendClient>) -> Self {
        Deps {
            kube,
            namespace,
            backend,
            clock: WallClock::system(),
            on_tick: None,
        }
    }
}

/// Why the reaper refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The orphan sweep is on but no backend client was given.
    #[error("the orphan sweep is on but no backend client was given (it asks GET /jobs/active)")]
    NoBackend,
}

/// The reaper's settings from the configuration.
pub fn sweep_settings(config: &ReaperConfig) -> SweepSettings {
    SweepSettings {
        driver_managed_by: config.driver_managed_by.clone(),
        dispatcher_managed_by: config.common.managed_by.clone(),
        orphan_sweep: config.orphan_sweep,
        orphan_grace: config.orphan_grace,
        orphan_sweep_interval: config.orphan_sweep_interval,
        terminating_margin: config.terminating_margin,
    }
}

/// The loop's unit of work: a tick, then its report to the metrics, the
/// status document and the observer.
struct Ticks {
    reaper: Reaper,
    metrics: Arc<ReaperMetrics>,
    status: Arc<StatusCell>,
    on_tick: Option<TickObserver>,
}

impl Tick for Ticks {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.reaper.tick().await;
        self.metrics.record(&report);
        self.status.record(&report);
        if let Some(observe) = &self.on_tick {
            observe(&report);
        }
        TickOutcome::Idle
    }
}

/// Runs the reaper until `shutdown`: watches the owned Jobs in the
/// dispatcher's namespace, waits for their first full list, then ticks
/// every poll interval (and at once when a Job finishes), under the shared
/// [`Supervisor`]. A tick under way when shutdown comes is finished, never
/// cut between its LIST and its deletes. Returns an error only when the Job
/// watch itself stops (after the tick in flight finished) or the loop
/// panicked.
pub async fn run(
    config: ReaperConfig,
    deps: Deps,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let own_namespace = deps.namespace;
    let sandbox_namespace = config
        .sandbox_namespace
        .clone()
        .unwrap_or_else(|| own_namespace.clone());
    let settings = sweep_settings(&config);
    if settings.orphan_sweep && deps.backend.is_none() {
        return Err(RunError::NoBackend.into());
    }
    // The endpoints first: a metrics address that cannot be bound stops the
    // start, and the probes answer while the Jobs are listed.
    let metrics = Arc::new(ReaperMetrics::new());
    let health = Health::new(liveness_bound(
        config.common.poll_interval,
        config.common.kube_timeout,
        deps.backend.as_ref().map(BackendClient::timeout),
    ));
    let mut exporter = Exporter::new(common());
    metrics.register(exporter.registry_mut());
    let status = Arc::new(StatusCell::new(deps.clock.clone()));
    let _endpoint = serve_if(
        config.common.metrics_addr,
        exporter,
        health.clone(),
        status.source(),
    )
    .await?;
    tracing::info!(
        namespace = %own_namespace,
        sandbox_namespace = %sandbox_namespace,
        driver_managed_by = %settings.driver_managed_by,
        orphan_sweep = settings.orphan_sweep,
        orphan_grace_seconds = settings.orphan_grace.as_secs(),
        orphan_sweep_interval_seconds = settings.orphan_sweep_interval.as_secs(),
        "reaper starting"
    );

    let (jobs, watch) = OwnedJobs::watch(
        deps.kube.clone(),
        &own_namespace,
        &config.common.managed_by,
        WatchSettings::of(&config.common),
    );
    let supervisor = Supervisor::new(&shutdown, &health, &jobs, watch);
    let ticks = supervisor
        .run(|loops| {
            tracing::info!(jobs = jobs.len(), "owned Jobs listed; reaping");
            // A driver Job that fails leaves a sandbox to reap now, not at the next poll.
            let wake = jobs.finishes();
            let ticks = Ticks {
                reaper: Reaper::new(ReaperSetup {
                    kube: deps.kube,
                    job_namespace: own_namespace,
                    sandbox_namespace,
                    jobs: jobs.clone(),
                    settings,
                    clock: deps.clock,
                    backend: deps.backend,
                    kube_timeout: config.common.kube_timeout,
                }),
                metrics,
                status,
                on_tick: deps.on_tick,
            };
            loops.add(REAP_LOOP, config.common.poll_interval, wake, ticks);
        })
        .await?;
    tracing::info!(ticks, "reaper stopped");
    Ok(())
}
