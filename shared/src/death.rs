//! Death causes: why a driver or publisher Job failed, read from the Job
//! and (when it still exists) its pod, as one line for humans plus the tail
//! of the dead pod's log for the backend's failure detail.
//!
//! The order of evidence follows the spec's "Surviving the cluster
//! autoscaler": a disrupted pod's container only shows the SIGTERM it
//! received, so the pod's `DisruptionTarget` condition is read first, then
//! the pod's own failure reason, then the container state, then the Job's
//! conditions, and with no pod the Job's `status.failed` count tells a Job
//! that never started a pod from one whose pod was deleted.

use crate::job_builder::{DRIVER_CONTAINER, PUBLISHER_CONTAINER};
use crate::labels::Lane;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use std::fmt;

/// Longest text of a Kubernetes reason or message kept in a summary.
pub const MAX_MESSAGE_CHARS: usize = 512;
/// Longest death detail (summary plus log tail), in bytes.
pub const MAX_DETAIL_BYTES: usize = 16 * 1024;
/// Separates the summary from the log tail in a death detail.
pub const LOG_SEPARATOR: &str = "\n--- last log lines ---\n";
/// Separator used instead when the log tail was cut to fit.
pub const LOG_SEPARATOR_CUT: &str = "\n--- last log lines (cut to fit) ---\n";

/// The Job condition reason that only says "the pod failed" (backoffLimit
/// is 0): it names no cause, so other evidence is preferred to it.
const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
/// Waiting reasons that are normal steps of a starting container.
const ROUTINE_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

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
        /// Its exit code.
        exit_code: i32,
        /// The signal that ended it, when the runtime reports one.
        signal: Option<i32>,
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
}

impl DeathCause {
    /// One line for humans, e.g. `container driver OOMKilled (exit code 137)`.
    pub fn summary(&self) -> String {
        match self {
            DeathCause::Disrupted { reason, message } => {
                let what = if reason.starts_with("Eviction") {
                    "pod evicted"
                } else if reason.starts_with("Preemption") {
                    "pod preempted"
                } else {
                    "pod disrupted"
                };
                format!(
                    "{what} (DisruptionTarget: {})",
                    reason_message(reason, message)
                )
            }
            DeathCause::PodFailed { reason, message } => {
                format!("pod failed ({})", reason_message(reason, message))
            }
            DeathCause::OomKilled {
                container,
                exit_code,
            } => format!(
                "container {} OOMKilled (exit code {exit_code})",
                one_line(container)
            ),
            DeathCause::ContainerExited {
                container,
                exit_code,
                signal,
                reason,
                message,
            } => {
                let mut line = match signal {
                    Some(sig) => format!(
                        "container {} killed by signal {sig}{}, exit code {exit_code}",
                        one_line(container),
                        signal_name(*sig)
                            .map(|n| format!(" {n}"))
                            .unwrap_or_default()
                    ),
                    None => {
                        let by_signal = (*exit_code > 128)
                            .then(|| signal_name(exit_code - 128))
                            .flatten()
                            .map(|n| format!(", 128+{n}"))
                            .unwrap_or_default();
                        format!(
                            "container {} exited with code {exit_code}{by_signal}",
                            one_line(container)
                        )
                    }
                };
                let reason = reason.as_deref().unwrap_or("");
                let message = message.as_deref().unwrap_or("");
                if !reason.is_empty() || !message.is_empty() {
                    line.push_str(&format!(" ({})", reason_message(reason, message)));
                }
                line
            }
            DeathCause::ContainerWaiting {
                container,
                reason,
                message,
            } => format!(
                "container {} never ran (waiting: {})",
                one_line(container),
                reason_message(reason, message)
            ),
            DeathCause::JobCondition {
                kind,
                reason,
                message,
            } => {
                let reason = if reason.is_empty() { kind } else { reason };
                format!("Job {}", reason_message(reason, message))
            }
            DeathCause::NeverStartedPod => "Job never started a pod".to_owned(),
            DeathCause::PodDeleted { .. } => "pod ran and was deleted".to_owned(),
            DeathCause::Unknown => "Job failed, cause unknown".to_owned(),
        }
    }
}

