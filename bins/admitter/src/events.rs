//! The Events the admitter leaves on Jobs, decided from what an admission
//! came to (pure): a claim that failed fast ([`failed_fast`]: it cannot
//! become a Job, and was reported failed) and a stale Job deleted
//! ([`deleted_stale`]). The notes carry the outcome's own words, which
//! never hold a token or a value of the claim's answer.

use crate::admit::{LaneOutcome, PoisonReport, StaleDeletion};
use tcab_shared::events::{Notice, Reason, Regarding};

/// The Event on the Job a poisoned claim has (a 422) or would have had:
/// `None` for any other outcome, or when the claim's answer gave no usable
/// id and token to name the Job by. Its Job usually does not exist, so the
/// Event carries no uid; it is found by the Job's name or by its reason.
pub(crate) fn failed_fast(namespace: &str, outcome: &LaneOutcome) -> Option<Notice> {
    let LaneOutcome::Poisoned {
        job_id: Some(job_id),
        job_name: Some(job_name),
        reason,
        detail,
        report,
    } = outcome
    else {
        return None;
    };
    let reported = match report {
        PoisonReport::Reported => "reported it failed to the backend",
        PoisonReport::Failed(_) => {
            "reporting it failed did not land: the claim lapses and the backend requeues the job"
        }
        PoisonReport::Impossible { .. } => "nothing to report it with",
    };
    let note = format!(
        "claim of job {job_id} failed fast ({}): {detail}; {reported}",
        reason.as_str()
    );
    Some(Notice::new(
        Regarding::job(namespace, job_name, None),
        Reason::FailedFast,
        note,
    ))
}

/// The Event on a stale Job the admitter deleted (or found gone); `None`
/// when its delete failed (it is tried again at the next claim of its id).
pub(crate) fn deleted_stale(namespace: &str, deletion: &StaleDeletion) -> Option<Notice> {
    deletion.result.as_ref().ok()?;
    let stale = &deletion.stale;
    let what = match &stale.pod {
        Some(pod) => format!("the Job was gone and its pod {pod} deleted"),
        None => "deleted".to_owned(),
    };
    let claim = stale.claim.as_deref().unwrap_or("(none)");
    let note = format!(
        "Job of job {} under the older claim {claim} {what}: the backend handed the job out again, and this claim's token no longer works",
        deletion.job_id
    );
    Some(Notice::new(
        Regarding::job(namespace, &stale.name, None),
        Reason::DeletedStale,
        note,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::PoisonReason;
    use crate::plan::StaleJob;

    fn poisoned(job_name: Option<&str>, report: PoisonReport) -> LaneOutcome {
        LaneOutcome::Poisoned {
            job_id: Some("7".into()),
            job_name: job_name.map(str::to_owned),
            reason: PoisonReason::Invalid,
            detail: "the API server refused its Job: 422 Invalid: spec is bad".into(),
            report,
        }
    }

    #[test]
    fn a_poisoned_claim_with_a_job_name_fails_fast_on_that_name() {
        let n = failed_fast(
            "tcab",
            &poisoned(Some("tcab-driver-7-abcd1234"), PoisonReport::Reported),
        )
        .expect("an Event");
        assert_eq!(n.reason, Reason::FailedFast);
        assert_eq!(
            n.regarding,
            Regarding::job("tcab", "tcab-driver-7-abcd1234", None)
        );
        assert!(n.note.contains("job 7 failed fast (invalid)"), "{}", n.note);
        assert!(n.note.contains("422 Invalid: spec is bad"), "{}", n.note);
        assert!(
            n.note.ends_with("reported it failed to the backend"),
            "{}",
            n.note
        );
        let failed = failed_fast(
            "tcab",
            &poisoned(Some("j"), PoisonReport::Failed("503".into())),
        )
        .expect("an Event");
        assert!(failed.note.contains("did not land"), "{}", failed.note);
    }

    #[test]
    fn no_event_without_a_job_name_or_for_other_outcomes() {
        assert_eq!(
            failed_fast("tcab", &poisoned(None, PoisonReport::Reported)),
            None
        );
        assert_eq!(failed_fast("tcab", &LaneOutcome::Empty), None);
    }

    #[test]
    fn a_stale_job_deleted_is_an_event_and_a_failed_delete_is_none() {
        let deletion = |pod: Option<&str>, result: Result<(), String>| StaleDeletion {
            job_id: "7".into(),
            stale: StaleJob {
                name: "tcab-driver-7-old00000".into(),
                claim: Some("old00000".into()),
                pod: pod.map(str::to_owned),
            },
            result,
        };
        let n = deleted_stale("tcab", &deletion(None, Ok(()))).expect("an Event");
        assert_eq!(n.reason, Reason::DeletedStale);
        assert_eq!(n.regarding.name, "tcab-driver-7-old00000");
        assert!(
            n.note.contains("older claim old00000 deleted"),
            "{}",
            n.note
        );
        let pod = deleted_stale("tcab", &deletion(Some("p-1"), Ok(()))).expect("an Event");
        assert!(pod.note.contains("its pod p-1 deleted"), "{}", pod.note);
        assert_eq!(
            deleted_stale("tcab", &deletion(None, Err("403".into()))),
            None
        );
    }
}
