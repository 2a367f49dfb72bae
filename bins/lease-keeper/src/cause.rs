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
//! `OOMKilled` is an OOM kill; an exit code above 128 names the signal that
//! ended the process (137 is SIGKILL, e.g. a grace period that ran out). The
//! kubelet never fills the `signal` field, so it is not read.

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use std::fmt;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::metrics::labels::Cause;
use tcab_shared::names::{DRIVER_CONTAINER, PUBLISHER_CONTAINER};

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
/// The pod reason of the kubelet's node-pressure eviction.
const EVICTED: &str = "Evicted";
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
        /// Its exit code (above 128: ended by signal `exit_code - 128`).
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

/// Why a pod could never start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    /// What kind of failure.
    pub kind: StartFailureKind,
    /// The container's image, when known.
    pub image: Option<String>,
    /// The kubelet's or scheduler's reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// The kinds of pod that never start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFailureKind {
    /// `ErrImagePull` or `ImagePullBackOff`.
    ImagePull,
    /// `InvalidImageName`.
    InvalidImage,
    /// `CreateContainerConfigError` (e.g. a missing Secret).
    ConfigError,
    /// `CreateContainerError`.
    CreateError,
    /// `PodScheduled=False` with reason `Unschedulable`.
    Unschedulable,
}

impl StartFailureKind {
    /// The kind a container waiting reason names, if it is one that never
    /// resolves by itself.
    pub fn of_waiting(reason: &str) -> Option<Self> {
        Some(match reason {
            "ErrImagePull" | "ImagePullBackOff" => StartFailureKind::ImagePull,
            "InvalidImageName" => StartFailureKind::InvalidImage,
            "CreateContainerConfigError" => StartFailureKind::ConfigError,
            "CreateContainerError" => StartFailureKind::CreateError,
            _ => return None,
        })
    }
}

impl StartFailure {
    /// One line a person can act on.
    pub fn summary(&self) -> String {
        let image = self.image.as_deref().map(one_line).unwrap_or_default();
        let detail = reason_message(&self.reason, &self.message);
        match self.kind {
            StartFailureKind::ImagePull => format!("image pull failed for {image}: {detail}"),
            StartFailureKind::InvalidImage => format!("invalid image name {image}: {detail}"),
            StartFailureKind::ConfigError => {
                format!("container configuration error (a missing Secret or ConfigMap?): {detail}")
            }
            StartFailureKind::CreateError => format!("container could not be created: {detail}"),
            StartFailureKind::Unschedulable => {
                format!("pod unschedulable (requests larger than any node can offer?): {detail}")
            }
        }
    }
}

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
                let mut line = match (*exit_code > 128)
                    .then(|| signal_name(exit_code - 128))
                    .flatten()
                {
                    Some(signal) => {
                        format!("container {container} killed by {signal} (exit code {exit_code})")
                    }
                    None if *exit_code > 128 => format!(
                        "container {container} killed by signal {} (exit code {exit_code})",
                        exit_code - 128
                    ),
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
            DeathCause::ContainerExited { exit_code, .. } if *exit_code > 128 => Cause::Killed,
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
            },
            DeathCause::Deleted { .. } => Cause::JobDeleted,
            DeathCause::Stuck { .. } => Cause::NodeLost,
        }
    }
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

