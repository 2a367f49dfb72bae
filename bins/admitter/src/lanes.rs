//! What the admitter remembers about each lane between ticks: consecutive
//! failures and the back-off they impose, the rest after an empty claim, the
//! Jobs it created that its cache has not shown yet (so the window between a
//! create and its watch event never lets a second admission through a full
//! lane), and the creations it could not settle yet.
//!
//! None of this is durable, and none of it needs to be: after a restart the
//! cache counts every Job on the cluster, back-offs start afresh, and a
//! claim whose Job was never created lapses and is requeued by the backend.

use crate::admit::Creation;
use crate::plan::HoldReason;
use std::collections::BTreeMap;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::job_cache::JobSummary;
use tcab_shared::retry::Backoff;
use tokio::time::Instant;

/// The claim tag at the end of a Job name (`<prefix><id>-<claim>`).
fn claim_of(name: &str) -> Option<String> {
    name.rsplit_once('-').map(|(_, claim)| claim.to_owned())
}

/// Longest back-off after consecutive Job creation failures.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The back-off after consecutive Job creation failures: one second,
/// doubled per further failure, at most [`MAX_BACKOFF`]. Not jittered: it is
/// one lane's own pause, with nobody beside it to come back in step with.
pub(crate) const CREATE_BACKOFF: Backoff = Backoff::doubling(Duration::from_secs(1), MAX_BACKOFF);

/// The memory of one lane.
#[derive(Debug, Clone, Default)]
pub struct LaneState {
    /// Consecutive Job creation failures.
    failures: u32,
    /// The lane holds until then.
    backoff_until: Option<Instant>,
    /// The last claim was empty: the lane rests until then.
    rest_until: Option<Instant>,
    /// Name of a Job known to exist -> since when and its backend job id,
    /// until the cache shows it.
    unseen: BTreeMap<String, (Instant, String)>,
    /// Name -> a creation whose Job may or may not exist.
    unsettled: BTreeMap<String, Creation>,
    /// The reason the lane was last held, for logging only changes at info.
    last_hold: Option<HoldReason>,
}

/// What [`LaneState::forget_seen`] learned from the cache and the clock.
#[derive(Debug, Default)]
pub struct Seen {
    /// Unsettled creations the cache now shows: their Jobs exist.
    pub settled_by_watch: Vec<Creation>,
    /// Unsettled creations held for a whole lease without an answer: their
    /// slots are freed (the claim has lapsed unless the Job exists, and then
    /// a current view counts it).
    pub expired: Vec<Creation>,
    /// Names known to exist that the cache did not show within a lease.
    pub unseen_expired: Vec<String>,
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

    /// Names of Jobs known to exist that the cache has not shown yet, sorted.
    pub fn created_unseen(&self) -> Vec<String> {
        self.unseen.keys().cloned().collect()
    }

    /// Names of Jobs whose creation is not settled yet, sorted.
    pub fn unsettled(&self) -> Vec<String> {
        self.unsettled.keys().cloned().collect()
    }

    /// Forgets what the cache now shows (`cached` tells by name) and what is
    /// older than `ttl` (the lease length): a Job known to exist since then,
    /// or a creation unsettled since its claim.
    ///
    /// A Job the watch has not shown within a lease was created and deleted
    /// while the watch was down, or its lease lapsed unrenewed (the
    /// lease-keeper renews only Jobs it sees) and the backend requeued the
    /// job: counting it longer would only hold a slot.
    pub fn forget_seen(
        &mut self,
        cached: impl Fn(&str) -> bool,
        now: Instant,
        ttl: Duration,
    ) -> Seen {
        let mut seen = Seen::default();
        if self.unseen.is_empty() && self.unsettled.is_empty() {
            return seen;
        }
        self.unseen.retain(|name, (since, _)| {
            if cached(name) {
                return false;
            }
            let keep = now.saturating_duration_since(*since) < ttl;
            if !keep {
                seen.unseen_expired.push(name.clone());
            }
            keep
        });
        let names: Vec<String> = self.unsettled.keys().cloned().collect();
        for name in names {
            let Some(creation) = self.unsettled.get(&name) else {
                continue;
            };
            if cached(&name) {
                if let Some(creation) = self.unsettled.remove(&name) {
                    seen.settled_by_watch.push(creation);
                }
            } else if now.saturating_duration_since(creation.claimed_at) >= ttl
                && let Some(creation) = self.unsettled.remove(&name)
            {
                seen.expired.push(creation);
            }
        }
        seen
    }

