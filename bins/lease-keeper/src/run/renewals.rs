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
use tcab_shared::inline_str::IdStr;
use tcab_shared::job_cache::OwnedJobs;
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
    /// The ids each lane renewed last, sorted, so a change is logged at
    /// info with the ids that started and stopped being renewed (in place:
    /// no heap block per live Job).
    last_renewed: PerLane<Vec<IdStr>>,
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
        for (lane, renewed) in [(Lane::Run, &runs), (Lane::Publish, &publishes)] {
            if let Some(ids) = renewed {
                self.log_change(lane, ids);
            }
        }
        RenewalReport {
            runs: runs.map(|ids| ids.len()),
            publishes: publishes.map(|ids| ids.len()),
        }
    }

    /// The ids `lane` renewed in its last successful call, sorted.
    pub fn renewed(&self, lane: Lane) -> &[IdStr] {
        &self.last_renewed[lane]
    }

    fn log_change(&mut self, lane: Lane, renewed: &[&str]) {
        let mut now: Vec<&str> = renewed.to_vec();
        now.sort_unstable();
        now.dedup();
        let last = &mut self.last_renewed[lane];
        let (started, stopped) = changes(last, &now);
        if started.is_empty() && stopped.is_empty() {
            tracing::debug!(%lane, count = now.len(), "renewed {} {lane} leases (unchanged)", now.len());
            return;
        }
        // A restart over 10,000 live Jobs starts them all at once: the line
        // names the first few of each side and counts all of them, so it
        // stays one readable line.
        tracing::info!(
            %lane,
            count = now.len(),
            started = %list(started.iter().take(LOGGED_IDS)),
            started_count = started.len(),
            stopped = %list(stopped.iter().take(LOGGED_IDS)),
            stopped_count = stopped.len(),
            "renewed {} {lane} leases",
            now.len()
        );
        *last = now.into_iter().map(IdStr::from).collect();
    }
}

/// How many of the ids that started (or stopped) being renewed one info
/// line names; the line counts all of them.
const LOGGED_IDS: usize = 20;

/// The ids of `now` not in `last` (started) and of `last` not in `now`
/// (stopped), both sorted: one walk over the two sorted sets.
fn changes<'a>(last: &'a [IdStr], now: &[&'a str]) -> (Vec<&'a str>, Vec<&'a str>) {
    let (mut started, mut stopped) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < last.len() || j < now.len() {
        match (last.get(i), now.get(j)) {
            (Some(l), Some(n)) if l.as_str() == *n => {
                i += 1;
                j += 1;
            }
            (Some(l), Some(n)) if l.as_str() < *n => {
                stopped.push(l.as_str());
                i += 1;
            }
            (_, Some(n)) => {
                started.push(*n);
                j += 1;
            }
            (Some(l), None) => {
                stopped.push(l.as_str());
                i += 1;
            }
            (None, None) => break,
        }
    }
    (started, stopped)
}

/// One lane's renewal call; its outcome reaches the gate at once. The ids
/// renewed, borrowed from the plan; `None` when the call failed.
async fn renew<'p>(
    backend: &BackendClient,
    gate: &Gate,
    lane: Lane,
    plan: &LaneRenewal<'p>,
) -> Option<Vec<&'p str>> {
    match backend.renew_leases(lane, &plan.ids).await {
        Ok(renewal) => {
            gate.succeeded(lane, Instant::now());
            for entry in &renewal.skipped {
                // One odd entry is not a failed renewal: the rest stand.
                tracing::warn!(%lane, job_id = entry.id.as_deref().unwrap_or(""), why = %entry.why, "an entry of the renewal answer cannot be read; that lease counts as not renewed");
            }
            let renewed: Vec<&str> = renewal.renewed.iter().map(|&at| plan.ids[at]).collect();
            if renewed.len() < plan.ids.len() {
                let mut answered = vec![false; plan.ids.len()];
                for &at in &renewal.renewed {
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

    fn ids(ids: &[&str]) -> Vec<tcab_shared::inline_str::IdStr> {
        ids.iter().map(|s| (*s).into()).collect()
    }

    #[test]
    fn a_change_of_the_renewed_set_names_the_ids_that_started_and_stopped() {
        let last = ids(&["r-1", "r-2", "r-4"]);
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
