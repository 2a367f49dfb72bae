//! The backend's rules as pure decisions over plain data: which waiting runs
//! are held back, what a driver's report does, what a lost report does, how a
//! held record finishes a run. The database layer gathers the facts, calls
//! these, and writes the result.

use crate::model::{FailureKind, RunState};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A run waiting for a claim (queued or pending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingRun {
    pub id: String,
    pub queue_seq: i64,
    pub harness: String,
    pub model: String,
    pub jam: Option<String>,
}

/// A run a driver is believed to hold (dispatched through storing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrivenRun {
    pub harness: String,
    pub model: String,
    pub jam: Option<String>,
}

/// Why a waiting run is held back (pending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// Its harness already has `limit` runs driven.
    HarnessFull {
        harness: String,
        limit: u32,
        driven: u32,
    },
    /// Another run of the same jam by the same model is driven.
    JamBusy { jam: String, model: String },
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::HarnessFull {
                harness,
                limit,
                driven,
            } => write!(
                f,
                "harness {harness} has {driven} runs in flight (max_parallel {limit})"
            ),
            HoldReason::JamBusy { jam, model } => {
                write!(f, "jam {jam} already has a run by model {model} in flight")
            }
        }
    }
}

/// The verdict on one waiting run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldDecision {
    pub id: String,
    pub queue_seq: i64,
    /// `None`: claimable (queued). `Some`: held back (pending), and why.
    pub hold: Option<HoldReason>,
}

impl HoldDecision {
    /// The state the run should be in.
    pub fn state(&self) -> RunState {
        if self.hold.is_some() {
            RunState::Pending
        } else {
            RunState::Queued
        }
    }
}

/// Decides, for every waiting run, whether a backend rule holds it back.
/// The harness rule is checked first. The answer is sorted by `queue_seq`
/// whatever the order of the inputs. A harness with no entry in `limits`
/// has no limit.
pub fn plan_holds(
    waiting: &[WaitingRun],
    driven: &[DrivenRun],
    limits: &BTreeMap<String, u32>,
) -> Vec<HoldDecision> {
    let mut per_harness: BTreeMap<&str, u32> = BTreeMap::new();
    let mut busy_jams: BTreeSet<(&str, &str)> = BTreeSet::new();
    for d in driven {
        *per_harness.entry(d.harness.as_str()).or_default() += 1;
        if let Some(jam) = &d.jam {
            busy_jams.insert((jam.as_str(), d.model.as_str()));
        }
    }
    let mut sorted: Vec<&WaitingRun> = waiting.iter().collect();
    sorted.sort_by(|a, b| a.queue_seq.cmp(&b.queue_seq).then(a.id.cmp(&b.id)));
    sorted
        .into_iter()
        .map(|w| {
            let in_flight = per_harness.get(w.harness.as_str()).copied().unwrap_or(0);
            let harness_hold = limits
                .get(&w.harness)
                .filter(|limit| in_flight >= **limit)
                .map(|limit| HoldReason::HarnessFull {
                    harness: w.harness.clone(),
                    limit: *limit,
                    driven: in_flight,
                });
            let jam_hold = || {
                w.jam
                    .as_ref()
                    .filter(|jam| busy_jams.contains(&(jam.as_str(), w.model.as_str())))
                    .map(|jam| HoldReason::JamBusy {
                        jam: jam.clone(),
                        model: w.model.clone(),
                    })
            };
            HoldDecision {
                id: w.id.clone(),
                queue_seq: w.queue_seq,
                hold: harness_hold.or_else(jam_hold),
            }
        })
        .collect()
}

/// Whether a finished run was finished by a lost report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostMark {
    /// Never reported lost while driven.
    None,
    /// Finished by a lost report; a late terminal report may still supersede it.
    Lost,
    /// Finished by a lost report, then superseded by a late terminal report.
    Superseded,
}

impl LostMark {
    /// Database encoding.
    pub fn to_i64(self) -> i64 {
        match self {
            LostMark::None => 0,
            LostMark::Lost => 1,
            LostMark::Superseded => 2,
        }
    }

    /// Database decoding (unknown values read as `None`).
    pub fn from_i64(v: i64) -> Self {
        match v {
            1 => LostMark::Lost,
            2 => LostMark::Superseded,
            _ => LostMark::None,
        }
    }
}

/// What the backend knows about a run when a report about it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    pub state: RunState,
    pub lost: LostMark,
    /// The driver handed over a record (`POST /jobs/{id}/record`).
    pub has_record: bool,
}

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The driver reported success.
    Succeeded,
    /// The agent or the case failed: no retry.
    FailedAgent,
    /// The run finishes from the record the driver handed over, with the
    /// state it reached: no retry.
    FromRecord,
    /// The platform failed the run and no record is held: failed as
    /// infrastructure, and an automatic retry is enqueued.
    FailedInfrastructure,
}

