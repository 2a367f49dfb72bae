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

use crate::config::ReaperConfig;
use crate::memory::{Attempt, Due, ReapMemory};
use crate::metrics::{REAP_LOOP, ReaperMetrics};
use crate::plan::{
    self, DeleteReason, Driven, KeepReason, PodDelete, PodSummary, ReapKind, ReapPlan, Snapshot,
    SweepSettings,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tcab_shared::backend::BackendClient;
use tcab_shared::job_cache::{self, JobSummary, OwnedJobs, ViewState, WatchSettings};
use tcab_shared::kube_api::{CallError, KubeCall, call};
use tcab_shared::metrics::{Exporter, Health, common, liveness_bound, serve_if};
use tcab_shared::names;
use tcab_shared::runtime::{CancellationToken, Supervisor};
use tcab_shared::telemetry::list;
use tcab_shared::tick::{Tick, TickOutcome};
use tcab_shared::{WallClock, error_chain};
use tokio::sync::watch;
use tokio::time::Instant;

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

/// A Kubernetes API call that failed, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFailure {
    /// The Kubernetes verb: `list` or `delete`.
    pub verb: &'static str,
    /// The resource: `pods` or `jobs`.
    pub resource: &'static str,
    /// The HTTP code, when the API answered one.
    pub code: Option<u16>,
    /// What went wrong.
    pub message: String,
}

impl ApiFailure {
    fn new(verb: &'static str, resource: &'static str, error: &CallError) -> Self {
        ApiFailure {
            verb,
            resource,
            code: error.code(),
            message: error_chain(error),
        }
    }
}

/// Why a planned delete was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The Job view stopped being current (or changed) after the plan.
    ViewNotCurrent,
    /// The confirming read of the owned Jobs with the pod's job id failed.
    ConfirmReadFailed,
    /// The confirming read found a reason to keep the pod.
    Held(KeepReason),
}

/// How one planned delete went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The API accepted the delete.
    Deleted,
    /// 404: the pod was already gone, which is what we wanted.
    AlreadyGone,
    /// 409: the pod changed (another pod now has the name); next tick decides.
    Changed,
    /// Any other failure (403, 5xx, timeout, transport); retried later.
    Failed {
        /// The HTTP code, when the API answered.
        code: Option<u16>,
        /// What went wrong.
        message: String,
    },
    /// Not sent.
    Skipped(SkipReason),
}

impl DeleteOutcome {
    /// Whether the pod is reaped as far as the memory is concerned.
    pub fn attempt(&self) -> Attempt {
        match self {
            DeleteOutcome::Deleted | DeleteOutcome::AlreadyGone => Attempt::Done,
            // A call for this job's reap failed: it backs off alone.
            DeleteOutcome::Failed { .. }
            | DeleteOutcome::Skipped(SkipReason::ConfirmReadFailed) => Attempt::Failed,
            // Not the reap's own failure (the view, a keep reason, a pod
            // replaced): the next tick decides.
            DeleteOutcome::Changed
            | DeleteOutcome::Skipped(SkipReason::ViewNotCurrent | SkipReason::Held(_)) => {
                Attempt::NotDone
            }
        }
    }
}

/// One planned delete and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecord {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Its job id.
    pub job_id: String,
    /// Why it was planned.
    pub reason: DeleteReason,
    /// How it went.
    pub outcome: DeleteOutcome,
}

/// What the orphan sweep learned from the backend this tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SweepOutcome {
    /// No sweep this tick.
    #[default]
    NotDue,
    /// The backend listed this many driven jobs.
    Driven(usize),
    /// The backend's active list could not be read: no orphan was swept.
    BackendFailed(String),
}

/// What one tick did, for tests, logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Why the Job view was not trusted, when it was not: then nothing more
    /// happened this tick (or, if it stopped being current after the LIST,
    /// nothing was deleted).
    pub view_not_current: Option<String>,
    /// What was due.
    pub due: Due,
    /// Pods the LIST returned; `None` when the tick made no LIST (or it failed).
    pub listed: Option<usize>,
    /// What the sweep learned from the backend.
    pub sweep: SweepOutcome,
    /// The plan, when there was one.
    pub plan: ReapPlan,
    /// Each planned delete and how it went, by job id, then in plan order.
    pub deletes: Vec<DeleteRecord>,
    /// Job ids whose reap completed this tick (no sandbox of theirs left).
    pub completed: BTreeSet<String>,
    /// Job ids of dead drivers with sandbox pods of another managed-by value
    /// than the driver's, warned about for the first time this tick (each
    /// id once), with those pods.
    pub mismatches: BTreeMap<String, Vec<String>>,
    /// Kubernetes API calls that failed.
    pub api_errors: Vec<ApiFailure>,
}

