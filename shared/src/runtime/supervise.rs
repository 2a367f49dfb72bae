//! The one supervisor of the three binaries: wait for the first full list of
//! the owned Jobs, then run the binary's loops, each on its own task, until
//! shutdown or until a task they need dies.
//!
//! Whatever stops them, every loop finishes the tick in flight: the loops
//! and the services read a child of the caller's shutdown token, which the
//! supervisor also cancels when the Job watch or a service ends before
//! shutdown, or when a loop panics. [`Supervisor::run`] then returns that
//! death as its error, so the process exits and is restarted.

use crate::job_cache::OwnedJobs;
use crate::metrics::{Health, timed};
use crate::tick::{Tick, Wake, run_loop};
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::task::{AbortHandle, Id, JoinError, JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing::instrument::WithSubscriber as _;

/// How long a service is given to close once the loops have stopped.
pub const SERVICE_GRACE: Duration = Duration::from_secs(5);

/// The loops one binary runs, added by its start closure (see [`Supervisor::run`]).
pub struct Loops {
    stop: CancellationToken,
    health: Health,
    pending: Vec<(&'static str, BoxFuture<'static, u64>)>,
}

impl Loops {
    /// Adds the loop `name` (the `loop` label of the tick metrics and of
    /// readiness): `tick` every `poll` after an idle tick, at once after a
    /// busy one or when `wake` fires, until the supervisor stops it.
    pub fn add<T: Tick + Send + 'static>(
        &mut self,
        name: &'static str,
        poll: Duration,
        wake: Wake,
        tick: T,
    ) {
        let tick = timed(name, &self.health, tick);
        let run = run_loop(poll, self.stop.clone(), wake, tick);
        self.pending.push((name, Box::pin(run)));
    }
}

/// Runs one binary's loops and watches the tasks they need (see the module).
pub struct Supervisor {
    /// Cancelled on shutdown and on any death: what the loops and services read.
    stop: CancellationToken,
    health: Health,
    jobs: OwnedJobs,
    /// The tasks the loops need, each named for the logs and errors.
    tasks: JoinSet<Result<anyhow::Result<()>, JoinError>>,
    names: HashMap<Id, String>,
    /// Tasks spawned elsewhere (the Job watch), which do not stop on a
    /// token: aborted once the loops have stopped, or when this is dropped.
    adopted: Vec<AbortHandle>,
}

impl Supervisor {
    /// A supervisor of loops over `jobs`, fed by the `watch` task; readiness
    /// (`health`) follows the view from now on. It stops on `shutdown`.
    pub fn new(
        shutdown: &CancellationToken,
        health: &Health,
        jobs: &OwnedJobs,
        watch: JoinHandle<()>,
    ) -> Self {
        health.watch_view(jobs.clone());
        let mut supervisor = Supervisor {
            stop: shutdown.child_token(),
            health: health.clone(),
            jobs: jobs.clone(),
            tasks: JoinSet::new(),
            names: HashMap::new(),
            adopted: Vec::new(),
        };
        supervisor.adopted.push(watch.abort_handle());
        let task = supervisor.tasks.spawn(async move { watch.await.map(Ok) });
        supervisor
            .names
            .insert(task.id(), "the watch of owned Jobs".to_owned());
        supervisor
    }

    /// Serves `what` beside the loops, from now on (before the first list):
    /// `service` is given the token to stop on, and is given
    /// [`SERVICE_GRACE`] to close once the loops have stopped. Ending (or
    /// failing) before shutdown stops the loops, and [`Supervisor::run`]
    /// with an error.
    pub fn serve<F>(&mut self, what: &str, service: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let service = service(self.stop.clone());
        let service = async move { Ok(service.await) };
        let task = (self.tasks).spawn(service.in_current_span().with_current_subscriber());
        self.names.insert(task.id(), what.to_owned());
    }

