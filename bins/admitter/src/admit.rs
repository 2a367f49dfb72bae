//! One admission in one lane: claim the oldest queued job, hand its per-job
//! token to the vault, create its Job under its deterministic name and settle
//! the create (see [`crate::settle`]); and the later settles of a create
//! whose answer stayed unknown.
//!
//! Every step's failure is an outcome, never a panic or an early return: the
//! lane records it. When no Job will exist for a claim (the create was
//! refused, the Job could not be built, the claim was given up), the claim's
//! token is forgotten in the vault (best effort) and the claim is left to
//! lapse: the backend requeues the job.
//!
//! Two things come before a claim's Job counts:
//! - **poisoned claims end once**: a claim answered 200 whose body cannot
//!   become a Job (the client could not read it whole, or its request is
//!   over [`MAX_REQUEST_BYTES`]), or whose Job the API server refuses with
//!   422 (the dry run at start passed, so the job's own data is at fault), is
//!   reported failed with its own token, once, instead of lapsing and being
//!   handed out again every lease; with no usable id and token it is only
//!   logged (its shape, never a value) and counted;
//! - **one live Job per backend job**: a live Job of the same job id under
//!   an older claim (in the view, or created by this lane and not yet seen
//!   or settled) is stale, its token no longer works: it is deleted first
//!   ([`crate::plan::stale_jobs`]); a failed delete is logged and counted and
//!   does not stop the admission (the next admission of that id, or the
//!   lease-keeper, deals with it).

use crate::job_builder::{self, JobSettings};
use crate::keeper_client::KeeperClient;
use crate::plan::{self, StaleJob};
use crate::settle::{self, Confirmation, End, GiveUp, Known, SettleEdges, SettleLimits};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use std::fmt;
use std::time::Duration;
use tcab_shared::backend::{
    BackendClient, BackendError, ClaimAnswer, ClaimedPublish, ClaimedRun, FailureKind,
    PoisonedClaim,
};
use tcab_shared::job_cache::JobSummary;
use tcab_shared::kube_api::{KubeCall, call};
use tcab_shared::metrics::labels::{ErrorReason, PoisonResult};
use tcab_shared::{Lane, Secret, error_chain, names};
use tokio::time::Instant;

/// The longest launch request (or publish request) a claim may carry, in
/// bytes of its JSON. It reaches the pod as one environment variable
/// (`TCAB_LAUNCH_REQUEST`, `TCAB_PUBLISH_REQUEST`), and Linux refuses to
/// start a process one of whose environment strings is longer than
/// `MAX_ARG_STRLEN` (32 pages, 128 KiB, name and `=` included): a larger
/// request would make a Job whose container can never start. 120 KiB keeps
/// room for the name; a Job this size is also far under the API server's
/// (etcd's) 1.5 MiB object limit.
pub const MAX_REQUEST_BYTES: usize = 120 * 1024;

/// Why a claim cannot become a Job for a reason of its own (the `reason`
/// label of `poisoned_claims_total`, declared with the other label values).
pub use tcab_shared::metrics::labels::PoisonReason;

/// What became of reporting a poisoned claim failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoisonReport {
    /// The backend took the failed report (or result).
    Reported,
    /// The report failed (after the client's bounded 429/503 retry); it is
    /// not tried again: the claim lapses and the backend requeues the job.
    Failed(String),
    /// The answer carried no usable id and token: nothing to report with.
    Impossible {
        /// The answer's keys and value types, for the log.
        shape: String,
    },
}

impl PoisonReport {
    /// The `result` label value: `ok`, `failed`, `none`.
    pub fn result(&self) -> PoisonResult {
        match self {
            PoisonReport::Reported => PoisonResult::Ok,
            PoisonReport::Failed(_) => PoisonResult::Failed,
            PoisonReport::Impossible { .. } => PoisonResult::None,
        }
    }

    /// The `result` label value, as text.
    pub fn as_str(&self) -> &'static str {
        self.result().as_str()
    }
}

