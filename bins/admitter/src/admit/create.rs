//! Creating a claimed job's Job: first the stale Jobs of its job id are
//! deleted (one live Job per backend job; [`crate::plan::stale_jobs`]
//! decides which), then the creation, its settle (now or on a later tick)
//! turned into the lane's outcome, and the token forgotten when no Job will
//! exist.

use super::poison::report_failed;
use super::{
    Admission, AdmitDeps, CreateFailure, LaneOutcome, PoisonReason, PoisonReport, Settled,
    StaleDeletion,
};
use crate::plan::StaleJob;
use crate::settle::{self, Confirmation, End, GiveUp, Known};
use k8s_openapi::api::batch::v1::Job;
use kube::api::DeleteParams;
use std::fmt;
use tcab_shared::kube_api::{KubeCall, call};
use tcab_shared::metrics::labels::ErrorReason;
use tcab_shared::{Lane, Secret, error_chain, names};
use tokio::time::Instant;

/// Deletes each stale Job (background propagation, bounded; a 404 means it
/// is gone already, which is as good).
pub(super) async fn delete_stale(
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
    pub(super) token: Option<Secret>,
    pub(super) job: Job,
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

/// Settles again a creation left unsettled: it starts with a read.
pub(crate) async fn resettle(creation: Creation, deps: AdmitDeps<'_>) -> Admission {
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
pub(super) async fn conclude(
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
                job_name: Some(creation.job_name),
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
pub(super) async fn forget(deps: AdmitDeps<'_>, lane: Lane, job_id: &str, claim: &str) {
    if let Err(error) = deps.vault.forget(job_id, claim).await {
        tracing::warn!(
            %lane, job_id, claim, error = %error_chain(&error),
            "could not forget the per-job token of a claim with no Job; the lease-keeper drops it after a lease"
        );
    }
}
