//! What the reaper remembers between ticks, and when a tick lists pods.
//!
//! A steady state makes no pod LIST at all: a tick lists the sandbox pods
//! only when a dead driver Job awaits its reap, or when the orphan sweep is
//! due on its own slower cadence. To know that a reap no longer awaits, the
//! reaper remembers, by Job uid, which dead driver Jobs were reaped
//! completely. The memory is in this process only: after a restart every
//! failed Job in the view awaits once more, so the first tick lists once and
//! finds what is left.
//!
//! It also keeps the times the judgement of a Job that cannot finish failing
//! needs ([`FailingSince`]: live and failing, or `Failed` with pods still
//! terminating on clusters before 1.31), on this process's monotonic clock.
//!
//! Everything here is pure: the caller passes `now` and the snapshot.

use crate::plan::{IdVerdict, SweepSettings};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::failing::FailingSince;
use tcab_shared::job_cache::{JobSummary, summaries};
use tcab_shared::retry::{Backoff, JITTER_PERCENT, KeyWait, PerKey};
use tokio::time::Instant;

/// The back-off of a job id whose reap keeps failing (a delete refused, a
/// confirming read failing): 5 s doubling to 5 minutes; the other ids of the
/// tick are not held by it. Jittered, so the ids of one failed LIST do not
/// all come due in the same tick again.
pub(crate) const REAP_BACKOFF: Backoff =
    Backoff::doubling(Duration::from_secs(5), Duration::from_secs(300)).with_jitter(JITTER_PERCENT);

/// What a tick has to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// Job ids with a dead driver Job whose sandboxes were not yet reaped
    /// completely.
    pub reap: BTreeSet<String>,
    /// The orphan sweep is due.
    pub sweep: bool,
}

impl Due {
    /// Whether the tick lists the sandbox pods.
    pub fn needs_list(&self) -> bool {
        self.sweep || !self.reap.is_empty()
    }
}

/// What [`ReapMemory::record`] made of a tick's attempts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Job ids whose reap completed just now.
    pub(crate) completed: BTreeSet<String>,
    /// Job ids whose reap failed, each with its back-off: not tried again
    /// before it ends.
    pub(crate) backed_off: BTreeMap<String, KeyWait>,
}

/// How one planned delete ended, as far as the memory cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Deleted, or already gone (404): that pod is reaped.
    Done,
    /// Skipped, or the pod changed: the reap of its id is not complete, and
    /// the next tick tries again.
    NotDone,
    /// A call for it failed: not complete, and its id waits out its own
    /// back-off before it is tried again.
    Failed,
}

/// The reaper's memory.
#[derive(Debug)]
pub(crate) struct ReapMemory {
    /// Keys of the dead driver Jobs whose sandboxes were all reaped.
    reaped: BTreeSet<String>,
    /// When each Job was first seen failing without settling (live and
    /// failing, or failed with pods still terminating).
    failing: FailingSince,
    /// When the last sweep listed the sandbox pods.
    last_sweep: Option<Instant>,
    /// Job ids whose sandboxes of another managed-by value were warned
    /// about (once per id, while an owned Job carries it).
    mismatch_warned: BTreeSet<String>,
    /// Job ids whose reap failed, each waiting out its own back-off.
    backoffs: PerKey<String>,
}

impl Default for ReapMemory {
    fn default() -> Self {
        ReapMemory {
            reaped: BTreeSet::new(),
            failing: FailingSince::default(),
            last_sweep: None,
            mismatch_warned: BTreeSet::new(),
            backoffs: PerKey::new(REAP_BACKOFF),
        }
    }
}

impl ReapMemory {
    /// An empty memory: every dead Job awaits its reap, the sweep is due.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Updates the memory from a current view of the owned Jobs at `now`
    /// and returns the keys of the driver Jobs judged dead because they
    /// cannot finish failing: live and failing, or failed with pods still
    /// terminating, for longer than their termination grace plus `margin`.
    /// Forgets completed reaps of Jobs no longer in the view.
    pub(crate) fn observe(
        &mut self,
        jobs: &[impl Borrow<JobSummary>],
        now: Instant,
        margin: Duration,
    ) -> BTreeSet<String> {
        self.failing.observe(jobs, now);
        let present: BTreeSet<&str> = summaries(jobs).map(JobSummary::key).collect();
        self.reaped.retain(|key| present.contains(key.as_str()));
        let ids: BTreeSet<&str> = summaries(jobs).filter_map(|j| j.job_id()).collect();
        self.backoffs.retain(|id| ids.contains(id.as_str()));

        summaries(jobs)
            .filter(|job| job.lane == Lane::Run && self.failing.is_stuck(job, now, margin))
            .map(|job| job.key().to_owned())
            .collect()
    }

