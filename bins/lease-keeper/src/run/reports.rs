//! The report loop: woken by every change to an owned Job (the moment a Job
//! first shows a sign of failure, while its pod may still be readable) and
//! at least every poll interval. Each tick it captures evidence, judges Jobs
//! that cannot finish failing or whose pod never starts, reports deaths, and
//! (every poll interval, per lane, only while the lane's renewals are
//! healthy) reports lost jobs. Nothing here can delay a renewal: renewals
//! run in their own loop.
//!
//! One job never holds up another: a report the backend keeps refusing
//! backs off that job alone ([`PerKey`]), and the others of the tick go on;
//! a backend that does not answer at all ends the tick's reports of that
//! kind (the rest follow next tick), and the whole tick stops starting new
//! calls once its budget is spent, so it stays within its liveness bound.
//! The pod and log reads of a burst of failing Jobs run side by side
//! ([`super::READS_AT_ONCE`] at a time); the backend calls that follow go
//! one job at a time, so a backend that hangs stops the round after one.
//!
//! The concerns live beside this file: `super::evidence` (reading a
//! failing Job's pod and log, once), `super::deaths` (death reports and
//! pods that never start), `super::refusals` (Jobs the cluster gives no
//! pod), `super::lost` (lost runs and publishes) and `super::memory` (what
//! the loop remembers between ticks).

use super::deaths::Prepared;
use super::evidence::{Evidence, read_at_once, read_first};
use super::memory::{LostNote, Vanished};
use super::renewals::JudgedDead;
use crate::cause::StartFailure;
use crate::gate::Gate;
use crate::inspect::Inspector;
use crate::metrics::KeeperMetrics;
use crate::plan::failures::{
    DeathKind, FailureSettings, Memories, evidence_settled, plan_failures,
};
use crate::report::{FailedReport, Report, ReportTick};
use crate::status::{KeeperStatus, Pending};
use crate::tokens::{TokenKey, TokenStore};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tcab_shared::backend::{BackendClient, BackendError, BackendErrorKind, JobId};
use tcab_shared::events::EventSender;
use tcab_shared::failing::FailingSince;
use tcab_shared::job_cache::{JobSummary, OwnedJobs, Snapshot};
use tcab_shared::retry::{Backoff, JITTER_PERCENT, PerKey};
use tcab_shared::tick::{Tick, TickOutcome};
use tcab_shared::{Lane, WallClock, error_chain};
use tokio::time::Instant;

/// The back-off of one job whose report keeps failing: 5 s, doubling, at
/// most 5 minutes, each wait up to a fifth shorter, so the reports that
/// failed together while the backend was down do not all retry at once.
pub const REPORT_BACKOFF: Backoff =
    Backoff::doubling(Duration::from_secs(5), Duration::from_secs(300)).with_jitter(JITTER_PERCENT);

