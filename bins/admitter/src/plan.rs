//! The admission decision of one lane: a pure function from a snapshot of
//! what the lane knows (its live cached Jobs, the Jobs it created that the
//! cache has not shown yet, the creations it could not settle, its cap,
//! back-off and rest, the admission gate, whether the Job view is current,
//! `now`) to admit-or-hold, with the reason for a hold.
//!
//! A lane's snapshot holds nothing of the other lane, so nothing about one
//! lane (a full lane, a back-off, a closed gate, a hung call) can hold the
//! other. Name lists are de-duplicated first, so a reordered snapshot gives
//! the same decision.

use std::collections::BTreeSet;
use std::fmt;
use tcab_proto::gate::{GateClosed, GateVerdict};
use tcab_shared::Lane;
use tcab_shared::job_cache::{JobSummary, ViewState};
use tcab_shared::metrics::labels::LaneHold;
use tokio::time::Instant;

/// What one lane remembers and is configured with, as its decision reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneInput {
    /// Whether the lane is configured at all (publish: a publisher image is set).
    pub enabled: bool,
    /// The lane's cap on non-terminal Jobs.
    pub cap: u32,
    /// Names of Jobs this lane created (or found created) that the cache
    /// does not show yet. Each counts once against the cap.
    pub created_unseen: Vec<String>,
    /// Names of Jobs whose creation could not be settled: they may exist,
    /// so each counts against the cap until a read or the watch tells.
    pub unsettled: Vec<String>,
    /// The lane is backing off until then (consecutive failures).
    pub backoff_until: Option<Instant>,
    /// The lane's last claim came back empty; it rests until then.
    pub rest_until: Option<Instant>,
}

/// Everything one lane's decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneSnapshot {
    /// The decision's clock.
    pub now: Instant,
    /// The admitter's own Job view: only a current view counts the lane right.
    pub view: ViewState,
    /// Live Jobs of this lane in the cache.
    pub live_cached: u32,
    /// The lane's memory and configuration.
    pub input: LaneInput,
}

/// Why a lane does not admit this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// The lane is not configured (publish without a publisher image).
    Disabled,
    /// The lane's cap is 0: an operator paused it (no claims; the
    /// lease-keeper's renewals and reports go on).
    Paused,
    /// The admitter's Job view is not current (not listed yet, or the watch
    /// failed since the last complete list): the lane's count is unknown.
    ViewNotCurrent {
        /// Why, as the view said.
        why: String,
    },
    /// Consecutive failures: the lane waits until then.
    BackingOff {
        /// When the lane may try again.
        until: Instant,
    },
    /// The lane's last claim came back empty: it claims again at `until`
    /// (one poll interval later), as an idle admitter would.
    Resting {
        /// When the lane claims again.
        until: Instant,
    },
    /// The lane has `in_flight` non-terminal Jobs against a cap of `cap`.
    LaneFull {
        /// Live cached Jobs plus created-but-unseen and unsettled Jobs.
        in_flight: u32,
        /// The lane's cap.
        cap: u32,
    },
    /// The admission gate is closed for this lane, for the lease-keeper's reason.
    GateClosed(GateClosed),
}

impl HoldReason {
    /// The kind of the hold, as the `lane_hold` gauge and the status
    /// document name it (`lane_full`, `gate_closed`, ...).
    pub fn kind(&self) -> LaneHold {
        match self {
            HoldReason::Disabled => LaneHold::Disabled,
            HoldReason::Paused => LaneHold::Paused,
            HoldReason::ViewNotCurrent { .. } => LaneHold::ViewNotCurrent,
            HoldReason::BackingOff { .. } => LaneHold::BackingOff,
            HoldReason::Resting { .. } => LaneHold::Resting,
            HoldReason::LaneFull { .. } => LaneHold::LaneFull,
            HoldReason::GateClosed(_) => LaneHold::GateClosed,
        }
    }
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::Disabled => f.write_str("lane disabled"),
            HoldReason::Paused => f.write_str("lane paused (its cap is 0)"),
            HoldReason::ViewNotCurrent { why } => write!(f, "Job view not current: {why}"),
            HoldReason::BackingOff { .. } => f.write_str("backing off after failures"),
            HoldReason::Resting { .. } => f.write_str("queue was empty at the last claim"),
            HoldReason::LaneFull { in_flight, cap } => write!(f, "lane full ({in_flight}/{cap})"),
            HoldReason::GateClosed(closed) => write!(f, "admission gate closed: {closed}"),
        }
    }
}