/// A stale Job of a fresh claim's job id, and what its delete came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleDeletion {
    /// The backend job id.
    pub job_id: String,
    /// The stale Job.
    pub stale: StaleJob,
    /// `Ok` when deleted or already gone; the error otherwise.
    pub result: Result<(), String>,
}

/// What one admission (or a later settle of one) came to.
#[derive(Debug)]
pub enum LaneOutcome {
    /// A job was claimed and its Job exists.
    Admitted {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// How an unclear create was settled, when its first answer did not tell.
        settled: Option<Settled>,
    },
    /// The first create was answered 409: the Job already existed (a lost
    /// race, a success).
    AlreadyExists {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
    },
    /// The backend had nothing claimable in this lane (204).
    Empty,
    /// The claim failed; nothing was claimed.
    ClaimFailed(BackendError),
    /// A job was claimed and no Job exists for it, nor will: its token was
    /// forgotten and the claim lapses (the backend requeues the job).
    CreateFailed {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// Why.
        reason: CreateFailure,
    },
    /// A claim that cannot become a Job for a reason of its own (see the
    /// module doc): reported failed once when it could be, never created.
    Poisoned {
        /// The backend job id, when the answer carried a valid one.
        job_id: Option<String>,
        /// Why.
        reason: PoisonReason,
        /// The words, as reported (never a token or a value of the answer).
        detail: String,
        /// What the report came to.
        report: PoisonReport,
    },
    /// A job was claimed and whether its Job exists is unknown (the create
    /// and the reads got no answer that tells): the lane holds a slot for it
    /// and settles it again on its next ticks.
    Unsettled {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
        /// The last error.
        error: String,
    },
}

impl LaneOutcome {
    /// The Job's name, when a Job now exists for the claim.
    pub fn created(&self) -> Option<&str> {
        match self {
            LaneOutcome::Admitted { job_name, .. }
            | LaneOutcome::AlreadyExists { job_name, .. } => Some(job_name),
            _ => None,
        }
    }
}

/// How a create whose answer did not tell was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The first answer that did not tell (e.g. a 500, a timeout).
    pub after: String,
    /// What showed the Job exists.
    pub by: Confirmation,
    /// Calls the settle made (creates and reads).
    pub calls: u32,
}

/// Why no Job exists for a claim.
#[derive(Debug, thiserror::Error)]
pub enum CreateFailure {
    /// The builder refused (publish claimed without a publisher image).
    #[error(transparent)]
    Build(#[from] job_builder::JobBuildError),
    /// The API server refused the create for good.
    #[error("API answered {code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The Status reason (`Forbidden`, `Invalid`, ...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// The claim grew older than half the lease before its Job was known to
    /// exist, and a read shows none: its lease may have lapsed, so it is not
    /// created any more.
    #[error(
        "the claim is {:.1}s old, past half the lease, and no Job exists: not creating it any more",
        .age.as_secs_f64()
    )]
    Lapsed {
        /// The claim's age.
        age: Duration,
    },
    /// Every create allowed got an answer that did not tell, and the last
    /// read shows no Job.
    #[error(
        "{calls} create and read calls did not create the Job (first: {first}); a read shows none"
    )]
    GaveUp {
        /// Calls made.
        calls: u32,
        /// The first unclear answer.
        first: String,
        /// Why it did not tell.
        first_reason: ErrorReason,
    },
}

/// A claimed job and the Job that serves it: what creating and settling it
/// needs. Its `Debug` leaves the Job out (the Job holds the per-job token).
#[derive(Clone)]
pub struct Creation {
    /// The lane.
    pub lane: Lane,
    /// The backend job id.
    pub job_id: String,
    /// The claim tag.
    pub claim: String,
    /// The Job's name.
    pub job_name: String,
    /// When the claim was sent (the lease cannot have started earlier).
    pub claimed_at: Instant,
    /// The first answer that did not tell, once there was one.
    pub unclear: Option<String>,
    /// Why it did not tell.
    pub unclear_reason: Option<ErrorReason>,
    /// The claim's per-job token, to report the job failed should the API
    /// server refuse its Job with 422 (`None` in tests that build one).
    token: Option<Secret>,
    job: Job,
}

