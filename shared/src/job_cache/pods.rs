//! Pods that outlive their Job. A run (or publish) whose Job is gone while
//! its pod still runs is still a live run: it counts against its lane, its
//! lease is renewed, its sandboxes are not swept, and its death is reported
//! from the pod. That happens when a Job is deleted with `--cascade=orphan`
//! (the garbage collector strips the pod's ownerReference and leaves it
//! running) and, for the length of the pod's termination grace, when a Job
//! is deleted with the usual background propagation.
//!
//! No pod is watched (the dispatcher's Role grants pods get, list and delete
//! only): the owned live pods are listed once after each Job (re)list, the
//! pods of a live Job that vanishes are listed once by its name, and the few
//! pods found standing for a gone Job are read by name every poll until they
//! finish. Until the pods of a vanished Job are known, its last summary
//! stands in for it (still live), so no lane frees a slot early.

use super::{JobNames, JobSummary, Rare};
use crate::lane::Lane;
use crate::names;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Arc;

/// The field selector of a pod list that wants only pods that have not finished.
pub const LIVE_PHASES: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// The label the Job controller puts on every pod of a Job (since 1.27);
/// [`names::JOB_NAME`] is the older one it still sets.
pub const BATCH_JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// The fields of one owned pod the view reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedPod {
    /// The pod's name.
    pub name: String,
    /// The name of the Job it belongs to: its job-name label, else its
    /// controller's name, else its own name.
    pub job_name: String,
    /// Its lane (the pod template carries the Job's labels).
    pub lane: Lane,
    /// The `tcab.dev/job-id` label.
    pub job_id: Option<String>,
    /// The `tcab.dev/claim` label.
    pub claim: Option<String>,
    /// Its `Ready` condition is true.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set: it is terminating.
    pub deleting: bool,
    /// Its phase is `Succeeded` or `Failed`.
    pub finished: bool,
    /// `spec.terminationGracePeriodSeconds`.
    pub termination_grace_seconds: Option<i64>,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
}

impl OwnedPod {
    /// Reads the summary of a pod.
    pub fn from_pod(pod: &Pod) -> Self {
        let labels = pod.labels();
        let name = pod.name_any();
        let controller = pod
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true) && r.kind == "Job")
            .map(|r| r.name.clone());
        let job_name = labels
            .get(BATCH_JOB_NAME)
            .or_else(|| labels.get(names::JOB_NAME))
            .cloned()
            .or(controller)
            .unwrap_or_else(|| name.clone());
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        OwnedPod {
            lane: Lane::classify(labels, &job_name),
            job_id: labels.get(names::JOB_ID).cloned(),
            claim: labels.get(names::CLAIM).cloned(),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
            termination_grace_seconds: pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds),
            created_at: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| Timestamp::from_second(t.0.as_second()).unwrap_or(Timestamp::UNIX_EPOCH)),
            job_name,
            name,
        }
    }

    /// The view's entry for this pod standing for its gone Job: a live Job
    /// of one pod, named after the Job, that says which pod it is.
    pub fn stand_in(&self) -> JobSummary {
        JobSummary {
            names: JobNames::new(
                &self.job_name,
                self.job_id.as_deref(),
                self.claim.as_deref(),
            ),
            uid: Default::default(),
            lane: self.lane,
            active_pods: u16::from(!self.deleting),
            ready_pods: u16::from(self.ready && !self.deleting),
            terminating_pods: u16::from(self.deleting),
            termination_grace_seconds: self.termination_grace_seconds.map(super::clamp_to_i32),
            created_at: self.created_at,
            gone: true,
            rare: Rare {
                orphan_pod: Some(self.name.as_str().into()),
                ..Rare::default()
            }
            .boxed(),
            ..JobSummary::default()
        }
    }
}

/// What stands in the view for a Job that is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The Job vanished while live and its pods are being listed: its last
    /// summary stands for it meanwhile (shared with the snapshots that held it).
    Checking(Arc<JobSummary>),
    /// A live pod of it.
    Pod(OwnedPod),
}

impl Gone {
    /// The lane of the entry, without building it.
    pub fn lane(&self) -> Lane {
        match self {
            Gone::Checking(last) => last.lane,
            Gone::Pod(pod) => pod.lane,
        }
    }

    /// The view's entry.
    pub fn entry(&self) -> Arc<JobSummary> {
        match self {
            Gone::Checking(last) if last.gone => Arc::clone(last),
            Gone::Checking(last) => Arc::new(JobSummary {
                gone: true,
                ..JobSummary::clone(last)
            }),
            Gone::Pod(pod) => Arc::new(pod.stand_in()),
        }
    }
}

