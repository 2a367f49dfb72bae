//! The lease-keeper's loop: each tick renews, reports deaths, then judges
//! lost drivers and lost publishers, in that order.

use crate::deaths::plan_deaths;
use crate::gate::{Gate, RenewalRound};
use crate::inspect::Inspector;
use crate::lost::{LostCause, LostJob, LostPlan, plan_lost_publishes, plan_lost_runs};
use crate::renew::plan_renewals;
use crate::vault::{self, TokenKey, TokenStore};
use anyhow::Context as _;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::backend::{BackendClient, JobId};
use tcab_shared::cluster::OwnedJobs;
use tcab_shared::config::LeaseKeeperConfig;
use tcab_shared::tick::{Shutdown, TickOutcome, run_loop_with_wake};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// What `run` is given from outside, so tests can substitute each.
pub struct Deps {
    /// The backend client (service token inside).
    pub backend: BackendClient,
    /// The Kubernetes client.
    pub kube: kube::Client,
    /// The vault's listener, already bound (see [`vault::bind`]); a
    /// non-loopback one is refused unless the configuration allows it.
    pub vault_listener: TcpListener,
}

/// What one tick did; returned for tests and summarised in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Run ids whose leases the backend renewed; `None` when the call failed.
    pub renewed_runs: Option<Vec<JobId>>,
    /// Publish ids renewed; `None` when the call failed or publishing is off.
    pub renewed_publishes: Option<Vec<JobId>>,
    /// Jobs whose deaths were reported this tick.
    pub reported_dead: Vec<JobId>,
    /// Whether lost drivers were judged (the run renewal succeeded and the
    /// active list was read).
    pub judged_runs: bool,
    /// Whether lost publishers were judged.
    pub judged_publishes: bool,
    /// Runs reported lost this tick.
    pub lost_runs: Vec<JobId>,
    /// Publishes reported lost this tick.
    pub lost_publishes: Vec<JobId>,
}

/// The keeper's state across ticks. Everything else is read afresh.
pub struct Keeper {
    backend: BackendClient,
    inspector: Inspector,
    jobs: OwnedJobs,
    store: TokenStore,
    gate: Gate,
    publishing: bool,
    lease_length: Duration,
    /// Claims whose death is settled (reported, refused, or already terminal).
    handled_deaths: BTreeSet<TokenKey>,
    /// Runs reported lost, kept while the backend still lists them.
    reported_runs: BTreeSet<JobId>,
    /// Publishes reported lost, kept while the backend still lists them.
    reported_publishes: BTreeSet<JobId>,
    /// The ids each lane renewed last, so only a change is logged at info.
    last_renewed: [BTreeSet<JobId>; 2],
}

