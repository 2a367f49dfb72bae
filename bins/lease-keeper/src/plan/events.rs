//! The Events the lease-keeper leaves on the Jobs it acts on, decided from
//! what it did (pure): a death it reported ([`reported_dead`]) and a Job it
//! deleted ([`deleted`]). The notes are built from the cause's one-line
//! summary and the Job's names only, never from the dead pod's log (which
//! the backend's detail carries and an Event must not).

use crate::cause::{DeathCause, StartFailure, StartFailureKind};
use tcab_shared::events::{Notice, Reason, Regarding};
use tcab_shared::job_cache::JobSummary;

/// Why the lease-keeper deleted a Job, with what the note says.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deleted<'a> {
    /// Its pod never started, or the API server refused it.
    NeverStarted(&'a StartFailure),
    /// A publisher Job judged dead (it could not finish failing).
    JudgedDead(&'a DeathCause),
}

fn regarding(namespace: &str, job: &JobSummary) -> Regarding {
    Regarding::job(namespace, job.name(), Some(job.uid.as_str()))
}

fn job_id(job: &JobSummary) -> &str {
    job.job_id().unwrap_or("(no job id)")
}

/// The Event on a Job whose death was reported to the backend.
pub(crate) fn reported_dead(namespace: &str, job: &JobSummary, cause: &DeathCause) -> Notice {
    let note = format!(
        "{} of job {} reported dead to the backend: {}",
        job.lane.worker(),
        job_id(job),
        cause.summary()
    );
    Notice::new(regarding(namespace, job), Reason::ReportedDead, note)
}

/// The Event on a Job the lease-keeper deleted.
pub(crate) fn deleted(namespace: &str, job: &JobSummary, why: Deleted<'_>) -> Notice {
    let (reason, because) = match why {
        Deleted::NeverStarted(failure) if failure.kind == StartFailureKind::Refused => (
            Reason::DeletedRefused,
            format!("the API server refused its pod: {}", failure.summary()),
        ),
        Deleted::NeverStarted(failure) => (
            Reason::DeletedNeverStarted,
            format!("its pod can never start: {}", failure.summary()),
        ),
        Deleted::JudgedDead(cause) => (
            Reason::DeletedJudgedDead,
            format!("it was judged dead: {}", cause.summary()),
        ),
    };
    let note = format!("Job of job {} deleted: {because}", job_id(job));
    Notice::new(regarding(namespace, job), reason, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::Lane;
    use tcab_shared::events::EventType;

    fn job(lane: Lane) -> JobSummary {
        let mut j = JobSummary::named("tcab-driver-42-abcd1234", Some("42"), Some("abcd1234"));
        j.uid = "uid-42".into();
        j.lane = lane;
        j
    }

    fn failure(kind: StartFailureKind, message: &str) -> StartFailure {
        StartFailure {
            kind,
            image: Some("tcab/driver:dev".into()),
            reason: "FailedCreate".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_reported_death_names_the_job_and_its_cause() {
        let cause = DeathCause::NeverStartedPod;
        let n = reported_dead("tcab", &job(Lane::Run), &cause);
        assert_eq!(n.reason, Reason::ReportedDead);
        assert_eq!(n.reason.event_type(), EventType::Warning);
        assert_eq!(
            n.regarding,
            Regarding::job("tcab", "tcab-driver-42-abcd1234", Some("uid-42"))
        );
        assert!(n.note.contains("job 42 reported dead"), "{}", n.note);
        assert!(n.note.contains(&cause.summary()), "{}", n.note);
    }

    #[test]
    fn a_refused_pod_and_a_pod_that_never_starts_have_their_own_reasons() {
        let refused = failure(
            StartFailureKind::Refused,
            "pods \"x\" is forbidden: serviceaccount \"nope\" not found",
        );
        let n = deleted("tcab", &job(Lane::Run), Deleted::NeverStarted(&refused));
        assert_eq!(n.reason, Reason::DeletedRefused);
        assert!(n.note.contains("refused its pod"), "{}", n.note);
        assert!(
            n.note.contains("serviceaccount \"nope\" not found"),
            "the refusal's text: {}",
            n.note
        );
        let pull = failure(StartFailureKind::ImagePull, "not found");
        let n = deleted("tcab", &job(Lane::Run), Deleted::NeverStarted(&pull));
        assert_eq!(n.reason, Reason::DeletedNeverStarted);
        assert!(n.note.contains("can never start"), "{}", n.note);
        let cause = DeathCause::NeverStartedPod;
        let n = deleted("tcab", &job(Lane::Publish), Deleted::JudgedDead(&cause));
        assert_eq!(n.reason, Reason::DeletedJudgedDead);
        assert!(
            n.note
                .starts_with("Job of job 42 deleted: it was judged dead")
        );
    }
}
