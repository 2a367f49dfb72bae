//! The admission gate: per lane, the outcome of the lease-keeper's renewal
//! calls, which the admitter asks before it claims anything.
//!
//! A claim is what makes the backend requeue a lapsed `dispatched` job, so the
//! admitter must not claim while leases of live Jobs may be going unrenewed.
//! The gate of a lane therefore closes at once when a renewal call of that
//! lane fails (not at the end of a round), and both lanes close while the
//! lease-keeper's Job view is not current (new Jobs would go unrenewed). The
//! admitter also refuses a last success older than its maximum age.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_proto::vault::{LaneRenewal, RenewalStatus};
use tcab_shared::Lane;
use tcab_shared::job_cache::{OwnedJobs, ViewState};
use tokio::time::Instant;

/// What the gate knows of one lane's renewals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneRenewals {
    /// Whether this lane is renewed at all (publishes only while publishing is on).
    pub enabled: bool,
    /// When a renewal call of this lane last succeeded.
    pub last_success: Option<Instant>,
    /// Why the most recent renewal call failed, when it did.
    pub failing: Option<String>,
}

impl LaneRenewals {
    /// Whether the lane's renewals are healthy: enabled, renewed at least
    /// once, and the latest call succeeded. Lost jobs of a lane are judged
    /// only then.
    pub fn healthy(&self) -> bool {
        self.enabled && self.last_success.is_some() && self.failing.is_none()
    }

    fn wire(&self, now: Instant) -> LaneRenewal {
        LaneRenewal {
            enabled: self.enabled,
            renewed: self.last_success.is_some(),
            age_ms: self
                .last_success
                .map(|at| millis(now.saturating_duration_since(at)))
                .unwrap_or(0),
            failing: self.failing.is_some(),
            detail: self.failing.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug, Default)]
struct Lanes {
    runs: LaneRenewals,
    publishes: LaneRenewals,
}

impl Lanes {
    fn lane_mut(&mut self, lane: Lane) -> &mut LaneRenewals {
        match lane {
            Lane::Run => &mut self.runs,
            Lane::Publish => &mut self.publishes,
        }
    }
}

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
        let lanes = Lanes {
            runs: LaneRenewals {
                enabled: true,
                ..LaneRenewals::default()
            },
            publishes: LaneRenewals {
                enabled: publishing,
                failing: (!publishing).then(|| {
                    "publishing is off in the lease-keeper (TCAB_PUBLISHER_IMAGE unset)".to_owned()
                }),
                ..LaneRenewals::default()
            },
        };
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
        let state = lanes.lane_mut(lane);
        state.last_success = Some(at);
        state.failing = None;
    }

    /// A renewal call of `lane` failed: the lane's gate closes now.
    pub fn failed(&self, lane: Lane, why: String) {
        self.lock().lane_mut(lane).failing = Some(why);
    }

    /// What the gate knows of one lane.
    pub fn lane(&self, lane: Lane) -> LaneRenewals {
        let lanes = self.lock();
        match lane {
            Lane::Run => lanes.runs.clone(),
            Lane::Publish => lanes.publishes.clone(),
        }
    }

    /// What the gate tells the admitter at `now`.
    pub fn status(&self, now: Instant) -> RenewalStatus {
        let lanes = self.lock();
        let view = self.view.view_state();
        RenewalStatus {
            runs: Some(lanes.runs.wire(now)),
            publishes: Some(lanes.publishes.wire(now)),
            view_current: view.is_current(),
            view_detail: match view {
                ViewState::Current => String::new(),
                ViewState::Listing => "the lease-keeper's Job view has not listed yet".into(),
                ViewState::Failed(why) => format!("the lease-keeper's Job watch failed: {why}"),
            },
        }
    }

    /// Seconds since each lane's last successful renewal (for metrics).
    pub fn ages(&self, now: Instant) -> [(Lane, Option<Duration>); 2] {
        let lanes = self.lock();
        let age = |l: &LaneRenewals| l.last_success.map(|at| now.saturating_duration_since(at));
        [
            (Lane::Run, age(&lanes.runs)),
            (Lane::Publish, age(&lanes.publishes)),
        ]
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lanes = self.lock();
        f.debug_struct("Gate")
            .field("runs", &lanes.runs)
            .field("publishes", &lanes.publishes)
            .field("view", &self.view.view_state())
            .finish()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    #[tokio::test(start_paused = true)]
    async fn a_lane_closes_at_its_first_failed_call_and_reopens_on_success() {
        let gate = Gate::new(true, OwnedJobs::listed([]));
        let s = gate.status(Instant::now());
        assert!(s.view_current);
        let runs = s.runs.unwrap();
        assert!(runs.enabled && !runs.renewed && !runs.failing);

        gate.succeeded(Lane::Run, Instant::now());
        tokio::time::advance(Duration::from_millis(1500)).await;
        let runs = gate.status(Instant::now()).runs.unwrap();
        assert!(runs.renewed && !runs.failing);
        assert_eq!(runs.age_ms, 1500);
        assert!(gate.lane(Lane::Run).healthy());

        gate.failed(Lane::Run, "POST /jobs/leases: 500".into());
        let s = gate.status(Instant::now());
        let runs = s.runs.unwrap();
        assert!(runs.failing && runs.detail.contains("500"));
        assert_eq!(runs.age_ms, 1500, "the last success still ages");
        assert!(!gate.lane(Lane::Run).healthy());
        assert!(!s.publishes.unwrap().failing, "the other lane is untouched");

        gate.succeeded(Lane::Run, Instant::now());
        assert!(gate.lane(Lane::Run).healthy());
    }

    #[tokio::test(start_paused = true)]
    async fn publishing_off_keeps_the_publish_gate_closed() {
        let gate = Gate::new(false, OwnedJobs::listed([]));
        let publishes = gate.status(Instant::now()).publishes.unwrap();
        assert!(!publishes.enabled && publishes.failing);
        assert!(publishes.detail.contains("TCAB_PUBLISHER_IMAGE"));
        assert!(!gate.lane(Lane::Publish).healthy());
    }

    #[test]
    fn the_view_state_reaches_the_admitter() {
        let view = OwnedJobs::new();
        let gate = Gate::new(true, view.clone());
        let s = gate.status(Instant::now());
        assert!(!s.view_current && s.view_detail.contains("not listed"));
        view.apply(Event::Init);
        view.apply(Event::InitDone);
        assert!(gate.status(Instant::now()).view_current);
        view.mark_failed("503 from list");
        let s = gate.status(Instant::now());
        assert!(!s.view_current && s.view_detail.contains("503"));
    }
}
