//! The sim's clock: wall time that can run faster than real time, so tests
//! can exercise deadlines, grace periods and TTLs in milliseconds.

use jiff::{SignedDuration, Timestamp};
use std::time::{Duration, Instant};

/// Sim time. `now()` starts at the real wall clock and advances `speed`
/// times faster than real time; [`SimClock::sleep`] waits a sim duration.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    origin_real: Instant,
    origin_wall: Timestamp,
    speed: f64,
}

impl SimClock {
    /// A clock running `speed` times faster than real time (1.0 = real time).
    /// Non-positive or non-finite speeds are treated as 1.0.
    pub fn new(speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        SimClock {
            origin_real: Instant::now(),
            origin_wall: Timestamp::now(),
            speed,
        }
    }

    /// How many times faster than real time this clock runs.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// The current sim time.
    pub fn now(&self) -> Timestamp {
        let elapsed = self.origin_real.elapsed().as_secs_f64() * self.speed;
        let nanos = (elapsed * 1e9) as i64;
        self.origin_wall
            .checked_add(SignedDuration::from_nanos(nanos))
            .unwrap_or(self.origin_wall)
    }

    /// The real duration that `sim` takes on this clock.
    pub fn real(&self, sim: Duration) -> Duration {
        Duration::from_secs_f64(sim.as_secs_f64() / self.speed)
    }

    /// The sim duration that `real` takes on this clock.
    pub fn sim_duration(&self, real: Duration) -> Duration {
        Duration::from_secs_f64(real.as_secs_f64() * self.speed)
    }

    /// Waits for `sim` of sim time.
    pub async fn sleep(&self, sim: Duration) {
        tokio::time::sleep(self.real(sim)).await;
    }

    /// Waits until the sim time `at` (returns at once when it has passed).
    pub async fn sleep_until(&self, at: Timestamp) {
        let left = at.duration_since(self.now());
        if left.is_positive() {
            self.sleep(left.unsigned_abs()).await;
        }
    }
}

/// Formats a timestamp the way Kubernetes does: RFC 3339, UTC, whole seconds.
pub fn k8s_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses a Kubernetes timestamp; `None` when absent or malformed.
pub fn parse_time(v: &serde_json::Value) -> Option<Timestamp> {
    v.as_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_clock_scales_durations() {
        let c = SimClock::new(10.0);
        assert_eq!(c.real(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(SimClock::new(-1.0).speed(), 1.0);
    }

    #[test]
    fn formats_whole_seconds() {
        let t: Timestamp = "2026-11-29T17:02:00.123Z".parse().unwrap();
        assert_eq!(k8s_time(t), "2026-11-29T17:02:00Z");
        assert_eq!(
            parse_time(&serde_json::json!("2026-11-29T17:02:00Z"))
                .unwrap()
                .as_second(),
            t.as_second()
        );
    }
}
