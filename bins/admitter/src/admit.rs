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

use crate::job_builder::{self, JobSettings};
use crate::keeper_client::KeeperClient;
use crate::settle::{self, Confirmation, End, GiveUp, Known, SettleEdges, SettleLimits};
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use std::fmt;
use std::time::Duration;
use tcab_shared::backend::{BackendClient, BackendError, ClaimedPublish, ClaimedRun};
use tcab_shared::{Lane, Secret, error_chain, names};
use tokio::time::Instant;

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

/// An admission's outcome, and the creation left unsettled, if it was.
#[derive(Debug)]
pub struct Admission {
    /// What happened.
    pub outcome: LaneOutcome,
    /// The creation whose Job may exist, for the lane to hold and settle again.
    pub unsettled: Option<Creation>,
}

impl From<LaneOutcome> for Admission {
    fn from(outcome: LaneOutcome) -> Self {
        Admission {
            outcome,
            unsettled: None,
        }
    }
}

/// Claims one job of `lane`, creates its Job and settles the create.
pub async fn admit(lane: Lane, deps: AdmitDeps<'_>) -> Admission {
    // Measured before the claim is sent: the lease cannot start earlier, so
    // the claim's age is never under-estimated.
    let claimed_at = Instant::now();
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
        Ok(None) => return LaneOutcome::Empty.into(),
        Err(error) => return LaneOutcome::ClaimFailed(error).into(),
    };
    let job_id = claimed.id().to_owned();
    let claim = names::claim_tag(claimed.token().expose());
    let job_name = names::job_name(lane, &job_id, &claim);

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
    let creation = Creation::new(lane, &job_id, &claim, job, claimed_at);
    let settlement = settle::settle(
        deps.settle_edges(),
        &creation.job,
        &creation.job_name,
        claimed_at,
        Known::NotCreated,
    )
    .await;
    conclude(creation, settlement, deps).await
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
    }
    let settled = |by| {
        creation.unclear.clone().map(|after| Settled {
            after,
            by,
            calls: settlement.calls,
        })
    };
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
            };
        }
    };
    outcome.into()
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
