//! The renewal loop: every poll interval, each lane's live Jobs in the view
//! are renewed (in calls of at most `RENEWAL_BATCH` ids), on its own
//! cadence so no death report, lost report or log read can delay it. Each
//! call's outcome goes to the gate at once: the first failed call closes
//! its lane's gate.

use crate::gate::Gate;
use crate::metrics::KeeperMetrics;
use crate::plan::renew::{LaneRenewal, RenewSkip, plan_renewals};
use crate::report::RenewalReport;
use crate::status::KeeperStatus;
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
        let runs = renew(
            &self.backend,
            &self.gate,
            Lane::Run,
            &plan.runs,
            RENEWAL_BATCH,
        );
        let publishes = async {
            match &plan.publishes {
                Some(lane) => {
                    renew(
                        &self.backend,
                        &self.gate,
                        Lane::Publish,
                        lane,
                        RENEWAL_BATCH,
                    )
                    .await
                }
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

/// At most this many ids go in one renewal call. A lane of 100,000 live
/// Jobs is renewed in calls of this size, one after the other, so a round
/// holds one call's bodies (about 0.4 MB asked and 0.8 MB answered) rather
/// than every lease's at once: the lease-keeper's memory stays flat in the
/// number of Jobs (docs/performance.md). Up to this many live Jobs a lane is
/// one call, as before.
pub(crate) const RENEWAL_BATCH: usize = 10_000;

/// One lane's renewal: its ids in calls of at most `batch` (one call, with
/// no ids, when there are none: it still shows the backend answers). The
/// first failed call closes the lane's gate at once and ends the lane's
/// round, since the calls after it would most likely fail the same way, each
/// after its own timeout; the next round renews every id again. Once every
/// call succeeded the lane counts as renewed at the time its round began,
/// the time its first lease was renewed. The positions in the plan of the
/// ids renewed; `None` when a call failed.
async fn renew(
    backend: &BackendClient,
    gate: &Gate,
    lane: Lane,
    plan: &LaneRenewal<'_>,
    batch: usize,
) -> Option<Vec<usize>> {
    let began = Instant::now();
    let batch = batch.max(1);
    let calls: Vec<&[&str]> = if plan.ids.is_empty() {
        vec![&[]]
    } else {
        plan.ids.chunks(batch).collect()
    };
    let mut renewed = Vec::with_capacity(plan.ids.len());
    for (call, ids) in calls.into_iter().enumerate() {
        let offset = call * batch;
        match backend.renew_leases(lane, ids).await {
            Ok(renewal) => {
                for entry in &renewal.skipped {
                    // One odd entry is not a failed renewal: the rest stand.
                    tracing::warn!(%lane, job_id = entry.id.as_deref().unwrap_or(""), why = %entry.why, "an entry of the renewal answer cannot be read; that lease counts as not renewed");
                }
                renewed.extend(renewal.renewed.into_iter().map(|at| at + offset));
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
                return None;
            }
        }
    }
    gate.succeeded(lane, began);
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

impl Tick for Renewer {
    async fn tick(&mut self) -> TickOutcome {
        self.round().await;
        TickOutcome::Idle
    }
}

/// The renewal loop, recording each round in the metrics and the status
/// document.
pub(super) struct MeteredRenewer {
    renewer: Renewer,
    metrics: Arc<KeeperMetrics>,
    status: Arc<KeeperStatus>,
    publishing: bool,
}

impl MeteredRenewer {
    /// `renewer`, recording into `metrics` and `status`; `publishing` says
    /// whether the publish lane is renewed.
    pub(super) fn new(
        renewer: Renewer,
        metrics: Arc<KeeperMetrics>,
        status: Arc<KeeperStatus>,
        publishing: bool,
    ) -> Self {
        MeteredRenewer {
            renewer,
            metrics,
            status,
            publishing,
        }
    }
}

impl Tick for MeteredRenewer {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.renewer.round().await;
        self.metrics.record_renewals(&report, self.publishing);
        self.status.record_round(Lane::Run, report.runs);
        if self.publishing {
            self.status.record_round(Lane::Publish, report.publishes);
        }
        TickOutcome::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tcab_shared::Secret;

    /// A backend whose `POST /jobs/leases` records each call's ids, fails
    /// call number `fail_at` (from 1) with a 500, and renews every id but
    /// those starting with `gone-` (no longer driven).
    #[derive(Clone)]
    struct Leases {
        calls: Arc<Mutex<Vec<Vec<String>>>>,
        fail_at: Option<usize>,
    }

    impl Leases {
        async fn start(fail_at: Option<usize>) -> (BackendClient, Arc<Mutex<Vec<Vec<String>>>>) {
            let leases = Leases {
                calls: Arc::default(),
                fail_at,
            };
            let calls = Arc::clone(&leases.calls);
            let app = axum::Router::new()
                .route("/jobs/leases", axum::routing::post(Leases::answer))
                .with_state(leases);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            let client =
                BackendClient::new(&url, Secret::new("svc-token"), Duration::from_secs(5)).unwrap();
            (client, calls)
        }

        async fn answer(
            axum::extract::State(leases): axum::extract::State<Leases>,
            axum::Json(body): axum::Json<serde_json::Value>,
        ) -> (http::StatusCode, axum::Json<serde_json::Value>) {
            let ids: Vec<String> = body["job_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_str().unwrap().to_owned())
                .collect();
            let call = {
                let mut calls = leases.calls.lock().unwrap();
                calls.push(ids.clone());
                calls.len()
            };
            if leases.fail_at == Some(call) {
                let error = serde_json::json!({"error": {"code": "internal", "message": "boom"}});
                return (http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error));
            }
            let leases: Vec<serde_json::Value> = ids
                .iter()
                .filter(|id| !id.starts_with("gone-"))
                .map(|id| serde_json::json!({"id": id, "lease_expires_at": "2026-12-06T10:02:00Z"}))
                .collect();
            let answer = serde_json::json!({"now": "2026-12-06T10:00:00Z", "leases": leases});
            (http::StatusCode::OK, axum::Json(answer))
        }
    }

    fn plan<'a>(ids: &[&'a str]) -> LaneRenewal<'a> {
        LaneRenewal {
            ids: ids.to_vec(),
            at: (0..ids.len() as u32).collect(),
            skipped: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_lane_is_renewed_in_calls_of_at_most_the_batch_and_positions_span_them() {
        let (backend, calls) = Leases::start(None).await;
        let gate = Gate::new(false, OwnedJobs::listed([]));
        let ids = ["r-1", "r-2", "gone-3", "r-4", "r-5"];
        let renewed = renew(&backend, &gate, Lane::Run, &plan(&ids), 2).await;
        assert_eq!(
            renewed,
            Some(vec![0, 1, 3, 4]),
            "positions in the whole plan"
        );
        let sizes: Vec<usize> = calls.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
        assert_eq!(
            calls.lock().unwrap().concat(),
            ids,
            "every id asked once, in order"
        );
        let lane = gate.lane(Lane::Run);
        assert!(lane.failing.is_none() && lane.last_success.is_some());
    }

    #[tokio::test]
    async fn a_lane_without_ids_still_makes_one_call() {
        let (backend, calls) = Leases::start(None).await;
        let gate = Gate::new(false, OwnedJobs::listed([]));
        let renewed = renew(&backend, &gate, Lane::Run, &plan(&[]), 2).await;
        assert_eq!(renewed, Some(vec![]));
        assert_eq!(*calls.lock().unwrap(), [Vec::<String>::new()]);
        assert!(
            gate.lane(Lane::Run).last_success.is_some(),
            "the gate opens"
        );
    }

    #[tokio::test]
    async fn the_first_failed_call_closes_the_gate_and_ends_the_lanes_round() {
        let (backend, calls) = Leases::start(Some(2)).await;
        let gate = Gate::new(false, OwnedJobs::listed([]));
        let ids = ["r-1", "r-2", "r-3", "r-4", "r-5"];
        let renewed = renew(&backend, &gate, Lane::Run, &plan(&ids), 2).await;
        assert_eq!(renewed, None);
        assert_eq!(
            calls.lock().unwrap().len(),
            2,
            "no call after the failed one"
        );
        let lane = gate.lane(Lane::Run);
        assert!(
            lane.last_success.is_none(),
            "a part renewed is not a renewal"
        );
        assert!(lane.failing.is_some(), "the lane's gate is closed");
    }

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
