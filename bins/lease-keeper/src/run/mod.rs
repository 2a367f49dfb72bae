//! The lease-keeper's loops: [`run`] serves the vault, watches the owned
//! Jobs and runs two loops side by side under the shared supervisor
//! (`tcab_shared::runtime::Supervisor`): renewals ([`renewals`]) every poll
//! interval, and reports ([`reports`]) at every Job change and at least
//! every poll interval.

mod deaths;
mod evidence;
mod lost;
mod memory;
mod refusals;
pub mod renewals;
pub mod reports;

pub use deaths::Prepared;
pub use evidence::{Evidence, READS_AT_ONCE};

use crate::config::LeaseKeeperConfig;
use crate::gate::Gate;
use crate::grpc;
use crate::inspect::Inspector;
use crate::metrics::{KeeperMetrics, RENEW_LOOP, REPORT_LOOP};
use crate::plan::failures::FailureSettings;
use crate::status::KeeperStatus;
use crate::tokens::TokenStore;
use renewals::{JudgedDead, MeteredRenewer, Renewer};
use reports::{MeteredReporter, Reporter, ReporterParts};
use std::sync::Arc;
use std::time::Duration;
use tcab_shared::backend::BackendClient;
use tcab_shared::config::Binary;
use tcab_shared::events::{EventSender, Reporter as EventReporter};
use tcab_shared::job_cache::{OwnedJobs, WatchSettings};
use tcab_shared::metrics::{Exporter, Health, common, liveness_bound, serve_if};
use tcab_shared::runtime::{CancellationToken, Supervisor};
use tcab_shared::tick::Wake;
use tcab_shared::{Lane, WallClock};
use tokio::net::TcpListener;

/// How often a Job past the start grace has its pod read again.
pub const START_CHECK_EVERY: Duration = Duration::from_secs(30);
/// How many times an unreadable log is tried in all.
pub const LOG_ATTEMPTS: u32 = 3;

/// What `run` is given from outside, so tests can substitute each.
pub struct Deps {
    /// The Kubernetes client.
    pub kube: kube::Client,
    /// The namespace the Jobs live in.
    pub namespace: String,
    /// The backend client (service token inside).
    pub backend: BackendClient,
    /// The vault's listener, already bound (see [`grpc::bind`]).
    pub vault_listener: TcpListener,
    /// The wall clock a Job's age is read on (against its creation time).
    pub clock: WallClock,
}

/// The failure knobs from the configuration.
pub fn failure_settings(config: &LeaseKeeperConfig) -> FailureSettings {
    FailureSettings {
        start_grace: config.start_grace,
        unschedulable_grace: config.unschedulable_grace,
        terminating_margin: config.terminating_margin,
        start_check_every: START_CHECK_EVERY.min(config.start_grace),
        log_attempts: LOG_ATTEMPTS,
    }
}

/// How long one report tick may keep starting calls: half the liveness
/// bound, so the tick in flight (at most one call past its budget) always
/// ends well within the bound the probe holds it to.
pub fn report_budget(config: &LeaseKeeperConfig) -> Duration {
    liveness_bound(
        config.common.poll_interval,
        config.common.kube_timeout,
        Some(config.backend.timeout),
    ) / 2
}

/// The two loops over one Job view, built from the configuration.
pub struct Keeper {
    /// The renewal loop.
    pub renewer: Renewer,
    /// The report loop.
    pub reporter: Reporter,
    /// The admission gate both feed.
    pub gate: Gate,
    /// The token store the vault serves.
    pub store: TokenStore,
}

impl Keeper {
    /// A keeper over a Job view (already watching, or fed by a test) and a
    /// token store (which the vault serves); Jobs' ages are read on the
    /// machine's clock ([`Keeper::with_clock`] gives it another).
    pub fn new(
        config: &LeaseKeeperConfig,
        backend: BackendClient,
        kube: kube::Client,
        namespace: &str,
        jobs: OwnedJobs,
        store: TokenStore,
    ) -> Self {
        let gate = Gate::new(config.publishing, jobs.clone());
        let judged_dead = JudgedDead::default();
        let kube_for_events = kube.clone();
        let renewer = Renewer::new(
            backend.clone(),
            jobs.clone(),
            gate.clone(),
            judged_dead.clone(),
            config.publishing,
        );
        let reporter = Reporter::new(ReporterParts {
            backend,
            inspector: Inspector::new(
                kube,
                namespace,
                &config.common.managed_by,
                config.log_tail_lines,
                config.common.kube_timeout,
            ),
            jobs,
            store: store.clone(),
            gate: gate.clone(),
            judged_dead,
            publishing: config.publishing,
            lease_length: config.lease_length,
            poll: config.common.poll_interval,
            budget: report_budget(config),
            settings: failure_settings(config),
            clock: WallClock::system(),
            namespace: namespace.to_owned(),
            events: EventSender::start(
                kube_for_events,
                EventReporter::of(Binary::LeaseKeeper),
                WallClock::system(),
                config.common.kube_timeout,
            ),
        });
        Keeper {
            renewer,
            reporter,
            gate,
            store,
        }
    }