    /// Waits for the first full list of the owned Jobs (nothing is decided
    /// from a view that never listed), then has `start` add the loops and
    /// runs each on its own task until shutdown, or until a needed task
    /// ends or a loop panics. Each loop finishes its tick in flight. Returns
    /// the number of ticks run, or the death that stopped the loops.
    pub async fn run(mut self, start: impl FnOnce(&mut Loops)) -> anyhow::Result<u64> {
        let mut death = None;
        if !self.jobs.is_current() {
            // Each failed attempt of the list says so itself (job_cache).
            tracing::info!(
                "waiting for the first complete list of the owned Jobs before the loops start"
            );
        }
        let listed = loop {
            tokio::select! {
                () = self.jobs.wait_current() => break true,
                () = self.stop.cancelled() => break false,
                Some(ended) = self.tasks.join_next_with_id() => self.ended(ended, &mut death),
            }
        };
        let mut ticks = 0;
        if listed {
            let mut loops = Loops {
                stop: self.stop.clone(),
                health: self.health.clone(),
                pending: Vec::new(),
            };
            start(&mut loops);
            let names: Vec<&'static str> = loops.pending.iter().map(|(name, _)| *name).collect();
            self.health.start_loops(&names);
            let mut running = JoinSet::new();
            for (_, run) in loops.pending {
                // Each loop logs where `run` logs (its span, its subscriber).
                running.spawn(run.in_current_span().with_current_subscriber());
            }
            loop {
                tokio::select! {
                    // Without a loop (none added), it still runs until stopped.
                    () = self.stop.cancelled(), if running.is_empty() => break,
                    joined = running.join_next(), if !running.is_empty() => match joined {
                        None => break,
                        Some(Ok(n)) => ticks += n,
                        Some(Err(error)) => {
                            // A loop ends on its own only by a panic: stop
                            // the others the same orderly way, and fail.
                            tracing::error!(%error, "a loop ended abnormally; stopping");
                            death.get_or_insert(anyhow::Error::new(error).context("a loop panicked"));
                            self.stop.cancel();
                        }
                    },
                    Some(ended) = self.tasks.join_next_with_id() => self.ended(ended, &mut death),
                }
            }
        }
        self.close().await;
        match death {
            Some(error) => Err(error),
            None => Ok(ticks),
        }
    }

    /// A needed task ended: a death (which stops the loops) unless it was
    /// told to stop and closed cleanly.
    fn ended(
        &mut self,
        ended: Result<(Id, Result<anyhow::Result<()>, JoinError>), JoinError>,
        death: &mut Option<anyhow::Error>,
    ) {
        let (id, outcome) = match ended {
            Ok((id, outcome)) => (id, outcome),
            Err(error) => (error.id(), Err(error)),
        };
        let what = self
            .names
            .remove(&id)
            .unwrap_or_else(|| "a task".to_owned());
        let error = match outcome {
            Ok(Ok(())) if self.stop.is_cancelled() => return,
            Ok(Ok(())) => anyhow::anyhow!("{what} stopped"),
            Ok(Err(error)) => error.context(format!("{what} failed")),
            Err(error) => anyhow::Error::new(error).context(format!("{what} panicked")),
        };
        tracing::error!(error = format!("{error:#}"), "{what} ended; stopping");
        death.get_or_insert(error);
        self.stop.cancel();
    }