/// The report loop's state. Everything else is read afresh.
pub struct Reporter {
    pub(super) backend: BackendClient,
    pub(super) inspector: Inspector,
    pub(super) jobs: OwnedJobs,
    pub(super) store: TokenStore,
    pub(super) gate: Gate,
    pub(super) judged_dead: JudgedDead,
    pub(super) publishing: bool,
    pub(super) lease_length: Duration,
    pub(super) poll: Duration,
    pub(super) budget: Duration,
    pub(super) settings: FailureSettings,
    pub(super) memory: Memories,
    /// The view as the last tick saw it (sorted by name), to tell an entry
    /// that vanished. Shared with that tick's snapshot, never copied: a
    /// copy per tick cost about a cached Job's size again for every Job.
    pub(super) last_seen: Snapshot,
    /// Entries that left the view while live.
    pub(super) vanished: BTreeMap<String, Vanished>,
    pub(super) evidence: BTreeMap<String, Evidence>,
    pub(super) failing: FailingSince,
    /// Jobs whose pod can never start, with why, until they are deleted.
    pub(super) never_started: BTreeMap<String, StartFailure>,
    /// Claims whose death is settled (reported, refused, or already terminal).
    pub(super) handled_deaths: BTreeSet<TokenKey>,
    /// Death reports explained once, kept until they land.
    pub(super) prepared: BTreeMap<TokenKey, Prepared>,
    /// Lost details explained once, kept until they land (by lane and id).
    pub(super) lost_details: BTreeMap<(Lane, JobId), String>,
    /// Jobs whose report keeps failing, each on its own back-off.
    pub(super) backoffs: PerKey<(Report, JobId)>,
    /// Jobs reported lost, per lane, kept while the backend still lists them.
    pub(super) reported_lost: BTreeMap<Lane, BTreeSet<JobId>>,
    /// What was learned of jobs whose Job is gone, for their lost report.
    pub(super) lost_notes: BTreeMap<JobId, LostNote>,
    /// Active-list entries already warned about as unreadable (lane, why).
    pub(super) warned_entries: BTreeSet<(Lane, String)>,
    pub(super) last_lost_check: Option<Instant>,
    /// When the Job controller's refusals were last read.
    pub(super) last_refusal_check: Option<Instant>,
    /// Publishes whose publisher Job this process ended (deleted after
    /// judging it never starts or dead), with when: reported lost at the
    /// next lost check, without waiting for their lease.
    pub(super) ended_publishes: BTreeMap<JobId, Instant>,
    /// The wall clock Jobs' ages are read on.
    pub(super) clock: WallClock,
    /// The namespace of the Jobs (where their Events go).
    pub(super) namespace: String,
    /// Where the Events on the Jobs acted on are sent (never waits).
    pub(super) events: EventSender,
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
    /// How long one tick may keep starting calls (within its liveness bound).
    pub budget: Duration,
    /// The failure knobs.
    pub settings: FailureSettings,
    /// The wall clock a Job's age is read on (against its creation time).
    pub clock: WallClock,
    /// The namespace of the Jobs (where their Events go).
    pub namespace: String,
    /// Where the Events on the Jobs acted on are sent.
    pub events: EventSender,
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
            budget: parts.budget,
            settings: parts.settings,
            memory: Memories::new(),
            last_seen: Arc::default(),
            vanished: BTreeMap::new(),
            evidence: BTreeMap::new(),
            failing: FailingSince::new(),
            never_started: BTreeMap::new(),
            handled_deaths: BTreeSet::new(),
            prepared: BTreeMap::new(),
            lost_details: BTreeMap::new(),
            backoffs: PerKey::new(REPORT_BACKOFF),
            reported_lost: BTreeMap::new(),
            lost_notes: BTreeMap::new(),
            warned_entries: BTreeSet::new(),
            last_lost_check: None,
            last_refusal_check: None,
            ended_publishes: BTreeMap::new(),
            clock: parts.clock,
            namespace: parts.namespace,
            events: parts.events,
        }
    }

    /// Whether the evidence of a Job is held (for tests).
    pub fn evidence_of(&self, job_name: &str) -> Option<&Evidence> {
        self.evidence.get(job_name)
    }

    pub(super) fn judged_dead(&self) -> BTreeSet<String> {
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn judge_dead(&self, name: &str) {
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned());
    }

    /// The entries the tick judges: the view's, then those that vanished
    /// (the snapshot itself, shared, when none did).
    pub(super) fn entries(&self, snapshot: &Snapshot) -> Snapshot {
        if self.vanished.is_empty() {
            return Arc::clone(snapshot);
        }
        let mut all = Vec::with_capacity(snapshot.len() + self.vanished.len());
        all.extend(snapshot.iter().cloned());
        all.extend(self.vanished.values().map(|v| Arc::clone(&v.last)));
        Arc::new(all)
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
        let deadline = now + self.budget;
        let snapshot = self.jobs.snapshot();
        self.remember(&snapshot, now);
        let vanished: Vec<Arc<JobSummary>> = self
            .vanished
            .values()
            .map(|v| Arc::clone(&v.last))
            .collect();

        let plan = plan_failures(
            &snapshot,
            &vanished,
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
                .find(|j| j.name() == name)
                .and_then(|j| self.failing.since(j))
                .map(|at| now.saturating_duration_since(at).as_secs());
            tracing::warn!(job = %name, waited_s = waited, "judged dead: the Job showed failure and could not finish failing (a lost node?); its lease is no longer renewed");
            report.judged_dead.push(name.clone());
        }
        for (name, why) in &plan.waiting {
            tracing::debug!(job = %name, reason = why, "death report waits");
        }
        let entries = self.entries(&snapshot);
        // A named entry: the view is sorted by name; the few that vanished
        // are searched in turn (no index of every entry a tick).
        let by_name = ByName {
            view: &snapshot,
            vanished: &vanished,
        };
        // The first reads of the Jobs that showed a sign run side by side.
        let to_capture: Vec<&JobSummary> =
            plan.capture.iter().filter_map(|n| by_name.get(n)).collect();
        let inspector = &self.inspector;
        let reads = read_at_once(&to_capture, deadline, |job| read_first(inspector, job)).await;
        if reads.len() < to_capture.len() {
            out_of_budget(deadline, &mut report);
        }
        for (job, read) in reads {
            if self.capture(job, read) {
                report.captured.push(job.name().to_string());
            }
        }
        for name in &plan.retry_logs {
            if out_of_budget(deadline, &mut report) {
                break;
            }
            if let Some(job) = by_name.get(name) {
                self.retry_log(job).await;
            }
        }
        let mut deaths = plan.deaths.clone();
        for name in &plan.check_start {
            if out_of_budget(deadline, &mut report) {
                break;
            }
            if let Some(job) = by_name.get(name)
                && self.check_start(job, now).await
            {
                report.judged_dead.push(name.clone());
                deaths.push((name.clone(), DeathKind::NeverStarted));
            }
        }

        // Deaths due whose evidence is settled (a pod that never started
        // has nothing more to read).
        let due: BTreeMap<String, DeathKind> = deaths
            .iter()
            .filter(|(name, kind)| {
                let settled = *kind == DeathKind::NeverStarted
                    || self
                        .memory
                        .get(name.as_str())
                        .is_some_and(|m| evidence_settled(m.evidence, &self.settings));
                if !settled {
                    tracing::debug!(job = %name, "death report waits for its evidence");
                }
                settled
            })
            .cloned()
            .collect();
        self.report_deaths(&entries, &due, now, deadline, &mut report)
            .await;

        // Jobs the cluster gives no pod: read why, after the deaths, so a
        // slow read delays none; a refused one is reported from the next tick.
        self.check_refusals(&snapshot, now, deadline, &mut report)
            .await;

        // Jobs whose pod never starts, and publishers judged dead, are
        // deleted once their death is settled.
        report.deleted = self.delete_ended(&snapshot, deadline, &mut report).await;

        let lost_due = lost_due.unwrap_or_else(|| {
            self.last_lost_check
                .is_none_or(|at| now.saturating_duration_since(at) >= self.poll)
        });
        if lost_due {
            self.last_lost_check = Some(now);
            if let Some(lost) = self.lost(Lane::Run, deadline, &mut report).await {
                report.judged_runs = true;
                report.lost_runs = lost;
            }
            if self.publishing
                && let Some(lost) = self.lost(Lane::Publish, deadline, &mut report).await
            {
                report.judged_publishes = true;
                report.lost_publishes = lost;
            }
        }
        report
    }

    /// A report of `job_id` failed with `error`; logged once (for this step
    /// of the job's back-off) and counted. Returns whether the tick's
    /// reports of this kind end here.
    ///
    /// - The backend answered, but not for this job (a 4xx, a 5xx, a
    ///   malformed answer): this job backs off alone, the others go on.
    /// - No answer at all (a timeout, a broken connection): the next call
    ///   would fare no better, so the reports left wait for the next tick;
    ///   and this job backs off too, so a call that hangs for it alone
    ///   cannot stand first in line every tick.
    /// - The backend said it is busy (429/503 after the client's own
    ///   retry): the reports left wait for the next tick; no job is blamed.
    pub(super) fn report_failed(
        &mut self,
        what: Report,
        job_id: &str,
        error: &BackendError,
        report: &mut ReportTick,
    ) -> bool {
        let now = Instant::now();
        let (blame, end_round) = match error.kind() {
            BackendErrorKind::Unavailable => (false, true),
            BackendErrorKind::Transport | BackendErrorKind::Timeout => (true, true),
            _ => (true, false),
        };
        let wait = blame.then(|| self.backoffs.failed(&(what, job_id.to_owned()), now));
        let after = match (wait, end_round) {
            (Some(w), false) => format!(
                "this job is tried again in {} s (attempt {}); the others go on",
                w.until.saturating_duration_since(now).as_secs(),
                w.failures
            ),
            (Some(w), true) => format!(
                "this job is tried again in {} s (attempt {}); the reports left wait for the next tick",
                w.until.saturating_duration_since(now).as_secs(),
                w.failures
            ),
            (None, _) => "the reports left wait for the next tick".to_owned(),
        };
        tracing::warn!(
            report = what.as_str(), lane = %what.lane(), job_id, status = error.status(),
            reason = error.kind().reason().as_str(), error = %error_chain(error),
            "{} report failed; {after}",
            what.as_str(),
        );
        report.failed_reports.push((what, error.kind()));
        report.last_failure = Some(FailedReport {
            report: what,
            job_id: job_id.into(),
            kind: error.kind(),
            message: error_chain(error),
        });
        end_round
    }
}

