//! Death reports (`POST /jobs/{id}/status` with the per-job token), once per
//! claim, and the Jobs the lease-keeper ends: those whose pod never starts
//! or is refused (failed fast: judged, reported, then deleted), and
//! publisher Jobs judged dead (deleted, so their publish is reported lost
//! only once its Job is gone). Which claim is reported, and what each
//! backend answer settles, is decided in [`crate::plan::deaths`]; here the
//! calls are made.

use super::evidence::{FinalRead, read_at_once, read_final};
use super::reports::{Reporter, out_of_budget};
use crate::cause::{DeathCause, LogTail, StartFailure};
use crate::plan::Answer;
use crate::plan::deaths::{
    DeathSettle, death_report_pending, plan_deaths, settle_death_check, settle_death_report,
};
use crate::plan::events;
use crate::plan::failures::{DeathKind, StartVerdict, start_verdict};
use crate::report::{Report, ReportTick};
use crate::tokens::TokenKey;
use std::collections::BTreeMap;
use std::sync::Arc;
use tcab_shared::job_cache::JobSummary;
use tcab_shared::{Lane, error_chain};
use tokio::time::Instant;

/// A death report explained once, kept until it lands.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The cause (its kind labels the metric).
    pub cause: DeathCause,
    /// The detail sent: the cause's summary and the log tail.
    pub detail: String,
}

