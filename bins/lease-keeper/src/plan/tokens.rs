//! Which held tokens to keep, pure, from the cached Jobs; and what a token
//! is held under ([`TokenKey`], [`HeldClaim`]), so the plans that read the
//! vault's holdings need nothing of the store.

use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::job_cache::{JobPhase, JobSummary};
use tokio::time::Instant;

/// What a token is stored under: the backend job id and the claim tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenKey {
    /// The backend job id.
    pub job_id: String,
    /// The claim tag (a short hash of the token, also in the Job's name and labels).
    pub claim: String,
}

impl TokenKey {
    /// A key from its parts.
    pub fn new(job_id: impl Into<String>, claim: impl Into<String>) -> Self {
        Self {
            job_id: job_id.into(),
            claim: claim.into(),
        }
    }
}

/// What the vault knows about one held token, without the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldClaim {
    /// Its key.
    pub key: TokenKey,
    /// The lane of the claim.
    pub lane: Lane,
    /// Order of the Puts: a later Put of the same job id has a larger number,
    /// so the highest one is the job's current claim.
    pub seq: u64,
}

/// Why a token was dropped by [`TokenStore::prune`](crate::tokens::TokenStore::prune).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its Job completed: the driver or publisher reported for itself.
    JobSucceeded,
    /// Its publisher Job failed by itself: that takes the lost path, which
    /// needs no token (a publisher that never started or was judged dead
    /// is reported with its token while its Job is still live).
    PublisherFailed,
    /// Its Job was seen and is gone now.
    JobGone,
    /// No Job for it appeared within one lease length of the Put.
    NoJobAppeared,
}

impl DropReason {
    /// A short phrase for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::JobSucceeded => "its Job completed",
            DropReason::PublisherFailed => "its publisher Job failed (handled as lost)",
            DropReason::JobGone => "its Job no longer exists",
            DropReason::NoJobAppeared => "no Job appeared within one lease length",
        }
    }
}

/// What pruning decides for one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenVerdict {
    /// Keep it; `seen_job` is whether its Job has been seen so far.
    Keep { seen_job: bool },
    /// Drop it, for this reason.
    Drop(DropReason),
}

/// Pure: whether to keep a token, given its Job in the cache (if any).
/// A failed driver Job keeps its token: the death step needs it and forgets
/// it once the death is handled.
pub(crate) fn judge_token(
    lane: Lane,
    seen_job: bool,
    put_at: Instant,
    job: Option<&JobSummary>,
    now: Instant,
    lease_length: Duration,
) -> TokenVerdict {
    match job {
        Some(job) => match (job.phase, lane) {
            (JobPhase::Live, _) | (JobPhase::Failed, Lane::Run) => {
                TokenVerdict::Keep { seen_job: true }
            }
            (JobPhase::Succeeded, _) => TokenVerdict::Drop(DropReason::JobSucceeded),
            (JobPhase::Failed, Lane::Publish) => TokenVerdict::Drop(DropReason::PublisherFailed),
        },
        None if seen_job => TokenVerdict::Drop(DropReason::JobGone),
        None if now.saturating_duration_since(put_at) >= lease_length => {
            TokenVerdict::Drop(DropReason::NoJobAppeared)
        }
        None => TokenVerdict::Keep { seen_job: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_without_a_job_is_kept_within_the_lease() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(120);
        let verdict = judge_token(
            Lane::Run,
            false,
            t0,
            None,
            t0 + Duration::from_secs(60),
            lease,
        );
        assert_eq!(verdict, TokenVerdict::Keep { seen_job: false });
        let verdict = judge_token(Lane::Run, false, t0, None, t0 + lease, lease);
        assert_eq!(verdict, TokenVerdict::Drop(DropReason::NoJobAppeared));
    }
}
