//! One lane's loop: each tick settles what earlier ticks left unsettled,
//! takes the lane's snapshot (its live cached Jobs, its memory, whether the
//! Job view is current), decides, asks the gate when it would admit, and
//! carries out one admission.
//!
//! Each lane runs its own loop on its own task, over the I/O edges both
//! share ([`Edges`]: the Job cache, the backend client, the vault client and
//! the Jobs API, all safe to use at once), so a slow or hung call in one
//! lane never delays the other.

use crate::admit::{
    self, Admission, AdmitDeps, ClaimTimes, CreateFailure, LaneOutcome, PoisonReport, StaleDeletion,
};
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
use tcab_shared::Lane;
use tcab_shared::backend::BackendClient;
use tcab_shared::error_chain;
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::tick::{Tick, TickOutcome};
use tokio::time::Instant;

/// The I/O edges and settings both lanes share (read only).
pub struct Edges {
    /// What the admitter reads from its configuration.
    pub settings: AdmitterSettings,
    /// The backend client.
    pub backend: BackendClient,
    /// The Jobs API of the admitter's namespace.
    pub jobs: Api<Job>,
    /// The pods API of the same namespace.
    pub pods: Api<Pod>,
    /// The token vault and admission gate.
    pub vault: KeeperClient,
    /// The watch-backed view of the owned Jobs.
    pub cache: OwnedJobs,
}

impl fmt::Debug for Edges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Edges")
            .field("settings", &self.settings)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// What one lane's tick came to, in the words the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdmissionResult {
    /// A Job exists for a fresh claim (created, or found created).
    Created,
    /// The backend had nothing claimable.
    EmptyQueue,
    /// The admission gate was closed.
    GateClosed,
    /// The lane was at its cap.
    LaneFull,
    /// The admitter's Job view was not current.
    ViewNotCurrent,
    /// The lane was backing off after failures.
    BackingOff,
    /// The lane rested after an empty claim.
    Resting,
    /// The lane is not configured.
    Disabled,
    /// The lane's cap is 0: paused by its operator.
    Paused,
    /// The claim failed, or the Job was not created, or its create could not
    /// be settled.
    Error,
}

impl AdmissionResult {
    /// Every result, in a stable order.
    pub const ALL: [AdmissionResult; 10] = [
        AdmissionResult::Created,
        AdmissionResult::EmptyQueue,
        AdmissionResult::GateClosed,
        AdmissionResult::LaneFull,
        AdmissionResult::ViewNotCurrent,
        AdmissionResult::BackingOff,
        AdmissionResult::Resting,
        AdmissionResult::Disabled,
        AdmissionResult::Paused,
        AdmissionResult::Error,
    ];

    /// A label value for metrics (`created`, `empty_queue`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionResult::Created => "created",
            AdmissionResult::EmptyQueue => "empty_queue",
            AdmissionResult::GateClosed => "gate_closed",
            AdmissionResult::LaneFull => "lane_full",
            AdmissionResult::ViewNotCurrent => "view_not_current",
            AdmissionResult::BackingOff => "backing_off",
            AdmissionResult::Resting => "resting",
            AdmissionResult::Disabled => "disabled",
            AdmissionResult::Paused => "paused",
            AdmissionResult::Error => "error",
        }
    }
}

/// What one tick of a lane decided and did.
#[derive(Debug)]
pub struct LaneReport {
    /// The lane.
    pub lane: Lane,
    /// The decision.
    pub decision: Decision,
    /// The admission, when the lane admitted.
    pub outcome: Option<LaneOutcome>,
    /// What settling the creations left unsettled by earlier ticks came to
    /// (admitted, given up, or still unsettled).
    pub resettled: Vec<LaneOutcome>,
    /// The lane's non-terminal Jobs as the tick counted them before it
    /// admitted (live cached, created but unseen, unsettled).
    pub in_flight: u32,
    /// Stale Jobs of the claimed job id deleted (or not) before its Job.
    pub stale: Vec<StaleDeletion>,
    /// The lane's cap.
    pub cap: u32,
    /// Whether the Job view was current when the tick counted (otherwise
    /// `in_flight` is the count of a view it could not trust).
    pub view_current: bool,
    /// The times the claim's answer gave, when the tick claimed a job.
    pub claimed: Option<ClaimTimes>,
    /// For each claim whose Job became known to exist this tick (a fresh
    /// one, or an earlier one settled now): from sending the claim to then.
    pub claim_to_job: Vec<std::time::Duration>,
}