impl Reporter {
    /// Reports the deaths due among `entries` (the view's and those that
    /// vanished), once per claim; a job whose report fails backs off alone.
    pub(super) async fn report_deaths(
        &mut self,
        entries: &[Arc<JobSummary>],
        due: &BTreeMap<String, DeathKind>,
        now: Instant,
        deadline: Instant,
        report: &mut ReportTick,
    ) {
        let plan = plan_deaths(entries, due, &self.store.held(), &self.handled_deaths);
        for (name, skip) in &plan.skipped {
            tracing::debug!(job = %name, reason = %skip.describe(), "dead driver Job not reported");
        }
        // A job whose reports keep failing waits out its back-off alone.
        let candidates: Vec<_> = plan
            .report
            .into_iter()
            .filter(|c| {
                self.backoffs
                    .due(&(Report::Death, c.key.job_id.clone()), now)
            })
            .collect();
        // The final reads of the deaths to explain run side by side first
        // (a burst of deaths is read at once); the backend calls follow in
        // order, one job at a time, as a hung backend must stop the round.
        let to_read: Vec<&JobSummary> = candidates
            .iter()
            .filter(|c| c.kind != DeathKind::NeverStarted && !self.prepared.contains_key(&c.key))
            .filter_map(|c| entries.iter().find(|j| j.name() == c.job_name))
            .map(|j| &**j)
            .collect();
        let inspector = &self.inspector;
        let mut finals: BTreeMap<String, FinalRead> =
            read_at_once(&to_read, deadline, |job| read_final(inspector, job))
                .await
                .into_iter()
                .map(|(job, read)| (job.name().to_string(), read))
                .collect();
        for candidate in candidates {
            let key = candidate.key;
            if out_of_budget(deadline, report) {
                break;
            }
            let Some(token) = self.store.get(&key) else {
                continue;
            };
            let Some(job) = entries.iter().find(|j| j.name() == candidate.job_name) else {
                continue;
            };
            let read = self.backend.get_job(&key.job_id).await;
            let live = read.as_ref().ok().map(|view| view.state.is_live());
            match (settle_death_check(Answer::of(&read), live), &read) {
                (DeathSettle::Report, _) => {}
                (DeathSettle::Retry, Err(error)) => {
                    if self.report_failed(Report::Death, &key.job_id, error, report) {
                        break;
                    }
                    continue;
                }
                (settled, read) => {
                    let state = read.as_ref().map(|v| v.state.as_str()).unwrap_or("unknown");
                    tracing::debug!(job_id = %key.job_id, state, verdict = ?settled, "dead driver's job needs no report");
                    self.settle(&key);
                    continue;
                }
            }
            let read = finals.remove(&candidate.job_name);
            let Some(prepared) = self.prepare(&key, job, candidate.kind, read, now).await else {
                tracing::info!(job_id = %key.job_id, job = %candidate.job_name, "the pod of the deleted Job exited 0: no death to report (a report that did not land is left to lost-driver detection)");
                if let Some(id) = &job.job_id() {
                    let detail = format!(
                        "driver of the deleted Job {} exited without its report landing",
                        job.name()
                    );
                    self.note(id, &detail, now);
                }
                self.settle(&key);
                continue;
            };
            let answer = self
                .backend
                .report_death(&key.job_id, &token, &prepared.detail)
                .await;
            match (settle_death_report(Answer::of(&answer)), &answer) {
                (DeathSettle::Reported, Ok(ack)) => {
                    let cause = &prepared.cause;
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, job = %candidate.job_name, cause = %cause.summary(), state = ack.state.as_str(), "reported dead");
                    report
                        .reported_dead
                        .push((key.job_id.clone(), cause.kind()));
                    if let Some(evidence) = self.evidence.get(&candidate.job_name) {
                        report
                            .death_delays
                            .push(Instant::now().saturating_duration_since(evidence.first_sign));
                    }
                    self.note(&key.job_id, &cause.summary(), now);
                    self.events
                        .send(events::reported_dead(&self.namespace, job, cause));
                }
                (DeathSettle::Requeued, _) => {
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, "death not reported: the job was requeued (token refused); dropping it");
                }
                (settle, Err(error)) if settle.settled() => {
                    tracing::debug!(job_id = %key.job_id, %error, "death not reported: the job is already terminal");
                }
                (_, answer) => {
                    if let Err(error) = answer
                        && self.report_failed(Report::Death, &key.job_id, error, report)
                    {
                        break;
                    }
                    continue;
                }
            }
            self.settle(&key);
        }
    }

    /// The claim's report, explained the first time and kept after that;
    /// `None` when there is no death to report (see [`Reporter::explain`]).
    /// `read` is the final read made for it already, if one was.
    async fn prepare(
        &mut self,
        key: &TokenKey,
        job: &JobSummary,
        kind: DeathKind,
        read: Option<FinalRead>,
        now: Instant,
    ) -> Option<Prepared> {
        if let Some(prepared) = self.prepared.get(key) {
            return Some(prepared.clone());
        }
        let (cause, detail) = match (kind, read) {
            (DeathKind::NeverStarted, _) => self.explain_with(job, kind, None, now)?,
            (_, Some(read)) => self.explain_with(job, kind, Some(read), now)?,
            (_, None) => self.explain(job, kind, now).await?,
        };
        let prepared = Prepared { cause, detail };
        self.prepared.insert(key.clone(), prepared.clone());
        Some(prepared)
    }

    /// Marks a claim's death settled and drops its token, its prepared
    /// report and its back-off.
    fn settle(&mut self, key: &TokenKey) {
        self.store.forget(key);
        self.prepared.remove(key);
        self.backoffs.forget(&(Report::Death, key.job_id.clone()));
        self.handled_deaths.insert(key.clone());
    }

    /// Reads the pod of a Job without a ready pod; true when it is judged
    /// never to start (its Job is then failed fast).
    pub(super) async fn check_start(&mut self, job: &JobSummary, now: Instant) -> bool {
        let Some(mem) = self.memory.get_mut(job.name()) else {
            return false;
        };
        mem.last_start_check = Some(now);
        let not_ready_for = now.saturating_duration_since(mem.first_seen);
        let pod = match self.inspector.newest_pod(job.name()).await {
            Ok(pod) => pod,
            Err(error) => {
                tracing::debug!(job = %job.name(), error = %error_chain(&error), "cannot read the pod of a Job without a ready pod");
                return false;
            }
        };
        match start_verdict(job.lane, pod.as_ref(), not_ready_for, &self.settings) {
            StartVerdict::Fine => false,
            StartVerdict::Waiting(failure) => {
                tracing::debug!(job = %job.name(), cause = %failure.summary(), waited_s = not_ready_for.as_secs(), "pod cannot start yet; within its grace");
                false
            }
            StartVerdict::NeverStarts(failure) => {
                tracing::warn!(job = %job.name(), job_id = job.job_id().unwrap_or(""), cause = %failure.summary(), waited_s = not_ready_for.as_secs(), "judged dead: the pod can never start; its Job is deleted and its death reported");
                // Its container never ran: there is no log to read.
                let log = LogTail::Gone(match &pod {
                    Some(_) => "the container never started".into(),
                    None => "the Job had no pod".into(),
                });
                self.keep(job, pod, log);
                self.evidence_complete(job.name());
                self.judge_dead(job.name());
                self.never_started.insert(job.name().to_string(), failure);
                true
            }
        }
    }

    /// Deletes the Jobs the lease-keeper ends, once nothing is left to
    /// report first: those whose pod never starts or is refused (a run once
    /// its death is settled or cannot be reported; a publisher at once), and
    /// publisher Jobs judged dead. A publish so ended is reported lost at
    /// the next lost check, with what its Job showed, without waiting for
    /// its lease: it is retried as any lost publish is, and it is never
    /// reported while its Job exists.
    pub(super) async fn delete_ended(
        &mut self,
        snapshot: &[Arc<JobSummary>],
        deadline: Instant,
        report: &mut ReportTick,
    ) -> Vec<String> {
        let held = self.store.held();
        let at = |name: &str| snapshot.binary_search_by(|j| j.name().cmp(name)).ok();
        // Never started, then judged-dead publishers not being deleted yet
        // (a stand-in for a pod that outlives its Job is no Job to delete).
        let mut ended: Vec<(String, Ended)> = self
            .never_started
            .keys()
            .map(|name| (name.clone(), Ended::NeverStarted))
            .collect();
        for name in self.judged_dead() {
            let Some(i) = at(&name) else { continue };
            let job = &snapshot[i];
            let publisher = job.lane == Lane::Publish && job.is_live() && !job.gone;
            if publisher && !job.deleting && !self.never_started.contains_key(&name) {
                ended.push((name, Ended::JudgedDead));
            }
        }
        let mut deleted = Vec::new();
        for (name, why) in ended {
            let Some(i) = at(&name) else { continue };
            let job = Arc::clone(&snapshot[i]);
            if death_report_pending(&job, &held, &self.handled_deaths) {
                continue;
            }
            if out_of_budget(deadline, report) {
                break;
            }
            let (detail, notice) = match why {
                Ended::NeverStarted => {
                    let failure = self.never_started.get(&name);
                    let summary = failure.map(StartFailure::summary).unwrap_or_default();
                    let notice = failure.map(|f| {
                        events::deleted(&self.namespace, &job, events::Deleted::NeverStarted(f))
                    });
                    (format!("its pod never started: {summary}"), notice)
                }
                Ended::JudgedDead => {
                    let explained = self.explain_with(&job, DeathKind::Stuck, None, Instant::now());
                    let notice = explained.as_ref().map(|(cause, _)| {
                        events::deleted(&self.namespace, &job, events::Deleted::JudgedDead(cause))
                    });
                    let evidence = explained.map(|(_, detail)| detail).unwrap_or_default();
                    (format!("it was judged dead: {evidence}"), notice)
                }
            };
            match self.inspector.delete_job(&name).await {
                Ok(()) => {
                    match why {
                        Ended::NeverStarted => {
                            tracing::info!(job = %name, job_id = job.job_id().unwrap_or(""), lane = %job.lane, "deleted a Job whose pod can never start")
                        }
                        Ended::JudgedDead => {
                            tracing::info!(job = %name, job_id = job.job_id().unwrap_or(""), "deleted a publisher Job judged dead; its publish is reported lost")
                        }
                    }
                    if let Some(id) = job.job_id() {
                        let kind = job.lane.worker();
                        let note = format!("{kind} Job {name} was deleted because {detail}");
                        self.note(id, &note, Instant::now());
                        if job.lane == Lane::Publish {
                            self.ended_publishes.insert(id.to_owned(), Instant::now());
                        }
                    }
                    if let Some(notice) = notice {
                        self.events.send(notice);
                    }
                    self.never_started.remove(&name);
                    deleted.push(name);
                }
                Err(error) => {
                    tracing::warn!(job = %name, reason = error.reason().as_str(), error = %error_chain(&error), "cannot delete the Job the lease-keeper ended; retrying");
                }
            }
        }
        deleted
    }
}

/// Why the lease-keeper ends a Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Its pod never starts, or the API server refuses it.
    NeverStarted,
    /// A publisher Job judged dead (it could not finish failing).
    JudgedDead,
}
