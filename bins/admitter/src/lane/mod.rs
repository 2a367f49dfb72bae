//! One lane's loop: each tick settles what earlier ticks left unsettled,
//! takes the lane's snapshot (its live cached Jobs, its memory, whether the
//! Job view is current), reads the gate, decides, and carries out one
//! admission.
//!
//! Each lane runs its own loop on its own task, over the I/O edges both
//! share ([`Edges`]: the Job cache, the backend client, the vault client and
//! the Jobs API, all safe to use at once), so a slow or hung call in one
//! lane never delays the other.
//!
//! Beside this file: `report` (what a tick came to, [`LaneReport`]) and
//! `record` (remembering an admission's outcome and logging it, each hold
//! once, the stale Jobs deleted and the creations left unsettled by earlier
//! ticks).

mod record;
mod report;

pub use report::{AdmissionResult, LaneReport};

use crate::admit::{self, AdmitDeps};
use crate::keeper_client::KeeperClient;
use crate::lanes::LaneState;
use crate::plan::{self, Decision, HoldReason, LaneInput, LaneSnapshot};
use crate::settings::AdmitterSettings;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::fmt;
use std::sync::Arc;
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_shared::backend::BackendClient;
use tcab_shared::config::Binary;
use tcab_shared::events::{EventSender, Reporter as EventReporter};
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::lane::PerLane;
use tcab_shared::tick::{Tick, TickOutcome};
use tcab_shared::{Lane, WallClock};
use tokio::time::Instant;

/// The I/O edges and settings both lanes share (read only).
pub(crate) struct Edges {
    /// What the admitter reads from its configuration.
    pub(crate) settings: AdmitterSettings,
    /// The backend client.
    pub(crate) backend: BackendClient,
    /// The Jobs API of the admitter's namespace.
    pub(crate) jobs: Api<Job>,
    /// The pods API of the same namespace.
    pub(crate) pods: Api<Pod>,
    /// The token vault and admission gate.
    pub(crate) vault: KeeperClient,
    /// The watch-backed view of the owned Jobs.
    pub(crate) cache: OwnedJobs,
    /// The namespace of the Jobs (where their Events go).
    pub(crate) namespace: String,
    /// Where the Events on the Jobs acted on are sent (never waits).
    pub(crate) events: EventSender,
}

impl fmt::Debug for Edges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Edges")
            .field("settings", &self.settings)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// One lane's loop: its memory, over the shared edges.
pub struct LaneAdmitter {
    lane: Lane,
    edges: Arc<Edges>,
    state: LaneState,
}

impl fmt::Debug for LaneAdmitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneAdmitter")
            .field("lane", &self.lane)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Tick for LaneAdmitter {
    async fn tick(&mut self) -> TickOutcome {
        self.tick_report().await.tick_outcome()
    }
}

impl LaneAdmitter {
    /// Each lane's loop, with a fresh memory, over one set of edges: a Job
    /// cache (already watching, or fed by a test), the Jobs API of the
    /// admitter's namespace (its pods are read in the same namespace), the
    /// backend and the vault.
    pub fn lanes(
        settings: AdmitterSettings,
        backend: BackendClient,
        jobs: Api<Job>,
        vault: KeeperClient,
        cache: OwnedJobs,
    ) -> PerLane<LaneAdmitter> {
        let pods = match jobs.namespace() {
            Some(ns) => Api::namespaced(jobs.clone().into_client(), ns),
            None => Api::default_namespaced(jobs.clone().into_client()),
        };
        let namespace = jobs.namespace().unwrap_or_default().to_owned();
        let events = EventSender::start(
            jobs.clone().into_client(),
            EventReporter::of(Binary::Admitter),
            WallClock::system(),
            settings.kube_timeout,
        );
        let edges = Arc::new(Edges {
            settings,
            backend,
            jobs,
            pods,
            vault,
            cache,
            namespace,
            events,
        });
        PerLane::from_fn(|lane| LaneAdmitter {
            lane,
            edges: edges.clone(),
            state: LaneState::default(),
        })
    }

    /// The lane.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// The lane's memory.
    pub fn state(&self) -> &LaneState {
        &self.state
    }

    /// Whether the lane is configured (publish: a publisher image is set).
    pub fn enabled(&self) -> bool {
        self.edges.settings.enabled(self.lane)
    }

