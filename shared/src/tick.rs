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

/// Runs `tick` until shutdown. A tick in progress always finishes; a `Busy`
/// tick loops straight back and an `Idle` one sleeps `poll` (interrupted by
/// shutdown). Returns how many ticks ran.
pub async fn run_loop<F, Fut>(poll: Duration, shutdown: Shutdown, mut tick: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TickOutcome>,
{
    let mut ticks = 0;
    while !shutdown.is_triggered() {
        let outcome = tick().await;
        ticks += 1;
        if outcome == TickOutcome::Idle && !shutdown.sleep(poll).await {
            break;
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