impl LaneReport {
    /// The tick's result for the admissions metric.
    pub fn result(&self) -> AdmissionResult {
        match (&self.outcome, &self.decision) {
            (Some(outcome), _) if outcome.created().is_some() => AdmissionResult::Created,
            (Some(LaneOutcome::Empty), _) => AdmissionResult::EmptyQueue,
            (Some(_), _) => AdmissionResult::Error,
            (None, Decision::Hold(reason)) => match reason {
                HoldReason::Disabled => AdmissionResult::Disabled,
                HoldReason::Paused => AdmissionResult::Paused,
                HoldReason::ViewNotCurrent { .. } => AdmissionResult::ViewNotCurrent,
                HoldReason::BackingOff { .. } => AdmissionResult::BackingOff,
                HoldReason::Resting { .. } => AdmissionResult::Resting,
                HoldReason::LaneFull { .. } => AdmissionResult::LaneFull,
                HoldReason::GateClosed(_) => AdmissionResult::GateClosed,
            },
            // A decision to admit always carries an outcome.
            (None, Decision::Admit { .. }) => AdmissionResult::Error,
        }
    }

    /// Busy (loop straight back) when a Job was created for a fresh claim.
    pub fn tick_outcome(&self) -> TickOutcome {
        if self.result() == AdmissionResult::Created {
            TickOutcome::Busy
        } else {
            TickOutcome::Idle
        }
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
    /// The loop of `lane` over `edges`, with a fresh memory.
    pub fn new(lane: Lane, edges: Arc<Edges>) -> Self {
        LaneAdmitter {
            lane,
            edges,
            state: LaneState::default(),
        }
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
            };
        }
        let mut claim_to_job = vec![];
        let resettled = self.settle_leftovers(&mut claim_to_job).await;

