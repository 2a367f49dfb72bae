//! The admission gate's record: per lane, the outcome of the lease-keeper's
//! renewal calls, beside its Job view. The admitter asks for a lane's
//! verdict before it claims anything; [`Gate::verdict`] judges it from this
//! record with the pure `crate::plan::gate::verdict`, once, and the
//! admitter acts on it as given.
//!
//! A claim is what makes the backend requeue a lapsed `dispatched` job, so the
//! admitter must not claim while leases of live Jobs may be going unrenewed.
//! The gate of a lane therefore closes at once when a renewal call of that
//! lane fails (not at the end of a round), both lanes close while the
//! lease-keeper's Job view is not current (new Jobs would go unrenewed), and
//! a last success older than the admitter's maximum age closes its lane.

pub use crate::plan::gate::LaneRenewals;
use crate::plan::gate::verdict;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_proto::gate::GateVerdict;
use tcab_shared::Lane;
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::lane::PerLane;
use tokio::time::Instant;

type Lanes = PerLane<LaneRenewals>;

/// The shared record of the renewals; cheap to clone.
#[derive(Clone)]
pub struct Gate {
    lanes: Arc<Mutex<Lanes>>,
    view: OwnedJobs,
}

impl Gate {
    /// A gate that has seen no renewal yet (the admitter stays held), over
    /// the lease-keeper's Job view.
    pub fn new(publishing: bool, view: OwnedJobs) -> Self {
        let lanes = Lanes::from_fn(|lane| match lane {
            Lane::Run => LaneRenewals {
                enabled: true,
                ..LaneRenewals::default()
            },
            Lane::Publish => LaneRenewals {
                enabled: publishing,
                failing: (!publishing).then(|| {
                    "publishing is off in the lease-keeper (TCAB_PUBLISHER_IMAGE unset)".to_owned()
                }),
                ..LaneRenewals::default()
            },
        });
        Gate {
            lanes: Arc::new(Mutex::new(lanes)),
            view,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A renewal call of `lane` succeeded at `at`.
    pub fn succeeded(&self, lane: Lane, at: Instant) {
        let mut lanes = self.lock();
        let state = &mut lanes[lane];
        state.last_success = Some(at);
        state.failing = None;
    }

    /// A renewal call of `lane` failed: the lane's gate closes now.
    pub fn failed(&self, lane: Lane, why: String) {
        self.lock()[lane].failing = Some(why);
    }

    /// What the gate knows of one lane.
    pub fn lane(&self, lane: Lane) -> LaneRenewals {
        self.lock()[lane].clone()
    }

    /// The gate of `lane` at `now`, its last successful renewal allowed to
    /// be at most `max_age` old (judged by `crate::plan::gate::verdict`).
    pub fn verdict(&self, lane: Lane, now: Instant, max_age: Duration) -> GateVerdict {
        let renewals = self.lane(lane);
        verdict(lane, &renewals, &self.view.view_state(), now, max_age)
    }

    /// Seconds since each lane's last successful renewal (for metrics).
    pub fn ages(&self, now: Instant) -> PerLane<Option<Duration>> {
        let lanes = self.lock();
        PerLane::from_fn(|lane| {
            lanes[lane]
                .last_success
                .map(|at| now.saturating_duration_since(at))
        })
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lanes = self.lock();
        let mut gate = f.debug_struct("Gate");
        for (lane, renewals) in lanes.iter() {
            gate.field(lane.label_value(), renewals);
        }
        gate.field("view", &self.view.view_state()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use tcab_proto::gate::GateReason;

    const MAX: Duration = Duration::from_secs(60);

    fn reason(v: GateVerdict) -> Option<GateReason> {
        match v {
            GateVerdict::Closed(c) => Some(c.reason),
            GateVerdict::Open => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lane_closes_at_its_first_failed_call_and_reopens_on_success() {
        let gate = Gate::new(true, OwnedJobs::listed([]));
        assert_eq!(
            reason(gate.verdict(Lane::Run, Instant::now(), MAX)),
            Some(GateReason::NeverRenewed)
        );

        gate.succeeded(Lane::Run, Instant::now());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(gate.verdict(Lane::Run, Instant::now(), MAX).is_open());
        assert_eq!(
            reason(gate.verdict(Lane::Run, Instant::now(), Duration::from_millis(1499))),
            Some(GateReason::RenewalStale),
            "the last success ages"
        );
        assert!(gate.lane(Lane::Run).healthy());

        gate.failed(Lane::Run, "POST /jobs/leases: 500".into());
        match gate.verdict(Lane::Run, Instant::now(), MAX) {
            GateVerdict::Closed(c) => {
                assert_eq!(c.reason, GateReason::RenewalFailing);
                assert!(c.detail.contains("500"), "{}", c.detail);
            }
            GateVerdict::Open => panic!("a failed call closes the lane"),
        }
        assert!(!gate.lane(Lane::Run).healthy());
        assert_eq!(
            reason(gate.verdict(Lane::Publish, Instant::now(), MAX)),
            Some(GateReason::NeverRenewed),
            "the other lane is untouched"
        );

        gate.succeeded(Lane::Run, Instant::now());
        assert!(gate.lane(Lane::Run).healthy());
        assert!(gate.verdict(Lane::Run, Instant::now(), MAX).is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn publishing_off_keeps_the_publish_gate_closed() {
        let gate = Gate::new(false, OwnedJobs::listed([]));
        match gate.verdict(Lane::Publish, Instant::now(), MAX) {
            GateVerdict::Closed(c) => {
                assert_eq!(c.reason, GateReason::LaneNotRenewed);
                assert!(c.detail.contains("TCAB_PUBLISHER_IMAGE"), "{}", c.detail);
            }
            GateVerdict::Open => panic!("publishing is off"),
        }
        assert!(!gate.lane(Lane::Publish).healthy());
    }

    #[test]
    fn the_view_state_reaches_the_verdict() {
        let view = OwnedJobs::new();
        let gate = Gate::new(true, view.clone());
        gate.succeeded(Lane::Run, Instant::now());
        let detail = |v: GateVerdict| match v {
            GateVerdict::Closed(c) if c.reason == GateReason::ViewNotCurrent => c.detail,
            other => panic!("expected a view hold, got {other:?}"),
        };
        assert!(detail(gate.verdict(Lane::Run, Instant::now(), MAX)).contains("not listed"));
        view.apply(Event::Init);
        view.apply(Event::InitDone);
        assert!(gate.verdict(Lane::Run, Instant::now(), MAX).is_open());
        view.mark_failed("503 from list");
        assert!(detail(gate.verdict(Lane::Run, Instant::now(), MAX)).contains("503"));
    }
}
