//! The admitter's loop: each tick takes a snapshot (cached Jobs, lane
//! memory, the gate), plans both lanes, and carries out the admissions,
//! the two lanes side by side so neither waits for the other.

use crate::admit::{self, AdmitDeps, LaneOutcome};
use crate::clock::Clock;
use crate::gate::{LaneGates, lane_gates};
use crate::lanes::LaneState;
use crate::plan::{self, Decision, GateState, HoldReason, LaneInput, Plan, Snapshot};
use crate::vault::{VaultClient, VaultSettings};
use anyhow::Context as _;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcab_proto::vault::RenewalStatus;
use tcab_shared::Lane;
use tcab_shared::backend::BackendClient;
use tcab_shared::cluster::OwnedJobs;
use tcab_shared::config::AdmitterConfig;
use tcab_shared::job_builder::JobSettings;
use tcab_shared::tick::{Shutdown, TickOutcome, run_loop_with_wake};

/// How long an open gate answer is reused while the admitter is busy.
/// Far below the lease-keeper's poll interval (a failed renewal round is
/// seen within this), and it spares a gate call on most busy ticks; a
/// closed answer is never reused, and the answer's age keeps counting.
pub const GATE_REUSE: Duration = Duration::from_millis(250);

/// What the admitter reads from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitterSettings {
    /// The run lane's cap.
    pub max_inflight: u32,
    /// The publish lane's cap.
    pub max_publish_inflight: u32,
    /// How old the lease-keeper's last renewal round may be.
    pub gate_max_age: Duration,
    /// How long an answer of the gate that opened both lanes is reused
    /// before the gate is asked again ([`GATE_REUSE`]; zero asks every tick).
    pub gate_reuse: Duration,
    /// The poll interval; also how long a lane waits after a failed or an
    /// empty claim before it claims again.
    pub poll_interval: Duration,
    /// What the Job builders read (the publisher image opens the publish lane).
    pub jobs: JobSettings,
}

impl AdmitterSettings {
    /// The settings of a loaded configuration.
    pub fn from_config(config: &AdmitterConfig) -> Self {
        AdmitterSettings {
            max_inflight: config.max_inflight,
            max_publish_inflight: config.max_publish_inflight,
            gate_max_age: config.gate_max_age,
            gate_reuse: GATE_REUSE,
            poll_interval: config.common.poll_interval,
            jobs: config.jobs.clone(),
        }
    }

    fn cap(&self, lane: Lane) -> u32 {
        match lane {
            Lane::Run => self.max_inflight,
            Lane::Publish => self.max_publish_inflight,
        }
    }

    fn enabled(&self, lane: Lane) -> bool {
        match lane {
            Lane::Run => true,
            Lane::Publish => self.jobs.publisher_image.is_some(),
        }
    }
}

/// The I/O the admitter is given, so tests can substitute each piece.
#[derive(Clone)]
pub struct Deps {
    /// The kube client (for the Job watch and creates).
    pub kube: kube::Client,
    /// The namespace the Jobs live in.
    pub namespace: String,
    /// The backend client.
    pub backend: BackendClient,
    /// The clock back-offs read.
    pub clock: Arc<dyn Clock>,
}

impl fmt::Debug for Deps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deps")
            .field("namespace", &self.namespace)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// The admitter: its I/O edges, its Job cache and the memory of each lane.
pub struct Admitter {
    settings: AdmitterSettings,
    backend: BackendClient,
    jobs: Api<Job>,
    vault: VaultClient,
    cache: OwnedJobs,
    clock: Arc<dyn Clock>,
    run: LaneState,
    publish: LaneState,
    /// The last gate answer that opened both lanes, and when it came.
    open_gate: Option<(Instant, RenewalStatus)>,
}

impl fmt::Debug for Admitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitter")
            .field("settings", &self.settings)
            .field("run", &self.run)
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

/// What one tick decided and did, for logs and tests.
#[derive(Debug)]
pub struct TickReport {
    /// The plan of the tick.
    pub plan: Plan,
    /// The run lane's admission, when it admitted.
    pub run: Option<LaneOutcome>,
    /// The publish lane's admission, when it admitted.
    pub publish: Option<LaneOutcome>,
}

impl TickReport {
    /// Busy when a Job was created (or found created) in either lane.
    pub fn outcome(&self) -> TickOutcome {
        let created = [&self.run, &self.publish]
            .into_iter()
            .flatten()
            .any(|o| o.created().is_some());
        if created {
            TickOutcome::Busy
        } else {
            TickOutcome::Idle
        }
    }
}