impl fmt::Debug for Creation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Creation")
            .field("lane", &self.lane)
            .field("job_id", &self.job_id)
            .field("claim", &self.claim)
            .field("job_name", &self.job_name)
            .field("claimed_at", &self.claimed_at)
            .field("unclear", &self.unclear)
            .finish_non_exhaustive()
    }
}

impl Creation {
    /// The creation of `job` for the claim `claim` of `job_id`, claimed at
    /// `claimed_at`. The name is the Job's own, else the deterministic one.
    pub fn new(lane: Lane, job_id: &str, claim: &str, job: Job, claimed_at: Instant) -> Self {
        Creation {
            lane,
            job_id: job_id.to_owned(),
            claim: claim.to_owned(),
            job_name: job
                .metadata
                .name
                .clone()
                .unwrap_or_else(|| names::job_name(lane, job_id, claim)),
            claimed_at,
            unclear: None,
            unclear_reason: None,
            token: None,
            job,
        }
    }
}

/// A claimed job of either lane.
enum Claimed {
    Run(ClaimedRun),
    Publish(ClaimedPublish),
}

impl Claimed {
    fn id(&self) -> &str {
        match self {
            Claimed::Run(run) => &run.id,
            Claimed::Publish(publish) => &publish.id,
        }
    }

    fn token(&self) -> &Secret {
        match self {
            Claimed::Run(run) => &run.token,
            Claimed::Publish(publish) => &publish.token,
        }
    }

    fn lane(&self) -> Lane {
        match self {
            Claimed::Run(_) => Lane::Run,
            Claimed::Publish(_) => Lane::Publish,
        }
    }

    fn times(&self) -> ClaimTimes {
        match self {
            Claimed::Run(run) => ClaimTimes {
                enqueued_at: run.enqueued_at,
                lease_expires_at: run.lease_expires_at,
            },
            Claimed::Publish(publish) => ClaimTimes {
                enqueued_at: publish.enqueued_at,
                lease_expires_at: publish.lease_expires_at,
            },
        }
    }

    /// The request the Job carries, serialized, and its size.
    fn request_bytes(&self) -> usize {
        let request = match self {
            Claimed::Run(run) => &run.launch_request,
            Claimed::Publish(publish) => &publish.request,
        };
        request.to_string().len()
    }

    fn build(&self, settings: &JobSettings) -> Result<Job, job_builder::JobBuildError> {
        match self {
            Claimed::Run(run) => Ok(job_builder::driver_job(settings, run)),
            Claimed::Publish(publish) => job_builder::publisher_job(settings, publish),
        }
    }
}

/// The I/O edges one admission uses.
#[derive(Clone, Copy)]
pub struct AdmitDeps<'a> {
    /// The backend the claims go to.
    pub backend: &'a BackendClient,
    /// The Jobs API of the admitter's namespace.
    pub jobs: &'a Api<Job>,
    /// The pods API of the admitter's namespace (a stale pod that outlived
    /// its Job is deleted by name).
    pub pods: &'a Api<Pod>,
    /// The token vault.
    pub vault: &'a KeeperClient,
    /// What the Job builders read.
    pub settings: &'a JobSettings,
    /// Bound of each Kubernetes call.
    pub kube_timeout: Duration,
    /// Bounds of a settle.
    pub limits: SettleLimits,
}

impl fmt::Debug for AdmitDeps<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmitDeps")
            .field("backend", self.backend)
            .field("kube_timeout", &self.kube_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl AdmitDeps<'_> {
    fn settle_edges(&self) -> SettleEdges<'_> {
        SettleEdges {
            jobs: self.jobs,
            kube_timeout: self.kube_timeout,
            limits: self.limits,
        }
    }
}

/// An admission's outcome, the creation left unsettled, if it was, and the
/// stale Jobs deleted before it.
#[derive(Debug)]
pub struct Admission {
    /// What happened.
    pub outcome: LaneOutcome,
    /// The creation whose Job may exist, for the lane to hold and settle again.
    pub unsettled: Option<Creation>,
    /// Stale Jobs of the claimed job id, and what their deletes came to.
    pub stale: Vec<StaleDeletion>,
    /// When the claimed job was enqueued and its lease runs out, when a job
    /// was claimed (for the queue-wait metric).
    pub claimed: Option<ClaimTimes>,
    /// From sending the claim to its Job known to exist, when it is known now.
    pub created_after: Option<Duration>,
}

