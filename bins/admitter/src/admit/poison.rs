//! Poisoned claims end once: a claim whose body cannot become a Job is
//! reported failed with its own token, once, instead of lapsing and being
//! handed out again every lease.

use super::{AdmitDeps, LaneOutcome, PoisonReason, PoisonReport};
use tcab_shared::backend::{FailureKind, PoisonedClaim};
use tcab_shared::{Lane, Secret, error_chain, names};

/// A claim answered 200 whose body cannot become a Job: reported failed with
/// its own token when the answer carried a usable id and token. Nothing was
/// put in the vault for it.
pub(super) async fn poisoned_answer(
    lane: Lane,
    deps: AdmitDeps<'_>,
    poisoned: PoisonedClaim,
) -> LaneOutcome {
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
    let job_name = match (&poisoned.id, &poisoned.token) {
        (Some(id), Some(token)) => Some(names::claim_names(lane, id, token.expose()).job_name),
        _ => None,
    };
    LaneOutcome::Poisoned {
        job_id: poisoned.id,
        job_name,
        reason: PoisonReason::Malformed,
        detail,
        report,
    }
}

/// Reports a poisoned claim failed with its own token, once: a run as the
/// death report does (`failed`, `infrastructure`), a publish as a failed
/// result. Bounded by the backend client's timeout and its one retry on
/// 429/503; a failure is not retried.
pub(super) async fn report_failed(
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