    /// Takes the unsettled creations out, to settle them again; those still
    /// unknown come back through [`LaneState::hold_unsettled`].
    pub fn take_unsettled(&mut self) -> Vec<Creation> {
        std::mem::take(&mut self.unsettled).into_values().collect()
    }

    /// The Jobs of backend job `job_id` this lane created that the cache
    /// has not shown yet, and its unsettled creations of that id, as view
    /// entries (live, labelled with the id and claim) for the stale check.
    pub fn pending_with_id(&self, lane: Lane, job_id: &str) -> Vec<JobSummary> {
        let unseen = self
            .unseen
            .iter()
            .filter(|(_, (_, id))| id == job_id)
            .map(|(name, _)| (name.clone(), claim_of(name)));
        let unsettled = self
            .unsettled
            .values()
            .filter(|c| c.job_id == job_id)
            .map(|c| (c.job_name.clone(), Some(c.claim.clone())));
        unseen
            .chain(unsettled)
            .map(|(name, claim)| JobSummary {
                lane,
                ..JobSummary::named(&name, Some(job_id), claim.as_deref())
            })
            .collect()
    }

    /// A stale Job named `name` was deleted (or found gone): it no longer
    /// counts. Returns its creation when it was unsettled, so its token can
    /// be forgotten (it will never be created).
    pub fn drop_stale(&mut self, name: &str) -> Option<Creation> {
        self.unseen.remove(name);
        self.unsettled.remove(name)
    }

    /// A Job of this lane exists (created, or found there) for backend job
    /// `job_id`: count it until the cache shows it, and end any back-off.
    pub fn record_created(&mut self, name: &str, job_id: &str, now: Instant) {
        self.unseen
            .insert(name.to_owned(), (now, job_id.to_owned()));
        self.failures = 0;
        self.backoff_until = None;
        self.rest_until = None;
    }

    /// A claim came back empty: nothing to admit until `until` (one poll
    /// interval on), so a wake-up meant for freed room does not make the
    /// lane claim an empty queue again. Ends a claim-failure wait.
    pub fn record_empty(&mut self, until: Instant) {
        self.backoff_until = None;
        self.rest_until = Some(until);
    }

    /// Holds a slot for a creation whose Job may exist, until a settle or
    /// the watch tells.
    pub fn hold_unsettled(&mut self, creation: Creation) {
        self.unsettled.insert(creation.job_name.clone(), creation);
    }

    /// A Job creation failed (or could not be settled): back off
    /// exponentially, up to `MAX_BACKOFF`. Returns the delay chosen.
    pub fn record_create_failure(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let delay = CREATE_BACKOFF.after(self.failures);
        self.backoff_until = Some(now + delay);
        delay
    }

    /// A claim failed (the backend erred or was unreachable): wait `delay`
    /// before the next claim of this lane. Creation failures are not reset.
    pub fn record_claim_failure(&mut self, now: Instant, delay: Duration) {
        self.backoff_until = Some(now + delay);
    }