impl From<LaneOutcome> for Admission {
    fn from(outcome: LaneOutcome) -> Self {
        Admission {
            outcome,
            unsettled: None,
            stale: vec![],
            claimed: None,
            created_after: None,
        }
    }
}

/// A claim's times on the backend's clock, as its answer gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTimes {
    /// When the job entered the queue, when the answer said so.
    pub enqueued_at: Option<jiff::Timestamp>,
    /// When the claim's lease runs out (the claim's time plus the lease).
    pub lease_expires_at: jiff::Timestamp,
}

/// What the lane knows of a job id when it claims it: the cached Jobs of that
/// id and its own Jobs of that id created but not seen or not settled yet.
pub type JobsOfId<'a> = &'a (dyn Fn(&str) -> Vec<JobSummary> + Sync);

/// Claims one job of `lane`, deletes the stale Jobs of its id (`jobs_of_id`
/// tells what the lane knows of an id), creates its Job and settles the
/// create. A poisoned claim is reported failed once instead.
pub async fn admit(lane: Lane, deps: AdmitDeps<'_>, jobs_of_id: JobsOfId<'_>) -> Admission {
    // Measured before the claim is sent: the lease cannot start earlier, so
    // the claim's age is never under-estimated.
    let claimed_at = Instant::now();
    let answer = match lane {
        Lane::Run => deps
            .backend
            .claim_run_answer()
            .await
            .map(|c| c.map(|a| opened(a, Claimed::Run))),
        Lane::Publish => deps
            .backend
            .claim_publish_answer()
            .await
            .map(|c| c.map(|a| opened(a, Claimed::Publish))),
    };
    let claimed = match answer {
        Ok(Some(Ok(claimed))) => claimed,
        Ok(Some(Err(poisoned))) => return poisoned_answer(lane, deps, poisoned).await.into(),
        Ok(None) => return LaneOutcome::Empty.into(),
        Err(error) => return LaneOutcome::ClaimFailed(error).into(),
    };
    let times = claimed.times();
    let mut admission = admit_claimed(lane, deps, jobs_of_id, claimed, claimed_at).await;
    admission.claimed = Some(times);
    admission
}

/// Makes a Job of a claimed job: the size check, the vault `Put`, the
/// stale Jobs of its id deleted, its create settled.
async fn admit_claimed(
    lane: Lane,
    deps: AdmitDeps<'_>,
    jobs_of_id: JobsOfId<'_>,
    claimed: Claimed,
    claimed_at: Instant,
) -> Admission {
    let job_id = claimed.id().to_owned();
    let names::ClaimNames { claim, job_name } =
        names::claim_names(lane, &job_id, claimed.token().expose());

    let size = claimed.request_bytes();
    if size > MAX_REQUEST_BYTES {
        let what = match lane {
            Lane::Run => "launch request",
            Lane::Publish => "publish request",
        };
        let detail = format!(
            "the dispatcher cannot make a Job of this claim: its {what} is {size} bytes, over the {MAX_REQUEST_BYTES} bytes one environment variable of a pod can carry"
        );
        let report = report_failed(lane, deps, &job_id, claimed.token(), &detail).await;
        return LaneOutcome::Poisoned {
            job_id: Some(job_id),
            reason: PoisonReason::TooLarge,
            detail,
            report,
        }
        .into();
    }

    // The token goes to the vault first, so a death seen right after the
    // create finds it. A failed Put does not stop the Job.
    if let Err(error) = deps
        .vault
        .put(claimed.lane(), &job_id, &claim, claimed.token())
        .await
    {
        tracing::warn!(
            %lane, job_id = %job_id, error = %error_chain(&error),
            "could not hand the per-job token to the vault; a death of this Job is left to lost-job detection"
        );
    }

    let job = match claimed.build(deps.settings) {
        Ok(job) => job,
        Err(error) => {
            forget(deps, lane, &job_id, &claim).await;
            return LaneOutcome::CreateFailed {
                job_id,
                job_name,
                reason: CreateFailure::Build(error),
            }
            .into();
        }
    };
    // Before the new Job counts: no other live Job of this id may.
    let stale = plan::stale_jobs(lane, &job_id, &job_name, &jobs_of_id(&job_id));
    let stale = delete_stale(deps, &job_id, stale).await;

    let mut creation = Creation::new(lane, &job_id, &claim, job, claimed_at);
    creation.token = Some(claimed.token().clone());
    let settlement = settle::settle(
        deps.settle_edges(),
        &creation.job,
        &creation.job_name,
        claimed_at,
        Known::NotCreated,
    )
    .await;
    let mut admission = conclude(creation, settlement, deps).await;
    admission.stale = stale;
    admission
}

