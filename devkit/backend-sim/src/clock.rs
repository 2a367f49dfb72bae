//! Time, injected: the sim never reads the wall clock directly, so tests
//! move time instead of sleeping.

use jiff::Timestamp;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A source of the current instant.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The machine's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that stands still until a test moves it.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by` (saturating at jiff's maximum).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        *now = add_millis(*now, ms);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sim's own clock: an inner clock plus an offset that the test-clock
/// endpoint (and [`crate::SimHandle::advance_clock`]) moves forward. Readings
/// are truncated to whole milliseconds, the precision the database stores.
pub(crate) struct SimClock {
    inner: std::sync::Arc<dyn Clock>,
    offset_ms: AtomicI64,
}

impl SimClock {
    pub(crate) fn new(inner: std::sync::Arc<dyn Clock>) -> Self {
        Self {
            inner,
            offset_ms: AtomicI64::new(0),
        }
    }

    /// The current instant in milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner
            .now()
            .as_millisecond()
            .saturating_add(self.offset_ms.load(Ordering::SeqCst))
    }

    /// The inner clock's reading in milliseconds, without the test-clock
    /// offset: the wall clock when the inner clock is the system's.
    pub(crate) fn wall_ms(&self) -> i64 {
        self.inner.now().as_millisecond()
    }

    /// Moves this clock forward by `ms` milliseconds.
    pub(crate) fn advance_ms(&self, ms: i64) {
        self.offset_ms.fetch_add(ms.max(0), Ordering::SeqCst);
    }
}

/// `ts + ms`, saturating at the ends of jiff's range.
pub(crate) fn add_millis(ts: Timestamp, ms: i64) -> Timestamp {
    let target = ts.as_millisecond().saturating_add(ms);
    Timestamp::from_millisecond(target).unwrap_or(if ms >= 0 {
        Timestamp::MAX
    } else {
        Timestamp::MIN
    })
}

/// Milliseconds since the epoch as a timestamp, clamped into jiff's range.
pub(crate) fn ts_from_ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(if ms >= 0 {
        Timestamp::MAX
    } else {
        Timestamp::MIN
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let clock = Arc::new(ManualClock::new(start));
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now().as_millisecond(), start.as_millisecond() + 1500);
    }

    #[test]
    fn sim_clock_adds_its_offset() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let sim = SimClock::new(Arc::new(ManualClock::new(start)));
        sim.advance_ms(120_000);
        sim.advance_ms(-5); // never backwards
        assert_eq!(sim.now_ms(), start.as_millisecond() + 120_000);
        assert_eq!(sim.wall_ms(), start.as_millisecond(), "no offset");
    }
}
