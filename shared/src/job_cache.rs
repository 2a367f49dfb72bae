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

use crate::kube_api::Verb;
use crate::lane::Lane;
use crate::names;
use crate::retry::Backoff;
use crate::tick::Wake;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

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

/// A true condition of a Job: its reason and message.
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
    /// The Job's name.
    pub name: String,
    /// The Job's uid ("" when the server gave none).
    pub uid: String,
    /// Its admission lane (label first, then the name rule).
    pub lane: Lane,
    /// The `tcab.dev/job-id` label as it is (possibly empty or malformed:
    /// planners check it with `backend::is_job_id`).
    pub job_id: Option<String>,
    /// The claim tag from `tcab.dev/claim`, if labelled.
    pub claim: Option<String>,
    /// Live, succeeded or failed.
    pub phase: JobPhase,
    /// `status.failed`: pods that failed; it outlives the pods themselves.
    pub failed_pods: i32,
    /// `status.active`: pods neither finished nor being deleted.
    pub active_pods: i32,
    /// `status.ready`: active pods that are ready.
    pub ready_pods: i32,
    /// `status.terminating`: pods being deleted that have not finished.
    pub terminating_pods: i32,
    /// A true `FailureTarget` condition (Kubernetes 1.31+ sets it as soon as
    /// the Job is bound to fail; `Failed` follows once its pods terminated).
    pub failure_target: Option<JobCondition>,
    /// The true `Failed` condition, once the Job has failed.
    pub failed: Option<JobCondition>,
    /// The pod template's `terminationGracePeriodSeconds`, if set.
    pub termination_grace_seconds: Option<i64>,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: the Job itself is being deleted.
    pub deleting: bool,
}

impl JobSummary {
    /// Reads the summary of a Job.
    pub fn from_job(job: &Job) -> Self {
        let labels = job.labels();
        let name = job.name_any();
        let status = job.status.as_ref();
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
        let count = |f: fn(&k8s_openapi::api::batch::v1::JobStatus) -> Option<i32>| {
            status.and_then(f).unwrap_or(0)
        };
        JobSummary {
            lane: Lane::classify(labels, &name),
            uid: job.metadata.uid.clone().unwrap_or_default(),
            job_id: labels.get(names::JOB_ID).cloned(),
            claim: labels.get(names::CLAIM).cloned(),
            phase,
            failed_pods: count(|s| s.failed),
            active_pods: count(|s| s.active),
            ready_pods: count(|s| s.ready),
            terminating_pods: count(|s| s.terminating),
            failure_target: condition("FailureTarget"),
            failed,
            termination_grace_seconds: job
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.termination_grace_period_seconds),
            created_at: job
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| Timestamp::from_second(t.0.as_second()).unwrap_or(Timestamp::UNIX_EPOCH)),
            deleting: job.metadata.deletion_timestamp.is_some(),
            name,
        }
    }

    /// Not finished: counts against its lane's cap and keeps its lease renewed.
    pub fn is_live(&self) -> bool {
        self.phase == JobPhase::Live
    }

    /// Whether the Job shows a first sign of failure: `FailureTarget`, a
    /// failed pod, or a pod being deleted. Its pod is the evidence then.
    pub fn shows_failure(&self) -> bool {
        self.failure_target.is_some() || self.failed_pods > 0 || self.terminating_pods > 0
    }

    /// Failing and not settled: live with a sign of failure, or `Failed`
    /// while a pod still terminates (clusters before 1.31 set `Failed` early).
    pub fn failing_unsettled(&self) -> bool {
        (self.is_live() && self.shows_failure())
            || (self.phase == JobPhase::Failed && self.terminating_pods > 0)
    }
}