/// Whether the tick's budget is spent (recorded in the report).
pub(super) fn out_of_budget(deadline: Instant, report: &mut ReportTick) -> bool {
    let spent = Instant::now() >= deadline;
    if spent && !report.deferred {
        tracing::warn!("the report tick's budget is spent; what is left is done next tick");
        report.deferred = true;
    }
    spent
}

impl Tick for Reporter {
    async fn tick(&mut self) -> TickOutcome {
        self.tick_at(None).await;
        TickOutcome::Idle
    }
}

/// The report loop, recording each tick's reports in the metrics and the
/// status document.
pub(super) struct MeteredReporter {
    reporter: Reporter,
    metrics: Arc<KeeperMetrics>,
    status: Arc<KeeperStatus>,
}

impl MeteredReporter {
    /// `reporter`, recording into `metrics` and `status`.
    pub(super) fn new(
        reporter: Reporter,
        metrics: Arc<KeeperMetrics>,
        status: Arc<KeeperStatus>,
    ) -> Self {
        MeteredReporter {
            reporter,
            metrics,
            status,
        }
    }
}

impl Tick for MeteredReporter {
    async fn tick(&mut self) -> TickOutcome {
        let tick = self.reporter.tick_at(None).await;
        self.metrics.record_reports(&tick);
        let pending = Pending {
            backing_off: self.reporter.backoffs.len(),
            deaths: self.reporter.prepared.len(),
            lost: self.reporter.lost_details.len(),
        };
        self.status.record_reports(&tick, pending);
        TickOutcome::Idle
    }
}

/// The entries of a tick found by name: the view (sorted by name) by
/// binary search, then the few entries that vanished from it.
struct ByName<'a> {
    view: &'a [Arc<JobSummary>],
    vanished: &'a [Arc<JobSummary>],
}

impl<'a> ByName<'a> {
    fn get(&self, name: &str) -> Option<&'a JobSummary> {
        let view = self.view;
        view.binary_search_by(|j| j.name().cmp(name))
            .ok()
            .map(|i| &*view[i])
            .or_else(|| {
                self.vanished
                    .iter()
                    .find(|j| j.name() == name)
                    .map(|j| &**j)
            })
    }
}
