//! When a failing Job is judged dead without ever turning `Failed`.
//!
//! On Kubernetes 1.31+ a Job is `Failed` only once its pods have finished
//! terminating. A pod on a lost node never finishes (no kubelet is left to
//! stop it), so its Job keeps `FailureTarget` and a terminating pod until an
//! operator removes the node. Such a Job is judged dead once it has shown
//! failure for longer than its pods' termination grace plus a margin: the
//! lease-keeper then stops renewing its lease and reports it, and the reaper
//! deletes its sandboxes.
//!
//! Times are measured on this process's monotonic clock from the moment it
//! first saw the sign, never from the cluster's timestamps: a skewed cluster
//! clock changes no judgement, and after a restart the wait only starts over
//! (the safe direction).

use crate::job_cache::{JobSummary, summaries};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// The grace the API server gives a pod that sets none.
pub const DEFAULT_TERMINATION_GRACE: Duration = Duration::from_secs(30);

/// Remembers when each Job was first seen failing: a live one, or a Failed
/// one whose pods are still terminating.
#[derive(Debug, Clone, Default)]
pub struct FailingSince {
    /// [`JobSummary::key`] -> first seen failing.
    since: HashMap<String, Instant>,
}

impl FailingSince {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the Jobs that are failing and not settled now (keeping the
    /// earliest sighting) and forgets every other Job.
    pub fn observe(&mut self, jobs: &[impl Borrow<JobSummary>], now: Instant) {
        let mut kept = HashMap::with_capacity(self.since.len());
        for job in summaries(jobs).filter(|j| j.failing_unsettled()) {
            let at = self.since.get(job.key()).copied().unwrap_or(now);
            kept.insert(job.key().to_owned(), at);
        }
        self.since = kept;
    }

    /// When `job` was first seen failing, if it is failing.
    pub fn since(&self, job: &JobSummary) -> Option<Instant> {
        self.since.get(job.key()).copied()
    }

    /// Whether `job` has shown failure for longer than its termination grace
    /// plus `margin` without finishing: it cannot finish failing.
    pub fn is_stuck(&self, job: &JobSummary, now: Instant, margin: Duration) -> bool {
        job.failing_unsettled()
            && self
                .since(job)
                .is_some_and(|at| now.saturating_duration_since(at) > stuck_after(job, margin))
    }
}

/// How long a Job may show failure before it is judged unable to finish.
pub fn stuck_after(job: &JobSummary, margin: Duration) -> Duration {
    let grace = job
        .termination_grace_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_TERMINATION_GRACE, Duration::from_secs);
    grace + margin
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Lane;
    use crate::job_cache::{JobCondition, JobNames, JobPhase, Rare};

    fn job(name: &str, failing: bool, phase: JobPhase) -> JobSummary {
        JobSummary {
            names: JobNames::new(name, Some(name), Some("c")),
            uid: format!("uid-{name}").into(),
            lane: Lane::Run,
            phase,
            failed_pods: u16::from(failing),
            active_pods: 0,
            ready_pods: 0,
            terminating_pods: u16::from(failing),
            succeeded_pods: 0,
            rare: Rare {
                failure_target: failing.then(|| JobCondition {
                    reason: "BackoffLimitExceeded".into(),
                    message: String::new(),
                }),
                ..Rare::default()
            }
            .boxed(),
            termination_grace_seconds: Some(120),
            created_at: None,
            deleting: false,
            gone: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_failing_past_its_grace_and_margin_is_stuck() {
        let margin = Duration::from_secs(60);
        let mut memory = FailingSince::new();
        let t0 = Instant::now();
        let healthy = job("a", false, JobPhase::Live);
        let failing = job("b", true, JobPhase::Live);
        memory.observe(&[healthy.clone(), failing.clone()], t0);
        assert_eq!(memory.since(&healthy), None);
        assert_eq!(memory.since(&failing), Some(t0));

        // The first sighting is kept across observations.
        let t1 = t0 + Duration::from_secs(100);
        memory.observe(std::slice::from_ref(&failing), t1);
        assert_eq!(memory.since(&failing), Some(t0));
        assert!(!memory.is_stuck(&failing, t1, margin));
        assert!(!memory.is_stuck(&failing, t0 + Duration::from_secs(180), margin));
        assert!(memory.is_stuck(&failing, t0 + Duration::from_secs(181), margin));

        // A Job that finished (or vanished) is forgotten; failing again starts over.
        let mut done = job("b", true, JobPhase::Failed);
        done.terminating_pods = 0;
        memory.observe(std::slice::from_ref(&done), t1);
        assert_eq!(memory.since(&failing), None);
        assert!(!memory.is_stuck(&done, t1 + Duration::from_secs(999), margin));
        memory.observe(std::slice::from_ref(&failing), t1);
        assert_eq!(memory.since(&failing), Some(t1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_made_again_under_its_name_starts_its_wait_over() {
        let margin = Duration::from_secs(60);
        let mut memory = FailingSince::new();
        let t0 = Instant::now();
        let first = job("a", true, JobPhase::Live);
        memory.observe(std::slice::from_ref(&first), t0);
        let mut again = first.clone();
        again.uid = "uid-a-2".into();
        let t1 = t0 + Duration::from_secs(500);
        assert!(memory.is_stuck(&first, t1, margin));
        memory.observe(std::slice::from_ref(&again), t1);
        assert_eq!(memory.since(&again), Some(t1), "keyed by uid, not name");
        assert!(!memory.is_stuck(&again, t1 + Duration::from_secs(1), margin));
        // Without a uid the name is the key.
        let mut unnamed = first.clone();
        unnamed.uid = "".into();
        assert_eq!(unnamed.key(), "a");
        assert_eq!(again.key(), "uid-a-2");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_with_pods_still_terminating_is_not_settled() {
        // Before Kubernetes 1.31 a Job is Failed while its pods terminate.
        let mut memory = FailingSince::new();
        let t0 = Instant::now();
        let old = job("o", true, JobPhase::Failed);
        assert_eq!(old.terminating_pods, 1);
        memory.observe(std::slice::from_ref(&old), t0);
        assert_eq!(memory.since(&old), Some(t0));
        let later = t0 + Duration::from_secs(181);
        assert!(memory.is_stuck(&old, later, Duration::from_secs(60)));
    }

    #[test]
    fn the_grace_defaults_like_the_api_server() {
        let mut j = job("a", true, JobPhase::Live);
        j.termination_grace_seconds = None;
        assert_eq!(
            stuck_after(&j, Duration::from_secs(5)),
            Duration::from_secs(35)
        );
        j.termination_grace_seconds = Some(-3);
        assert_eq!(
            stuck_after(&j, Duration::from_secs(5)),
            Duration::from_secs(35)
        );
    }
}
