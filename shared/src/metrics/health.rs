//! The health the probes read.
//!
//! `/healthz` fails when a loop has not finished a tick within
//! [`liveness_bound`] (the poll interval plus [`TICK_CALLS`] of the longest
//! bounded call a tick makes), counted from its previous tick or from its
//! start: a wedged loop gets its container restarted. Before the loops
//! start (the first list of the owned Jobs) it passes: the wait is the Job
//! watch's, which recovers by itself, and `/readyz` shows it.
//!
//! `/readyz` passes once every loop of the container has finished a tick
//! and while the container's Job view is current.

use crate::backend::LOOP_RETRY;
use crate::job_cache::{OwnedJobs, ViewState};
use crate::tick::{Tick, TickOutcome};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::*;

/// The bound `/healthz` holds each loop to: the poll interval (the longest
/// idle sleep between two ticks) plus [`TICK_CALLS`] times the longest one
/// bounded call can take, which is the Kubernetes call timeout or, with a
/// backend, a backend call with the loops' retry ([`LOOP_RETRY`]: every
/// attempt timing out and the longest wait in between), whichever is longer.
///
/// With the defaults (poll 5 s, Kubernetes 15 s, backend 10 s: a backend
/// call takes at most 2 × 10 s + 5 s = 25 s) that is 5 + 12 × 25 = 305 s.
pub fn liveness_bound(
    poll: Duration,
    kube_timeout: Duration,
    backend_timeout: Option<Duration>,
) -> Duration {
    let retries = LOOP_RETRY.max_retries;
    let backend = backend_timeout
        .map(|t| t.saturating_mul(retries + 1) + LOOP_RETRY.max_wait.saturating_mul(retries))
        .unwrap_or_default();
    poll + kube_timeout.max(backend).saturating_mul(TICK_CALLS)
}

/// One loop's heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// When the loop last finished a tick, or started when it has not yet.
    pub since: Instant,
    /// Whether it has finished a tick.
    pub ticked: bool,
}

/// Whether every loop finished a tick within `bound` of `now`: `Ok` with a
/// short word for the probe, or `Err` naming the first loop that did not.
pub fn liveness(
    now: Instant,
    bound: Duration,
    loops: &BTreeMap<&'static str, Beat>,
) -> Result<String, String> {
    for (name, beat) in loops {
        let quiet = now.saturating_duration_since(beat.since);
        if quiet > bound {
            let what = if beat.ticked {
                "finished no tick"
            } else {
                "has not finished its first tick"
            };
            return Err(format!(
                "loop {name} {what} for {:.1}s (bound {:.1}s)",
                quiet.as_secs_f64(),
                bound.as_secs_f64()
            ));
        }
    }
    if loops.is_empty() {
        Ok("ok: the loops have not started (waiting for the first list of the owned Jobs)".into())
    } else {
        Ok("ok".into())
    }
}

/// Whether the container is ready: its Job view is current and every loop
/// has finished a tick. `Err` says why not.
pub fn readiness(
    view: Option<&ViewState>,
    loops: &BTreeMap<&'static str, Beat>,
) -> Result<String, String> {
    match view {
        None => return Err("the Job view has not started".into()),
        Some(ViewState::Current) => {}
        Some(ViewState::Listing) => return Err("the owned Jobs are not listed yet".into()),
        Some(ViewState::Failed(why)) => {
            return Err(format!(
                "the Job view is not current: the watch failed ({why})"
            ));
        }
    }
    if loops.is_empty() {
        return Err("the loops have not started".into());
    }
    if let Some(name) = loops.iter().find(|(_, b)| !b.ticked).map(|(n, _)| n) {
        return Err(format!("loop {name} has not finished its first tick"));
    }
    Ok("ok".into())
}

struct HealthState {
    bound: Duration,
    view: Option<OwnedJobs>,
    loops: BTreeMap<&'static str, Beat>,
}

/// What the probes read: each loop's heartbeat and the Job view. Cheap to
/// clone; every clone shares the same state.
#[derive(Clone)]
pub struct Health(Arc<Mutex<HealthState>>);

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Health")
            .field("bound", &state.bound)
            .field("view", &state.view.as_ref().map(OwnedJobs::view_state))
            .field("loops", &state.loops)
            .finish()
    }
}