/// A claim's answer with the claimed job of its lane, or what could be read
/// of a poisoned one.
fn opened<T>(answer: ClaimAnswer<T>, lane: fn(T) -> Claimed) -> Result<Claimed, PoisonedClaim> {
    match answer {
        ClaimAnswer::Job(job) => Ok(lane(job)),
        ClaimAnswer::Poisoned(poisoned) => Err(poisoned),
    }
}

/// A claim answered 200 whose body cannot become a Job: reported failed with
/// its own token when the answer carried a usable id and token. Nothing was
/// put in the vault for it.
async fn poisoned_answer(lane: Lane, deps: AdmitDeps<'_>, poisoned: PoisonedClaim) -> LaneOutcome {
    let detail = format!(
        "the dispatcher cannot make a Job of this claim: its answer is malformed: {}",
        poisoned.reason
    );
    let report = match (&poisoned.id, &poisoned.token) {
        (Some(id), Some(token)) => report_failed(lane, deps, id, token, &detail).await,
        _ => PoisonReport::Impossible {
            shape: poisoned.shape.clone(),
        },
    };
    LaneOutcome::Poisoned {
        job_id: poisoned.id,
        reason: PoisonReason::Malformed,
        detail,
        report,
    }
}

/// Reports a poisoned claim failed with its own token, once: a run as the
/// death report does (`failed`, `infrastructure`), a publish as a failed
/// result. Bounded by the backend client's timeout and its one retry on
/// 429/503; a failure is not retried.
async fn report_failed(
    lane: Lane,
    deps: AdmitDeps<'_>,
    job_id: &str,
    token: &Secret,
    detail: &str,
) -> PoisonReport {
    let result = match lane {
        // The job's own data is at fault: failed as the job's own failure,
        // which the backend does not retry (a retry would carry the same
        // request and be poisoned again).
        Lane::Run => deps
            .backend
            .report_failed_run(job_id, token, FailureKind::Agent, detail)
            .await
            .map(|_| ()),
        Lane::Publish => {
            deps.backend
                .report_publish_failed(job_id, token, detail)
                .await
        }
    };
    match result {
        Ok(()) => PoisonReport::Reported,
        Err(error) => PoisonReport::Failed(error_chain(&error)),
    }
}

/// Deletes each stale Job (background propagation, bounded; a 404 means it
/// is gone already, which is as good).
async fn delete_stale(
    deps: AdmitDeps<'_>,
    job_id: &str,
    stale: Vec<StaleJob>,
) -> Vec<StaleDeletion> {
    let mut done = Vec::with_capacity(stale.len());
    for job in stale {
        let answer = match &job.pod {
            // The Job is gone already; the pod that outlived it runs on.
            Some(pod) => call(
                KubeCall::DeletePod,
                deps.kube_timeout,
                deps.pods.delete(pod, &DeleteParams::default()),
            )
            .await
            .map(drop),
            None => call(
                KubeCall::DeleteJob,
                deps.kube_timeout,
                deps.jobs.delete(&job.name, &DeleteParams::background()),
            )
            .await
            .map(drop),
        };
        let result = match answer {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error_chain(&error)),
        };
        done.push(StaleDeletion {
            job_id: job_id.to_owned(),
            stale: job,
            result,
        });
    }
    done
}

