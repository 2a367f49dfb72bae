//! The tick loop every binary runs, and the shutdown handle that stops it.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// What one tick did, which decides whether the loop sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickOutcome {
    /// It changed something that may allow more right away: loop straight back.
    Busy,
    /// Nothing to do: sleep the poll interval.
    Idle,
}

/// A cloneable view of "shutdown was requested".
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// Requests shutdown of every [`Shutdown`] cloned from its pair.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

impl ShutdownTrigger {
    /// Requests shutdown.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A trigger and its shutdown view.
    pub fn channel() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (ShutdownTrigger(tx), Shutdown(rx))
    }

    /// A shutdown that fires on SIGTERM or SIGINT (Ctrl-C).
    pub fn on_signals() -> std::io::Result<Shutdown> {
        use tokio::signal::unix::{SignalKind, signal};
        let (trigger, shutdown) = Shutdown::channel();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received; finishing the current tick"),
                _ = int.recv() => tracing::info!("SIGINT received; finishing the current tick"),
            }
            trigger.trigger();
        });
        Ok(shutdown)
    }

    /// A shutdown that never fires (for tests that stop by other means).
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        Shutdown(rx)
    }

    /// Whether shutdown was requested.
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is requested (or its trigger is dropped).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Sleeps for `duration`, returning early (false) if shutdown comes first.
    pub async fn sleep(&self, duration: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(duration) => true,
            _ = self.wait() => false,
        }
    }
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

/// One loop's unit of work. A loop runs `tick` again at once after a `Busy`
/// tick and after the poll interval (or a wake-up) after an `Idle` one.
pub trait Tick {
    /// Runs one tick.
    fn tick(&mut self) -> impl Future<Output = TickOutcome> + Send;
}

/// Any closure returning a tick future is a [`Tick`].
impl<F, Fut> Tick for F
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TickOutcome> + Send,
{
    fn tick(&mut self) -> impl Future<Output = TickOutcome> + Send {
        self()
    }
}

/// Runs `tick` until shutdown. A tick in progress always finishes; a `Busy`
/// tick loops straight back and an `Idle` one sleeps `poll` (interrupted by
/// shutdown). Returns how many ticks ran.
pub async fn run_loop<T: Tick>(poll: Duration, shutdown: Shutdown, tick: T) -> u64 {
    run_loop_with_wake(poll, shutdown, Wake::never(), tick).await
}

/// As [`run_loop`], but an idle sleep also ends early when `wake` fires: a
/// Job that finished during or after a tick starts the next tick at once.
pub async fn run_loop_with_wake<T: Tick>(
    poll: Duration,
    shutdown: Shutdown,
    mut wake: Wake,
    mut tick: T,
) -> u64 {
    let mut ticks = 0;
    while !shutdown.is_triggered() {
        // Events from here on (including during the tick) wake the next sleep.
        wake.mark_seen();
        let outcome = tick.tick().await;
        ticks += 1;
        if outcome == TickOutcome::Idle {
            let go_on = tokio::select! {
                _ = tokio::time::sleep(poll) => true,
                _ = wake.wait() => true,
                _ = shutdown.wait() => false,
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

    #[tokio::test(start_paused = true)]
    async fn a_wake_ends_an_idle_sleep_early() {
        let (trigger, shutdown) = Shutdown::channel();
        let (bump, rx) = watch::channel(0u64);
        let count = Arc::new(AtomicU32::new(0));
        let c = count.clone();
        let start = tokio::time::Instant::now();
        let handle = tokio::spawn(run_loop_with_wake(
            Duration::from_secs(60),
            shutdown,
            Wake::new(rx),
            move || {
                c.fetch_add(1, Ordering::SeqCst);
                async { TickOutcome::Idle }
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
        trigger.trigger();
        assert_eq!(handle.await.expect("loop task"), 2);
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn busy_loops_straight_back_idle_sleeps() {
        let (trigger, shutdown) = Shutdown::channel();
        let count = Arc::new(AtomicU32::new(0));
        let c = count.clone();
        let start = tokio::time::Instant::now();
        let handle = tokio::spawn(run_loop(Duration::from_secs(5), shutdown, move || {
            let n = c.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 3 {
                    TickOutcome::Busy
                } else {
                    TickOutcome::Idle
                }
            }
        }));
        // Three busy ticks and the first idle one happen without time passing.
        while count.load(Ordering::SeqCst) < 4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(5)).await;
        while count.load(Ordering::SeqCst) < 5 {
            tokio::task::yield_now().await;
        }
        trigger.trigger();
        let ticks = handle.await.expect("loop task");
        assert_eq!(
            ticks, 5,
            "shutdown interrupts the sleep without another tick"
        );
    }
}
