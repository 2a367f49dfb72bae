//! The admission gate's verdict as both binaries hold it: the lease-keeper
//! judges it (its `plan::gate`), the admitter acts on it. It crosses the wire
//! as [`crate::vault::LaneGate`]; [`GateVerdict::to_wire`] and
//! [`GateVerdict::from_wire`] are the only two places that know that shape.
//!
//! Decisions match on [`GateVerdict`] and [`GateReason`]; the `detail` of a
//! closed gate is words for a log line and nothing reads it.

use crate::vault as pb;
use std::fmt;

/// One lane's admission gate: may the admitter claim?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateVerdict {
    /// The lease-keeper renews this lane's leases, and did so recently.
    Open,
    /// Claiming now could requeue a job whose Job is alive.
    Closed(GateClosed),
}

/// A closed gate: why (decided on), and why in words (logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateClosed {
    /// Why the gate is closed.
    pub reason: GateReason,
    /// The same, in words for a log line (with what the lease-keeper saw).
    pub detail: String,
}

/// Why a lane's gate is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateReason {
    /// The lease-keeper's Job view is not current: new Jobs would go unrenewed.
    ViewNotCurrent,
    /// The lease-keeper does not renew this lane (publishes while publishing is off).
    LaneNotRenewed,
    /// The lane's most recent renewal call failed.
    RenewalFailing,
    /// No renewal call of the lane has succeeded since the lease-keeper started.
    NeverRenewed,
    /// The lane's last successful renewal is older than the maximum age.
    RenewalStale,
    /// The admitter could not ask: the lease-keeper did not answer (judged by
    /// the admitter at its edge; the lease-keeper never says it).
    KeeperUnreachable,
    /// The lease-keeper's answer held no verdict this admitter can read
    /// (judged by the admitter at its edge; fails closed).
    UnreadableAnswer,
}

impl GateReason {
    /// The reason's name in a log field (`renewal_failing`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GateReason::ViewNotCurrent => "view_not_current",
            GateReason::LaneNotRenewed => "lane_not_renewed",
            GateReason::RenewalFailing => "renewal_failing",
            GateReason::NeverRenewed => "never_renewed",
            GateReason::RenewalStale => "renewal_stale",
            GateReason::KeeperUnreachable => "keeper_unreachable",
            GateReason::UnreadableAnswer => "unreadable_answer",
        }
    }

    /// The reason in a few words, for a closed gate that came without detail.
    pub fn describe(self) -> &'static str {
        match self {
            GateReason::ViewNotCurrent => "the lease-keeper's Job view is not current",
            GateReason::LaneNotRenewed => "the lease-keeper does not renew this lane's leases",
            GateReason::RenewalFailing => "the lane's latest lease renewal failed",
            GateReason::NeverRenewed => "no lease renewal of the lane has succeeded yet",
            GateReason::RenewalStale => "the lane's last successful lease renewal is too old",
            GateReason::KeeperUnreachable => "lease-keeper unreachable",
            GateReason::UnreadableAnswer => "the lease-keeper's gate answer could not be read",
        }
    }

    fn to_wire(self) -> pb::GateReason {
        match self {
            GateReason::ViewNotCurrent => pb::GateReason::ViewNotCurrent,
            GateReason::LaneNotRenewed => pb::GateReason::LaneNotRenewed,
            GateReason::RenewalFailing => pb::GateReason::RenewalFailing,
            GateReason::NeverRenewed => pb::GateReason::NeverRenewed,
            GateReason::RenewalStale => pb::GateReason::RenewalStale,
            // The lease-keeper never sends these; should one be sent, it is
            // read back as an answer that cannot be read (closed).
            GateReason::KeeperUnreachable | GateReason::UnreadableAnswer => {
                pb::GateReason::Unspecified
            }
        }
    }

    fn from_wire(reason: i32) -> Option<GateReason> {
        match pb::GateReason::try_from(reason).ok()? {
            pb::GateReason::ViewNotCurrent => Some(GateReason::ViewNotCurrent),
            pb::GateReason::LaneNotRenewed => Some(GateReason::LaneNotRenewed),
            pb::GateReason::RenewalFailing => Some(GateReason::RenewalFailing),
            pb::GateReason::NeverRenewed => Some(GateReason::NeverRenewed),
            pb::GateReason::RenewalStale => Some(GateReason::RenewalStale),
            pb::GateReason::Unspecified => None,
        }
    }
}

