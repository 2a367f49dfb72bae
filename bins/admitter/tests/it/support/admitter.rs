//! Both lanes driven one tick at a time, side by side: the test harness
//! over [`LaneAdmitter`], the loop the supervisor runs for each lane.
//! Production runs each lane on its own task; a test ticks both at once and
//! reads what each decided and did.

use tcab_admitter::{AdmissionResult, Decision, LaneAdmitter, LaneOutcome, LaneReport};
use tcab_shared::Lane;
use tcab_shared::lane::PerLane;
use tcab_shared::tick::TickOutcome;

/// Both lanes' loops over one set of edges.
pub struct Admitter {
    lanes: PerLane<LaneAdmitter>,
}

/// The decisions of both lanes in one tick.
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

/// What one [`Admitter::tick`] decided and did in both lanes.
#[derive(Debug)]
pub struct TickReport {
    /// The decision of each lane.
    pub plan: Plan,
    /// The run lane's admission, when it admitted.
    pub run: Option<LaneOutcome>,
    /// The publish lane's admission, when it admitted.
    pub publish: Option<LaneOutcome>,
    /// What settling earlier unsettled creations came to, per lane.
    pub resettled: Vec<(Lane, LaneOutcome)>,
    /// Each lane's result for the admissions metric (run, then publish).
    pub results: [(Lane, AdmissionResult); 2],
}

impl TickReport {
    fn from_lanes(run: LaneReport, publish: LaneReport) -> Self {
        let results = [(Lane::Run, run.result()), (Lane::Publish, publish.result())];
        let resettled = run
            .resettled
            .into_iter()
            .map(|o| (Lane::Run, o))
            .chain(publish.resettled.into_iter().map(|o| (Lane::Publish, o)))
            .collect();
        TickReport {
            plan: Plan {
                run: run.decision,
                publish: publish.decision,
            },
            run: run.outcome,
            publish: publish.outcome,
            resettled,
            results,
        }
    }

    /// The result of one lane.
    pub fn result(&self, lane: Lane) -> AdmissionResult {
        self.results
            .iter()
            .find_map(|&(l, result)| (l == lane).then_some(result))
            .expect("every lane has a result")
    }

    /// Busy when a Job was created for a fresh claim in either lane (as the
    /// lane loops count it, each for itself).
    pub fn outcome(&self) -> TickOutcome {
        if self
            .results
            .iter()
            .any(|(_, r)| *r == AdmissionResult::Created)
        {
            TickOutcome::Busy
        } else {
            TickOutcome::Idle
        }
    }
}

impl Admitter {
    /// Both lanes' loops, as `tcab_admitter::run` builds them.
    pub fn new(lanes: PerLane<LaneAdmitter>) -> Self {
        Admitter { lanes }
    }

    /// The loop of one lane.
    pub fn lane(&mut self, lane: Lane) -> &mut LaneAdmitter {
        &mut self.lanes[lane]
    }

    /// The memory of one lane.
    pub fn lane_state(&self, lane: Lane) -> &tcab_admitter::LaneState {
        self.lanes[lane].state()
    }

    /// One tick of both lanes, side by side (neither waits for the other's
    /// calls, only for the report).
    pub async fn tick(&mut self) -> TickReport {
        let reports = PerLane::join(self.lanes.each_mut().map(LaneAdmitter::tick_report)).await;
        let [run, publish] = reports.into_array();
        TickReport::from_lanes(run, publish)
    }
}
