//! The Job's evidence: its failure conditions (`Failed`, then
//! `FailureTarget`), and a Job rebuilt from its cached summary so a death
//! can be explained after the Job itself is gone.

use super::DeathCause;
use super::summary::text;
use k8s_openapi::api::batch::v1::{Job, JobCondition};

/// The Job condition reason that only says "the pod failed" (backoffLimit
/// is 0): it names no cause, so other evidence is preferred to it.
pub(super) const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";

/// A Job object carrying what [`death_cause`](super::death_cause) reads of a Job (name, lane,
/// failure conditions, failed count), rebuilt from its cached summary, so a
/// death can be explained after the Job itself is gone.
pub(crate) fn job_for_cause(summary: &tcab_shared::job_cache::JobSummary) -> Job {
    use k8s_openapi::api::batch::v1::JobStatus;
    let condition = |kind: &str, c: &tcab_shared::job_cache::JobCondition| JobCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
        message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        ..JobCondition::default()
    };
    let conditions: Vec<JobCondition> = [
        summary.failed().map(|c| condition("Failed", c)),
        summary
            .failure_target()
            .map(|c| condition("FailureTarget", c)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut job = Job::default();
    job.metadata.name = Some(summary.name().to_string());
    job.metadata.labels = Some(
        [(
            tcab_shared::names::JOB_KIND.to_owned(),
            summary.lane.label_value().to_owned(),
        )]
        .into(),
    );
    job.status = Some(JobStatus {
        failed: Some(i32::from(summary.failed_pods)).filter(|n| *n > 0),
        conditions: Some(conditions).filter(|c| !c.is_empty()),
        ..JobStatus::default()
    });
    job
}

/// The Job's failure conditions with status True: `Failed` ones first,
/// then `FailureTarget` (set before `Failed` on recent clusters).
pub(super) fn failure_conditions(job: &Job) -> Vec<&JobCondition> {
    let all: Vec<&JobCondition> = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status.eq_ignore_ascii_case("true"))
        .collect();
    ["Failed", "FailureTarget"]
        .iter()
        .flat_map(|kind| all.iter().copied().filter(move |c| c.type_ == *kind))
        .collect()
}

pub(super) fn condition_cause(cond: &JobCondition) -> DeathCause {
    DeathCause::JobCondition {
        kind: text(Some(&cond.type_)),
        reason: text(cond.reason.as_deref()),
        message: text(cond.message.as_deref()),
    }
}