/// Settles again a creation left unsettled: it starts with a read.
pub async fn resettle(creation: Creation, deps: AdmitDeps<'_>) -> Admission {
    let start = Known::Unknown {
        after: settle::Call::Create,
        why: creation.unclear.clone().unwrap_or_default(),
    };
    let settlement = settle::settle(
        deps.settle_edges(),
        &creation.job,
        &creation.job_name,
        creation.claimed_at,
        start,
    )
    .await;
    conclude(creation, settlement, deps).await
}

/// Turns a settle's end into the lane's outcome; forgets the token when no
/// Job will exist.
async fn conclude(
    mut creation: Creation,
    settlement: settle::Settlement,
    deps: AdmitDeps<'_>,
) -> Admission {
    if creation.unclear.is_none() {
        creation.unclear = settlement.first_unclear.clone();
        creation.unclear_reason = settlement.first_unclear_reason;
    }
    let settled = |by| {
        creation.unclear.clone().map(|after| Settled {
            after,
            by,
            calls: settlement.calls,
        })
    };
    let created_after =
        matches!(settlement.end, End::Exists(_)).then(|| creation.claimed_at.elapsed());
    let outcome = match settlement.end {
        End::Exists(Confirmation::AlreadyExists) if creation.unclear.is_none() => {
            LaneOutcome::AlreadyExists {
                job_id: creation.job_id,
                job_name: creation.job_name,
            }
        }
        End::Exists(by) => LaneOutcome::Admitted {
            settled: settled(by),
            job_id: creation.job_id,
            job_name: creation.job_name,
        },
        End::Refused {
            code: 422,
            reason,
            message,
        } if creation.token.is_some() => {
            forget(deps, creation.lane, &creation.job_id, &creation.claim).await;
            let detail = format!(
                "the dispatcher cannot make a Job of this claim: the API server refused its Job: 422 {reason}: {message}"
            );
            let report = match &creation.token {
                Some(token) => {
                    report_failed(creation.lane, deps, &creation.job_id, token, &detail).await
                }
                None => PoisonReport::Failed("no token".into()),
            };
            LaneOutcome::Poisoned {
                job_id: Some(creation.job_id),
                reason: PoisonReason::Invalid,
                detail,
                report,
            }
        }
        End::Refused {
            code,
            reason,
            message,
        } => {
            forget(deps, creation.lane, &creation.job_id, &creation.claim).await;
            LaneOutcome::CreateFailed {
                job_id: creation.job_id,
                job_name: creation.job_name,
                reason: CreateFailure::Api {
                    code,
                    reason,
                    message,
                },
            }
        }
        End::GaveUp(why) => {
            forget(deps, creation.lane, &creation.job_id, &creation.claim).await;
            let reason = match why {
                GiveUp::Lapsed => CreateFailure::Lapsed {
                    age: settlement.claim_age,
                },
                GiveUp::Exhausted => CreateFailure::GaveUp {
                    calls: settlement.calls,
                    first: creation.unclear.clone().unwrap_or_default(),
                    first_reason: creation.unclear_reason.unwrap_or(ErrorReason::Other),
                },
            };
            LaneOutcome::CreateFailed {
                job_id: creation.job_id,
                job_name: creation.job_name,
                reason,
            }
        }
        End::Unknown(error) => {
            return Admission {
                outcome: LaneOutcome::Unsettled {
                    job_id: creation.job_id.clone(),
                    job_name: creation.job_name.clone(),
                    error,
                },
                unsettled: Some(creation),
                stale: vec![],
                claimed: None,
                created_after: None,
            };
        }
    };
    Admission {
        created_after,
        ..outcome.into()
    }
}

/// Drops the token of a claim that will have no Job (best effort: the
/// lease-keeper also drops a token with no Job after a lease).
async fn forget(deps: AdmitDeps<'_>, lane: Lane, job_id: &str, claim: &str) {
    if let Err(error) = deps.vault.forget(job_id, claim).await {
        tracing::warn!(
            %lane, job_id, claim, error = %error_chain(&error),
            "could not forget the per-job token of a claim with no Job; the lease-keeper drops it after a lease"
        );
    }
}
