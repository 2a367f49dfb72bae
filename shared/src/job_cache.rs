//! The watch-backed view of the Jobs this dispatcher owns.
//!
//! A kube watcher streams every Job carrying the managed-by label; the cache
//! keeps only the few fields decisions read ([`JobSummary`]), so 10,000 owned
//! Jobs cost little memory and no tick LISTs the API.
//!
//! **A view is trusted only while it is current.** It becomes current when a
//! (re)list completes (kube-runtime's `InitDone`) and stops being current at
//! the next watch error, never by elapsed time. After an error the watcher is
//! started afresh (after a back-off), so the next current view always comes
//! from a complete list: kube-runtime on its own would resume the watch from
//! its last resourceVersion, which is complete too but gives no moment at
//! which the view is known to be caught up. A watch that goes silent (a stuck
//! watch cache) is bounded by the watch timeout: the server ends every watch
//! after it, and kube-runtime reconnects when nothing (not even a bookmark)
//! arrived for that long.
//!
//! A Job can vanish while its pod lives on (deleted with `--cascade=orphan`,
//! or while its pod still terminates): such a pod stands in the view for its
//! Job, as a live entry with [`JobSummary::gone`] set, so it counts against
//! its lane, keeps its lease and protects its sandboxes ([`pods`]). The view
//! is current only while both the Jobs and those pods are known.

pub mod job_names;
pub mod pods;
pub mod watched;

use crate::inline_str::IdStr;
use crate::kube_api::{KubeCall, Verb};
use crate::lane::Lane;
use crate::metrics::labels::{ErrorReason, JobOutcome};
use crate::names;
use crate::retry::Backoff;
use crate::tick::Wake;
use futures::StreamExt;
use jiff::Timestamp;
pub use job_names::JobNames;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use pods::{Gone, OwnedPod, gone_after_list, standing};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
pub use watched::{Summarize, WatchedJob};

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
    /// it may live on (see [`pods`]): live, counting against its lane,
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
/// (a [`Snapshot`]'s): planners take either.
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
    /// termination grace and its status (what [`WatchedJob`] keeps).
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

/// A cached Job, keyed by its own name: the set holds one pointer per Job
/// and no second copy of the name, and a snapshot shares the summary.
#[derive(Debug, Clone)]
struct Entry(Arc<JobSummary>);

impl std::borrow::Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name().cmp(other.0.name())
    }
}

/// The cached Jobs by name (sorted, so a snapshot needs no sort).
type Jobs = BTreeSet<Entry>;

/// The view's state behind its lock.
struct State {
    jobs: Jobs,
    /// Objects of a Job relist in progress; swapped in at `InitDone`.
    relist: Option<Jobs>,
    /// The Job watch's own state.
    jobs_view: ViewState,
    /// Jobs gone while a pod of theirs may still live, by Job name.
    gone: HashMap<String, Gone>,
    /// Whether `gone` is known complete: a pod list completed after the
    /// last Job relist and no pod read failed since.
    pods_view: ViewState,
    /// Bumped by every write (see [`OwnedJobs::snapshot`]).
    generation: u64,
}

impl State {
    fn new(tracked: bool) -> Self {
        State {
            jobs: Jobs::new(),
            relist: None,
            jobs_view: ViewState::Listing,
            gone: HashMap::new(),
            // A cache nobody tracks pods for (a test feeding Jobs) has no gone Jobs to learn.
            pods_view: if tracked {
                ViewState::Listing
            } else {
                ViewState::Current
            },
            generation: 0,
        }
    }

    /// The view as a whole: current only while the Jobs and the pods that
    /// outlived theirs both are.
    fn view(&self) -> ViewState {
        match (&self.jobs_view, &self.pods_view) {
            (ViewState::Current, pods) => pods.clone(),
            (jobs, _) => jobs.clone(),
        }
    }

    /// Whether the entry `name` is live: its Job is live, or its Job is gone
    /// and something stands for it.
    fn live_in_view(&self, name: &str) -> bool {
        match self.jobs.get(name) {
            Some(job) => job.0.is_live(),
            None => self.gone.contains_key(name),
        }
    }

    fn live_in_lane(&self, lane: Lane) -> usize {
        let jobs = self
            .jobs
            .iter()
            .filter(|j| j.0.lane == lane && j.0.is_live())
            .count();
        jobs + self.gone.values().filter(|g| g.lane() == lane).count()
    }
}

/// How the watch of owned Jobs is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSettings {
    /// Server-side timeout of each watch call; a watch that delivers nothing
    /// (not even a bookmark) for this long plus a small margin is reconnected.
    pub timeout: Duration,
    /// First back-off after a watch error before the view is listed again.
    pub min_backoff: Duration,
    /// Longest back-off between relist attempts.
    pub max_backoff: Duration,
    /// How often a pod standing for its gone Job is read, to see it finish.
    pub pod_poll: Duration,
    /// Bound of each pod read.
    pub call_timeout: Duration,
}

