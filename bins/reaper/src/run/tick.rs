//! The tick's skeleton: from a current view, decide what is due, LIST the
//! sandboxes ([`super::list`]), ask the backend on a sweep tick
//! ([`super::sweep`]), plan against the view read after the LIST, then
//! confirm and delete ([`super::delete`]). Reading the Job view is here too:
//! a tick decides only from a snapshot taken while the view was current
//! ([`current_view`]), and checks before each step that it still is
//! ([`still_current`]).

use crate::memory::ReapMemory;
use crate::plan::{self, Driven, Snapshot, SweepSettings};
use crate::report::{SweepOutcome, TickReport};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tcab_shared::WallClock;
use tcab_shared::backend::BackendClient;
use tcab_shared::config::Binary;
use tcab_shared::events::{EventSender, Reporter as EventReporter};
use tcab_shared::job_cache::{self, OwnedJobs, ViewState};
use tcab_shared::telemetry::list;
use tokio::sync::watch;
use tokio::time::Instant;

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
    pub(super) pods: Api<Pod>,
    pub(super) job_api: Api<Job>,
    pub(super) sandbox_namespace: String,
    pub(super) jobs: OwnedJobs,
    pub(super) settings: SweepSettings,
    pub(super) clock: WallClock,
    pub(super) backend: Option<BackendClient>,
    pub(super) kube_timeout: Duration,
    pub(super) memory: ReapMemory,
    pub(super) paused: bool,
    /// The namespace of the owned Jobs (where a reap's Event goes).
    pub(super) job_namespace: String,
    /// Where the Events of the reaps are sent (never waits).
    pub(super) events: EventSender,
}

impl Reaper {
    /// A reaper deciding against `setup.jobs`, which should be current
    /// before the first tick (a tick on a view that is not does nothing).
    pub fn new(setup: ReaperSetup) -> Self {
        let events = EventSender::start(
            setup.kube.clone(),
            EventReporter::of(Binary::Reaper),
            WallClock::system(),
            setup.kube_timeout,
        );
        Reaper {
            pods: Api::namespaced(setup.kube.clone(), &setup.sandbox_namespace),
            job_api: Api::namespaced(setup.kube, &setup.job_namespace),
            job_namespace: setup.job_namespace,
            events,
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
                pods: &pods,
                now: self.clock.now(),
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
        let now = Instant::now();
        let recorded = self.memory.record(&listed, &attempts, now);
        for job_id in &recorded.completed {
            tracing::debug!(job_id, "no sandbox of this job left; its reap is complete");
        }
        for (job_id, wait) in &recorded.backed_off {
            let secs = wait.until.saturating_duration_since(now).as_secs();
            tracing::info!(
                job_id = %job_id,
                attempt = wait.failures,
                retry_in_s = secs,
                "the reap of this job id failed; it is tried again in {secs} s (attempt {}), not at the next tick; the other job ids go on",
                wait.failures
            );
        }
        report.completed = recorded.completed;
        report.backed_off = recorded.backed_off;
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
}

/// A snapshot of the owned Jobs taken while the view was current the whole
/// time, and a receiver that notices any later transition of the view.
pub(super) fn current_view(
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
pub(super) fn still_current(view: &watch::Receiver<ViewState>) -> bool {
    !view.has_changed().unwrap_or(true) && view.borrow().is_current()
}
