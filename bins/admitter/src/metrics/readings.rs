//! What a lane's tick report counts as, pure: the admission outcomes, the
//! failing step and reason of an admission error, the gate as read (and
//! why it is closed), the lane's saturation, the queue wait of a claim.

use crate::admit::{CreateFailure, LaneOutcome};
use crate::lane::{AdmissionResult, LaneReport};
use crate::plan::{Decision, HoldReason};
use std::time::Duration;
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_shared::metrics::labels::{
    AdmissionOutcome, AdmissionStep, ErrorReason, GateClosedReason,
};
use tokio::time::Instant;

/// The `outcome` a tick's result counts as, if it is an admission attempt:
/// `created`, `empty_queue`, `gate_closed`, `lane_full`, `paused` (a cap of
/// 0, counted each tick like a full lane) or `error`. A lane
/// that holds before it would claim (its view not current, backing off,
/// resting after an empty claim, disabled) made no attempt.
pub(crate) fn outcome(result: AdmissionResult) -> Option<AdmissionOutcome> {
    match result {
        AdmissionResult::Created => Some(AdmissionOutcome::Created),
        AdmissionResult::EmptyQueue => Some(AdmissionOutcome::EmptyQueue),
        AdmissionResult::GateClosed => Some(AdmissionOutcome::GateClosed),
        AdmissionResult::LaneFull => Some(AdmissionOutcome::LaneFull),
        AdmissionResult::Paused => Some(AdmissionOutcome::Paused),
        AdmissionResult::Error => Some(AdmissionOutcome::Error),
        AdmissionResult::ViewNotCurrent
        | AdmissionResult::BackingOff
        | AdmissionResult::Resting
        | AdmissionResult::Disabled => None,
    }
}

/// The outcome a settle of an earlier unsettled create came to, once it
/// came to one: its Job exists (`created`) or never will (`error`).
fn settled_outcome(settled: &LaneOutcome) -> Option<AdmissionOutcome> {
    match settled {
        LaneOutcome::Unsettled { .. } => None,
        done if done.created().is_some() => Some(AdmissionOutcome::Created),
        LaneOutcome::Empty => Some(AdmissionOutcome::EmptyQueue),
        _ => Some(AdmissionOutcome::Error),
    }
}

/// Every admission outcome one tick of a lane counts. A claim whose create
/// stays unsettled is counted once, when it settles (`created` when its Job
/// turns out to exist, `error` when it is given up), so each claim counts
/// once and `created` counts every Job the admitter made.
pub(crate) fn admissions(report: &LaneReport) -> Vec<AdmissionOutcome> {
    let mut out = Vec::new();
    if !matches!(report.outcome, Some(LaneOutcome::Unsettled { .. }))
        && let Some(outcome) = outcome(report.result())
    {
        out.push(outcome);
    }
    out.extend(report.resettled.iter().filter_map(settled_outcome));
    out
}

/// The step and reason of an admission that failed for want of a call's
/// success (a poisoned claim is counted in `poisoned_claims_total`
/// instead), from the typed errors.
pub(crate) fn admission_error(outcome: &LaneOutcome) -> Option<(AdmissionStep, ErrorReason)> {
    match outcome {
        LaneOutcome::ClaimFailed(error) => Some((AdmissionStep::Claim, error.kind().reason())),
        LaneOutcome::CreateFailed { reason, .. } => Some((
            AdmissionStep::Create,
            match reason {
                CreateFailure::Build(_) => ErrorReason::Request,
                CreateFailure::Api { code, .. } => ErrorReason::of_status(*code),
                // Half the lease passed before the Job was known to exist.
                CreateFailure::Lapsed { .. } => ErrorReason::Timeout,
                CreateFailure::GaveUp { first_reason, .. } => *first_reason,
            },
        )),
        _ => None,
    }
}

/// The gate as the tick read it (every tick of an enabled lane reads it,
/// whatever else holds the lane): open or not; `None` for a lane that is off.
pub(crate) fn gate_reading(report: &LaneReport) -> Option<bool> {
    report.gate.as_ref().map(GateVerdict::is_open)
}

/// Why the gate was closed at the tick's reading; `None` when it was open
/// or not read.
pub(crate) fn gate_closed_reason(report: &LaneReport) -> Option<GateClosedReason> {
    match report.gate.as_ref()? {
        GateVerdict::Open => None,
        GateVerdict::Closed(closed) => Some(gate_label(closed.reason)),
    }
}