/// What a status report does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportDecision {
    /// The same non-terminal state again (a retried report): acknowledged, no change.
    Repeat,
    /// Moves the run forward to a non-terminal state.
    Advance(RunState),
    /// Finishes a driven run.
    Finish(Finish),
    /// A terminal report after a lost report: replaces the lost outcome
    /// (and withdraws its retry unless the new outcome needs one too).
    Supersede(Finish),
}

/// Why a status report is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A driver never reports this state (400).
    #[error(
        "state {0} cannot be reported; report starting, running, validating, storing, succeeded or failed"
    )]
    NotReportable(RunState),
    /// `failure_kind` sent with a state other than failed (400).
    #[error("failure_kind goes only with state failed, not {0}")]
    StrayFailureKind(RunState),
    /// The report would move the run backwards (409).
    #[error("job is {from}; a report of {to} would move it backwards")]
    Backwards { from: RunState, to: RunState },
    /// The run is already finished (409).
    #[error("job is already {0}")]
    Terminal(RunState),
    /// The run is not held by a driver (409).
    #[error("job is {0}, not driven")]
    NotDriven(RunState),
}

impl Refusal {
    /// Whether the refusal is a bad request (400) rather than a conflict (409).
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            Refusal::NotReportable(_) | Refusal::StrayFailureKind(_)
        )
    }
}

/// How a terminal report ends a run. A `failed` report without a kind counts
/// as an agent failure; an infrastructure failure finishes from the held
/// record when there is one.
fn finish_for(state: RunState, kind: Option<FailureKind>, has_record: bool) -> Finish {
    match (state, kind) {
        (RunState::Succeeded, _) => Finish::Succeeded,
        (_, Some(FailureKind::Infrastructure)) if has_record => Finish::FromRecord,
        (_, Some(FailureKind::Infrastructure)) => Finish::FailedInfrastructure,
        _ => Finish::FailedAgent,
    }
}

/// Decides what a status report (`state`, `kind`) does to a run. States move
/// forward only; a terminal run accepts only one late terminal report, and
/// only when a lost report finished it.
pub fn decide_report(
    facts: &RunFacts,
    state: RunState,
    kind: Option<FailureKind>,
) -> Result<ReportDecision, Refusal> {
    let reportable = state.progress().is_some_and(|p| p > 0)
        || matches!(state, RunState::Succeeded | RunState::Failed);
    if !reportable {
        return Err(Refusal::NotReportable(state));
    }
    if kind.is_some() && state != RunState::Failed {
        return Err(Refusal::StrayFailureKind(state));
    }
    let current = facts.state;
    if current.is_terminal() {
        return if facts.lost == LostMark::Lost && state.is_terminal() {
            Ok(ReportDecision::Supersede(finish_for(
                state,
                kind,
                facts.has_record,
            )))
        } else {
            Err(Refusal::Terminal(current))
        };
    }
    let Some(now) = current.progress() else {
        return Err(Refusal::NotDriven(current));
    };
    if state.is_terminal() {
        return Ok(ReportDecision::Finish(finish_for(
            state,
            kind,
            facts.has_record,
        )));
    }
    match state.progress() {
        Some(to) if to == now => Ok(ReportDecision::Repeat),
        Some(to) if to > now => Ok(ReportDecision::Advance(state)),
        _ => Err(Refusal::Backwards {
            from: current,
            to: state,
        }),
    }
}

/// What a lost report does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostDecision {
    /// The run is no longer driven: nothing changes.
    Ignore,
    /// The run finishes ([`Finish::FromRecord`] or [`Finish::FailedInfrastructure`]).
    Finish(Finish),
}

/// Decides what `POST /jobs/{id}/lost` does.
pub fn decide_lost(facts: &RunFacts) -> LostDecision {
    if !facts.state.is_driven() {
        LostDecision::Ignore
    } else if facts.has_record {
        LostDecision::Finish(Finish::FromRecord)
    } else {
        LostDecision::Finish(Finish::FailedInfrastructure)
    }
}

