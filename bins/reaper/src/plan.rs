//! The reaper's decision: which sandbox pods to delete, and why each other
//! pod is kept.
//!
//! [`plan`] is a pure function over one snapshot (the cached owned Jobs, the
//! pods one LIST returned, and `now`). It sorts what it is given, so the same
//! snapshot in any order gives the same plan, and it holds no memory between
//! ticks: a reap that failed is simply planned again on the next tick, and a
//! restarted reaper decides exactly as the old one would have.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::cluster::{JobPhase, JobSummary};
use tcab_shared::labels;

/// Labels the Job controller puts on the pods of a Job. A pod carrying one
/// of them is a Job's own pod (such as the driver's), never a sandbox.
const JOB_POD_LABELS: [&str; 4] = [
    labels::JOB_NAME,
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
];

/// What the plan needs to know besides the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSettings {
    /// The managed-by value the driver puts on its sandbox pods
    /// (`TCAB_DRIVER_MANAGED_BY`). A pod without it is never deleted.
    pub driver_managed_by: String,
    /// The dispatcher's own managed-by value (on its Jobs and their pods).
    /// A pod carrying it is a driver's own pod and is never deleted.
    pub dispatcher_managed_by: String,
    /// Whether to delete orphaned sandboxes (job id of no owned Job at all).
    pub orphan_sweep: bool,
    /// How old an orphan must be before the sweep deletes it.
    pub orphan_grace: Duration,
}

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
            managed_by: pod_labels.get(labels::MANAGED_BY).cloned(),
            job_id: pod_labels.get(labels::JOB_ID).cloned(),
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

/// Why a pod is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteReason {
    /// A driver Job with the pod's job id failed terminally and no Job with
    /// that id is live.
    DriverJobFailed {
        /// The failed driver Job (the first by name when several failed).
        job: String,
    },
    /// No owned Job carries the pod's job id (the failed Job was TTL-deleted
    /// while nobody reaped), and the pod is older than the grace.
    Orphan {
        /// How old the pod is.
        age: SignedDuration,
    },
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeleteReason::DriverJobFailed { job } => write!(f, "driver Job {job} failed"),
            DeleteReason::Orphan { age } => write!(
                f,
                "orphan: no owned Job has its job id, {}s old",
                age.as_secs()
            ),
        }
    }
}

/// Why a pod is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepReason {
    /// It lacks the driver's managed-by value: not a sandbox.
    NotDriverManaged,
    /// It is a Job's own pod (the driver's, whose logs the death report reads).
    JobPod,
    /// It has no `tcab.dev/job-id` label, so it maps to no backend job.
    NoJobId,
    /// It is already being deleted.
    Terminating,
    /// A Job with its job id is live (a newer claim of the same backend job).
    LiveJob {
        /// The live Job (the first by name).
        job: String,
    },
    /// Jobs with its job id exist, but none failed and none is live (a
    /// driver that succeeded normally deletes its own sandbox).
    NoFailedDriverJob {
        /// One such Job (the first by name).
        job: String,
        /// That Job's phase.
        phase: JobPhase,
    },
    /// No owned Job has its job id, and the orphan sweep is off.
    SweepDisabled,
    /// No owned Job has its job id, but its age is unknown.
    AgeUnknown,
    /// No owned Job has its job id, but it is younger than the grace.
    TooYoung {
        /// How old the pod is.
        age: SignedDuration,
    },
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::NotDriverManaged => f.write_str("not managed by the driver"),
            KeepReason::JobPod => f.write_str("a Job's own pod"),
            KeepReason::NoJobId => f.write_str("no job-id label"),
            KeepReason::Terminating => f.write_str("already terminating"),
            KeepReason::LiveJob { job } => write!(f, "Job {job} with its job id is live"),
            KeepReason::NoFailedDriverJob { job, phase } => {
                write!(
                    f,
                    "no failed driver Job for its job id ({job} is {phase:?})"
                )
            }
            KeepReason::SweepDisabled => f.write_str("orphan, but the orphan sweep is off"),
            KeepReason::AgeUnknown => f.write_str("orphan of unknown age"),
            KeepReason::TooYoung { age } => {
                write!(f, "orphan only {}s old, inside the grace", age.as_secs())
            }
        }
    }
}

