//! Reading the admission gate: whether the lease-keeper's last renewal round
//! succeeded for a lane and is recent enough to claim behind it.
//!
//! A claim is what makes the backend requeue a lapsed dispatched job, so the
//! admitter claims only after leases of live Jobs were renewed; an
//! unreachable lease-keeper or failing renewals keep a lane's gate closed.

use crate::plan::GateState;
use std::time::Duration;
use tcab_proto::vault::RenewalStatus;

/// The gate's answer for both lanes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneGates {
    /// The run lane's gate.
    pub run: GateState,
    /// The publish lane's gate.
    pub publish: GateState,
}

impl LaneGates {
    /// Both lanes closed for the same reason.
    pub fn closed(why: impl Into<String>) -> Self {
        let why = why.into();
        LaneGates {
            run: GateState::Closed(why.clone()),
            publish: GateState::Closed(why),
        }
    }
}

/// Reads the lease-keeper's answer (or the error asking for it) into a gate
/// per lane. `max_age` is how old the last finished round may be.
pub fn lane_gates(answer: Result<&RenewalStatus, &str>, max_age: Duration) -> LaneGates {
    let status = match answer {
        Ok(status) => status,
        Err(error) => return LaneGates::closed(format!("lease-keeper unreachable: {error}")),
    };
    if !status.observed {
        return LaneGates::closed("no lease renewal round has finished yet");
    }
    let age = Duration::from_millis(status.age_ms);
    if age > max_age {
        return LaneGates::closed(format!(
            "last lease renewal round finished {:.1}s ago (max {:.1}s)",
            age.as_secs_f64(),
            max_age.as_secs_f64()
        ));
    }
    let lane = |renewed: bool, what: &str| {
        if renewed {
            GateState::Open
        } else if status.detail.is_empty() {
            GateState::Closed(format!("{what} lease renewal failed"))
        } else {
            GateState::Closed(format!("{what} lease renewal failed: {}", status.detail))
        }
    };
    LaneGates {
        run: lane(status.runs_renewed, "run"),
        publish: lane(status.publishes_renewed, "publish"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(observed: bool, age_ms: u64, runs: bool, publishes: bool) -> RenewalStatus {
        RenewalStatus {
            observed,
            age_ms,
            runs_renewed: runs,
            publishes_renewed: publishes,
            detail: String::new(),
        }
    }

    const MAX: Duration = Duration::from_secs(60);

    #[test]
    fn a_recent_successful_round_opens_both_lanes() {
        let gates = lane_gates(Ok(&status(true, 1_000, true, true)), MAX);
        assert_eq!(
            gates,
            LaneGates {
                run: GateState::Open,
                publish: GateState::Open
            }
        );
    }

    #[test]
    fn unreachable_unobserved_or_stale_closes_both() {
        let err = lane_gates(Err("connection refused"), MAX);
        assert_eq!(
            err,
            LaneGates::closed("lease-keeper unreachable: connection refused")
        );
        let fresh = lane_gates(Ok(&status(false, 0, true, true)), MAX);
        assert!(!fresh.run.is_open() && !fresh.publish.is_open());
        let stale = lane_gates(Ok(&status(true, 60_001, true, true)), MAX);
        assert!(!stale.run.is_open() && !stale.publish.is_open());
        let edge = lane_gates(Ok(&status(true, 60_000, true, true)), MAX);
        assert!(edge.run.is_open());
    }

    #[test]
    fn a_failed_lane_closes_only_itself_with_the_detail() {
        let mut s = status(true, 10, false, true);
        s.detail = "backend answered 503".into();
        let gates = lane_gates(Ok(&s), MAX);
        assert_eq!(
            gates.run,
            GateState::Closed("run lease renewal failed: backend answered 503".into())
        );
        assert!(gates.publish.is_open());
        let gates = lane_gates(Ok(&status(true, 10, true, false)), MAX);
        assert!(gates.run.is_open());
        assert_eq!(
            gates.publish,
            GateState::Closed("publish lease renewal failed".into())
        );
    }
}