impl TickReport {
    /// Each planned delete as (`namespace/name`, outcome).
    pub fn outcomes(&self) -> Vec<(String, DeleteOutcome)> {
        self.deletes
            .iter()
            .map(|d| (d.pod.clone(), d.outcome.clone()))
            .collect()
    }

    /// The kind of every sandbox deleted this tick (a 404 counts: it is gone).
    pub fn reaped(&self) -> impl Iterator<Item = ReapKind> + '_ {
        self.deletes
            .iter()
            .filter(|d| d.outcome.attempt() == Attempt::Done)
            .map(|d| d.reason.kind())
    }
}

/// Everything a [`Reaper`] is built from.
pub struct ReaperSetup {
    /// The Kubernetes client.
    pub kube: Client,
    /// The namespace of the owned Jobs (the confirming reads).
    pub job_namespace: String,
    /// The namespace of the sandbox pods.
    pub sandbox_namespace: String,
    /// The view of the owned Jobs.
    pub jobs: OwnedJobs,
    /// The settings.
    pub settings: SweepSettings,
    /// The clock pod ages are measured with.
    pub clock: WallClock,
    /// The backend, for the orphan sweep.
    pub backend: Option<BackendClient>,
    /// The bound of every Kubernetes call.
    pub kube_timeout: Duration,
}

/// One reaper. [`Reaper::tick`] is one reconcile.
pub struct Reaper {
    pods: Api<Pod>,
    job_api: Api<Job>,
    sandbox_namespace: String,
    jobs: OwnedJobs,
    settings: SweepSettings,
    clock: WallClock,
    backend: Option<BackendClient>,
    kube_timeout: Duration,
    memory: ReapMemory,
    paused: bool,
}

/// A snapshot of the owned Jobs taken while the view was current the whole
/// time, and a receiver that notices any later transition of the view.
fn current_view(
    jobs: &OwnedJobs,
) -> Result<(job_cache::Snapshot, watch::Receiver<ViewState>), String> {
    let mut view = jobs.view_changes();
    match view.borrow_and_update().clone() {
        ViewState::Current => {}
        ViewState::Listing => return Err("the owned Jobs are not listed yet".into()),
        ViewState::Failed(error) => return Err(format!("the Job watch failed: {error}")),
    }
    let snapshot = jobs.snapshot();
    if !still_current(&view) {
        return Err("the Job view changed while it was read".into());
    }
    Ok((snapshot, view))
}

/// Whether the view is current and has not changed state since it was read.
fn still_current(view: &watch::Receiver<ViewState>) -> bool {
    !view.has_changed().unwrap_or(true) && view.borrow().is_current()
}

impl Reaper {
    /// A reaper deciding against `setup.jobs`, which should be current
    /// before the first tick (a tick on a view that is not does nothing).
    pub fn new(setup: ReaperSetup) -> Self {
        Reaper {
            pods: Api::namespaced(setup.kube.clone(), &setup.sandbox_namespace),
            job_api: Api::namespaced(setup.kube, &setup.job_namespace),
            sandbox_namespace: setup.sandbox_namespace,
            jobs: setup.jobs,
            settings: setup.settings,
            clock: setup.clock,
            backend: setup.backend,
            kube_timeout: setup.kube_timeout,
            memory: ReapMemory::new(),
            paused: false,
        }
    }

    fn pause(&mut self, why: &str) {
        if self.paused {
            tracing::debug!(reason = why, "reaping still paused");
        } else {
            tracing::info!(
                reason = why,
                "reaping paused: the Job view is not current; nothing is listed or deleted until a fresh list completes"
            );
            self.paused = true;
        }
    }

    fn resume(&mut self) {
        if self.paused {
            tracing::info!("reaping resumed: the Job view is current");
            self.paused = false;
        }
    }

