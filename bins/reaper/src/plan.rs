//! The reaper's decision: which sandbox pods to delete, and why each other
//! pod is kept.
//!
//! [`plan`] is a pure function over one [`Snapshot`]: the owned Jobs of a
//! current view, the pods one LIST returned, `now`, the Jobs judged dead
//! because they cannot finish failing, and (on a sweep tick) the job ids
//! the backend still drives. It sorts what it is given, so the same
//! snapshot in any order gives the same plan. What the reaper remembers
//! between ticks (which reaps are complete, when the sweep last ran) lives
//! in [`crate::memory`]; it decides when to list, never what to delete.
//!
//! A sandbox is deleted for one of two reasons ([`ReapKind`]):
//! - **driver failed**: a driver Job with its job id failed terminally (or
//!   is judged dead, see [`tcab_shared::failing`]), its pods are not still
//!   terminating, and no Job with that id is live;
//! - **orphan**: the orphan sweep is on and due, no owned Job carries its
//!   job id, the backend does not list that job as driven, and the pod is
//!   older than the grace; or, by the same gates, the only Jobs with its job
//!   id are driver Jobs that succeeded (a **leftover**: the driver finished
//!   but its own cleanup did not land, say while the API server was down).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::backend::client::is_job_id;
use tcab_shared::job_cache::{JobPhase, JobSummary, summaries};
use tcab_shared::names;

/// Labels the Job controller puts on the pods of a Job. A pod carrying one
/// of them is a Job's own pod (such as the driver's), never a sandbox.
const JOB_POD_LABELS: [&str; 4] = [
    names::JOB_NAME,
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
];

/// The reaper's settings, from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSettings {
    /// The managed-by value the driver puts on its sandbox pods
    /// (`TCAB_DRIVER_MANAGED_BY`). A pod without it is never deleted.
    pub driver_managed_by: String,
    /// The dispatcher's own managed-by value (on its Jobs and their pods).
    /// A pod carrying it is a driver's own pod and is never deleted.
    pub dispatcher_managed_by: String,
    /// Whether to sweep orphaned sandboxes.
    pub orphan_sweep: bool,
    /// How old an orphan must be before the sweep deletes it.
    pub orphan_grace: Duration,
    /// How often the orphan sweep lists the sandbox pods.
    pub orphan_sweep_interval: Duration,
    /// How long past its pods' termination grace a failing driver Job may
    /// stay unfinished before it is judged dead.
    pub terminating_margin: Duration,
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

/// The key the reaper remembers a Job by: its uid, or its name when the
/// server gave no uid.
pub fn job_key(job: &JobSummary) -> &str {
    if job.uid.is_empty() {
        &job.name
    } else {
        &job.uid
    }
}

/// The two kinds of reap, as metrics count them (`driver_failed`,
/// `orphan`: the `reason` label of `sandboxes_reaped_total`, declared with
/// the other label values).
pub use tcab_shared::metrics::labels::ReapReason as ReapKind;

/// Why a pod is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteReason {
    /// A driver Job with the pod's job id failed terminally, its pods have
    /// finished, and no Job with that id is live.
    DriverJobFailed {
        /// The failed driver Job (the first by name when several failed).
        job: String,
    },
    /// A driver Job with the pod's job id has shown failure for longer than
    /// its pods' termination grace plus the margin without finishing (a
    /// lost node): it is judged dead.
    DriverJobStuck {
        /// The Job judged dead (the first by name).
        job: String,
    },
    /// No owned Job carries the pod's job id, the backend does not list the
    /// job as driven, and the pod is older than the grace.
    Orphan {
        /// How old the pod is.
        age: SignedDuration,
    },
    /// Every Job with the pod's job id is a driver Job that succeeded: the
    /// driver exited, so nothing uses the sandbox, but its own cleanup did
    /// not land. Swept by the orphan sweep's rules (the backend does not
    /// drive the job, the pod is older than the grace).
    Leftover {
        /// The succeeded driver Job (the first by name).
        job: String,
        /// How old the pod is.
        age: SignedDuration,
    },
}