/// One pod to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDelete {
    /// The pod.
    pub pod: PodSummary,
    /// Its job id.
    pub job_id: String,
    /// Why.
    pub reason: DeleteReason,
}

/// One pod kept, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodKept {
    /// The pod.
    pub pod: PodSummary,
    /// Why it stays.
    pub reason: KeepReason,
}

/// What one tick does: the pods to delete, and every other pod with its reason.
/// Both lists are sorted by namespace, then name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapPlan {
    /// Pods to delete.
    pub delete: Vec<PodDelete>,
    /// Pods kept.
    pub keep: Vec<PodKept>,
}

/// What the owned Jobs say about one job id. Each name is the first by name
/// among its kind, so the index does not depend on the order of the Jobs.
#[derive(Debug, Default)]
struct JobsForId {
    live: Option<String>,
    failed_driver: Option<String>,
    other: Option<(String, JobPhase)>,
}

fn keep_first(slot: &mut Option<String>, name: &str) {
    if slot.as_deref().is_none_or(|current| name < current) {
        *slot = Some(name.to_owned());
    }
}

fn index_jobs(jobs: &[JobSummary]) -> BTreeMap<&str, JobsForId> {
    let mut index: BTreeMap<&str, JobsForId> = BTreeMap::new();
    for job in jobs {
        let Some(id) = job.job_id.as_deref() else {
            continue;
        };
        let entry = index.entry(id).or_default();
        // Any live Job with the id holds the reap (conservatively, whatever
        // its lane: the driver lane is the only one that makes sandboxes).
        if job.is_live() {
            keep_first(&mut entry.live, &job.name);
        } else if job.phase == JobPhase::Failed && job.lane == Lane::Run {
            keep_first(&mut entry.failed_driver, &job.name);
        } else if entry
            .other
            .as_ref()
            .is_none_or(|(current, _)| job.name < *current)
        {
            entry.other = Some((job.name.clone(), job.phase));
        }
    }
    index
}

/// Decides which pods to delete. `pods` is whatever the sandbox LIST
/// returned (it is selected on the driver's managed-by value, but the plan
/// checks every rule itself); `jobs` is the owned-Job cache after its first
/// full list.
///
/// A pod is deleted only when it carries the driver's managed-by value, is
/// no Job's own pod, carries a job id, is not already terminating, no Job
/// with its job id is live, and either a driver Job with its job id failed,
/// or (orphan sweep on) no owned Job has its job id and it is older than
/// the grace.
pub fn plan(
    jobs: &[JobSummary],
    pods: &[PodSummary],
    now: Timestamp,
    settings: &SweepSettings,
) -> ReapPlan {
    let index = index_jobs(jobs);
    let grace = SignedDuration::try_from(settings.orphan_grace).unwrap_or(SignedDuration::MAX);

    let mut pods: Vec<&PodSummary> = pods.iter().collect();
    pods.sort();
    pods.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name);

    let mut out = ReapPlan::default();
    for pod in pods {
        match decide(pod, &index, now, grace, settings) {
            Ok((job_id, reason)) => out.delete.push(PodDelete {
                pod: pod.clone(),
                job_id,
                reason,
            }),
            Err(reason) => out.keep.push(PodKept {
                pod: pod.clone(),
                reason,
            }),
        }
    }
    out
}

