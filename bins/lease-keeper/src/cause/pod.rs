//! The pod's evidence: its `DisruptionTarget` condition, its own failure
//! reason, then the state of its main container.

use super::DeathCause;
use super::summary::{reason_message, text};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tcab_shared::Lane;
use tcab_shared::names::{DRIVER_CONTAINER, PUBLISHER_CONTAINER};

/// The pod reason of the kubelet's node-pressure eviction.
const EVICTED: &str = "Evicted";
/// Waiting reasons that are normal steps of a starting container.
const ROUTINE_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The cause the pod shows, if it shows one.
pub(super) fn pod_cause(job: &Job, pod: &Pod) -> Option<DeathCause> {
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
pub(super) fn deleted_by_its_job(pod: &Pod, cause: &DeathCause) -> bool {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    match cause {
        DeathCause::PodDeleted { .. } => true,
        DeathCause::ContainerExited { exit_code, .. } => {
            deleting && super::summary::signal_of(*exit_code).is_some()
        }
        _ => false,
    }
}

/// The Job's own container (`driver` for a run Job, `publisher` for a
/// publish Job), else either of those names, else the first status.
fn pick_container<'a>(job: &Job, statuses: &'a [ContainerStatus]) -> Option<&'a ContainerStatus> {
    let lane = Lane::classify(
        job.metadata.labels.as_ref().unwrap_or(&Default::default()),
        job.metadata.name.as_deref().unwrap_or(""),
    );
    let own = lane.container();
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

/// Whether a pod reason (`reason` or `reason: message`) is the kubelet's
/// node-pressure eviction.
pub(super) fn is_evicted(pod_reason: &str) -> bool {
    pod_reason == EVICTED || pod_reason.starts_with("Evicted:")
}
