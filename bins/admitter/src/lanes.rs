//! What the admitter remembers about each lane between ticks: consecutive
//! failures and the back-off they impose, and the Jobs it created that its
//! cache has not shown yet (so the window between a create and its watch
//! event never lets a second admission through a full lane).
//!
//! None of this is durable, and none of it needs to be: after a restart the
//! cache counts every Job on the cluster, and back-offs start afresh.

use crate::plan::HoldReason;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tcab_shared::cluster::JobSummary;

/// How long a created Job is counted without the cache showing it. The watch
/// normally shows it within milliseconds; this only bounds the cost of a Job
/// created and deleted while the watch was down (it would otherwise hold a
/// slot forever). Counting it longer is the safe side: it can only hold an
/// admission, never exceed a cap.
pub const UNSEEN_TTL: Duration = Duration::from_secs(15 * 60);

/// Longest back-off after consecutive Job creation failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The memory of one lane.
#[derive(Debug, Clone, Default)]
pub struct LaneState {
    /// Consecutive Job creation failures.
    failures: u32,
    /// The lane holds until then.
    backoff_until: Option<Instant>,
    /// The last claim was empty: the lane rests until then.
    rest_until: Option<Instant>,
    /// Created Job name -> when it was created, until the cache shows it.
    unseen: BTreeMap<String, Instant>,
    /// The reason the lane was last held, for logging only changes at info.
    last_hold: Option<HoldReason>,
}

impl LaneState {
    /// Consecutive creation failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Until when the lane backs off, if it does.
    pub fn backoff_until(&self) -> Option<Instant> {
        self.backoff_until
    }

    /// Until when the lane rests after an empty claim, if it does.
    pub fn rest_until(&self) -> Option<Instant> {
        self.rest_until
    }

    /// Names created that the cache has not shown yet, sorted.
    pub fn created_unseen(&self) -> Vec<String> {
        self.unseen.keys().cloned().collect()
    }

    /// Forgets the created names the cache now shows, and those older than
    /// [`UNSEEN_TTL`].
    pub fn forget_seen(&mut self, cached: &[JobSummary], now: Instant) {
        if self.unseen.is_empty() {
            return;
        }
        for job in cached {
            self.unseen.remove(&job.name);
        }
        self.unseen
            .retain(|_, created| now.saturating_duration_since(*created) < UNSEEN_TTL);
    }

    /// A Job of this lane now exists (created, or found already there):
    /// count it until the cache shows it, and end any back-off.
    pub fn record_created(&mut self, name: &str, now: Instant) {
        self.unseen.insert(name.to_owned(), now);
        self.failures = 0;
        self.backoff_until = None;
        self.rest_until = None;
    }

    /// A claim came back empty: nothing to admit until `until` (one poll
    /// interval on), so a busy other lane does not make this one claim an
    /// empty queue on every tick. Ends a claim-failure wait.
    pub fn record_empty(&mut self, until: Instant) {
        self.backoff_until = None;
        self.rest_until = Some(until);
    }

    /// A creation failed in a way that may still have created the Job: count
    /// it as created-but-unseen, so the cap holds until the watch decides.
    pub fn record_maybe_created(&mut self, name: &str, now: Instant) {
        self.unseen.insert(name.to_owned(), now);
    }

    /// A Job creation failed: back off exponentially, up to [`MAX_BACKOFF`].
    /// Returns the delay chosen.
    pub fn record_create_failure(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let delay = crate::plan::backoff_delay(self.failures, MAX_BACKOFF);
        self.backoff_until = Some(now + delay);
        delay
    }

    /// A claim failed (the backend erred or was unreachable): wait `delay`
    /// before the next claim of this lane, so a busy other lane does not
    /// make this one hammer a failing backend. Creation failures are not reset.
    pub fn record_claim_failure(&mut self, now: Instant, delay: Duration) {
        self.backoff_until = Some(now + delay);
    }

    /// Remembers why the lane was held; returns whether that is a change
    /// (a different kind of reason, or a different gate reason).
    pub fn note_hold(&mut self, reason: Option<&HoldReason>) -> bool {
        let same = match (&self.last_hold, reason) {
            (None, None) => true,
            (Some(a), Some(b)) => match (a, b) {
                (HoldReason::GateClosed { why: x }, HoldReason::GateClosed { why: y }) => x == y,
                (HoldReason::LaneFull { .. }, HoldReason::LaneFull { .. }) => true,
                (HoldReason::BackingOff { .. }, HoldReason::BackingOff { .. }) => true,
                (HoldReason::Resting { .. }, HoldReason::Resting { .. }) => true,
                (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
            },
            _ => false,
        };
        self.last_hold = reason.cloned();
        !same
    }

    /// The reason the lane was last held, if it was.
    pub fn last_hold(&self) -> Option<&HoldReason> {
        self.last_hold.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::Lane;
    use tcab_shared::cluster::JobPhase;

    fn cached(name: &str) -> JobSummary {
        JobSummary {
            name: name.into(),
            lane: Lane::Run,
            job_id: None,
            claim: None,
            phase: JobPhase::Live,
            failed_pods: 0,
            created_at: None,
        }
    }

    #[test]
    fn created_names_count_until_seen_or_expired() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.record_created("a", t0);
        lane.record_created("b", t0 + Duration::from_secs(1));
        assert_eq!(lane.created_unseen(), ["a", "b"]);
        lane.forget_seen(&[cached("a")], t0 + Duration::from_secs(2));
        assert_eq!(lane.created_unseen(), ["b"]);
        lane.forget_seen(&[], t0 + UNSEEN_TTL);
        assert_eq!(lane.created_unseen(), ["b"], "not yet expired");
        lane.forget_seen(&[], t0 + UNSEEN_TTL + Duration::from_secs(1));
        assert!(lane.created_unseen().is_empty());
    }

    #[test]
    fn creation_failures_back_off_exponentially_and_success_resets() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        let delays: Vec<u64> = (0..8)
            .map(|_| lane.record_create_failure(t0).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(lane.backoff_until(), Some(t0 + MAX_BACKOFF));
        lane.record_created("x", t0);
        assert_eq!((lane.failures(), lane.backoff_until()), (0, None));
        assert_eq!(lane.record_create_failure(t0).as_secs(), 1);
    }

    #[test]
    fn a_claim_failure_waits_without_growing_the_creation_back_off() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.record_create_failure(t0);
        lane.record_claim_failure(t0, Duration::from_secs(5));
        assert_eq!(lane.backoff_until(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(lane.failures(), 1);
        lane.record_empty(t0 + Duration::from_secs(1));
        assert_eq!(lane.backoff_until(), None);
        assert_eq!(lane.rest_until(), Some(t0 + Duration::from_secs(1)));
        lane.record_created("x", t0);
        assert_eq!(lane.rest_until(), None);
    }

    #[test]
    fn hold_changes_are_noticed_once() {
        let mut lane = LaneState::default();
        let closed = |why: &str| HoldReason::GateClosed { why: why.into() };
        assert!(lane.note_hold(Some(&closed("stale"))));
        assert!(!lane.note_hold(Some(&closed("stale"))));
        assert!(lane.note_hold(Some(&closed("unreachable"))));
        let full = |n| HoldReason::LaneFull {
            in_flight: n,
            cap: 8,
        };
        assert!(lane.note_hold(Some(&full(8))));
        assert!(!lane.note_hold(Some(&full(9))));
        assert!(lane.note_hold(None));
        assert!(!lane.note_hold(None));
    }
}
