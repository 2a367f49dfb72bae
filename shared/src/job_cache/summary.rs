//! What the view keeps of one owned Job ([`JobSummary`], with the few
//! fields most Jobs never have behind [`Rare`]), and the moments of its
//! life the watch tells the metrics ([`Milestone`]). Pure data and pure
//! functions: no I/O.

use super::JobNames;
use crate::inline_str::IdStr;
use crate::lane::Lane;
use crate::metrics::labels::JobOutcome;
use crate::names;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;

/// Where an owned Job is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobPhase {
    /// No terminal condition yet: it counts against its lane's cap.
    #[default]
    Live,
    /// `Complete` condition true.
    Succeeded,
    /// `Failed` condition true (the pod failed, a deadline passed, ...).
    Failed,
}

/// A true condition of a Job: its reason and message (in a summary's
/// [`Rare`] fields: most Jobs have none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCondition {
    /// `reason` (e.g. `BackoffLimitExceeded`, `DeadlineExceeded`).
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// The fields of one owned Job that decisions read. `Default` is a live run
/// Job with no name, labels or status (for building examples).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSummary {
    /// The Job's name, its `tcab.dev/job-id` label as it is (possibly empty
    /// or malformed: planners check it with `backend::is_job_id`) and its
    /// claim tag from `tcab.dev/claim`; read them through
    /// [`JobSummary::name`], [`JobSummary::job_id`] and [`JobSummary::claim`].
    pub names: JobNames,
    /// The Job's uid ("" when the server gave none).
    pub uid: IdStr,
    /// Its admission lane (label first, then the name rule).
    pub lane: Lane,
    /// Live, succeeded or failed.
    pub phase: JobPhase,
    // The four pod counts are read only as zero or not: 16 bits each, a
    // count past 65,535 kept as 65,535, where `i32`s would push a cached
    // Job into the next size of glibc's blocks.
    /// `status.failed`: pods that failed; it outlives the pods themselves.
    pub failed_pods: u16,
    /// `status.active`: pods neither finished nor being deleted.
    pub active_pods: u16,
    /// `status.ready`: active pods that are ready.
    pub ready_pods: u16,
    /// `status.terminating`: pods being deleted that have not finished.
    pub terminating_pods: u16,
    /// `status.succeeded`: pods that succeeded (with the others: whether
    /// the Job ever counted a pod at all).
    pub succeeded_pods: u16,
    /// What few Jobs have (failure conditions, an orphan pod), behind one
    /// pointer: `None` when it would be empty. Read it through
    /// [`JobSummary::failure_target`], [`JobSummary::failed`] and
    /// [`JobSummary::orphan_pod`].
    pub rare: Option<Box<Rare>>,
    /// The pod template's `terminationGracePeriodSeconds`, if set (clamped
    /// to 32 bits: 68 years is as good as longer).
    pub termination_grace_seconds: Option<i32>,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: the Job itself is being deleted.
    pub deleting: bool,
    /// The Job itself is gone and this entry stands for it while a pod of
    /// it may live on (see [`super::pods`]): live, counting against its lane,
    /// keeping its lease, until the pod finishes.
    pub gone: bool,
}

/// The fields of a [`JobSummary`] that most Jobs never have. A summary
/// keeps them behind one `Option<Box<_>>` (8 bytes) instead of 32 bytes of
/// empty options in every cached Job, which brings a cached Job under
/// 256 bytes with its `Arc` and the allocator's header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rare {
    /// A true `FailureTarget` condition (Kubernetes 1.31+ sets it as soon as
    /// the Job is bound to fail; `Failed` follows once its pods terminated).
    pub failure_target: Option<JobCondition>,
    /// The true `Failed` condition, once the Job has failed.
    pub failed: Option<JobCondition>,
    /// The pod standing for the gone Job, once it is known.
    pub orphan_pod: Option<Box<str>>,
}

impl Rare {
    /// The summary's field for these: `None` when all of them are.
    pub fn boxed(self) -> Option<Box<Rare>> {
        (self != Rare::default()).then(|| Box::new(self))
    }
}

/// The summaries of `jobs`, whether held (a test's plain data) or shared
/// (a [`Snapshot`](super::Snapshot)'s): planners take either.
pub fn summaries<J: std::borrow::Borrow<JobSummary>>(
    jobs: &[J],
) -> impl Iterator<Item = &JobSummary> + Clone {
    jobs.iter().map(std::borrow::Borrow::borrow)
}