impl Health {
    /// Health with no view and no loop yet; loops are held to `bound`.
    pub fn new(bound: Duration) -> Self {
        Health(Arc::new(Mutex::new(HealthState {
            bound,
            view: None,
            loops: BTreeMap::new(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bound each loop is held to.
    pub fn bound(&self) -> Duration {
        self.lock().bound
    }

    /// The Job view readiness follows.
    pub fn watch_view(&self, view: OwnedJobs) {
        self.lock().view = Some(view);
    }

    /// Whether the Job view is current (false before there is one).
    pub fn view_current(&self) -> bool {
        self.lock().view.as_ref().is_some_and(OwnedJobs::is_current)
    }

    /// The container's loops start now: each is held to the bound from
    /// here, and readiness waits for each one's first tick. Call once with
    /// every loop, before any of them ticks.
    pub fn start_loops(&self, names: &[&'static str]) {
        let now = Instant::now();
        let mut state = self.lock();
        for name in names {
            state.loops.insert(
                name,
                Beat {
                    since: now,
                    ticked: false,
                },
            );
        }
    }

    /// The loop `name` finished a tick now.
    pub fn ticked(&self, name: &'static str) {
        let now = Instant::now();
        self.lock().loops.insert(
            name,
            Beat {
                since: now,
                ticked: true,
            },
        );
    }

    /// `/healthz`: see [`liveness`].
    pub fn live(&self) -> Result<String, String> {
        let state = self.lock();
        liveness(Instant::now(), state.bound, &state.loops)
    }

    /// `/readyz`: see [`readiness`].
    pub fn ready(&self) -> Result<String, String> {
        let state = self.lock();
        let view = state.view.as_ref().map(OwnedJobs::view_state);
        readiness(view.as_ref(), &state.loops)
    }
}

/// A loop that times each tick into the tick-duration histogram and beats
/// its heart in [`Health`].
pub struct Timed<T> {
    name: &'static str,
    tick: T,
    health: Health,
}

/// Wraps `tick`, the loop named `name` (the `loop` label).
pub fn timed<T: Tick>(name: &'static str, health: &Health, tick: T) -> Timed<T> {
    Timed {
        name,
        tick,
        health: health.clone(),
    }
}

impl<T: Tick + Send> Tick for Timed<T> {
    async fn tick(&mut self) -> TickOutcome {
        let started = Instant::now();
        let outcome = self.tick.tick().await;
        common().observe_tick(self.name, started.elapsed());
        self.health.ticked(self.name);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_cache::OwnedJobs;
    use kube::runtime::watcher::Event;

    #[test]
    fn the_bound_grows_with_the_poll_interval_and_the_timeouts() {
        let s = Duration::from_secs;
        // The documented defaults: a backend call takes at most 2 x 10 + 5 s.
        assert_eq!(liveness_bound(s(5), s(15), Some(s(10))), s(305));
        // Without a backend (the reaper with the sweep off) the Kubernetes timeout rules.
        assert_eq!(liveness_bound(s(5), s(15), None), s(5 + 12 * 15));
        // A longer Kubernetes timeout wins over the backend's.
        assert_eq!(liveness_bound(s(1), s(40), Some(s(1))), s(1 + 12 * 40));
        assert!(
            liveness_bound(s(60), s(15), Some(s(10))) > liveness_bound(s(5), s(15), Some(s(10)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_ticking_fails_liveness_after_the_bound() {
        let bound = Duration::from_secs(100);
        let health = Health::new(bound);
        assert!(health.live().is_ok(), "no loop has started: alive");
        health.start_loops(&["renew", "report"]);
        tokio::time::advance(Duration::from_secs(60)).await;
        health.ticked("renew");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(health.live().is_ok(), "exactly at the bound is still alive");
        tokio::time::advance(Duration::from_millis(1)).await;
        let why = health.live().expect_err("report never finished a tick");
        assert!(
            why.contains("report") && why.contains("first tick"),
            "{why}"
        );
        health.ticked("report");
        assert_eq!(health.live(), Ok("ok".into()));
        tokio::time::advance(Duration::from_secs(61)).await;
        let why = health.live().expect_err("renew's last tick is 101 s old");
        assert!(
            why.starts_with("loop renew finished no tick for 101.0s"),
            "{why}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ready_once_the_view_is_current_and_every_loop_ticked() {
        let health = Health::new(Duration::from_secs(10));
        assert!(health.ready().unwrap_err().contains("not started"));
        let view = OwnedJobs::new();
        health.watch_view(view.clone());
        assert!(health.ready().unwrap_err().contains("not listed"));
        view.apply(Event::Init);
        view.apply(Event::InitDone);
        assert!(health.ready().unwrap_err().contains("loops"));
        health.start_loops(&["admit_run", "admit_publish"]);
        health.ticked("admit_run");
        let why = health.ready().unwrap_err();
        assert!(why.contains("admit_publish"), "{why}");
        health.ticked("admit_publish");
        assert!(health.ready().is_ok());
        view.mark_failed("410 Gone");
        let why = health.ready().unwrap_err();
        assert!(why.contains("410"), "{why}");
        assert!(!health.view_current());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_loop_beats_and_is_timed() {
        let health = Health::new(Duration::from_secs(10));
        health.start_loops(&["test_timed_loop"]);
        struct Slow;
        impl Tick for Slow {
            async fn tick(&mut self) -> TickOutcome {
                tokio::time::sleep(Duration::from_millis(20)).await;
                TickOutcome::Busy
            }
        }
        let mut loop_ = timed("test_timed_loop", &health, Slow);
        assert_eq!(loop_.tick().await, TickOutcome::Busy);
        health.watch_view(OwnedJobs::listed([]));
        assert!(health.ready().is_ok(), "the first tick is done");
        let text = Exporter::new(common()).encode();
        assert!(
            text.contains(
                r#"tcab_dispatcher_tick_duration_seconds_count{loop="test_timed_loop"} 1"#
            ),
            "{text}"
        );
    }
}