/// The label value of a gate's reason (one for each: a reason added to the
/// gate must be declared with the other label values).
pub(crate) fn gate_label(reason: GateReason) -> GateClosedReason {
    match reason {
        GateReason::ViewNotCurrent => GateClosedReason::ViewNotCurrent,
        GateReason::LaneNotRenewed => GateClosedReason::LaneNotRenewed,
        GateReason::RenewalFailing => GateClosedReason::RenewalFailing,
        GateReason::NeverRenewed => GateClosedReason::NeverRenewed,
        GateReason::RenewalStale => GateClosedReason::RenewalStale,
        GateReason::KeeperUnreachable => GateClosedReason::KeeperUnreachable,
        GateReason::UnreadableAnswer => GateClosedReason::UnreadableAnswer,
    }
}

/// Whether a lane is saturated, and since when: at its cap while its last
/// claim found work. Ends when a claim finds the queue empty, when the lane
/// has room after a tick, or when it is paused; held as it was while the
/// lane's figures are stale (its view not current).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Saturation {
    /// Saturated since then.
    pub since: Option<Instant>,
    /// Whether the lane's last claim found a job.
    pub found_work: bool,
}

impl Saturation {
    /// The state after `report`, at `now` (pure).
    pub(crate) fn after(self, report: &LaneReport, now: Instant) -> Saturation {
        let found_work = match report.outcome.as_ref() {
            Some(LaneOutcome::Empty) => false,
            Some(LaneOutcome::ClaimFailed(_)) | None => self.found_work,
            Some(_) => true,
        };
        let since = match &report.decision {
            Decision::Hold(HoldReason::ViewNotCurrent { .. }) => self.since,
            Decision::Hold(HoldReason::Disabled | HoldReason::Paused) => None,
            _ => {
                let cap = report.cap;
                let created = u32::from(report.result() == AdmissionResult::Created);
                let at_cap = cap > 0 && report.in_flight + created >= cap;
                (at_cap && found_work).then(|| self.since.unwrap_or(now))
            }
        };
        Saturation { since, found_work }
    }
}

