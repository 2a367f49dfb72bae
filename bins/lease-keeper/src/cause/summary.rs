//! A cause in words: one line for humans ([`DeathCause::summary`]), a kind
//! for metrics ([`DeathCause::kind`]), the death detail sent to the backend
//! (the summary and the tail of the dead pod's log, bounded:
//! [`death_detail`]), and the helpers that keep cluster-provided text on one
//! bounded line.

use super::pod::is_evicted;
use super::{
    DeathCause, LOG_SEPARATOR, LOG_SEPARATOR_CUT, MAX_DETAIL_BYTES, MAX_MESSAGE_CHARS,
    StartFailureKind,
};
use std::fmt;
use tcab_shared::metrics::labels::Cause;

impl DeathCause {
    /// One line for humans, e.g. `container driver OOMKilled (exit code 137)`.
    pub fn summary(&self) -> String {
        match self {
            DeathCause::Disrupted {
                reason,
                message,
                pod_reason,
            } => {
                let what = match reason.as_str() {
                    "EvictionByEvictionAPI" => "pod evicted",
                    "PreemptionByScheduler" => "pod preempted",
                    "DeletionByTaintManager" => {
                        "pod deleted by the taint manager (a NoExecute taint on its node: not ready, unreachable, or tainted by an operator)"
                    }
                    "TerminationByKubelet" if pod_reason.as_deref().is_some_and(is_evicted) => {
                        "pod evicted by the kubelet (node pressure)"
                    }
                    "TerminationByKubelet" => "pod terminated by the kubelet",
                    "DeletionByPodGC" => "pod deleted by pod GC (its node is gone)",
                    _ => "pod disrupted",
                };
                let mut line = format!(
                    "{what} (DisruptionTarget: {})",
                    reason_message(reason, message)
                );
                if let Some(pod_reason) = pod_reason {
                    line.push_str(&format!(" ({pod_reason})"));
                }
                line
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
                reason,
                message,
            } => {
                let container = one_line(container);
                let mut line = match signal_of(*exit_code) {
                    Some(signal) => match signal_name(signal) {
                        Some(name) => format!(
                            "container {container} killed by {name} (exit code {exit_code})"
                        ),
                        None => format!(
                            "container {container} killed by signal {signal} (exit code {exit_code})"
                        ),
                    },
                    None => format!("container {container} exited with code {exit_code}"),
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
            DeathCause::NeverStarted(failure) => {
                format!("pod never started: {}", failure.summary())
            }
            DeathCause::Deleted { job, evidence } => {
                let head = format!(
                    "Job {} was deleted by someone other than the dispatcher while its pod ran",
                    one_line(job)
                );
                match evidence {
                    Some(evidence) => format!("{head}; then: {}", evidence.summary()),
                    None => format!("{head}; its pod was gone before it could be read"),
                }
            }
            DeathCause::Stuck {
                node,
                waited,
                evidence,
            } => {
                let node = node
                    .as_deref()
                    .map(|n| format!("node {} lost", one_line(n)))
                    .unwrap_or_else(|| "node lost".to_owned());
                format!(
                    "{node}: the pod could not finish terminating for {} s; judged dead ({})",
                    waited.as_secs(),
                    evidence.summary()
                )
            }
        }
    }

    /// A short snake_case kind for metrics and logs (see docs/metrics.md).
    pub fn kind(&self) -> Cause {
        match self {
            DeathCause::Disrupted { reason, .. } => match reason.as_str() {
                "EvictionByEvictionAPI" => Cause::Evicted,
                "PreemptionByScheduler" => Cause::Preempted,
                "DeletionByTaintManager" => Cause::TaintDeleted,
                "TerminationByKubelet" => Cause::KubeletEvicted,
                "DeletionByPodGC" => Cause::NodeLost,
                _ => Cause::Unknown,
            },
            DeathCause::PodFailed { reason, .. } => match reason.as_str() {
                "Evicted" | "Shutdown" | "Terminated" => Cause::KubeletEvicted,
                r if r.starts_with("OutOf") => Cause::KubeletEvicted,
                "NodeLost" => Cause::NodeLost,
                _ => Cause::Unknown,
            },
            DeathCause::OomKilled { .. } => Cause::OomKilled,
            DeathCause::ContainerExited { exit_code, .. } if signal_of(*exit_code).is_some() => {
                Cause::Killed
            }
            DeathCause::ContainerExited { .. } => Cause::ExitCode,
            DeathCause::ContainerWaiting { reason, .. } => match reason.as_str() {
                "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" => Cause::ImagePull,
                "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                    Cause::ConfigError
                }
                _ => Cause::NeverStarted,
            },
            DeathCause::JobCondition { reason, .. } if reason == "DeadlineExceeded" => {
                Cause::DeadlineExceeded
            }
            DeathCause::JobCondition { .. } => Cause::Unknown,
            DeathCause::NeverStartedPod => Cause::NeverStarted,
            DeathCause::PodDeleted { .. } => Cause::PodDeleted,
            DeathCause::Unknown => Cause::Unknown,
            DeathCause::NeverStarted(failure) => match failure.kind {
                StartFailureKind::ImagePull | StartFailureKind::InvalidImage => Cause::ImagePull,
                StartFailureKind::ConfigError | StartFailureKind::CreateError => Cause::ConfigError,
                StartFailureKind::Unschedulable => Cause::Unschedulable,
                StartFailureKind::Refused => Cause::Refused,
            },
            DeathCause::Deleted { .. } => Cause::JobDeleted,
            DeathCause::Stuck { .. } => Cause::NodeLost,
        }
    }
}

impl fmt::Display for DeathCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// `reason: message`, or whichever of them is not empty.
pub(super) fn reason_message(reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{}: {}", one_line(reason), one_line(message)),
        (false, true) => one_line(reason),
        (true, false) => one_line(message),
        (true, true) => "no reason given".to_owned(),
    }
}

