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
//!
//! This module holds [`admit`], which runs the steps in order, and reads
//! the claim's answer ([`Claimed`]). Beside it: `poison` ends a poisoned
//! claim once, `create` deletes the stale Jobs of the claim's id, then
//! creates and settles its Job (and settles later) into an outcome, and
//! `outcome` holds what an admission came to.

mod create;
mod outcome;
mod poison;

pub(crate) use create::{Creation, resettle};
pub(crate) use outcome::{Admission, ClaimTimes, StaleDeletion};
pub use outcome::{CreateFailure, LaneOutcome, PoisonReason, PoisonReport, Settled};

use crate::job_builder::{self, JobSettings};
use crate::keeper_client::KeeperClient;
use crate::plan;
use crate::settle::{self, Known, SettleEdges, SettleLimits};
use create::{conclude, delete_stale, forget};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use poison::{poisoned_answer, report_failed};
use std::fmt;
use std::time::Duration;
use tcab_shared::backend::{BackendClient, ClaimAnswer, ClaimedPublish, ClaimedRun, PoisonedClaim};
use tcab_shared::job_cache::JobSummary;
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

/// The I/O edges one admission uses.
#[derive(Clone, Copy)]
pub(crate) struct AdmitDeps<'a> {
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
    pub(super) fn settle_edges(&self) -> SettleEdges<'_> {
        SettleEdges {
            jobs: self.jobs,
            kube_timeout: self.kube_timeout,
            limits: self.limits,
        }
    }
}

/// What the lane knows of a job id when it claims it: the cached Jobs of that
/// id and its own Jobs of that id created but not seen or not settled yet.
pub(crate) type JobsOfId<'a> = &'a (dyn Fn(&str) -> Vec<JobSummary> + Sync);

/// Claims one job of `lane`, deletes the stale Jobs of its id (`jobs_of_id`
/// tells what the lane knows of an id), creates its Job and settles the
/// create. A poisoned claim is reported failed once instead.
pub(crate) async fn admit(lane: Lane, deps: AdmitDeps<'_>, jobs_of_id: JobsOfId<'_>) -> Admission {
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
    let named = names::claim_names(lane, &job_id, claimed.token().expose());

    let size = claimed.request_bytes();
    if size > MAX_REQUEST_BYTES {
        let what = lane.spec().request;
        let detail = format!(
            "the dispatcher cannot make a Job of this claim: its {what} is {size} bytes, over the {MAX_REQUEST_BYTES} bytes one environment variable of a pod can carry"
        );
        let report = report_failed(lane, deps, &job_id, claimed.token(), &detail).await;
        return LaneOutcome::Poisoned {
            job_id: Some(job_id),
            job_name: Some(named.job_name),
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
        .put(claimed.lane(), &job_id, &named.claim, claimed.token())
        .await
    {
        tracing::warn!(
            %lane, job_id = %job_id, error = %error_chain(&error),
            "could not hand the per-job token to the vault; a death of this Job is left to lost-job detection"
        );
    }

    let job = claimed.build(deps.settings, &named);
    let names::ClaimNames { claim, job_name } = named;
    let job = match job {
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

    /// The Job of this claim, named `names` (derived once per admission).
    fn build(
        &self,
        settings: &JobSettings,
        names: &names::ClaimNames,
    ) -> Result<Job, job_builder::JobBuildError> {
        match self {
            Claimed::Run(run) => Ok(job_builder::named_driver_job(settings, run, names)),
            Claimed::Publish(publish) => job_builder::named_publisher_job(settings, publish, names),
        }
    }
}

/// A claim's answer with the claimed job of its lane, or what could be read
/// of a poisoned one.
fn opened<T>(answer: ClaimAnswer<T>, lane: fn(T) -> Claimed) -> Result<Claimed, PoisonedClaim> {
    match answer {
        ClaimAnswer::Job(job) => Ok(lane(job)),
        ClaimAnswer::Poisoned(poisoned) => Err(poisoned),
    }
}
