//! The one unit of work of every loop ([`Tick`]) and the loop that runs it
//! until shutdown ([`run_loop`]); the supervisor in [`crate::runtime`] runs
//! each binary's loops with it.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What one tick did, which decides whether the loop sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickOutcome {
    /// It changed something that may allow more right away: loop straight back.
    Busy,
    /// Nothing to do: sleep the poll interval.
    Idle,
}

/// Ends an idle sleep early when something happened that a loop should
/// react to at once (see `OwnedJobs::finishes`).
#[derive(Debug)]
pub struct Wake(Option<watch::Receiver<u64>>);

impl Wake {
    /// A wake-up fed by a counter that is bumped on each event.
    pub fn new(rx: watch::Receiver<u64>) -> Wake {
        Wake(Some(rx))
    }

    /// A wake-up that never fires.
    pub fn never() -> Wake {
        Wake(None)
    }

    /// Whether an event happened since the last [`Wake::wait`] or [`Wake::mark_seen`].
    pub fn is_pending(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|rx| rx.has_changed().unwrap_or(false))
    }

    /// Forgets the events so far.
    pub fn mark_seen(&mut self) {
        if let Some(rx) = &mut self.0 {
            rx.borrow_and_update();
        }
    }

    /// Resolves at the next event (at once if one is pending); never, for [`Wake::never`].
    pub async fn wait(&mut self) {
        if let Some(rx) = &mut self.0
            && rx.changed().await.is_ok()
        {
            return;
        }
        std::future::pending().await
    }
}

/// One loop's unit of work, the only one: every loop of every binary is a
/// value implementing it (state lives in the value, not in a closure). A
/// loop runs `tick` again at once after a `Busy` tick and after the poll
/// interval (or a wake-up) after an `Idle` one.
pub trait Tick {
    /// Runs one tick.
    fn tick(&mut self) -> impl Future<Output = TickOutcome> + Send;
}

/// Runs `tick` until `shutdown`. A tick in progress always finishes; a
/// `Busy` tick loops straight back and an `Idle` one gives the heap's free
/// pages back ([`crate::runtime::heap`]) and sleeps `poll`, ended
/// early by `wake` (a Job that finished during or after a tick starts the
/// next tick at once; [`Wake::never`] for none) or by shutdown. Returns how
/// many ticks ran.
pub async fn run_loop<T: Tick>(
    poll: Duration,
    shutdown: CancellationToken,
    mut wake: Wake,
    mut tick: T,
) -> u64 {
    let mut ticks = 0;
    while !shutdown.is_cancelled() {
        // Events from here on (including during the tick) wake the next sleep.
        wake.mark_seen();
        let outcome = tick.tick().await;
        ticks += 1;
        if outcome == TickOutcome::Idle {
            // Caught up: what the busy ticks freed goes back to the system
            // before the sleep (never between busy ticks, so a drain pays nothing).
            crate::runtime::heap::release_free_pages();
            let go_on = tokio::select! {
                _ = tokio::time::sleep(poll) => true,
                _ = wake.wait() => true,
                _ = shutdown.cancelled() => false,
            };
            if !go_on {
                break;
            }
        }
        // Let other tasks run between busy ticks.
        tokio::task::yield_now().await;
    }
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts its ticks where the test can read them; Busy for the first
    /// `busy` ticks, Idle after.
    struct Counting {
        count: Arc<AtomicU32>,
        busy: u32,
    }

    impl Tick for Counting {
        async fn tick(&mut self) -> TickOutcome {
            let n = self.count.fetch_add(1, Ordering::SeqCst);
            if n < self.busy {
                TickOutcome::Busy
            } else {
                TickOutcome::Idle
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_ends_an_idle_sleep_early() {
        let shutdown = CancellationToken::new();
        let (bump, rx) = watch::channel(0u64);
        let count = Arc::new(AtomicU32::new(0));
        let start = tokio::time::Instant::now();
        let handle = tokio::spawn(run_loop(
            Duration::from_secs(60),
            shutdown.clone(),
            Wake::new(rx),
            Counting {
                count: count.clone(),
                busy: 0,
            },
        ));
        while count.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        bump.send_replace(1);
        while count.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "woken, not slept out");
        shutdown.cancel();
        assert_eq!(handle.await.expect("loop task"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn busy_loops_straight_back_idle_sleeps() {
        let shutdown = CancellationToken::new();
        let count = Arc::new(AtomicU32::new(0));
        let start = tokio::time::Instant::now();
        let handle = tokio::spawn(run_loop(
            Duration::from_secs(5),
            shutdown.clone(),
            Wake::never(),
            Counting {
                count: count.clone(),
                busy: 3,
            },
        ));
        // Three busy ticks and the first idle one happen without time passing.
        while count.load(Ordering::SeqCst) < 4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(5)).await;
        while count.load(Ordering::SeqCst) < 5 {
            tokio::task::yield_now().await;
        }
        shutdown.cancel();
        let ticks = handle.await.expect("loop task");
        assert_eq!(
            ticks, 5,
            "shutdown interrupts the sleep without another tick"
        );
    }
}