/// The live pod that stands for a Job among `pods` (those of that Job): the
/// newest not finished, a running one before a terminating one. Pure.
pub fn standing(pods: impl IntoIterator<Item = OwnedPod>) -> Option<OwnedPod> {
    pods.into_iter().filter(|p| !p.finished).max_by(|a, b| {
        (!a.deleting, a.created_at, &a.name).cmp(&(!b.deleting, b.created_at, &b.name))
    })
}

/// After a complete list of the live owned pods: the gone Jobs are those
/// whose live pods the Job view does not hold, one entry each. Pure.
pub fn gone_after_list(
    pods: Vec<OwnedPod>,
    has_job: impl Fn(&str) -> bool,
) -> HashMap<String, Gone> {
    let mut by_job: HashMap<String, Vec<OwnedPod>> = HashMap::new();
    for pod in pods.into_iter().filter(|p| !has_job(&p.job_name)) {
        by_job.entry(pod.job_name.clone()).or_default().push(pod);
    }
    by_job
        .into_iter()
        .filter_map(|(job, pods)| standing(pods).map(|p| (job, Gone::Pod(p))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, job: &str, deleting: bool, created: &str, phase: &str) -> OwnedPod {
        let mut meta = json!({
            "name": name, "namespace": "ns", "creationTimestamp": created,
            "labels": {"job-name": job, "batch.kubernetes.io/job-name": job,
                       "tcab.dev/job-id": "a", "tcab.dev/claim": "c1", "tcab.dev/job-kind": "run"},
        });
        if deleting {
            meta["deletionTimestamp"] = json!("2026-11-29T17:10:00Z");
        }
        OwnedPod::from_pod(
            &serde_json::from_value(json!({
                "metadata": meta,
                "spec": {"terminationGracePeriodSeconds": 120, "containers": []},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pod_is_read_by_its_job_name_and_labels() {
        let p = pod(
            "tcab-driver-a-c1-x7",
            "tcab-driver-a-c1",
            false,
            "2026-11-29T17:00:00Z",
            "Running",
        );
        assert_eq!(p.job_name, "tcab-driver-a-c1");
        assert_eq!(
            (p.lane, p.job_id.as_deref(), p.claim.as_deref()),
            (Lane::Run, Some("a"), Some("c1"))
        );
        assert!(p.ready && !p.deleting && !p.finished);
        assert_eq!(p.termination_grace_seconds, Some(120));
        assert!(pod("x", "j", false, "2026-11-29T17:00:00Z", "Failed").finished);

        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "tcab-publisher-b-c2", "uid": "u", "controller": true}]}}))
        .unwrap();
        let p = OwnedPod::from_pod(&bare);
        assert_eq!(
            (p.job_name.as_str(), p.lane),
            ("tcab-publisher-b-c2", Lane::Publish),
            "the controller names the Job"
        );
    }

    #[test]
    fn a_stand_in_is_a_live_entry_named_after_its_job() {
        let running = pod("j1-x", "j1", false, "2026-11-29T17:00:00Z", "Running").stand_in();
        assert_eq!((running.name(), running.orphan_pod()), ("j1", Some("j1-x")));
        assert!(running.is_live() && running.gone && !running.shows_failure());
        assert_eq!(
            (
                running.active_pods,
                running.ready_pods,
                running.terminating_pods
            ),
            (1, 1, 0)
        );
        let terminating = pod("j1-x", "j1", true, "2026-11-29T17:00:00Z", "Running").stand_in();
        assert_eq!(
            (terminating.active_pods, terminating.terminating_pods),
            (0, 1)
        );
        assert!(terminating.shows_failure() && terminating.is_live());
    }

    #[test]
    fn only_live_pods_without_their_job_stand_for_it() {
        let jobs: HashMap<String, JobSummary> = [(
            "j2".to_owned(),
            JobSummary {
                names: JobNames::new("j2", None, None),
                ..JobSummary::default()
            },
        )]
        .into();
        let pods = vec![
            pod("j1-old", "j1", true, "2026-11-29T17:00:00Z", "Running"),
            pod("j1-new", "j1", false, "2026-11-29T16:00:00Z", "Pending"),
            pod("j2-x", "j2", false, "2026-11-29T17:00:00Z", "Running"),
            pod("j3-x", "j3", false, "2026-11-29T17:00:00Z", "Succeeded"),
        ];
        let gone = gone_after_list(pods, |n| jobs.contains_key(n));
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert_eq!(
            gone["j1"].entry().orphan_pod(),
            Some("j1-new"),
            "a running pod wins over a terminating one"
        );
    }

    #[test]
    fn a_vanished_job_stands_as_it_was_while_its_pods_are_checked() {
        let last = JobSummary {
            names: JobNames::new("j", Some("a"), None),
            active_pods: 1,
            ..JobSummary::default()
        };
        let entry = Gone::Checking(Arc::new(last)).entry();
        assert!(entry.gone && entry.is_live() && entry.orphan_pod().is_none());
        assert_eq!(entry.job_id(), Some("a"));
    }
}
