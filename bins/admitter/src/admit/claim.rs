//! The claim's answer: the claimed job of either lane, or what could be
//! read of a poisoned one.

use super::ClaimTimes;
use crate::job_builder::{self, JobSettings};
use k8s_openapi::api::batch::v1::Job;
use tcab_shared::backend::{ClaimAnswer, ClaimedPublish, ClaimedRun, PoisonedClaim};
use tcab_shared::{Lane, Secret, names};

/// A claimed job of either lane.
pub(super) enum Claimed {
    Run(ClaimedRun),
    Publish(ClaimedPublish),
}

impl Claimed {
    pub(super) fn id(&self) -> &str {
        match self {
            Claimed::Run(run) => &run.id,
            Claimed::Publish(publish) => &publish.id,
        }
    }

    pub(super) fn token(&self) -> &Secret {
        match self {
            Claimed::Run(run) => &run.token,
            Claimed::Publish(publish) => &publish.token,
        }
    }

    pub(super) fn lane(&self) -> Lane {
        match self {
            Claimed::Run(_) => Lane::Run,
            Claimed::Publish(_) => Lane::Publish,
        }
    }

    pub(super) fn times(&self) -> ClaimTimes {
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
    pub(super) fn request_bytes(&self) -> usize {
        let request = match self {
            Claimed::Run(run) => &run.launch_request,
            Claimed::Publish(publish) => &publish.request,
        };
        request.to_string().len()
    }

    /// The Job of this claim, named `names` (derived once per admission).
    pub(super) fn build(
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
pub(super) fn opened<T>(
    answer: ClaimAnswer<T>,
    lane: fn(T) -> Claimed,
) -> Result<Claimed, PoisonedClaim> {
    match answer {
        ClaimAnswer::Job(job) => Ok(lane(job)),
        ClaimAnswer::Poisoned(poisoned) => Err(poisoned),
    }
}
