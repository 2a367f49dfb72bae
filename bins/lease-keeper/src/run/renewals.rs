//! The renewal loop: every poll interval, one renewal call per lane for the
//! live Jobs in the view, on its own cadence so no death report, lost
//! report or log read can delay it. Each call's outcome goes to the gate at
//! once: the first failed call closes its lane's gate.

use crate::gate::Gate;
use crate::plan::renew::{LaneRenewal, RenewSkip, plan_renewals};
use crate::report::RenewalReport;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tcab_shared::Lane;
use tcab_shared::backend::BackendClient;
use tcab_shared::error_chain;
use tcab_shared::job_cache::{OwnedJobs, Snapshot};
use tcab_shared::lane::PerLane;
use tcab_shared::telemetry::list;
use tcab_shared::tick::{Tick, TickOutcome};
use tokio::time::Instant;

/// The names of Jobs judged dead, shared by the report loop (which judges)
/// and the renewal loop (which stops renewing them).
pub type JudgedDead = Arc<Mutex<BTreeSet<String>>>;

/// The renewal loop's state.
pub struct Renewer {
    backend: BackendClient,
    jobs: OwnedJobs,
    gate: Gate,
    judged_dead: JudgedDead,
    publishing: bool,
    /// The ids each lane renewed last, so a change is logged at info with
    /// the ids that started and stopped being renewed: positions in the view
    /// they were renewed from (4 bytes a live Job, no copy of an id).
    last_renewed: PerLane<Renewed>,
    /// Malformed Jobs already warned about (by name).
    warned: BTreeSet<String>,
}

impl Renewer {
    /// A renewer over these parts.
    pub fn new(
        backend: BackendClient,
        jobs: OwnedJobs,
        gate: Gate,
        judged_dead: JudgedDead,
        publishing: bool,
    ) -> Self {
        Renewer {
            backend,
            jobs,
            gate,
            judged_dead,
            publishing,
            last_renewed: PerLane::default(),
            warned: BTreeSet::new(),
        }
    }

    /// One round: renew both lanes (side by side) from the current view.
    pub async fn round(&mut self) -> RenewalReport {
        let snapshot = self.jobs.snapshot();
        let dead = self
            .judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let plan = plan_renewals(&snapshot, self.publishing, &dead);
        let mut malformed = BTreeSet::new();
        for lane in [Some(&plan.runs), plan.publishes.as_ref()]
            .into_iter()
            .flatten()
        {
            for (name, skip) in &lane.skipped {
                if skip.is_malformed() {
                    malformed.insert(name.clone());
                    if !self.warned.contains(name) {
                        tracing::warn!(job = %name, reason = %skip.describe(), "owned Job skipped by lease renewal; the other Jobs are renewed");
                    }
                } else if *skip == RenewSkip::JudgedDead {
                    tracing::debug!(job = %name, "lease not renewed: judged dead");
                }
            }
        }
        self.warned = malformed;
        let runs = renew(&self.backend, &self.gate, Lane::Run, &plan.runs);
        let publishes = async {
            match &plan.publishes {
                Some(lane) => renew(&self.backend, &self.gate, Lane::Publish, lane).await,
                None => None,
            }
        };
        let (runs, publishes) = futures::join!(runs, publishes);
        let lanes = [
            (Lane::Run, Some(&plan.runs), &runs),
            (Lane::Publish, plan.publishes.as_ref(), &publishes),
        ];
        for (lane, planned, renewed) in lanes {
            if let (Some(planned), Some(positions)) = (planned, renewed) {
                self.log_change(lane, &snapshot, planned, positions);
            }
        }
        RenewalReport {
            runs: runs.map(|renewed| renewed.len()),
            publishes: publishes.map(|renewed| renewed.len()),
        }
    }

    /// The ids `lane` renewed in its last successful call, sorted.
    pub fn renewed(&self, lane: Lane) -> Vec<&str> {
        self.last_renewed[lane].ids().collect()
    }

    /// Logs a change of the lane's renewed set; `positions` are the
    /// renewed ids' positions in the `plan` (planned from `view`).
    fn log_change(
        &mut self,
        lane: Lane,
        view: &Snapshot,
        plan: &LaneRenewal<'_>,
        positions: &[usize],
    ) {
        let mut renewed: Vec<(&str, u32)> = positions
            .iter()
            .map(|&i| (plan.ids[i], plan.at[i]))
            .collect();
        renewed.sort_unstable();
        renewed.dedup_by_key(|(id, _)| *id);
        let now: Vec<&str> = renewed.iter().map(|(id, _)| *id).collect();
        let last: Vec<&str> = self.last_renewed[lane].ids().collect();
        let (started, stopped) = changes(&last, &now);
        if started.is_empty() && stopped.is_empty() {
            tracing::debug!(%lane, count = now.len(), "renewed {} {lane} leases (unchanged)", now.len());
        } else {
            Self::log_changes(lane, now.len(), &started, &stopped);
        }
        // Kept against this round's view even when unchanged: an older view
        // would pin every summary the cache has replaced since.
        self.last_renewed[lane] = Renewed {
            view: Arc::clone(view),
            at: renewed.into_iter().map(|(_, at)| at).collect(),
        };
    }

