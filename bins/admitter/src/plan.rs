//! The admission decision: a pure function from a snapshot of what the
//! admitter knows (cached Jobs, Jobs it created that the cache has not shown
//! yet, caps, back-offs, the admission gate, `now`) to one decision per lane.
//!
//! Each lane is decided on its own inputs only, so nothing about one lane
//! (a full lane, a back-off, a closed gate) can hold the other. Inputs are
//! sorted and de-duplicated first, so a reordered snapshot gives the same plan.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};
use tcab_shared::Lane;
use tcab_shared::cluster::JobSummary;

/// What the admission gate says about one lane: may the admitter claim?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateState {
    /// The lease-keeper's last renewal round for this lane succeeded recently.
    Open,
    /// Claiming now could requeue a job whose Job is alive; the reason says why.
    Closed(String),
}

impl GateState {
    /// Whether the gate lets a claim through.
    pub fn is_open(&self) -> bool {
        matches!(self, GateState::Open)
    }
}

/// Everything one lane's decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneInput {
    /// Whether the lane is configured at all (publish: a publisher image is set).
    pub enabled: bool,
    /// The lane's cap on non-terminal Jobs.
    pub cap: u32,
    /// Names of Jobs this admitter created in this lane that the cache may
    /// not have shown yet. Counted unless the cache already holds that name.
    pub created_unseen: Vec<String>,
    /// The lane is backing off until then (consecutive failures).
    pub backoff_until: Option<Instant>,
    /// The lane's last claim came back empty; it rests until then.
    pub rest_until: Option<Instant>,
    /// The admission gate's answer for this lane.
    pub gate: GateState,
}

/// A snapshot of everything the admission decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The decision's clock.
    pub now: Instant,
    /// Whether the Job cache has finished its first full list.
    pub cache_ready: bool,
    /// The owned Jobs, as cached (any order).
    pub jobs: Vec<JobSummary>,
    /// The run lane.
    pub run: LaneInput,
    /// The publish lane.
    pub publish: LaneInput,
}

impl Snapshot {
    /// The input of one lane.
    pub fn lane(&self, lane: Lane) -> &LaneInput {
        match lane {
            Lane::Run => &self.run,
            Lane::Publish => &self.publish,
        }
    }
}

/// Why a lane does not admit this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// The lane is not configured (publish without a publisher image).
    Disabled,
    /// The cache has not finished its first list: counts are unknown.
    CacheNotReady,
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
        /// Live cached Jobs plus created-but-unseen Jobs of the lane.
        in_flight: u32,
        /// The lane's cap.
        cap: u32,
    },
    /// The admission gate is closed for this lane.
    GateClosed {
        /// Why, as the gate said.
        why: String,
    },
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::Disabled => f.write_str("lane disabled"),
            HoldReason::CacheNotReady => f.write_str("job cache not ready yet"),
            HoldReason::BackingOff { .. } => f.write_str("backing off after failures"),
            HoldReason::Resting { .. } => f.write_str("queue was empty at the last claim"),
            HoldReason::LaneFull { in_flight, cap } => write!(f, "lane full ({in_flight}/{cap})"),
            HoldReason::GateClosed { why } => write!(f, "admission gate closed: {why}"),
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
}

/// The decision for both lanes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The run lane (driver Jobs).
    pub run: Decision,
    /// The publish lane (publisher Jobs).
    pub publish: Decision,
}

impl Plan {
    /// The decision of one lane.
    pub fn lane(&self, lane: Lane) -> &Decision {
        match lane {
            Lane::Run => &self.run,
            Lane::Publish => &self.publish,
        }
    }
}