    /// One tick: from a current view, decide whether a reap or the sweep is
    /// due; if so LIST the driver-managed pods of the sandbox namespace, ask
    /// the backend what it drives (sweep), plan against the view read after
    /// the LIST, confirm each job id with a fresh read, and delete.
    pub async fn tick(&mut self) -> TickReport {
        let mut report = TickReport::default();
        let margin = self.settings.terminating_margin;
        let (jobs, _) = match current_view(&self.jobs) {
            Ok(view) => view,
            Err(why) => {
                self.pause(&why);
                report.view_not_current = Some(why);
                return report;
            }
        };
        self.resume();
        let now = Instant::now();
        let dead = self.memory.observe(&jobs, now, margin);
        // Only the ids that may be reaped are judged to decide what is due.
        let verdicts = plan::tick_verdicts(&jobs, &dead, &BTreeSet::new());
        report.due = self.memory.due(&verdicts, now, &self.settings);
        drop((jobs, verdicts));
        if !report.due.needs_list() {
            tracing::trace!("no reap awaits and the sweep is not due: nothing to list");
            return report;
        }
        tracing::debug!(
            namespace = %self.sandbox_namespace,
            reap = %list(&report.due.reap),
            sweep = report.due.sweep,
            "listing sandbox pods"
        );

        // A sweep round counts from its LIST, whether the LIST or the backend
        // then fails: a sandbox namespace that refuses the reaper costs one
        // LIST per interval, not one per tick.
        if report.due.sweep {
            self.memory.swept(now);
        }
        // The pods are listed before the Jobs are read for the plan, so a
        // sandbox of a newer claim is never judged against a view older than it.
        let Some(pods) = self
            .list_sandboxes(&report.due, &mut report.api_errors)
            .await
        else {
            return report;
        };
        report.listed = Some(pods.len());

        // Asked after the LIST: every listed sandbox was made after its claim.
        let driven_ids = if report.due.sweep {
            let answer = self.driven().await;
            report.sweep = match &answer {
                Ok(ids) => SweepOutcome::Driven(ids.len()),
                Err(error) => SweepOutcome::BackendFailed(error.clone()),
            };
            Some(answer)
        } else {
            None
        };
        let driven = match &driven_ids {
            None => Driven::NotAsked,
            Some(Ok(ids)) => Driven::Known(ids),
            Some(Err(_)) => Driven::Unknown,
        };

        let (jobs, view) = match current_view(&self.jobs) {
            Ok(view) => view,
            Err(why) => {
                self.pause(&why);
                report.view_not_current = Some(why);
                return report;
            }
        };
        let now = Instant::now();
        let dead = self.memory.observe(&jobs, now, margin);
        // Judged once: the ids that may be reaped, the listed sandboxes'
        // ids (all the plan looks up), and the ids warned about (whether a
        // Job still carries them).
        let also: BTreeSet<&str> = pods
            .iter()
            .filter_map(|p| p.job_id.as_deref())
            .chain(self.memory.warned_mismatches())
            .collect();
        let verdicts = plan::tick_verdicts(&jobs, &dead, &also);
        drop(also);
        let plan = plan::plan_with(
            &Snapshot {
                jobs: jobs.as_slice(),
                pods: &pods,
                now: self.clock.now(),
                dead: &dead,
                driven,
            },
            &verdicts,
            &self.settings,
        );
        drop(jobs);
        for kept in &plan.keep {
            tracing::debug!(
                pod = %kept.pod.key(),
                job_id = kept.pod.job_id.as_deref().unwrap_or(""),
                reason = %kept.reason,
                "sandbox pod kept"
            );
        }

        let mismatched = plan::mismatches(&plan);
        for id in self.memory.new_mismatches(mismatched.keys(), &verdicts) {
            let pods = mismatched.get(&id).cloned().unwrap_or_default();
            tracing::warn!(
                job_id = %id,
                pods = %list(&pods),
                expected = %self.settings.driver_managed_by,
                "sandbox pods of a dead driver carry another managed-by value than TCAB_DRIVER_MANAGED_BY: left alone (not ours to match); if the driver labels its sandboxes with a fixed value, set TCAB_DRIVER_MANAGED_BY (the chart's driver.managedBy) to it"
            );
            report.mismatches.insert(id, pods);
        }

        let attempts = self.carry_out(&plan, &view, &dead, &mut report).await;
        // Only an id the LIST showed whole can be found to have no sandbox left.
        let listed: BTreeMap<String, plan::IdVerdict> = verdicts
            .into_iter()
            .filter(|(id, _)| plan::listed_all_of(&report.due.reap, report.due.sweep, id))
            .collect();
        report.completed = self.memory.record(&listed, &attempts, Instant::now());
        for job_id in &report.completed {
            tracing::debug!(job_id, "no sandbox of this job left; its reap is complete");
        }
        if plan.delete.is_empty() {
            tracing::debug!(
                namespace = %self.sandbox_namespace,
                listed = pods.len(),
                "no sandbox pod to reap"
            );
        }
        report.plan = plan;
        report
    }