impl DeleteReason {
    /// The kind of reap, for metrics.
    pub fn kind(&self) -> ReapKind {
        match self {
            DeleteReason::DriverJobFailed { .. } | DeleteReason::DriverJobStuck { .. } => {
                ReapKind::DriverFailed
            }
            DeleteReason::Orphan { .. } | DeleteReason::Leftover { .. } => ReapKind::Orphan,
        }
    }
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeleteReason::DriverJobFailed { job } => write!(f, "driver Job {job} failed"),
            DeleteReason::DriverJobStuck { job } => write!(
                f,
                "driver Job {job} judged dead: failing past its termination grace and margin"
            ),
            DeleteReason::Orphan { age } => write!(
                f,
                "orphan: no owned Job has its job id, the backend does not drive it, {}s old",
                age.as_secs()
            ),
            DeleteReason::Leftover { job, age } => write!(
                f,
                "leftover: driver Job {job} succeeded without deleting it, the backend does not drive it, {}s old",
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
    /// It carries the job id of a dead driver whose sandboxes are due, but
    /// another managed-by value than the driver's (and not the dispatcher's:
    /// it is no driver pod): possibly a sandbox of a driver that labels with
    /// a value of its own. Not ours to match: kept, and warned about once.
    ManagedByMismatch {
        /// Its managed-by value, if any.
        managed_by: Option<String>,
    },
    /// It is a Job's own pod (the driver's, whose logs the death report reads).
    JobPod,
    /// It has no valid `tcab.dev/job-id` label, so it maps to no backend job.
    NoJobId,
    /// It is already being deleted.
    Terminating,
    /// A Job with its job id is live (a newer claim of the same backend job,
    /// or the driver itself).
    LiveJob {
        /// The live Job (the first by name).
        job: String,
    },
    /// A driver Job with its job id failed, but that Job's pods are still
    /// terminating (a cluster before 1.31 marks `Failed` early): the driver
    /// may still be handing over. Reaped once they finish, or once the Job
    /// is judged dead.
    PodsTerminating {
        /// The failed Job (the first by name).
        job: String,
        /// Its `status.terminating`.
        terminating: i32,
    },
    /// Jobs with its job id exist, but none failed and none is live, and
    /// not every one is a succeeded driver (a failed publisher: never a
    /// sandbox's owner).
    NoFailedDriverJob {
        /// One such Job (the first by name).
        job: String,
        /// That Job's phase.
        phase: JobPhase,
    },
    /// Every Job with its job id is a driver Job that succeeded. A driver
    /// normally deletes its own sandbox before it exits; one it left is
    /// swept as a [`DeleteReason::Leftover`] under the orphan sweep's rules.
    DriverSucceeded {
        /// One such Job (the first by name).
        job: String,
    },
    /// No owned Job has its job id, and the orphan sweep is off.
    SweepDisabled,
    /// No owned Job has its job id, but the orphan sweep is not due this
    /// tick (the backend was not asked).
    SweepNotDue,
    /// No owned Job has its job id, but the backend's list of driven jobs
    /// could not be read this round.
    DrivenUnknown,
    /// No owned Job has its job id, but the backend lists the job as driven
    /// (its Job may be too new for the view, or in another namespace).
    DrivenByBackend,
    /// No owned Job has its job id, but its age is unknown.
    AgeUnknown,
    /// No owned Job has its job id, but it is younger than the grace.
    TooYoung {
        /// How old the pod is.
        age: SignedDuration,
    },
    /// A fresh read of the owned Jobs carrying its job id, made just before
    /// the delete, found a Job the plan did not account for.
    JobFound {
        /// That Job.
        job: String,
    },
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::NotDriverManaged => f.write_str("not managed by the driver"),
            KeepReason::ManagedByMismatch { managed_by } => write!(
                f,
                "a dead driver's job id, but managed by {:?}, not the expected driver value",
                managed_by.as_deref().unwrap_or("")
            ),
            KeepReason::JobPod => f.write_str("a Job's own pod"),
            KeepReason::NoJobId => f.write_str("no valid job-id label"),
            KeepReason::Terminating => f.write_str("already terminating"),
            KeepReason::LiveJob { job } => write!(f, "Job {job} with its job id is live"),
            KeepReason::PodsTerminating { job, terminating } => write!(
                f,
                "driver Job {job} failed but {terminating} of its pods are still terminating"
            ),
            KeepReason::NoFailedDriverJob { job, phase } => {
                write!(
                    f,
                    "no failed driver Job for its job id ({job} is {phase:?})"
                )
            }
            KeepReason::DriverSucceeded { job } => {
                write!(f, "driver Job {job} with its job id succeeded")
            }
            KeepReason::SweepDisabled => f.write_str("orphan, but the orphan sweep is off"),
            KeepReason::SweepNotDue => f.write_str("orphan candidate; the sweep is not due"),
            KeepReason::DrivenUnknown => {
                f.write_str("orphan candidate, but the backend's driven jobs are unknown")
            }
            KeepReason::DrivenByBackend => {
                f.write_str("no owned Job has its job id, but the backend drives it")
            }
            KeepReason::AgeUnknown => f.write_str("orphan of unknown age"),
            KeepReason::TooYoung { age } => {
                write!(f, "orphan only {}s old, inside the grace", age.as_secs())
            }
            KeepReason::JobFound { job } => {
                write!(f, "a fresh read found Job {job} with its job id")
            }
        }
    }
}

/// What the backend said about the jobs it drives, for the orphan sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driven<'a> {
    /// The sweep is not due this tick: the backend was not asked, and no
    /// orphan is swept.
    NotAsked,
    /// The backend's active list could not be read: no orphan is swept.
    Unknown,
    /// The job ids the backend lists as driven (`GET /jobs/active`).
    Known(&'a BTreeSet<String>),
}

/// One snapshot the plan decides over (`J`: a summary, or a shared one).
#[derive(Debug)]
pub struct Snapshot<'a, J = JobSummary> {
    /// The owned Jobs, from a view that is current.
    pub jobs: &'a [J],
    /// What the sandbox LIST returned (selected on the driver's managed-by
    /// value, but the plan checks every rule itself).
    pub pods: &'a [PodSummary],
    /// The time pod ages are measured against.
    pub now: Timestamp,
    /// Keys ([`job_key`]) of the driver Jobs judged dead because they
    /// cannot finish failing (see [`crate::memory::ReapMemory::observe`]).
    pub dead: &'a BTreeSet<String>,
    /// What the backend drives (orphan sweep).
    pub driven: Driven<'a>,
}

impl<J> Clone for Snapshot<'_, J> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<J> Copy for Snapshot<'_, J> {}

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

/// What the owned Jobs say about the sandboxes of one job id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdVerdict {
    /// Reap them.
    Reap {
        /// Why (a driver Job that failed, or one judged dead).
        reason: DeleteReason,
        /// Keys of every dead driver Job with the id: the reap completes
        /// all of them at once, since sandboxes carry the job id, not the claim.
        jobs: BTreeSet<String>,
    },
    /// Keep them.
    Hold(KeepReason),
}

/// Where one owned Job stands, for the reap of its job id's sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Live (and not judged dead): holds the reap.
    Live,
    /// A failed driver Job whose pods are still terminating: holds the reap.
    Terminating(i32),
    /// A driver Job that failed with its pods finished.
    Failed,
    /// A driver Job judged dead without finishing.
    Stuck,
    /// A driver Job that succeeded: its sandboxes are leftovers, if any.
    Succeeded,
    /// Anything else (a succeeded or failed publisher): reaps nothing.
    Other(JobPhase),
}

fn standing(job: &JobSummary, dead: &BTreeSet<String>) -> Standing {
    let driver = job.lane == Lane::Run;
    // Judged dead only while it still shows what it was judged on.
    let judged_dead = driver
        && dead.contains(job_key(job))
        && (job.phase == JobPhase::Failed || job.shows_failure());
    match job.phase {
        JobPhase::Live if judged_dead => Standing::Stuck,
        JobPhase::Live => Standing::Live,
        JobPhase::Failed if driver => {
            if job.terminating_pods <= 0 {
                Standing::Failed
            } else if judged_dead {
                Standing::Stuck
            } else {
                Standing::Terminating(job.terminating_pods)
            }
        }
        JobPhase::Succeeded if driver => Standing::Succeeded,
        phase => Standing::Other(phase),
    }
}