impl WatchSettings {
    /// The settings every binary watches with: its watch and API timeouts,
    /// and its poll interval for the pods that outlive their Jobs.
    pub fn of(common: &crate::config::CommonConfig) -> Self {
        WatchSettings {
            timeout: common.watch_timeout,
            pod_poll: common.poll_interval,
            call_timeout: common.kube_timeout,
            ..WatchSettings::default()
        }
    }
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            timeout: Duration::from_secs(60),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            pod_poll: Duration::from_secs(5),
            call_timeout: Duration::from_secs(15),
        }
    }
}

/// Why the view is not current (for logs and the gate's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewState {
    /// Listed and watching without an error since.
    Current,
    /// Not listed yet since the start.
    Listing,
    /// The watch failed; a fresh list is under way.
    Failed(String),
}

impl ViewState {
    /// Whether decisions may trust the view.
    pub fn is_current(&self) -> bool {
        matches!(self, ViewState::Current)
    }
}

/// The verb of a failed watch, for the API-errors metric: the list that
/// (re)starts the view, or the watch itself.
pub fn watch_error_verb(error: &watcher::Error) -> Verb {
    match error {
        watcher::Error::InitialListFailed(_) => Verb::List,
        watcher::Error::WatchStartFailed(_)
        | watcher::Error::WatchError(_)
        | watcher::Error::WatchFailed(_)
        | watcher::Error::NoResourceVersion => Verb::Watch,
    }
}

/// Why a watch failed, for the API-errors metric: from the error's type
/// and status code.
pub fn watch_error_reason(error: &watcher::Error) -> ErrorReason {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => crate::kube_api::kube_reason(e),
        watcher::Error::WatchError(status) => ErrorReason::of_status(status.code),
        watcher::Error::NoResourceVersion => ErrorReason::Decode,
    }
}

/// Work for the pod tracker.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The Jobs were (re)listed: list every live owned pod.
    Relisted,
    /// A live Job vanished: list its pods.
    Vanished(String),
}

/// A snapshot of the view: every entry, sorted by name, each shared with
/// the cache (a snapshot costs a pointer per Job, not a copy).
pub type Snapshot = Arc<Vec<Arc<JobSummary>>>;

/// A snapshot of the cache, shared, and the generation it was taken at.
type SharedSnapshot = (u64, Snapshot);

/// A shared, cheaply cloned cache of the owned Jobs (and of the pods that
/// outlived theirs), fed by a watch.
#[derive(Clone)]
pub struct OwnedJobs {
    state: Arc<RwLock<State>>,
    /// The last [`OwnedJobs::snapshot`] and the generation of the state it
    /// was taken from: every loop of a container shares it until the state
    /// changes, so a quiet tick copies nothing and the cache is held twice
    /// at most, not once per loop.
    shared: Arc<Mutex<Option<SharedSnapshot>>>,
    view: Arc<watch::Sender<ViewState>>,
    /// Bumped whenever an entry stops being live (it finished or is gone), so a
    /// loop can react at once instead of at its next poll.
    finished: Arc<watch::Sender<u64>>,
    /// Bumped on every change to an entry (and when a relist completes).
    changed: Arc<watch::Sender<u64>>,
    /// The pod tracker's queue, when pods are tracked.
    checks: Option<mpsc::UnboundedSender<Check>>,
    /// Told of each Job's start and end as the watch shows them (metrics).
    milestones: Arc<OnceLock<MilestoneSink>>,
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

impl Default for OwnedJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl OwnedJobs {
    /// An empty cache that is not current until the first full list arrives.
    /// Nothing tracks the pods of Jobs that vanish: a Job deleted from it is
    /// simply gone (for tests and benchmarks that feed it by hand).
    pub fn new() -> Self {
        Self::with_checks(None)
    }

    fn with_checks(checks: Option<mpsc::UnboundedSender<Check>>) -> Self {
        OwnedJobs {
            state: Arc::new(RwLock::new(State::new(checks.is_some()))),
            shared: Arc::new(Mutex::new(None)),
            view: Arc::new(watch::channel(ViewState::Listing).0),
            finished: Arc::new(watch::channel(0).0),
            changed: Arc::new(watch::channel(0).0),
            checks,
            milestones: Arc::new(OnceLock::new()),
        }
    }

    /// Tells `sink` of every [`Milestone`] from now on (once per cache: a
    /// second sink is ignored).
    pub fn on_milestone(&self, sink: MilestoneSink) {
        let _ = self.milestones.set(sink);
    }

    /// A cache whose first list has completed with `jobs`: current, as a
    /// watch leaves it after its list. For tests and benchmarks that need a
    /// view without a watch.
    pub fn listed(jobs: impl IntoIterator<Item = Job>) -> Self {
        let cache = OwnedJobs::new();
        cache.apply(Event::Init);
        for job in jobs {
            cache.apply(Event::InitApply(job));
        }
        cache.apply(Event::InitDone);
        cache
    }