/// One lane's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Claim one job and create its Job; `in_flight` is the count before it.
    Admit {
        /// Non-terminal Jobs of the lane before this admission.
        in_flight: u32,
    },
    /// Do not claim this tick, and why.
    Hold(HoldReason),
}

impl Decision {
    /// Whether the lane admits.
    pub fn admits(&self) -> bool {
        matches!(self, Decision::Admit { .. })
    }

    /// What holds the lane, as the `lane_hold` gauge names it: `none` when
    /// it admits.
    pub fn hold_kind(&self) -> LaneHold {
        match self {
            Decision::Admit { .. } => LaneHold::None,
            Decision::Hold(reason) => reason.kind(),
        }
    }
}

/// Why a view that is not current is not, in words for the hold reason.
pub(crate) fn view_problem(view: &ViewState) -> Option<String> {
    match view {
        ViewState::Current => None,
        ViewState::Listing => Some("the owned Jobs have not been listed yet".to_owned()),
        ViewState::Failed(why) => Some(format!(
            "the Job watch failed ({why}); waiting for a fresh list"
        )),
    }
}

/// The number of non-terminal Jobs of a lane: its live cached Jobs plus
/// every name created-but-unseen or unsettled (each name once). The lists
/// hold only names the cache did not show when the snapshot was taken.
pub(crate) fn in_flight(live_cached: u32, created_unseen: &[String], unsettled: &[String]) -> u32 {
    let pending = created_unseen
        .iter()
        .chain(unsettled)
        .map(String::as_str)
        .collect::<BTreeSet<&str>>()
        .len();
    live_cached.saturating_add(u32::try_from(pending).unwrap_or(u32::MAX))
}

/// Every check but the gate's, in a fixed order, so the reason given is
/// the first that holds: disabled, paused (a cap of 0), view not current,
/// backing off, resting, full. The lane's in-flight count when it would
/// admit, else why it holds. The loop reads the gate on every tick (its
/// reading is what the metrics and the status document show, also while
/// the lane holds for another reason) and, on `Ok`, calls [`gated`] with
/// it, the last check.
pub(crate) fn ungated(snapshot: &LaneSnapshot) -> Result<u32, HoldReason> {
    let input = &snapshot.input;
    if !input.enabled {
        return Err(HoldReason::Disabled);
    }
    if input.cap == 0 {
        return Err(HoldReason::Paused);
    }
    if let Some(why) = view_problem(&snapshot.view) {
        return Err(HoldReason::ViewNotCurrent { why });
    }
    if let Some(until) = input.backoff_until
        && until > snapshot.now
    {
        return Err(HoldReason::BackingOff { until });
    }
    if let Some(until) = input.rest_until
        && until > snapshot.now
    {
        return Err(HoldReason::Resting { until });
    }
    let n = in_flight(
        snapshot.live_cached,
        &input.created_unseen,
        &input.unsettled,
    );
    if n >= input.cap {
        return Err(HoldReason::LaneFull {
            in_flight: n,
            cap: input.cap,
        });
    }
    Ok(n)
}

/// The last check: a lane that would admit with `in_flight` Jobs admits
/// only through an open gate.
pub(crate) fn gated(gate: &GateVerdict, in_flight: u32) -> Decision {
    match gate {
        GateVerdict::Closed(closed) => Decision::Hold(HoldReason::GateClosed(closed.clone())),
        GateVerdict::Open => Decision::Admit { in_flight },
    }
}

/// A live Job of a claimed job's id under an older claim: its token no
/// longer works (the backend requeued the job and handed it out again), so
/// it is deleted before the new claim's Job counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleJob {
    /// The Job's name.
    pub name: String,
    /// Its claim tag, when labelled.
    pub claim: Option<String>,
    /// When the Job itself is gone and a pod of it runs on: that pod, which
    /// is what to delete.
    pub pod: Option<String>,
}