/// The first Job by name of each standing, for one job id.
#[derive(Debug, Default)]
struct JobsForId<'a> {
    live: Option<&'a JobSummary>,
    terminating: Option<(&'a JobSummary, i32)>,
    dead: Option<(&'a JobSummary, bool)>,
    dead_keys: BTreeSet<String>,
    succeeded: Option<(&'a JobSummary, ())>,
    other: Option<(&'a JobSummary, JobPhase)>,
}

fn first<'a, T>(slot: &mut Option<(&'a JobSummary, T)>, job: &'a JobSummary, extra: T) {
    if slot
        .as_ref()
        .is_none_or(|(current, _)| job.name < current.name)
    {
        *slot = Some((job, extra));
    }
}

/// Judges every job id the owned Jobs carry. A live Job (not judged dead)
/// holds the id's sandboxes; then a failed driver Job whose pods still
/// terminate; then a dead driver Job reaps them; any other Job keeps them,
/// and when all of them are succeeded drivers the verdict says so (their
/// sandboxes are leftovers for the sweep).
/// Jobs whose job id is not a valid backend id are left out.
pub fn judge_ids(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
) -> BTreeMap<String, IdVerdict> {
    judge_ids_where(jobs, dead, |_| true)
}

/// The verdicts a tick needs, judged once from its view: those of every
/// job id with a driver Job that failed or was judged dead (the only ids a
/// verdict can reap), and of the ids `also` names (the listed sandboxes'
/// ids, the ids warned about). Each verdict is [`judge_ids`]'s; the other
/// ids, most of them at scale, are not judged at all.
pub fn tick_verdicts(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
    also: &BTreeSet<&str>,
) -> BTreeMap<String, IdVerdict> {
    let reapable: BTreeSet<&str> = summaries(jobs)
        .filter(|job| matches!(standing(job, dead), Standing::Failed | Standing::Stuck))
        .filter_map(|job| job.job_id.as_deref())
        .collect();
    judge_ids_where(jobs, dead, |id| reapable.contains(id) || also.contains(id))
}

/// [`judge_ids`] for the ids `wanted` accepts only.
fn judge_ids_where(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
    wanted: impl Fn(&str) -> bool,
) -> BTreeMap<String, IdVerdict> {
    let mut index: BTreeMap<&str, JobsForId> = BTreeMap::new();
    for job in summaries(jobs) {
        let Some(id) = job
            .job_id
            .as_deref()
            .filter(|id| is_job_id(id) && wanted(id))
        else {
            continue;
        };
        let entry = index.entry(id).or_default();
        match standing(job, dead) {
            Standing::Live => {
                if entry.live.is_none_or(|current| job.name < current.name) {
                    entry.live = Some(job);
                }
            }
            Standing::Terminating(n) => first(&mut entry.terminating, job, n),
            Standing::Failed => {
                entry.dead_keys.insert(job_key(job).to_owned());
                first(&mut entry.dead, job, false);
            }
            Standing::Stuck => {
                entry.dead_keys.insert(job_key(job).to_owned());
                first(&mut entry.dead, job, true);
            }
            Standing::Succeeded => first(&mut entry.succeeded, job, ()),
            Standing::Other(phase) => first(&mut entry.other, job, phase),
        }
    }
    index
        .into_iter()
        .map(|(id, e)| {
            let verdict = if let Some(job) = e.live {
                IdVerdict::Hold(KeepReason::LiveJob {
                    job: job.name.to_string(),
                })
            } else if let Some((job, terminating)) = e.terminating {
                IdVerdict::Hold(KeepReason::PodsTerminating {
                    job: job.name.to_string(),
                    terminating,
                })
            } else if let Some((job, stuck)) = e.dead {
                let job = job.name.to_string();
                IdVerdict::Reap {
                    reason: if stuck {
                        DeleteReason::DriverJobStuck { job }
                    } else {
                        DeleteReason::DriverJobFailed { job }
                    },
                    jobs: e.dead_keys,
                }
            } else {
                match (e.other, e.succeeded) {
                    (Some((job, phase)), _) => IdVerdict::Hold(KeepReason::NoFailedDriverJob {
                        job: job.name.to_string(),
                        phase,
                    }),
                    (None, Some((job, ()))) => IdVerdict::Hold(KeepReason::DriverSucceeded {
                        job: job.name.to_string(),
                    }),
                    // An entry always holds a Job; were it ever empty, keep.
                    (None, None) => IdVerdict::Hold(KeepReason::NoJobId),
                }
            };
            (id.to_owned(), verdict)
        })
        .collect()
}

/// The most job ids one reap LIST names in its selector; more are listed
/// by the label's presence, which keeps the request line short.
pub const MAX_SELECTED_IDS: usize = 100;

/// The label selector of a reap's LIST: the job-id label alone, for the ids
/// whose sandboxes are due (`tcab.dev/job-id in (a,b)`), so the sandboxes of
/// another managed-by value show up too and can be told apart (see
/// [`KeepReason::ManagedByMismatch`]); the label's presence for more than
/// [`MAX_SELECTED_IDS`] ids.
pub fn reap_selector(ids: &BTreeSet<String>) -> String {
    if ids.is_empty() || ids.len() > MAX_SELECTED_IDS {
        return names::JOB_ID.to_owned();
    }
    let joined: Vec<&str> = ids.iter().map(String::as_str).collect();
    format!("{} in ({})", names::JOB_ID, joined.join(","))
}

/// Whether the pods listed for `due_reap` (and, with `sweep`, the sweep's
/// LIST) show every sandbox of `job_id`: the sweep lists every pod of the
/// driver's managed-by value and the label's presence every pod with a job
/// id, but a reap's `in` selector only the ids it names. A Job that failed
/// after the ids were chosen is judged by the plan but was not listed: its
/// reap is not complete until a LIST names it.
pub fn listed_all_of(due_reap: &BTreeSet<String>, sweep: bool, job_id: &str) -> bool {
    sweep || due_reap.len() > MAX_SELECTED_IDS || due_reap.contains(job_id)
}

/// The job ids whose due sandboxes include pods of another managed-by value
/// (kept by the plan), each with those pods' `namespace/name`, sorted.
pub fn mismatches(plan: &ReapPlan) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kept in &plan.keep {
        if let (KeepReason::ManagedByMismatch { .. }, Some(id)) = (&kept.reason, &kept.pod.job_id) {
            out.entry(id.clone()).or_default().push(kept.pod.key());
        }
    }
    out
}