impl Keeper {
    /// A keeper over these parts. `jobs` must be fed by a watch (or a test).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: &LeaseKeeperConfig,
        backend: BackendClient,
        kube: kube::Client,
        namespace: &str,
        jobs: OwnedJobs,
        store: TokenStore,
        gate: Gate,
    ) -> Self {
        Keeper {
            backend,
            inspector: Inspector::new(kube, namespace, config.log_tail_lines),
            jobs,
            store,
            gate,
            publishing: config.publishing,
            lease_length: config.lease_length,
            handled_deaths: BTreeSet::new(),
            reported_runs: BTreeSet::new(),
            reported_publishes: BTreeSet::new(),
            last_renewed: [BTreeSet::new(), BTreeSet::new()],
        }
    }

    /// One tick: renew, report deaths, judge lost drivers and publishers.
    /// Call only once the cache has listed.
    pub async fn tick(&mut self) -> TickReport {
        let mut report = TickReport::default();
        let snapshot = self.jobs.snapshot();
        // A view the watch may have left stale would miss Jobs to renew and
        // call live Jobs gone: renew what is known, but open no gate and judge nothing.
        let current = self.jobs.is_current(std::time::Instant::now());

        // 1. Renew, one call per lane, and record the round for the gate.
        let plan = plan_renewals(&snapshot, self.publishing);
        let mut problems = Vec::new();
        report.renewed_runs = self.renew(Lane::Run, &plan.runs, &mut problems).await;
        let publishes_renewed = match &plan.publishes {
            Some(ids) => {
                report.renewed_publishes = self.renew(Lane::Publish, ids, &mut problems).await;
                report.renewed_publishes.is_some()
            }
            // This keeper does not renew publishes: a publish admitted now
            // would go unrenewed, so the publish lane's gate stays closed.
            None => {
                problems.push(
                    "publishing is off in the lease-keeper (TCAB_PUBLISHER_IMAGE unset)".into(),
                );
                false
            }
        };
        if !current {
            problems.push("the lease-keeper's Job watch is degraded".into());
            tracing::warn!(
                "Job watch degraded: admissions held and nothing judged until it delivers again"
            );
        }
        self.gate.record(RenewalRound {
            finished_at: Instant::now(),
            runs_renewed: current && report.renewed_runs.is_some(),
            publishes_renewed: current && publishes_renewed,
            detail: problems.join("; "),
        });
        if !current {
            return report;
        }

        // Tokens whose Job finished or vanished (or never came) are dropped.
        for (key, reason) in self
            .store
            .prune(&snapshot, Instant::now(), self.lease_length)
        {
            tracing::debug!(job_id = %key.job_id, claim = %key.claim, reason = reason.as_str(), "token dropped");
        }
        // Settled deaths are forgotten once their Job is gone.
        self.handled_deaths.retain(|key| {
            snapshot.iter().any(|j| {
                j.job_id.as_ref() == Some(&key.job_id) && j.claim.as_ref() == Some(&key.claim)
            })
        });

        // 2. Death reports, after a run renewal that succeeded (a backend
        // that cannot renew would refuse them too; they wait a tick).
        if report.renewed_runs.is_some() {
            report.reported_dead = self.report_deaths(&snapshot).await;
        } else {
            tracing::debug!("run renewal failed this tick; deaths are reported on a later tick");
        }

        // 3. and 4. Lost drivers and publishers, each only after its lane renewed.
        if report.renewed_runs.is_some() {
            if let Some(lost) = self.lost_runs().await {
                report.judged_runs = true;
                report.lost_runs = lost;
            }
        } else {
            tracing::debug!("run renewal failed this tick; lost drivers are not judged");
        }
        if self.publishing {
            if report.renewed_publishes.is_some() {
                if let Some(lost) = self.lost_publishes().await {
                    report.judged_publishes = true;
                    report.lost_publishes = lost;
                }
            } else {
                tracing::debug!("publish renewal failed this tick; lost publishers are not judged");
            }
        }
        if report.reported_dead.is_empty()
            && report.lost_runs.is_empty()
            && report.lost_publishes.is_empty()
        {
            tracing::debug!(
                "tick reported nothing: no unreported death and no lapsed lease without a live Job"
            );
        }
        report
    }

    async fn renew(
        &mut self,
        lane: Lane,
        ids: &[JobId],
        problems: &mut Vec<String>,
    ) -> Option<Vec<JobId>> {
        let result = match lane {
            Lane::Run => self.backend.renew_run_leases(ids).await,
            Lane::Publish => self.backend.renew_publish_leases(ids).await,
        };
        match result {
            Ok(renewal) => {
                let renewed: Vec<JobId> = renewal.leases.into_iter().map(|l| l.id).collect();
                let now: BTreeSet<JobId> = renewed.iter().cloned().collect();
                let last = &mut self.last_renewed[lane as usize];
                if now != *last {
                    // A state change: which leases this lane now keeps alive.
                    let started: Vec<&JobId> = now.difference(last).collect();
                    let stopped: Vec<&JobId> = last.difference(&now).collect();
                    tracing::info!(%lane, count = now.len(), ?started, ?stopped, "renewed {} {lane} leases", now.len());
                    *last = now;
                } else {
                    tracing::debug!(%lane, count = renewed.len(), "renewed {} {lane} leases (unchanged)", renewed.len());
                }
                if renewed.len() < ids.len() {
                    let left: Vec<&JobId> = ids.iter().filter(|id| !renewed.contains(id)).collect();
                    tracing::debug!(%lane, job_ids = ?left, "not renewed: the backend no longer drives them");
                }
                Some(renewed)
            }
            Err(error) => {
                tracing::warn!(%lane, %error, "lease renewal failed; admissions are held and nothing is judged lost");
                problems.push(format!("{lane} renewal failed: {error}"));
                None
            }
        }
    }

    async fn report_deaths(&mut self, snapshot: &[tcab_shared::cluster::JobSummary]) -> Vec<JobId> {
        let plan = plan_deaths(snapshot, &self.store.held(), &self.handled_deaths);
        for (name, skip) in &plan.skipped {
            tracing::debug!(job = %name, reason = %skip.describe(), "failed driver Job not reported");
        }
        let mut reported = Vec::new();
        for candidate in plan.report {
            let key = candidate.key;
            let Some(token) = self.store.get(&key) else {
                continue;
            };
            match self.backend.get_job(&key.job_id).await {
                Ok(view) if !view.state.is_live() => {
                    tracing::debug!(job_id = %key.job_id, state = view.state.as_str(), "dead driver's job already terminal");
                    self.settle(&key);
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {
                    tracing::debug!(job_id = %key.job_id, "dead driver's job unknown to the backend");
                    self.settle(&key);
                    continue;
                }
                Err(error) => {
                    tracing::warn!(job_id = %key.job_id, %error, "cannot read the dead driver's job; retrying next tick");
                    continue;
                }
            }
            let evidence = match self
                .inspector
                .evidence(&candidate.job_name, Lane::Run)
                .await
            {
                Ok(evidence) => evidence,
                Err(error) => {
                    tracing::warn!(job_id = %key.job_id, job = %candidate.job_name, error = %chain(&error), "cannot read the dead driver; retrying next tick");
                    continue;
                }
            };
            match self
                .backend
                .report_death(&key.job_id, &token, &evidence.detail)
                .await
            {
                Ok(ack) => {
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, job = %candidate.job_name, cause = %evidence.summary, state = ack.state.as_str(), "reported dead");
                    reported.push(key.job_id.clone());
                    self.settle(&key);
                }
                Err(e) if e.is_unauthorized() => {
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, "death not reported: the job was requeued (token refused); dropping it");
                    self.settle(&key);
                }
                Err(e) if e.is_conflict() || e.is_not_found() => {
                    tracing::debug!(job_id = %key.job_id, error = %e, "death not reported: the job is already terminal");
                    self.settle(&key);
                }
                Err(error) => {
                    tracing::warn!(job_id = %key.job_id, %error, "death report failed; retrying next tick");
                }
            }
        }
        reported
    }

    /// Marks a claim's death settled and drops its token.
    fn settle(&mut self, key: &TokenKey) {
        self.store.forget(key);
        self.handled_deaths.insert(key.clone());
    }

    async fn lost_runs(&mut self) -> Option<Vec<JobId>> {
        let active = match self.backend.active_runs().await {
            Ok(active) => active,
            Err(error) => {
                tracing::warn!(%error, "cannot read the active runs; lost drivers not judged this tick");
                return None;
            }
        };
        // Reported ids leave the memory once the backend stops listing them.
        self.reported_runs
            .retain(|id| active.jobs.iter().any(|j| &j.id == id));
        let snapshot = self.jobs.snapshot();
        let plan = plan_lost_runs(&active, &snapshot, &self.store.held(), &self.reported_runs);
        Some(self.report_lost(Lane::Run, plan).await)
    }

    async fn lost_publishes(&mut self) -> Option<Vec<JobId>> {
        let active = match self.backend.active_publishes().await {
            Ok(active) => active,
            Err(error) => {
                tracing::warn!(%error, "cannot read the active publishes; lost publishers not judged this tick");
                return None;
            }
        };
        self.reported_publishes
            .retain(|id| active.publish_jobs.iter().any(|j| &j.id == id));
        let snapshot = self.jobs.snapshot();
        let plan = plan_lost_publishes(
            &active,
            &snapshot,
            &self.store.held(),
            &self.reported_publishes,
        );
        Some(self.report_lost(Lane::Publish, plan).await)
    }

    async fn report_lost(&mut self, lane: Lane, plan: LostPlan) -> Vec<JobId> {
        for (id, skip) in &plan.skipped {
            tracing::debug!(%lane, job_id = %id, reason = %skip.describe(), "not lost");
        }
        let mut reported = Vec::new();
        for lost in plan.lost {
            let detail = self.lost_detail(&lost).await;
            let result = match lane {
                Lane::Run => self.backend.report_lost(&lost.job_id, &detail).await,
                Lane::Publish => {
                    self.backend
                        .report_publish_lost(&lost.job_id, &detail)
                        .await
                }
            };
            let memory = match lane {
                Lane::Run => &mut self.reported_runs,
                Lane::Publish => &mut self.reported_publishes,
            };
            match result {
                Ok(outcome) => {
                    let summary = detail.lines().next().unwrap_or_default();
                    tracing::info!(%lane, job_id = %lost.job_id, ignored = outcome.ignored, state = %outcome.state, retry_id = ?outcome.retry_id, detail = %summary, "reported lost");
                    memory.insert(lost.job_id.clone());
                    reported.push(lost.job_id);
                }
                Err(e) if e.is_not_found() || e.is_conflict() => {
                    tracing::debug!(%lane, job_id = %lost.job_id, error = %e, "lost report refused; the job is no longer driven");
                    memory.insert(lost.job_id);
                }
                Err(error) => {
                    tracing::warn!(%lane, job_id = %lost.job_id, %error, "lost report failed; retrying next tick");
                }
            }
        }
        reported
    }

    /// The detail of a lost report: what the cluster shows.
    async fn lost_detail(&self, lost: &LostJob) -> String {
        let (kind, what) = match lost.lane {
            Lane::Run => ("driver", "report"),
            Lane::Publish => ("publisher", "result"),
        };
        match &lost.cause {
            LostCause::JobGone => format!("{kind} Job no longer exists"),
            LostCause::ExitedWithoutReport { job_name } => {
                format!("{kind} exited without its {what} landing (Job {job_name} completed)")
            }
            LostCause::Died { job_name } => {
                match self.inspector.evidence(job_name, lost.lane).await {
                    Ok(evidence) => format!("{kind} Job {job_name} failed: {}", evidence.detail),
                    Err(error) => {
                        tracing::debug!(job = %job_name, error = %chain(&error), "cannot read the dead Job; reporting without its cause");
                        format!("{kind} Job {job_name} failed (its pod could not be read)")
                    }
                }
            }
        }
    }
}

