//! The admitter's I/O edges ([`Deps`]) and [`run`], which runs each
//! lane's loop until shutdown.

use crate::config::AdmitterConfig;
use crate::keeper_client::{KeeperClient, KeeperClientSettings};
use crate::lane::LaneAdmitter;
use crate::metrics::{AdmitterMetrics, MeteredLane, loop_name};
use crate::preflight;
use crate::settings::AdmitterSettings;
use crate::status::AdmitterStatus;
use anyhow::Context as _;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use std::fmt;
use std::sync::Arc;
use tcab_shared::WallClock;
use tcab_shared::backend::BackendClient;
use tcab_shared::job_cache::{OwnedJobs, WatchSettings};
use tcab_shared::metrics::{Exporter, Health, common, liveness_bound, serve_if};
use tcab_shared::runtime::{CancellationToken, Supervisor};

/// The I/O the admitter is given, so tests can substitute each piece.
#[derive(Clone)]
pub struct Deps {
    /// The kube client (for the Job watch, creates and reads).
    pub kube: kube::Client,
    /// The namespace the Jobs live in.
    pub namespace: String,
    /// The backend client.
    pub backend: BackendClient,
}

impl fmt::Debug for Deps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deps")
            .field("namespace", &self.namespace)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// Runs the admitter until `shutdown`: checks with a dry-run create that the
/// API server accepts a Job built from the settings (`preflight`; a
/// refusal is returned as a [`preflight::Refused`], which `main` turns into
/// exit code 2), watches the owned Jobs, waits for the first full list, then
/// runs each enabled lane's loop on its own task (under the shared
/// [`Supervisor`]).
///
/// On shutdown each lane finishes the admission in flight (claim, vault
/// `Put`, create, settle) and stops; `run` returns once both have. It
/// returns an error when the Job watch dies (after the lanes stopped the
/// same way), so the process exits and is restarted, or when a lane's task
/// panicked.
pub async fn run(
    config: AdmitterConfig,
    deps: Deps,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let settings = AdmitterSettings::from_config(&config);
    // The endpoints first: a metrics address that cannot be bound stops the
    // start, and the probes answer while the Jobs are listed.
    let metrics = Arc::new(AdmitterMetrics::new());
    metrics.start(&settings);
    let health = Health::new(liveness_bound(
        settings.poll_interval,
        settings.kube_timeout,
        Some(deps.backend.timeout()),
    ));
    let mut exporter = Exporter::new(common());
    metrics.register(exporter.registry_mut());
    let scraped = metrics.clone();
    exporter.on_scrape(move || scraped.refresh(tokio::time::Instant::now()));
    let status = Arc::new(AdmitterStatus::new(&settings, WallClock::system()));
    let _endpoint = serve_if(
        config.common.metrics_addr,
        exporter,
        health.clone(),
        status.source(),
    )
    .await?;
    let vault =
        KeeperClient::connect_lazy(config.common.vault_addr, KeeperClientSettings::default())
            .context("building the vault client")?;
    // Before anything is claimed: the API server must accept a Job built
    // from these settings, or no Job ever will be created.
    preflight::check(
        &deps.kube,
        &deps.namespace,
        &settings.jobs,
        settings.kube_timeout,
        &shutdown,
    )
    .await?;
    let jobs: Api<Job> = Api::namespaced(deps.kube.clone(), &deps.namespace);
    if shutdown.is_cancelled() {
        tracing::info!("admitter stopped before its start-up check ended");
        return Ok(());
    }
    let (cache, watch) = OwnedJobs::watch(
        deps.kube.clone(),
        &deps.namespace,
        &config.common.managed_by,
        WatchSettings::of(&config.common),
    );
    metrics.watch(&cache, WallClock::system());
    let supervisor = Supervisor::new(&shutdown, &health, &cache, watch);
    tracing::info!(
        namespace = %deps.namespace,
        max_inflight = settings.max_inflight,
        max_publish_inflight = settings.max_publish_inflight,
        publishing = settings.jobs.publisher_image.is_some(),
        "admitter starting"
    );

    let poll = settings.poll_interval;
    supervisor
        .run(|loops| {
            let lanes = LaneAdmitter::lanes(settings, deps.backend, jobs, vault, cache.clone());
            for (_, lane) in lanes {
                if !lane.enabled() {
                    tracing::info!(lane = %lane.lane(), "lane disabled (no publisher image); not admitting");
                    continue;
                }
                // A Job that finishes frees room: its lane ticks at once, not at the next poll.
                let wake = cache.finishes();
                let name = loop_name(lane.lane());
                let lane = MeteredLane::new(lane, metrics.clone(), status.clone());
                loops.add(name, poll, wake, lane);
            }
        })
        .await?;
    tracing::info!("admitter stopped");
    Ok(())
}