/// The number of non-terminal Jobs of `lane`: live cached Jobs plus the
/// created-but-unseen names the cache does not hold (each name once).
pub fn in_flight(jobs: &[JobSummary], lane: Lane, created_unseen: &[String]) -> u32 {
    // Cached names are unique (the cache is keyed by name), so a count of
    // the live ones is order-independent. The unseen list is short (at most
    // a cap's worth), so each is looked up in the cache directly.
    let live = jobs
        .iter()
        .filter(|j| j.lane == lane && j.is_live())
        .count();
    let unseen = created_unseen
        .iter()
        .map(String::as_str)
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .filter(|name| !jobs.iter().any(|j| j.name == *name))
        .count();
    u32::try_from(live + unseen).unwrap_or(u32::MAX)
}

/// Decides one lane. The checks run in a fixed order, so the reason given is
/// the first that holds: disabled, cache not ready, backing off, resting,
/// full, gate.
pub fn decide_lane(snapshot: &Snapshot, lane: Lane) -> Decision {
    let input = snapshot.lane(lane);
    if !input.enabled {
        return Decision::Hold(HoldReason::Disabled);
    }
    if !snapshot.cache_ready {
        return Decision::Hold(HoldReason::CacheNotReady);
    }
    if let Some(until) = input.backoff_until
        && until > snapshot.now
    {
        return Decision::Hold(HoldReason::BackingOff { until });
    }
    if let Some(until) = input.rest_until
        && until > snapshot.now
    {
        return Decision::Hold(HoldReason::Resting { until });
    }
    let n = in_flight(&snapshot.jobs, lane, &input.created_unseen);
    if n >= input.cap {
        return Decision::Hold(HoldReason::LaneFull {
            in_flight: n,
            cap: input.cap,
        });
    }
    if let GateState::Closed(why) = &input.gate {
        return Decision::Hold(HoldReason::GateClosed { why: why.clone() });
    }
    Decision::Admit { in_flight: n }
}

/// Decides both lanes, each from its own inputs.
pub fn plan(snapshot: &Snapshot) -> Plan {
    Plan {
        run: decide_lane(snapshot, Lane::Run),
        publish: decide_lane(snapshot, Lane::Publish),
    }
}

