//! The watch-backed view of the Jobs this dispatcher owns.
//!
//! A kube watcher streams every Job carrying the managed-by label; the cache
//! keeps only the few fields decisions read ([`JobSummary`]), so 10,000 owned
//! Jobs cost little memory and no tick LISTs the API.

use crate::labels::{self, Lane};
use crate::tick::Wake;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// Where an owned Job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobPhase {
    /// No terminal condition yet: it counts against its lane's cap.
    Live,
    /// `Complete` condition true.
    Succeeded,
    /// `Failed` condition true (the pod failed, a deadline passed, ...).
    Failed,
}

/// The fields of one owned Job that decisions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// The Job's name.
    pub name: String,
    /// Its admission lane (label first, then the name rule).
    pub lane: Lane,
    /// The backend job id from `tcab.dev/job-id`, if labelled.
    pub job_id: Option<String>,
    /// The claim tag from `tcab.dev/claim`, if labelled.
    pub claim: Option<String>,
    /// Live, succeeded or failed.
    pub phase: JobPhase,
    /// `status.failed`: pods that failed; it outlives the pods themselves.
    pub failed_pods: i32,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
}

impl JobSummary {
    /// Reads the summary of a Job.
    pub fn from_job(job: &Job) -> Self {
        let labels = job.labels();
        let name = job.name_any();
        let status = job.status.as_ref();
        let condition_true = |kind: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
        };
        let phase = if condition_true("Failed") {
            JobPhase::Failed
        } else if condition_true("Complete") {
            JobPhase::Succeeded
        } else {
            JobPhase::Live
        };
        JobSummary {
            lane: Lane::classify(labels, &name),
            job_id: labels.get(labels::JOB_ID).cloned(),
            claim: labels.get(labels::CLAIM).cloned(),
            phase,
            failed_pods: status.and_then(|s| s.failed).unwrap_or(0),
            created_at: job
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| Timestamp::from_second(t.0.as_second()).unwrap_or(Timestamp::UNIX_EPOCH)),
            name,
        }
    }

    /// Not finished: counts against its lane's cap and keeps its lease renewed.
    pub fn is_live(&self) -> bool {
        self.phase == JobPhase::Live
    }
}

#[derive(Default)]
struct State {
    jobs: HashMap<String, JobSummary>,
    /// Objects of a relist in progress; swapped in at `InitDone`.
    relist: Option<HashMap<String, JobSummary>>,
    /// Set by a watch error: the view may be stale until this instant, or
    /// until the next event shows the watch delivering again.
    degraded_until: Option<std::time::Instant>,
}

/// How long after a watch error the view counts as possibly stale, unless an
/// event shows the watch is delivering again (a quiet re-established watch
/// sends nothing). Lapses take a whole lease (two minutes), so this is ample.
pub const DEGRADED_AFTER_ERROR: std::time::Duration = std::time::Duration::from_secs(30);

/// A shared, cheaply cloned cache of the owned Jobs, fed by a watch.
#[derive(Clone)]
pub struct OwnedJobs {
    state: Arc<RwLock<State>>,
    ready_tx: Arc<watch::Sender<bool>>,
    ready_rx: watch::Receiver<bool>,
    /// Bumped whenever a Job stops being live (it finished or is gone), so a
    /// loop can react at once instead of at its next poll.
    finished: Arc<watch::Sender<u64>>,
}

impl Default for OwnedJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl OwnedJobs {
    /// An empty cache that is not ready until the first full list arrives.
    pub fn new() -> Self {
        let (ready_tx, ready_rx) = watch::channel(false);
        OwnedJobs {
            state: Arc::new(RwLock::new(State::default())),
            ready_tx: Arc::new(ready_tx),
            ready_rx,
            finished: Arc::new(watch::channel(0).0),
        }
    }

