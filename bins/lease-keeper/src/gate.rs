//! The admission gate: the outcome of the lease-keeper's most recent renewal
//! round, which the admitter asks before it claims anything.
//!
//! A claim is what makes the backend requeue a lapsed `dispatched` job, so the
//! admitter must not claim until the leases of live Jobs have been renewed
//! after an outage. The gate records when (on the monotonic clock) the last
//! round finished and whether each lane's renewal call succeeded.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_proto::vault::RenewalStatus;
use tokio::time::Instant;

/// The outcome of one renewal round (one renewal call per lane).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalRound {
    /// When the round finished, on the monotonic clock.
    pub finished_at: Instant,
    /// Whether the run lane's renewal call succeeded.
    pub runs_renewed: bool,
    /// Whether the publish lane's renewal call succeeded (true when publishing is off).
    pub publishes_renewed: bool,
    /// A short reason when a renewal failed; empty when both succeeded.
    pub detail: String,
}

impl RenewalRound {
    /// Whether both lanes renewed.
    pub fn all_renewed(&self) -> bool {
        self.runs_renewed && self.publishes_renewed
    }
}

/// The shared record of the last renewal round; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    last: Arc<Mutex<Option<RenewalRound>>>,
}

impl Gate {
    /// A gate that has observed no round yet (the admitter stays held).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a finished round, replacing the previous one.
    pub fn record(&self, round: RenewalRound) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(round);
    }

    /// The last round recorded, if any.
    pub fn last(&self) -> Option<RenewalRound> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What the gate tells the admitter at `now`.
    pub fn status(&self, now: Instant) -> RenewalStatus {
        status_of(self.last().as_ref(), now)
    }
}

/// The wire status for an optional last round, as seen at `now`.
pub fn status_of(last: Option<&RenewalRound>, now: Instant) -> RenewalStatus {
    match last {
        None => RenewalStatus {
            observed: false,
            age_ms: 0,
            runs_renewed: false,
            publishes_renewed: false,
            detail: "no renewal round has finished since the lease-keeper started".into(),
        },
        Some(round) => {
            let age = now.saturating_duration_since(round.finished_at);
            RenewalStatus {
                observed: true,
                age_ms: millis(age),
                runs_renewed: round.runs_renewed,
                publishes_renewed: round.publishes_renewed,
                detail: round.detail.clone(),
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unobserved_until_a_round_and_ages_with_the_clock() {
        let gate = Gate::new();
        let s = gate.status(Instant::now());
        assert!(!s.observed && !s.runs_renewed && !s.publishes_renewed);
        assert!(!s.detail.is_empty());

        gate.record(RenewalRound {
            finished_at: Instant::now(),
            runs_renewed: true,
            publishes_renewed: false,
            detail: "publish renewal failed: backend unavailable".into(),
        });
        tokio::time::advance(Duration::from_millis(1500)).await;
        let s = gate.status(Instant::now());
        assert!(s.observed && s.runs_renewed && !s.publishes_renewed);
        assert_eq!(s.age_ms, 1500);
        assert!(s.detail.contains("publish"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_in_the_future_reads_as_age_zero() {
        let later = Instant::now() + Duration::from_secs(3);
        let round = RenewalRound {
            finished_at: later,
            runs_renewed: true,
            publishes_renewed: true,
            detail: String::new(),
        };
        assert!(round.all_renewed());
        assert_eq!(status_of(Some(&round), Instant::now()).age_ms, 0);
    }
}