    fn log_changes(lane: Lane, count: usize, started: &[&str], stopped: &[&str]) {
        // A restart over 10,000 live Jobs starts them all at once: the line
        // names the first few of each side and counts all of them, so it
        // stays one readable line.
        tracing::info!(
            %lane,
            count,
            started = %list(started.iter().take(LOGGED_IDS)),
            started_count = started.len(),
            stopped = %list(stopped.iter().take(LOGGED_IDS)),
            stopped_count = stopped.len(),
            "renewed {count} {lane} leases"
        );
    }
}

/// A lane's last renewed set: positions, sorted by id, in the view it was
/// renewed from. The view is the cache's shared snapshot (the same `Arc`
/// while nothing changes), so keeping it costs nothing until the cache
/// moves on, and then a pointer a Job.
#[derive(Default)]
struct Renewed {
    view: Snapshot,
    at: Vec<u32>,
}

impl Renewed {
    /// The ids, sorted.
    fn ids(&self) -> impl Iterator<Item = &str> {
        self.at.iter().map(|&i| {
            self.view
                .get(i as usize)
                .and_then(|job| job.job_id())
                .unwrap_or_default()
        })
    }
}

/// How many of the ids that started (or stopped) being renewed one info
/// line names; the line counts all of them.
const LOGGED_IDS: usize = 20;

/// The ids of `now` not in `last` (started) and of `last` not in `now`
/// (stopped), both sorted: one walk over the two sorted sets.
fn changes<'l, 'n>(last: &[&'l str], now: &[&'n str]) -> (Vec<&'n str>, Vec<&'l str>) {
    let (mut started, mut stopped) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < last.len() || j < now.len() {
        match (last.get(i), now.get(j)) {
            (Some(l), Some(n)) if l == n => {
                i += 1;
                j += 1;
            }
            (Some(l), Some(n)) if l < n => {
                stopped.push(*l);
                i += 1;
            }
            (_, Some(n)) => {
                started.push(*n);
                j += 1;
            }
            (Some(l), None) => {
                stopped.push(*l);
                i += 1;
            }
            (None, None) => break,
        }
    }
    (started, stopped)
}

/// One lane's renewal call; its outcome reaches the gate at once. The
/// positions in the plan of the ids renewed; `None` when the call failed.
async fn renew(
    backend: &BackendClient,
    gate: &Gate,
    lane: Lane,
    plan: &LaneRenewal<'_>,
) -> Option<Vec<usize>> {
    match backend.renew_leases(lane, &plan.ids).await {
        Ok(renewal) => {
            gate.succeeded(lane, Instant::now());
            for entry in &renewal.skipped {
                // One odd entry is not a failed renewal: the rest stand.
                tracing::warn!(%lane, job_id = entry.id.as_deref().unwrap_or(""), why = %entry.why, "an entry of the renewal answer cannot be read; that lease counts as not renewed");
            }
            let renewed = renewal.renewed;
            if renewed.len() < plan.ids.len() {
                let mut answered = vec![false; plan.ids.len()];
                for &at in &renewed {
                    answered[at] = true;
                }
                let left: Vec<&str> = plan
                    .ids
                    .iter()
                    .zip(answered)
                    .filter_map(|(id, renewed)| (!renewed).then_some(*id))
                    .collect();
                tracing::debug!(%lane, job_ids = %list(&left), "not renewed: the backend no longer drives them");
            }
            Some(renewed)
        }
        Err(error) => {
            let why = error_chain(&error);
            let was_failing = gate.lane(lane).failing.is_some();
            if was_failing {
                tracing::debug!(%lane, error = %why, "lease renewal still failing");
            } else {
                tracing::warn!(%lane, call = error.call().unwrap_or("lease renewal"), reason = error.kind().reason().as_str(), error = %why, "lease renewal failed; the {lane} gate is closed and nothing of the lane is judged lost until a renewal succeeds");
            }
            // The gate's verdict says which lane's renewal failed; the
            // reason it keeps is the call's error alone.
            gate.failed(lane, why);
            None
        }
    }
}

impl Tick for Renewer {
    async fn tick(&mut self) -> TickOutcome {
        self.round().await;
        TickOutcome::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::changes;

    #[test]
    fn a_change_of_the_renewed_set_names_the_ids_that_started_and_stopped() {
        let last = ["r-1", "r-2", "r-4"];
        let (started, stopped) = changes(&last, &["r-2", "r-3", "r-5"]);
        assert_eq!(started, ["r-3", "r-5"]);
        assert_eq!(stopped, ["r-1", "r-4"]);
        let (started, stopped) = changes(&last, &["r-1", "r-2", "r-4"]);
        assert!(started.is_empty() && stopped.is_empty(), "unchanged");
        let (started, stopped) = changes(&[], &["r-1"]);
        assert_eq!((started, stopped), (vec!["r-1"], vec![]));
        let (started, stopped) = changes(&last, &[]);
        assert_eq!((started, stopped), (vec![], vec!["r-1", "r-2", "r-4"]));
    }
}
