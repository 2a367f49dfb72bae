//! What one admission came to: the lane's outcome, the creation left
//! unsettled, the stale Jobs deleted, the claim's times.

use super::Creation;
use crate::job_builder;
use crate::plan::StaleJob;
use crate::settle::Confirmation;
use std::time::Duration;
use tcab_shared::backend::BackendError;
use tcab_shared::metrics::labels::{ErrorReason, PoisonResult};

/// Why a claim cannot become a Job for a reason of its own (the `reason`
/// label of `poisoned_claims_total`, declared with the other label values).
pub use tcab_shared::metrics::labels::PoisonReason;

/// What became of reporting a poisoned claim failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoisonReport {
    /// The backend took the failed report (or result).
    Reported,
    /// The report failed (after the client's bounded 429/503 retry); it is
    /// not tried again: the claim lapses and the backend requeues the job.
    Failed(String),
    /// The answer carried no usable id and token: nothing to report with.
    Impossible {
        /// The answer's keys and value types, for the log.
        shape: String,
    },
}

impl PoisonReport {
    /// The `result` label value: `ok`, `failed`, `none`.
    pub fn result(&self) -> PoisonResult {
        match self {
            PoisonReport::Reported => PoisonResult::Ok,
            PoisonReport::Failed(_) => PoisonResult::Failed,
            PoisonReport::Impossible { .. } => PoisonResult::None,
        }
    }

    /// The `result` label value, as text.
    pub fn as_str(&self) -> &'static str {
        self.result().as_str()
    }
}

/// A stale Job of a fresh claim's job id, and what its delete came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleDeletion {
    /// The backend job id.
    pub job_id: String,
    /// The stale Job.
    pub stale: StaleJob,
    /// `Ok` when deleted or already gone; the error otherwise.
    pub result: Result<(), String>,
}

/// What one admission (or a later settle of one) came to.
#[derive(Debug)]
pub enum LaneOutcome {
    /// A job was claimed and its Job exists.
    Admitted {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// How an unclear create was settled, when its first answer did not tell.
        settled: Option<Settled>,
    },
    /// The first create was answered 409: the Job already existed (a lost
    /// race, a success).
    AlreadyExists {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
    },
    /// The backend had nothing claimable in this lane (204).
    Empty,
    /// The claim failed; nothing was claimed.
    ClaimFailed(BackendError),
    /// A job was claimed and no Job exists for it, nor will: its token was
    /// forgotten and the claim lapses (the backend requeues the job).
    CreateFailed {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// Why.
        reason: CreateFailure,
    },
    /// A claim that cannot become a Job for a reason of its own (see the
    /// module doc): reported failed once when it could be, never created.
    Poisoned {
        /// The backend job id, when the answer carried a valid one.
        job_id: Option<String>,
        /// The name its Job has (or would have had), when the answer
        /// carried a usable id and token.
        job_name: Option<String>,
        /// Why.
        reason: PoisonReason,
        /// The words, as reported (never a token or a value of the answer).
        detail: String,
        /// What the report came to.
        report: PoisonReport,
    },
    /// A job was claimed and whether its Job exists is unknown (the create
    /// and the reads got no answer that tells): the lane holds a slot for it
    /// and settles it again on its next ticks.
    Unsettled {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// The last error.
        error: String,
    },
}

impl LaneOutcome {
    /// The Job's name, when a Job now exists for the claim.
    pub fn created(&self) -> Option<&str> {
        match self {
            LaneOutcome::Admitted { job_name, .. }
            | LaneOutcome::AlreadyExists { job_name, .. } => Some(job_name),
            _ => None,
        }
    }
}

/// How a create whose answer did not tell was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The first answer that did not tell (e.g. a 500, a timeout).
    pub after: String,
    /// What showed the Job exists.
    pub by: Confirmation,
    /// Calls the settle made (creates and reads).
    pub calls: u32,
}

/// Why no Job exists for a claim.
#[derive(Debug, thiserror::Error)]
pub enum CreateFailure {
    /// The builder refused (publish claimed without a publisher image).
    #[error(transparent)]
    Build(#[from] job_builder::JobBuildError),
    /// The API server refused the create for good.
    #[error("API answered {code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The Status reason (`Forbidden`, `Invalid`, ...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// The claim grew older than half the lease before its Job was known to
    /// exist, and a read shows none: its lease may have lapsed, so it is not
    /// created any more.
    #[error(
        "the claim is {:.1}s old, past half the lease, and no Job exists: not creating it any more",
        .age.as_secs_f64()
    )]
    Lapsed {
        /// The claim's age.
        age: Duration,
    },
    /// Every create allowed got an answer that did not tell, and the last
    /// read shows no Job.
    #[error(
        "{calls} create and read calls did not create the Job (first: {first}); a read shows none"
    )]
    GaveUp {
        /// Calls made.
        calls: u32,
        /// The first unclear answer.
        first: String,
        /// Why it did not tell.
        first_reason: ErrorReason,
    },
}

/// An admission's outcome, the creation left unsettled, if it was, and the
/// stale Jobs deleted before it.
#[derive(Debug)]
pub(crate) struct Admission {
    /// What happened.
    pub outcome: LaneOutcome,
    /// The creation whose Job may exist, for the lane to hold and settle again.
    pub unsettled: Option<Creation>,
    /// Stale Jobs of the claimed job id, and what their deletes came to.
    pub stale: Vec<StaleDeletion>,
    /// When the claimed job was enqueued and its lease runs out, when a job
    /// was claimed (for the queue-wait metric).
    pub claimed: Option<ClaimTimes>,
    /// From sending the claim to its Job known to exist, when it is known now.
    pub created_after: Option<Duration>,
}

impl From<LaneOutcome> for Admission {
    fn from(outcome: LaneOutcome) -> Self {
        Admission {
            outcome,
            unsettled: None,
            stale: vec![],
            claimed: None,
            created_after: None,
        }
    }
}

/// A claim's times on the backend's clock, as its answer gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTimes {
    /// When the job entered the queue, when the answer said so.
    pub enqueued_at: Option<jiff::Timestamp>,
    /// When the claim's lease runs out (the claim's time plus the lease).
    pub lease_expires_at: jiff::Timestamp,
}