impl fmt::Display for DeathCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Why `job` died, from the Job and its pod (if the pod still exists).
///
/// Evidence in order: the pod's `DisruptionTarget` condition (status
/// True); the pod's failure reason; the state of the `driver` or
/// `publisher` container (else the first), terminated or last terminated,
/// then waiting; the Job's failure conditions other than the generic
/// `BackoffLimitExceeded`; with no pod, `status.failed` >= 1 means the pod
/// ran and was deleted; then the generic condition; with no pod and nothing
/// failed, the Job never started a pod.
pub fn death_cause(job: &Job, pod: Option<&Pod>) -> DeathCause {
    if let Some(pod) = pod
        && let Some(cause) = pod_cause(job, pod)
    {
        return cause;
    }
    let conditions = failure_conditions(job);
    if let Some(cond) = conditions
        .iter()
        .find(|c| c.reason.as_deref() != Some(BACKOFF_LIMIT_EXCEEDED))
    {
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

/// The death detail sent to the backend: the summary and, when there is
/// one, the log tail after [`LOG_SEPARATOR`]. At most [`MAX_DETAIL_BYTES`]:
/// a longer log keeps its END (the lines nearest the death), cut on a
/// character boundary, after [`LOG_SEPARATOR_CUT`].
pub fn death_detail(cause: &DeathCause, log_tail: Option<&str>) -> String {
    let mut detail = cause.summary();
    truncate_chars_to_bytes(&mut detail, MAX_DETAIL_BYTES / 2);
    let tail = log_tail
        .map(|t| t.trim_end_matches(['\n', '\r']))
        .unwrap_or("");
    if tail.trim().is_empty() {
        return detail;
    }
    let room = MAX_DETAIL_BYTES.saturating_sub(detail.len() + LOG_SEPARATOR.len());
    if tail.len() <= room {
        detail.push_str(LOG_SEPARATOR);
        detail.push_str(tail);
        return detail;
    }
    let room = MAX_DETAIL_BYTES.saturating_sub(detail.len() + LOG_SEPARATOR_CUT.len());
    let mut start = tail.len() - room;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    // Start on a whole line when one begins within the kept part.
    let kept = &tail[start..];
    let kept = match kept.find('\n') {
        Some(i) if i + 1 < kept.len() => &kept[i + 1..],
        _ => kept,
    };
    detail.push_str(LOG_SEPARATOR_CUT);
    detail.push_str(kept);
    detail
}

/// The cause the pod shows, if it shows one.
fn pod_cause(job: &Job, pod: &Pod) -> Option<DeathCause> {
    let status = pod.status.as_ref()?;
    let disruption = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status.eq_ignore_ascii_case("true"));
    if let Some(cond) = disruption {
        return Some(DeathCause::Disrupted {
            reason: text(cond.reason.as_deref()),
            message: text(cond.message.as_deref()),
        });
    }
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        return Some(DeathCause::PodFailed {
            reason: text(Some(reason)),
            message: text(status.message.as_deref()),
        });
    }
    let container = pick_container(job, status.container_statuses.as_deref()?)?;
    let state = container.state.as_ref();
    let terminated = state
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| container.last_state.as_ref()?.terminated.as_ref());
    if let Some(t) = terminated {
        let name = container.name.clone();
        if t.reason.as_deref() == Some("OOMKilled") {
            return Some(DeathCause::OomKilled {
                container: name,
                exit_code: t.exit_code,
            });
        }
        return Some(DeathCause::ContainerExited {
            container: name,
            exit_code: t.exit_code,
            signal: t.signal.filter(|s| *s != 0),
            reason: t
                .reason
                .as_deref()
                .map(|r| text(Some(r)))
                .filter(|r| !r.is_empty()),
            message: t
                .message
                .as_deref()
                .map(|m| text(Some(m)))
                .filter(|m| !m.is_empty()),
        });
    }
    let waiting = state.and_then(|s| s.waiting.as_ref())?;
    let reason = waiting.reason.as_deref().filter(|r| !r.trim().is_empty())?;
    if ROUTINE_WAITING.contains(&reason) {
        return None;
    }
    Some(DeathCause::ContainerWaiting {
        container: container.name.clone(),
        reason: text(Some(reason)),
        message: text(waiting.message.as_deref()),
    })
}

/// The Job's own container (`driver` for a run Job, `publisher` for a
/// publish Job), else either of those names, else the first status.
fn pick_container<'a>(job: &Job, statuses: &'a [ContainerStatus]) -> Option<&'a ContainerStatus> {
    let lane = Lane::classify(
        job.metadata.labels.as_ref().unwrap_or(&Default::default()),
        job.metadata.name.as_deref().unwrap_or(""),
    );
    let own = match lane {
        Lane::Run => DRIVER_CONTAINER,
        Lane::Publish => PUBLISHER_CONTAINER,
    };
    statuses
        .iter()
        .find(|s| s.name == own)
        .or_else(|| {
            statuses
                .iter()
                .find(|s| s.name == DRIVER_CONTAINER || s.name == PUBLISHER_CONTAINER)
        })
        .or_else(|| statuses.first())
}

/// The Job's failure conditions with status True: `Failed` ones first,
/// then `FailureTarget` (set before `Failed` on recent clusters).
fn failure_conditions(job: &Job) -> Vec<&JobCondition> {
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

fn condition_cause(cond: &JobCondition) -> DeathCause {
    DeathCause::JobCondition {
        kind: text(Some(&cond.type_)),
        reason: text(cond.reason.as_deref()),
        message: text(cond.message.as_deref()),
    }
}

/// `reason: message`, or whichever of them is not empty.
fn reason_message(reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{}: {}", one_line(reason), one_line(message)),
        (false, true) => one_line(reason),
        (true, false) => one_line(message),
        (true, true) => "no reason given".to_owned(),
    }
}

/// A cluster-provided text, trimmed (absent = empty).
fn text(value: Option<&str>) -> String {
    value.unwrap_or("").trim().to_owned()
}

/// `value` on one line (whitespace runs become one space), at most
/// [`MAX_MESSAGE_CHARS`] characters, ending in `...` when cut.
fn one_line(value: &str) -> String {
    let joined = value.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX_MESSAGE_CHARS {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX_MESSAGE_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn truncate_chars_to_bytes(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

/// The name of a common POSIX signal.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_flattens_and_bounds() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
        let long = "é".repeat(MAX_MESSAGE_CHARS + 10);
        let cut = one_line(&long);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert!(cut.ends_with("..."));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut s = "aé".to_owned();
        truncate_chars_to_bytes(&mut s, 2);
        assert_eq!(s, "a");
    }
}
