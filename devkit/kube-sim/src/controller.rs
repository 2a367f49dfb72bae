//! The Job controller, following pkg/controller/job/job_controller.go of
//! Kubernetes 1.31+ (JobPodReplacementPolicy and JobManagedBy on, so
//! terminal conditions are delayed) for the NonIndexed Jobs the sim serves.
//!
//! - Pods are created from the template with the
//!   `batch.kubernetes.io/job-tracking` finalizer. A create the API refuses
//!   (an admission plugin) records a `FailedCreate` Event and is retried
//!   with back-off (1 s doubling to 60 s).
//! - A pod counts once, when the controller removes its finalizer:
//!   succeeded when `Succeeded`; failed when `Failed`, or when it has a
//!   deletionTimestamp and has not succeeded (`isPodFailed`), or when the
//!   Job has failed. Counted pods go through `uncountedTerminatedPods` and
//!   then into `succeeded`/`failed`.
//! - More failures than `backoffLimit`, or a passed `activeDeadlineSeconds`,
//!   set `FailureTarget` at once and delete the active pods; `Failed` (with
//!   the same reason) is added only when no pod of the Job is terminating
//!   any more (`status.terminating` 0). Success is `SuccessCriteriaMet`,
//!   then `Complete` likewise.
//! - A failed pod is replaced after the pod-failure back-off (10 s doubling
//!   to 10 minutes after consecutive failures).
//! - A Job that has finished, or is gone, has the finalizer of its pods
//!   removed (the orphan worker); `ttlSecondsAfterFinished` deletes it as
//!   the TTL-after-finished controller does (Foreground, with a uid
//!   precondition), and a finished Job being deleted goes once its pods are
//!   gone, like any other.
//!
//! [`reconcile`] is pure; [`run`] carries its [`Plan`] out.

use crate::clock::{k8s_time, parse_time};
use crate::deletion::finalizers;
use crate::events::{EventType, Source};
use crate::http::params::Preconditions;
use crate::objects::{self, condition_true, controller_job, deleting, set_condition};
use crate::sim::{Propagation, Sim};
use crate::store::{EventType as Change, Key, Kind};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// The finalizer the Job controller puts on its pods.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// A pod's phase as the controller reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    /// Pending or Running.
    Active,
    /// Exited 0.
    Succeeded,
    /// Exited non-zero.
    Failed,
}

/// What the controller reads of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Phase.
    pub phase: PodPhase,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// Carries the tracking finalizer.
    pub finalizer: bool,
    /// Its Ready condition is True.
    pub ready: bool,
    /// When it finished (for the failure back-off): the last container's
    /// finishedAt, else its deletionTimestamp.
    pub finished_at: Option<Timestamp>,
}

impl PodView {
    /// Reads a pod.
    pub fn of(pod: &Value) -> Self {
        let phase = match pod["status"]["phase"].as_str() {
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Active,
        };
        let finished_at = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| parse_time(&c["state"]["terminated"]["finishedAt"]))
            .max()
            .or_else(|| parse_time(&pod["metadata"]["deletionTimestamp"]));
        PodView {
            name: objects::name(pod).to_string(),
            uid: objects::uid(pod).to_string(),
            phase,
            deleting: deleting(pod),
            finalizer: finalizers(pod).contains(&TRACKING_FINALIZER),
            ready: condition_true(pod, "Ready"),
            finished_at,
        }
    }

    /// `isPodFailed` with the default `podReplacementPolicy`.
    fn failed(&self) -> bool {
        self.phase == PodPhase::Failed || (self.deleting && self.phase != PodPhase::Succeeded)
    }

    fn active(&self) -> bool {
        self.phase == PodPhase::Active && !self.deleting
    }

    fn terminating(&self) -> bool {
        self.phase == PodPhase::Active && self.deleting
    }
}

/// What the controller remembers of one Job between reconciles (upstream
/// keeps the same in its back-off store and work queue).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Track {
    /// Pod failures since the last success, and when the last one finished.
    pub failures: u32,
    /// When the last counted failure finished.
    pub last_failure: Option<Timestamp>,
    /// Pod creates the API refused in a row.
    pub create_errors: u32,
    /// No create before this (API back-off after a refused create).
    pub create_after: Option<Timestamp>,
    /// The never-gets-a-pod fault applies to this Job.
    pub never_pod: bool,
}

/// An Event the controller records about the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    /// Normal or Warning.
    pub etype: EventType,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// What to do for one Job, in order: delete pods, create pods, write