    fn deps(&self) -> AdmitDeps<'_> {
        let edges = &*self.edges;
        AdmitDeps {
            backend: &edges.backend,
            jobs: &edges.jobs,
            pods: &edges.pods,
            vault: &edges.vault,
            settings: &edges.settings.jobs,
            kube_timeout: edges.settings.kube_timeout,
            limits: edges.settings.settle_limits(),
        }
    }

    /// One tick of the lane.
    pub async fn tick_report(&mut self) -> LaneReport {
        let lane = self.lane;
        if !self.enabled() {
            return LaneReport {
                lane,
                decision: Decision::Hold(HoldReason::Disabled),
                outcome: None,
                resettled: vec![],
                in_flight: 0,
                stale: vec![],
                cap: 0,
                view_current: self.edges.cache.is_current(),
                claimed: None,
                claim_to_job: vec![],
                gate: None,
                backoff_until: None,
            };
        }
        let mut claim_to_job = vec![];
        let resettled = self.settle_leftovers(&mut claim_to_job).await;

        // Every check but the gate's first, then the gate, read on every
        // tick whatever else holds the lane: its reading is what the metrics
        // and the status document show, so a full lane after a restart
        // still reads the gate as it is. Only a lane that would admit acts
        // on it. The call is bounded (the vault client's timeout) and made
        // from this lane's own task, so it never holds the other lane.
        let snapshot = self.snapshot();
        let in_flight = plan::in_flight(
            snapshot.live_cached,
            &snapshot.input.created_unseen,
            &snapshot.input.unsettled,
        );
        let ungated = plan::ungated(&snapshot);
        let gate = self.read_gate().await;
        let decision = match ungated {
            Ok(in_flight) => plan::gated(&gate, in_flight),
            Err(hold) => Decision::Hold(hold),
        };
        self.log_decision(&decision);

        let mut stale = vec![];
        let mut claimed = None;
        let outcome = if decision.admits() {
            let cache = &self.edges.cache;
            let state = &self.state;
            let jobs_of_id = |job_id: &str| {
                let mut jobs = cache.with_job_id(job_id);
                jobs.extend(state.pending_with_id(lane, job_id));
                jobs
            };
            let mut admission = admit::admit(lane, self.deps(), &jobs_of_id).await;
            stale = std::mem::take(&mut admission.stale);
            claimed = admission.claimed;
            claim_to_job.extend(admission.created_after);
            self.settle_stale(&stale).await;
            Some(self.record(admission, false))
        } else {
            None
        };
        LaneReport {
            lane,
            decision,
            outcome,
            resettled,
            in_flight,
            stale,
            cap: snapshot.input.cap,
            view_current: snapshot.view.is_current(),
            claimed,
            claim_to_job,
            gate: Some(gate),
            backoff_until: snapshot.input.backoff_until,
        }
    }

    /// The lane's snapshot (the gate is not in it: it is asked after the
    /// other checks, just before a claim).
    fn snapshot(&self) -> LaneSnapshot {
        let edges = &*self.edges;
        let now = Instant::now();
        // The unseen names were checked against the cache before this count
        // (`forget_seen`): a Job the watch shows in between counts twice for
        // a tick, which can only hold an admission.
        let view = edges.cache.view_state();
        let live_cached = u32::try_from(edges.cache.live_count(self.lane)).unwrap_or(u32::MAX);
        LaneSnapshot {
            now,
            view,
            live_cached,
            input: LaneInput {
                enabled: self.enabled(),
                cap: edges.settings.cap(self.lane),
                created_unseen: self.state.created_unseen(),
                unsettled: self.state.unsettled(),
                backoff_until: self.state.backoff_until(),
                rest_until: self.state.rest_until(),
            },
        }
    }

    /// Asks the lease-keeper for this lane's gate verdict (it judges it; the
    /// lane acts on it as given); an unreachable lease-keeper is a closed gate.
    /// Asked on every tick, so before every claim, and never reused: a reused
    /// open verdict could let a claim through after the first failed renewal.
    async fn read_gate(&self) -> GateVerdict {
        let max_age = self.edges.settings.gate_max_age;
        match self.edges.vault.verdict(self.lane, max_age).await {
            Ok(verdict) => verdict,
            Err(error) => GateVerdict::closed(
                GateReason::KeeperUnreachable,
                format!("lease-keeper unreachable: {error}"),
            ),
        }
    }
}