/// An error and its sources on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        line.push_str(": ");
        line.push_str(&s.to_string());
        source = s.source();
    }
    line
}

/// Runs the lease-keeper until `shutdown`: serves the vault, watches the
/// owned Jobs, waits for their first list, then ticks every poll interval.
/// A dead watch or vault server ends it with an error.
pub async fn run(config: LeaseKeeperConfig, deps: Deps, shutdown: Shutdown) -> anyhow::Result<()> {
    let Deps {
        backend,
        kube,
        vault_listener,
    } = deps;
    let vault_addr = vault_listener
        .local_addr()
        .map_err(vault::VaultError::LocalAddr)?;
    vault::check_addr(vault_addr, config.vault_allow_non_loopback)?;
    let namespace = config
        .common
        .namespace
        .clone()
        .unwrap_or_else(|| kube.default_namespace().to_owned());

    let store = TokenStore::new();
    let gate = Gate::new();
    let mut vault_task = tokio::spawn(vault::serve(
        vault_listener,
        store.clone(),
        gate.clone(),
        shutdown.clone(),
    ));
    let (jobs, mut watch_task) =
        OwnedJobs::watch(kube.clone(), &namespace, &config.common.managed_by);
    tracing::info!(%vault_addr, %namespace, publishing = config.publishing, "lease-keeper started; serving the token vault");

    let keeper = Keeper::new(
        &config,
        backend,
        kube,
        &namespace,
        jobs.clone(),
        store,
        gate,
    );
    let keeper = Arc::new(tokio::sync::Mutex::new(keeper));
    let poll = config.common.poll_interval;
    let work = async {
        tokio::select! {
            _ = jobs.wait_ready() => {}
            _ = shutdown.wait() => return,
        }
        tracing::info!(jobs = jobs.len(), "Job cache listed; renewing");
        // A Job that fails is a death to report now, not at the next poll.
        run_loop_with_wake(poll, shutdown.clone(), jobs.finishes(), || {
            let keeper = keeper.clone();
            async move {
                keeper.lock().await.tick().await;
                TickOutcome::Idle
            }
        })
        .await;
    };

    tokio::select! {
        () = work => Ok(()),
        ended = &mut watch_task => {
            ended.context("the Job watch task panicked")?;
            anyhow::bail!("the Job watch task ended")
        }
        ended = &mut vault_task => {
            ended.context("the token vault task panicked")??;
            if shutdown.is_triggered() {
                Ok(())
            } else {
                anyhow::bail!("the token vault server stopped")
            }
        }
    }
}