impl JobSummary {
    /// A live run Job called `name` with the labels `job_id` and `claim`,
    /// and nothing else (for building examples).
    pub fn named(name: &str, job_id: Option<&str>, claim: Option<&str>) -> Self {
        JobSummary {
            names: JobNames::new(name, job_id, claim),
            ..JobSummary::default()
        }
    }

    /// The Job's name.
    pub fn name(&self) -> &str {
        self.names.name()
    }

    /// The `tcab.dev/job-id` label as it is, if labelled.
    pub fn job_id(&self) -> Option<&str> {
        self.names.job_id()
    }

    /// The claim tag from `tcab.dev/claim`, if labelled.
    pub fn claim(&self) -> Option<&str> {
        self.names.claim()
    }

    /// A true `FailureTarget` condition, if any.
    pub fn failure_target(&self) -> Option<&JobCondition> {
        self.rare.as_ref().and_then(|r| r.failure_target.as_ref())
    }

    /// The true `Failed` condition, once the Job has failed.
    pub fn failed(&self) -> Option<&JobCondition> {
        self.rare.as_ref().and_then(|r| r.failed.as_ref())
    }

    /// The pod standing for the gone Job, once it is known.
    pub fn orphan_pod(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|r| r.orphan_pod.as_deref())
    }

    /// Changes the rare fields; an empty result is kept as `None`, so two
    /// summaries with the same fields compare equal.
    pub fn set_rare(&mut self, change: impl FnOnce(&mut Rare)) {
        let mut rare = self.rare.take().map(|r| *r).unwrap_or_default();
        change(&mut rare);
        self.rare = rare.boxed();
    }

    /// The Job's identity across views: its uid, or its name when it has
    /// none (a Job read back before the API server gave it one). A Job
    /// deleted and made again under the same name is another Job. Every
    /// memory kept per Job (when it was first seen failing, which Jobs were
    /// judged dead or reaped) is keyed by this.
    pub fn key(&self) -> &str {
        if self.uid.is_empty() {
            self.name()
        } else {
            &self.uid
        }
    }

    /// Reads the summary of a Job.
    pub fn from_job(job: &Job) -> Self {
        let grace = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.termination_grace_period_seconds);
        JobSummary::from_parts(&job.metadata, grace, job.status.as_ref())
    }

    /// The summary of a Job from its metadata, its pod template's
    /// termination grace and its status (what [`WatchedJob`](super::watched::WatchedJob) keeps).
    pub fn from_parts(
        meta: &ObjectMeta,
        termination_grace_seconds: Option<i64>,
        status: Option<&JobStatus>,
    ) -> Self {
        static NO_LABELS: std::collections::BTreeMap<String, String> =
            std::collections::BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&NO_LABELS);
        let name = meta.name.as_deref().unwrap_or_default();
        let condition = |kind: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == kind && c.status == "True"))
                .map(|c| JobCondition {
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                })
        };
        let failed = condition("Failed");
        let phase = if failed.is_some() {
            JobPhase::Failed
        } else if condition("Complete").is_some() {
            JobPhase::Succeeded
        } else {
            JobPhase::Live
        };
        // Read only as "none" or "some": 65,535 and more pods read as 65,535.
        let count = |f: fn(&JobStatus) -> Option<i32>| {
            u16::try_from(status.and_then(f).unwrap_or(0).max(0)).unwrap_or(u16::MAX)
        };
        JobSummary {
            lane: Lane::classify(labels, name),
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            names: JobNames::new(
                name,
                labels.get(names::JOB_ID).map(String::as_str),
                labels.get(names::CLAIM).map(String::as_str),
            ),
            phase,
            failed_pods: count(|s| s.failed),
            active_pods: count(|s| s.active),
            ready_pods: count(|s| s.ready),
            terminating_pods: count(|s| s.terminating),
            succeeded_pods: count(|s| s.succeeded),
            rare: Rare {
                failure_target: condition("FailureTarget"),
                failed,
                orphan_pod: None,
            }
            .boxed(),
            termination_grace_seconds: termination_grace_seconds.map(clamp_to_i32),
            created_at: meta
                .creation_timestamp
                .as_ref()
                .map(|t| Timestamp::from_second(t.0.as_second()).unwrap_or(Timestamp::UNIX_EPOCH)),
            deleting: meta.deletion_timestamp.is_some(),
            gone: false,
        }
    }

    /// Not finished: counts against its lane's cap and keeps its lease renewed.
    pub fn is_live(&self) -> bool {
        self.phase == JobPhase::Live
    }

    /// Whether the Job shows a first sign of failure: `FailureTarget`, a
    /// failed pod, a pod being deleted, or the Job itself being deleted. Its
    /// pod is the evidence then.
    pub fn shows_failure(&self) -> bool {
        self.failure_target().is_some()
            || self.failed_pods > 0
            || self.terminating_pods > 0
            || self.deleting
    }

    /// Whether the Job's status counts no pod of any kind (active, ready,
    /// terminating, failed or succeeded): the Job controller has not made
    /// one, or none it made has been counted yet.
    pub fn counts_no_pod(&self) -> bool {
        self.active_pods == 0
            && self.ready_pods == 0
            && self.terminating_pods == 0
            && self.failed_pods == 0
            && self.succeeded_pods == 0
    }

    /// Failing and not settled: live with a sign of failure, or `Failed`
    /// while a pod still terminates (clusters before 1.31 set `Failed` early).
    pub fn failing_unsettled(&self) -> bool {
        (self.is_live() && self.shows_failure())
            || (self.phase == JobPhase::Failed && self.terminating_pods > 0)
    }
}

