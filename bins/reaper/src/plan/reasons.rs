//! Why a sandbox is deleted ([`DeleteReason`], counted by [`ReapKind`]) and
//! why every other pod is kept ([`KeepReason`]).

use jiff::SignedDuration;
use std::fmt;
use tcab_shared::job_cache::JobPhase;

/// The two kinds of reap, as metrics count them (`driver_failed`,
/// `orphan`: the `reason` label of `sandboxes_reaped_total`, declared with
/// the other label values).
pub use tcab_shared::metrics::labels::ReapReason as ReapKind;

/// Why a pod is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteReason {
    /// A driver Job with the pod's job id failed terminally, its pods have
    /// finished, and no Job with that id is live.
    DriverJobFailed {
        /// The failed driver Job (the first by name when several failed).
        job: String,
    },
    /// A driver Job with the pod's job id has shown failure for longer than
    /// its pods' termination grace plus the margin without finishing (a
    /// lost node): it is judged dead.
    DriverJobStuck {
        /// The Job judged dead (the first by name).
        job: String,
    },
    /// No owned Job carries the pod's job id, the backend does not list the
    /// job as driven, and the pod is older than the grace.
    Orphan {
        /// How old the pod is.
        age: SignedDuration,
    },
    /// Every Job with the pod's job id is a driver Job that succeeded: the
    /// driver exited, so nothing uses the sandbox, but its own cleanup did
    /// not land. Swept by the orphan sweep's rules (the backend does not
    /// drive the job, the pod is older than the grace).
    Leftover {
        /// The succeeded driver Job (the first by name).
        job: String,
        /// How old the pod is.
        age: SignedDuration,
    },
}

impl DeleteReason {
    /// The kind of reap, for metrics.
    pub fn kind(&self) -> ReapKind {
        match self {
            DeleteReason::DriverJobFailed { .. } | DeleteReason::DriverJobStuck { .. } => {
                ReapKind::DriverFailed
            }
            DeleteReason::Orphan { .. } | DeleteReason::Leftover { .. } => ReapKind::Orphan,
        }
    }
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeleteReason::DriverJobFailed { job } => write!(f, "driver Job {job} failed"),
            DeleteReason::DriverJobStuck { job } => write!(
                f,
                "driver Job {job} judged dead: failing past its termination grace and margin"
            ),
            DeleteReason::Orphan { age } => write!(
                f,
                "orphan: no owned Job has its job id, the backend does not drive it, {}s old",
                age.as_secs()
            ),
            DeleteReason::Leftover { job, age } => write!(
                f,
                "leftover: driver Job {job} succeeded without deleting it, the backend does not drive it, {}s old",
                age.as_secs()
            ),
        }
    }
}

/// Why a pod is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepReason {
    /// It lacks the driver's managed-by value: not a sandbox.
    NotDriverManaged,
    /// It carries the job id of a dead driver whose sandboxes are due, but
    /// another managed-by value than the driver's (and not the dispatcher's:
    /// it is no driver pod): possibly a sandbox of a driver that labels with
    /// a value of its own. Not ours to match: kept, and warned about once.
    ManagedByMismatch {
        /// Its managed-by value, if any.
        managed_by: Option<String>,
    },
    /// It is a Job's own pod (the driver's, whose logs the death report reads).
    JobPod,
    /// It has no valid `tcab.dev/job-id` label, so it maps to no backend job.
    NoJobId,
    /// It is already being deleted.
    Terminating,
    /// A Job with its job id is live (a newer claim of the same backend job,
    /// or the driver itself).
    LiveJob {
        /// The live Job (the first by name).
        job: String,
    },
    /// A driver Job with its job id failed, but that Job's pods are still
    /// terminating (a cluster before 1.31 marks `Failed` early): the driver
    /// may still be handing over. Reaped once they finish, or once the Job
    /// is judged dead.
    PodsTerminating {
        /// The failed Job (the first by name).
        job: String,
        /// Its `status.terminating`.
        terminating: i32,
    },
    /// Jobs with its job id exist, but none failed and none is live, and
    /// not every one is a succeeded driver (a failed publisher: never a
    /// sandbox's owner).
    NoFailedDriverJob {
        /// One such Job (the first by name).
        job: String,
        /// That Job's phase.
        phase: JobPhase,
    },
    /// Every Job with its job id is a driver Job that succeeded. A driver
    /// normally deletes its own sandbox before it exits; one it left is
    /// swept as a [`DeleteReason::Leftover`] under the orphan sweep's rules.
    DriverSucceeded {
        /// One such Job (the first by name).
        job: String,
    },
    /// No owned Job has its job id, and the orphan sweep is off.
    SweepDisabled,
    /// No owned Job has its job id, but the orphan sweep is not due this
    /// tick (the backend was not asked).
    SweepNotDue,
    /// No owned Job has its job id, but the backend's list of driven jobs
    /// could not be read this round.
    DrivenUnknown,
    /// No owned Job has its job id, but the backend lists the job as driven
    /// (its Job may be too new for the view, or in another namespace).
    DrivenByBackend,
    /// No owned Job has its job id, but its age is unknown.
    AgeUnknown,
    /// No owned Job has its job id, but it is younger than the grace.
    TooYoung {
        /// How old the pod is.
        age: SignedDuration,
    },
    /// A fresh read of the owned Jobs carrying its job id, made just before
    /// the delete, found a Job the plan did not account for.
    JobFound {
        /// That Job.
        job: String,
    },
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::NotDriverManaged => f.write_str("not managed by the driver"),
            KeepReason::ManagedByMismatch { managed_by } => write!(
                f,
                "a dead driver's job id, but managed by {:?}, not the expected driver value",
                managed_by.as_deref().unwrap_or("")
            ),
            KeepReason::JobPod => f.write_str("a Job's own pod"),
            KeepReason::NoJobId => f.write_str("no valid job-id label"),
            KeepReason::Terminating => f.write_str("already terminating"),
            KeepReason::LiveJob { job } => write!(f, "Job {job} with its job id is live"),
            KeepReason::PodsTerminating { job, terminating } => write!(
                f,
                "driver Job {job} failed but {terminating} of its pods are still terminating"
            ),
            KeepReason::NoFailedDriverJob { job, phase } => {
                write!(
                    f,
                    "no failed driver Job for its job id ({job} is {phase:?})"
                )
            }
            KeepReason::DriverSucceeded { job } => {
                write!(f, "driver Job {job} with its job id succeeded")
            }
            KeepReason::SweepDisabled => f.write_str("orphan, but the orphan sweep is off"),
            KeepReason::SweepNotDue => f.write_str("orphan candidate; the sweep is not due"),
            KeepReason::DrivenUnknown => {
                f.write_str("orphan candidate, but the backend's driven jobs are unknown")
            }
            KeepReason::DrivenByBackend => {
                f.write_str("no owned Job has its job id, but the backend drives it")
            }
            KeepReason::AgeUnknown => f.write_str("orphan of unknown age"),
            KeepReason::TooYoung { age } => {
                write!(f, "orphan only {}s old, inside the grace", age.as_secs())
            }
            KeepReason::JobFound { job } => {
                write!(f, "a fresh read found Job {job} with its job id")
            }
        }
    }
}