    /// This keeper with Jobs' ages read on `clock`.
    pub fn with_clock(mut self, clock: WallClock) -> Self {
        self.reporter.clock = clock;
        self
    }
}

/// What one renewal round followed by one report tick did (for tests that
/// drive the keeper by hand).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Run ids the backend renewed; `None` when the call failed.
    pub renewed_runs: Option<Vec<tcab_shared::backend::JobId>>,
    /// Publish ids renewed; `None` when the call failed or publishing is off.
    pub renewed_publishes: Option<Vec<tcab_shared::backend::JobId>>,
    /// The report tick.
    pub reports: crate::report::ReportTick,
}

impl TickReport {
    /// Run ids whose deaths were reported.
    pub fn reported_dead(&self) -> Vec<&str> {
        self.reports
            .reported_dead
            .iter()
            .map(|(id, _)| id.as_str())
            .collect()
    }
}

impl Keeper {
    /// One renewal round, then one report tick that judges lost jobs, in that
    /// order, for tests that drive the keeper by hand (the binary runs the two
    /// as separate loops).
    pub async fn tick(&mut self) -> TickReport {
        let renewal = self.renewer.round().await;
        let renewed = |lane: Lane, call: Option<usize>| {
            call.map(|_| {
                let ids = self.renewer.renewed(lane).into_iter();
                ids.map(str::to_owned).collect()
            })
        };
        let renewed_runs = renewed(Lane::Run, renewal.runs);
        let renewed_publishes = renewed(Lane::Publish, renewal.publishes);
        let reports = self.reporter.tick_at(Some(true)).await;
        TickReport {
            renewed_runs,
            renewed_publishes,
            reports,
        }
    }
}

/// Runs the lease-keeper until `shutdown`: serves the vault, watches the
/// owned Jobs and, once they are listed, runs the renewal and report loops
/// (under the shared [`Supervisor`]). On shutdown each loop finishes the
/// tick in flight (a death report is never cut short) and the vault is
/// given a moment to close. A dead watch or vault server stops the loops
/// the same way and ends it with an error.
pub async fn run(
    config: LeaseKeeperConfig,
    deps: Deps,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Deps {
        kube,
        namespace,
        backend,
        vault_listener,
        clock,
    } = deps;
    let vault_addr = vault_listener
        .local_addr()
        .map_err(grpc::VaultError::LocalAddr)?;
    grpc::check_addr(vault_addr, config.vault_allow_non_loopback)?;
    // The endpoints are served before the first list: a metrics address
    // that cannot be bound stops the start, and the probes answer while the
    // Jobs are listed.
    let metrics = Arc::new(KeeperMetrics::new());
    let health = Health::new(liveness_bound(
        config.common.poll_interval,
        config.common.kube_timeout,
        Some(backend.timeout()),
    ));
    let mut exporter = Exporter::new(common());
    metrics.register(exporter.registry_mut());

    let (jobs, watch) = OwnedJobs::watch(
        kube.clone(),
        &namespace,
        &config.common.managed_by,
        WatchSettings::of(&config.common),
    );
    let mut supervisor = Supervisor::new(&shutdown, &health, &jobs, watch);
    let keeper = Keeper::new(
        &config,
        backend,
        kube,
        &namespace,
        jobs.clone(),
        TokenStore::new(),
    )
    .with_clock(clock);
    let (ages, gate) = (metrics.clone(), keeper.gate.clone());
    exporter.on_scrape(move || ages.refresh_ages(&gate, tokio::time::Instant::now()));
    let status = Arc::new(KeeperStatus::new(keeper.gate.clone(), WallClock::system()));
    let _endpoint = serve_if(
        config.common.metrics_addr,
        exporter,
        health.clone(),
        status.source(),
    )
    .await?;
    let (store, gate) = (keeper.store.clone(), keeper.gate.clone());
    supervisor.serve("the token vault server", |stop| async move {
        Ok(grpc::serve(vault_listener, store, gate, stop).await?)
    });
    tracing::info!(%vault_addr, %namespace, publishing = config.publishing, "lease-keeper started; serving the token vault");

    let poll = config.common.poll_interval;
    let Keeper {
        renewer, reporter, ..
    } = keeper;
    // Nothing is renewed or judged before the first list: an unlisted view
    // knows no Job. After that, renewals go on from the last known view
    // even while it is not current (judging does not).
    supervisor
        .run(|loops| {
            tracing::info!(
                jobs = jobs.len(),
                "Job view current; renewing and reporting"
            );
            let renewer =
                MeteredRenewer::new(renewer, metrics.clone(), status.clone(), config.publishing);
            loops.add(RENEW_LOOP, poll, Wake::never(), renewer);
            // A Job's first sign of failure is evidence to read now, not at the next poll.
            let reporter = MeteredReporter::new(reporter, metrics.clone(), status.clone());
            loops.add(REPORT_LOOP, poll, jobs.changes(), reporter);
        })
        .await?;
    tracing::info!("lease-keeper stopped");
    Ok(())
}