    /// Starts watching the Jobs labelled `managed-by=<managed_by>` in
    /// `namespace`, and tracking the pods that outlive theirs (see
    /// [`pods`]). The returned task runs until it is aborted: a watch error
    /// marks the view not current and starts a fresh list after a back-off.
    /// The caller watches the task.
    pub fn watch(
        client: Client,
        namespace: &str,
        managed_by: &str,
        settings: WatchSettings,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let cache = OwnedJobs::with_checks(Some(tx));
        let selector = names::selector(names::MANAGED_BY, managed_by);
        let jobs = watch_jobs(
            Api::namespaced(client.clone(), namespace),
            selector.clone(),
            settings,
            cache.clone(),
        );
        let pods = track_pods(
            Api::namespaced(client, namespace),
            selector,
            settings,
            cache.clone(),
            rx,
        );
        let task = tokio::spawn(async move {
            futures::join!(jobs, pods);
        });
        (cache, task)
    }

    /// Applies one event of full Jobs (tests and benchmarks feed a cache
    /// directly this way; the watch reads [`WatchedJob`]s).
    pub fn apply(&self, event: Event<Job>) {
        self.apply_summary(summarised(event));
    }

    /// Applies one Job watch event, each Job already summarised.
    fn apply_summary(&self, event: Event<JobSummary>) {
        let mut told = None;
        let mut state = self.write();
        let (finished, listed, check) = match event {
            Event::Init => {
                state.relist = Some(Jobs::new());
                (false, None, None)
            }
            Event::InitApply(summary) => {
                // An unchanged Job shares the summary the cache holds: a
                // relist then costs a pointer per Job until it completes,
                // not a second copy of every summary.
                let entry = match state.jobs.get(summary.name()) {
                    Some(held) if *held.0 == summary => Entry(Arc::clone(&held.0)),
                    _ => Entry(Arc::new(summary)),
                };
                state.relist.get_or_insert_with(Jobs::new).replace(entry);
                (false, None, None)
            }
            Event::InitDone => {
                state.jobs = state.relist.take().unwrap_or_default();
                state.jobs_view = ViewState::Current;
                let check = self.checks.is_some().then_some(Check::Relisted);
                if check.is_some() {
                    // The gone Jobs are learnt afresh from a pod list.
                    state.pods_view = ViewState::Listing;
                }
                (true, Some(state.jobs.len()), check)
            }
            Event::Apply(summary) => {
                let before = state.jobs.get(summary.name()).map(|e| &*e.0);
                told = milestone(before, &summary);
                // A Job first seen already finished frees room too (its
                // create was counted before the watch showed it).
                let before = before.is_none_or(JobSummary::is_live);
                let name = summary.name().to_owned();
                state.gone.remove(&name);
                state.jobs.replace(Entry(Arc::new(summary)));
                (before && !state.live_in_view(&name), None, None)
            }
            Event::Delete(job) => {
                let name = job.name().to_owned();
                let last = state.jobs.take(name.as_str());
                let was_live = last.as_ref().is_some_and(|e| e.0.is_live());
                let check = match last {
                    // Its pod may outlive it: it stands as it was until its pods are known.
                    Some(Entry(last)) if was_live && self.checks.is_some() => {
                        let stands = Arc::new(JobSummary {
                            gone: true,
                            ..JobSummary::clone(&last)
                        });
                        state.gone.insert(name.clone(), Gone::Checking(stands));
                        Some(Check::Vanished(name.clone()))
                    }
                    _ => None,
                };
                (was_live && !state.live_in_view(&name), None, check)
            }
        };
        let view = state.view();
        drop(state);
        if let (Some(check), Some(checks)) = (check, &self.checks) {
            // The tracker lives as long as the watch task; a send fails only
            // once it was aborted, when nothing reads the view any more.
            let _ = checks.send(check);
        }
        if let (Some(milestone), Some(sink)) = (told, self.milestones.get()) {
            sink(milestone);
        }
        self.announce(finished, listed.map(|n| (n, view)));
    }

    /// Tells the loops: something changed; maybe an entry stopped being
    /// live; maybe a list completed (and the view may be current now).
    fn announce(&self, finished: bool, listed: Option<(usize, ViewState)>) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        if finished {
            self.finished.send_modify(|n| *n = n.wrapping_add(1));
        }
        if let Some((count, view)) = listed {
            self.set_view(view, count);
        }
    }

    /// Publishes the view's state, saying so at info when it becomes current.
    fn set_view(&self, view: ViewState, count: usize) {
        let now_current = view.is_current();
        let was = self.view.send_replace(view);
        if now_current && !was.is_current() {
            tracing::info!(
                owned_jobs = count,
                "Job view current: listed the owned Jobs"
            );
        }
    }

    /// Records a Job watch error: the view is not current until the next
    /// complete list. Logged once per transition.
    pub fn mark_failed(&self, error: &str) {
        let view = {
            let mut state = self.write();
            state.jobs_view = ViewState::Failed(error.to_owned());
            state.view()
        };
        self.announce_failure(view, error, "the Job watch failed");
    }

