//! The admission gate of one lane, judged here and nowhere else: from what
//! the lease-keeper knows of the lane's renewal calls and of its Job view,
//! at `now`, against the maximum age the admitter asks with.
//!
//! A claim is what makes the backend requeue a lapsed `dispatched` job, so a
//! lane's gate is open only while (all of, checked in this order, the first
//! that fails giving the reason):
//! - the lease-keeper's Job view is current (else new Jobs would go unrenewed);
//! - the lease-keeper renews that lane at all;
//! - the lane's latest renewal call did not fail (the gate closes at the
//!   first failed call, not at the end of a round);
//! - a renewal round of the lane has succeeded (every call of it: a lane
//!   of more than 10,000 live Jobs is renewed in several);
//! - the last successful round, timed from its start, is at most
//!   `max_age` old.

use std::time::Duration;
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_shared::Lane;
use tcab_shared::job_cache::ViewState;
use tokio::time::Instant;

/// What the lease-keeper knows of one lane's renewal calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneRenewals {
    /// Whether this lane is renewed at all (publishes only while publishing is on).
    pub enabled: bool,
    /// When the lane's last successful renewal round began (every call of
    /// it succeeded; the time its first lease was renewed).
    pub last_success: Option<Instant>,
    /// Why the most recent renewal call failed, when it did (for publishes
    /// while publishing is off: why the lane is not renewed).
    pub failing: Option<String>,
}

impl LaneRenewals {
    /// Whether the lane's renewals are healthy: the gate's renewal checks
    /// (`renewal_problem`) all pass. Lost jobs of a lane are judged only
    /// then (age and view are the gate's own further checks).
    pub fn healthy(&self) -> bool {
        renewal_problem(self).is_ok()
    }
}

/// Which of the gate's renewal checks fails first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalProblem<'a> {
    /// The lane is not renewed at all (with why, when known).
    NotRenewed(Option<&'a str>),
    /// The latest renewal call failed, with the call's error.
    Failing(&'a str),
    /// No renewal call has succeeded yet.
    Never,
}

/// The gate's renewal checks, in order: the lane is renewed, its latest
/// call did not fail, a call has succeeded. The last success, or the first
/// check that fails. The one rule behind both [`verdict`] and
/// [`LaneRenewals::healthy`].
pub(crate) fn renewal_problem(renewals: &LaneRenewals) -> Result<Instant, RenewalProblem<'_>> {
    if !renewals.enabled {
        return Err(RenewalProblem::NotRenewed(renewals.failing.as_deref()));
    }
    if let Some(why) = &renewals.failing {
        return Err(RenewalProblem::Failing(why));
    }
    renewals.last_success.ok_or(RenewalProblem::Never)
}

/// The gate of `lane`, whose renewals are `renewals`, over the Job view
/// `view`, at `now`: open, or closed with the first reason that holds.
pub(crate) fn verdict(
    lane: Lane,
    renewals: &LaneRenewals,
    view: &ViewState,
    now: Instant,
    max_age: Duration,
) -> GateVerdict {
    match view {
        ViewState::Current => {}
        ViewState::Listing => {
            return GateVerdict::closed(
                GateReason::ViewNotCurrent,
                "the lease-keeper's Job view is not current: the lease-keeper's Job view has not listed yet",
            );
        }
        ViewState::Failed(why) => {
            return GateVerdict::closed(
                GateReason::ViewNotCurrent,
                format!(
                    "the lease-keeper's Job view is not current: the lease-keeper's Job watch failed: {why}"
                ),
            );
        }
    }
    let last_success = match renewal_problem(renewals) {
        Ok(at) => at,
        Err(RenewalProblem::NotRenewed(why)) => {
            return GateVerdict::closed(
                GateReason::LaneNotRenewed,
                with_detail(
                    format!("the lease-keeper does not renew {lane} leases"),
                    why,
                ),
            );
        }
        Err(RenewalProblem::Failing(why)) => {
            return GateVerdict::closed(
                GateReason::RenewalFailing,
                with_detail(format!("the latest {lane} lease renewal failed"), Some(why)),
            );
        }
        Err(RenewalProblem::Never) => {
            return GateVerdict::closed(
                GateReason::NeverRenewed,
                format!("no {lane} lease renewal has succeeded yet"),
            );
        }
    };
    let age = now.saturating_duration_since(last_success);
    if age > max_age {
        return GateVerdict::closed(
            GateReason::RenewalStale,
            format!(
                "the last successful {lane} lease renewal was {:.1}s ago (max {:.1}s)",
                age.as_secs_f64(),
                max_age.as_secs_f64()
            ),
        );
    }
    GateVerdict::Open
}