    /// What a tick at `now` has to do, given the verdicts of a current view.
    pub(crate) fn due(
        &self,
        verdicts: &BTreeMap<String, IdVerdict>,
        now: Instant,
        settings: &SweepSettings,
    ) -> Due {
        let reap = verdicts
            .iter()
            .filter(|(_, verdict)| match verdict {
                IdVerdict::Reap { jobs, .. } => jobs.iter().any(|key| !self.reaped.contains(key)),
                IdVerdict::Hold(_) => false,
            })
            .filter(|(id, _)| self.backoffs.due(id, now))
            .map(|(id, _)| id.clone())
            .collect();
        let sweep = settings.orphan_sweep
            && self.last_sweep.is_none_or(|at| {
                now.saturating_duration_since(at) >= settings.orphan_sweep_interval
            });
        Due { reap, sweep }
    }

    /// Records a sweep round (whether its LIST or the backend call then
    /// failed): the next one is due an interval later.
    pub(crate) fn swept(&mut self, now: Instant) {
        self.last_sweep = Some(now);
    }

    /// Records the reaps a tick with a successful LIST completed: an id is
    /// complete when every planned delete of it is [`Attempt::Done`] (or it
    /// had none: the LIST showed no sandbox of it left). Returns the job ids
    /// whose reap completed just now, and those that back off.
    ///
    /// An id with an attempt that failed waits out its own back-off before
    /// it is due again (`now` starts it; [`REAP_BACKOFF`]), whatever the
    /// poll interval; one that completed forgets it.
    pub(crate) fn record(
        &mut self,
        verdicts: &BTreeMap<String, IdVerdict>,
        attempts: &[(String, Attempt)],
        now: Instant,
    ) -> Recorded {
        let mut recorded = Recorded::default();
        for (id, verdict) in verdicts {
            let IdVerdict::Reap { jobs, .. } = verdict else {
                continue;
            };
            let all_done = attempts
                .iter()
                .filter(|(attempt_id, _)| attempt_id == id)
                .all(|(_, attempt)| *attempt == Attempt::Done);
            let failed = attempts
                .iter()
                .any(|(attempt_id, attempt)| attempt_id == id && *attempt == Attempt::Failed);
            if all_done {
                self.backoffs.forget(id);
            } else if failed {
                let wait = self.backoffs.failed(id, now);
                recorded.backed_off.insert(id.clone(), wait);
            }
            if all_done && jobs.iter().any(|key| !self.reaped.contains(key)) {
                self.reaped.extend(jobs.iter().cloned());
                recorded.completed.insert(id.clone());
            }
        }
        recorded
    }