        // Decide as if the gate were open first: only when the lane could
        // admit is the gate worth asking (a full or idle lane makes no call).
        let mut snapshot = self.snapshot();
        let in_flight = plan::in_flight(
            snapshot.live_cached,
            &snapshot.input.created_unseen,
            &snapshot.input.unsettled,
        );
        let mut decision = plan::decide(&snapshot);
        if decision.admits() {
            snapshot.input.gate = self.read_gate().await;
            decision = plan::decide(&snapshot);
        }
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
        }
    }

    /// Logs each stale Job's delete; one deleted (or gone) no longer counts,
    /// and an unsettled creation of it is never created: its token is
    /// forgotten.
    async fn settle_stale(&mut self, stale: &[StaleDeletion]) {
        let lane = self.lane;
        for deletion in stale {
            let claim = deletion.stale.claim.as_deref().unwrap_or("(none)");
            match &deletion.result {
                Ok(()) => {
                    tracing::warn!(
                        %lane, job_id = %deletion.job_id, stale_job = %deletion.stale.name, %claim,
                        "deleted a stale Job: a live Job of this job id under an older claim (its token no longer works; the backend handed the job out again)"
                    );
                    if let Some(creation) = self.state.drop_stale(&deletion.stale.name)
                        && let Err(error) = self
                            .edges
                            .vault
                            .forget(&creation.job_id, &creation.claim)
                            .await
                    {
                        tracing::warn!(
                            %lane, job_id = %creation.job_id, claim = %creation.claim,
                            error = %error_chain(&error),
                            "could not forget the token of a stale claim; the lease-keeper drops it after a lease"
                        );
                    }
                }
                Err(error) => tracing::warn!(
                    %lane, job_id = %deletion.job_id, stale_job = %deletion.stale.name, %claim,
                    %error,
                    "could not delete a stale Job of this job id (an older claim); admitting the new claim anyway, the stale one is tried again at the next claim of this id or left to the lease-keeper"
                ),
            }
        }
    }

    /// Forgets what the cache shows, then settles again each creation left
    /// unsettled by an earlier tick.
    async fn settle_leftovers(
        &mut self,
        claim_to_job: &mut Vec<std::time::Duration>,
    ) -> Vec<LaneOutcome> {
        let lane = self.lane;
        let now = Instant::now();
        let cache = &self.edges.cache;
        let seen = self.state.forget_seen(
            |name| cache.contains(name),
            now,
            self.edges.settings.unseen_ttl(),
        );
        for creation in &seen.settled_by_watch {
            tracing::info!(
                %lane, job_id = %creation.job_id, job = %creation.job_name,
                "admitted: the Job watch shows the Job whose create was unsettled"
            );
        }
        for creation in &seen.expired {
            tracing::warn!(
                %lane, job_id = %creation.job_id, job = %creation.job_name,
                "gave up settling a create after a whole lease; freeing its slot (the claim has lapsed, or the Job exists and the watch counts it)"
            );
        }
        for name in &seen.unseen_expired {
            tracing::warn!(
                %lane, job = %name,
                "a created Job was not seen by the watch within a lease; no longer counting it"
            );
        }
        let mut outcomes = vec![];
        for creation in self.state.take_unsettled() {
            let admission = admit::resettle(creation, self.deps()).await;
            claim_to_job.extend(admission.created_after);
            outcomes.push(self.record(admission, true));
        }
        outcomes
    }

    /// The lane's snapshot, with the gate open (the gate is asked only when
    /// the lane would admit).
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
                gate: GateVerdict::Open,
            },
        }
    }

    /// Asks the lease-keeper for this lane's gate verdict (it judges it; the
    /// lane acts on it as given); an unreachable lease-keeper is a closed gate.
    /// Asked before every claim, never reused: a reused open verdict could
    /// let a claim through after the first failed renewal.
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

    fn log_decision(&mut self, decision: &Decision) {
        let lane = self.lane;
        let hold = match decision {
            Decision::Hold(reason) => Some(reason),
            Decision::Admit { .. } => None,
        };
        let was = self.state.last_hold().cloned();
        let changed = self.state.note_hold(hold);
        match hold {
            None => match was {
                Some(HoldReason::GateClosed(_)) => {
                    tracing::info!(%lane, "admission gate open again: lease renewals are current");
                }
                Some(HoldReason::ViewNotCurrent { .. }) => {
                    tracing::info!(%lane, "admissions resume: the Job view is current");
                }
                _ => {}
            },
            Some(HoldReason::Paused) if changed => {
                tracing::info!(
                    %lane,
                    "lane paused: its cap is 0, so it claims nothing (the lease-keeper's renewals and reports go on)"
                );
            }
            Some(HoldReason::GateClosed(closed)) if changed => {
                tracing::info!(
                    %lane, reason = closed.reason.name(), why = %closed,
                    "admissions held: admission gate closed"
                );
            }
            Some(HoldReason::ViewNotCurrent { why }) if changed => {
                tracing::info!(%lane, why = %why, "admissions held: the Job view is not current");
            }
            Some(HoldReason::LaneFull { in_flight, cap }) => {
                tracing::debug!(%lane, in_flight, cap, "lane full");
            }
            Some(HoldReason::BackingOff { until }) => {
                let wait = until.saturating_duration_since(Instant::now());
                tracing::debug!(%lane, wait_ms = wait.as_millis() as u64, "lane backing off");
            }
            Some(reason) => tracing::debug!(%lane, %reason, "lane held"),
        }
    }

    /// Remembers an admission (or, `again`, a later settle of one) and logs
    /// its outcome once.
    fn record(&mut self, admission: Admission, again: bool) -> LaneOutcome {
        let lane = self.lane;
        let now = Instant::now();
        let retry = self.edges.settings.poll_interval;
        let Admission {
            outcome, unsettled, ..
        } = admission;
        let state = &mut self.state;
        match &outcome {
            LaneOutcome::Admitted {
                job_id,
                job_name,
                settled: None,
            } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "admitted");
            }
            LaneOutcome::Admitted {
                job_id,
                job_name,
                settled: Some(settled),
            } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(
                    %lane, job_id = %job_id, job = %job_name, after = %settled.after,
                    by = ?settled.by, calls = settled.calls,
                    "admitted: an unclear create settled, the Job exists"
                );
            }
            LaneOutcome::AlreadyExists { job_id, job_name } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "lost race: the Job already exists");
            }
            LaneOutcome::Empty => {
                state.record_empty(now + retry);
                tracing::debug!(%lane, "claim empty: nothing queued");
            }
            LaneOutcome::ClaimFailed(error) => {
                state.record_claim_failure(now, retry);
                tracing::error!(
                    %lane,
                    call = error.call().unwrap_or("claim"),
                    reason = error.kind().reason().as_str(),
                    error = %error_chain(error),
                    retry_in_ms = retry.as_millis() as u64,
                    "claim failed; the lane claims again after the back-off"
                );
            }
            LaneOutcome::CreateFailed {
                job_id,
                job_name,
                reason,
            } => {
                let delay = state.record_create_failure(now);
                let failures = state.failures();
                let lapsed = matches!(reason, CreateFailure::Lapsed { .. });
                let reason = error_chain(reason);
                let backoff_ms = delay.as_millis() as u64;
                if lapsed {
                    tracing::warn!(
                        %lane, job_id = %job_id, job = %job_name, %reason, failures, backoff_ms,
                        "claim given up without a Job; its token is forgotten and the backend requeues the job"
                    );
                } else {
                    tracing::error!(
                        %lane, job_id = %job_id, job = %job_name, %reason, failures, backoff_ms,
                        "Job not created; its token is forgotten, the claim lapses and the backend requeues the job"
                    );
                }
            }
            LaneOutcome::Poisoned {
                job_id,
                reason,
                detail,
                report,
            } => {
                let job_id = job_id.as_deref().unwrap_or("(none)");
                let reason = reason.as_str();
                match report {
                    PoisonReport::Reported => tracing::error!(
                        %lane, %job_id, %reason, %detail,
                        "poisoned claim: it cannot become a Job; reported it failed, once"
                    ),
                    PoisonReport::Failed(error) => tracing::error!(
                        %lane, %job_id, %reason, %detail, %error,
                        "poisoned claim: it cannot become a Job, and reporting it failed did not land; not trying again (the claim lapses and the backend requeues the job)"
                    ),
                    PoisonReport::Impossible { shape } => tracing::error!(
                        %lane, %job_id, %reason, %detail, %shape,
                        "poisoned claim: it cannot become a Job and its answer carries no usable id and token to report it with; the claim lapses and the backend requeues the job"
                    ),
                }
            }
            LaneOutcome::Unsettled {
                job_id,
                job_name,
                error,
            } => {
                if let Some(creation) = unsettled {
                    state.hold_unsettled(creation);
                    if !again {
                        let delay = state.record_create_failure(now);
                        tracing::warn!(
                            %lane, job_id = %job_id, job = %job_name, %error,
                            backoff_ms = delay.as_millis() as u64,
                            "cannot tell whether the Job was created; holding its slot and checking again on the next ticks"
                        );
                    } else {
                        tracing::debug!(
                            %lane, job_id = %job_id, job = %job_name, %error,
                            "still cannot tell whether the Job was created"
                        );
                    }
                }
            }
        }
        outcome
    }
}