/// `interim_status` (when set), remove finalizers, write `status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Pods to delete (graceful, default options).
    pub delete_pods: Vec<String>,
    /// How many pods to create from the template.
    pub create_pods: usize,
    /// The status written before finalizers are removed (new uncounted pods,
    /// a new FailureTarget or SuccessCriteriaMet).
    pub interim_status: Option<Value>,
    /// Pods whose tracking finalizer goes.
    pub remove_finalizers: Vec<String>,
    /// The Job's final `status` (written only when it differs).
    pub status: Value,
    /// Events about the Job.
    pub events: Vec<JobEvent>,
    /// TTL passed: delete the Job as `ttlafterfinished` does (Foreground
    /// propagation, the Job's uid as a precondition).
    pub delete_job: bool,
    /// Foreground deletion done: remove the Job.
    pub remove_job: bool,
    /// Reconcile again at this time.
    pub wake_at: Option<Timestamp>,
}

impl Plan {
    /// Adjusts the plan after `n` of its pod creates were refused: they are
    /// not active.
    pub fn creates_failed(&mut self, n: usize) {
        for s in [&mut self.status]
            .into_iter()
            .chain(self.interim_status.as_mut())
        {
            let active = s["active"].as_i64().unwrap_or(0) - n as i64;
            let m = objects::ensure_object(s);
            if active > 0 {
                m.insert("active".into(), json!(active));
            } else {
                m.remove("active");
            }
        }
    }
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

fn wake(plan: &mut Plan, at: Timestamp) {
    plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
}

fn uid_list(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn set_counts(
    status: &mut Value,
    active: i64,
    succeeded: i64,
    failed: i64,
    ready: i64,
    terminating: i64,
) {
    let m = objects::ensure_object(status);
    for (k, v) in [
        ("active", active),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if v > 0 {
            m.insert(k.into(), json!(v));
        } else {
            m.remove(k);
        }
    }
    m.insert("ready".into(), json!(ready));
    m.insert("terminating".into(), json!(terminating));
}

fn set_uncounted(status: &mut Value, succeeded: &BTreeSet<String>, failed: &BTreeSet<String>) {
    let mut u = json!({});
    if !succeeded.is_empty() {
        u["succeeded"] = json!(succeeded);
    }
    if !failed.is_empty() {
        u["failed"] = json!(failed);
    }
    status["uncountedTerminatedPods"] = u;
}

/// The pod-failure back-off before the next create (`getRemainingTime`).
fn failure_back_off(track: &Track, now: Timestamp) -> Option<Timestamp> {
    if track.failures == 0 {
        return None;
    }
    let mut secs: i64 = 10;
    for _ in 1..track.failures {
        secs = (secs * 2).min(600);
    }
    let due = track.last_failure? + SignedDuration::from_secs(secs.min(600));
    (due > now).then_some(due)
}

/// Decides what to do for a Job, given its pods, at `now`. Pure.
pub fn reconcile(job: &Value, pods: &[PodView], track: &mut Track, now: Timestamp) -> Plan {
    let mut pods: Vec<&PodView> = pods.iter().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let spec = &job["spec"];
    let mut plan = Plan::default();
    let mut st = if job["status"].is_object() {
        job["status"].clone()
    } else {
        json!({})
    };
    let mut wrapper = json!({"status": st.clone()});

    if (condition_true(&wrapper, "Complete") || condition_true(&wrapper, "Failed"))
        && !deleting(job)
    {
        // Finished: the orphan worker frees what still has a finalizer; TTL
        // (`processTTL` leaves a Job being deleted alone; such a Job goes on
        // to the deletion below).
        plan.remove_finalizers = pods
            .iter()
            .filter(|p| p.finalizer)
            .map(|p| p.name.clone())
            .collect();
        if let Some(ttl) = int(&spec["ttlSecondsAfterFinished"]) {
            let done_at = parse_time(&st["completionTime"])
                .or_else(|| finish_time(&wrapper))
                .unwrap_or(now);
            let due = done_at + SignedDuration::from_secs(ttl);
            if now >= due {
                plan.delete_job = true;
            } else {
                wake(&mut plan, due);
            }
        }
        plan.status = st;
        return plan;
    }

    if deleting(job) {
        // Foreground deletion: the garbage collector deletes the pods; the
        // controller lets go of them; the Job goes when none is left. An
        // orphaning delete (the `orphan` finalizer, released by
        // `Sim::delete_job` itself) deletes no pod.
        let foreground = job["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == crate::sim::FOREGROUND_FINALIZER));
        plan.delete_pods = pods
            .iter()
            .filter(|p| foreground && !p.deleting)
            .map(|p| p.name.clone())
            .collect();
        plan.remove_finalizers = pods
            .iter()
            .filter(|p| p.finalizer)
            .map(|p| p.name.clone())
            .collect();
        plan.remove_job = foreground && pods.is_empty();
        plan.status = st;
        return plan;
    }

    let uncounted_succeeded = uid_list(&st["uncountedTerminatedPods"]["succeeded"]);
    let uncounted_failed = uid_list(&st["uncountedTerminatedPods"]["failed"]);
    let tracked = |p: &&&PodView| p.finalizer;
    let new_succeeded: Vec<&&PodView> = pods
        .iter()
        .filter(tracked)
        .filter(|p| p.phase == PodPhase::Succeeded && !uncounted_succeeded.contains(&p.uid))
        .collect();
    let new_failed: Vec<&&PodView> = pods
        .iter()
        .filter(tracked)
        .filter(|p| p.failed() && !uncounted_failed.contains(&p.uid))
        .collect();
    let base_succeeded = int(&st["succeeded"]).unwrap_or(0);
    let base_failed = int(&st["failed"]).unwrap_or(0);
    let succeeded = base_succeeded + (new_succeeded.len() + uncounted_succeeded.len()) as i64;
    let failed = base_failed + (new_failed.len() + uncounted_failed.len()) as i64;

    // The failure back-off record.
    if !new_succeeded.is_empty() {
        track.failures = 0;
        track.last_failure = None;
    } else if !new_failed.is_empty() {
        track.failures += new_failed.len() as u32;
        let latest = new_failed
            .iter()
            .filter_map(|p| p.finished_at)
            .max()
            .unwrap_or(now);
        track.last_failure = Some(track.last_failure.map_or(latest, |l| l.max(latest)));
    }

    let suspended = spec["suspend"] == true;
    if st["startTime"].is_null() && !suspended {
        st["startTime"] = json!(k8s_time(now));
    }

    let active: Vec<&&PodView> = pods.iter().filter(|p| p.active()).collect();
    let mut terminating = pods.iter().filter(|p| p.terminating()).count() as i64;
    let mut ready = active.iter().filter(|p| p.ready).count() as i64;

    // The terminal condition this sync works towards: (type, reason, message).
    let mut finished: Option<(&str, String, String)> = None;
    let mut new_condition = false;
    if condition_true(&wrapper, "SuccessCriteriaMet") {
        finished =
            condition_of(&wrapper, "SuccessCriteriaMet").map(|(r, m)| ("SuccessCriteriaMet", r, m));
    } else if let Some((r, m)) = condition_of(&wrapper, "FailureTarget") {
        finished = Some(("FailureTarget", r, m));
    } else if failed > int(&spec["backoffLimit"]).unwrap_or(6) {
        finished = Some((
            "FailureTarget",
            "BackoffLimitExceeded".into(),
            "Job has reached the specified backoff limit".into(),
        ));
        new_condition = true;
    } else if let (Some(ads), Some(start), false) = (
        int(&spec["activeDeadlineSeconds"]),
        parse_time(&st["startTime"]),
        suspended,
    ) {
        let due = start + SignedDuration::from_secs(ads);
        if now >= due {
            finished = Some((
                "FailureTarget",
                "DeadlineExceeded".into(),
                "Job was active longer than specified deadline".into(),
            ));
            new_condition = true;
        } else {
            wake(&mut plan, due);
        }
    }
    let failing = finished.as_ref().is_some_and(|f| f.0 == "FailureTarget");

    let completions = int(&spec["completions"]);
    if failing {
        // deleteActivePods: every active pod, finalizers kept.
        plan.delete_pods = active.iter().map(|p| p.name.clone()).collect();
        for n in &plan.delete_pods {
            plan.events.push(JobEvent {
                etype: EventType::Normal,
                reason: "SuccessfulDelete".into(),
                message: format!("Deleted pod: {n}"),
            });
        }
        terminating += active.len() as i64;
        ready = 0;
        set_counts(&mut st, 0, base_succeeded, base_failed, ready, terminating);
    } else {
        let mut active_n = active.len() as i64;
        if finished.is_none() {
            let parallelism = int(&spec["parallelism"]).unwrap_or(1);
            let want = if suspended {
                0
            } else {
                match completions {
                    Some(c) => (c - succeeded).clamp(0, parallelism),
                    None if succeeded > 0 => active_n,
                    None => parallelism,
                }
            };
            if active_n > want {
                // activePodsForRemoval: not ready before ready, then by name.
                let mut victims: Vec<&&&PodView> = active.iter().collect();
                victims.sort_by_key(|p| (p.ready, p.name.clone()));
                let rm: Vec<String> = victims
                    .iter()
                    .take((active_n - want) as usize)
                    .map(|p| p.name.clone())
                    .collect();
                terminating += rm.len() as i64;
                ready -= active
                    .iter()
                    .filter(|p| p.ready && rm.contains(&p.name))
                    .count() as i64;
                active_n -= rm.len() as i64;
                for n in &rm {
                    plan.events.push(JobEvent {
                        etype: EventType::Normal,
                        reason: "SuccessfulDelete".into(),
                        message: format!("Deleted pod: {n}"),
                    });
                }
                plan.delete_pods = rm;
            } else if want - active_n > 0 && !track.never_pod {
                let hold = failure_back_off(track, now)
                    .into_iter()
                    .chain(track.create_after.filter(|t| *t > now))
                    .max();
                match hold {
                    Some(t) => wake(&mut plan, t),
                    None => {
                        plan.create_pods = (want - active_n) as usize;
                        active_n = want;
                    }
                }
            }
            let complete = match completions {
                Some(c) => succeeded >= c && active_n == 0,
                None => succeeded > 0 && active_n == 0,
            };
            if complete {
                finished = Some((
                    "SuccessCriteriaMet",
                    "CompletionsReached".into(),
                    "Reached expected number of succeeded pods".into(),
                ));
                new_condition = true;
            }
        }
        set_counts(
            &mut st,
            active_n,
            base_succeeded,
            base_failed,
            ready,
            terminating,
        );
    }

    // syncJob's needsStatusUpdate: the counts it set differ from the
    // stored ones (`ready` and `terminating` are pointers there: absent is
    // not 0). It makes trackJobStatusAndRemoveFinalizers flush the status
    // before it enacts the terminal condition, so a Job that finishes in
    // the sync in which its last pod stops terminating gets two writes:
    // `terminating: 0` with FailureTarget, then Failed.
    let stored = &job["status"];
    let count_changed = |k: &str, pointer: bool| {
        let was = stored[k].as_i64();
        let now = st[k].as_i64();
        if pointer {
            was != now
        } else {
            was.unwrap_or(0) != now.unwrap_or(0)
        }
    };
    let needs_status_update = count_changed("active", false)
        || count_changed("ready", true)
        || count_changed("terminating", true);

    // trackJobStatusAndRemoveFinalizers.
    let mut us = uncounted_succeeded.clone();
    let mut uf = uncounted_failed.clone();
    let mut needs_flush = needs_status_update;
    for p in pods.iter().filter(|p| p.finalizer) {
        let considered_failed = p.failed();
        let can_remove = finished.is_some() || p.phase == PodPhase::Succeeded || considered_failed;
        if !can_remove {
            continue;
        }
        plan.remove_finalizers.push(p.name.clone());
        if p.phase == PodPhase::Succeeded && !uf.contains(&p.uid) {
            needs_flush |= us.insert(p.uid.clone());
        } else if considered_failed || failing {
            needs_flush |= uf.insert(p.uid.clone());
        }
    }
    let mut interim = st.clone();
    set_uncounted(&mut interim, &us, &uf);
    if let Some((kind, reason, message)) = &finished
        && new_condition
    {
        let mut w = json!({"status": interim});
        set_condition(&mut w, kind, reason, message, now);
        interim = w["status"].take();
        needs_flush = true;
    }
    if needs_flush || new_condition {
        plan.interim_status = Some(interim.clone());
    }
    // After the finalizers are gone, the uncounted pods are counted.
    let mut fin = interim;
    let active_now = int(&fin["active"]).unwrap_or(0);
    set_counts(
        &mut fin,
        active_now,
        base_succeeded + us.len() as i64,
        base_failed + uf.len() as i64,
        ready,
        terminating,
    );
    set_uncounted(&mut fin, &BTreeSet::new(), &BTreeSet::new());
    wrapper = json!({"status": fin});
    if let Some((kind, reason, message)) = finished
        && terminating == 0
    {
        let (terminal, event) = if kind == "FailureTarget" {
            (
                "Failed",
                JobEvent {
                    etype: EventType::Warning,
                    reason: reason.clone(),
                    message: message.clone(),
                },
            )
        } else {
            (
                "Complete",
                JobEvent {
                    etype: EventType::Normal,
                    reason: "Completed".into(),
                    message: "Job completed".into(),
                },
            )
        };
        set_condition(&mut wrapper, terminal, &reason, &message, now);
        if terminal == "Complete" {
            wrapper["status"]["completionTime"] = json!(k8s_time(now));
        }
        plan.events.push(event);
        plan.wake_at = None;
        if let Some(ttl) = int(&spec["ttlSecondsAfterFinished"]) {
            wake(&mut plan, now + SignedDuration::from_secs(ttl));
        }
    }
    if failing {
        plan.wake_at = plan.wake_at.filter(|_| condition_true(&wrapper, "Failed"));
    }
    plan.status = wrapper["status"].take();
    plan
}

fn condition_of(wrapper: &Value, kind: &str) -> Option<(String, String)> {
    wrapper["status"]["conditions"]
        .as_array()?
        .iter()
        .find_map(|c| {
            (c["type"] == kind && c["status"] == "True").then(|| {
                (
                    c["reason"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
        })
}

fn finish_time(job: &Value) -> Option<Timestamp> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find_map(|c| {
            (c["type"] == "Failed" && c["status"] == "True")
                .then(|| parse_time(&c["lastTransitionTime"]))
                .flatten()
        })
}

/// The controller's loop; runs until the store's channel closes.
pub async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    let mut tracks: HashMap<String, Track> = HashMap::new();
    let mut timers: BTreeSet<(Timestamp, Key)> = BTreeSet::new();
    let mut dirty: BTreeSet<Key> = all_jobs(&sim);
    // Jobs a pod event queued for a sync after the batch period.
    let mut batched: HashMap<Key, Timestamp> = HashMap::new();
    release_orphans(&sim);
    loop {
        for key in std::mem::take(&mut dirty) {
            if let Some(at) = reconcile_one(&sim, &key, &mut tracks) {
                timers.insert((at, key));
            }
        }
        let next_timer = timers.first().map(|(t, _)| *t);
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    let mut later = Batch { timers: &mut timers, batched: &mut batched };
                    mark(&sim, &ev, &mut dirty, &mut later, &mut tracks)
                }
                Err(RecvError::Lagged(_)) => {
                    dirty = all_jobs(&sim);
                    release_orphans(&sim);
                }
                Err(RecvError::Closed) => return,
            },
            _ = async {
                match next_timer {
                    Some(t) => sim.clock.sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {
                let now = sim.clock.now();
                while let Some((t, _)) = timers.first() {
                    if *t > now { break; }
                    if let Some((_, k)) = timers.pop_first() {
                        if batched.get(&k).is_some_and(|at| *at <= now) {
                            batched.remove(&k);
                        }
                        dirty.insert(k);
                    }
                }
            }
            _ = sim.controller_wake.notified() => dirty = all_jobs(&sim),
        }
        // Batch whatever else is queued.
        loop {
            match rx.try_recv() {
                Ok(ev) => {
                    let mut later = Batch {
                        timers: &mut timers,
                        batched: &mut batched,
                    };
                    mark(&sim, &ev, &mut dirty, &mut later, &mut tracks)
                }
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                    dirty = all_jobs(&sim);
                    release_orphans(&sim);
                }
                Err(_) => break,
            }
        }
    }
}

fn all_jobs(sim: &Sim) -> BTreeSet<Key> {
    sim.store
        .list(Kind::Job, None, |_| true)
        .1
        .iter()
        .map(|j| {
            Key::new(
                Kind::Job,
                j["metadata"]["namespace"].as_str().unwrap_or(""),
                objects::name(j),
            )
        })
        .collect()
}

/// Removes the tracking finalizer of pods no unfinished Job controls.
fn release_orphans(sim: &Sim) {
    for p in sim
        .store
        .list(Kind::Pod, None, |p| {
            finalizers(p).contains(&TRACKING_FINALIZER)
        })
        .1
    {
        let ns = p["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        release_if_orphan(sim, &ns, &p);
    }
}

fn release_if_orphan(sim: &Sim, ns: &str, pod: &Value) {
    let owner = controller_job(pod).and_then(|(name, uid)| {
        sim.store
            .get(&Key::new(Kind::Job, ns, name))
            .filter(|j| objects::uid(j) == uid)
    });
    let orphan = match owner {
        None => true,
        Some(j) => condition_true(&j, "Complete") || condition_true(&j, "Failed"),
    };
    if orphan {
        remove_finalizer(sim, &Key::new(Kind::Pod, ns, objects::name(pod)));
    }
}

/// Takes the Job controller's tracking finalizer off a pod.
pub(crate) fn remove_finalizer(sim: &Sim, key: &Key) {
    let _ = sim.store.update(key, |p| {
        let Some(fs) = p["metadata"]["finalizers"].as_array_mut() else {
            return Ok(false);
        };
        let before = fs.len();
        fs.retain(|f| f != TRACKING_FINALIZER);
        let changed = fs.len() != before;
        if fs.is_empty()
            && let Some(m) = p["metadata"].as_object_mut()
        {
            m.remove("finalizers");
        }
        Ok(changed)
    });
}

/// How long a pod event waits before the sync it asks for
/// (`SyncJobBatchPeriod`: `enqueueSyncJobBatched` for every pod add, update
/// and delete), so the changes of one second are seen in one sync; a pod
/// that stops within a second of being deleted is never counted
/// terminating. Job events sync at once.
pub const SYNC_JOB_BATCH_PERIOD: SignedDuration = SignedDuration::from_secs(1);

/// The syncs queued for later (`queue.AddAfter`: a Job already waiting
/// keeps its earlier time).
struct Batch<'a> {
    timers: &'a mut BTreeSet<(Timestamp, Key)>,
    batched: &'a mut HashMap<Key, Timestamp>,
}

impl Batch<'_> {
    fn add(&mut self, key: Key, now: Timestamp) {
        let at = now + SYNC_JOB_BATCH_PERIOD;
        if self.batched.get(&key).is_some_and(|t| *t <= at) {
            return;
        }
        self.batched.insert(key.clone(), at);
        self.timers.insert((at, key));
    }
}

fn mark(
    sim: &Sim,
    ev: &crate::store::Event,
    dirty: &mut BTreeSet<Key>,
    later: &mut Batch<'_>,
    tracks: &mut HashMap<String, Track>,
) {
    match ev.key.kind {
        Kind::Job if ev.etype == Change::Deleted => {
            tracks.remove(objects::uid(&ev.object));
            // cleanupPodFinalizers
            for p in sim.store.owned_pods(objects::uid(&ev.object)) {
                if finalizers(&p).contains(&TRACKING_FINALIZER) {
                    remove_finalizer(sim, &Key::new(Kind::Pod, &ev.key.ns, objects::name(&p)));
                }
            }
        }
        Kind::Job => {
            dirty.insert(ev.key.clone());
        }
        Kind::Pod => match controller_job(&ev.object) {
            Some((job, _)) => {
                later.add(Key::new(Kind::Job, &ev.key.ns, job), sim.clock.now());
                if ev.etype != Change::Deleted
                    && finalizers(&ev.object).contains(&TRACKING_FINALIZER)
                {
                    release_if_orphan(sim, &ev.key.ns, &ev.object);
                }
            }
            None if ev.etype != Change::Deleted
                && finalizers(&ev.object).contains(&TRACKING_FINALIZER) =>
            {
                remove_finalizer(sim, &ev.key);
            }
            None => {}
        },
        _ => {}
    }
}

fn record(sim: &Sim, job: &Value, e: &JobEvent) {
    sim.record(
        Kind::Job,
        job,
        e.etype,
        &e.reason,
        &e.message,
        &Source::component("job-controller"),
    );
}

fn reconcile_one(
    sim: &Arc<Sim>,
    key: &Key,
    tracks: &mut HashMap<String, Track>,
) -> Option<Timestamp> {
    let job = sim.store.get(key)?;
    let uid = objects::uid(&job).to_string();
    let track = tracks.entry(uid.clone()).or_insert_with(|| Track {
        never_pod: sim.faults.take_never_pod(&key.name),
        ..Track::default()
    });
    let pods: Vec<PodView> = sim
        .pods_of_job(&key.ns, &job)
        .iter()
        .map(|p| PodView::of(p))
        .collect();
    let now = sim.clock.now();
    let mut plan = reconcile(&job, &pods, track, now);
    if plan.delete_job {
        let fresh = Preconditions {
            uid: Some(uid),
            resource_version: None,
        };
        let _ = sim.delete_job(&key.ns, &key.name, Propagation::Foreground, &fresh);
        return None;
    }
    for p in &plan.delete_pods {
        let _ = sim.delete_pod(&key.ns, p, None);
    }
    let mut created = 0;
    for _ in 0..plan.create_pods {
        let mut pod = objects::pod_for_job(&job);
        pod["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
        match sim.create_pod_internal(&key.ns, pod) {
            Ok(pod) => {
                created += 1;
                track.create_errors = 0;
                track.create_after = None;
                record(
                    sim,
                    &job,
                    &JobEvent {
                        etype: EventType::Normal,
                        reason: "SuccessfulCreate".into(),
                        message: format!("Created pod: {}", objects::name(&pod)),
                    },
                );
            }
            Err(e) => {
                track.create_errors += 1;
                let back_off =
                    Duration::from_secs(1 << track.create_errors.min(7).saturating_sub(1))
                        .min(Duration::from_secs(60));
                let at = now + SignedDuration::try_from(back_off).unwrap_or(SignedDuration::ZERO);
                track.create_after = Some(at);
                plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
                record(
                    sim,
                    &job,
                    &JobEvent {
                        etype: EventType::Warning,
                        reason: "FailedCreate".into(),
                        message: format!("Error creating: {}", e.message),
                    },
                );
                break; // slow start: the rest is not tried this sync
            }
        }
    }
    if created < plan.create_pods {
        plan.creates_failed(plan.create_pods - created);
    }
    let write = |status: &Value| {
        let status = status.clone();
        let _ = sim.store.update(key, |j| {
            if j["status"] == status || objects::uid(j) != uid {
                return Ok(false);
            }
            j["status"] = status;
            Ok(true)
        });
    };
    if let Some(interim) = &plan.interim_status {
        write(interim);
    }
    for p in &plan.remove_finalizers {
        remove_finalizer(sim, &Key::new(Kind::Pod, &key.ns, p));
    }
    write(&plan.status);
    for e in &plan.events {
        record(sim, &job, e);
    }
    if plan.remove_job {
        let _ = sim.store.update(key, |j| {
            if let Some(m) = j["metadata"].as_object_mut() {
                m.remove("finalizers");
            }
            Ok(true)
        });
        sim.store.remove(key);
        return None;
    }
    plan.wake_at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: Value) -> Value {
        let mut j = json!({"metadata": {"name": "j", "uid": "u"}, "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1}, "status": {}});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                j["spec"][k] = v;
            }
        }
        j
    }
    fn pod(name: &str, phase: PodPhase) -> PodView {
        PodView {
            name: name.into(),
            uid: format!("uid-{name}"),
            phase,
            deleting: false,
            finalizer: true,
            ready: phase == PodPhase::Active,
            finished_at: None,
        }
    }
    fn deleting(p: PodView) -> PodView {
        PodView {
            deleting: true,
            ..p
        }
    }
    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn cond<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
        status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind && c["status"] == "True")
    }