    /// After the loops: the adopted tasks are aborted, the services (told
    /// to stop with the loops) are given their grace to close.
    async fn close(&mut self) {
        self.stop.cancel();
        for task in &self.adopted {
            task.abort();
        }
        let drained = async { while self.tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(SERVICE_GRACE, drained).await;
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The JoinSet aborts the services; the adopted tasks are not its own.
        for task in &self.adopted {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tick::TickOutcome;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A watch task that never ends on its own.
    fn endless() -> JoinHandle<()> {
        tokio::spawn(std::future::pending())
    }

    /// A tick that takes `took` (or panics, when `took` is zero) and counts
    /// the ticks it finished.
    struct Slow {
        took: Duration,
        done: Arc<AtomicU32>,
    }

    impl Tick for Slow {
        async fn tick(&mut self) -> TickOutcome {
            assert!(!self.took.is_zero(), "a loop panics");
            tokio::time::sleep(self.took).await;
            self.done.fetch_add(1, Ordering::SeqCst);
            TickOutcome::Idle
        }
    }

    fn slow(secs: u64) -> (Slow, Arc<AtomicU32>) {
        let done = Arc::new(AtomicU32::new(0));
        let tick = Slow {
            took: Duration::from_secs(secs),
            done: done.clone(),
        };
        (tick, done)
    }

    fn health() -> Health {
        Health::new(Duration::from_secs(60))
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_before_the_first_list_starts_no_loop() {
        let shutdown = CancellationToken::new();
        let jobs = OwnedJobs::new();
        let supervisor = Supervisor::new(&shutdown, &health(), &jobs, endless());
        shutdown.cancel();
        let ticks = supervisor
            .run(|_| panic!("a loop started before the first list"))
            .await
            .expect("a clean stop");
        assert_eq!(ticks, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_loop_it_still_runs_until_shutdown() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(&shutdown, &health(), &OwnedJobs::listed([]), endless());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        });
        let start = tokio::time::Instant::now();
        let ticks = supervisor.run(|_| {}).await.expect("a clean stop");
        assert_eq!((ticks, start.elapsed()), (0, Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_lets_the_tick_in_flight_finish() {
        let shutdown = CancellationToken::new();
        let health = health();
        let supervisor = Supervisor::new(&shutdown, &health, &OwnedJobs::listed([]), endless());
        let (tick, done) = slow(10);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.cancel();
        });
        let start = tokio::time::Instant::now();
        let ticks = supervisor
            .run(|loops| loops.add("test_finish", Duration::from_secs(1), Wake::never(), tick))
            .await
            .expect("a clean stop");
        assert_eq!((ticks, done.load(Ordering::SeqCst)), (1, 1));
        assert_eq!(start.elapsed(), Duration::from_secs(10), "not cut short");
        assert!(health.ready().is_ok(), "the loop ticked once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_ends_stops_the_loops_after_their_tick_with_an_error() {
        let shutdown = CancellationToken::new();
        let watch = tokio::spawn(tokio::time::sleep(Duration::from_secs(5)));
        let supervisor = Supervisor::new(&shutdown, &health(), &OwnedJobs::listed([]), watch);
        let (tick, done) = slow(10);
        let error = supervisor
            .run(|loops| loops.add("test_watch", Duration::from_secs(1), Wake::never(), tick))
            .await
            .expect_err("the watch died");
        assert_eq!(done.load(Ordering::SeqCst), 1, "the tick finished");
        assert!(
            format!("{error:#}").contains("the watch of owned Jobs stopped"),
            "{error:#}"
        );
        assert!(
            !shutdown.is_cancelled(),
            "the caller's token is the caller's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_service_is_a_death_only_when_it_ends_before_it_is_told() {
        // Ends on its own, before shutdown: the loops stop, with its error.
        let shutdown = CancellationToken::new();
        let mut supervisor =
            Supervisor::new(&shutdown, &health(), &OwnedJobs::listed([]), endless());
        supervisor.serve("the test service", |_| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Err(anyhow::anyhow!("its socket broke"))
        });
        let (tick, _) = slow(1);
        let error = supervisor
            .run(|loops| loops.add("test_service", Duration::from_secs(1), Wake::never(), tick))
            .await
            .expect_err("the service died");
        let error = format!("{error:#}");
        assert!(
            error.contains("the test service failed") && error.contains("its socket broke"),
            "{error}"
        );

        // Ends when told to stop, on shutdown: a clean stop, after it closed.
        let shutdown = CancellationToken::new();
        let mut supervisor =
            Supervisor::new(&shutdown, &health(), &OwnedJobs::listed([]), endless());
        let closed = Arc::new(AtomicU32::new(0));
        let seen = closed.clone();
        supervisor.serve("the test service", move |stop| async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let (tick, _) = slow(1);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        });
        supervisor
            .run(|loops| loops.add("test_service", Duration::from_secs(1), Wake::never(), tick))
            .await
            .expect("a clean stop");
        assert_eq!(closed.load(Ordering::SeqCst), 1, "the service closed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_panics_stops_the_others_after_their_tick() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(&shutdown, &health(), &OwnedJobs::listed([]), endless());
        let (steady, done) = slow(10);
        let (panicking, _) = slow(0);
        let error = supervisor
            .run(|loops| {
                loops.add("test_steady", Duration::from_secs(1), Wake::never(), steady);
                loops.add(
                    "test_panics",
                    Duration::from_secs(1),
                    Wake::never(),
                    panicking,
                );
            })
            .await
            .expect_err("a loop panicked");
        assert_eq!(done.load(Ordering::SeqCst), 1, "the other tick finished");
        assert!(
            format!("{error:#}").contains("a loop panicked"),
            "{error:#}"
        );
    }
}
