//! Lost jobs, per lane: after a renewal that succeeded, the backend's active
//! list is read and each driven job whose lease lapsed with no live Job (or
//! pod standing for one) is reported lost, with what the cluster shows.
//! Which jobs are lost, and what an answer settles, is decided in
//! [`crate::plan::lost`]. An entry of the list that cannot be read is
//! skipped with a warning and the rest are judged; a job whose report keeps
//! failing backs off alone.

use super::reports::{Reporter, out_of_budget};
use crate::plan::Answer;
use crate::plan::failures::DeathKind;
use crate::plan::lost::{
    ActiveList, Known, LostCause, LostJob, LostPlan, LostSettle, plan_lost, settle_lost_report,
};
use crate::report::{Report, ReportTick};
use std::collections::BTreeSet;
use tcab_shared::Lane;
use tcab_shared::backend::{JobId, SkippedEntry};
use tcab_shared::error_chain;
use tcab_shared::telemetry::list;
use tokio::time::Instant;

impl Reporter {
    /// Judges lost jobs of one lane; `None` when it was not judged.
    pub(super) async fn lost(
        &mut self,
        lane: Lane,
        deadline: Instant,
        report: &mut ReportTick,
    ) -> Option<Vec<JobId>> {
        if !self.gate.lane(lane).healthy() {
            tracing::debug!(%lane, "the lane's renewals are not healthy; lost jobs not judged");
            return None;
        }
        let active = match lane {
            Lane::Run => self
                .backend
                .active_runs()
                .await
                .map(|mut a| (std::mem::take(&mut a.skipped), ActiveList::from(a))),
            Lane::Publish => self
                .backend
                .active_publishes()
                .await
                .map(|mut a| (std::mem::take(&mut a.skipped), ActiveList::from(a))),
        };
        let (skipped, active) = match active {
            Ok(active) => active,
            Err(error) => {
                tracing::warn!(%lane, call = error.call().unwrap_or("active list"), reason = error.kind().reason().as_str(), error = %error_chain(&error), "cannot read the lane's active list; its lost jobs are not judged this tick");
                return None;
            }
        };
        self.warn_skipped(lane, &skipped);
        // A job the backend no longer lists needs no memory of its report.
        let reported = self.reported_lost.entry(lane).or_default();
        reported.retain(|id| active.contains(id));
        self.backoffs
            .retain(|(report, id)| *report != Report::Lost(lane) || active.contains(id));
        self.lost_details
            .retain(|(l, id), _| *l != lane || active.contains(id));
        let judged_dead = self.judged_dead();
        let snapshot = self.jobs.snapshot();
        let held = self.store.held();
        let empty = BTreeSet::new();
        let ended: BTreeSet<JobId> = match lane {
            Lane::Publish => self.ended_publishes.keys().cloned().collect(),
            Lane::Run => BTreeSet::new(),
        };
        let plan = plan_lost(
            &active,
            &Known {
                jobs: &snapshot,
                held: &held,
                reported: self.reported_lost.get(&lane).unwrap_or(&empty),
                judged_dead: &judged_dead,
                ended: &ended,
            },
        );
        // The renewal and the view may both have moved on while the active
        // list was read: judge only if they are still healthy.
        if !self.jobs.is_current() || !self.gate.lane(lane).healthy() {
            return None;
        }
        Some(self.report_lost(lane, plan, deadline, report).await)
    }

    /// Warns once about each entry of the active list that cannot be read
    /// (e.g. a state this dispatcher does not know), until it is gone.
    fn warn_skipped(&mut self, lane: Lane, skipped: &[SkippedEntry]) {
        let now: BTreeSet<(Lane, String)> = skipped.iter().map(|e| (lane, e.why.clone())).collect();
        for entry in skipped {
            if !self.warned_entries.contains(&(lane, entry.why.clone())) {
                tracing::warn!(%lane, job_id = entry.id.as_deref().unwrap_or(""), index = entry.index, why = %entry.why, "an entry of the active list cannot be read; it is skipped and the others are judged");
            }
        }
        self.warned_entries.retain(|(l, _)| *l != lane);
        self.warned_entries.extend(now);
    }

