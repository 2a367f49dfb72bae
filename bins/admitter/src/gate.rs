//! Reading the admission gate: whether the lease-keeper keeps a lane's
//! leases renewed right now, so the lane may claim behind it.
//!
//! A claim is what makes the backend requeue a lapsed dispatched job, so a
//! lane claims only while (all of):
//! - the lease-keeper answers;
//! - its Job view is current (else new Jobs would go unrenewed);
//! - it renews that lane at all, and a renewal call of the lane succeeded;
//! - the lane's latest renewal call did not fail (the gate closes at the
//!   first failed call, not at the end of a round);
//! - the last successful renewal is at most `max_age` old.
//!
//! The admitter asks before every claim and never reuses an answer: a reused
//! open answer could let a claim through after the first failed renewal.

use crate::plan::GateState;
use std::time::Duration;
use tcab_proto::vault::{LaneRenewal, RenewalStatus};
use tcab_shared::Lane;

/// Reads the lease-keeper's answer (or the error asking for it) into the
/// gate of `lane`. `max_age` is how old the lane's last successful renewal
/// may be.
pub fn lane_gate(answer: Result<&RenewalStatus, &str>, lane: Lane, max_age: Duration) -> GateState {
    let status = match answer {
        Ok(status) => status,
        Err(error) => return GateState::Closed(format!("lease-keeper unreachable: {error}")),
    };
    if !status.view_current {
        return GateState::Closed(if status.view_detail.is_empty() {
            "the lease-keeper's Job view is not current".to_owned()
        } else {
            format!(
                "the lease-keeper's Job view is not current: {}",
                status.view_detail
            )
        });
    }
    let renewal: Option<&LaneRenewal> = match lane {
        Lane::Run => status.runs.as_ref(),
        Lane::Publish => status.publishes.as_ref(),
    };
    let Some(renewal) = renewal else {
        return GateState::Closed(format!(
            "the lease-keeper said nothing about {lane} renewals"
        ));
    };
    if !renewal.enabled {
        return GateState::Closed(with_detail(
            format!("the lease-keeper does not renew {lane} leases"),
            &renewal.detail,
        ));
    }
    if renewal.failing {
        return GateState::Closed(with_detail(
            format!("the latest {lane} lease renewal failed"),
            &renewal.detail,
        ));
    }
    if !renewal.renewed {
        return GateState::Closed(format!("no {lane} lease renewal has succeeded yet"));
    }
    let age = Duration::from_millis(renewal.age_ms);
    if age > max_age {
        return GateState::Closed(format!(
            "the last successful {lane} lease renewal was {:.1}s ago (max {:.1}s)",
            age.as_secs_f64(),
            max_age.as_secs_f64()
        ));
    }
    GateState::Open
}

fn with_detail(what: String, detail: &str) -> String {
    if detail.is_empty() {
        what
    } else {
        format!("{what}: {detail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(age_ms: u64) -> LaneRenewal {
        LaneRenewal {
            enabled: true,
            renewed: true,
            age_ms,
            failing: false,
            detail: String::new(),
        }
    }

    fn status(runs: LaneRenewal, publishes: LaneRenewal) -> RenewalStatus {
        RenewalStatus {
            runs: Some(runs),
            publishes: Some(publishes),
            view_current: true,
            view_detail: String::new(),
        }
    }

    const MAX: Duration = Duration::from_secs(60);

    fn gate(s: &RenewalStatus, lane: Lane) -> GateState {
        lane_gate(Ok(s), lane, MAX)
    }

    fn closed_with(state: GateState, part: &str) {
        match state {
            GateState::Closed(why) => assert!(why.contains(part), "{why:?} lacks {part:?}"),
            GateState::Open => panic!("expected closed ({part})"),
        }
    }

    #[test]
    fn recent_successful_renewals_open_each_lane() {
        let s = status(healthy(1_000), healthy(60_000));
        assert_eq!(gate(&s, Lane::Run), GateState::Open);
        assert_eq!(gate(&s, Lane::Publish), GateState::Open, "the edge is open");
    }

    #[test]
    fn unreachable_or_a_view_not_current_closes_both_lanes() {
        for lane in Lane::ALL {
            closed_with(
                lane_gate(Err("connection refused"), lane, MAX),
                "lease-keeper unreachable: connection refused",
            );
            let mut s = status(healthy(5), healthy(5));
            s.view_current = false;
            s.view_detail = "the lease-keeper's Job watch failed: 500".into();
            closed_with(gate(&s, lane), "watch failed: 500");
            s.view_detail.clear();
            closed_with(gate(&s, lane), "Job view is not current");
        }
    }

    #[test]
    fn a_failing_lane_closes_only_itself_however_recent_its_last_success() {
        let mut runs = healthy(10);
        runs.failing = true;
        runs.detail = "POST /jobs/leases answered 503".into();
        let s = status(runs, healthy(10));
        closed_with(gate(&s, Lane::Run), "latest run lease renewal failed: POST");
        assert_eq!(gate(&s, Lane::Publish), GateState::Open);
    }

    #[test]
    fn a_stale_last_success_closes_its_lane() {
        let s = status(healthy(10), healthy(60_001));
        assert_eq!(gate(&s, Lane::Run), GateState::Open);
        closed_with(gate(&s, Lane::Publish), "60.0s ago (max 60.0s)");
    }

    #[test]
    fn never_renewed_disabled_or_missing_closes_the_lane() {
        let mut never = healthy(0);
        never.renewed = false;
        let mut off = healthy(0);
        off.enabled = false;
        off.failing = true;
        off.detail = "publishing is off in the lease-keeper".into();
        let s = status(never, off);
        closed_with(
            gate(&s, Lane::Run),
            "no run lease renewal has succeeded yet",
        );
        closed_with(
            gate(&s, Lane::Publish),
            "does not renew publish leases: publishing is off",
        );
        let missing = RenewalStatus {
            runs: None,
            ..status(healthy(1), healthy(1))
        };
        closed_with(gate(&missing, Lane::Run), "said nothing about run renewals");
    }
}