    #[test]
    fn creates_one_pod_then_completes_after_the_finalizer_is_gone() {
        let mut tr = Track::default();
        let mut j = job(json!({"ttlSecondsAfterFinished": 10}));
        let p = reconcile(&j, &[], &mut tr, t(0));
        assert_eq!(p.create_pods, 1);
        assert_eq!(p.status["active"], 1);
        j["status"] = p.status;
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(1));
        assert_eq!(p.create_pods, 0);
        assert_eq!(p.status["ready"], 1);
        j["status"] = p.status;
        let p = reconcile(&j, &[pod("a", PodPhase::Succeeded)], &mut tr, t(2));
        assert_eq!(p.remove_finalizers, vec!["a".to_string()]);
        let interim = p.interim_status.clone().unwrap();
        assert_eq!(
            interim["uncountedTerminatedPods"]["succeeded"],
            json!(["uid-a"])
        );
        assert!(
            cond(&interim, "SuccessCriteriaMet").is_some() && cond(&interim, "Complete").is_none()
        );
        assert!(cond(&p.status, "Complete").is_some());
        assert_eq!(p.status["succeeded"], 1);
        assert_eq!(p.status["uncountedTerminatedPods"], json!({}));
        assert_eq!(p.wake_at, Some(t(12)));
        assert_eq!(p.events[0].reason, "Completed");
        j["status"] = p.status;
        let mut counted = pod("a", PodPhase::Succeeded);
        counted.finalizer = false;
        assert!(reconcile(&j, &[counted.clone()], &mut tr, t(12)).delete_job);
        // Marked by that Foreground delete: the TTL leaves it alone, the
        // collector deletes the pod, and the Job goes once none is left.
        j["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:00:12Z");
        j["metadata"]["finalizers"] = json!([crate::sim::FOREGROUND_FINALIZER]);
        let p = reconcile(&j, &[counted], &mut tr, t(13));
        assert!(!p.delete_job && !p.remove_job);
        assert_eq!(p.delete_pods, vec!["a".to_string()]);
        let p = reconcile(&j, &[], &mut tr, t(14));
        assert!(!p.delete_job && p.remove_job);
    }

    #[test]
    fn a_failure_with_backoff_zero_sets_failure_target_then_failed_at_once_when_nothing_terminates()
    {
        let mut tr = Track::default();
        let mut j = job(json!({}));
        j["status"] = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(0)).status;
        let p = reconcile(&j, &[pod("a", PodPhase::Failed)], &mut tr, t(1));
        assert_eq!(p.create_pods, 0);
        assert_eq!(p.remove_finalizers, vec!["a".to_string()]);
        let interim = p.interim_status.unwrap();
        assert_eq!(
            cond(&interim, "FailureTarget").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert!(cond(&interim, "Failed").is_none());
        assert_eq!(
            interim["uncountedTerminatedPods"]["failed"],
            json!(["uid-a"])
        );
        assert_eq!(
            cond(&p.status, "Failed").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert_eq!(p.status["failed"], 1);
        assert_eq!(p.status["terminating"], 0);
    }

    #[test]
    fn a_running_pod_deleted_under_its_job_fails_it_but_failed_waits_for_termination() {
        let mut tr = Track::default();
        let mut j = job(json!({}));
        j["status"] = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(0)).status;
        let terminating = deleting(pod("a", PodPhase::Active));
        let p = reconcile(&j, std::slice::from_ref(&terminating), &mut tr, t(1));
        assert!(cond(&p.status, "FailureTarget").is_some());
        assert!(
            cond(&p.status, "Failed").is_none(),
            "the pod still terminates"
        );
        assert_eq!(p.status["failed"], 1, "counted at once");
        assert_eq!(p.status["terminating"], 1);
        assert_eq!(p.remove_finalizers, vec!["a".to_string()]);
        assert_eq!(p.create_pods, 0);
        j["status"] = p.status;
        // finalizer gone, still terminating: nothing new
        let released = PodView {
            finalizer: false,
            ..terminating
        };
        let p = reconcile(&j, std::slice::from_ref(&released), &mut tr, t(2));
        assert!(cond(&p.status, "Failed").is_none());
        assert_eq!(p.status["failed"], 1);
        assert!(p.interim_status.is_none());
        // the kubelet finished it: Failed
        let done = PodView {
            phase: PodPhase::Failed,
            ..released
        };
        let p = reconcile(&j, &[done], &mut tr, t(3));
        assert_eq!(
            cond(&p.status, "Failed").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert_eq!(p.status["failed"], 1);
        j["status"] = p.status;
        assert_eq!(reconcile(&j, &[], &mut tr, t(4)).status, j["status"]);
    }

    #[test]
    fn backoff_limit_allows_retries_after_the_pod_failure_back_off() {
        let mut tr = Track::default();
        let mut j = job(json!({"backoffLimit": 1}));
        let mut a = pod("a", PodPhase::Failed);
        a.finished_at = Some(t(0));
        let p = reconcile(&j, &[a.clone()], &mut tr, t(1));
        assert_eq!(p.create_pods, 0, "10 s back-off first");
        assert_eq!(p.wake_at, Some(t(10)));
        j["status"] = p.status;
        a.finalizer = false;
        let p = reconcile(&j, &[a.clone()], &mut tr, t(10));
        assert_eq!(p.create_pods, 1);
        j["status"] = p.status;
        let mut b = pod("b", PodPhase::Failed);
        b.finished_at = Some(t(11));
        let p = reconcile(&j, &[a, b], &mut tr, t(12));
        assert_eq!(p.create_pods, 0);
        assert_eq!(p.status["failed"], 2);
        assert!(cond(&p.status, "Failed").is_some());
    }

    #[test]
    fn deadline_sets_failure_target_deletes_the_pod_and_fails_once_it_is_gone() {
        let mut tr = Track::default();
        let mut j = job(json!({"activeDeadlineSeconds": 5}));
        let p = reconcile(&j, &[], &mut tr, t(0));
        assert_eq!(p.wake_at, Some(t(5)));
        j["status"] = p.status;
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(5));
        assert_eq!(p.delete_pods, vec!["a".to_string()]);
        assert_eq!(
            p.remove_finalizers,
            vec!["a".to_string()],
            "counted failed with the Job"
        );
        assert_eq!(
            cond(&p.status, "FailureTarget").unwrap()["reason"],
            "DeadlineExceeded"
        );
        assert!(cond(&p.status, "Failed").is_none());
        assert_eq!(p.status["terminating"], 1);
        assert_eq!(p.status["failed"], 1);
        j["status"] = p.status;
        let gone = reconcile(&j, &[], &mut tr, t(8));
        assert_eq!(
            cond(&gone.status, "Failed").unwrap()["reason"],
            "DeadlineExceeded"
        );
        assert_eq!(gone.status["failed"], 1);
        // terminating went to 0 in this sync: upstream flushes that
        // (needsStatusUpdate) before it enacts Failed, two writes
        let interim = gone.interim_status.expect("the flush before Failed");
        assert_eq!(interim["terminating"], 0);
        assert!(cond(&interim, "FailureTarget").is_some());
        assert!(cond(&interim, "Failed").is_none());
    }

    #[test]
    fn a_job_without_pods_fails_at_its_deadline_at_once() {
        let mut tr = Track {
            never_pod: true,
            ..Track::default()
        };
        let mut j = job(json!({"activeDeadlineSeconds": 5}));
        let p = reconcile(&j, &[], &mut tr, t(0));
        assert_eq!(p.create_pods, 0);
        j["status"] = p.status;
        let p = reconcile(&j, &[], &mut tr, t(5));
        assert!(cond(&p.status, "FailureTarget").is_some() && cond(&p.status, "Failed").is_some());
        assert!(p.status["failed"].is_null());
        assert!(p.interim_status.is_some());
    }

    #[test]
    fn refused_creates_are_not_active() {
        let mut tr = Track::default();
        let j = job(json!({}));
        let mut p = reconcile(&j, &[], &mut tr, t(0));
        p.creates_failed(1);
        assert!(p.status["active"].is_null());
    }

    #[test]
    fn foreground_deletion_and_finished_jobs_release_their_pods() {
        let mut j = job(json!({}));
        j["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        j["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        let mut tr = Track::default();
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(0));
        assert_eq!(
            (p.delete_pods.len(), p.remove_finalizers.len(), p.remove_job),
            (1, 1, false)
        );
        assert!(reconcile(&j, &[], &mut tr, t(1)).remove_job);
        // marked to orphan: the pods are let go of, not deleted
        j["metadata"]["finalizers"] = json!(["orphan"]);
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(2));
        assert_eq!(
            (p.delete_pods.len(), p.remove_finalizers.len(), p.remove_job),
            (0, 1, false)
        );
        let mut done = job(json!({}));
        done["status"]["conditions"] = json!([{"type": "Failed", "status": "True"}]);
        let p = reconcile(&done, &[pod("a", PodPhase::Failed)], &mut tr, t(0));
        assert_eq!(p.remove_finalizers, vec!["a".to_string()]);
    }
}