    fn announce_failure(&self, view: ViewState, error: &str, what: &str) {
        let was = self.view.send_replace(view);
        if was.is_current() {
            tracing::warn!(%error, "Job view not current: {what}; holding what depends on it until a fresh list completes");
        } else {
            tracing::debug!(%error, "{what} (still not current)");
        }
    }

    /// Whether decisions may trust the view: a list completed and no watch
    /// error happened since.
    pub fn is_current(&self) -> bool {
        self.view.borrow().is_current()
    }

    /// The view's state (current, listing, or failed and why).
    pub fn view_state(&self) -> ViewState {
        self.view.borrow().clone()
    }

    /// Resolves whenever the view's state changes.
    pub fn view_changes(&self) -> watch::Receiver<ViewState> {
        self.view.subscribe()
    }

    /// Every cached Job, and what stands for each Job gone while a pod of it
    /// may live, sorted by name (a stable order for the planners).
    /// Shared, not copied, while nothing changed since the last one.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((generation, jobs)) = shared.as_ref()
            && *generation == state.generation
        {
            return jobs.clone();
        }
        // The old one goes first: a loop still holding it keeps it alive,
        // but the cache does not hold two.
        *shared = None;
        let mut jobs: Vec<Arc<JobSummary>> =
            Vec::with_capacity(state.jobs.len() + state.gone.len());
        jobs.extend(state.jobs.iter().map(|e| Arc::clone(&e.0)));
        if !state.gone.is_empty() {
            jobs.extend(state.gone.values().map(Gone::entry));
            jobs.sort_by(|a, b| a.name().cmp(b.name()));
        }
        let jobs = Arc::new(jobs);
        *shared = Some((state.generation, jobs.clone()));
        jobs
    }

    /// The state behind its write lock, its generation bumped: whoever
    /// writes may change it, and the next snapshot is then taken afresh.
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        state.generation = state.generation.wrapping_add(1);
        state
    }

    /// The live entries of one lane, counted without copying the cache.
    pub fn live_count(&self, lane: Lane) -> usize {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live_in_lane(lane)
    }

    /// The creation time of the oldest live Job of one lane (a Job gone
    /// while its pod lives on counts, by its last state), scanned without
    /// copying the cache; `None` when the lane has no live Job.
    pub fn oldest_live(&self, lane: Lane) -> Option<Timestamp> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let jobs = state
            .jobs
            .iter()
            .map(|e| &e.0)
            .filter(|j| j.lane == lane && j.is_live())
            .filter_map(|j| j.created_at);
        let gone = state
            .gone
            .values()
            .map(Gone::entry)
            .filter(|j| j.lane == lane)
            .filter_map(|j| j.created_at);
        jobs.chain(gone).min()
    }

    /// The cached Jobs labelled with backend job `job_id`, sorted by name
    /// (the admitter's check for a stale Job of a fresh claim).
    pub fn with_job_id(&self, job_id: &str) -> Vec<JobSummary> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut jobs: Vec<JobSummary> = state
            .jobs
            .iter()
            .map(|e| Arc::clone(&e.0))
            .chain(state.gone.values().map(Gone::entry))
            .filter(|j| j.job_id() == Some(job_id))
            .map(|j| JobSummary::clone(&j))
            .collect();
        jobs.sort_by(|a, b| a.name().cmp(b.name()));
        jobs
    }

    /// Whether the cache holds a Job of this name.
    pub fn contains(&self, name: &str) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.jobs.contains(name)
    }

    /// How many Jobs are cached.
    pub fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .jobs
            .len()
    }

    /// Whether no Job is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A wake-up that fires whenever an entry stops being live (a Job
    /// finished, or vanished and no pod of it lives on; a pod standing for its
    /// gone Job finished) and when a relist completes: the moments a lane
    /// gains room, a death can be reported, a sandbox reaped.
    pub fn finishes(&self) -> Wake {
        Wake::new(self.finished.subscribe())
    }

    /// A wake-up that fires on every change to an entry: the moment a Job
    /// first shows a sign of failure, while its pod may still be readable.
    pub fn changes(&self) -> Wake {
        Wake::new(self.changed.subscribe())
    }

    /// Waits until the view is current (the first full list has arrived).
    pub async fn wait_current(&self) {
        let mut rx = self.view.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(ViewState::is_current).await;
    }

    // The pod tracker's edits.

    /// A complete list of the live owned pods arrived: the gone Jobs are
    /// those whose pods the Job view does not hold.
    fn pods_listed(&self, pods: Vec<OwnedPod>) {
        let (view, count) = {
            let mut state = self.write();
            if !matches!(state.jobs_view, ViewState::Current) {
                // A Job relist is under way; its own pod list follows.
                return;
            }
            state.gone = gone_after_list(pods, |name| state.jobs.contains(name));
            state.pods_view = ViewState::Current;
            (state.view(), state.jobs.len())
        };
        let gone = self.gone_names();
        if !gone.is_empty() {
            tracing::info!(jobs = %crate::telemetry::list(&gone), "Jobs gone while a pod of theirs lives on: each still counts as live");
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        self.finished.send_modify(|n| *n = n.wrapping_add(1));
        self.set_view(view, count);
    }

    /// The live pods of a vanished Job are known: one of them stands for it,
    /// or none lives and the entry goes.
    fn vanished_checked(&self, job: &str, pods: Vec<OwnedPod>) {
        let stands = standing(pods);
        let mut state = self.write();
        if !matches!(state.gone.get(job), Some(Gone::Checking(_))) {
            return;
        }
        match &stands {
            Some(pod) => {
                tracing::info!(job, pod = %pod.name, "a Job vanished while its pod lives on; the pod counts as the live run until it finishes");
                state.gone.insert(job.to_owned(), Gone::Pod(pod.clone()));
            }
            None => {
                state.gone.remove(job);
            }
        }
        drop(state);
        self.announce(stands.is_none(), None);
    }

    /// A pod standing for its gone Job was read again (`None`: it is gone).
    fn standing_read(&self, job: &str, pod: Option<OwnedPod>) {
        let mut state = self.write();
        let Some(Gone::Pod(before)) = state.gone.get(job) else {
            return;
        };
        let before = before.clone();
        let ended = match pod {
            Some(pod) if !pod.finished => {
                let changed = pod != before;
                state.gone.insert(job.to_owned(), Gone::Pod(pod));
                if !changed {
                    return;
                }
                false
            }
            _ => {
                state.gone.remove(job);
                true
            }
        };
        drop(state);
        if ended {
            tracing::info!(job, pod = %before.name, "the pod that outlived its Job has finished");
        }
        self.announce(ended, None);
    }

    /// A pod list or read failed: the gone Jobs are not known complete.
    fn pods_failed(&self, error: &str) {
        let view = {
            let mut state = self.write();
            state.pods_view = ViewState::Failed(format!("listing the owned pods failed: {error}"));
            state.view()
        };
        self.announce_failure(view, error, "listing the owned pods failed");
    }

    /// The pods standing for gone Jobs: (Job name, pod name).
    fn standing_pods(&self) -> Vec<(String, String)> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .gone
            .iter()
            .filter_map(|(job, g)| match g {
                Gone::Pod(p) => Some((job.clone(), p.name.clone())),
                Gone::Checking(_) => None,
            })
            .collect()
    }

    /// The names of the gone Jobs, sorted (for the log).
    fn gone_names(&self) -> Vec<String> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = state.gone.keys().cloned().collect();
        names.sort();
        names
    }
}

