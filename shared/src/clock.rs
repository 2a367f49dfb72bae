//! The wall clock, injected: the one source of wall time for decisions that
//! compare against timestamps from elsewhere (a pod's `creationTimestamp`,
//! an HTTP-date `Retry-After`). Tests pass a fixed or stepped clock.
//!
//! Durations and deadlines inside a process are not wall time: they are
//! measured on tokio's monotonic [`tokio::time::Instant`], which tests hold
//! still or move with paused time (`#[tokio::test(start_paused = true)]`,
//! `tokio::time::advance`).

use jiff::Timestamp;
use std::fmt;
use std::sync::Arc;

/// Tells the wall time. Cheap to clone.
#[derive(Clone)]
pub struct WallClock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl WallClock {
    /// The machine's clock.
    pub fn system() -> Self {
        WallClock(Arc::new(Timestamp::now))
    }

    /// A clock that reads `now` (a test's fixed or stepped time, a sim's clock).
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        WallClock(Arc::new(now))
    }

    /// A clock standing at `at`.
    pub fn fixed(at: Timestamp) -> Self {
        Self::from_fn(move || at)
    }

    /// The wall time now.
    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::system()
    }
}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WallClock").field(&self.now()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_reads_what_it_is_given() {
        let at: Timestamp = "2026-11-29T17:00:00Z".parse().unwrap();
        assert_eq!(WallClock::fixed(at).now(), at);
        let steps = std::sync::atomic::AtomicI64::new(0);
        let stepped = WallClock::from_fn(move || {
            let s = steps.fetch_add(60, std::sync::atomic::Ordering::Relaxed);
            Timestamp::from_second(1_800_000_000 + s).unwrap()
        });
        assert_eq!(stepped.now().duration_until(stepped.now()).as_secs(), 60);
        let before = Timestamp::now();
        let system = WallClock::default().now();
        assert!(system >= before && system <= Timestamp::now());
    }
}