    /// Starts watching the Jobs labelled `managed-by=<managed_by>` in
    /// `namespace`. The returned task runs until the stream ends (it retries
    /// API errors with back-off, so in practice never); the caller watches it.
    pub fn watch(
        client: Client,
        namespace: &str,
        managed_by: &str,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let cache = OwnedJobs::new();
        let api: Api<Job> = Api::namespaced(client, namespace);
        // Lists are paged (250 Jobs a page) so a
        // relist of 10,000 Jobs never holds them all in memory at once.
        let config = watcher::Config::default()
            .labels(&labels::selector(labels::MANAGED_BY, managed_by))
            .page_size(250);
        let feed = cache.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => feed.apply(event),
                    Err(error) => {
                        feed.mark_degraded(std::time::Instant::now());
                        tracing::warn!(%error, "job watch error; retrying with back-off (the view may be stale meanwhile)");
                    }
                }
            }
            tracing::error!("job watch stream ended");
        });
        (cache, task)
    }

    /// Applies one watch event. Public so tests can feed a cache directly.
    pub fn apply(&self, event: Event<Job>) {
        if self.apply_event(event) {
            self.finished.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Records a watch error: until the watch delivers again (or
    /// [`DEGRADED_AFTER_ERROR`] passes), [`OwnedJobs::is_current`] is false.
    pub fn mark_degraded(&self, now: std::time::Instant) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        state.degraded_until = Some(now + DEGRADED_AFTER_ERROR);
    }

    /// Whether decisions may trust the view: it has listed, and no watch error
    /// happened that the watch has not since shown it recovered from. A stale
    /// view would under-count a lane, miss a Job to renew, or call a live Job gone.
    pub fn is_current(&self, now: std::time::Instant) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        self.is_ready() && state.degraded_until.is_none_or(|until| now >= until)
    }

    /// Applies an event; true when a Job stopped being live (or a relist completed).
    fn apply_event(&self, event: Event<Job>) -> bool {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if !matches!(event, Event::Init | Event::InitApply(_)) {
            // The watch is delivering: whatever error came before is behind us.
            state.degraded_until = None;
        }
        match event {
            Event::Init => {
                state.relist = Some(HashMap::new());
                false
            }
            Event::InitApply(job) => {
                let summary = JobSummary::from_job(&job);
                state
                    .relist
                    .get_or_insert_with(HashMap::new)
                    .insert(summary.name.clone(), summary);
                false
            }
            Event::InitDone => {
                let fresh = state.relist.take().unwrap_or_default();
                state.jobs = fresh;
                drop(state);
                self.ready_tx.send_replace(true);
                true
            }
            Event::Apply(job) => {
                let summary = JobSummary::from_job(&job);
                let was_live = state
                    .jobs
                    .get(&summary.name)
                    .is_none_or(JobSummary::is_live);
                let finished = was_live && !summary.is_live();
                state.jobs.insert(summary.name.clone(), summary);
                finished
            }
            Event::Delete(job) => state
                .jobs
                .remove(&job.name_any())
                .is_some_and(|gone| gone.is_live()),
        }
    }

    /// Every cached Job, sorted by name (a stable order for the planners).
    pub fn snapshot(&self) -> Vec<JobSummary> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut jobs: Vec<JobSummary> = state.jobs.values().cloned().collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        jobs
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

    /// Whether the first full list has arrived; before it, counts are unknown.
    pub fn is_ready(&self) -> bool {
        *self.ready_rx.borrow()
    }

    /// A wake-up that fires whenever a cached Job stops being live (it
    /// finished, or was deleted while live) and when a relist completes: the
    /// moments a lane gains room, a death can be reported, a sandbox reaped.
    pub fn finishes(&self) -> Wake {
        Wake::new(self.finished.subscribe())
    }

    /// Waits until the first full list has arrived.
    pub async fn wait_ready(&self) {
        let mut rx = self.ready_rx.clone();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, labels: serde_json::Value, status: serde_json::Value) -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "creationTimestamp": "2026-11-29T17:00:00Z"},
            "status": status,
        }))
        .expect("valid job json")
    }

    #[test]
    fn summary_reads_labels_and_phase() {
        let j = job(
            "tcab-driver-a-1",
            json!({"tcab.dev/job-id": "a", "tcab.dev/claim": "1", "tcab.dev/job-kind": "run"}),
            json!({"failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        );
        let s = JobSummary::from_job(&j);
        assert_eq!(s.lane, Lane::Run);
        assert_eq!(s.job_id.as_deref(), Some("a"));
        assert_eq!(s.claim.as_deref(), Some("1"));
        assert_eq!(s.phase, JobPhase::Failed);
        assert_eq!(s.failed_pods, 1);
        assert!(!s.is_live());

        let done = job(
            "tcab-publisher-b-2",
            json!({}),
            json!({"conditions": [
            {"type": "Complete", "status": "True"}]}),
        );
        let s = JobSummary::from_job(&done);
        assert_eq!((s.lane, s.phase), (Lane::Publish, JobPhase::Succeeded));

        let live = job(
            "x",
            json!({}),
            json!({"active": 1, "conditions": [
            {"type": "Failed", "status": "False"}]}),
        );
        assert!(JobSummary::from_job(&live).is_live());
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
    fn a_watch_error_makes_the_view_not_current_until_the_watch_delivers() {
        let cache = OwnedJobs::new();
        let t0 = std::time::Instant::now();
        assert!(!cache.is_current(t0), "not listed yet");
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        assert!(cache.is_current(t0));
        cache.mark_degraded(t0);
        assert!(!cache.is_current(t0));
        assert!(!cache.is_current(t0 + DEGRADED_AFTER_ERROR / 2));
        assert!(
            cache.is_current(t0 + DEGRADED_AFTER_ERROR),
            "a quiet recovered watch counts again"
        );
        cache.mark_degraded(t0);
        cache.apply(Event::Apply(job("a", json!({}), json!({}))));
        assert!(
            cache.is_current(t0),
            "an event shows the watch delivers again"
        );
    }

    #[test]
    fn relist_replaces_the_cache_and_marks_ready() {
        let cache = OwnedJobs::new();
        assert!(!cache.is_ready());
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job("a", json!({}), json!({}))));
        cache.apply(Event::InitDone);
        assert!(cache.is_ready());
        cache.apply(Event::Apply(job("b", json!({}), json!({}))));
        assert_eq!(
            cache
                .snapshot()
                .iter()
                .map(|j| j.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        // A relist after a watch gap drops what vanished meanwhile.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(job("b", json!({}), json!({}))));
        assert_eq!(cache.len(), 2, "old view stays until the relist completes");
        cache.apply(Event::InitDone);
        assert_eq!(cache.snapshot().len(), 1);
        cache.apply(Event::Delete(job("b", json!({}), json!({}))));
        assert!(cache.is_empty());
    }
}
