//! The token store: the per-job token of each claim the admitter made,
//! keyed by backend job id and claim tag, held in memory only. The admitter
//! hands tokens over through the vault's gRPC `Put` (see [`crate::grpc`]);
//! only this process reads them, to present on a death report. A restart
//! forgets every token, which leaves those jobs to lost-driver detection.

use crate::plan::tokens::{DropReason, TokenVerdict, judge_token};
pub use crate::plan::tokens::{HeldClaim, TokenKey};
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_shared::job_cache::{JobSummary, summaries};
use tcab_shared::{Lane, Secret};
use tokio::time::Instant;

/// The stored entry: the token and what pruning needs.
#[derive(Debug, Clone)]
struct Entry {
    token: Secret,
    lane: Lane,
    seq: u64,
    put_at: Instant,
    /// Whether the claim's Job has been seen in the cache.
    seen_job: bool,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<TokenKey, Entry>,
    next_seq: u64,
}

/// The in-memory token store; cheap to clone, shared by the gRPC service and
/// the tick loop.
#[derive(Debug, Clone, Default)]
pub struct TokenStore {
    inner: Arc<Mutex<Inner>>,
}

impl TokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores (or replaces) the token of one claim, put at `now`.
    pub fn put(&self, key: TokenKey, token: Secret, lane: Lane, now: Instant) {
        let mut inner = self.lock();
        inner.next_seq += 1;
        let seq = inner.next_seq;
        inner.entries.insert(
            key,
            Entry {
                token,
                lane,
                seq,
                put_at: now,
                seen_job: false,
            },
        );
    }

    /// The token of one claim, if held.
    pub fn get(&self, key: &TokenKey) -> Option<Secret> {
        self.lock().entries.get(key).map(|e| e.token.clone())
    }

    /// Drops the token of one claim; true when one was held.
    pub fn forget(&self, key: &TokenKey) -> bool {
        self.lock().entries.remove(key).is_some()
    }

    /// Every held claim, sorted by key (no tokens).
    pub fn held(&self) -> Vec<HeldClaim> {
        self.lock()
            .entries
            .iter()
            .map(|(key, e)| HeldClaim {
                key: key.clone(),
                lane: e.lane,
                seq: e.seq,
            })
            .collect()
    }

    /// How many tokens are held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies `judge_token` to every token against the cached Jobs and
    /// returns what was dropped, sorted by key. Call it only with a cache
    /// that has listed (an unlisted cache would look like "no Job").
    pub fn prune(
        &self,
        jobs: &[impl Borrow<JobSummary>],
        now: Instant,
        lease_length: Duration,
    ) -> Vec<(TokenKey, DropReason)> {
        // No token, nothing to judge: no index of the Jobs is built.
        if self.lock().entries.is_empty() {
            return Vec::new();
        }
        let by_claim: HashMap<(&str, &str), &JobSummary> = summaries(jobs)
            .filter_map(|j| Some(((j.job_id()?, j.claim()?), j)))
            .collect();
        let mut inner = self.lock();
        let mut dropped = Vec::new();
        inner.entries.retain(|key, entry| {
            let job = by_claim
                .get(&(key.job_id.as_str(), key.claim.as_str()))
                .copied();
            match judge_token(
                entry.lane,
                entry.seen_job,
                entry.put_at,
                job,
                now,
                lease_length,
            ) {
                TokenVerdict::Keep { seen_job } => {
                    entry.seen_job = seen_job;
                    true
                }
                TokenVerdict::Drop(reason) => {
                    dropped.push((key.clone(), reason));
                    false
                }
            }
        });
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::job_cache::JobPhase;

    fn summary(id: &str, claim: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(
                &tcab_shared::names::job_name(lane, id, claim),
                Some(id),
                Some(claim),
            ),
            lane,
            phase,
            ..JobSummary::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn put_get_forget_and_current_claim_order() {
        let store = TokenStore::new();
        let now = Instant::now();
        store.put(TokenKey::new("a", "c2"), "tok-2".into(), Lane::Run, now);
        store.put(TokenKey::new("a", "c1"), "tok-1".into(), Lane::Run, now);
        assert_eq!(
            store.get(&TokenKey::new("a", "c1")).unwrap().expose(),
            "tok-1"
        );
        let held = store.held();
        assert_eq!(held.len(), 2);
        assert_eq!(held[0].key.claim, "c1");
        assert!(
            held[0].seq > held[1].seq,
            "the later Put has the larger seq"
        );
        assert!(
            !format!("{:?}", store).contains("tok-1"),
            "Debug hides tokens"
        );
        assert!(store.forget(&TokenKey::new("a", "c1")));
        assert!(
            !store.forget(&TokenKey::new("a", "c1")),
            "forgetting twice is fine"
        );
        assert_eq!(store.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn prune_follows_the_jobs() {
        let lease = Duration::from_secs(120);
        let store = TokenStore::new();
        let t0 = Instant::now();
        for (id, lane) in [
            ("live", Lane::Run),
            ("done", Lane::Run),
            ("dead", Lane::Run),
            ("pubdead", Lane::Publish),
            ("vanish", Lane::Run),
            ("never", Lane::Run),
        ] {
            store.put(TokenKey::new(id, "c"), format!("t-{id}").into(), lane, t0);
        }
        let mut jobs = vec![
            summary("live", "c", Lane::Run, JobPhase::Live),
            summary("done", "c", Lane::Run, JobPhase::Succeeded),
            summary("dead", "c", Lane::Run, JobPhase::Failed),
            summary("pubdead", "c", Lane::Publish, JobPhase::Failed),
            summary("vanish", "c", Lane::Run, JobPhase::Live),
            // A Job of another claim of "never" does not count as its Job.
            summary("never", "other", Lane::Run, JobPhase::Live),
        ];
        let dropped = store.prune(&jobs, t0, lease);
        assert_eq!(
            dropped,
            vec![
                (TokenKey::new("done", "c"), DropReason::JobSucceeded),
                (TokenKey::new("pubdead", "c"), DropReason::PublisherFailed),
            ]
        );
        jobs.retain(|j| j.job_id() != Some("vanish"));
        let dropped = store.prune(&jobs, t0 + Duration::from_secs(119), lease);
        assert_eq!(
            dropped,
            vec![(TokenKey::new("vanish", "c"), DropReason::JobGone)]
        );
        let dropped = store.prune(&jobs, t0 + lease, lease);
        assert_eq!(
            dropped,
            vec![(TokenKey::new("never", "c"), DropReason::NoJobAppeared)]
        );
        let left: Vec<_> = store.held().into_iter().map(|h| h.key.job_id).collect();
        assert_eq!(
            left,
            ["dead", "live"],
            "a failed driver keeps its token for the death report"
        );
    }
}