impl GateVerdict {
    /// A closed gate for `reason`, with `detail` in words.
    pub fn closed(reason: GateReason, detail: impl Into<String>) -> Self {
        GateVerdict::Closed(GateClosed {
            reason,
            detail: detail.into(),
        })
    }

    /// Whether the gate lets a claim through.
    pub fn is_open(&self) -> bool {
        matches!(self, GateVerdict::Open)
    }

    /// The verdict as the lease-keeper sends it.
    pub fn to_wire(&self) -> pb::LaneGate {
        let verdict = match self {
            GateVerdict::Open => pb::lane_gate::Verdict::Open(pb::GateOpen {}),
            GateVerdict::Closed(closed) => pb::lane_gate::Verdict::Closed(pb::GateClosed {
                reason: closed.reason.to_wire() as i32,
                detail: closed.detail.clone(),
            }),
        };
        pb::LaneGate {
            verdict: Some(verdict),
        }
    }

    /// The verdict as the admitter reads it. An answer without a verdict, or
    /// with a reason this build does not know, is a closed gate.
    pub fn from_wire(gate: pb::LaneGate) -> Self {
        match gate.verdict {
            Some(pb::lane_gate::Verdict::Open(pb::GateOpen {})) => GateVerdict::Open,
            Some(pb::lane_gate::Verdict::Closed(closed)) => {
                match GateReason::from_wire(closed.reason) {
                    Some(reason) => GateVerdict::closed(reason, closed.detail),
                    None => GateVerdict::closed(
                        GateReason::UnreadableAnswer,
                        format!(
                            "the lease-keeper's gate is closed for an unknown reason ({}): {}",
                            closed.reason, closed.detail
                        ),
                    ),
                }
            }
            None => GateVerdict::closed(
                GateReason::UnreadableAnswer,
                "the lease-keeper's gate answer held no verdict",
            ),
        }
    }
}

/// The detail, or the reason in a few words when there is none.
impl fmt::Display for GateClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.reason.describe())
        } else {
            f.write_str(&self.detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENT: [GateReason; 5] = [
        GateReason::ViewNotCurrent,
        GateReason::LaneNotRenewed,
        GateReason::RenewalFailing,
        GateReason::NeverRenewed,
        GateReason::RenewalStale,
    ];

    #[test]
    fn every_verdict_the_lease_keeper_sends_reads_back_the_same() {
        assert_eq!(
            GateVerdict::from_wire(GateVerdict::Open.to_wire()),
            GateVerdict::Open
        );
        for reason in SENT {
            let verdict = GateVerdict::closed(reason, "why");
            assert_eq!(GateVerdict::from_wire(verdict.to_wire()), verdict);
        }
    }

    #[test]
    fn an_answer_that_cannot_be_read_is_a_closed_gate() {
        let closed_unreadable = |gate: pb::LaneGate| match GateVerdict::from_wire(gate) {
            GateVerdict::Closed(c) => {
                assert_eq!(c.reason, GateReason::UnreadableAnswer);
                c.detail
            }
            GateVerdict::Open => panic!("an unreadable answer opened the gate"),
        };
        closed_unreadable(pb::LaneGate { verdict: None });
        let unknown = pb::LaneGate {
            verdict: Some(pb::lane_gate::Verdict::Closed(pb::GateClosed {
                reason: 99,
                detail: "from a newer lease-keeper".into(),
            })),
        };
        let detail = closed_unreadable(unknown);
        assert!(
            detail.contains("(99)") && detail.contains("newer"),
            "{detail}"
        );
        for edge_only in [GateReason::KeeperUnreachable, GateReason::UnreadableAnswer] {
            closed_unreadable(GateVerdict::closed(edge_only, "x").to_wire());
        }
    }

    #[test]
    fn a_closed_gate_prints_its_detail_or_else_its_reason() {
        let c = |detail: &str| GateClosed {
            reason: GateReason::NeverRenewed,
            detail: detail.into(),
        };
        assert_eq!(
            c("no run lease renewal has succeeded yet").to_string(),
            "no run lease renewal has succeeded yet"
        );
        assert_eq!(c("").to_string(), GateReason::NeverRenewed.describe());
    }
}