    /// The sandbox pods a tick needs, each LIST bounded: for a due reap the
    /// pods carrying one of the due job ids whatever their managed-by value
    /// ([`plan::reap_selector`]: the plan tells sandboxes, the driver's own
    /// pod and sandboxes of another managed-by apart), for a due sweep the
    /// pods carrying the driver's managed-by value. `None` (logged,
    /// recorded) when a LIST fails.
    async fn list_sandboxes(
        &self,
        due: &Due,
        errors: &mut Vec<ApiFailure>,
    ) -> Option<Vec<PodSummary>> {
        let mut selectors = vec![];
        if !due.reap.is_empty() {
            selectors.push(plan::reap_selector(&due.reap));
        }
        if due.sweep {
            selectors.push(names::selector(
                names::MANAGED_BY,
                &self.settings.driver_managed_by,
            ));
        }
        let mut pods: BTreeMap<String, PodSummary> = BTreeMap::new();
        for selector in selectors {
            match call(
                KubeCall::ListPods,
                self.kube_timeout,
                self.pods.list(&ListParams::default().labels(&selector)),
            )
            .await
            {
                Ok(list) => {
                    for pod in &list.items {
                        let pod = PodSummary::from_pod(pod, &self.sandbox_namespace);
                        pods.insert(pod.key(), pod);
                    }
                }
                Err(error) => {
                    let code = error.code();
                    tracing::warn!(
                        namespace = %self.sandbox_namespace,
                        %selector,
                        code,
                        error = %error_chain(&error),
                        "cannot list sandbox pods; retrying next tick{}",
                        rbac_hint(code)
                    );
                    errors.push(ApiFailure::new("list", "pods", &error));
                    return None;
                }
            }
        }
        Some(pods.into_values().collect())
    }

    /// Carries out the plan's deletes, job id by job id: each id only while
    /// the view is still current and unchanged, and after a confirming read;
    /// each delete of it only while the view still is. Returns how each
    /// planned delete went, for the memory.
    async fn carry_out(
        &self,
        plan: &ReapPlan,
        view: &watch::Receiver<ViewState>,
        dead: &BTreeSet<String>,
        report: &mut TickReport,
    ) -> Vec<(String, Attempt)> {
        let mut by_id: BTreeMap<&str, Vec<&PodDelete>> = BTreeMap::new();
        for delete in &plan.delete {
            by_id.entry(&delete.job_id).or_default().push(delete);
        }
        let mut attempts = Vec::new();
        for (job_id, deletes) in by_id {
            let mut gate = if still_current(view) {
                self.confirm(job_id, &deletes[0].reason, dead, &mut report.api_errors)
                    .await
                    .err()
            } else {
                Some(SkipReason::ViewNotCurrent)
            };
            for delete in deletes {
                if gate.is_none() && !still_current(view) {
                    gate = Some(SkipReason::ViewNotCurrent);
                }
                let outcome = match &gate {
                    Some(skip) => DeleteOutcome::Skipped(skip.clone()),
                    None => self.delete(delete, &mut report.api_errors).await,
                };
                attempts.push((job_id.to_owned(), outcome.attempt()));
                report.deletes.push(DeleteRecord {
                    pod: delete.pod.key(),
                    job_id: job_id.to_owned(),
                    reason: delete.reason.clone(),
                    outcome,
                });
            }
            if gate == Some(SkipReason::ViewNotCurrent) {
                tracing::info!(
                    job_id,
                    "the Job view stopped being current after the plan; its deletes wait for a later tick"
                );
            }
        }
        attempts
    }

    /// The job ids the backend lists as driven (`GET /jobs/active`).
    async fn driven(&self) -> Result<BTreeSet<String>, String> {
        let Some(backend) = &self.backend else {
            return Err("no backend client".into());
        };
        match backend.active_runs().await {
            // An entry the client could not read is still a job the backend
            // drives: its id counts as driven, and when even its id is
            // unreadable no orphan can be told apart this round.
            Ok(active) if active.skipped.iter().any(|e| e.id.is_none()) => {
                tracing::warn!(
                    skipped = active.skipped.len(),
                    "the backend's active list has an entry without a readable id; no orphan is swept this round"
                );
                Err("an entry of the active list has no readable id".into())
            }
            Ok(active) => Ok(active
                .jobs
                .into_iter()
                .map(|run| run.id)
                .chain(active.skipped.into_iter().filter_map(|e| e.id))
                .collect()),
            Err(error) => {
                tracing::warn!(
                    call = error.call().unwrap_or("GET /jobs/active"),
                    reason = error.kind().reason().as_str(),
                    error = %error_chain(&error),
                    next_sweep_in_seconds = self.settings.orphan_sweep_interval.as_secs(),
                    "cannot read the jobs the backend drives; no orphan is swept this round"
                );
                Err(error_chain(&error))
            }
        }
    }