/// `seconds` within `i32`'s range (a termination grace of 68 years or
/// more is as good as forever).
pub fn clamp_to_i32(seconds: i64) -> i32 {
    i32::try_from(seconds.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or_default()
}

/// A moment in an owned Job's life, as the watch showed it: for metrics
/// only (no decision reads it). Each is told once, from a watch event that
/// shows the change itself (a relist tells nothing: it cannot tell what
/// changed), so a restart never times a Job twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Milestone {
    /// A pod of the Job turned ready (`status.ready` went from 0 above 0):
    /// the run or publish is running.
    Started {
        /// The Job's lane.
        lane: Lane,
        /// `metadata.creationTimestamp`.
        created_at: Timestamp,
    },
    /// The Job turned `Complete` or `Failed`.
    Finished {
        /// The Job's lane.
        lane: Lane,
        /// `Complete` or `Failed`.
        outcome: JobOutcome,
        /// `metadata.creationTimestamp`.
        created_at: Timestamp,
    },
}

/// What is told of each [`Milestone`].
pub type MilestoneSink = Arc<dyn Fn(Milestone) + Send + Sync>;

/// The milestone a watch event shows, comparing the entry before it
/// (`None`: not in the view) with the Job after it.
pub fn milestone(before: Option<&JobSummary>, after: &JobSummary) -> Option<Milestone> {
    let created_at = after.created_at?;
    let was_live = before.is_none_or(JobSummary::is_live);
    match after.phase {
        JobPhase::Live => {
            let was_ready = before.is_some_and(|b| b.ready_pods > 0);
            (after.ready_pods > 0 && !was_ready).then_some(Milestone::Started {
                lane: after.lane,
                created_at,
            })
        }
        JobPhase::Succeeded | JobPhase::Failed if was_live && before.is_some() => {
            let outcome = if after.phase == JobPhase::Succeeded {
                JobOutcome::Succeeded
            } else {
                JobOutcome::Failed
            };
            Some(Milestone::Finished {
                lane: after.lane,
                outcome,
                created_at,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// A Job as the API server would send it (for the view's tests too).
    pub(crate) fn job(name: &str, labels: serde_json::Value, status: serde_json::Value) -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "labels": labels, "uid": format!("uid-{name}"),
                         "creationTimestamp": "2026-11-29T17:00:00Z"},
            "spec": {"template": {"spec": {"terminationGracePeriodSeconds": 120, "containers": []}}},
            "status": status,
        }))
        .expect("valid job json")
    }

    /// What a cached Job costs in place (docs/performance.md counts on it):
    /// the strings are held inline and the rare fields are absent, so a
    /// well-formed running Job has no heap block beside its `Arc`; the `Arc`
    /// (16 bytes of counts) and glibc's 8-byte header round up to 16 bytes,
    /// so 232 bytes make a 256-byte block (264 made 288).
    #[test]
    fn a_summary_stays_small() {
        // With its `Arc`'s two counts, 184 bytes: a 192-byte block of glibc's.
        assert!(
            size_of::<JobSummary>() <= 168,
            "{}",
            size_of::<JobSummary>()
        );
        let s = JobSummary::from_job(&job(
            "tcab-publisher-0b6f7c8e-2a51-4d1c-9a0e-3f1b2c4d5e6f-abcdefgh",
            json!({"tcab.dev/job-id": "0b6f7c8e-2a51-4d1c-9a0e-3f1b2c4d5e6f", "tcab.dev/claim": "abcdefgh"}),
            json!({}),
        ));
        assert!(s.names.is_packed(), "{:?}", s.names);
        assert_eq!(s.job_id(), Some("0b6f7c8e-2a51-4d1c-9a0e-3f1b2c4d5e6f"));
        assert_eq!(s.claim(), Some("abcdefgh"));
        assert!(
            s.rare.is_none(),
            "a Job with no failure keeps no rare fields"
        );
    }

    #[test]
    fn rare_fields_emptied_again_compare_equal_to_none() {
        let plain = JobSummary::default();
        let mut changed = plain.clone();
        changed.set_rare(|r| r.orphan_pod = Some("p".into()));
        assert_eq!(changed.orphan_pod(), Some("p"));
        assert_ne!(changed, plain);
        changed.set_rare(|r| r.orphan_pod = None);
        assert!(changed.rare.is_none());
        assert_eq!(changed, plain, "a relist shares what did not change");
    }

    #[test]
    fn a_grace_beyond_32_bits_is_clamped_not_wrapped() {
        assert_eq!(clamp_to_i32(120), 120);
        assert_eq!(clamp_to_i32(i64::MAX), i32::MAX);
        assert_eq!(clamp_to_i32(-5_000_000_000), i32::MIN);
    }

    #[test]
    fn summary_reads_labels_phase_counts_and_conditions() {
        let j = job(
            "tcab-driver-a-1",
            json!({"tcab.dev/job-id": "a", "tcab.dev/claim": "1", "tcab.dev/job-kind": "run"}),
            json!({"failed": 1, "terminating": 0, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "m"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        );
        let s = JobSummary::from_job(&j);
        assert_eq!(s.lane, Lane::Run);
        assert_eq!(s.uid, "uid-tcab-driver-a-1");
        assert_eq!(s.job_id(), Some("a"));
        assert_eq!(s.claim(), Some("1"));
        assert_eq!(s.phase, JobPhase::Failed);
        assert_eq!(s.failed_pods, 1);
        assert_eq!(s.failure_target().unwrap().reason, "PodFailurePolicy");
        assert_eq!(s.failed().unwrap().reason, "BackoffLimitExceeded");
        assert_eq!(s.termination_grace_seconds, Some(120));
        assert!(!s.is_live() && s.shows_failure());

        let done = job(
            "tcab-publisher-b-2",
            json!({}),
            json!({"conditions": [
            {"type": "Complete", "status": "True"}]}),
        );
        let s = JobSummary::from_job(&done);
        assert_eq!((s.lane, s.phase), (Lane::Publish, JobPhase::Succeeded));
        assert!(!s.shows_failure());

        // Counts are kept in 16 bits: a huge one stays non-zero, an odd
        // negative one reads as none.
        let odd = job(
            "y",
            json!({}),
            json!({"failed": 70000, "active": 65536, "ready": -1, "terminating": 65535}),
        );
        let s = JobSummary::from_job(&odd);
        assert_eq!(
            (
                s.failed_pods,
                s.active_pods,
                s.ready_pods,
                s.terminating_pods
            ),
            (u16::MAX, u16::MAX, 0, u16::MAX)
        );
        assert!(s.shows_failure());

        let failing = job(
            "x",
            json!({}),
            json!({"active": 0, "terminating": 1, "ready": 0, "failed": 1, "conditions": [
            {"type": "Failed", "status": "False"},
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        );
        let s = JobSummary::from_job(&failing);
        assert!(s.is_live(), "FailureTarget alone is not Failed");
        assert!(s.shows_failure());
        assert_eq!((s.terminating_pods, s.failed_pods), (1, 1));
    }
}
