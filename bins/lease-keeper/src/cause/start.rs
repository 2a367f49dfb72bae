//! A pod that can never start by itself: an image that cannot be pulled, a
//! bad image name, a container configuration error, or no node for it; or
//! a Job whose pods the API server refuses to create at all (an admission
//! refusal the Job controller records as a `FailedCreate` Event).

use super::summary::{one_line, reason_message, text};
use k8s_openapi::api::core::v1::Pod;
use tcab_shared::Lane;

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
    /// The API server refuses to create the Job's pods (PodSecurity, a
    /// ResourceQuota, a LimitRange, an admission policy or webhook, a
    /// missing ServiceAccount): the Job controller's `FailedCreate` Event.
    Refused,
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
                format!(
                    "container configuration error (a missing Secret or ConfigMap, or an image that does not meet the security context, e.g. runAsNonRoot?): {detail}"
                )
            }
            StartFailureKind::CreateError => format!("container could not be created: {detail}"),
            StartFailureKind::Unschedulable => {
                format!("pod unschedulable (requests larger than any node can offer?): {detail}")
            }
            StartFailureKind::Refused => format!(
                "the API server refused to create the Job's pod (a namespace policy, quota, LimitRange, admission policy or missing ServiceAccount): {detail}"
            ),
        }
    }
}

/// Whether a pod shows that it will never start by itself, and why: its
/// main container waiting on an image pull, a bad image name or a container
/// configuration error, or the pod unschedulable. Pure; the caller decides
/// whether it has been so for longer than the grace.
pub(crate) fn start_failure(lane: Lane, pod: &Pod) -> Option<StartFailure> {
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
    let own = lane.container();
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