/// The queue wait of a claimed job: from its enqueue to the claim, both on
/// the backend's clock (the claim's time is its lease's expiry less the
/// lease it grants); `None` when the claim said nothing of its enqueue.
pub(crate) fn queue_wait(report: &LaneReport, lease: Duration) -> Option<Duration> {
    let claimed = report.claimed.as_ref()?;
    let enqueued = claimed.enqueued_at?;
    let lease = jiff::SignedDuration::try_from(lease).ok()?;
    let claimed_at = claimed.lease_expires_at.checked_sub(lease).ok()?;
    let waited = claimed_at.duration_since(enqueued);
    Some(Duration::try_from(waited).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{admit, admitted, hold, report};
    use super::*;
    use crate::admit::CreateFailure;

    /// The outcomes one tick counts, as their label values.
    fn names(report: &LaneReport) -> Vec<&'static str> {
        admissions(report)
            .into_iter()
            .map(AdmissionOutcome::as_str)
            .collect()
    }

    fn unsettled(name: &str) -> LaneOutcome {
        LaneOutcome::Unsettled {
            job_id: name.into(),
            job_name: format!("tcab-driver-{name}"),
            error: "500".into(),
        }
    }

    #[test]
    fn each_tick_counts_as_the_documented_outcome() {
        let gate_closed = || {
            hold(HoldReason::GateClosed(tcab_proto::gate::GateClosed {
                reason: tcab_proto::gate::GateReason::RenewalFailing,
                detail: "renewal failed".into(),
            }))
        };
        let cases = [
            (report(admit(), Some(admitted("a"))), vec!["created"]),
            (
                report(admit(), Some(LaneOutcome::Empty)),
                vec!["empty_queue"],
            ),
            (report(gate_closed(), None), vec!["gate_closed"]),
            (
                report(
                    hold(HoldReason::LaneFull {
                        in_flight: 8,
                        cap: 8,
                    }),
                    None,
                ),
                vec!["lane_full"],
            ),
            (
                report(
                    admit(),
                    Some(LaneOutcome::CreateFailed {
                        job_id: "a".into(),
                        job_name: "tcab-driver-a".into(),
                        reason: CreateFailure::Lapsed {
                            age: Duration::from_secs(90),
                        },
                    }),
                ),
                vec!["error"],
            ),
            // Not attempts: nothing counted.
            (
                report(
                    hold(HoldReason::ViewNotCurrent {
                        why: "listing".into(),
                    }),
                    None,
                ),
                vec![],
            ),
            (
                report(
                    hold(HoldReason::Resting {
                        until: tokio::time::Instant::now(),
                    }),
                    None,
                ),
                vec![],
            ),
            (report(hold(HoldReason::Disabled), None), vec![]),
            (report(hold(HoldReason::Paused), None), vec!["paused"]),
        ];
        for (report, want) in cases {
            assert_eq!(names(&report), want, "{report:?}");
        }
    }

    fn full(in_flight: u32) -> Decision {
        hold(HoldReason::LaneFull { in_flight, cap: 8 })
    }

    fn at(report: &LaneReport, in_flight: u32) -> LaneReport {
        LaneReport {
            lane: report.lane,
            decision: report.decision.clone(),
            outcome: None,
            resettled: vec![],
            in_flight,
            stale: vec![],
            cap: report.cap,
            view_current: report.view_current,
            claimed: None,
            claim_to_job: vec![],
            gate: report.gate.clone(),
            backoff_until: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lane_is_saturated_at_its_cap_while_its_last_claim_found_work() {
        let t0 = Instant::now();
        let none = Saturation::default();
        // A claim that found work and filled the lane (7 + 1 = 8).
        let mut filled = report(admit(), Some(admitted("a")));
        filled.in_flight = 7;
        let s = none.after(&filled, t0);
        assert_eq!(
            s,
            Saturation {
                since: Some(t0),
                found_work: true
            }
        );
        // Full ticks keep the start.
        tokio::time::advance(Duration::from_secs(30)).await;
        let s = s.after(&at(&report(full(8), None), 8), Instant::now());
        assert_eq!(s.since, Some(t0));
        // A freed slot refilled at once: still saturated, from the same start.
        let s = s.after(&filled, Instant::now());
        assert_eq!(s.since, Some(t0));
        // A stale view holds the state as it was.
        let blind = at(
            &report(hold(HoldReason::ViewNotCurrent { why: "x".into() }), None),
            8,
        );
        assert_eq!(s.after(&blind, Instant::now()), s);
        // A claim that found the queue empty ends it, and a full lane after
        // it is not saturated: its last claim found nothing.
        let mut empty = report(admit(), Some(LaneOutcome::Empty));
        empty.in_flight = 7;
        let s = s.after(&empty, Instant::now());
        assert_eq!(
            s,
            Saturation {
                since: None,
                found_work: false
            }
        );
        assert_eq!(
            s.after(&at(&report(full(8), None), 8), Instant::now())
                .since,
            None
        );
        // Room left after an admission: not at the cap.
        let mut roomy = report(admit(), Some(admitted("b")));
        roomy.in_flight = 2;
        assert_eq!(none.after(&roomy, t0).since, None);
        // A paused lane is never saturated.
        let mut paused = at(&report(hold(HoldReason::Paused), None), 8);
        paused.cap = 0;
        let busy = Saturation {
            since: Some(t0),
            found_work: true,
        };
        assert_eq!(busy.after(&paused, t0).since, None);
    }

    #[test]
    fn the_queue_wait_is_read_on_the_backends_clock() {
        let ts = |s: &str| s.parse::<jiff::Timestamp>().expect("a time");
        let mut claimed = report(admit(), Some(admitted("a")));
        assert_eq!(
            queue_wait(&claimed, Duration::from_secs(120)),
            None,
            "no claim"
        );
        claimed.claimed = Some(crate::admit::ClaimTimes {
            enqueued_at: Some(ts("2026-11-29T17:00:00Z")),
            lease_expires_at: ts("2026-11-29T17:07:30Z"),
        });
        // Claimed at 17:05:30 by the backend's clock: 330 s in the queue.
        assert_eq!(
            queue_wait(&claimed, Duration::from_secs(120)),
            Some(Duration::from_secs(330))
        );
        // An enqueue after the claim (a lease longer than assumed) is 0.
        assert_eq!(
            queue_wait(&claimed, Duration::from_secs(600)),
            Some(Duration::ZERO)
        );
        claimed.claimed = Some(crate::admit::ClaimTimes {
            enqueued_at: None,
            lease_expires_at: ts("2026-11-29T17:07:30Z"),
        });
        assert_eq!(queue_wait(&claimed, Duration::from_secs(120)), None);
    }

    #[test]
    fn admission_errors_carry_the_failing_step_and_its_reason() {
        let create = |reason| LaneOutcome::CreateFailed {
            job_id: "a".into(),
            job_name: "tcab-driver-a".into(),
            reason,
        };
        let api = |code| CreateFailure::Api {
            code,
            reason: "R".into(),
            message: "m".into(),
        };
        let cases = [
            (
                create(api(403)),
                (AdmissionStep::Create, ErrorReason::Forbidden),
            ),
            (
                create(api(500)),
                (AdmissionStep::Create, ErrorReason::Http5xx),
            ),
            (
                create(CreateFailure::Lapsed {
                    age: Duration::from_secs(61),
                }),
                (AdmissionStep::Create, ErrorReason::Timeout),
            ),
            (
                create(CreateFailure::GaveUp {
                    calls: 8,
                    first: "x".into(),
                    first_reason: ErrorReason::Connect,
                }),
                (AdmissionStep::Create, ErrorReason::Connect),
            ),
        ];
        for (outcome, want) in cases {
            assert_eq!(admission_error(&outcome), Some(want), "{outcome:?}");
        }
        assert_eq!(admission_error(&admitted("a")), None);
        assert_eq!(admission_error(&LaneOutcome::Empty), None);
    }

    #[test]
    fn an_unsettled_create_counts_once_when_it_settles() {
        let first = report(admit(), Some(unsettled("a")));
        assert_eq!(names(&first), Vec::<&str>::new(), "not yet known");
        let mut later = report(hold(HoldReason::Disabled), None);
        later.resettled = vec![unsettled("a")];
        assert_eq!(names(&later), Vec::<&str>::new(), "still unknown");
        later.resettled = vec![admitted("a")];
        assert_eq!(names(&later), ["created"]);
        // A tick can admit a fresh claim and settle an older one.
        let mut both = report(admit(), Some(admitted("b")));
        both.resettled = vec![LaneOutcome::CreateFailed {
            job_id: "a".into(),
            job_name: "tcab-driver-a".into(),
            reason: CreateFailure::GaveUp {
                calls: 8,
                first: "500".into(),
                first_reason: ErrorReason::Http5xx,
            },
        }];
        assert_eq!(names(&both), ["created", "error"]);
    }

    #[test]
    fn the_gate_is_read_whatever_holds_the_lane() {
        let never = GateVerdict::closed(GateReason::NeverRenewed, "x");
        let mut admitted = report(admit(), None);
        assert_eq!(gate_reading(&admitted), Some(true));
        assert_eq!(gate_closed_reason(&admitted), None);
        let closed = hold(HoldReason::GateClosed(tcab_proto::gate::GateClosed {
            reason: GateReason::NeverRenewed,
            detail: "x".into(),
        }));
        let mut held = report(closed, None);
        held.gate = Some(never);
        assert_eq!(gate_reading(&held), Some(false));
        assert_eq!(
            gate_closed_reason(&held),
            Some(GateClosedReason::NeverRenewed)
        );
        // A full lane read its gate too: open, or closed with its reason.
        let mut full = report(
            hold(HoldReason::LaneFull {
                in_flight: 1,
                cap: 1,
            }),
            None,
        );
        assert_eq!(gate_reading(&full), Some(true));
        full.gate = Some(GateVerdict::closed(GateReason::RenewalFailing, "500"));
        assert_eq!(gate_reading(&full), Some(false));
        assert_eq!(
            gate_closed_reason(&full),
            Some(GateClosedReason::RenewalFailing)
        );
        // A lane that is off reads nothing.
        admitted.gate = None;
        assert_eq!(gate_reading(&admitted), None);
        assert_eq!(gate_closed_reason(&admitted), None);
    }

    #[test]
    fn each_gate_reason_has_the_label_value_of_its_name() {
        use tcab_shared::metrics::labels::LabelValue;
        let all = [
            GateReason::ViewNotCurrent,
            GateReason::LaneNotRenewed,
            GateReason::RenewalFailing,
            GateReason::NeverRenewed,
            GateReason::RenewalStale,
            GateReason::KeeperUnreachable,
            GateReason::UnreadableAnswer,
        ];
        for reason in all {
            assert_eq!(gate_label(reason).as_str(), reason.name());
        }
        assert_eq!(all.len(), GateClosedReason::ALL.len());
    }
}