impl Admitter {
    /// An admitter over a Job cache (already watching, or fed by a test),
    /// the Jobs API of its namespace, the backend and the vault.
    pub fn new(
        settings: AdmitterSettings,
        backend: BackendClient,
        jobs: Api<Job>,
        vault: VaultClient,
        cache: OwnedJobs,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Admitter {
            settings,
            backend,
            jobs,
            vault,
            cache,
            clock,
            run: LaneState::default(),
            publish: LaneState::default(),
            open_gate: None,
        }
    }

    /// The memory of one lane.
    pub fn lane_state(&self, lane: Lane) -> &LaneState {
        match lane {
            Lane::Run => &self.run,
            Lane::Publish => &self.publish,
        }
    }

    fn lane_state_mut(&mut self, lane: Lane) -> &mut LaneState {
        match lane {
            Lane::Run => &mut self.run,
            Lane::Publish => &mut self.publish,
        }
    }

    fn lane_input(&self, lane: Lane, gate: GateState) -> LaneInput {
        let state = self.lane_state(lane);
        LaneInput {
            enabled: self.settings.enabled(lane),
            cap: self.settings.cap(lane),
            created_unseen: state.created_unseen(),
            backoff_until: state.backoff_until(),
            rest_until: state.rest_until(),
            gate,
        }
    }

    /// The snapshot this tick decides on, with the given gates.
    fn snapshot(&mut self, gates: LaneGates) -> Snapshot {
        let now = self.clock.now();
        let jobs = self.cache.snapshot();
        self.run.forget_seen(&jobs, now);
        self.publish.forget_seen(&jobs, now);
        Snapshot {
            now,
            // A view the watch may have left stale could under-count a lane.
            cache_ready: self.cache.is_current(std::time::Instant::now()),
            jobs,
            run: self.lane_input(Lane::Run, gates.run),
            publish: self.lane_input(Lane::Publish, gates.publish),
        }
    }

    /// Reads the gate: a recent answer that opened both lanes is reused
    /// (aged by the time since), else the lease-keeper is asked; an
    /// unreachable lease-keeper is a closed gate.
    async fn read_gate(&mut self) -> LaneGates {
        let max_age = self.settings.gate_max_age;
        let now = self.clock.now();
        if let Some((at, status)) = &self.open_gate {
            let since = now.saturating_duration_since(*at);
            if since < self.settings.gate_reuse {
                let mut aged = status.clone();
                aged.age_ms = aged.age_ms.saturating_add(since.as_millis() as u64);
                let gates = lane_gates(Ok(&aged), max_age);
                if gates.run.is_open() && gates.publish.is_open() {
                    return gates;
                }
            }
        }
        self.open_gate = None;
        match self.vault.last_renewal().await {
            Ok(status) => {
                let gates = lane_gates(Ok(&status), max_age);
                if gates.run.is_open() && gates.publish.is_open() {
                    self.open_gate = Some((self.clock.now(), status));
                }
                gates
            }
            Err(error) => lane_gates(Err(&error.to_string()), max_age),
        }
    }

    /// One tick: plan both lanes, admit through the open ones side by side,
    /// and remember what happened.
    pub async fn tick(&mut self) -> TickReport {
        // Plan as if the gate were open first: only when a lane could admit
        // is the gate worth asking (a full or idle admitter makes no call).
        let open = LaneGates {
            run: GateState::Open,
            publish: GateState::Open,
        };
        let mut snapshot = self.snapshot(open);
        let mut plan = plan::plan(&snapshot);
        if plan.run.admits() || plan.publish.admits() {
            let gates = self.read_gate().await;
            snapshot.run.gate = gates.run;
            snapshot.publish.gate = gates.publish;
            plan = plan::plan(&snapshot);
        }
        for lane in Lane::ALL {
            self.log_decision(lane, plan.lane(lane));
        }

        let deps = AdmitDeps {
            backend: &self.backend,
            jobs: &self.jobs,
            vault: &self.vault,
            settings: &self.settings.jobs,
        };
        let run = maybe_admit(plan.run.admits(), Lane::Run, deps.clone());
        let publish = maybe_admit(plan.publish.admits(), Lane::Publish, deps);
        let (run, publish) = futures::join!(run, publish);

        let now = self.clock.now();
        for (lane, outcome) in [(Lane::Run, &run), (Lane::Publish, &publish)] {
            if let Some(outcome) = outcome {
                self.record(lane, outcome, now);
            }
        }
        TickReport { plan, run, publish }
    }

