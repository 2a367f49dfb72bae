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
//!
//! This file holds the view itself ([`OwnedJobs`]: its state, the watch's
//! edits, the reads the loops make and their wake-ups). Beside it:
//! `summary` (what is kept of one Job, [`JobSummary`], and the
//! [`Milestone`]s the metrics are told), `job_watch` (the watch that feeds
//! the view, [`OwnedJobs::watch`]), `tracker` (the pods that outlive their
//! Job, followed until they finish), [`pods`] (what is decided about those
//! pods, pure), [`watched`] (the part of a Job the watch parses) and
//! [`job_names`] (a Job's name and labels, packed).

pub mod job_names;
mod job_watch;
pub mod pods;
mod summary;
mod tracker;
pub mod watched;

use crate::lane::Lane;
use crate::tick::Wake;
use jiff::Timestamp;
pub use job_names::JobNames;
use job_watch::summarised;
pub use job_watch::{WatchSettings, watch_error_reason, watch_error_verb};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::Event;
use pods::Gone;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
pub use summary::{
    JobCondition, JobPhase, JobSummary, Milestone, MilestoneSink, Rare, clamp_to_i32, milestone,
    summaries,
};
use tokio::sync::{mpsc, watch};
use tracker::Check;
pub use watched::{Summarize, WatchedJob};

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
}

#[cfg(test)]
mod tests {
    use super::summary::tests::job;
    use super::*;
    use crate::metrics::labels::JobOutcome;
    use serde_json::json;

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

    #[test]
    fn an_untracked_cache_drops_a_deleted_live_job_at_once() {
        let cache = OwnedJobs::listed([job("j", json!({}), json!({"active": 1}))]);
        let finishes = cache.finishes();
        cache.apply(Event::Delete(job("j", json!({}), json!({}))));
        assert!(finishes.is_pending());
        assert_eq!(cache.live_count(Lane::Run), 0);
    }
}