/// Decides which pods to delete.
///
/// A pod is deleted only when it carries the driver's managed-by value, is
/// no Job's own pod, carries a valid job id, is not already terminating,
/// and either its id's verdict ([`judge_ids`]) is to reap, or (orphan
/// sweep) no owned Job carries its id (or only succeeded driver Jobs do),
/// the backend's driven list was read and lacks it, and it is at least the
/// grace old.
pub fn plan<J: Borrow<JobSummary>>(
    snapshot: &Snapshot<'_, J>,
    settings: &SweepSettings,
) -> ReapPlan {
    let ids: BTreeSet<&str> = snapshot
        .pods
        .iter()
        .filter_map(|p| p.job_id.as_deref())
        .collect();
    let verdicts = tick_verdicts(snapshot.jobs, snapshot.dead, &ids);
    plan_with(snapshot, &verdicts, settings)
}

/// [`plan`] with the verdicts of the snapshot already judged
/// ([`tick_verdicts`], covering at least every listed pod's id), so a tick
/// judges its view once.
pub fn plan_with<J: Borrow<JobSummary>>(
    snapshot: &Snapshot<'_, J>,
    verdicts: &BTreeMap<String, IdVerdict>,
    settings: &SweepSettings,
) -> ReapPlan {
    let grace = SignedDuration::try_from(settings.orphan_grace).unwrap_or(SignedDuration::MAX);

    let mut pods: Vec<&PodSummary> = snapshot.pods.iter().collect();
    pods.sort();
    pods.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name);

    let mut out = ReapPlan::default();
    for pod in pods {
        match decide(pod, verdicts, snapshot, grace, settings) {
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

fn decide<J>(
    pod: &PodSummary,
    verdicts: &BTreeMap<String, IdVerdict>,
    snapshot: &Snapshot<'_, J>,
    grace: SignedDuration,
    settings: &SweepSettings,
) -> Result<(String, DeleteReason), KeepReason> {
    if pod.managed_by.as_deref() != Some(settings.driver_managed_by.as_str()) {
        let dispatchers =
            pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str());
        let dead_drivers_id = pod
            .job_id
            .as_deref()
            .is_some_and(|id| matches!(verdicts.get(id), Some(IdVerdict::Reap { .. })));
        if dead_drivers_id && !pod.job_owned && !dispatchers {
            return Err(KeepReason::ManagedByMismatch {
                managed_by: pod.managed_by.clone(),
            });
        }
        return Err(KeepReason::NotDriverManaged);
    }
    if pod.job_owned || pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str()) {
        return Err(KeepReason::JobPod);
    }
    let Some(job_id) = pod.job_id.as_deref().filter(|id| is_job_id(id)) else {
        return Err(KeepReason::NoJobId);
    };
    if pod.terminating {
        return Err(KeepReason::Terminating);
    }
    let succeeded = match verdicts.get(job_id) {
        Some(IdVerdict::Reap { reason, .. }) => return Ok((job_id.to_owned(), reason.clone())),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { job })) => Some(job),
        Some(IdVerdict::Hold(reason)) => return Err(reason.clone()),
        None => None,
    };
    // The orphan sweep's gates, for an orphan and a leftover alike.
    let held = || match succeeded {
        Some(job) => KeepReason::DriverSucceeded { job: job.clone() },
        None => KeepReason::SweepDisabled,
    };
    if !settings.orphan_sweep {
        return Err(held());
    }
    match snapshot.driven {
        Driven::NotAsked if succeeded.is_some() => return Err(held()),
        Driven::NotAsked => return Err(KeepReason::SweepNotDue),
        Driven::Unknown => return Err(KeepReason::DrivenUnknown),
        Driven::Known(ids) if ids.contains(job_id) => {
            return Err(KeepReason::DrivenByBackend);
        }
        Driven::Known(_) => {}
    }
    let Some(created) = pod.created_at else {
        return Err(KeepReason::AgeUnknown);
    };
    let age = snapshot.now.duration_since(created);
    if age < grace {
        return Err(KeepReason::TooYoung { age });
    }
    let reason = match succeeded {
        Some(job) => DeleteReason::Leftover {
            job: job.clone(),
            age,
        },
        None => DeleteReason::Orphan { age },
    };
    Ok((job_id.to_owned(), reason))
}

