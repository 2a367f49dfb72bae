//! The report loop: woken by every change to an owned Job (the moment a Job
//! first shows a sign of failure, while its pod may still be readable) and
//! at least every poll interval. Each tick it captures evidence, judges Jobs
//! that cannot finish failing or whose pod never starts, reports deaths, and
//! (every poll interval, per lane, only while the lane's renewals are
//! healthy) reports lost jobs. Nothing here can delay a renewal: renewals
//! run in their own loop.

use super::renewals::JudgedDead;
use crate::cause::{DeathCause, LogTail, StartFailure, death_cause, death_detail, job_for_cause};
use crate::gate::Gate;
use crate::inspect::Inspector;
use crate::plan::Answer;
use crate::plan::deaths::{
    DeathSettle, death_report_pending, plan_deaths, settle_death_check, settle_death_report,
};
use crate::plan::failures::{
    DeathKind, EvidenceState, FailureSettings, JobMemory, StartVerdict, evidence_after_log,
    evidence_settled, plan_failures, start_verdict,
};
use crate::plan::lost::{
    ActiveList, Known, LostCause, LostJob, LostPlan, LostSettle, plan_lost, settle_lost_report,
};
use crate::tokens::{TokenKey, TokenStore};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::backend::{BackendClient, JobId};
use tcab_shared::error_chain;
use tcab_shared::failing::FailingSince;
use tcab_shared::job_cache::{JobSummary, OwnedJobs};
use tcab_shared::tick::{Tick, TickOutcome};
use tokio::time::Instant;

/// What was read of a failing Job's pod.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The pod as read (`None`: the Job had no pod left).
    pub pod: Option<Pod>,
    /// Its log tail, or why it could not be read.
    pub log: LogTail,
    /// How many times the log was tried.
    pub log_attempts: u32,
}

/// A note kept about a job after its Job is gone, for its lost report.
#[derive(Debug, Clone)]
struct LostNote {
    detail: String,
    at: Instant,
}

/// What one report tick did; returned for tests and summarised in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportTick {
    /// Whether the view was current (nothing is judged otherwise).
    pub view_current: bool,
    /// Jobs whose evidence was captured this tick.
    pub captured: Vec<String>,
    /// Jobs judged dead this tick (cannot finish failing, or never start).
    pub judged_dead: Vec<String>,
    /// Jobs deleted because their pod can never start.
    pub deleted: Vec<String>,
    /// Runs whose deaths were reported (job id, death kind for metrics).
    pub reported_dead: Vec<(JobId, &'static str)>,
    /// Whether lost runs were judged this tick.
    pub judged_runs: bool,
    /// Whether lost publishes were judged this tick.
    pub judged_publishes: bool,
    /// Runs reported lost.
    pub lost_runs: Vec<JobId>,
    /// Publishes reported lost.
    pub lost_publishes: Vec<JobId>,
}

/// The report loop's state. Everything else is read afresh.
pub struct Reporter {
    backend: BackendClient,
    inspector: Inspector,
    jobs: OwnedJobs,
    store: TokenStore,
    gate: Gate,
    judged_dead: JudgedDead,
    publishing: bool,
    lease_length: Duration,
    poll: Duration,
    settings: FailureSettings,
    memory: BTreeMap<String, JobMemory>,
    evidence: BTreeMap<String, Evidence>,
    failing: FailingSince,
    /// Jobs whose pod can never start, with why, until they are deleted.
    never_started: BTreeMap<String, StartFailure>,
    /// Claims whose death is settled (reported, refused, or already terminal).
    handled_deaths: BTreeSet<TokenKey>,
    /// Runs reported lost, kept while the backend still lists them.
    reported_runs: BTreeSet<JobId>,
    /// Publishes reported lost, kept while the backend still lists them.
    reported_publishes: BTreeSet<JobId>,
    /// What was learned of jobs whose Job this process deleted.
    lost_notes: BTreeMap<JobId, LostNote>,
    last_lost_check: Option<Instant>,
}