/// The event with each Job replaced by its summary.
fn summarised<J: Summarize>(event: Event<J>) -> Event<JobSummary> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(job) => Event::InitApply(job.summary()),
        Event::InitDone => Event::InitDone,
        Event::Apply(job) => Event::Apply(job.summary()),
        Event::Delete(job) => Event::Delete(job.summary()),
    }
}

/// Watches the owned Jobs forever, feeding `cache`: after an error the view
/// is marked not current and, after a back-off, the Jobs are listed afresh.
async fn watch_jobs(
    api: Api<WatchedJob>,
    selector: String,
    settings: WatchSettings,
    cache: OwnedJobs,
) {
    // Lists are paged (250 Jobs a page) so a relist of 10,000 Jobs never
    // holds them all in memory at once.
    let timeout = u32::try_from(settings.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
    let config = watcher::Config::default()
        .labels(&selector)
        .page_size(250)
        .timeout(timeout);
    let backoff = Backoff::doubling(settings.min_backoff, settings.max_backoff);
    let mut failures: u32 = 0;
    loop {
        let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
        let (verb, reason, error) = loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if matches!(event, Event::InitDone) {
                        failures = 0;
                    }
                    cache.apply_summary(summarised(event));
                }
                Some(Err(error)) => {
                    break (
                        watch_error_verb(&error),
                        watch_error_reason(&error),
                        crate::error_chain(&error),
                    );
                }
                None => {
                    break (
                        Verb::Watch,
                        ErrorReason::Other,
                        "the watch stream ended".to_owned(),
                    );
                }
            }
        };
        crate::metrics::common().kube_api_error(verb, reason);
        let was_current = cache.is_current();
        cache.mark_failed(&error);
        failures = failures.saturating_add(1);
        let wait = backoff.after(failures);
        // The first failure of a current view is told by `mark_failed`; each
        // attempt after it (and each at start, before any list completed)
        // gets one line of its own, so an API server that cannot be reached
        // says so once per back-off step.
        if !was_current {
            let what = match verb {
                Verb::List => "cannot list the owned Jobs",
                _ => "cannot watch the owned Jobs",
            };
            tracing::warn!(
                selector = %selector,
                attempt = failures,
                reason = reason.as_str(),
                %error,
                retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "{what} from the Kubernetes API; listing them again after a back-off (nothing that depends on the Job view is done meanwhile)"
            );
        }
        tokio::time::sleep(wait).await;
    }
}