/// The stale Jobs of a fresh claim of `job_id` in `lane`, whose own Job is
/// `new_name`: every live entry of `seen` (the cached Jobs of that id, and
/// the lane's Jobs created but not yet seen or not yet settled) with the same
/// job id and lane under another name (the name is one per claim). An entry
/// already being deleted needs no delete. Sorted by name, each once.
pub(crate) fn stale_jobs(
    lane: Lane,
    job_id: &str,
    new_name: &str,
    seen: &[JobSummary],
) -> Vec<StaleJob> {
    let mut stale: Vec<StaleJob> = seen
        .iter()
        .filter(|j| {
            j.lane == lane
                && j.job_id() == Some(job_id)
                && j.is_live()
                && !j.deleting
                && j.name() != new_name
                // A gone Job stands in the view by a pod of it: that pod is
                // deleted, unless it is terminating already (or not known yet).
                && (!j.gone || (j.orphan_pod().is_some() && j.terminating_pods == 0))
        })
        .map(|j| StaleJob {
            name: j.name().to_string(),
            claim: j.claim().map(str::to_owned),
            pod: j.orphan_pod().filter(|_| j.gone).map(str::to_owned),
        })
        .collect();
    stale.sort_by(|a, b| a.name.cmp(&b.name));
    stale.dedup_by(|a, b| a.name == b.name);
    stale
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use std::time::Duration;
    use tcab_proto::gate::GateReason;

    /// One lane's whole decision, as its tick makes it: [`ungated`], then
    /// [`gated`] with the gate's verdict.
    fn decide(snapshot: &LaneSnapshot, gate: &GateVerdict) -> Decision {
        match ungated(snapshot) {
            Ok(in_flight) => gated(gate, in_flight),
            Err(hold) => Decision::Hold(hold),
        }
    }

    fn closed(reason: GateReason) -> GateVerdict {
        GateVerdict::closed(reason, "why")
    }

    fn input(cap: u32) -> LaneInput {
        LaneInput {
            enabled: true,
            cap,
            created_unseen: vec![],
            unsettled: vec![],
            backoff_until: None,
            rest_until: None,
        }
    }

    fn snapshot(live_cached: u32, cap: u32) -> LaneSnapshot {
        LaneSnapshot {
            now: Instant::now(),
            view: ViewState::Current,
            live_cached,
            input: input(cap),
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn counts_live_jobs_unseen_and_unsettled_names_once_each() {
        assert_eq!(in_flight(1, &[], &[]), 1);
        assert_eq!(in_flight(1, &names(&["r9", "r9", "r8"]), &[]), 3);
        // A name both created-unseen and unsettled (settled on a later tick) counts once.
        assert_eq!(in_flight(0, &names(&["r9"]), &names(&["r9", "r7"])), 2);
        assert_eq!(in_flight(u32::MAX, &names(&["a"]), &[]), u32::MAX);
    }

    #[test]
    fn admits_under_the_cap_and_holds_at_it() {
        let mut s = snapshot(1, 2);
        assert_eq!(
            decide(&s, &GateVerdict::Open),
            Decision::Admit { in_flight: 1 }
        );
        s.input.unsettled.push("r2".into());
        assert_eq!(
            decide(&s, &GateVerdict::Open),
            Decision::Hold(HoldReason::LaneFull {
                in_flight: 2,
                cap: 2
            })
        );
    }

    fn job(name: &str, id: &str, claim: &str) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(name, Some(id), Some(claim)),
            ..JobSummary::default()
        }
    }

    #[test]
    fn a_live_job_of_the_same_id_under_another_claim_is_stale() {
        let new = "tcab-driver-a-c2";
        let old = job("tcab-driver-a-c1", "a", "c1");
        let mut finished = job("tcab-driver-a-c0", "a", "c0");
        finished.phase = tcab_shared::job_cache::JobPhase::Failed;
        let mut deleting = job("tcab-driver-a-c9", "a", "c9");
        deleting.deleting = true;
        let mut publish = job("tcab-publisher-a-c3", "a", "c3");
        publish.lane = Lane::Publish;
        let seen = [
            job(new, "a", "c2"),
            job("tcab-driver-b-c1", "b", "c1"),
            old.clone(),
            finished,
            deleting,
            publish,
            old.clone(),
        ];
        assert_eq!(
            stale_jobs(Lane::Run, "a", new, &seen),
            [StaleJob {
                name: old.name().to_string(),
                claim: Some("c1".into()),
                pod: None,
            }],
            "only the live run Job of id a under claim c1, once"
        );
        assert!(stale_jobs(Lane::Run, "b", "tcab-driver-b-c1", &seen).is_empty());
        // The same in any order.
        let mut reversed = seen.to_vec();
        reversed.reverse();
        assert_eq!(
            stale_jobs(Lane::Run, "a", new, &reversed),
            stale_jobs(Lane::Run, "a", new, &seen)
        );
        // A Job without a claim label is still another claim's.
        let mut unlabelled = job("tcab-driver-a-old", "a", "x");
        unlabelled.names =
            tcab_shared::job_cache::JobNames::new(unlabelled.name(), unlabelled.job_id(), None);
        assert_eq!(
            stale_jobs(Lane::Run, "a", new, &[unlabelled]),
            [StaleJob {
                name: "tcab-driver-a-old".into(),
                claim: None,
                pod: None,
            }]
        );
    }

    #[test]
    fn a_pod_that_outlived_its_stale_job_is_what_is_deleted() {
        let new = "tcab-driver-a-c2";
        let mut orphan = job("tcab-driver-a-c1", "a", "c1");
        orphan.gone = true;
        orphan.set_rare(|r| r.orphan_pod = Some("tcab-driver-a-c1-x7k".into()));
        assert_eq!(
            stale_jobs(Lane::Run, "a", new, std::slice::from_ref(&orphan)),
            [StaleJob {
                name: orphan.name().to_string(),
                claim: Some("c1".into()),
                pod: Some("tcab-driver-a-c1-x7k".into()),
            }]
        );
        // Terminating already, or not known yet: nothing to delete.
        let mut terminating = orphan.clone();
        terminating.terminating_pods = 1;
        let mut checking = orphan;
        checking.set_rare(|r| r.orphan_pod = None);
        assert!(stale_jobs(Lane::Run, "a", new, &[terminating, checking]).is_empty());
    }

    #[test]
    fn each_hold_names_its_kind_as_the_admissions_counter_does() {
        use crate::lane::{AdmissionResult, LaneReport};
        let now = Instant::now();
        let holds = [
            HoldReason::Disabled,
            HoldReason::Paused,
            HoldReason::ViewNotCurrent { why: "x".into() },
            HoldReason::BackingOff { until: now },
            HoldReason::Resting { until: now },
            HoldReason::LaneFull {
                in_flight: 1,
                cap: 1,
            },
            HoldReason::GateClosed(GateClosed {
                reason: GateReason::NeverRenewed,
                detail: String::new(),
            }),
        ];
        let mut kinds = std::collections::BTreeSet::new();
        for hold in holds {
            let report = LaneReport {
                lane: Lane::Run,
                decision: Decision::Hold(hold.clone()),
                outcome: None,
                resettled: vec![],
                in_flight: 1,
                stale: vec![],
                cap: 1,
                view_current: true,
                claimed: None,
                claim_to_job: vec![],
                gate: None,
                backoff_until: None,
            };
            assert_ne!(report.result(), AdmissionResult::Error);
            assert_eq!(hold.kind().as_str(), report.result().as_str(), "{hold:?}");
            kinds.insert(hold.kind());
        }
        assert_eq!(Decision::Admit { in_flight: 0 }.hold_kind(), LaneHold::None);
        kinds.insert(LaneHold::None);
        use tcab_shared::metrics::labels::LabelValue;
        assert_eq!(
            kinds.len(),
            LaneHold::ALL.len(),
            "every kind is one a hold has"
        );
    }

    #[test]
    fn a_cap_of_zero_pauses_the_lane_whatever_else_holds() {
        let mut s = snapshot(0, 0);
        let mut gate = GateVerdict::Open;
        assert_eq!(decide(&s, &gate), Decision::Hold(HoldReason::Paused));
        s.view = ViewState::Listing;
        gate = closed(GateReason::RenewalStale);
        s.live_cached = 3;
        assert_eq!(decide(&s, &gate), Decision::Hold(HoldReason::Paused));
        s.input.enabled = false;
        assert_eq!(decide(&s, &gate), Decision::Hold(HoldReason::Disabled));
    }

    #[test]
    fn reasons_come_in_a_fixed_order() {
        let mut s = snapshot(0, 0);
        let mut gate = GateVerdict::Open;
        s.input.enabled = false;
        s.view = ViewState::Failed("500 Internal Server Error".into());
        assert_eq!(decide(&s, &gate), Decision::Hold(HoldReason::Disabled));
        s.input.enabled = true;
        assert_eq!(decide(&s, &gate), Decision::Hold(HoldReason::Paused));
        s.input.cap = 1;
        match decide(&s, &gate) {
            Decision::Hold(HoldReason::ViewNotCurrent { why }) => {
                assert!(why.contains("500 Internal Server Error"), "{why}")
            }
            other => panic!("expected a view hold, got {other:?}"),
        }
        s.view = ViewState::Listing;
        assert!(matches!(
            decide(&s, &gate),
            Decision::Hold(HoldReason::ViewNotCurrent { .. })
        ));
        s.view = ViewState::Current;
        let until = s.now + Duration::from_secs(4);
        s.input.backoff_until = Some(until);
        gate = closed(GateReason::RenewalFailing);
        assert_eq!(
            decide(&s, &gate),
            Decision::Hold(HoldReason::BackingOff { until })
        );
        s.input.backoff_until = Some(s.now);
        s.input.rest_until = Some(until);
        assert_eq!(
            decide(&s, &gate),
            Decision::Hold(HoldReason::Resting { until })
        );
        s.input.rest_until = None;
        s.input.cap = 1;
        s.live_cached = 1;
        assert_eq!(
            decide(&s, &gate),
            Decision::Hold(HoldReason::LaneFull {
                in_flight: 1,
                cap: 1
            })
        );
        s.live_cached = 0;
        assert_eq!(
            decide(&s, &gate),
            Decision::Hold(HoldReason::GateClosed(GateClosed {
                reason: GateReason::RenewalFailing,
                detail: "why".into()
            }))
        );
        gate = GateVerdict::Open;
        assert!(decide(&s, &gate).admits());
    }

    fn base_instant() -> Instant {
        use std::sync::OnceLock;
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    fn arb_view() -> impl Strategy<Value = ViewState> {
        prop_oneof![
            4 => Just(ViewState::Current),
            1 => Just(ViewState::Listing),
            1 => Just(ViewState::Failed("watch error".into())),
        ]
    }

    fn arb_gate() -> impl Strategy<Value = GateVerdict> {
        prop_oneof![
            Just(GateVerdict::Open),
            Just(closed(GateReason::RenewalStale))
        ]
    }

    fn arb_names() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(0u8..30, 0..4)
            .prop_map(|v| v.into_iter().map(|n| format!("j{n}")).collect())
    }

    fn arb_snapshot() -> impl Strategy<Value = (LaneSnapshot, GateVerdict)> {
        (
            (any::<bool>(), 0u32..6, arb_names(), arb_names()),
            (
                proptest::option::of(0u64..10),
                proptest::option::of(0u64..10),
                arb_gate(),
            ),
            (0u64..10, arb_view(), 0u32..8),
        )
            .prop_map(
                |(
                    (enabled, cap, created_unseen, unsettled),
                    (backoff, rest, gate),
                    (now, view, live_cached),
                )| {
                    (
                        LaneSnapshot {
                            now: base_instant() + Duration::from_secs(now),
                            view,
                            live_cached,
                            input: LaneInput {
                                enabled,
                                cap,
                                created_unseen,
                                unsettled,
                                backoff_until: backoff
                                    .map(|s| base_instant() + Duration::from_secs(s)),
                                rest_until: rest.map(|s| base_instant() + Duration::from_secs(s)),
                            },
                        },
                        gate,
                    )
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(6),
            ..ProptestConfig::default()
        })]

        /// An admission never takes a lane past its cap, and happens only
        /// with the lane enabled, the view current and the gate open;
        /// repeating the decision with each admission recorded as an unseen
        /// Job stops at the cap.
        #[test]
        fn never_exceeds_a_cap((s, gate) in arb_snapshot()) {
            let mut s = s;
            let start = in_flight(s.live_cached, &s.input.created_unseen, &s.input.unsettled);
            for k in 0..10 {
                let n = in_flight(s.live_cached, &s.input.created_unseen, &s.input.unsettled);
                if let Decision::Admit { in_flight } = decide(&s, &gate) {
                    prop_assert_eq!(in_flight, n);
                    prop_assert!(n < s.input.cap);
                    prop_assert!(gate.is_open());
                    prop_assert!(s.input.enabled && s.view.is_current());
                    s.input.created_unseen.push(format!("new-{k}"));
                }
            }
            let n = in_flight(s.live_cached, &s.input.created_unseen, &s.input.unsettled);
            prop_assert!(n <= s.input.cap.max(start));
        }

        /// Shuffling or repeating the names changes nothing.
        #[test]
        fn deterministic_under_reordering((s, gate) in arb_snapshot(), seed in any::<u64>()) {
            let base = decide(&s, &gate);
            let mut shuffled = s.clone();
            for list in [&mut shuffled.input.created_unseen, &mut shuffled.input.unsettled] {
                let k = if list.is_empty() { 0 } else { (seed as usize) % list.len() };
                list.rotate_left(k);
                list.reverse();
                if let Some(first) = list.first().cloned() {
                    list.push(first);
                }
            }
            prop_assert_eq!(decide(&shuffled, &gate), base);
        }
    }
}
