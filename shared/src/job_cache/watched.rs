//! An owned Job as the watch reads it: only the fields a [`JobSummary`]
//! is made from.
//!
//! A full `batch/v1` Job carries its whole pod template (containers, env,
//! resources, volumes), its annotations and, from a real API server, its
//! `managedFields`: several kilobytes a Job, all of it parsed, allocated and
//! dropped again for every watch event and for every Job of a relist page.
//! This type lets serde skip all of that: the watch (and its paged lists)
//! parse only names, labels, timestamps, the template's termination grace
//! and the status. Less work per event, and a relist's pages no longer leave
//! a peak of parsed pod templates behind in the heap.
//!
//! It is the same resource on the wire (`batch/v1` `jobs`): only what is
//! kept of each object differs.

use super::JobSummary;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The parts of an owned Job the cache reads (see the module doc).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WatchedJob {
    /// Name, namespace, uid, labels, resource version and the two
    /// timestamps; nothing else of the metadata is kept.
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// Only the pod template's termination grace.
    #[serde(default)]
    pub spec: Option<WatchedSpec>,
    /// The status as the API server gives it (it is small).
    #[serde(default)]
    pub status: Option<JobStatus>,
}

/// `spec` of a watched Job: only `template.spec.terminationGracePeriodSeconds`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WatchedSpec {
    #[serde(default)]
    template: WatchedTemplate,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct WatchedTemplate {
    #[serde(default)]
    spec: Option<WatchedPodSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedPodSpec {
    #[serde(default)]
    termination_grace_period_seconds: Option<i64>,
}

impl WatchedSpec {
    /// The pod template's `terminationGracePeriodSeconds`, if set.
    pub fn termination_grace_seconds(&self) -> Option<i64> {
        self.template
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
    }
}

/// The metadata fields a summary (and the watcher) reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
}

fn slim_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let meta = SlimMeta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl Resource for WatchedJob {
    type DynamicType = ();
    type Scope = <Job as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Job::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Job::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Job::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Job::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What a cache entry can be made from: a watched Job, or a full Job (as
/// tests and benchmarks build them).
pub trait Summarize {
    /// The summary decisions read.
    fn summary(&self) -> JobSummary;
}

impl Summarize for WatchedJob {
    fn summary(&self) -> JobSummary {
        JobSummary::from_parts(
            &self.metadata,
            self.spec
                .as_ref()
                .and_then(WatchedSpec::termination_grace_seconds),
            self.status.as_ref(),
        )
    }
}

impl Summarize for Job {
    fn summary(&self) -> JobSummary {
        JobSummary::from_job(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    /// A Job as an API server sends it, with the parts the cache skips.
    fn full_job() -> serde_json::Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "tcab-run-r1-abc",
                "namespace": "ns",
                "uid": "u-1",
                "resourceVersion": "42",
                "creationTimestamp": "2026-12-02T07:00:00Z",
                "deletionTimestamp": "2026-12-02T07:05:00Z",
                "labels": {"tcab.dev/job-id": "r1", "tcab.dev/claim": "abc", "tcab.dev/kind": "run"},
                "annotations": {"big": "x".repeat(4096)},
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:active": {}}}}],
                "ownerReferences": [],
            },
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"tcab.dev/job-id": "r1"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 30,
                        "containers": [{"name": "driver", "image": "d:1",
                                        "env": [{"name": "A", "value": "b"}]}],
                    },
                },
            },
            "status": {
                "active": 1,
                "ready": 1,
                "failed": 2,
                "terminating": 1,
                "conditions": [
                    {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "m"},
                ],
            },
        })
    }

    #[test]
    fn a_watched_job_summarises_as_the_full_job_does() {
        let full: Job = serde_json::from_value(full_job()).unwrap();
        let watched: WatchedJob = serde_json::from_value(full_job()).unwrap();
        let summary = watched.summary();
        assert_eq!(summary, full.summary());
        assert_eq!(summary.termination_grace_seconds, Some(30));
        assert_eq!(summary.job_id(), Some("r1"));
        assert!(summary.deleting);
        assert!(summary.failure_target().is_some());
        assert_eq!(watched.resource_version().as_deref(), Some("42"));
    }

    #[test]
    fn the_skipped_parts_are_not_kept() {
        let watched: WatchedJob = serde_json::from_value(full_job()).unwrap();
        assert!(watched.metadata.annotations.is_none());
        assert!(watched.metadata.managed_fields.is_none());
        assert!(watched.metadata.owner_references.is_none());
    }

    #[test]
    fn a_job_without_spec_or_status_is_a_live_job_with_no_counts() {
        let watched: WatchedJob =
            serde_json::from_value(json!({"metadata": {"name": "tcab-run-r2-x"}})).unwrap();
        let summary = watched.summary();
        assert!(summary.is_live());
        assert_eq!(summary.termination_grace_seconds, None);
        assert_eq!(summary.name(), "tcab-run-r2-x");
    }

    #[test]
    fn it_is_the_jobs_resource_on_the_wire() {
        assert_eq!(
            WatchedJob::url_path(&(), Some("ns")),
            Job::url_path(&(), Some("ns"))
        );
        assert_eq!(WatchedJob::kind(&()), "Job");
    }
}
