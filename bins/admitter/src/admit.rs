//! One admission in one lane: claim the oldest queued job, hand its per-job
//! token to the vault, create its Job under its deterministic name.
//!
//! Every step's failure is an outcome, never a panic or an early return that
//! skips the other lane: the caller records it in the lane's state.

use crate::vault::VaultClient;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use std::fmt;
use tcab_shared::backend::{BackendClient, BackendError, ClaimedPublish, ClaimedRun};
use tcab_shared::job_builder::{self, JobSettings};
use tcab_shared::{Lane, Secret, labels};

/// What the admission of one lane did.
#[derive(Debug)]
pub enum LaneOutcome {
    /// A job was claimed and its Job created.
    Admitted {
        /// The backend job id.
        job_id: String,
        /// The Job's name.
        job_name: String,
    },
    /// The Job already existed (409 AlreadyExists): a lost race, a success.
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
    /// A job was claimed but its Job could not be created; the claim lapses
    /// and the backend requeues the job.
    CreateFailed {
        /// The backend job id.
        job_id: String,
        /// The Job's name (as far as it was known).
        job_name: String,
        /// Why, as the API (or the builder) said.
        reason: CreateFailure,
    },
}

impl LaneOutcome {
    /// Whether a Job of this lane now exists for a fresh claim.
    pub fn created(&self) -> Option<&str> {
        match self {
            LaneOutcome::Admitted { job_name, .. }
            | LaneOutcome::AlreadyExists { job_name, .. } => Some(job_name),
            _ => None,
        }
    }
}

/// Why a Job was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateFailure {
    /// The builder refused (publish claimed without a publisher image).
    #[error(transparent)]
    Build(#[from] job_builder::JobBuildError),
    /// The API server answered with an error status.
    #[error("API answered {code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The Status reason (`Forbidden`, `Invalid`, ...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// The request did not get an answer (connection, timeout, ...).
    #[error("request failed")]
    Request(#[source] kube::Error),
}

impl CreateFailure {
    /// Whether the Job may exist anyway: the request got no answer, or the
    /// server failed after perhaps storing it. Such a Job counts against its
    /// lane's cap until the watch shows it (or the unseen entry expires).
    pub fn may_have_created(&self) -> bool {
        match self {
            CreateFailure::Build(_) => false,
            CreateFailure::Api { code, .. } => *code >= 500,
            CreateFailure::Request(_) => true,
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

    fn build(&self, settings: &JobSettings) -> Result<Job, job_builder::JobBuildError> {
        match self {
            Claimed::Run(run) => Ok(job_builder::driver_job(settings, run)),
            Claimed::Publish(publish) => job_builder::publisher_job(settings, publish),
        }
    }
}

/// The I/O edges one admission uses.
#[derive(Clone)]
pub struct AdmitDeps<'a> {
    /// The backend the claims go to.
    pub backend: &'a BackendClient,
    /// The Jobs API of the admitter's namespace.
    pub jobs: &'a Api<Job>,
    /// The token vault.
    pub vault: &'a VaultClient,
    /// What the Job builders read.
    pub settings: &'a JobSettings,
}

impl fmt::Debug for AdmitDeps<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmitDeps")
            .field("backend", self.backend)
            .finish_non_exhaustive()
    }
}

/// Claims one job of `lane` and creates its Job.
pub async fn admit(lane: Lane, deps: AdmitDeps<'_>) -> LaneOutcome {
    let claimed = match lane {
        Lane::Run => deps.backend.claim_run().await.map(|c| c.map(Claimed::Run)),
        Lane::Publish => deps
            .backend
            .claim_publish()
            .await
            .map(|c| c.map(Claimed::Publish)),
    };
    let claimed = match claimed {
        Ok(Some(claimed)) => claimed,
        Ok(None) => return LaneOutcome::Empty,
        Err(error) => return LaneOutcome::ClaimFailed(error),
    };
    let job_id = claimed.id().to_owned();
    let claim = labels::claim_tag(claimed.token().expose());
    let fallback_name = labels::job_name(lane, &job_id, &claim);

    // The token goes to the vault first, so a death seen right after the
    // create finds it. A failed Put does not stop the Job.
    if let Err(error) = deps
        .vault
        .put(claimed.lane(), &job_id, &claim, claimed.token())
        .await
    {
        tracing::warn!(
            %lane, job_id = %job_id, %error,
            "could not hand the per-job token to the vault; a death of this Job is left to lost-job detection"
        );
    }

    let job = match claimed.build(deps.settings) {
        Ok(job) => job,
        Err(error) => {
            return LaneOutcome::CreateFailed {
                job_id,
                job_name: fallback_name,
                reason: CreateFailure::Build(error),
            };
        }
    };
    let job_name = job.metadata.name.clone().unwrap_or(fallback_name);
    match deps.jobs.create(&PostParams::default(), &job).await {
        Ok(_) => LaneOutcome::Admitted { job_id, job_name },
        Err(kube::Error::Api(status))
            if status.is_already_exists() || (status.code == 409 && status.reason.is_empty()) =>
        {
            LaneOutcome::AlreadyExists { job_id, job_name }
        }
        Err(kube::Error::Api(status)) => LaneOutcome::CreateFailed {
            job_id,
            job_name,
            reason: CreateFailure::Api {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
        },
        Err(error) => LaneOutcome::CreateFailed {
            job_id,
            job_name,
            reason: CreateFailure::Request(error),
        },
    }
}