/// The parts a [`Reporter`] is built from.
pub struct ReporterParts {
    /// The backend client.
    pub backend: BackendClient,
    /// Cluster reads.
    pub inspector: Inspector,
    /// The Job view.
    pub jobs: OwnedJobs,
    /// The per-job tokens.
    pub store: TokenStore,
    /// The renewal state (lost jobs are judged per lane only while healthy).
    pub gate: Gate,
    /// Jobs judged dead, shared with the renewal loop.
    pub judged_dead: JudgedDead,
    /// Whether publishes are renewed and judged.
    pub publishing: bool,
    /// The lease length (how long tokens without a Job are kept).
    pub lease_length: Duration,
    /// How often lost jobs are judged.
    pub poll: Duration,
    /// The failure knobs.
    pub settings: FailureSettings,
}

impl Reporter {
    /// A reporter over these parts.
    pub fn new(parts: ReporterParts) -> Self {
        Reporter {
            backend: parts.backend,
            inspector: parts.inspector,
            jobs: parts.jobs,
            store: parts.store,
            gate: parts.gate,
            judged_dead: parts.judged_dead,
            publishing: parts.publishing,
            lease_length: parts.lease_length,
            poll: parts.poll,
            settings: parts.settings,
            memory: BTreeMap::new(),
            evidence: BTreeMap::new(),
            failing: FailingSince::new(),
            never_started: BTreeMap::new(),
            handled_deaths: BTreeSet::new(),
            reported_runs: BTreeSet::new(),
            reported_publishes: BTreeSet::new(),
            lost_notes: BTreeMap::new(),
            last_lost_check: None,
        }
    }

    /// Whether the evidence of a Job is held (for tests).
    pub fn evidence_of(&self, job_name: &str) -> Option<&Evidence> {
        self.evidence.get(job_name)
    }

    fn judged_dead(&self) -> BTreeSet<String> {
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn judge_dead(&self, name: &str) {
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned());
    }

    /// One tick. `lost_due` forces (or skips) the lost judgement; `None`
    /// judges lost jobs when a poll interval has passed since the last time.
    pub async fn tick_at(&mut self, lost_due: Option<bool>) -> ReportTick {
        let mut report = ReportTick::default();
        // A view that is not current could miss failing Jobs and call live
        // Jobs gone: judge nothing from it.
        if !self.jobs.is_current() {
            tracing::debug!("Job view not current: nothing is judged this tick");
            return report;
        }
        report.view_current = true;
        let now = Instant::now();
        let snapshot = self.jobs.snapshot();
        self.remember(&snapshot, now);

        let plan = plan_failures(
            &snapshot,
            &self.memory,
            &self.failing,
            &self.judged_dead(),
            &self.never_started.keys().cloned().collect(),
            now,
            &self.settings,
        );
        for name in &plan.newly_stuck {
            self.judge_dead(name);
            let waited = snapshot
                .iter()
                .find(|j| &j.name == name)
                .and_then(|j| self.failing.since(j))
                .map(|at| now.saturating_duration_since(at).as_secs());
            tracing::warn!(job = %name, waited_s = waited, "judged dead: the Job showed failure and could not finish failing (a lost node?); its lease is no longer renewed");
            report.judged_dead.push(name.clone());
        }
        for (name, why) in &plan.waiting {
            tracing::debug!(job = %name, reason = why, "death report waits");
        }
        let by_name: BTreeMap<&str, &JobSummary> =
            snapshot.iter().map(|j| (j.name.as_str(), j)).collect();
        for name in &plan.capture {
            if let Some(job) = by_name.get(name.as_str())
                && self.capture(job).await
            {
                report.captured.push(name.clone());
            }
        }
        for name in &plan.retry_logs {
            if let Some(job) = by_name.get(name.as_str()) {
                self.retry_log(job).await;
            }
        }
        let mut deaths = plan.deaths.clone();
        for name in &plan.check_start {
            if let Some(job) = by_name.get(name.as_str())
                && self.check_start(job, now).await
            {
                report.judged_dead.push(name.clone());
                if job.lane == Lane::Run {
                    deaths.push((name.clone(), DeathKind::NeverStarted));
                }
            }
        }

        // Deaths due whose evidence is settled.
        let due: BTreeMap<String, DeathKind> = deaths
            .iter()
            .filter(|(name, _)| {
                let settled = self
                    .memory
                    .get(name)
                    .is_some_and(|m| evidence_settled(m.evidence, &self.settings));
                if !settled {
                    tracing::debug!(job = %name, "death report waits for its evidence");
                }
                settled
            })
            .cloned()
            .collect();
        report.reported_dead = self.report_deaths(&snapshot, &due, now).await;

        // Jobs whose pod never starts are deleted once their death is settled.
        report.deleted = self.delete_never_started(&snapshot).await;

        let lost_due = lost_due.unwrap_or_else(|| {
            self.last_lost_check
                .is_none_or(|at| now.saturating_duration_since(at) >= self.poll)
        });
        if lost_due {
            self.last_lost_check = Some(now);
            if let Some(lost) = self.lost(Lane::Run).await {
                report.judged_runs = true;
                report.lost_runs = lost;
            }
            if self.publishing
                && let Some(lost) = self.lost(Lane::Publish).await
            {
                report.judged_publishes = true;
                report.lost_publishes = lost;
            }
        }
        report
    }