impl fmt::Display for DeathCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
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
pub fn death_cause(job: &Job, pod: Option<&Pod>) -> DeathCause {
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

/// The death detail sent to the backend: the summary and the log tail after
/// [`LOG_SEPARATOR`], or a line saying why there is none. At most
/// [`MAX_DETAIL_BYTES`]: a longer log keeps its END (the lines nearest the
/// death), cut on a character boundary, after [`LOG_SEPARATOR_CUT`].
pub fn death_detail(cause: &DeathCause, log: &LogTail) -> String {
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

/// The cause the pod shows, if it shows one.
fn pod_cause(job: &Job, pod: &Pod) -> Option<DeathCause> {
    let status = pod.status.as_ref()?;
    let disruption = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status.eq_ignore_ascii_case("true"));
    if let Some(cond) = disruption {
        // The pod's own reason adds something when it says more than the
        // condition, or when it tells a node-pressure eviction (`Evicted`)
        // from the kubelet's other terminations (a node shutdown).
        let message = text(cond.message.as_deref());
        let pod_message = text(status.message.as_deref());
        let pod_reason = status
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .and_then(|r| {
                if pod_message != message {
                    Some(reason_message(r, &pod_message))
                } else {
                    (r == EVICTED).then(|| r.to_owned())
                }
            });
        return Some(DeathCause::Disrupted {
            reason: text(cond.reason.as_deref()),
            message,
            pod_reason,
        });
    }
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        return Some(DeathCause::PodFailed {
            reason: text(Some(reason)),
            message: text(status.message.as_deref()),
        });
    }
    let deleted_while_running = || {
        pod.metadata
            .deletion_timestamp
            .is_some()
            .then(|| DeathCause::PodDeleted {
                failed: job
                    .status
                    .as_ref()
                    .and_then(|s| s.failed)
                    .unwrap_or_default(),
            })
    };
    let Some(container) = status
        .container_statuses
        .as_deref()
        .and_then(|statuses| pick_container(job, statuses))
    else {
        return deleted_while_running();
    };
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
    let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) else {
        // Running (or no state) when the evidence was taken: a pod deleted
        // under a running container says so; anything else says nothing.
        return deleted_while_running();
    };
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

/// Whether what a pod shows is only the mark of its deletion: deleted while
/// it ran, or ended by a signal while being deleted, with no disruption
/// recorded (an eviction or a taint deletion names itself).
fn deleted_by_its_job(pod: &Pod, cause: &DeathCause) -> bool {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    match cause {
        DeathCause::PodDeleted { .. } => true,
        DeathCause::ContainerExited { exit_code, .. } => deleting && *exit_code > 128,
        _ => false,
    }
}

/// Whether a pod shows that it will never start by itself, and why: its
/// main container waiting on an image pull, a bad image name or a container
/// configuration error, or the pod unschedulable. Pure; the caller decides
/// whether it has been so for longer than the grace.
pub fn start_failure(lane: Lane, pod: &Pod) -> Option<StartFailure> {
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status.eq_ignore_ascii_case("false")
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(cond) = unschedulable {
        return Some(StartFailure {
            kind: StartFailureKind::Unschedulable,
            image: None,
            reason: text(cond.reason.as_deref()),
            message: text(cond.message.as_deref()),
        });
    }
    let own = match lane {
        Lane::Run => DRIVER_CONTAINER,
        Lane::Publish => PUBLISHER_CONTAINER,
    };
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    let container = statuses
        .iter()
        .find(|c| c.name == own)
        .or_else(|| statuses.first())?;
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?.trim();
    let kind = StartFailureKind::of_waiting(reason)?;
    let image = Some(container.image.clone())
        .filter(|i| !i.is_empty())
        .or_else(|| {
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == container.name)?
                .image
                .clone()
        });
    Some(StartFailure {
        kind,
        image,
        reason: reason.to_owned(),
        message: text(waiting.message.as_deref()),
    })
}

/// A Job object carrying what [`death_cause`] reads of a Job (name, lane,
/// failure conditions, failed count), rebuilt from its cached summary, so a
/// death can be explained after the Job itself is gone.
pub fn job_for_cause(summary: &tcab_shared::job_cache::JobSummary) -> Job {
    use k8s_openapi::api::batch::v1::JobStatus;
    let condition = |kind: &str, c: &tcab_shared::job_cache::JobCondition| JobCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
        message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        ..JobCondition::default()
    };
    let conditions: Vec<JobCondition> = [
        summary.failed.as_ref().map(|c| condition("Failed", c)),
        summary
            .failure_target
            .as_ref()
            .map(|c| condition("FailureTarget", c)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut job = Job::default();
    job.metadata.name = Some(summary.name.to_string());
    job.metadata.labels = Some(
        [(
            tcab_shared::names::JOB_KIND.to_owned(),
            summary.lane.label_value().to_owned(),
        )]
        .into(),
    );
    job.status = Some(JobStatus {
        failed: Some(summary.failed_pods).filter(|n| *n > 0),
        conditions: Some(conditions).filter(|c| !c.is_empty()),
        ..JobStatus::default()
    });
    job
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

/// Whether a pod reason (`reason` or `reason: message`) is the kubelet's
/// node-pressure eviction.
fn is_evicted(pod_reason: &str) -> bool {
    pod_reason == EVICTED || pod_reason.starts_with("Evicted:")
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
