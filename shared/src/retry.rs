//! One way to retry: [`Backoff`] is the schedule of waits (a first wait,
//! grown by a factor per further failure, capped), and [`Retries`] counts
//! the failed attempts of one operation against a bound and tells the wait
//! before the next attempt, or that none is left. [`Sleeper`] is how a
//! retry loop waits, so a test can record the waits instead of sleeping.
//!
//! Its users: the backend client's retry of 429/503 (a constant wait, or the
//! backend's `Retry-After`, capped), the admitter's vault `Put` (a doubling
//! pause, a few attempts), the admitter's lane back-off after failed
//! creates (doubling from 1 s up to a minute, across ticks), the Job
//! watch's wait before it lists again after an error, and the per-job
//! back-off of the lease-keeper's reports ([`PerKey`]: one job whose call
//! keeps failing waits alone, the others go on).
//!
//! Waits are jittered where a back-off says so ([`Backoff::with_jitter`]):
//! each wait is shortened by a random part of up to that share, so many
//! callers that failed together (every job's report while the backend was
//! down, three containers' watches after an API server restart) do not come
//! back in one burst. The random draw is a [`Sample`] passed in, so tests
//! pick it; production draws from [`random_sample`].

use futures::future::BoxFuture;
use std::time::Duration;

/// The waits between attempts: `first` after the first failure, multiplied
/// by `factor` for each further one, never more than `max`; each wait
/// shortened by a random part of up to `jitter_percent` percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after one failure.
    pub first: Duration,
    /// How much each further failure multiplies the wait (1: constant).
    pub factor: u32,
    /// The longest wait.
    pub max: Duration,
    /// The most a wait is shortened by, in percent of it (0: exact waits).
    pub jitter_percent: u8,
}

/// A random draw in `[0, 1)` that picks how much a wait is shortened.
pub type Sample = fn() -> f64;

/// The production [`Sample`]: a uniform draw from a per-thread generator
/// seeded by the OS.
pub fn random_sample() -> f64 {
    fastrand::f64()
}

/// The jitter production back-offs use: a wait is 80-100% of its schedule.
pub const JITTER_PERCENT: u8 = 20;

impl Backoff {
    /// The same `wait` after every failure, capped at `max`.
    pub const fn constant(wait: Duration, max: Duration) -> Self {
        Backoff {
            first: wait,
            factor: 1,
            max,
            jitter_percent: 0,
        }
    }

    /// `first`, doubled per further failure, at most `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            factor: 2,
            max,
            jitter_percent: 0,
        }
    }

    /// The same schedule, each wait shortened by up to `percent` percent
    /// (capped at 100).
    pub const fn with_jitter(self, percent: u8) -> Self {
        Backoff {
            jitter_percent: if percent > 100 { 100 } else { percent },
            ..self
        }
    }

    /// The wait after `failures` consecutive failures, jittered by `sample`
    /// (a draw in `[0, 1)`; 0 keeps the schedule's wait): never longer than
    /// [`Backoff::after`], never shorter than it less `jitter_percent`.
    pub fn wait(&self, failures: u32, sample: f64) -> Duration {
        let nominal = self.after(failures);
        let share = f64::from(self.jitter_percent) / 100.0 * sample.clamp(0.0, 1.0);
        nominal.saturating_sub(nominal.mul_f64(share))
    }

    /// The schedule's wait after `failures` consecutive failures (none after
    /// none), before any jitter.
    pub fn after(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let mut wait = self.first;
        if self.factor > 1 {
            for _ in 1..failures {
                if wait >= self.max {
                    break;
                }
                wait = wait.saturating_mul(self.factor);
            }
        }
        wait.min(self.max)
    }
}

/// The failed attempts of one operation, against a bound of retries.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    backoff: Backoff,
    max_retries: u32,
    failures: u32,
    sample: Sample,
}

impl Retries {
    /// At most `max_retries` attempts after the first, waiting as `backoff` says.
    pub fn new(backoff: Backoff, max_retries: u32) -> Self {
        Retries::with_sample(backoff, max_retries, random_sample)
    }

    /// As [`Retries::new`], jittered by draws from `sample`.
    pub fn with_sample(backoff: Backoff, max_retries: u32, sample: Sample) -> Self {
        Retries {
            backoff,
            max_retries,
            failures: 0,
            sample,
        }
    }