    /// One bounded read of the owned Jobs carrying `job_id`; the deletes of
    /// that id go ahead only if [`plan::confirm`] agrees with it.
    async fn confirm(
        &self,
        job_id: &str,
        reason: &DeleteReason,
        dead: &BTreeSet<String>,
        errors: &mut Vec<ApiFailure>,
    ) -> Result<(), SkipReason> {
        let selector = format!(
            "{},{}",
            names::selector(names::MANAGED_BY, &self.settings.dispatcher_managed_by),
            names::selector(names::JOB_ID, job_id)
        );
        let read = call(
            KubeCall::ListJobs,
            self.kube_timeout,
            self.job_api.list(&ListParams::default().labels(&selector)),
        )
        .await;
        let fresh: Vec<JobSummary> = match read {
            Ok(list) => list.items.iter().map(JobSummary::from_job).collect(),
            Err(error) => {
                let code = error.code();
                tracing::warn!(
                    job_id,
                    code,
                    error = %error_chain(&error),
                    "cannot confirm that no Job of this job id is live; its sandboxes wait for a later tick"
                );
                errors.push(ApiFailure::new("list", "jobs", &error));
                return Err(SkipReason::ConfirmReadFailed);
            }
        };
        plan::confirm(job_id, reason, &fresh, dead).map_err(|keep| {
            tracing::info!(
                job_id,
                reason = %keep,
                "a fresh read of its Jobs holds the reap; its sandboxes are kept"
            );
            SkipReason::Held(keep)
        })
    }

    async fn delete(&self, delete: &PodDelete, errors: &mut Vec<ApiFailure>) -> DeleteOutcome {
        let pod = &delete.pod;
        let params = DeleteParams {
            preconditions: pod.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods: Api<Pod> = if pod.namespace == self.sandbox_namespace {
            self.pods.clone()
        } else {
            Api::namespaced(self.pods.clone().into_client(), &pod.namespace)
        };
        match call(
            KubeCall::DeletePod,
            self.kube_timeout,
            pods.delete(&pod.name, &params),
        )
        .await
        {
            Ok(_) => {
                tracing::info!(
                    job_id = %delete.job_id,
                    pod = %pod.key(),
                    kind = delete.reason.kind().as_str(),
                    reason = %delete.reason,
                    "reaped sandbox pod"
                );
                DeleteOutcome::Deleted
            }
            Err(error) if error.is_not_found() => {
                tracing::debug!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod already gone");
                DeleteOutcome::AlreadyGone
            }
            Err(error) if error.is_conflict() => {
                tracing::info!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod changed before its delete; a later tick decides");
                DeleteOutcome::Changed
            }
            Err(error) => {
                let code = error.code();
                let message = error_chain(&error);
                tracing::warn!(
                    namespace = %pod.namespace,
                    job_id = %delete.job_id,
                    pod = %pod.name,
                    code,
                    error = %message,
                    "cannot delete sandbox pod; retrying next tick{}",
                    rbac_hint(code)
                );
                errors.push(ApiFailure::new("delete", "pods", &error));
                DeleteOutcome::Failed { code, message }
            }
        }
    }
}

/// A hint for an operator reading a 403.
fn rbac_hint(code: Option<u16>) -> &'static str {
    if code == Some(403) {
        " (RBAC: the dispatcher's Role must grant pods list and delete in this namespace)"
    } else {
        ""
    }
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

/// The loop's unit of work: a tick, then its report to the metrics and the
/// observer.
struct Ticks {
    reaper: Reaper,
    metrics: Arc<ReaperMetrics>,
    on_tick: Option<TickObserver>,
}

impl Tick for Ticks {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.reaper.tick().await;
        self.metrics.record(&report);
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
    let _endpoint = serve_if(config.common.metrics_addr, exporter, health.clone()).await?;
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
                on_tick: deps.on_tick,
            };
            loops.add(REAP_LOOP, config.common.poll_interval, wake, ticks);
        })
        .await?;
    tracing::info!(ticks, "reaper stopped");
    Ok(())
}