/// Whether a fresh read of the owned Jobs carrying `job_id` (made after
/// the plan, just before the deletes) still allows deleting that id's
/// sandboxes for `reason`. An orphan needs no Job with the id at all; a
/// leftover needs every fresh Job with the id to be a succeeded driver (or
/// none left); a driver reap needs the fresh Jobs to judge the id a reap
/// too (or no Job with the id to be left). Anything else is a doubt: keep,
/// and let the next tick plan again.
pub fn confirm(
    job_id: &str,
    reason: &DeleteReason,
    fresh: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
) -> Result<(), KeepReason> {
    let mut same_id: Vec<&JobSummary> = summaries(fresh)
        .filter(|j| j.job_id.as_deref() == Some(job_id))
        .collect();
    same_id.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first_job) = same_id.first() else {
        return Ok(());
    };
    if matches!(reason, DeleteReason::Orphan { .. }) {
        return Err(KeepReason::JobFound {
            job: first_job.name.to_string(),
        });
    }
    let leftover = matches!(reason, DeleteReason::Leftover { .. });
    let first_name = first_job.name.to_string();
    match judge_ids(&same_id, dead).remove(job_id) {
        Some(IdVerdict::Reap { .. }) if !leftover => Ok(()),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { .. })) if leftover => Ok(()),
        Some(IdVerdict::Reap { .. }) => Err(KeepReason::JobFound { job: first_name }),
        Some(IdVerdict::Hold(keep)) => Err(keep),
        // Only a malformed id lands here; the plan never deletes for one.
        None => Err(KeepReason::NoJobId),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use tcab_shared::job_cache::JobCondition;

    const DRIVER: &str = "tcab-driver";
    const DISPATCHER: &str = "tcab-dispatcher";

    fn settings() -> SweepSettings {
        SweepSettings {
            driver_managed_by: DRIVER.into(),
            dispatcher_managed_by: DISPATCHER.into(),
            orphan_sweep: true,
            orphan_grace: Duration::from_secs(600),
            orphan_sweep_interval: Duration::from_secs(300),
            terminating_margin: Duration::from_secs(60),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    fn condition(reason: &str) -> Box<JobCondition> {
        Box::new(JobCondition {
            reason: reason.into(),
            message: String::new(),
        })
    }

    fn job(name: &str, id: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        let failed = phase == JobPhase::Failed;
        JobSummary {
            name: name.into(),
            uid: format!("uid-{name}").into(),
            lane,
            job_id: Some(id.into()),
            claim: Some("c".into()),
            phase,
            failed_pods: i32::from(failed),
            active_pods: i32::from(phase == JobPhase::Live),
            ready_pods: 0,
            terminating_pods: 0,
            failure_target: failed.then(|| condition("PodFailurePolicy")),
            failed: failed.then(|| condition("PodFailurePolicy")),
            termination_grace_seconds: Some(120),
            created_at: Some(now() - SignedDuration::from_secs(3600)),
            deleting: false,
            gone: false,
            orphan_pod: None,
        }
    }

    /// A live driver Job bound to fail whose pod cannot finish terminating.
    fn failing(name: &str, id: &str) -> JobSummary {
        JobSummary {
            active_pods: 0,
            terminating_pods: 1,
            failure_target: Some(condition("PodFailurePolicy")),
            ..job(name, id, Lane::Run, JobPhase::Live)
        }
    }

    /// A driver Job marked Failed while its pod still terminates (before 1.31).
    fn failed_terminating(name: &str, id: &str) -> JobSummary {
        JobSummary {
            terminating_pods: 1,
            ..job(name, id, Lane::Run, JobPhase::Failed)
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

    fn no_dead() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn dead_of(jobs: &[&JobSummary]) -> BTreeSet<String> {
        jobs.iter().map(|j| job_key(j).to_owned()).collect()
    }

    /// A plan with the backend's driven list read and `driven` in it.
    fn plan_with(
        jobs: &[JobSummary],
        pods: &[PodSummary],
        dead: &BTreeSet<String>,
        driven: &BTreeSet<String>,
        settings: &SweepSettings,
    ) -> ReapPlan {
        plan(
            &Snapshot {
                jobs,
                pods,
                now: now(),
                dead,
                driven: Driven::Known(driven),
            },
            settings,
        )
    }

    fn simple(jobs: &[JobSummary], pods: &[PodSummary]) -> ReapPlan {
        plan_with(jobs, pods, &no_dead(), &BTreeSet::new(), &settings())
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
        let p = simple(&jobs, &pods);
        assert_eq!(deleted(&p), ["sb-a", "sb-a-2"]);
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::DriverJobFailed {
                job: "tcab-driver-a-1".into()
            }
        );
        assert_eq!(p.delete[0].reason.kind().as_str(), "driver_failed");
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
        let p = simple(&jobs, &[sandbox("sb-a", "a", 5)]);
        assert!(p.delete.is_empty());
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            }
        );
    }

    #[test]
    fn a_failed_publisher_reaps_nothing_and_a_succeeded_driver_leaves_only_to_the_sweep() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Succeeded),
            job("tcab-publisher-p-1", "p", Lane::Publish, JobPhase::Failed),
            job("tcab-driver-m-1", "m", Lane::Run, JobPhase::Succeeded),
            job(
                "tcab-publisher-m-1",
                "m",
                Lane::Publish,
                JobPhase::Succeeded,
            ),
        ];
        let pods = [
            sandbox("sb-a", "a", 5000),
            sandbox("sb-a-young", "a", 5),
            sandbox("sb-p", "p", 5000),
            sandbox("sb-m", "m", 5000),
        ];
        // The sweep is due and the backend drives none of them: the old
        // sandbox a succeeded driver left is swept, the young one waits.
        let p = simple(&jobs, &pods);
        assert_eq!(deleted(&p), ["sb-a"]);
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::Leftover {
                job: "tcab-driver-a-1".into(),
                age: SignedDuration::from_secs(5000)
            }
        );
        assert_eq!(p.delete[0].reason.kind().as_str(), "orphan");
        assert!(matches!(
            kept_reason(&p, "sb-a-young"),
            KeepReason::TooYoung { .. }
        ));
        assert!(matches!(
            kept_reason(&p, "sb-p"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Failed,
                ..
            }
        ));
        // Not every Job of the id is a succeeded driver: kept.
        assert!(matches!(
            kept_reason(&p, "sb-m"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Succeeded,
                ..
            }
        ));

        let held = KeepReason::DriverSucceeded {
            job: "tcab-driver-a-1".into(),
        };
        // Outside a sweep, with the sweep off, or while the backend drives it: kept.
        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        let p = plan_with(&jobs, &pods, &no_dead(), &BTreeSet::new(), &off);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "sb-a"), &held);
        let not_due = plan(
            &Snapshot {
                jobs: &jobs,
                pods: &pods,
                now: now(),
                dead: &no_dead(),
                driven: Driven::NotAsked,
            },
            &settings(),
        );
        assert!(not_due.delete.is_empty());
        assert_eq!(kept_reason(&not_due, "sb-a"), &held);
        let driven: BTreeSet<String> = ["a".to_owned()].into();
        let p = plan_with(&jobs, &pods, &no_dead(), &driven, &settings());
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "sb-a"), &KeepReason::DrivenByBackend);
    }

    #[test]
    fn a_leftover_is_confirmed_only_while_every_job_of_its_id_is_a_succeeded_driver() {
        let done = job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Succeeded);
        let leftover = DeleteReason::Leftover {
            job: done.name.to_string(),
            age: SignedDuration::from_secs(700),
        };
        let none = no_dead();
        assert_eq!(
            confirm("a", &leftover, std::slice::from_ref(&done), &none),
            Ok(())
        );
        assert_eq!(confirm("a", &leftover, &[] as &[JobSummary], &none), Ok(()));
        // A newer claim of the same job went live meanwhile.
        let newer = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &leftover, &[done.clone(), newer], &none),
            Err(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            })
        );
        // A driver of the id failed meanwhile: its own reap comes next tick.
        let failed = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Failed);
        assert_eq!(
            confirm("a", &leftover, &[done, failed], &none),
            Err(KeepReason::JobFound {
                job: "tcab-driver-a-1".into()
            })
        );
    }

    #[test]
    fn a_failed_driver_whose_pods_still_terminate_holds_until_they_finish_or_it_is_judged_dead() {
        let held = [failed_terminating("tcab-driver-a-1", "a")];
        let pods = [sandbox("sb-a", "a", 5000)];
        let p = simple(&held, &pods);
        assert!(p.delete.is_empty());
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::PodsTerminating {
                job: "tcab-driver-a-1".into(),
                terminating: 1
            }
        );
        // Its pods finished: an ordinary failed driver.
        let finished = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        assert_eq!(deleted(&simple(&finished, &pods)), ["sb-a"]);
        // Still terminating, but judged dead (a lost node): reaped as stuck.
        let dead = dead_of(&[&held[0]]);
        let p = plan_with(&held, &pods, &dead, &BTreeSet::new(), &settings());
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::DriverJobStuck {
                job: "tcab-driver-a-1".into()
            }
        );
        // An older failed claim does not override a newer one still terminating.
        let both = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            failed_terminating("tcab-driver-a-2", "a"),
        ];
        assert!(simple(&both, &pods).delete.is_empty());
    }

    #[test]
    fn a_driver_job_judged_stuck_failing_is_reaped_like_a_failed_one() {
        let stuck = failing("tcab-driver-a-1", "a");
        let jobs = [stuck.clone()];
        let pods = [sandbox("sb-a", "a", 5)];
        // Not judged yet: its own live Job holds the sandbox.
        let p = simple(&jobs, &pods);
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::LiveJob {
                job: "tcab-driver-a-1".into()
            }
        );
        let dead = dead_of(&[&stuck]);
        let p = plan_with(&jobs, &pods, &dead, &BTreeSet::new(), &settings());
        assert_eq!(deleted(&p), ["sb-a"]);
        assert_eq!(p.delete[0].reason.kind(), ReapKind::DriverFailed);
        // Another live claim of the same id still holds it.
        let with_live = [
            stuck.clone(),
            job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live),
        ];
        let p = plan_with(&with_live, &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
        // A key in the dead set whose Job no longer shows failure is not dead.
        let healthy = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Live)];
        let p = plan_with(&healthy, &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
        // A publisher is never judged into a reap.
        let publisher = JobSummary {
            lane: Lane::Publish,
            ..failing("tcab-publisher-a-1", "a")
        };
        let dead = dead_of(&[&publisher]);
        let p = plan_with(&[publisher], &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
    }

    #[test]
    fn orphans_need_no_job_no_backend_drive_and_the_grace() {
        let pods = [
            sandbox("old", "gone", 601),
            sandbox("edge", "gone", 600),
            sandbox("young", "gone", 599),
            sandbox("driven", "live-elsewhere", 5000),
            PodSummary {
                created_at: None,
                ..sandbox("ageless", "gone", 0)
            },
        ];
        let driven: BTreeSet<String> = ["live-elsewhere".to_owned()].into();
        let p = plan_with(&[], &pods, &no_dead(), &driven, &settings());
        assert_eq!(deleted(&p), ["edge", "old"]);
        assert_eq!(
            p.delete[1].reason,
            DeleteReason::Orphan {
                age: SignedDuration::from_secs(601)
            }
        );
        assert_eq!(p.delete[1].reason.kind().as_str(), "orphan");
        assert!(matches!(
            kept_reason(&p, "young"),
            KeepReason::TooYoung { .. }
        ));
        assert_eq!(kept_reason(&p, "ageless"), &KeepReason::AgeUnknown);
        assert_eq!(kept_reason(&p, "driven"), &KeepReason::DrivenByBackend);

        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        let p = plan_with(&[], &pods, &no_dead(), &driven, &off);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "old"), &KeepReason::SweepDisabled);

        for (driven, reason) in [
            (Driven::NotAsked, KeepReason::SweepNotDue),
            (Driven::Unknown, KeepReason::DrivenUnknown),
        ] {
            let p = plan(
                &Snapshot {
                    jobs: &[] as &[JobSummary],
                    pods: &pods,
                    now: now(),
                    dead: &no_dead(),
                    driven,
                },
                &settings(),
            );
            assert!(p.delete.is_empty(), "{driven:?}");
            assert_eq!(kept_reason(&p, "old"), &reason);
        }
    }

    #[test]
    fn a_grace_of_zero_still_spares_what_the_backend_drives() {
        let zero = SweepSettings {
            orphan_grace: Duration::ZERO,
            ..settings()
        };
        let pods = [sandbox("new", "just-claimed", 0)];
        let driven: BTreeSet<String> = ["just-claimed".to_owned()].into();
        let p = plan_with(&[], &pods, &no_dead(), &driven, &zero);
        assert_eq!(kept_reason(&p, "new"), &KeepReason::DrivenByBackend);
        let p = plan_with(&[], &pods, &no_dead(), &BTreeSet::new(), &zero);
        assert_eq!(deleted(&p), ["new"]);
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
            sandbox("bad-id", "not a label value", 5000),
            sandbox("empty-id", "", 5000),
            PodSummary {
                job_owned: true,
                ..sandbox("job-owned", "a", 5000)
            },
            PodSummary {
                terminating: true,
                ..sandbox("terminating", "a", 5000)
            },
        ];
        let p = simple(&jobs, &pods);
        assert!(p.delete.is_empty(), "{p:?}");
        // A dead driver's job id on a pod of another (or no) managed-by value:
        // kept, and told apart so the reaper can warn about it.
        assert_eq!(
            kept_reason(&p, "unlabelled"),
            &KeepReason::ManagedByMismatch { managed_by: None }
        );
        assert_eq!(
            kept_reason(&p, "foreign"),
            &KeepReason::ManagedByMismatch {
                managed_by: Some("someone-else".into())
            }
        );
        assert_eq!(kept_reason(&p, "no-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "bad-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "empty-id"), &KeepReason::NoJobId);
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
        let p = plan_with(&jobs, &pods, &no_dead(), &BTreeSet::new(), &same);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "tcab-driver-a-1-xyz"), &KeepReason::JobPod);
    }

    #[test]
    fn verdicts_name_every_dead_driver_job_of_an_id() {
        let stuck = failing("tcab-driver-a-2", "a");
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            stuck.clone(),
            job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Succeeded),
            JobSummary {
                job_id: Some(String::new().into()),
                ..job("tcab-driver-x-1", "x", Lane::Run, JobPhase::Failed)
            },
        ];
        let verdicts = judge_ids(&jobs, &dead_of(&[&stuck]));
        assert_eq!(
            verdicts.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "a malformed id is left out"
        );
        assert_eq!(
            verdicts["a"],
            IdVerdict::Reap {
                reason: DeleteReason::DriverJobFailed {
                    job: "tcab-driver-a-1".into()
                },
                jobs: [
                    "uid-tcab-driver-a-1".to_owned(),
                    "uid-tcab-driver-a-2".to_owned()
                ]
                .into(),
            }
        );
        assert_eq!(
            verdicts["b"],
            IdVerdict::Hold(KeepReason::DriverSucceeded {
                job: "tcab-driver-b-1".into()
            })
        );
    }

    #[test]
    fn a_fresh_read_confirms_or_stops_a_delete() {
        let failed = job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed);
        let driver_reason = DeleteReason::DriverJobFailed {
            job: failed.name.to_string(),
        };
        let orphan = DeleteReason::Orphan {
            age: SignedDuration::from_secs(700),
        };
        let none = no_dead();
        // The read agrees with the plan.
        assert_eq!(
            confirm("a", &driver_reason, std::slice::from_ref(&failed), &none),
            Ok(())
        );
        // The failed Job is gone meanwhile, and nothing else carries the id.
        assert_eq!(
            confirm("a", &driver_reason, &[] as &[JobSummary], &none),
            Ok(())
        );
        // A live Job of the same id the view had not shown yet.
        let live = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), live.clone()], &none),
            Err(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            })
        );
        // Its pods terminate again (a fresher status than the view's).
        let terminating = failed_terminating("tcab-driver-a-1", "a");
        assert!(matches!(
            confirm("a", &driver_reason, &[terminating], &none),
            Err(KeepReason::PodsTerminating { .. })
        ));
        // A stuck Job judged dead confirms while it still shows failure.
        let stuck = failing("tcab-driver-a-1", "a");
        let dead = dead_of(&[&stuck]);
        let stuck_reason = DeleteReason::DriverJobStuck {
            job: stuck.name.to_string(),
        };
        assert_eq!(
            confirm("a", &stuck_reason, std::slice::from_ref(&stuck), &dead),
            Ok(())
        );
        // Jobs of other ids in the answer are ignored.
        let other = job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), other.clone()], &none),
            Ok(())
        );
        // An orphan needs no Job with its id at all.
        assert_eq!(confirm("gone", &orphan, &[other], &none), Ok(()));
        assert_eq!(
            confirm("a", &orphan, &[failed], &none),
            Err(KeepReason::JobFound {
                job: "tcab-driver-a-1".into()
            })
        );
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

    /// A Job and whether it is in the dead set.
    fn arb_job() -> impl Strategy<Value = (JobSummary, bool)> {
        (
            0usize..IDS.len(),
            0u8..4,
            prop::sample::select(vec![JobPhase::Live, JobPhase::Succeeded, JobPhase::Failed]),
            any::<bool>(),
            0i32..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(id, claim, phase, publish, terminating, target, dead)| {
                let lane = if publish { Lane::Publish } else { Lane::Run };
                let name = format!("{}{}-{claim}", lane.name_prefix(), IDS[id]);
                let mut j = job(&name, IDS[id], lane, phase);
                j.terminating_pods = terminating;
                if phase == JobPhase::Live {
                    j.failure_target = target.then(|| condition("PodFailurePolicy"));
                }
                (j, dead)
            })
    }

    /// Jobs with distinct names, as a view holds them.
    fn arb_jobs() -> impl Strategy<Value = Vec<(JobSummary, bool)>> {
        prop::collection::vec(arb_job(), 0..8).prop_map(|jobs| {
            let mut names = BTreeSet::new();
            jobs.into_iter()
                .filter(|(j, _)| names.insert(j.name.clone()))
                .collect()
        })
    }

    fn arb_pod() -> impl Strategy<Value = PodSummary> {
        (
            0usize..8,
            prop::option::of(prop::sample::select(vec![DRIVER, DISPATCHER, "other"])),
            prop::option::of(prop::sample::select(vec!["a", "b", "c", "d", "e", "f", ""])),
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

    /// None = not asked, Some(None) = unknown, Some(Some(ids)) = known.
    fn arb_driven() -> impl Strategy<Value = Option<Option<BTreeSet<String>>>> {
        prop::option::of(prop::option::of(prop::collection::btree_set(
            prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]).prop_map(String::from),
            0..4,
        )))
    }

    fn split(jobs: Vec<(JobSummary, bool)>) -> (Vec<JobSummary>, BTreeSet<String>) {
        let dead = jobs
            .iter()
            .filter(|(_, d)| *d)
            .map(|(j, _)| job_key(j).to_owned())
            .collect();
        (jobs.into_iter().map(|(j, _)| j).collect(), dead)
    }

    fn driven_of(d: &Option<Option<BTreeSet<String>>>) -> Driven<'_> {
        match d {
            None => Driven::NotAsked,
            Some(None) => Driven::Unknown,
            Some(Some(ids)) => Driven::Known(ids),
        }
    }

    /// Judged dead as the plan must read it: in the set, a driver, and
    /// still showing failure (or Failed).
    fn really_dead(j: &JobSummary, dead: &BTreeSet<String>) -> bool {
        j.lane == Lane::Run
            && dead.contains(job_key(j))
            && (j.phase == JobPhase::Failed || j.shows_failure())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x5eed_7ea9),
            ..ProptestConfig::default()
        })]

        #[test]
        fn never_deletes_what_it_must_not(
            jobs in arb_jobs(),
            mut pods in prop::collection::vec(arb_pod(), 0..10),
            driver_pods in prop::collection::vec(arb_driver_pod(), 0..3),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            pods.extend(driver_pods);
            let (jobs, dead) = split(jobs);
            let snapshot = Snapshot { jobs: &jobs, pods: &pods, now: now(), dead: &dead, driven: driven_of(&driven) };
            let p = plan(&snapshot, &settings);
            for d in &p.delete {
                // Only pods carrying the driver's managed-by value.
                prop_assert_eq!(d.pod.managed_by.as_deref(), Some(DRIVER));
                // Never a Job's own pod, never the driver's own pod.
                prop_assert!(!d.pod.job_owned && !d.pod.terminating);
                prop_assert!(d.pod.managed_by.as_deref() != Some(DISPATCHER));
                let id = d.pod.job_id.as_deref();
                prop_assert_eq!(id, Some(d.job_id.as_str()));
                let same_id: Vec<&JobSummary> = jobs.iter().filter(|j| j.job_id.as_deref() == id).collect();
                // Never a pod whose job id has a live Job not judged dead.
                prop_assert!(!same_id.iter().any(|j| j.is_live() && !really_dead(j, &dead)));
                // Never while a failed driver's pods still terminate, unless judged dead.
                prop_assert!(!same_id.iter().any(|j| j.lane == Lane::Run && j.phase == JobPhase::Failed
                    && j.terminating_pods > 0 && !really_dead(j, &dead)));
                match &d.reason {
                    DeleteReason::DriverJobFailed { job } => prop_assert!(same_id.iter().any(|j|
                        &j.name == job && j.phase == JobPhase::Failed && j.lane == Lane::Run
                        && j.terminating_pods == 0)),
                    DeleteReason::DriverJobStuck { job } => prop_assert!(same_id.iter().any(|j|
                        &j.name == job && really_dead(j, &dead))),
                    DeleteReason::Orphan { age } | DeleteReason::Leftover { age, .. } => {
                        prop_assert!(settings.orphan_sweep);
                        if let DeleteReason::Leftover { job, .. } = &d.reason {
                            // Every Job of the id is a driver that succeeded.
                            prop_assert!(same_id.iter().any(|j| &j.name == job));
                            prop_assert!(same_id.iter().all(|j| j.lane == Lane::Run
                                && j.phase == JobPhase::Succeeded));
                        } else {
                            prop_assert!(same_id.is_empty());
                        }
                        match snapshot.driven {
                            Driven::Known(ids) => prop_assert!(!ids.contains(&d.job_id)),
                            other => prop_assert!(false, "swept with {:?}", other),
                        }
                        prop_assert!(age.as_secs() >= settings.orphan_grace.as_secs() as i64);
                    }
                }
                // The confirming read of an unchanged cluster never stops a planned delete.
                prop_assert_eq!(confirm(&d.job_id, &d.reason, &jobs, &dead), Ok(()));
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
                arb_jobs(),
                prop::collection::vec(arb_pod(), 0..10),
            ).prop_flat_map(|(jobs, pods)| (
                Just(jobs.clone()),
                Just(pods.clone()),
                Just(jobs).prop_shuffle(),
                Just(pods).prop_shuffle(),
            )),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            let (jobs, dead) = split(jobs);
            let (jobs2, dead2) = split(jobs2);
            let base = plan(&Snapshot { jobs: &jobs, pods: &pods, now: now(), dead: &dead, driven: driven_of(&driven) }, &settings);
            let shuffled = plan(&Snapshot { jobs: &jobs2, pods: &pods2, now: now(), dead: &dead2, driven: driven_of(&driven) }, &settings);
            prop_assert_eq!(base, shuffled);
        }

        /// The verdicts a tick judges are `judge_ids`' own: every reap,
        /// and every id asked for that any Job carries; nothing else. A
        /// plan with them is the plan with every id judged.
        #[test]
        fn a_ticks_verdicts_are_judge_ids_own_for_the_ids_it_needs(
            jobs in arb_jobs(),
            pods in prop::collection::vec(arb_pod(), 0..10),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            let (jobs, dead) = split(jobs);
            let all = judge_ids(&jobs, &dead);
            let asked: BTreeSet<&str> = pods.iter().filter_map(|p| p.job_id.as_deref()).collect();
            let some = tick_verdicts(&jobs, &dead, &asked);
            for (id, verdict) in &some {
                prop_assert_eq!(all.get(id), Some(verdict));
            }
            for (id, verdict) in &all {
                if matches!(verdict, IdVerdict::Reap { .. }) || asked.contains(id.as_str()) {
                    prop_assert_eq!(some.get(id), Some(verdict));
                }
            }
            let snapshot = Snapshot { jobs: &jobs, pods: &pods, now: now(), dead: &dead, driven: driven_of(&driven) };
            prop_assert_eq!(plan(&snapshot, &settings), super::plan_with(&snapshot, &all, &settings));
        }
    }

    #[test]
    fn a_dead_drivers_pods_of_another_managed_by_are_kept_as_a_mismatch() {
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pod = |name: &str, id: &str, managed_by: Option<&str>, job_owned: bool| PodSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: None,
            managed_by: managed_by.map(str::to_owned),
            job_id: Some(id.into()),
            created_at: Some(now()),
            terminating: false,
            job_owned,
        };
        let pods = [
            pod("ours", "a", Some(DRIVER), false),
            pod("fixed", "a", Some("some-driver"), false),
            pod("bare", "a", None, false),
            pod("driver-pod", "a", Some(DISPATCHER), true),
            pod("other-id", "b", Some("some-driver"), false),
        ];
        let dead = BTreeSet::new();
        let out = plan(
            &Snapshot {
                jobs: &jobs,
                pods: &pods,
                now: now(),
                dead: &dead,
                driven: Driven::NotAsked,
            },
            &settings(),
        );
        assert_eq!(out.delete.len(), 1);
        assert_eq!(out.delete[0].pod.name, "ours");
        let reason = |name: &str| {
            out.keep
                .iter()
                .find(|k| k.pod.name == name)
                .map(|k| k.reason.clone())
                .unwrap()
        };
        assert_eq!(
            reason("fixed"),
            KeepReason::ManagedByMismatch {
                managed_by: Some("some-driver".into())
            }
        );
        assert_eq!(
            reason("bare"),
            KeepReason::ManagedByMismatch { managed_by: None }
        );
        assert_eq!(
            reason("driver-pod"),
            KeepReason::NotDriverManaged,
            "the driver's own pod"
        );
        assert_eq!(
            reason("other-id"),
            KeepReason::NotDriverManaged,
            "no dead driver of b"
        );
        assert_eq!(
            mismatches(&out),
            BTreeMap::from([(
                "a".to_owned(),
                vec!["ns/bare".to_owned(), "ns/fixed".to_owned()]
            )])
        );
    }

    #[test]
    fn only_the_ids_a_list_named_are_known_to_have_no_sandbox_left() {
        let due: BTreeSet<String> = ["a".to_owned()].into();
        assert!(listed_all_of(&due, false, "a"));
        assert!(
            !listed_all_of(&due, false, "b"),
            "failed after the LIST was chosen"
        );
        assert!(
            listed_all_of(&due, true, "b"),
            "the sweep listed every sandbox"
        );
        let many: BTreeSet<String> = (0..=MAX_SELECTED_IDS).map(|i| format!("j{i}")).collect();
        assert!(
            listed_all_of(&many, false, "b"),
            "listed by the label's presence"
        );
    }

    #[test]
    fn a_reap_lists_by_the_job_ids_due_and_by_presence_past_the_bound() {
        let ids = |n: usize| (0..n).map(|i| format!("j{i}")).collect::<BTreeSet<_>>();
        assert_eq!(reap_selector(&ids(2)), "tcab.dev/job-id in (j0,j1)");
        assert_eq!(reap_selector(&ids(MAX_SELECTED_IDS + 1)), "tcab.dev/job-id");
    }
}