    /// An attempt failed: the wait before the next one, or `None` when no
    /// retry is left. `advertised` (a server's `Retry-After`) replaces the
    /// schedule's wait, within the same cap, unjittered: the server said
    /// when, and an earlier retry would be refused again.
    pub fn failed(&mut self, advertised: Option<Duration>) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.failures > self.max_retries {
            return None;
        }
        let wait = advertised.unwrap_or_else(|| self.backoff.wait(self.failures, (self.sample)()));
        Some(wait.min(self.backoff.max))
    }

    /// The attempts that failed so far (after a last failure, all made).
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// One back-off per key (a job, a call): a key whose call failed is not due
/// again until its own wait passed, which grows with its own consecutive
/// failures; the other keys are not held by it.
#[derive(Debug, Clone)]
pub struct PerKey<K: Ord> {
    backoff: Backoff,
    waits: std::collections::BTreeMap<K, KeyWait>,
    sample: Sample,
}

/// One key's consecutive failures and when it is due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyWait {
    /// Consecutive failures so far.
    pub failures: u32,
    /// Not tried again before then.
    pub until: tokio::time::Instant,
}

impl<K: Ord + Clone> PerKey<K> {
    /// Keys wait as `backoff` says.
    pub fn new(backoff: Backoff) -> Self {
        PerKey::with_sample(backoff, random_sample)
    }

    /// As [`PerKey::new`], jittered by draws from `sample`.
    pub fn with_sample(backoff: Backoff, sample: Sample) -> Self {
        PerKey {
            backoff,
            waits: std::collections::BTreeMap::new(),
            sample,
        }
    }

    /// Whether `key` may be tried at `now`.
    pub fn due(&self, key: &K, now: tokio::time::Instant) -> bool {
        self.waits.get(key).is_none_or(|w| now >= w.until)
    }

    /// The key's call failed at `now`: its wait from now.
    pub fn failed(&mut self, key: &K, now: tokio::time::Instant) -> KeyWait {
        let failures = self
            .waits
            .get(key)
            .map_or(1, |w| w.failures.saturating_add(1));
        let wait = KeyWait {
            failures,
            until: now + self.backoff.wait(failures, (self.sample)()),
        };
        self.waits.insert(key.clone(), wait);
        wait
    }

    /// The key's call succeeded (or needs no more tries): forget its wait.
    pub fn forget(&mut self, key: &K) {
        self.waits.remove(key);
    }

    /// The keys with a wait.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.waits.keys()
    }

    /// Forgets the keys `keep` says no (their jobs are gone).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.waits.retain(|k, _| keep(k));
    }

    /// How many keys are waiting.
    pub fn len(&self) -> usize {
        self.waits.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }
}

/// Waits between attempts. Production uses [`TokioSleeper`]; tests pass one
/// that records the waits and returns at once.
pub trait Sleeper: Send + Sync + 'static {
    /// A future that completes after `wait`.
    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()>;
}

