//! The confirmation: whether a fresh read of the owned Jobs of one job id,
//! made just before the deletes, still allows them.

use super::{DeleteReason, IdVerdict, KeepReason, judge_ids};
use std::borrow::Borrow;
use std::collections::BTreeSet;
use tcab_shared::job_cache::{JobSummary, summaries};

/// Whether a fresh read of the owned Jobs carrying `job_id` (made after
/// the plan, just before the deletes) still allows deleting that id's
/// sandboxes for `reason`. An orphan needs no Job with the id at all; a
/// leftover needs every fresh Job with the id to be a succeeded driver (or
/// none left); a driver reap needs the fresh Jobs to judge the id a reap
/// too (or no Job with the id to be left). Anything else is a doubt: keep,
/// and let the next tick plan again.
pub(crate) fn confirm(
    job_id: &str,
    reason: &DeleteReason,
    fresh: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
) -> Result<(), KeepReason> {
    let mut same_id: Vec<&JobSummary> = summaries(fresh)
        .filter(|j| j.job_id() == Some(job_id))
        .collect();
    same_id.sort_by(|a, b| a.name().cmp(b.name()));
    let Some(first_job) = same_id.first() else {
        return Ok(());
    };
    if matches!(reason, DeleteReason::Orphan { .. }) {
        return Err(KeepReason::JobFound {
            job: first_job.name().to_string(),
        });
    }
    let leftover = matches!(reason, DeleteReason::Leftover { .. });
    let first_name = first_job.name().to_string();
    match judge_ids(&same_id, dead).remove(job_id) {
        Some(IdVerdict::Reap { .. }) if !leftover => Ok(()),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { .. })) if leftover => Ok(()),
        Some(IdVerdict::Reap { .. }) => Err(KeepReason::JobFound { job: first_name }),
        Some(IdVerdict::Hold(keep)) => Err(keep),
        // Only a malformed id lands here; the plan never deletes for one.
        None => Err(KeepReason::NoJobId),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{dead_of, failed_terminating, failing, job, no_dead};
    use jiff::SignedDuration;
    use tcab_shared::Lane;
    use tcab_shared::job_cache::JobPhase;

    #[test]
    fn a_fresh_read_confirms_or_stops_a_delete() {
        let failed = job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed);
        let driver_reason = DeleteReason::DriverJobFailed {
            job: failed.name().to_string(),
        };
        let orphan = DeleteReason::Orphan {
            age: SignedDuration::from_secs(700),
        };
        let none = no_dead();
        // The read agrees with the plan.
        assert_eq!(
            confirm("a", &driver_reason, std::slice::from_ref(&failed), &none),
            Ok(())
        );
        // The failed Job is gone meanwhile, and nothing else carries the id.
        assert_eq!(
            confirm("a", &driver_reason, &[] as &[JobSummary], &none),
            Ok(())
        );
        // A live Job of the same id the view had not shown yet.
        let live = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), live.clone()], &none),
            Err(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            })
        );
        // Its pods terminate again (a fresher status than the view's).
        let terminating = failed_terminating("tcab-driver-a-1", "a");
        assert!(matches!(
            confirm("a", &driver_reason, &[terminating], &none),
            Err(KeepReason::PodsTerminating { .. })
        ));
        // A stuck Job judged dead confirms while it still shows failure.
        let stuck = failing("tcab-driver-a-1", "a");
        let dead = dead_of(&[&stuck]);
        let stuck_reason = DeleteReason::DriverJobStuck {
            job: stuck.name().to_string(),
        };
        assert_eq!(
            confirm("a", &stuck_reason, std::slice::from_ref(&stuck), &dead),
            Ok(())
        );
        // Jobs of other ids in the answer are ignored.
        let other = job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), other.clone()], &none),
            Ok(())
        );
        // An orphan needs no Job with its id at all.
        assert_eq!(confirm("gone", &orphan, &[other], &none), Ok(()));
        assert_eq!(
            confirm("a", &orphan, &[failed], &none),
            Err(KeepReason::JobFound {
                job: "tcab-driver-a-1".into()
            })
        );
    }
}