    /// Remembers new Jobs, forgets gone ones, prunes tokens and notes.
    fn remember(&mut self, snapshot: &[JobSummary], now: Instant) {
        let names: BTreeSet<&str> = snapshot.iter().map(|j| j.name.as_str()).collect();
        self.memory.retain(|name, _| names.contains(name.as_str()));
        self.evidence
            .retain(|name, _| names.contains(name.as_str()));
        self.never_started
            .retain(|name, _| names.contains(name.as_str()));
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name| names.contains(name.as_str()));
        for job in snapshot {
            self.memory.entry(job.name.clone()).or_insert(JobMemory {
                first_seen: now,
                evidence: EvidenceState::Missing,
                last_start_check: None,
            });
        }
        self.failing.observe(snapshot, now);
        for (key, reason) in self.store.prune(snapshot, now, self.lease_length) {
            tracing::debug!(job_id = %key.job_id, claim = %key.claim, reason = reason.as_str(), "token dropped");
        }
        self.handled_deaths.retain(|key| {
            snapshot.iter().any(|j| {
                j.job_id.as_ref() == Some(&key.job_id) && j.claim.as_ref() == Some(&key.claim)
            })
        });
        let keep = self.lease_length * 2;
        self.lost_notes
            .retain(|_, note| now.saturating_duration_since(note.at) < keep);
    }

    /// Reads a failing Job's pod and log tail; true when evidence is now held.
    async fn capture(&mut self, job: &JobSummary) -> bool {
        match self.inspector.newest_pod(&job.name).await {
            Ok(Some(pod)) => {
                let log = self.inspector.log_tail(&pod, job.lane).await;
                self.keep(job, Some(pod), log);
                true
            }
            Ok(None) => {
                let log = LogTail::Unreadable("the Job had no pod left to read".into());
                self.keep(job, None, log);
                true
            }
            Err(error) => {
                tracing::warn!(job = %job.name, error = %error_chain(&error), "cannot read the failing Job's pod; retrying");
                false
            }
        }
    }

    fn keep(&mut self, job: &JobSummary, pod: Option<Pod>, log: LogTail) {
        let state = evidence_after_log(&log, pod.is_some(), 1);
        tracing::debug!(job = %job.name, has_pod = pod.is_some(), log_read = matches!(log, LogTail::Read(_)), "evidence captured");
        if let Some(mem) = self.memory.get_mut(&job.name) {
            mem.evidence = state;
        }
        self.evidence.insert(
            job.name.clone(),
            Evidence {
                pod,
                log,
                log_attempts: 1,
            },
        );
    }

    /// Tries a log that could not be read once more.
    async fn retry_log(&mut self, job: &JobSummary) {
        let Some(evidence) = self.evidence.get_mut(&job.name) else {
            return;
        };
        let Some(pod) = evidence.pod.clone() else {
            return;
        };
        let log = self.inspector.log_tail(&pod, job.lane).await;
        evidence.log_attempts += 1;
        let attempts = evidence.log_attempts;
        let state = evidence_after_log(&log, true, attempts);
        evidence.log = log;
        if let Some(mem) = self.memory.get_mut(&job.name) {
            mem.evidence = state;
        }
    }

    /// Reads the pod of a Job without a ready pod; true when it is judged
    /// never to start (its Job is then failed fast).
    async fn check_start(&mut self, job: &JobSummary, now: Instant) -> bool {
        let Some(mem) = self.memory.get_mut(&job.name) else {
            return false;
        };
        mem.last_start_check = Some(now);
        let not_ready_for = now.saturating_duration_since(mem.first_seen);
        let pod = match self.inspector.newest_pod(&job.name).await {
            Ok(pod) => pod,
            Err(error) => {
                tracing::debug!(job = %job.name, error = %error_chain(&error), "cannot read the pod of a Job without a ready pod");
                return false;
            }
        };
        match start_verdict(job.lane, pod.as_ref(), not_ready_for, &self.settings) {
            StartVerdict::Fine => false,
            StartVerdict::Waiting(failure) => {
                tracing::debug!(job = %job.name, cause = %failure.summary(), waited_s = not_ready_for.as_secs(), "pod cannot start yet; within its grace");
                false
            }
            StartVerdict::NeverStarts(failure) => {
                tracing::warn!(job = %job.name, job_id = job.job_id.as_deref().unwrap_or(""), cause = %failure.summary(), waited_s = not_ready_for.as_secs(), "judged dead: the pod can never start; its Job is deleted and its death reported");
                // Its container never ran: there is no log to read.
                let log = LogTail::Unreadable(match &pod {
                    Some(_) => "the container never started".into(),
                    None => "the Job had no pod".into(),
                });
                self.keep(job, pod, log);
                if let Some(mem) = self.memory.get_mut(&job.name) {
                    mem.evidence = EvidenceState::Complete;
                }
                self.judge_dead(&job.name);
                self.never_started.insert(job.name.clone(), failure);
                true
            }
        }
    }

    /// The death cause and detail of a Job, from its summary and evidence.
    /// A pod still there is read again (its final state and log are more
    /// complete than at the first sign); a pod gone leaves the captured one.
    async fn explain(
        &mut self,
        job: &JobSummary,
        kind: DeathKind,
        now: Instant,
    ) -> (DeathCause, String) {
        if kind != DeathKind::NeverStarted
            && let Ok(Some(pod)) = self.inspector.newest_pod(&job.name).await
        {
            let log = self.inspector.log_tail(&pod, job.lane).await;
            let keep_old_log = matches!(log, LogTail::Unreadable(_))
                && self
                    .evidence
                    .get(&job.name)
                    .is_some_and(|e| matches!(e.log, LogTail::Read(_)));
            let entry = self.evidence.entry(job.name.clone()).or_insert(Evidence {
                pod: None,
                log: log.clone(),
                log_attempts: 0,
            });
            entry.pod = Some(pod);
            if !keep_old_log {
                entry.log = log;
            }
        }
        let evidence = self.evidence.get(&job.name);
        let pod = evidence.and_then(|e| e.pod.as_ref());
        let log = evidence
            .map(|e| e.log.clone())
            .unwrap_or_else(|| LogTail::Unreadable("no evidence was captured".into()));
        let base = death_cause(&job_for_cause(job), pod);
        let cause = match kind {
            DeathKind::Failed => base,
            DeathKind::Stuck => DeathCause::Stuck {
                node: pod
                    .and_then(|p| p.spec.as_ref())
                    .and_then(|s| s.node_name.clone()),
                waited: self
                    .failing
                    .since(job)
                    .map(|at| now.saturating_duration_since(at))
                    .unwrap_or_default(),
                evidence: Box::new(base),
            },
            DeathKind::NeverStarted => match self.never_started.get(&job.name) {
                Some(failure) => DeathCause::NeverStarted(failure.clone()),
                None => base,
            },
        };
        let detail = death_detail(&cause, &log);
        (cause, detail)
    }

    async fn report_deaths(
        &mut self,
        snapshot: &[JobSummary],
        due: &BTreeMap<String, DeathKind>,
        now: Instant,
    ) -> Vec<(JobId, &'static str)> {
        let plan = plan_deaths(snapshot, due, &self.store.held(), &self.handled_deaths);
        for (name, skip) in &plan.skipped {
            tracing::debug!(job = %name, reason = %skip.describe(), "dead driver Job not reported");
        }
        let mut reported = Vec::new();
        for candidate in plan.report {
            let key = candidate.key;
            let Some(token) = self.store.get(&key) else {
                continue;
            };
            let Some(job) = snapshot.iter().find(|j| j.name == candidate.job_name) else {
                continue;
            };
            let read = self.backend.get_job(&key.job_id).await;
            let live = read.as_ref().ok().map(|view| view.state.is_live());
            match (settle_death_check(Answer::of(&read), live), &read) {
                (DeathSettle::Report, _) => {}
                (DeathSettle::Retry, Err(error)) => {
                    // A failing backend fails the next call too: the rest
                    // wait for the next tick rather than each paying the
                    // full timeout, which would hold the tick past its
                    // liveness bound.
                    tracing::warn!(job_id = %key.job_id, error = %error_chain(error), "cannot read the dead driver's job; the deaths left are tried next tick");
                    break;
                }
                (settled, read) => {
                    let state = read.as_ref().map(|v| v.state.as_str()).unwrap_or("unknown");
                    tracing::debug!(job_id = %key.job_id, state, verdict = ?settled, "dead driver's job needs no report");
                    self.settle(&key);
                    continue;
                }
            }
            let (cause, detail) = self.explain(job, candidate.kind, now).await;
            let answer = self
                .backend
                .report_death(&key.job_id, &token, &detail)
                .await;
            match (settle_death_report(Answer::of(&answer)), &answer) {
                (DeathSettle::Reported, Ok(ack)) => {
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, job = %candidate.job_name, cause = %cause.summary(), state = ack.state.as_str(), "reported dead");
                    reported.push((key.job_id.clone(), cause.kind()));
                    self.note(&key.job_id, &cause.summary(), now);
                }
                (DeathSettle::Requeued, _) => {
                    tracing::info!(job_id = %key.job_id, claim = %key.claim, "death not reported: the job was requeued (token refused); dropping it");
                }
                (settle, Err(error)) if settle.settled() => {
                    tracing::debug!(job_id = %key.job_id, %error, "death not reported: the job is already terminal");
                }
                (_, answer) => {
                    let error = answer.as_ref().err().map(|e| error_chain(e));
                    tracing::warn!(job_id = %key.job_id, error = error.as_deref().unwrap_or(""), "death report failed; the deaths left are tried next tick");
                    break;
                }
            }
            self.settle(&key);
        }
        reported
    }

    /// Marks a claim's death settled and drops its token.
    fn settle(&mut self, key: &TokenKey) {
        self.store.forget(key);
        self.handled_deaths.insert(key.clone());
    }

    fn note(&mut self, job_id: &str, detail: &str, now: Instant) {
        self.lost_notes.insert(
            job_id.to_owned(),
            LostNote {
                detail: detail.to_owned(),
                at: now,
            },
        );
    }

    /// Deletes the Jobs whose pod never starts, once nothing is left to
    /// report first: a publisher at once (its loss is reported through the
    /// lost path), a run once its death is settled or cannot be reported.
    async fn delete_never_started(&mut self, snapshot: &[JobSummary]) -> Vec<String> {
        let held = self.store.held();
        let mut deleted = Vec::new();
        let names: Vec<String> = self.never_started.keys().cloned().collect();
        for name in names {
            let Some(job) = snapshot.iter().find(|j| j.name == name) else {
                continue;
            };
            if death_report_pending(job, &held, &self.handled_deaths) {
                continue;
            }
            match self.inspector.delete_job(&name).await {
                Ok(()) => {
                    let summary = self
                        .never_started
                        .get(&name)
                        .map(StartFailure::summary)
                        .unwrap_or_default();
                    tracing::info!(job = %name, job_id = job.job_id.as_deref().unwrap_or(""), cause = %summary, "deleted a Job whose pod can never start");
                    if let Some(id) = &job.job_id {
                        let kind = match job.lane {
                            Lane::Run => "driver",
                            Lane::Publish => "publisher",
                        };
                        let detail = format!(
                            "{kind} Job {name} was deleted because its pod never started: {summary}"
                        );
                        self.note(id, &detail, Instant::now());
                    }
                    self.never_started.remove(&name);
                    deleted.push(name);
                }
                Err(error) => {
                    tracing::warn!(job = %name, error = %error_chain(&error), "cannot delete the Job whose pod never starts; retrying");
                }
            }
        }
        deleted
    }

    /// The jobs of `lane` reported lost, kept while the backend lists them.
    fn reported_mut(&mut self, lane: Lane) -> &mut BTreeSet<JobId> {
        match lane {
            Lane::Run => &mut self.reported_runs,
            Lane::Publish => &mut self.reported_publishes,
        }
    }

    /// Judges lost jobs of one lane; `None` when it was not judged.
    async fn lost(&mut self, lane: Lane) -> Option<Vec<JobId>> {
        if !self.gate.lane(lane).healthy() {
            tracing::debug!(%lane, "the lane's renewals are not healthy; lost jobs not judged");
            return None;
        }
        let active = match lane {
            Lane::Run => self
                .backend
                .active_runs()
                .await
                .map(|a| ActiveList::from(&a)),
            Lane::Publish => self
                .backend
                .active_publishes()
                .await
                .map(|a| ActiveList::from(&a)),
        };
        let active = match active {
            Ok(active) => active,
            Err(error) => {
                tracing::warn!(%lane, error = %error_chain(&error), "cannot read the lane's active list; its lost jobs are not judged this tick");
                return None;
            }
        };
        // A job the backend no longer lists needs no memory of its report.
        self.reported_mut(lane).retain(|id| active.contains(id));
        let judged_dead = self.judged_dead();
        let snapshot = self.jobs.snapshot();
        let held = self.store.held();
        let plan = plan_lost(
            &active,
            &Known {
                jobs: &snapshot,
                held: &held,
                reported: self.reported_mut(lane),
                judged_dead: &judged_dead,
            },
        );
        // The renewal and the view may both have moved on while the active
        // list was read: judge only if they are still healthy.
        if !self.jobs.is_current() || !self.gate.lane(lane).healthy() {
            return None;
        }
        Some(self.report_lost(lane, plan).await)
    }

    async fn report_lost(&mut self, lane: Lane, plan: LostPlan) -> Vec<JobId> {
        for (id, skip) in &plan.skipped {
            tracing::debug!(%lane, job_id = %id, reason = %skip.describe(), "not lost");
        }
        let mut reported = Vec::new();
        for lost in plan.lost {
            if lost.cause == LostCause::JobGone && !self.confirm_gone(&lost).await {
                continue;
            }
            let detail = self.lost_detail(&lost).await;
            let result = match lane {
                Lane::Run => self.backend.report_lost(&lost.job_id, &detail).await,
                Lane::Publish => {
                    self.backend
                        .report_publish_lost(&lost.job_id, &detail)
                        .await
                }
            };
            let memory = self.reported_mut(lane);
            match (settle_lost_report(Answer::of(&result)), result) {
                (LostSettle::Reported, Ok(outcome)) => {
                    let summary = detail.lines().next().unwrap_or_default();
                    tracing::info!(%lane, job_id = %lost.job_id, ignored = outcome.ignored, state = %outcome.state, retry_id = ?outcome.retry_id, detail = %summary, "reported lost");
                    memory.insert(lost.job_id.clone());
                    reported.push(lost.job_id);
                }
                (LostSettle::NoLongerDriven, Err(e)) => {
                    tracing::debug!(%lane, job_id = %lost.job_id, error = %e, "lost report refused; the job is no longer driven");
                    memory.insert(lost.job_id);
                }
                (_, answer) => {
                    let error = answer.err().map(|e| error_chain(&e));
                    tracing::warn!(%lane, job_id = %lost.job_id, error = error.as_deref().unwrap_or(""), "lost report failed; the lane's lost jobs left are tried next tick");
                    break;
                }
            }
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
                tracing::warn!(job_id = %lost.job_id, jobs = ?live, "the Job view missed a live Job; not reported lost");
                false
            }
            Err(error) => {
                tracing::warn!(job_id = %lost.job_id, error = %error_chain(&error), "cannot confirm that the job has no Job; not reported lost this tick");
                false
            }
        }
    }

    /// The detail of a lost report: what the cluster shows.
    async fn lost_detail(&mut self, lost: &LostJob) -> String {
        let (kind, what) = match lost.lane {
            Lane::Run => ("driver", "report"),
            Lane::Publish => ("publisher", "result"),
        };
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
                match snapshot.iter().find(|j| &j.name == job_name) {
                    Some(job) => {
                        let kind_of_death = if self.judged_dead().contains(job_name) {
                            DeathKind::Stuck
                        } else {
                            DeathKind::Failed
                        };
                        let (_, detail) = self.explain(job, kind_of_death, Instant::now()).await;
                        format!("{kind} Job {job_name} failed: {detail}")
                    }
                    None => format!("{kind} Job {job_name} failed and is gone"),
                }
            }
        }
    }
}

impl Tick for Reporter {
    async fn tick(&mut self) -> TickOutcome {
        self.tick_at(None).await;
        TickOutcome::Idle
    }
}