    fn log_decision(&mut self, lane: Lane, decision: &Decision) {
        let hold = match decision {
            Decision::Hold(reason) => Some(reason),
            Decision::Admit { .. } => None,
        };
        let was_gate_closed = matches!(
            self.lane_state(lane).last_hold(),
            Some(HoldReason::GateClosed { .. })
        );
        let changed = self.lane_state_mut(lane).note_hold(hold);
        match hold {
            None if was_gate_closed => {
                tracing::info!(%lane, "admission gate open again: lease renewals are current");
            }
            None => {}
            Some(HoldReason::GateClosed { why }) if changed => {
                tracing::info!(%lane, why = %why, "admissions held: admission gate closed");
            }
            Some(HoldReason::LaneFull { in_flight, cap }) => {
                tracing::debug!(%lane, in_flight, cap, "lane full");
            }
            Some(HoldReason::BackingOff { until }) => {
                let wait = until.saturating_duration_since(self.clock.now());
                tracing::debug!(%lane, wait_ms = wait.as_millis() as u64, "lane backing off");
            }
            Some(reason) => tracing::debug!(%lane, %reason, "lane held"),
        }
    }

    fn record(&mut self, lane: Lane, outcome: &LaneOutcome, now: Instant) {
        let retry = self.settings.poll_interval;
        let state = self.lane_state_mut(lane);
        match outcome {
            LaneOutcome::Admitted { job_id, job_name } => {
                state.record_created(job_name, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "admitted");
            }
            LaneOutcome::AlreadyExists { job_id, job_name } => {
                state.record_created(job_name, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "lost race: the Job already exists");
            }
            LaneOutcome::Empty => {
                state.record_empty(now + retry);
                tracing::debug!(%lane, "claim empty: nothing queued");
            }
            LaneOutcome::ClaimFailed(error) => {
                state.record_claim_failure(now, retry);
                tracing::error!(%lane, %error, retry_in_ms = retry.as_millis() as u64, "claim failed");
            }
            LaneOutcome::CreateFailed {
                job_id,
                job_name,
                reason,
            } => {
                if reason.may_have_created() {
                    // A timeout or a server error may hide a Job that exists:
                    // count it against the cap until the watch shows or clears it.
                    state.record_maybe_created(job_name, now);
                }
                let delay = state.record_create_failure(now);
                let failures = state.failures();
                tracing::error!(
                    %lane, job_id = %job_id, job = %job_name, reason = %error_chain(reason),
                    failures, backoff_ms = delay.as_millis() as u64,
                    "Job creation failed; the claim will lapse and the backend requeues the job"
                );
            }
        }
    }
}

async fn maybe_admit(admits: bool, lane: Lane, deps: AdmitDeps<'_>) -> Option<LaneOutcome> {
    if admits {
        Some(admit::admit(lane, deps).await)
    } else {
        None
    }
}

/// An error and its sources on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

/// Runs the admitter until `shutdown`: watches the owned Jobs, waits for the
/// first full list, then ticks. A tick in progress always finishes (an
/// admission is never cut between claim and create). Returns an error only
/// when the Job watch dies, so the process exits and is restarted.
pub async fn run(config: AdmitterConfig, deps: Deps, shutdown: Shutdown) -> anyhow::Result<()> {
    let settings = AdmitterSettings::from_config(&config);
    let vault = VaultClient::connect_lazy(config.common.vault_addr, VaultSettings::default())
        .context("building the vault client")?;
    let (cache, watch_task) = OwnedJobs::watch(
        deps.kube.clone(),
        &deps.namespace,
        &config.common.managed_by,
    );
    let watch_abort = watch_task.abort_handle();
    let jobs: Api<Job> = Api::namespaced(deps.kube.clone(), &deps.namespace);
    tracing::info!(
        namespace = %deps.namespace,
        max_inflight = settings.max_inflight,
        max_publish_inflight = settings.max_publish_inflight,
        publishing = settings.jobs.publisher_image.is_some(),
        "admitter starting"
    );

    // The loop stops on the caller's shutdown, or when the watch dies.
    let (stop, stop_view) = Shutdown::channel();
    let outer = shutdown.clone();
    let watch_died = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let died = watch_died.clone();
    let supervisor = tokio::spawn(async move {
        tokio::select! {
            _ = outer.wait() => {}
            result = watch_task => {
                died.store(true, std::sync::atomic::Ordering::SeqCst);
                tracing::error!(?result, "the Job watch ended; stopping");
            }
        }
        stop.trigger();
    });

    tokio::select! {
        _ = cache.wait_ready() => {
            tracing::info!(owned_jobs = cache.len(), "job cache ready");
        }
        _ = stop_view.wait() => {}
    }

    // A Job that finishes frees room in its lane: tick at once, not at the next poll.
    let wake = cache.finishes();
    let admitter = Arc::new(tokio::sync::Mutex::new(Admitter::new(
        settings.clone(),
        deps.backend,
        jobs,
        vault,
        cache,
        deps.clock,
    )));
    run_loop_with_wake(settings.poll_interval, stop_view, wake, || {
        let admitter = admitter.clone();
        async move { admitter.lock().await.tick().await.outcome() }
    })
    .await;
    supervisor.abort();
    watch_abort.abort();

    if watch_died.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!("the Job watch ended");
    }
    tracing::info!("admitter stopped");
    Ok(())
}