/// Learns which Jobs are gone while a pod of theirs lives on, and follows
/// those pods until they finish: a list of every live owned pod after each
/// Job relist, a list of a vanished Job's pods, and a read of each standing
/// pod every `pod_poll`. A failed list makes the view not current and is
/// tried again (as a full list) after a back-off.
async fn track_pods(
    api: Api<Pod>,
    selector: String,
    settings: WatchSettings,
    cache: OwnedJobs,
    mut checks: mpsc::UnboundedReceiver<Check>,
) {
    let backoff = Backoff::doubling(settings.min_backoff, settings.max_backoff);
    let mut failures: u32 = 0;
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut poll = tokio::time::interval(settings.pod_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let check = tokio::select! {
            check = checks.recv() => match check {
                Some(check) => check,
                None => return,
            },
            () = sleep_until(retry_at) => {
                retry_at = None;
                Check::Relisted
            }
            _ = poll.tick() => {
                read_standing(&api, &cache, settings.call_timeout).await;
                continue;
            }
        };
        let result = match &check {
            Check::Relisted => list_pods(&api, &selector, settings.call_timeout)
                .await
                .map(|pods| cache.pods_listed(pods)),
            Check::Vanished(job) => {
                let of_job = format!("{selector},{}", names::selector(pods::BATCH_JOB_NAME, job));
                list_pods(&api, &of_job, settings.call_timeout)
                    .await
                    .map(|pods| cache.vanished_checked(job, pods))
            }
        };
        match result {
            Ok(()) => {
                if check == Check::Relisted {
                    failures = 0;
                }
            }
            Err(error) => {
                cache.pods_failed(&error);
                failures = failures.saturating_add(1);
                retry_at = Some(tokio::time::Instant::now() + backoff.after(failures));
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The live owned pods matching `selector` (not finished).
async fn list_pods(
    api: &Api<Pod>,
    selector: &str,
    limit: Duration,
) -> Result<Vec<OwnedPod>, String> {
    let params = ListParams::default()
        .labels(selector)
        .fields(pods::LIVE_PHASES);
    crate::kube_api::call(KubeCall::ListPods, limit, api.list(&params))
        .await
        .map(|list| list.items.iter().map(OwnedPod::from_pod).collect())
        .map_err(|e| crate::error_chain(&e))
}

/// Reads each pod standing for a gone Job once; a failed read leaves it as
/// it was (still live) until the next poll.
async fn read_standing(api: &Api<Pod>, cache: &OwnedJobs, limit: Duration) {
    for (job, pod) in cache.standing_pods() {
        match crate::kube_api::call(KubeCall::GetPod, limit, api.get_opt(&pod)).await {
            Ok(read) => cache.standing_read(&job, read.as_ref().map(OwnedPod::from_pod)),
            Err(error) => {
                tracing::debug!(job, pod, error = %crate::error_chain(&error), "cannot read the pod that outlived its Job; it stays live");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, labels: serde_json::Value, status: serde_json::Value) -> Job {
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

    /// A relist shares the summary of every Job that did not change, so the
    /// cache never holds two copies of an unchanged Job while it relists.
    #[test]
    fn a_relist_shares_the_summaries_of_unchanged_jobs() {
        let a = || {
            job(
                "tcab-driver-a-1",
                json!({"tcab.dev/job-id": "a"}),
                json!({}),
            )
        };
        let b = |active| {
            job(
                "tcab-driver-b-1",
                json!({"tcab.dev/job-id": "b"}),
                json!({"active": active}),
            )
        };
        let cache = OwnedJobs::listed([a(), b(0)]);
        let before = cache.snapshot();
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(a()));
        cache.apply(Event::InitApply(b(1)));
        cache.apply(Event::InitDone);
        let after = cache.snapshot();
        assert!(Arc::ptr_eq(&before[0], &after[0]), "a is unchanged: shared");
        assert!(!Arc::ptr_eq(&before[1], &after[1]), "b changed: its own");
        assert_eq!(after[1].active_pods, 1);
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

    #[tokio::test]
    async fn finishes_fire_when_a_job_stops_being_live() {
        let cache = OwnedJobs::new();
        let mut wake = cache.finishes();
        assert!(!wake.is_pending(), "nothing happened yet");
        cache.apply(Event::Apply(job("a", json!({}), json!({"active": 1}))));
        assert!(!wake.is_pending(), "a new live Job frees no room");
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        )));
        assert!(wake.is_pending(), "a Job that finished frees room");
        wake.wait().await;
        assert!(!wake.is_pending());
        cache.apply(Event::Delete(job("a", json!({}), json!({}))));
        assert!(
            !wake.is_pending(),
            "deleting a finished Job frees nothing more"
        );
        cache.apply(Event::Apply(job("b", json!({}), json!({}))));
        cache.apply(Event::Delete(job("b", json!({}), json!({}))));
        assert!(wake.is_pending(), "a live Job deleted frees room");
    }

    #[test]
    fn a_watch_event_tells_the_start_and_the_end_it_shows_once() {
        let cache = OwnedJobs::new();
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = told.clone();
        cache.on_milestone(Arc::new(move |m| sink.lock().expect("lock").push(m)));
        let created: Timestamp = "2026-11-29T17:00:00Z".parse().expect("a time");
        let publish = json!({"tcab.dev/job-kind": "publish"});
        // A relist tells nothing, whatever the Job shows.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job(
            "old",
            json!({}),
            json!({"active": 1, "ready": 1}),
        )));
        cache.apply(Event::InitDone);
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"active": 1, "ready": 0}),
        )));
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"active": 1, "ready": 1}),
        )));
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"active": 1, "ready": 1}),
        )));
        cache.apply(Event::Apply(job(
            "p",
            publish.clone(),
            json!({"active": 1}),
        )));
        cache.apply(Event::Apply(job(
            "p",
            publish,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}),
        )));
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        )));
        // A Job first seen finished was never seen live: nothing to time.
        cache.apply(Event::Apply(job(
            "late",
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        )));
        assert_eq!(
            *told.lock().expect("lock"),
            [
                Milestone::Started {
                    lane: Lane::Run,
                    created_at: created,
                },
                Milestone::Finished {
                    lane: Lane::Publish,
                    outcome: JobOutcome::Failed,
                    created_at: created,
                },
                Milestone::Finished {
                    lane: Lane::Run,
                    outcome: JobOutcome::Succeeded,
                    created_at: created,
                },
            ]
        );
    }

    #[test]
    fn the_oldest_live_job_of_a_lane_is_found() {
        let cache = OwnedJobs::listed([
            job("a", json!({}), json!({"active": 1})),
            job(
                "done",
                json!({}),
                json!({"conditions": [{"type": "Complete", "status": "True"}]}),
            ),
        ]);
        let created: Timestamp = "2026-11-29T17:00:00Z".parse().expect("a time");
        assert_eq!(cache.oldest_live(Lane::Run), Some(created));
        assert_eq!(cache.oldest_live(Lane::Publish), None);
    }

    #[test]
    fn changes_fire_on_every_event() {
        let cache = OwnedJobs::new();
        let mut wake = cache.changes();
        cache.apply(Event::Apply(job("a", json!({}), json!({"active": 1}))));
        assert!(wake.is_pending());
        wake.mark_seen();
        cache.apply(Event::Apply(job(
            "a",
            json!({}),
            json!({"failed": 1, "terminating": 1}),
        )));
        assert!(wake.is_pending(), "a first sign of failure wakes");
    }

    #[test]
    fn current_only_from_a_completed_list_until_the_next_error() {
        let cache = OwnedJobs::new();
        assert!(!cache.is_current(), "not listed yet");
        assert_eq!(cache.view_state(), ViewState::Listing);
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job("a", json!({}), json!({}))));
        assert!(!cache.is_current(), "a list in progress is not current");
        cache.apply(Event::InitDone);
        assert!(cache.is_current());
        cache.mark_failed("500 Internal Server Error");
        assert!(!cache.is_current());
        assert!(matches!(cache.view_state(), ViewState::Failed(e) if e.contains("500")));
        cache.apply(Event::Apply(job("b", json!({}), json!({}))));
        assert!(
            !cache.is_current(),
            "an event after an error does not make the view current: only a relist does"
        );
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        assert!(cache.is_current());
    }

    #[test]
    fn a_failed_list_and_a_failed_watch_are_told_apart() {
        let status = || kube::core::Status::failure("gone", "Expired").with_code(410);
        let api = || kube::Error::Api(status().boxed());
        assert_eq!(
            watch_error_verb(&watcher::Error::InitialListFailed(api())),
            Verb::List
        );
        for error in [
            watcher::Error::WatchStartFailed(api()),
            watcher::Error::WatchError(status().boxed()),
            watcher::Error::WatchFailed(api()),
            watcher::Error::NoResourceVersion,
        ] {
            assert_eq!(watch_error_verb(&error), Verb::Watch, "{error}");
        }
    }

    #[test]
    fn relist_replaces_the_cache() {
        let cache = OwnedJobs::new();
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job("a", json!({}), json!({}))));
        cache.apply(Event::InitDone);
        cache.apply(Event::Apply(job("b", json!({}), json!({}))));
        assert_eq!(
            cache
                .snapshot()
                .iter()
                .map(|j| j.name())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(cache.live_count(Lane::Run), 2);
        // A relist after a watch gap drops what vanished meanwhile.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job("b", json!({}), json!({}))));
        assert_eq!(cache.len(), 2, "old view stays until the relist completes");
        cache.apply(Event::InitDone);
        assert_eq!(cache.snapshot().len(), 1);
        assert!(cache.contains("b") && !cache.contains("a"));
        cache.apply(Event::Delete(job("b", json!({}), json!({}))));
        assert!(cache.is_empty());
    }

    fn pod(name: &str, job: &str, phase: &str, deleting: bool) -> OwnedPod {
        let mut meta = json!({
            "name": name, "namespace": "ns", "creationTimestamp": "2026-11-29T17:00:00Z",
            "labels": {"batch.kubernetes.io/job-name": job, "tcab.dev/job-id": "a",
                       "tcab.dev/claim": "1", "tcab.dev/job-kind": "run"},
        });
        if deleting {
            meta["deletionTimestamp"] = json!("2026-11-29T17:10:00Z");
        }
        OwnedPod::from_pod(
            &serde_json::from_value(json!({"metadata": meta, "spec": {"containers": []},
                "status": {"phase": phase}}))
            .expect("valid pod json"),
        )
    }

    /// A tracked cache listed with `jobs` (the pod list found none gone),
    /// and the tracker's queue.
    fn tracked(jobs: Vec<Job>) -> (OwnedJobs, mpsc::UnboundedReceiver<Check>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let cache = OwnedJobs::with_checks(Some(tx));
        cache.apply(Event::Init);
        for j in jobs {
            cache.apply(Event::InitApply(j));
        }
        cache.apply(Event::InitDone);
        assert!(!cache.is_current(), "the pods are not known yet");
        assert_eq!(rx.try_recv().ok(), Some(Check::Relisted));
        cache.pods_listed(vec![]);
        assert!(cache.is_current());
        (cache, rx)
    }

    #[test]
    fn a_pod_outliving_its_job_keeps_the_entry_live_until_it_finishes() {
        let (cache, mut checks) = tracked(vec![job(
            "j",
            json!({"tcab.dev/job-id": "a"}),
            json!({"active": 1}),
        )]);
        let finishes = cache.finishes();
        // Deleted (with --cascade=orphan, or while its pod terminates).
        cache.apply(Event::Delete(job("j", json!({}), json!({}))));
        assert_eq!(checks.try_recv().ok(), Some(Check::Vanished("j".into())));
        assert!(
            !finishes.is_pending(),
            "no room freed while its pods are not known"
        );
        assert_eq!(cache.live_count(Lane::Run), 1);
        let entry = &cache.snapshot()[0];
        assert!(entry.gone && entry.is_live() && entry.orphan_pod().is_none());
        assert_eq!(entry.job_id(), Some("a"), "it stands as it was");

        cache.vanished_checked("j", vec![pod("j-x", "j", "Running", false)]);
        assert!(!finishes.is_pending(), "the run still runs");
        let entry = &cache.snapshot()[0];
        assert_eq!(entry.orphan_pod(), Some("j-x"));
        assert!(!cache.contains("j"), "contains() is about Jobs");
        assert_eq!(cache.standing_pods(), [("j".to_owned(), "j-x".to_owned())]);

        let mut changes = cache.changes();
        changes.mark_seen();
        cache.standing_read("j", Some(pod("j-x", "j", "Running", true)));
        assert!(changes.is_pending(), "it began terminating");
        assert!(cache.snapshot()[0].shows_failure());

        cache.standing_read("j", Some(pod("j-x", "j", "Failed", true)));
        assert!(finishes.is_pending(), "it finished: the lane has room");
        assert_eq!(cache.live_count(Lane::Run), 0);
        assert!(cache.snapshot().is_empty());
    }

    #[test]
    fn a_vanished_job_with_no_live_pod_frees_room_once_checked() {
        let (cache, _checks) = tracked(vec![job("j", json!({}), json!({"active": 1}))]);
        let finishes = cache.finishes();
        cache.apply(Event::Delete(job("j", json!({}), json!({}))));
        cache.vanished_checked("j", vec![pod("j-x", "j", "Failed", false)]);
        assert!(finishes.is_pending());
        assert!(cache.snapshot().is_empty());
    }

    #[test]
    fn a_relist_learns_the_gone_jobs_from_the_pods() {
        let (cache, mut checks) = tracked(vec![job("j", json!({}), json!({"active": 1}))]);
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        assert_eq!(checks.try_recv().ok(), Some(Check::Relisted));
        assert!(!cache.is_current(), "not until the pods are listed");
        cache.pods_listed(vec![
            pod("j-x", "j", "Running", false),
            pod("k-x", "k", "Pending", false),
        ]);
        assert!(cache.is_current());
        let names: Vec<String> = cache
            .snapshot()
            .iter()
            .map(|j| j.name().to_string())
            .collect();
        assert_eq!(names, ["j", "k"]);
        cache.pods_failed("403 Forbidden");
        assert!(matches!(cache.view_state(), ViewState::Failed(e) if e.contains("403")));
    }

    #[test]
    fn an_untracked_cache_drops_a_deleted_live_job_at_once() {
        let cache = OwnedJobs::listed([job("j", json!({}), json!({"active": 1}))]);
        let finishes = cache.finishes();
        cache.apply(Event::Delete(job("j", json!({}), json!({}))));
        assert!(finishes.is_pending());
        assert_eq!(cache.live_count(Lane::Run), 0);
    }
}