    /// Remembers why the lane was held; returns whether that is a change
    /// (a different kind of reason, or a different gate reason: the gate's
    /// typed reason, not its words).
    pub fn note_hold(&mut self, reason: Option<&HoldReason>) -> bool {
        let same = match (&self.last_hold, reason) {
            (None, None) => true,
            (Some(HoldReason::GateClosed(x)), Some(HoldReason::GateClosed(y))) => {
                x.reason == y.reason
            }
            (Some(a), Some(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
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
    use k8s_openapi::api::batch::v1::Job;
    use tcab_proto::gate::{GateClosed, GateReason};

    const LEASE: Duration = Duration::from_secs(120);

    fn creation(name: &str, claimed_at: Instant) -> Creation {
        let mut job = Job::default();
        job.metadata.name = Some(name.to_owned());
        Creation::new(Lane::Run, name, "c1a1m000", job, claimed_at)
    }

    #[test]
    fn created_names_count_until_seen_or_a_lease_passed() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.record_created("a", "a", t0);
        lane.record_created("b", "b", t0 + Duration::from_secs(1));
        assert_eq!(lane.created_unseen(), ["a", "b"]);
        let seen = lane.forget_seen(|n| n == "a", t0 + Duration::from_secs(2), LEASE);
        assert_eq!(lane.created_unseen(), ["b"]);
        assert!(seen.unseen_expired.is_empty());
        lane.forget_seen(|_| false, t0 + LEASE, LEASE);
        assert_eq!(lane.created_unseen(), ["b"], "not a whole lease yet");
        let seen = lane.forget_seen(|_| false, t0 + LEASE + Duration::from_secs(1), LEASE);
        assert!(lane.created_unseen().is_empty());
        assert_eq!(seen.unseen_expired, ["b"]);
    }

    #[test]
    fn an_unsettled_creation_ends_when_the_watch_shows_it_or_after_a_lease() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.hold_unsettled(creation("x", t0));
        lane.hold_unsettled(creation("y", t0 + Duration::from_secs(10)));
        assert_eq!(lane.unsettled(), ["x", "y"]);
        let seen = lane.forget_seen(|n| n == "y", t0 + Duration::from_secs(11), LEASE);
        assert_eq!(seen.settled_by_watch.len(), 1);
        assert_eq!(seen.settled_by_watch[0].job_name, "y");
        assert_eq!(lane.unsettled(), ["x"]);
        let seen = lane.forget_seen(|_| false, t0 + LEASE, LEASE);
        assert_eq!(seen.expired.len(), 1, "a whole lease since its claim");
        assert!(lane.unsettled().is_empty());
    }

    #[test]
    fn unsettled_creations_are_taken_to_settle_and_held_again() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.hold_unsettled(creation("x", t0));
        let taken = lane.take_unsettled();
        assert_eq!(taken.len(), 1);
        assert!(lane.unsettled().is_empty());
        for c in taken {
            lane.hold_unsettled(c);
        }
        assert_eq!(lane.unsettled(), ["x"]);
        // Debug never prints the Job (it holds the per-job token).
        let shown = format!("{lane:?}");
        assert!(
            shown.contains("job_name: \"x\"") && !shown.contains("spec"),
            "{shown}"
        );
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
        lane.record_created("x", "x", t0);
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
        lane.record_created("x", "x", t0);
        assert_eq!(lane.rest_until(), None);
    }

    #[test]
    fn pending_jobs_of_an_id_are_offered_to_the_stale_check_and_dropped_once_deleted() {
        let t0 = Instant::now();
        let mut lane = LaneState::default();
        lane.record_created("tcab-driver-a-c1a1m001", "a", t0);
        lane.record_created("tcab-driver-b-c1a1m001", "b", t0);
        let mut job = Job::default();
        job.metadata.name = Some("tcab-driver-a-c1a1m000".into());
        lane.hold_unsettled(Creation::new(Lane::Run, "a", "c1a1m000", job, t0));
        let pending = lane.pending_with_id(Lane::Run, "a");
        let shown: Vec<(&str, Option<&str>)> =
            pending.iter().map(|j| (j.name(), j.claim())).collect();
        assert_eq!(
            shown,
            [
                ("tcab-driver-a-c1a1m001", Some("c1a1m001")),
                ("tcab-driver-a-c1a1m000", Some("c1a1m000"))
            ]
        );
        assert!(
            pending
                .iter()
                .all(|j| j.is_live() && j.job_id() == Some("a"))
        );
        assert!(lane.drop_stale("tcab-driver-a-c1a1m001").is_none());
        assert!(lane.drop_stale("tcab-driver-a-c1a1m000").is_some());
        assert!(lane.pending_with_id(Lane::Run, "a").is_empty());
        assert_eq!(lane.created_unseen(), ["tcab-driver-b-c1a1m001"]);
    }

    #[test]
    fn hold_changes_are_noticed_once() {
        let mut lane = LaneState::default();
        let closed = |reason, detail: &str| {
            HoldReason::GateClosed(GateClosed {
                reason,
                detail: detail.into(),
            })
        };
        assert!(lane.note_hold(Some(&closed(GateReason::RenewalStale, "61.0s ago"))));
        assert!(
            !lane.note_hold(Some(&closed(GateReason::RenewalStale, "62.0s ago"))),
            "new words for the same reason are no new hold"
        );
        assert!(lane.note_hold(Some(&closed(GateReason::KeeperUnreachable, "refused"))));
        let view = |why: &str| HoldReason::ViewNotCurrent { why: why.into() };
        assert!(lane.note_hold(Some(&view("500"))));
        assert!(
            !lane.note_hold(Some(&view("503"))),
            "a new watch error is no new hold"
        );
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