/// The terminal state (and failure kind) of a run finished from its held
/// record. A driver hands its record over before storing (or on SIGTERM),
/// naming the last state it reached: a record from validating on carries a
/// finished, validated result, so the run succeeds from it; a record that
/// says `failed` fails it as the agent's failure; a record taken earlier
/// (starting, running) fails the run as infrastructure, still without a
/// retry (the spec retries nothing once a record is held).
pub fn record_outcome(reached: RunState) -> (RunState, Option<FailureKind>) {
    match reached {
        RunState::Validating | RunState::Storing | RunState::Succeeded => {
            (RunState::Succeeded, None)
        }
        RunState::Failed => (RunState::Failed, Some(FailureKind::Agent)),
        _ => (RunState::Failed, Some(FailureKind::Infrastructure)),
    }
}

/// Whether `state` may be named as `state_reached` in a held record.
pub fn is_recordable(state: RunState) -> bool {
    state.progress().is_some_and(|p| p > 0)
        || matches!(state, RunState::Succeeded | RunState::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config as ProptestConfig, RngSeed};

    fn waiting(id: &str, seq: i64, harness: &str, model: &str, jam: Option<&str>) -> WaitingRun {
        WaitingRun {
            id: id.into(),
            queue_seq: seq,
            harness: harness.into(),
            model: model.into(),
            jam: jam.map(Into::into),
        }
    }

    fn driven(harness: &str, model: &str, jam: Option<&str>) -> DrivenRun {
        DrivenRun {
            harness: harness.into(),
            model: model.into(),
            jam: jam.map(Into::into),
        }
    }

    #[test]
    fn harness_limit_holds_only_that_harness() {
        let limits = BTreeMap::from([("a".to_string(), 1)]);
        let plan = plan_holds(
            &[
                waiting("x2", 2, "a", "m", None),
                waiting("x3", 3, "b", "m", None),
            ],
            &[driven("a", "m", None)],
            &limits,
        );
        assert_eq!(plan[0].id, "x2");
        assert_eq!(
            plan[0].hold,
            Some(HoldReason::HarnessFull {
                harness: "a".into(),
                limit: 1,
                driven: 1
            })
        );
        assert_eq!(plan[1].hold, None);
    }

    #[test]
    fn jam_holds_same_model_under_any_harness() {
        let plan = plan_holds(
            &[
                waiting("a", 1, "h2", "m", Some("j")),
                waiting("b", 2, "h1", "other", Some("j")),
                waiting("c", 3, "h1", "m", Some("k")),
                waiting("d", 4, "h1", "m", None),
            ],
            &[driven("h1", "m", Some("j"))],
            &BTreeMap::new(),
        );
        let held: Vec<bool> = plan.iter().map(|d| d.hold.is_some()).collect();
        assert_eq!(held, [true, false, false, false]);
        assert_eq!(plan[0].state(), RunState::Pending);
        assert!(plan[0].hold.as_ref().unwrap().to_string().contains("jam j"));
    }

    #[test]
    fn zero_limit_holds_everything_of_that_harness() {
        let limits = BTreeMap::from([("a".to_string(), 0)]);
        let plan = plan_holds(&[waiting("x", 1, "a", "m", None)], &[], &limits);
        assert!(plan[0].hold.is_some());
    }

    fn facts(state: RunState) -> RunFacts {
        RunFacts {
            state,
            lost: LostMark::None,
            has_record: false,
        }
    }

    #[test]
    fn reports_move_forward_only() {
        use RunState::*;
        assert_eq!(
            decide_report(&facts(Dispatched), Running, None),
            Ok(ReportDecision::Advance(Running))
        );
        assert_eq!(
            decide_report(&facts(Running), Running, None),
            Ok(ReportDecision::Repeat)
        );
        assert_eq!(
            decide_report(&facts(Storing), Starting, None),
            Err(Refusal::Backwards {
                from: Storing,
                to: Starting
            })
        );
        assert_eq!(
            decide_report(&facts(Succeeded), Running, None),
            Err(Refusal::Terminal(Succeeded))
        );
        assert_eq!(
            decide_report(&facts(Failed), Failed, None),
            Err(Refusal::Terminal(Failed))
        );
        for bad in [Queued, Pending, Dispatched, Cancelled] {
            assert!(
                decide_report(&facts(Running), bad, None)
                    .unwrap_err()
                    .is_bad_request()
            );
        }
        assert!(
            decide_report(&facts(Running), Running, Some(FailureKind::Agent))
                .unwrap_err()
                .is_bad_request()
        );
    }

    #[test]
    fn terminal_reports_pick_their_finish() {
        use RunState::*;
        let with_record = RunFacts {
            has_record: true,
            ..facts(Running)
        };
        assert_eq!(
            decide_report(&facts(Running), Failed, Some(FailureKind::Infrastructure)),
            Ok(ReportDecision::Finish(Finish::FailedInfrastructure))
        );
        assert_eq!(
            decide_report(&with_record, Failed, Some(FailureKind::Infrastructure)),
            Ok(ReportDecision::Finish(Finish::FromRecord))
        );
        assert_eq!(
            decide_report(&with_record, Failed, None),
            Ok(ReportDecision::Finish(Finish::FailedAgent))
        );
        assert_eq!(
            decide_report(&facts(Dispatched), Succeeded, None),
            Ok(ReportDecision::Finish(Finish::Succeeded))
        );
    }

    #[test]
    fn a_lost_run_takes_one_late_terminal_report() {
        use RunState::*;
        let lost = RunFacts {
            state: Failed,
            lost: LostMark::Lost,
            has_record: false,
        };
        assert_eq!(
            decide_report(&lost, Succeeded, None),
            Ok(ReportDecision::Supersede(Finish::Succeeded))
        );
        assert_eq!(
            decide_report(&lost, Running, None),
            Err(Refusal::Terminal(Failed))
        );
        let superseded = RunFacts {
            lost: LostMark::Superseded,
            ..lost
        };
        assert_eq!(
            decide_report(&superseded, Succeeded, None),
            Err(Refusal::Terminal(Failed))
        );
    }

    #[test]
    fn lost_reports() {
        use RunState::*;
        assert_eq!(decide_lost(&facts(Queued)), LostDecision::Ignore);
        assert_eq!(decide_lost(&facts(Succeeded)), LostDecision::Ignore);
        assert_eq!(
            decide_lost(&facts(Dispatched)),
            LostDecision::Finish(Finish::FailedInfrastructure)
        );
        let held = RunFacts {
            has_record: true,
            ..facts(Validating)
        };
        assert_eq!(decide_lost(&held), LostDecision::Finish(Finish::FromRecord));
        assert_eq!(record_outcome(Storing), (Succeeded, None));
        assert_eq!(record_outcome(Validating), (Succeeded, None));
        assert_eq!(record_outcome(Failed).0, Failed);
        assert_eq!(
            record_outcome(Running),
            (Failed, Some(FailureKind::Infrastructure))
        );
        assert!(!is_recordable(Queued) && !is_recordable(Dispatched) && is_recordable(Storing));
    }

    fn arb_waiting() -> impl Strategy<Value = Vec<WaitingRun>> {
        prop::collection::vec((0u8..3, 0u8..3, prop::option::of(0u8..2)), 0..12).prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (h, m, j))| WaitingRun {
                    id: format!("w{i}"),
                    queue_seq: i as i64 + 1,
                    harness: format!("h{h}"),
                    model: format!("m{m}"),
                    jam: j.map(|j| format!("j{j}")),
                })
                .collect()
        })
    }

    fn arb_driven() -> impl Strategy<Value = Vec<DrivenRun>> {
        prop::collection::vec((0u8..3, 0u8..3, prop::option::of(0u8..2)), 0..6).prop_map(|specs| {
            specs
                .into_iter()
                .map(|(h, m, j)| DrivenRun {
                    harness: format!("h{h}"),
                    model: format!("m{m}"),
                    jam: j.map(|j| format!("j{j}")),
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 200,
            rng_seed: RngSeed::Fixed(0x5eed_0003),
            ..ProptestConfig::default()
        })]

        /// Each waiting run gets one verdict, in queue order, independent of
        /// input order; a verdict holds exactly when a rule applies.
        #[test]
        fn holds_follow_the_rules(
            w in arb_waiting(),
            d in arb_driven(),
            limit in 0u32..3,
            rotate in 0usize..12,
        ) {
            let limits = BTreeMap::from([("h0".to_string(), limit)]);
            let plan = plan_holds(&w, &d, &limits);
            let mut shuffled = w.clone();
            if !shuffled.is_empty() {
                let k = rotate % shuffled.len();
                shuffled.rotate_left(k);
                shuffled.reverse();
            }
            let mut d_rev = d.clone();
            d_rev.reverse();
            prop_assert_eq!(&plan, &plan_holds(&shuffled, &d_rev, &limits));
            prop_assert_eq!(plan.len(), w.len());
            prop_assert!(plan.windows(2).all(|p| p[0].queue_seq < p[1].queue_seq));
            for (decision, run) in plan.iter().zip(w.iter()) {
                let in_flight = d.iter().filter(|x| x.harness == run.harness).count() as u32;
                let harness_full = run.harness == "h0" && in_flight >= limit;
                let jam_busy = run.jam.is_some()
                    && d.iter().any(|x| x.jam == run.jam && x.model == run.model);
                prop_assert_eq!(decision.hold.is_some(), harness_full || jam_busy);
            }
        }
    }
}