fn decide(
    pod: &PodSummary,
    index: &BTreeMap<&str, JobsForId>,
    now: Timestamp,
    grace: SignedDuration,
    settings: &SweepSettings,
) -> Result<(String, DeleteReason), KeepReason> {
    if pod.managed_by.as_deref() != Some(settings.driver_managed_by.as_str()) {
        return Err(KeepReason::NotDriverManaged);
    }
    if pod.job_owned || pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str()) {
        return Err(KeepReason::JobPod);
    }
    let Some(job_id) = pod.job_id.as_deref() else {
        return Err(KeepReason::NoJobId);
    };
    if pod.terminating {
        return Err(KeepReason::Terminating);
    }
    match index.get(job_id) {
        Some(JobsForId {
            live: Some(job), ..
        }) => Err(KeepReason::LiveJob { job: job.clone() }),
        Some(JobsForId {
            failed_driver: Some(job),
            ..
        }) => Ok((
            job_id.to_owned(),
            DeleteReason::DriverJobFailed { job: job.clone() },
        )),
        Some(JobsForId {
            other: Some((job, phase)),
            ..
        }) => Err(KeepReason::NoFailedDriverJob {
            job: job.clone(),
            phase: *phase,
        }),
        // No owned Job has this id (an id entry always holds one of the three).
        _ => {
            if !settings.orphan_sweep {
                return Err(KeepReason::SweepDisabled);
            }
            let Some(created) = pod.created_at else {
                return Err(KeepReason::AgeUnknown);
            };
            let age = now.duration_since(created);
            if age < grace {
                Err(KeepReason::TooYoung { age })
            } else {
                Ok((job_id.to_owned(), DeleteReason::Orphan { age }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    const DRIVER: &str = "tcab-driver";
    const DISPATCHER: &str = "tcab-dispatcher";

    fn settings() -> SweepSettings {
        SweepSettings {
            driver_managed_by: DRIVER.into(),
            dispatcher_managed_by: DISPATCHER.into(),
            orphan_sweep: true,
            orphan_grace: Duration::from_secs(600),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    fn job(name: &str, id: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        JobSummary {
            name: name.into(),
            lane,
            job_id: Some(id.into()),
            claim: Some("c".into()),
            phase,
            failed_pods: i32::from(phase == JobPhase::Failed),
            created_at: Some(now() - SignedDuration::from_secs(3600)),
        }
    }

    fn sandbox(name: &str, id: &str, age_secs: i64) -> PodSummary {
        PodSummary {
            namespace: "sandboxes".into(),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            managed_by: Some(DRIVER.into()),
            job_id: Some(id.into()),
            created_at: Some(now() - SignedDuration::from_secs(age_secs)),
            terminating: false,
            job_owned: false,
        }
    }

    fn driver_pod(name: &str, id: &str) -> PodSummary {
        PodSummary {
            managed_by: Some(DISPATCHER.into()),
            job_owned: true,
            ..sandbox(name, id, 3600)
        }
    }

    fn deleted(plan: &ReapPlan) -> Vec<&str> {
        plan.delete.iter().map(|d| d.pod.name.as_str()).collect()
    }

    fn kept_reason<'a>(plan: &'a ReapPlan, name: &str) -> &'a KeepReason {
        &plan
            .keep
            .iter()
            .find(|k| k.pod.name == name)
            .expect("pod kept")
            .reason
    }

    #[test]
    fn failed_driver_job_reaps_its_sandboxes_only() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Live),
        ];
        let pods = [
            sandbox("sb-a", "a", 5),
            sandbox("sb-a-2", "a", 5),
            sandbox("sb-b", "b", 5000),
            driver_pod("tcab-driver-a-1-xyz", "a"),
        ];
        let p = plan(&jobs, &pods, now(), &settings());
        assert_eq!(deleted(&p), ["sb-a", "sb-a-2"]);
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::DriverJobFailed {
                job: "tcab-driver-a-1".into()
            }
        );
        assert_eq!(p.delete[0].job_id, "a");
        assert_eq!(
            kept_reason(&p, "sb-b"),
            &KeepReason::LiveJob {
                job: "tcab-driver-b-1".into()
            }
        );
        assert_eq!(
            kept_reason(&p, "tcab-driver-a-1-xyz"),
            &KeepReason::NotDriverManaged
        );
    }

    #[test]
    fn a_live_newer_claim_holds_the_reap() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live),
        ];
        let p = plan(&jobs, &[sandbox("sb-a", "a", 5)], now(), &settings());
        assert!(p.delete.is_empty());
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            }
        );
    }

    #[test]
    fn succeeded_or_publisher_jobs_do_not_reap() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Succeeded),
            job("tcab-publisher-p-1", "p", Lane::Publish, JobPhase::Failed),
        ];
        let pods = [sandbox("sb-a", "a", 5000), sandbox("sb-p", "p", 5000)];
        let p = plan(&jobs, &pods, now(), &settings());
        assert!(p.delete.is_empty(), "{p:?}");
        assert!(matches!(
            kept_reason(&p, "sb-a"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Succeeded,
                ..
            }
        ));
        assert!(matches!(
            kept_reason(&p, "sb-p"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Failed,
                ..
            }
        ));
    }

    #[test]
    fn orphans_are_swept_after_the_grace() {
        let pods = [
            sandbox("old", "gone", 601),
            sandbox("edge", "gone", 600),
            sandbox("young", "gone", 599),
            PodSummary {
                created_at: None,
                ..sandbox("ageless", "gone", 0)
            },
        ];
        let p = plan(&[], &pods, now(), &settings());
        assert_eq!(deleted(&p), ["edge", "old"]);
        assert_eq!(
            p.delete[1].reason,
            DeleteReason::Orphan {
                age: SignedDuration::from_secs(601)
            }
        );
        assert!(matches!(
            kept_reason(&p, "young"),
            KeepReason::TooYoung { .. }
        ));
        assert_eq!(kept_reason(&p, "ageless"), &KeepReason::AgeUnknown);

        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        let p = plan(&[], &pods, now(), &off);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "old"), &KeepReason::SweepDisabled);
    }

    #[test]
    fn pods_that_are_not_sandboxes_are_never_touched() {
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pods = [
            PodSummary {
                managed_by: None,
                ..sandbox("unlabelled", "a", 5000)
            },
            PodSummary {
                managed_by: Some("someone-else".into()),
                ..sandbox("foreign", "a", 5000)
            },
            PodSummary {
                job_id: None,
                ..sandbox("no-id", "a", 5000)
            },
            PodSummary {
                job_owned: true,
                ..sandbox("job-owned", "a", 5000)
            },
            PodSummary {
                terminating: true,
                ..sandbox("terminating", "a", 5000)
            },
        ];
        let p = plan(&jobs, &pods, now(), &settings());
        assert!(p.delete.is_empty(), "{p:?}");
        assert_eq!(kept_reason(&p, "unlabelled"), &KeepReason::NotDriverManaged);
        assert_eq!(kept_reason(&p, "foreign"), &KeepReason::NotDriverManaged);
        assert_eq!(kept_reason(&p, "no-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "job-owned"), &KeepReason::JobPod);
        assert_eq!(kept_reason(&p, "terminating"), &KeepReason::Terminating);
    }

    #[test]
    fn same_managed_by_for_driver_and_dispatcher_still_spares_the_driver_pod() {
        let same = SweepSettings {
            driver_managed_by: DISPATCHER.into(),
            ..settings()
        };
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pods = [PodSummary {
            job_owned: false,
            ..driver_pod("tcab-driver-a-1-xyz", "a")
        }];
        let p = plan(&jobs, &pods, now(), &same);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "tcab-driver-a-1-xyz"), &KeepReason::JobPod);
    }

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

    // ---- properties ----

    const IDS: [&str; 4] = ["a", "b", "c", "d"];

    fn arb_job() -> impl Strategy<Value = JobSummary> {
        (
            0usize..IDS.len(),
            0u8..4,
            prop::sample::select(vec![JobPhase::Live, JobPhase::Succeeded, JobPhase::Failed]),
            any::<bool>(),
        )
            .prop_map(|(id, claim, phase, publish)| {
                let lane = if publish { Lane::Publish } else { Lane::Run };
                let name = format!("{}{}-{claim}", lane.name_prefix(), IDS[id]);
                job(&name, IDS[id], lane, phase)
            })
    }

    fn arb_pod() -> impl Strategy<Value = PodSummary> {
        (
            0usize..8,
            prop::option::of(prop::sample::select(vec![DRIVER, DISPATCHER, "other"])),
            prop::option::of(prop::sample::select(vec!["a", "b", "c", "d", "e", "f"])),
            prop::option::of(0i64..1200),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(n, managed_by, id, age, terminating, job_owned)| PodSummary {
                    namespace: "sandboxes".into(),
                    name: format!("pod-{n}"),
                    uid: Some(format!("uid-{n}")),
                    managed_by: managed_by.map(String::from),
                    job_id: id.map(String::from),
                    created_at: age.map(|a| now() - SignedDuration::from_secs(a)),
                    terminating,
                    job_owned,
                },
            )
    }

    /// A driver's own pod, as the Job controller makes it: the dispatcher's
    /// managed-by value, the job id, a Job owner.
    fn arb_driver_pod() -> impl Strategy<Value = PodSummary> {
        (0usize..IDS.len(), any::<bool>()).prop_map(|(id, labelled_only)| PodSummary {
            namespace: "sandboxes".into(),
            name: format!("tcab-driver-{}-pod", IDS[id]),
            uid: None,
            managed_by: Some(DISPATCHER.into()),
            job_id: Some(IDS[id].into()),
            created_at: Some(now() - SignedDuration::from_secs(5000)),
            terminating: false,
            job_owned: !labelled_only,
        })
    }

    fn arb_settings() -> impl Strategy<Value = SweepSettings> {
        (any::<bool>(), 0u64..1200).prop_map(|(orphan_sweep, grace)| SweepSettings {
            orphan_sweep,
            orphan_grace: Duration::from_secs(grace),
            ..settings()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x5eed_7ea9),
            ..ProptestConfig::default()
        })]

        #[test]
        fn never_deletes_what_it_must_not(
            jobs in prop::collection::vec(arb_job(), 0..8),
            mut pods in prop::collection::vec(arb_pod(), 0..10),
            driver_pods in prop::collection::vec(arb_driver_pod(), 0..3),
            settings in arb_settings(),
        ) {
            pods.extend(driver_pods);
            let p = plan(&jobs, &pods, now(), &settings);
            for d in &p.delete {
                // Only pods carrying the driver's managed-by value.
                prop_assert_eq!(d.pod.managed_by.as_deref(), Some(DRIVER));
                // Never a Job's own pod, never the driver's own pod.
                prop_assert!(!d.pod.job_owned);
                prop_assert!(d.pod.managed_by.as_deref() != Some(DISPATCHER));
                // Never a pod whose job id has a live driver Job.
                let id = d.pod.job_id.as_deref();
                prop_assert_eq!(id, Some(d.job_id.as_str()));
                prop_assert!(!jobs.iter().any(|j| j.job_id.as_deref() == id && j.is_live()));
                match &d.reason {
                    DeleteReason::DriverJobFailed { job } => prop_assert!(jobs.iter().any(|j|
                        &j.name == job && j.phase == JobPhase::Failed && j.lane == Lane::Run
                        && j.job_id.as_deref() == id)),
                    DeleteReason::Orphan { age } => {
                        prop_assert!(settings.orphan_sweep);
                        prop_assert!(!jobs.iter().any(|j| j.job_id.as_deref() == id));
                        prop_assert!(age.as_secs() >= settings.orphan_grace.as_secs() as i64);
                    }
                }
            }
            // Every distinct pod is accounted for exactly once.
            let mut keys: Vec<(String, String)> = pods.iter().map(|p| (p.namespace.clone(), p.name.clone())).collect();
            keys.sort();
            keys.dedup();
            prop_assert_eq!(p.delete.len() + p.keep.len(), keys.len());
        }

        #[test]
        fn deterministic_under_reordering(
            (jobs, pods, jobs2, pods2) in (
                prop::collection::vec(arb_job(), 0..8),
                prop::collection::vec(arb_pod(), 0..10),
            ).prop_flat_map(|(jobs, pods)| (
                Just(jobs.clone()),
                Just(pods.clone()),
                Just(jobs).prop_shuffle(),
                Just(pods).prop_shuffle(),
            )),
            settings in arb_settings(),
        ) {
            let base = plan(&jobs, &pods, now(), &settings);
            prop_assert_eq!(&base, &plan(&jobs2, &pods2, now(), &settings));
        }
    }
}