fn with_detail(what: String, detail: Option<&str>) -> String {
    match detail {
        Some(detail) if !detail.is_empty() => format!("{what}: {detail}"),
        _ => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(60);

    fn at(secs: u64) -> Instant {
        use std::sync::OnceLock;
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now) + Duration::from_secs(secs)
    }

    fn renewed_at(secs: u64) -> LaneRenewals {
        LaneRenewals {
            enabled: true,
            last_success: Some(at(secs)),
            failing: None,
        }
    }

    fn closed(verdict: GateVerdict, reason: GateReason, part: &str) {
        match verdict {
            GateVerdict::Closed(c) => {
                assert_eq!(c.reason, reason, "{c:?}");
                assert!(c.detail.contains(part), "{:?} lacks {part:?}", c.detail);
            }
            GateVerdict::Open => panic!("expected closed ({reason:?})"),
        }
    }

    #[test]
    fn a_recent_successful_renewal_opens_the_lane_up_to_the_edge() {
        let v = |now| {
            verdict(
                Lane::Run,
                &renewed_at(10),
                &ViewState::Current,
                at(now),
                MAX,
            )
        };
        assert_eq!(v(11), GateVerdict::Open);
        assert_eq!(v(70), GateVerdict::Open, "the edge is open");
        closed(
            v(71),
            GateReason::RenewalStale,
            "run lease renewal was 61.0s ago (max 60.0s)",
        );
    }

    #[test]
    fn a_view_not_current_closes_the_lane_first() {
        let mut off = renewed_at(0);
        off.enabled = false;
        for lane in Lane::ALL {
            for renewals in [renewed_at(10), off.clone()] {
                let failed = ViewState::Failed("500 from list".into());
                closed(
                    verdict(lane, &renewals, &failed, at(11), MAX),
                    GateReason::ViewNotCurrent,
                    "Job view is not current: the lease-keeper's Job watch failed: 500 from list",
                );
                closed(
                    verdict(lane, &renewals, &ViewState::Listing, at(11), MAX),
                    GateReason::ViewNotCurrent,
                    "has not listed yet",
                );
            }
        }
    }

    #[test]
    fn a_failing_lane_closes_however_recent_its_last_success() {
        let mut runs = renewed_at(10);
        runs.failing = Some("POST /jobs/leases answered 503".into());
        closed(
            verdict(Lane::Run, &runs, &ViewState::Current, at(10), MAX),
            GateReason::RenewalFailing,
            "the latest run lease renewal failed: POST /jobs/leases answered 503",
        );
    }

    #[test]
    fn a_lane_not_renewed_or_never_renewed_is_closed() {
        let off = LaneRenewals {
            enabled: false,
            last_success: None,
            failing: Some("publishing is off in the lease-keeper".into()),
        };
        closed(
            verdict(Lane::Publish, &off, &ViewState::Current, at(0), MAX),
            GateReason::LaneNotRenewed,
            "does not renew publish leases: publishing is off",
        );
        let never = LaneRenewals {
            enabled: true,
            ..LaneRenewals::default()
        };
        closed(
            verdict(Lane::Run, &never, &ViewState::Current, at(0), MAX),
            GateReason::NeverRenewed,
            "no run lease renewal has succeeded yet",
        );
    }

    #[test]
    fn reasons_come_in_a_fixed_order() {
        // Everything wrong at once: each fix reveals the next reason.
        let mut r = LaneRenewals {
            enabled: false,
            last_success: None,
            failing: Some("503".into()),
        };
        let reason =
            |r: &LaneRenewals, view: &ViewState| match verdict(Lane::Run, r, view, at(100), MAX) {
                GateVerdict::Closed(c) => Some(c.reason),
                GateVerdict::Open => None,
            };
        assert_eq!(
            reason(&r, &ViewState::Listing),
            Some(GateReason::ViewNotCurrent)
        );
        assert_eq!(
            reason(&r, &ViewState::Current),
            Some(GateReason::LaneNotRenewed)
        );
        r.enabled = true;
        assert_eq!(
            reason(&r, &ViewState::Current),
            Some(GateReason::RenewalFailing)
        );
        r.failing = None;
        assert_eq!(
            reason(&r, &ViewState::Current),
            Some(GateReason::NeverRenewed)
        );
        r.last_success = Some(at(0));
        assert_eq!(
            reason(&r, &ViewState::Current),
            Some(GateReason::RenewalStale)
        );
        r.last_success = Some(at(99));
        assert_eq!(reason(&r, &ViewState::Current), None);
    }

    #[test]
    fn healthy_is_enabled_renewed_and_not_failing() {
        assert!(renewed_at(0).healthy());
        let mut r = renewed_at(0);
        r.failing = Some("x".into());
        assert!(!r.healthy());
        assert!(
            !LaneRenewals {
                enabled: true,
                ..LaneRenewals::default()
            }
            .healthy()
        );
    }

    /// One rule: a lane is healthy exactly when a current view and a fresh
    /// enough success would open its gate.
    #[test]
    fn healthy_is_the_verdicts_renewal_checks() {
        for enabled in [false, true] {
            for last_success in [None, Some(at(0))] {
                for failing in [None, Some("500".to_owned())] {
                    let renewals = LaneRenewals {
                        enabled,
                        last_success,
                        failing,
                    };
                    let open =
                        verdict(Lane::Run, &renewals, &ViewState::Current, at(0), MAX).is_open();
                    assert_eq!(renewals.healthy(), open, "{renewals:?}");
                }
            }
        }
    }
}
