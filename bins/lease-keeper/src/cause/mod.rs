//! Death causes: why a driver or publisher Job failed, read from the Job
//! and the pod evidence captured at the first sign of failure, as one line
//! for humans plus the tail of the dead pod's log for the backend's detail.
//!
//! The order of evidence follows the spec's "Surviving the cluster
//! autoscaler": a disrupted pod's container only shows the SIGTERM it
//! received, so the pod's `DisruptionTarget` condition is read first, then
//! the pod's own failure reason, then the container state, then the Job's
//! conditions, and with no pod the Job's `status.failed` count tells a Job
//! that never started a pod from one whose pod was deleted.
//!
//! Wording follows the kubelet: only a container terminated with reason
//! `OOMKilled` is an OOM kill; an exit code of 129 to 192 names the signal
//! that ended the process (137 is SIGKILL, e.g. a grace period that ran out);
//! above that it is a plain code (containerd's 255 for a task it never saw
//! end, after a reboot). The kubelet never fills the `signal` field, so it
//! is not read.
//!
//! By input: `pod` reads the pod's status (its disruption, its own reason,
//! its container), `job` the Job's failure conditions (and rebuilds a Job
//! from its cached summary), `start` tells a pod that can never start;
//! `summary` says a cause in words and puts it together with the dead pod's
//! log tail. [`death_cause`] here weighs the evidence in the order above.

mod job;
mod pod;
mod start;
mod summary;

pub(crate) use job::job_for_cause;
pub(crate) use start::{StartFailure, StartFailureKind, start_failure};
pub(crate) use summary::{LogTail, death_detail};

use job::{BACKOFF_LIMIT_EXCEEDED, condition_cause, failure_conditions};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use pod::{deleted_by_its_job, pod_cause};
use std::time::Duration;

/// Longest text of a Kubernetes reason or message kept in a summary.
pub(crate) const MAX_MESSAGE_CHARS: usize = 512;
/// Longest death detail (summary plus log tail), in bytes.
pub(crate) const MAX_DETAIL_BYTES: usize = 16 * 1024;
/// Separates the summary from the log tail in a death detail.
pub(crate) const LOG_SEPARATOR: &str = "\n--- last log lines ---\n";
/// Separator used instead when the log tail was cut to fit.
pub(crate) const LOG_SEPARATOR_CUT: &str = "\n--- last log lines (cut to fit) ---\n";

/// Why a Job's pod died, from the best evidence the cluster still holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeathCause {
    /// The pod carries a `DisruptionTarget` condition: evicted, preempted,
    /// deleted by the taint manager or pod GC, or terminated by the kubelet.
    Disrupted {
        /// The condition's reason, e.g. `EvictionByEvictionAPI`.
        reason: String,
        /// The condition's message.
        message: String,
        /// The pod's own `status.reason: message` when it has one (the
        /// kubelet's node-pressure eviction sets `Evicted`).
        pod_reason: Option<String>,
    },
    /// The pod itself failed with a reason (e.g. an old-style kubelet
    /// `Evicted`, `NodeLost`, `Shutdown`, `OutOfcpu`).
    PodFailed {
        /// `status.reason` of the pod.
        reason: String,
        /// `status.message` of the pod.
        message: String,
    },
    /// The container was killed by the kernel's OOM killer.
    OomKilled {
        /// The container's name.
        container: String,
        /// Its exit code (137 normally).
        exit_code: i32,
    },
    /// The container terminated (other than an OOM kill).
    ContainerExited {
        /// The container's name.
        container: String,
        /// Its exit code (129 to 192: ended by signal `exit_code - 128`).
        exit_code: i32,
        /// The runtime's reason, e.g. `Error` or `Completed`.
        reason: Option<String>,
        /// The container's termination message, if it wrote one.
        message: Option<String>,
    },
    /// The container never ran: it is stuck waiting (e.g. `ImagePullBackOff`,
    /// `CreateContainerConfigError`).
    ContainerWaiting {
        /// The container's name.
        container: String,
        /// The waiting reason.
        reason: String,
        /// The waiting message.
        message: String,
    },
    /// A failure condition of the Job (`DeadlineExceeded`,
    /// `BackoffLimitExceeded`, `PodFailurePolicy`, ...).
    JobCondition {
        /// The condition's type: `Failed` or `FailureTarget`.
        kind: String,
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// No pod, and the Job counted no failed pod: it never started one.
    NeverStartedPod,
    /// No pod, but the Job counted a failed one: the pod ran and was deleted
    /// out from under the run.
    PodDeleted {
        /// The Job's `status.failed`.
        failed: i32,
    },
    /// Nothing in the Job or the pod says why.
    Unknown,
    /// The pod could never start (judged after the start grace): a person
    /// has to fix the image, a Secret, or the requests.
    NeverStarted(StartFailure),
    /// The Job was deleted by someone other than the dispatcher while its
    /// pod ran (by hand, with or without `--cascade=orphan`), and its pod
    /// has since ended or gone.
    Deleted {
        /// The deleted Job's name.
        job: String,
        /// What the pod showed, when it could be read (at the deletion or
        /// after it ended).
        evidence: Option<Box<DeathCause>>,
    },
    /// The Job showed failure and could not finish failing (its pod never
    /// finished terminating: the node is lost). `evidence` is what the pod
    /// showed when it was captured.
    Stuck {
        /// The node the pod ran on, when known.
        node: Option<String>,
        /// How long the Job showed failure before it was judged dead.
        waited: Duration,
        /// The cause read from the captured pod and the Job.
        evidence: Box<DeathCause>,
    },
}

/// Why `job` died, from the Job and its pod (if the pod still exists).
///
/// Evidence in order: the pod's `DisruptionTarget` condition (status
/// True); the pod's failure reason; a Job failure condition other than the
/// generic `BackoffLimitExceeded` when the pod shows only its deletion (the
/// Job deleted it at its deadline); the state of the `driver` or
/// `publisher` container (else the first), terminated or last terminated,
/// then waiting; the Job's failure conditions other than the generic
/// `BackoffLimitExceeded`; with no pod, `status.failed` >= 1 means the pod
/// ran and was deleted; then the generic condition; with no pod and nothing
/// failed, the Job never started a pod.
pub(crate) fn death_cause(job: &Job, pod: Option<&Pod>) -> DeathCause {
    let conditions = failure_conditions(job);
    let specific = conditions
        .iter()
        .find(|c| c.reason.as_deref() != Some(BACKOFF_LIMIT_EXCEEDED));
    if let Some(pod) = pod
        && let Some(cause) = pod_cause(job, pod)
    {
        // A pod its own Job deleted (a passed deadline) shows only that it
        // was deleted, or the signal that ended it: the Job says why.
        if let Some(cond) = specific
            && deleted_by_its_job(pod, &cause)
        {
            return condition_cause(cond);
        }
        return cause;
    }
    if let Some(cond) = specific {
        return condition_cause(cond);
    }
    let failed = job
        .status
        .as_ref()
        .and_then(|s| s.failed)
        .unwrap_or_default();
    if pod.is_none() && failed >= 1 {
        return DeathCause::PodDeleted { failed };
    }
    if let Some(cond) = conditions.first() {
        return condition_cause(cond);
    }
    if pod.is_none() {
        return DeathCause::NeverStartedPod;
    }
    DeathCause::Unknown
}

#[cfg(test)]
mod tests;