#[derive(Default)]
struct State {
    jobs: HashMap<String, JobSummary>,
    /// Objects of a relist in progress; swapped in at `InitDone`.
    relist: Option<HashMap<String, JobSummary>>,
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
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            timeout: Duration::from_secs(60),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
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

/// A shared, cheaply cloned cache of the owned Jobs, fed by a watch.
#[derive(Clone)]
pub struct OwnedJobs {
    state: Arc<RwLock<State>>,
    view: Arc<watch::Sender<ViewState>>,
    /// Bumped whenever a Job stops being live (it finished or is gone), so a
    /// loop can react at once instead of at its next poll.
    finished: Arc<watch::Sender<u64>>,
    /// Bumped on every change to a cached Job (and when a relist completes).
    changed: Arc<watch::Sender<u64>>,
}

impl Default for OwnedJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl OwnedJobs {
    /// An empty cache that is not current until the first full list arrives.
    pub fn new() -> Self {
        OwnedJobs {
            state: Arc::new(RwLock::new(State::default())),
            view: Arc::new(watch::channel(ViewState::Listing).0),
            finished: Arc::new(watch::channel(0).0),
            changed: Arc::new(watch::channel(0).0),
        }
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
    /// `namespace`. The returned task runs until it is aborted: a watch
    /// error marks the view not current and starts a fresh list after a
    /// back-off. The caller watches the task.
    pub fn watch(
        client: Client,
        namespace: &str,
        managed_by: &str,
        settings: WatchSettings,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let cache = OwnedJobs::new();
        let api: Api<Job> = Api::namespaced(client, namespace);
        // Lists are paged (250 Jobs a page) so a relist of 10,000 Jobs never
        // holds them all in memory at once.
        let timeout = u32::try_from(settings.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let config = watcher::Config::default()
            .labels(&names::selector(names::MANAGED_BY, managed_by))
            .page_size(250)
            .timeout(timeout);
        let feed = cache.clone();
        let task = tokio::spawn(async move {
            let backoff = Backoff::doubling(settings.min_backoff, settings.max_backoff);
            let mut failures: u32 = 0;
            loop {
                let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
                let error = loop {
                    match stream.next().await {
                        Some(Ok(event)) => {
                            if matches!(event, Event::InitDone) {
                                failures = 0;
                            }
                            feed.apply(event);
                        }
                        Some(Err(error)) => {
                            crate::metrics::common().kube_api_error(watch_error_verb(&error));
                            break error.to_string();
                        }
                        None => {
                            crate::metrics::common().kube_api_error(Verb::Watch);
                            break "the watch stream ended".to_owned();
                        }
                    }
                };
                feed.mark_failed(&error);
                failures = failures.saturating_add(1);
                tokio::time::sleep(backoff.after(failures)).await;
            }
        });
        (cache, task)
    }

    /// Applies one watch event. Public so tests can feed a cache directly.
    pub fn apply(&self, event: Event<Job>) {
        let (finished, listed) = self.apply_event(event);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        if finished {
            self.finished.send_modify(|n| *n = n.wrapping_add(1));
        }
        if let Some(count) = listed {
            let was = self.view.send_replace(ViewState::Current);
            if !was.is_current() {
                tracing::info!(
                    owned_jobs = count,
                    "Job view current: listed the owned Jobs"
                );
            }
        }
    }

    /// Records a watch error: the view is not current until the next
    /// complete list. Logged once per transition.
    pub fn mark_failed(&self, error: &str) {
        let was = self.view.send_replace(ViewState::Failed(error.to_owned()));
        if was.is_current() {
            tracing::warn!(%error, "Job view not current: the watch failed; holding what depends on it until a fresh list completes");
        } else {
            tracing::debug!(%error, "Job watch still failing");
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

    /// Applies an event; returns whether a Job stopped being live, and the
    /// number of Jobs when a relist completed.
    fn apply_event(&self, event: Event<Job>) -> (bool, Option<usize>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Init => {
                state.relist = Some(HashMap::new());
                (false, None)
            }
            Event::InitApply(job) => {
                let summary = JobSummary::from_job(&job);
                state
                    .relist
                    .get_or_insert_with(HashMap::new)
                    .insert(summary.name.clone(), summary);
                (false, None)
            }
            Event::InitDone => {
                let fresh = state.relist.take().unwrap_or_default();
                let count = fresh.len();
                state.jobs = fresh;
                (true, Some(count))
            }
            Event::Apply(job) => {
                let summary = JobSummary::from_job(&job);
                let was_live = state
                    .jobs
                    .get(&summary.name)
                    .is_none_or(JobSummary::is_live);
                let finished = was_live && !summary.is_live();
                state.jobs.insert(summary.name.clone(), summary);
                (finished, None)
            }
            Event::Delete(job) => (
                state
                    .jobs
                    .remove(&job.name_any())
                    .is_some_and(|gone| gone.is_live()),
                None,
            ),
        }
    }

    /// Every cached Job, sorted by name (a stable order for the planners).
    pub fn snapshot(&self) -> Vec<JobSummary> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut jobs: Vec<JobSummary> = state.jobs.values().cloned().collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        jobs
    }

    /// The live Jobs of one lane, counted without copying the cache.
    pub fn live_count(&self, lane: Lane) -> usize {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .jobs
            .values()
            .filter(|j| j.lane == lane && j.is_live())
            .count()
    }

    /// The cached Jobs labelled with backend job `job_id`, sorted by name
    /// (the admitter's check for a stale Job of a fresh claim).
    pub fn with_job_id(&self, job_id: &str) -> Vec<JobSummary> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut jobs: Vec<JobSummary> = state
            .jobs
            .values()
            .filter(|j| j.job_id.as_deref() == Some(job_id))
            .cloned()
            .collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        jobs
    }

    /// Whether the cache holds a Job of this name.
    pub fn contains(&self, name: &str) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.jobs.contains_key(name)
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

    /// A wake-up that fires whenever a cached Job stops being live (it
    /// finished, or was deleted while live) and when a relist completes: the
    /// moments a lane gains room, a death can be reported, a sandbox reaped.
    pub fn finishes(&self) -> Wake {
        Wake::new(self.finished.subscribe())
    }

    /// A wake-up that fires on every change to a cached Job: the moment a Job
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
        assert_eq!(s.job_id.as_deref(), Some("a"));
        assert_eq!(s.claim.as_deref(), Some("1"));
        assert_eq!(s.phase, JobPhase::Failed);
        assert_eq!(s.failed_pods, 1);
        assert_eq!(
            s.failure_target.as_ref().unwrap().reason,
            "PodFailurePolicy"
        );
        assert_eq!(s.failed.as_ref().unwrap().reason, "BackoffLimitExceeded");
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
                .map(|j| j.name.as_str())
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
}
