//! What one lane's tick came to: the result the metrics count, and the
//! tick's report.

use crate::admit::{ClaimTimes, LaneOutcome, StaleDeletion};
use crate::plan::{Decision, HoldReason};
use tcab_proto::gate::GateVerdict;
use tcab_shared::Lane;
use tcab_shared::tick::TickOutcome;
use tokio::time::Instant;

/// What one lane's tick came to, in the words the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdmissionResult {
    /// A Job exists for a fresh claim (created, or found created).
    Created,
    /// The backend had nothing claimable.
    EmptyQueue,
    /// The admission gate was closed.
    GateClosed,
    /// The lane was at its cap.
    LaneFull,
    /// The admitter's Job view was not current.
    ViewNotCurrent,
    /// The lane was backing off after failures.
    BackingOff,
    /// The lane rested after an empty claim.
    Resting,
    /// The lane is not configured.
    Disabled,
    /// The lane's cap is 0: paused by its operator.
    Paused,
    /// The claim failed, or the Job was not created, or its create could not
    /// be settled.
    Error,
}

impl AdmissionResult {
    /// Every result, in a stable order.
    pub const ALL: [AdmissionResult; 10] = [
        AdmissionResult::Created,
        AdmissionResult::EmptyQueue,
        AdmissionResult::GateClosed,
        AdmissionResult::LaneFull,
        AdmissionResult::ViewNotCurrent,
        AdmissionResult::BackingOff,
        AdmissionResult::Resting,
        AdmissionResult::Disabled,
        AdmissionResult::Paused,
        AdmissionResult::Error,
    ];

    /// A label value for metrics (`created`, `empty_queue`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionResult::Created => "created",
            AdmissionResult::EmptyQueue => "empty_queue",
            AdmissionResult::GateClosed => "gate_closed",
            AdmissionResult::LaneFull => "lane_full",
            AdmissionResult::ViewNotCurrent => "view_not_current",
            AdmissionResult::BackingOff => "backing_off",
            AdmissionResult::Resting => "resting",
            AdmissionResult::Disabled => "disabled",
            AdmissionResult::Paused => "paused",
            AdmissionResult::Error => "error",
        }
    }
}

/// What one tick of a lane decided and did.
#[derive(Debug)]
pub struct LaneReport {
    /// The lane.
    pub lane: Lane,
    /// The decision.
    pub decision: Decision,
    /// The admission, when the lane admitted.
    pub outcome: Option<LaneOutcome>,
    /// What settling the creations left unsettled by earlier ticks came to
    /// (admitted, given up, or still unsettled).
    pub resettled: Vec<LaneOutcome>,
    /// The lane's non-terminal Jobs as the tick counted them before it
    /// admitted (live cached, created but unseen, unsettled).
    pub in_flight: u32,
    /// Stale Jobs of the claimed job id deleted (or not) before its Job.
    pub stale: Vec<StaleDeletion>,
    /// The lane's cap.
    pub cap: u32,
    /// Whether the Job view was current when the tick counted (otherwise
    /// `in_flight` is the count of a view it could not trust).
    pub view_current: bool,
    /// The times the claim's answer gave, when the tick claimed a job.
    pub claimed: Option<ClaimTimes>,
    /// For each claim whose Job became known to exist this tick (a fresh
    /// one, or an earlier one settled now): from sending the claim to then.
    pub claim_to_job: Vec<std::time::Duration>,
    /// The lane's gate as the tick read it (every tick of an enabled lane
    /// reads it, whatever else holds the lane); `None` for a lane that is
    /// off.
    pub gate: Option<GateVerdict>,
    /// Until when the lane backs off after failures, as the tick found it.
    pub backoff_until: Option<Instant>,
}

impl LaneReport {
    /// The tick's result for the admissions metric.
    pub fn result(&self) -> AdmissionResult {
        match (&self.outcome, &self.decision) {
            (Some(outcome), _) if outcome.created().is_some() => AdmissionResult::Created,
            (Some(LaneOutcome::Empty), _) => AdmissionResult::EmptyQueue,
            (Some(_), _) => AdmissionResult::Error,
            (None, Decision::Hold(reason)) => match reason {
                HoldReason::Disabled => AdmissionResult::Disabled,
                HoldReason::Paused => AdmissionResult::Paused,
                HoldReason::ViewNotCurrent { .. } => AdmissionResult::ViewNotCurrent,
                HoldReason::BackingOff { .. } => AdmissionResult::BackingOff,
                HoldReason::Resting { .. } => AdmissionResult::Resting,
                HoldReason::LaneFull { .. } => AdmissionResult::LaneFull,
                HoldReason::GateClosed(_) => AdmissionResult::GateClosed,
            },
            // A decision to admit always carries an outcome.
            (None, Decision::Admit { .. }) => AdmissionResult::Error,
        }
    }

    /// Busy (loop straight back) when a Job was created for a fresh claim.
    pub fn tick_outcome(&self) -> TickOutcome {
        if self.result() == AdmissionResult::Created {
            TickOutcome::Busy
        } else {
            TickOutcome::Idle
        }
    }
}
