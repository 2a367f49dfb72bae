//! The pods the plan reads: what of each listed pod it looks at, and how a
//! Job's own pod (such as the driver's) is told from a sandbox.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tcab_shared::names;

/// Labels the Job controller puts on the pods of a Job. A pod carrying one
/// of them is a Job's own pod (such as the driver's), never a sandbox.
const JOB_POD_LABELS: [&str; 4] = [
    names::JOB_NAME,
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
];

/// The fields of one pod the plan reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodSummary {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid; a delete is made conditional on it when known.
    pub uid: Option<String>,
    /// `app.kubernetes.io/managed-by`, if labelled.
    pub managed_by: Option<String>,
    /// `tcab.dev/job-id`, if labelled.
    pub job_id: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: the pod is already going away.
    pub terminating: bool,
    /// The pod belongs to a Job (an owner reference to a Job, or the Job
    /// controller's labels): a Job's own pod, such as the driver's.
    pub job_owned: bool,
}

impl PodSummary {
    /// Reads the summary of a pod. `default_namespace` is used when the
    /// object names none (a list always does).
    pub fn from_pod(pod: &Pod, default_namespace: &str) -> Self {
        let pod_labels = pod.labels();
        let meta = &pod.metadata;
        let owned_by_job = meta
            .owner_references
            .as_ref()
            .is_some_and(|refs| refs.iter().any(|r| r.kind == "Job"));
        let labelled_as_job_pod = JOB_POD_LABELS.iter().any(|k| pod_labels.contains_key(*k));
        PodSummary {
            namespace: meta
                .namespace
                .clone()
                .unwrap_or_else(|| default_namespace.to_owned()),
            name: pod.name_any(),
            uid: meta.uid.clone(),
            managed_by: pod_labels.get(names::MANAGED_BY).cloned(),
            job_id: pod_labels.get(names::JOB_ID).cloned(),
            created_at: meta.creation_timestamp.as_ref().map(|t| t.0),
            terminating: meta.deletion_timestamp.is_some(),
            job_owned: owned_by_job || labelled_as_job_pod,
        }
    }

    /// `namespace/name`, for logs.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{DISPATCHER, DRIVER};

    #[test]
    fn summary_from_pod_json() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sb", "namespace": "sandboxes", "uid": "u1",
                "creationTimestamp": "2027-01-15T08:00:00Z",
                "labels": {"app.kubernetes.io/managed-by": DRIVER, "tcab.dev/job-id": "a"}},
        }))
        .expect("pod json");
        let s = PodSummary::from_pod(&pod, "other");
        assert_eq!(s.key(), "sandboxes/sb");
        assert_eq!(s.uid.as_deref(), Some("u1"));
        assert_eq!(s.managed_by.as_deref(), Some(DRIVER));
        assert_eq!(s.job_id.as_deref(), Some("a"));
        assert_eq!(
            s.created_at,
            Some("2027-01-15T08:00:00Z".parse().expect("ts"))
        );
        assert!(!s.terminating && !s.job_owned);

        let driver: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "deletionTimestamp": "2027-01-15T08:00:00Z",
                "labels": {"app.kubernetes.io/managed-by": DISPATCHER},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "x"}]},
        }))
        .expect("pod json");
        let s = PodSummary::from_pod(&driver, "other");
        assert_eq!(s.namespace, "other");
        assert!(s.terminating && s.job_owned);
        let labelled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "labels": {"job-name": "j"}},
        }))
        .expect("pod json");
        assert!(PodSummary::from_pod(&labelled, "ns").job_owned);
    }
}