    async fn report_lost(
        &mut self,
        lane: Lane,
        plan: LostPlan,
        deadline: Instant,
        report: &mut ReportTick,
    ) -> Vec<JobId> {
        tracing::debug!(%lane, lost = plan.lost.len(), lease_current = plan.lease_current, skipped = plan.skipped.len(), "lost jobs judged");
        for (id, skip) in &plan.skipped {
            tracing::debug!(%lane, job_id = %id, reason = %skip.describe(), "not lost");
        }
        let mut reported = Vec::new();
        for lost in plan.lost {
            if !self
                .backoffs
                .due(&(Report::Lost(lane), lost.job_id.clone()), Instant::now())
            {
                continue;
            }
            if out_of_budget(deadline, report) {
                break;
            }
            if lost.cause == LostCause::JobGone && !self.confirm_gone(&lost).await {
                continue;
            }
            let detail = self.lost_detail(&lost).await;
            let result = self
                .backend
                .report_lost_in(lane, &lost.job_id, &detail)
                .await;
            match (settle_lost_report(Answer::of(&result)), &result) {
                (LostSettle::Reported, Ok(outcome)) => {
                    let summary = detail.lines().next().unwrap_or_default();
                    tracing::info!(%lane, job_id = %lost.job_id, ignored = outcome.ignored, state = %outcome.state, retry_id = ?outcome.retry_id, detail = %summary, "reported lost");
                    reported.push(lost.job_id.clone());
                }
                (LostSettle::NoLongerDriven, Err(e)) => {
                    tracing::debug!(%lane, job_id = %lost.job_id, error = %e, "lost report refused; the job is no longer driven");
                }
                (_, answer) => {
                    if let Err(error) = answer
                        && self.report_failed(Report::Lost(lane), &lost.job_id, error, report)
                    {
                        break;
                    }
                    continue;
                }
            }
            self.reported_lost
                .entry(lane)
                .or_default()
                .insert(lost.job_id.clone());
            self.backoffs
                .forget(&(Report::Lost(lane), lost.job_id.clone()));
            self.lost_details.remove(&(lane, lost.job_id));
        }
        reported
    }

    /// A job the view shows no Job for is reported lost only once the API
    /// itself confirms it has no live Job: a view can miss a Job (a watch
    /// that went quiet), a report cannot be taken back.
    async fn confirm_gone(&self, lost: &LostJob) -> bool {
        match self.inspector.live_jobs_of(&lost.job_id).await {
            Ok(live) if live.is_empty() => true,
            Ok(live) => {
                tracing::warn!(job_id = %lost.job_id, jobs = %list(&live), "the Job view missed a live Job; not reported lost");
                false
            }
            Err(error) => {
                tracing::warn!(job_id = %lost.job_id, error = %error_chain(&error), "cannot confirm that the job has no Job; not reported lost this tick");
                false
            }
        }
    }

    /// The detail of a lost report: what the cluster shows, explained once
    /// and kept until the report lands.
    async fn lost_detail(&mut self, lost: &LostJob) -> String {
        let key = (lost.lane, lost.job_id.clone());
        if let Some(detail) = self.lost_details.get(&key) {
            return detail.clone();
        }
        let detail = self.explain_lost(lost).await;
        self.lost_details.insert(key, detail.clone());
        detail
    }

    async fn explain_lost(&mut self, lost: &LostJob) -> String {
        let spec = lost.lane.spec();
        let (kind, what) = (spec.worker, spec.final_word);
        match &lost.cause {
            LostCause::JobGone => match self.lost_notes.get(&lost.job_id) {
                Some(note) => note.detail.clone(),
                None => format!("{kind} Job no longer exists"),
            },
            LostCause::ExitedWithoutReport { job_name } => {
                format!("{kind} exited without its {what} landing (Job {job_name} completed)")
            }
            LostCause::Died { job_name } => {
                let snapshot = self.jobs.snapshot();
                match snapshot.iter().find(|j| j.name() == job_name) {
                    // Deleted (by this lease-keeper, as its pod could never
                    // start, or by hand) and still in the view while its pod
                    // terminates: the note of why it went is the cause, not
                    // how its terminating pod looks now.
                    Some(job)
                        if (job.deleting || job.gone)
                            && let Some(note) = self.lost_notes.get(&lost.job_id) =>
                    {
                        note.detail.clone()
                    }
                    Some(job) => {
                        let kind_of_death = if self.judged_dead().contains(job_name) {
                            DeathKind::Stuck
                        } else {
                            DeathKind::Failed
                        };
                        let detail = self
                            .explain(job, kind_of_death, Instant::now())
                            .await
                            .map(|(_, detail)| detail)
                            .unwrap_or_default();
                        format!("{kind} Job {job_name} failed: {detail}")
                    }
                    None => format!("{kind} Job {job_name} failed and is gone"),
                }
            }
        }
    }
}