/// A cluster-provided text, trimmed (absent = empty).
pub(super) fn text(value: Option<&str>) -> String {
    value.unwrap_or("").trim().to_owned()
}

/// `value` on one line (whitespace runs become one space), at most
/// [`MAX_MESSAGE_CHARS`] characters, ending in `...` when cut.
pub(super) fn one_line(value: &str) -> String {
    let joined = value.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX_MESSAGE_CHARS {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX_MESSAGE_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub(super) fn truncate_chars_to_bytes(s: &mut String, max: usize) {
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
/// The signal an exit code stands for: 128 + n for a signal n of Linux's
/// 1 to 64. Anything above 192 is a plain exit code: containerd's 255 for a
/// task whose end it did not see (a node rebooted under it) is no signal.
pub(super) fn signal_of(exit_code: i32) -> Option<i32> {
    (129..=192).contains(&exit_code).then(|| exit_code - 128)
}

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

/// What became of the dead pod's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTail {
    /// The last lines, as read.
    Read(String),
    /// The log could not be read, and why (said in the report); a later
    /// read may do better.
    Unreadable(String),
    /// The pod, or the node whose kubelet serves its log, was gone (404):
    /// no later read can do better. Said in the report as unreadable.
    Gone(String),
}

/// The death detail sent to the backend: the summary and the log tail after
/// [`LOG_SEPARATOR`], or a line saying why there is none. At most
/// [`MAX_DETAIL_BYTES`]: a longer log keeps its END (the lines nearest the
/// death), cut on a character boundary, after [`LOG_SEPARATOR_CUT`].
pub(crate) fn death_detail(cause: &DeathCause, log: &LogTail) -> String {
    let mut detail = cause.summary();
    truncate_chars_to_bytes(&mut detail, MAX_DETAIL_BYTES / 2);
    let tail = match log {
        LogTail::Read(text) => text.trim_end_matches(['\n', '\r']),
        LogTail::Unreadable(why) | LogTail::Gone(why) => {
            let mut line = format!("\nlogs unreadable: {}", one_line(why));
            truncate_chars_to_bytes(&mut line, MAX_DETAIL_BYTES / 2);
            detail.push_str(&line);
            return detail;
        }
    };
    if tail.trim().is_empty() {
        detail.push_str("\nlog: empty");
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