/// Sleeps on the tokio timer (so paused test time moves it).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_doubling_backoff_doubles_up_to_the_max() {
        let max = secs(60);
        let b = Backoff::doubling(secs(1), max);
        let delays: Vec<u64> = (0..9).map(|n| b.after(n).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.after(u32::MAX), max);
        // Uncapped, it saturates instead of overflowing.
        let wide = Backoff::doubling(Duration::from_millis(100), Duration::MAX);
        assert_eq!(wide.after(3), Duration::from_millis(400));
        assert_eq!(wide.after(u32::MAX), Duration::MAX);
    }

    #[test]
    fn a_constant_backoff_waits_the_same_within_its_cap() {
        let b = Backoff::constant(Duration::from_millis(250), secs(30));
        assert_eq!(b.after(1), Duration::from_millis(250));
        assert_eq!(b.after(u32::MAX), Duration::from_millis(250));
        assert_eq!(Backoff::constant(secs(9), secs(5)).after(1), secs(5));
    }

    #[test]
    fn retries_are_bounded_and_an_advertised_wait_is_capped() {
        let mut r = Retries::new(Backoff::constant(secs(1), secs(30)), 2);
        assert_eq!(r.failed(Some(secs(120))), Some(secs(30)));
        assert_eq!(r.failed(None), Some(secs(1)));
        assert_eq!(r.failed(Some(secs(2))), None, "two retries made");
        assert_eq!(r.failures(), 3);

        let mut once = Retries::new(
            Backoff::doubling(Duration::from_millis(100), Duration::MAX),
            2,
        );
        let waits: Vec<_> = std::iter::from_fn(|| once.failed(None)).collect();
        assert_eq!(
            waits,
            [Duration::from_millis(100), Duration::from_millis(200)]
        );

        let mut none = Retries::new(Backoff::constant(secs(1), secs(1)), 0);
        assert_eq!(none.failed(None), None);
    }

    #[test]
    fn a_jittered_wait_is_the_schedule_less_at_most_its_share() {
        let b = Backoff::doubling(secs(10), secs(60)).with_jitter(20);
        assert_eq!(b.wait(1, 0.0), secs(10), "no draw, no jitter");
        assert_eq!(b.wait(1, 0.5), secs(9));
        assert_eq!(b.wait(2, 0.25), secs(19));
        assert_eq!(b.wait(9, 1.0), secs(48), "the cap, less its fifth");
        assert_eq!(b.wait(0, 0.5), Duration::ZERO);
        assert_eq!(b.wait(1, 7.0), secs(8), "a draw outside [0, 1) is clamped");
        assert_eq!(
            Backoff::constant(secs(4), secs(4)).wait(3, 0.9),
            secs(4),
            "no jitter set"
        );
        assert_eq!(b.with_jitter(250).jitter_percent, 100);
        // Production draws spread: a thousand draws are not all one wait.
        let waits: std::collections::BTreeSet<Duration> =
            (0..1000).map(|_| b.wait(1, random_sample())).collect();
        assert!(waits.len() > 100, "{} distinct waits", waits.len());
        assert!(waits.iter().all(|w| (secs(8)..=secs(10)).contains(w)));
    }

    #[test]
    fn retries_jitter_their_schedule_but_not_an_advertised_wait() {
        let half = || 0.5;
        let b = Backoff::constant(secs(10), secs(30)).with_jitter(20);
        let mut r = Retries::with_sample(b, 3, half);
        assert_eq!(r.failed(None), Some(secs(9)));
        assert_eq!(r.failed(Some(secs(20))), Some(secs(20)));
        assert_eq!(r.failed(Some(secs(90))), Some(secs(30)));
        assert_eq!(r.failed(None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_that_fail_together_come_back_apart() {
        static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        fn next() -> f64 {
            let n = DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (n % 4) as f64 / 4.0
        }
        let t0 = tokio::time::Instant::now();
        let mut keys =
            PerKey::with_sample(Backoff::doubling(secs(8), secs(300)).with_jitter(20), next);
        let untils: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| keys.failed(k, t0).until - t0)
            .collect();
        let expected = [8_000, 7_600, 7_200, 6_800].map(Duration::from_millis);
        assert_eq!(untils, expected);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_sleeper_waits_on_tokio_time() {
        let start = tokio::time::Instant::now();
        TokioSleeper.sleep(secs(3)).await;
        assert_eq!(start.elapsed(), secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn each_key_waits_on_its_own_failures() {
        let t0 = tokio::time::Instant::now();
        let mut keys = PerKey::new(Backoff::doubling(
            Duration::from_secs(5),
            Duration::from_secs(300),
        ));
        assert!(keys.due(&"a", t0) && keys.is_empty());
        assert_eq!(keys.failed(&"a", t0).until, t0 + Duration::from_secs(5));
        assert!(!keys.due(&"a", t0 + Duration::from_secs(4)));
        assert!(keys.due(&"b", t0), "another key is not held");
        assert!(keys.due(&"a", t0 + Duration::from_secs(5)));
        let t1 = t0 + Duration::from_secs(5);
        let w = keys.failed(&"a", t1);
        assert_eq!((w.failures, w.until), (2, t1 + Duration::from_secs(10)));
        for _ in 0..10 {
            keys.failed(&"a", t1);
        }
        assert_eq!(
            keys.failed(&"a", t1).until,
            t1 + Duration::from_secs(300),
            "capped"
        );
        keys.forget(&"a");
        assert!(keys.due(&"a", t1));
        keys.failed(&"c", t1);
        keys.retain(|k| *k != "c");
        assert!(keys.is_empty());
    }
}
