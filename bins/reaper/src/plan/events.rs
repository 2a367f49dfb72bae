//! The Event the reaper leaves for a sandbox it deleted (pure). It goes on
//! the driver Job the sandbox served, not on the pod: the pod is gone a
//! moment later and its Events would live in the sandbox namespace, where
//! the dispatcher's Role may not reach, while the Job is what an operator
//! describes (`kubectl describe job`) and what the death report's Event is
//! on too. An orphan sandbox has no Job (none carries its job id), so its
//! reap leaves no Event; it is logged and counted
//! (`sandboxes_reaped_total{reason="orphan"}`) as before.

use super::{DeleteReason, PodDelete};
use tcab_shared::events::{Notice, Reason, Regarding};

/// The Event for `delete` once the pod is deleted, on the Job named by its
/// reason in `job_namespace` (with that Job's uid when the view has it);
/// `None` for an orphan.
pub(crate) fn reaped(job_namespace: &str, delete: &PodDelete, uid: Option<&str>) -> Option<Notice> {
    let job = match &delete.reason {
        DeleteReason::DriverJobFailed { job }
        | DeleteReason::DriverJobStuck { job }
        | DeleteReason::Leftover { job, .. } => job,
        DeleteReason::Orphan { .. } => return None,
    };
    let note = format!(
        "sandbox pod {} of job {} deleted: {}",
        delete.pod.key(),
        delete.job_id,
        delete.reason
    );
    Some(Notice::new(
        Regarding::job(job_namespace, job, uid),
        Reason::SandboxReaped,
        note,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PodSummary;
    use jiff::SignedDuration;

    fn delete(reason: DeleteReason) -> PodDelete {
        PodDelete {
            pod: PodSummary {
                namespace: "sandboxes".into(),
                name: "sandbox-7".into(),
                uid: Some("pod-uid".into()),
                managed_by: Some("tcab-driver".into()),
                job_id: Some("7".into()),
                created_at: None,
                terminating: false,
                job_owned: false,
            },
            job_id: "7".into(),
            reason,
        }
    }

    #[test]
    fn a_reaped_sandbox_is_an_event_on_its_driver_job() {
        let d = delete(DeleteReason::DriverJobFailed {
            job: "tcab-driver-7-abcd1234".into(),
        });
        let n = reaped("tcab", &d, Some("job-uid")).expect("an Event");
        assert_eq!(n.reason, Reason::SandboxReaped);
        assert_eq!(
            n.regarding,
            Regarding::job("tcab", "tcab-driver-7-abcd1234", Some("job-uid"))
        );
        assert_eq!(
            n.note,
            "sandbox pod sandboxes/sandbox-7 of job 7 deleted: driver Job tcab-driver-7-abcd1234 failed"
        );
        let stuck = delete(DeleteReason::DriverJobStuck { job: "j".into() });
        assert!(reaped("tcab", &stuck, None).is_some());
        let leftover = delete(DeleteReason::Leftover {
            job: "j".into(),
            age: SignedDuration::from_secs(600),
        });
        assert_eq!(
            reaped("tcab", &leftover, None)
                .expect("an Event")
                .regarding
                .name,
            "j"
        );
    }

    #[test]
    fn an_orphan_has_no_job_to_carry_an_event() {
        let orphan = delete(DeleteReason::Orphan {
            age: SignedDuration::from_secs(600),
        });
        assert_eq!(reaped("tcab", &orphan, None), None);
    }
}