    /// Of the job ids with sandboxes of another managed-by value, those not
    /// warned about yet; they are remembered as warned. Ids no owned Job
    /// carries any more (not in `verdicts`) are forgotten.
    pub(crate) fn new_mismatches<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a String>,
        verdicts: &BTreeMap<String, IdVerdict>,
    ) -> Vec<String> {
        self.mismatch_warned.retain(|id| verdicts.contains_key(id));
        ids.into_iter()
            .filter(|id| self.mismatch_warned.insert((*id).clone()))
            .cloned()
            .collect()
    }

    /// The job ids warned about for sandboxes of another managed-by value.
    pub(crate) fn warned_mismatches(&self) -> impl Iterator<Item = &str> {
        self.mismatch_warned.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DeleteReason, KeepReason, judge_ids};
    use tcab_shared::job_cache::{JobCondition, JobPhase, Rare};

    fn settings() -> SweepSettings {
        SweepSettings {
            driver_managed_by: "tcab-driver".into(),
            dispatcher_managed_by: "tcab-dispatcher".into(),
            orphan_sweep: true,
            orphan_grace: Duration::from_secs(600),
            orphan_sweep_interval: Duration::from_secs(300),
            terminating_margin: Duration::from_secs(60),
        }
    }

    fn condition() -> Option<JobCondition> {
        Some(JobCondition {
            reason: "PodFailurePolicy".into(),
            message: String::new(),
        })
    }

    fn job(name: &str, id: &str, phase: JobPhase, terminating: u16) -> JobSummary {
        let failed = phase == JobPhase::Failed;
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(name, Some(id), Some("c")),
            uid: format!("uid-{name}").into(),
            lane: Lane::Run,
            phase,
            failed_pods: u16::from(failed),
            active_pods: 0,
            ready_pods: 0,
            terminating_pods: terminating,
            succeeded_pods: 0,
            rare: Rare {
                failure_target: if failed || terminating > 0 {
                    condition()
                } else {
                    None
                },
                failed: if failed { condition() } else { None },
                orphan_pod: None,
            }
            .boxed(),
            termination_grace_seconds: Some(120),
            created_at: None,
            deleting: false,
            gone: false,
        }
    }

    const MARGIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_mismatch_is_new_once_per_job_id_while_a_job_carries_it() {
        let mut memory = ReapMemory::new();
        let failed = job("tcab-driver-a-1", "a", JobPhase::Failed, 0);
        let verdicts = judge_ids(&[failed], &BTreeSet::new());
        let a = "a".to_owned();
        assert_eq!(memory.new_mismatches([&a], &verdicts), ["a"]);
        assert!(
            memory.new_mismatches([&a], &verdicts).is_empty(),
            "warned once"
        );
        // The Job is gone: the id is forgotten.
        assert!(memory.new_mismatches([], &BTreeMap::new()).is_empty());
        assert_eq!(memory.new_mismatches([&a], &verdicts), ["a"]);
    }

    #[test]
    fn a_steady_state_needs_no_list_once_the_sweep_ran() {
        let t0 = Instant::now();
        let mut memory = ReapMemory::new();
        let jobs = [
            job("tcab-driver-a-1", "a", JobPhase::Live, 0),
            job("tcab-driver-b-1", "b", JobPhase::Succeeded, 0),
        ];
        let dead = memory.observe(&jobs, t0, MARGIN);
        assert!(dead.is_empty());
        let verdicts = judge_ids(&jobs, &dead);
        let first = memory.due(&verdicts, t0, &settings());
        assert_eq!(
            first,
            Due {
                reap: BTreeSet::new(),
                sweep: true
            },
            "the first tick sweeps"
        );
        memory.swept(t0);
        for secs in [1, 60, 299] {
            let at = t0 + Duration::from_secs(secs);
            memory.observe(&jobs, at, MARGIN);
            assert!(
                !memory.due(&verdicts, at, &settings()).needs_list(),
                "{secs}"
            );
        }
        let at = t0 + Duration::from_secs(300);
        assert!(memory.due(&verdicts, at, &settings()).sweep);

        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        assert!(!ReapMemory::new().due(&verdicts, t0, &off).needs_list());
    }

    #[test]
    fn a_failed_driver_awaits_until_a_complete_reap_then_never_again() {
        let t0 = Instant::now();
        let mut memory = ReapMemory::new();
        memory.swept(t0);
        let jobs = [
            job("tcab-driver-a-1", "a", JobPhase::Failed, 0),
            job("tcab-driver-a-2", "a", JobPhase::Failed, 0),
        ];
        let dead = memory.observe(&jobs, t0, MARGIN);
        let verdicts = judge_ids(&jobs, &dead);
        let due = memory.due(&verdicts, t0, &settings());
        assert_eq!(due.reap, BTreeSet::from(["a".to_owned()]));
        assert!(due.needs_list() && !due.sweep);

        // One delete failed: not complete, still awaiting, after its own
        // back-off (5 s, jittered down to at least 4 s), not at once.
        let partial = [
            ("a".to_owned(), Attempt::Done),
            ("a".to_owned(), Attempt::Failed),
        ];
        let recorded = memory.record(&verdicts, &partial, t0);
        assert!(recorded.completed.is_empty());
        let wait: Vec<(&String, &KeyWait)> = recorded.backed_off.iter().collect();
        assert_eq!(wait.len(), 1);
        assert_eq!((wait[0].0.as_str(), wait[0].1.failures), ("a", 1));
        let until = wait[0].1.until - t0;
        assert!(
            (Duration::from_secs(4)..=Duration::from_secs(5)).contains(&until),
            "{until:?}"
        );
        assert!(
            !memory
                .due(&verdicts, t0 + Duration::from_secs(3), &settings())
                .needs_list()
        );
        assert!(
            memory
                .due(&verdicts, t0 + Duration::from_secs(5), &settings())
                .needs_list()
        );

        // Every delete went through: both claims of the id are reaped.
        let done = [("a".to_owned(), Attempt::Done)];
        assert_eq!(
            memory.record(&verdicts, &done, Instant::now()),
            Recorded {
                completed: BTreeSet::from(["a".to_owned()]),
                backed_off: BTreeMap::new()
            }
        );
        assert!(
            memory.reaped.contains("uid-tcab-driver-a-1")
                && memory.reaped.contains("uid-tcab-driver-a-2")
        );
        assert!(!memory.due(&verdicts, t0, &settings()).needs_list());
        assert!(
            memory
                .record(&verdicts, &done, Instant::now())
                .completed
                .is_empty(),
            "recorded once"
        );

        // A newer claim fails: a new uid awaits, though the id was reaped before.
        let mut more = jobs.to_vec();
        more.push(job("tcab-driver-a-3", "a", JobPhase::Failed, 0));
        let dead = memory.observe(&more, t0, MARGIN);
        let verdicts = judge_ids(&more, &dead);
        assert!(memory.due(&verdicts, t0, &settings()).reap.contains("a"));
        // A LIST that shows none of its sandboxes left completes it.
        assert_eq!(
            memory
                .record(&verdicts, &[], Instant::now())
                .completed
                .len(),
            1
        );

        // Jobs that left the view are forgotten; a restart starts empty.
        memory.observe(&[] as &[JobSummary], t0, MARGIN);
        assert!(!memory.reaped.contains("uid-tcab-driver-a-1"));
    }

    #[test]
    fn held_ids_do_not_await_and_do_not_complete() {
        let t0 = Instant::now();
        let mut memory = ReapMemory::new();
        memory.swept(t0);
        let jobs = [
            job("tcab-driver-a-1", "a", JobPhase::Failed, 0),
            job("tcab-driver-a-2", "a", JobPhase::Live, 0),
            job("tcab-driver-b-1", "b", JobPhase::Failed, 1),
        ];
        let dead = memory.observe(&jobs, t0, MARGIN);
        let verdicts = judge_ids(&jobs, &dead);
        assert!(matches!(
            verdicts["b"],
            IdVerdict::Hold(KeepReason::PodsTerminating { .. })
        ));
        assert!(!memory.due(&verdicts, t0, &settings()).needs_list());
        assert_eq!(
            memory.record(&verdicts, &[], Instant::now()),
            Recorded::default()
        );
    }

    #[test]
    fn a_live_job_failing_past_its_grace_and_margin_is_judged_dead() {
        let t0 = Instant::now();
        let mut memory = ReapMemory::new();
        let stuck = job("tcab-driver-a-1", "a", JobPhase::Live, 1);
        assert!(stuck.is_live() && stuck.shows_failure());
        assert!(
            memory
                .observe(std::slice::from_ref(&stuck), t0, MARGIN)
                .is_empty()
        );
        // grace 120 s + margin 60 s: not yet at 180 s, dead after.
        let at = t0 + Duration::from_secs(180);
        assert!(
            memory
                .observe(std::slice::from_ref(&stuck), at, MARGIN)
                .is_empty()
        );
        let at = t0 + Duration::from_secs(181);
        let dead = memory.observe(std::slice::from_ref(&stuck), at, MARGIN);
        assert_eq!(dead, BTreeSet::from(["uid-tcab-driver-a-1".to_owned()]));
        let verdicts = judge_ids(std::slice::from_ref(&stuck), &dead);
        assert!(matches!(
            verdicts["a"],
            IdVerdict::Reap {
                reason: DeleteReason::DriverJobStuck { .. },
                ..
            }
        ));
        assert!(memory.due(&verdicts, at, &settings()).reap.contains("a"));
    }

    #[test]
    fn a_failed_job_whose_pods_never_finish_terminating_is_judged_dead_from_its_first_sign() {
        let t0 = Instant::now();
        let mut memory = ReapMemory::new();
        // Seen failing while live first, then Failed with the pod still terminating.
        let live = job("tcab-driver-a-1", "a", JobPhase::Live, 1);
        memory.observe(std::slice::from_ref(&live), t0, MARGIN);
        let failed = job("tcab-driver-a-1", "a", JobPhase::Failed, 1);
        let at = t0 + Duration::from_secs(100);
        assert!(
            memory
                .observe(std::slice::from_ref(&failed), at, MARGIN)
                .is_empty()
        );
        let at = t0 + Duration::from_secs(181);
        assert_eq!(
            memory
                .observe(std::slice::from_ref(&failed), at, MARGIN)
                .len(),
            1
        );

        // First seen already Failed: the wait starts then.
        let mut fresh = ReapMemory::new();
        fresh.observe(std::slice::from_ref(&failed), at, MARGIN);
        assert!(
            fresh
                .observe(
                    std::slice::from_ref(&failed),
                    at + Duration::from_secs(180),
                    MARGIN
                )
                .is_empty()
        );
        assert_eq!(
            fresh
                .observe(
                    std::slice::from_ref(&failed),
                    at + Duration::from_secs(181),
                    MARGIN
                )
                .len(),
            1
        );
        // Its pods finished: forgotten (it is an ordinary failed Job now).
        let finished = job("tcab-driver-a-1", "a", JobPhase::Failed, 0);
        assert!(
            fresh
                .observe(
                    std::slice::from_ref(&finished),
                    at + Duration::from_secs(999),
                    MARGIN
                )
                .is_empty()
        );
    }
}