/// How long the admitter waits after `failures` consecutive failures of a
/// lane: one second doubled per further failure, at most `max`.
pub fn backoff_delay(failures: u32, max: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let doublings = (failures - 1).min(16);
    Duration::from_secs(1u64 << doublings).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use tcab_shared::cluster::JobPhase;

    fn job(name: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        JobSummary {
            name: name.to_owned(),
            lane,
            job_id: Some(name.to_owned()),
            claim: None,
            phase,
            failed_pods: 0,
            created_at: None,
        }
    }

    fn lane_input(cap: u32) -> LaneInput {
        LaneInput {
            enabled: true,
            cap,
            created_unseen: vec![],
            backoff_until: None,
            rest_until: None,
            gate: GateState::Open,
        }
    }

    fn snapshot(jobs: Vec<JobSummary>) -> Snapshot {
        Snapshot {
            now: Instant::now(),
            cache_ready: true,
            jobs,
            run: lane_input(2),
            publish: lane_input(2),
        }
    }

    #[test]
    fn counts_live_jobs_of_the_lane_and_unseen_creations() {
        let jobs = vec![
            job("r1", Lane::Run, JobPhase::Live),
            job("r2", Lane::Run, JobPhase::Succeeded),
            job("r3", Lane::Run, JobPhase::Failed),
            job("p1", Lane::Publish, JobPhase::Live),
        ];
        assert_eq!(in_flight(&jobs, Lane::Run, &[]), 1);
        assert_eq!(in_flight(&jobs, Lane::Publish, &[]), 1);
        // An unseen name counts once; a name the cache already shows counts as cached.
        let unseen = vec![
            "r9".to_owned(),
            "r9".to_owned(),
            "r1".to_owned(),
            "r2".to_owned(),
        ];
        assert_eq!(in_flight(&jobs, Lane::Run, &unseen), 2);
    }

    #[test]
    fn admits_under_the_cap_and_holds_at_it() {
        let mut s = snapshot(vec![job("r1", Lane::Run, JobPhase::Live)]);
        assert_eq!(plan(&s).run, Decision::Admit { in_flight: 1 });
        s.run.created_unseen.push("r2".into());
        assert_eq!(
            plan(&s).run,
            Decision::Hold(HoldReason::LaneFull {
                in_flight: 2,
                cap: 2
            })
        );
        assert_eq!(plan(&s).publish, Decision::Admit { in_flight: 0 });
    }

    #[test]
    fn reasons_come_in_a_fixed_order() {
        let mut s = snapshot(vec![]);
        s.publish.enabled = false;
        s.cache_ready = false;
        assert_eq!(plan(&s).publish, Decision::Hold(HoldReason::Disabled));
        assert_eq!(plan(&s).run, Decision::Hold(HoldReason::CacheNotReady));
        s.cache_ready = true;
        let until = s.now + Duration::from_secs(4);
        s.run.backoff_until = Some(until);
        s.run.cap = 0;
        s.run.gate = GateState::Closed("renewal failed".into());
        assert_eq!(
            plan(&s).run,
            Decision::Hold(HoldReason::BackingOff { until })
        );
        s.run.backoff_until = Some(s.now);
        s.run.rest_until = Some(until);
        assert_eq!(plan(&s).run, Decision::Hold(HoldReason::Resting { until }));
        s.run.rest_until = None;
        assert_eq!(
            plan(&s).run,
            Decision::Hold(HoldReason::LaneFull {
                in_flight: 0,
                cap: 0
            })
        );
        s.run.cap = 1;
        assert_eq!(
            plan(&s).run,
            Decision::Hold(HoldReason::GateClosed {
                why: "renewal failed".into()
            })
        );
        s.run.gate = GateState::Open;
        assert!(plan(&s).run.admits());
    }

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let max = Duration::from_secs(60);
        let delays: Vec<u64> = (0..9).map(|n| backoff_delay(n, max).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff_delay(u32::MAX, max), max);
    }

    fn arb_phase() -> impl Strategy<Value = JobPhase> {
        prop_oneof![
            Just(JobPhase::Live),
            Just(JobPhase::Succeeded),
            Just(JobPhase::Failed)
        ]
    }

    fn arb_lane() -> impl Strategy<Value = Lane> {
        prop_oneof![Just(Lane::Run), Just(Lane::Publish)]
    }

    fn arb_gate() -> impl Strategy<Value = GateState> {
        prop_oneof![
            Just(GateState::Open),
            Just(GateState::Closed("stale".into()))
        ]
    }

    /// A lane's input; its unseen names share the lane's name prefix.
    fn arb_lane_input(prefix: &'static str) -> impl Strategy<Value = LaneInput> {
        (
            any::<bool>(),
            0u32..6,
            proptest::collection::vec(0u8..30, 0..4),
            proptest::option::of(0u64..10),
            proptest::option::of(0u64..10),
            arb_gate(),
        )
            .prop_map(
                move |(enabled, cap, unseen, backoff, rest, gate)| LaneInput {
                    enabled,
                    cap,
                    created_unseen: unseen.into_iter().map(|n| format!("{prefix}{n}")).collect(),
                    backoff_until: backoff.map(|s| base_instant() + Duration::from_secs(s)),
                    rest_until: rest.map(|s| base_instant() + Duration::from_secs(s)),
                    gate,
                },
            )
    }

    fn base_instant() -> Instant {
        use std::sync::OnceLock;
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    /// Jobs with unique names (a cache is keyed by name); a run's name starts
    /// with `r`, a publish's with `p`, as the real name prefixes differ.
    fn arb_jobs() -> impl Strategy<Value = Vec<JobSummary>> {
        proptest::collection::btree_map((arb_lane(), 0u8..30), arb_phase(), 0..30).prop_map(|m| {
            m.into_iter()
                .map(|((lane, n), phase)| {
                    let prefix = if lane == Lane::Run { "r" } else { "p" };
                    job(&format!("{prefix}{n}"), lane, phase)
                })
                .collect()
        })
    }

    fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
        (
            any::<bool>(),
            0u64..10,
            arb_jobs(),
            arb_lane_input("r"),
            arb_lane_input("p"),
        )
            .prop_map(|(cache_ready, now, jobs, run, publish)| Snapshot {
                now: base_instant() + Duration::from_secs(now),
                cache_ready,
                jobs,
                run,
                publish,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(6),
            ..ProptestConfig::default()
        })]

        /// An admission never takes a lane to more than its cap: whenever a
        /// lane admits, its count plus the new Job is within the cap, and
        /// repeating the plan with each admission recorded as an unseen Job
        /// stops at the cap.
        #[test]
        fn never_exceeds_a_cap(s in arb_snapshot()) {
            let mut s = s;
            let start: Vec<u32> = Lane::ALL
                .iter()
                .map(|&l| in_flight(&s.jobs, l, &s.lane(l).created_unseen))
                .collect();
            for _ in 0..10 {
                let p = plan(&s);
                for lane in Lane::ALL {
                    let n = in_flight(&s.jobs, lane, &s.lane(lane).created_unseen);
                    if let Decision::Admit { in_flight } = p.lane(lane) {
                        prop_assert_eq!(*in_flight, n);
                        prop_assert!(n < s.lane(lane).cap);
                        prop_assert!(s.lane(lane).gate.is_open());
                        prop_assert!(s.cache_ready && s.lane(lane).enabled);
                    }
                }
                if p.run.admits() {
                    let k = s.run.created_unseen.len();
                    s.run.created_unseen.push(format!("new-run-{k}"));
                }
                if p.publish.admits() {
                    let k = s.publish.created_unseen.len();
                    s.publish.created_unseen.push(format!("new-pub-{k}"));
                }
            }
            // Admissions stop at the cap (a lane already over it admits nothing).
            for (i, lane) in Lane::ALL.into_iter().enumerate() {
                let n = in_flight(&s.jobs, lane, &s.lane(lane).created_unseen);
                prop_assert!(n <= s.lane(lane).cap.max(start[i]));
            }
        }

        /// A lane's decision depends only on its own inputs and its own Jobs:
        /// replacing everything about the other lane changes nothing.
        #[test]
        fn lanes_are_independent(s in arb_snapshot(), other in arb_snapshot()) {
            let base = plan(&s);
            for (keep, swap) in [(Lane::Run, Lane::Publish), (Lane::Publish, Lane::Run)] {
                let mut mixed = s.clone();
                mixed.jobs.retain(|j| j.lane == keep);
                mixed.jobs.extend(other.jobs.iter().filter(|j| j.lane == swap).cloned());
                match swap {
                    Lane::Run => mixed.run = other.run.clone(),
                    Lane::Publish => mixed.publish = other.publish.clone(),
                }
                let mixed_plan = plan(&mixed);
                prop_assert_eq!(mixed_plan.lane(keep), base.lane(keep));
            }
        }

        /// Shuffling the cached Jobs and the unseen names changes nothing.
        #[test]
        fn deterministic_under_reordering(s in arb_snapshot(), seed in any::<u64>()) {
            let base = plan(&s);
            let mut shuffled = s.clone();
            let rotate = |len: usize| if len == 0 { 0 } else { (seed as usize) % len };
            let k = rotate(shuffled.jobs.len());
            shuffled.jobs.rotate_left(k);
            shuffled.jobs.reverse();
            for lane in [&mut shuffled.run, &mut shuffled.publish] {
                let k = rotate(lane.created_unseen.len());
                lane.created_unseen.rotate_left(k);
                lane.created_unseen.reverse();
            }
            prop_assert_eq!(plan(&shuffled), base);
        }
    }
}
