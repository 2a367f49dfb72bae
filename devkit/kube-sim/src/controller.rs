//! The Job controller. One task, level-triggered: any change to a Job or to
//! a pod it controls (or a timer) marks the Job dirty; the pure
//! [`reconcile`] turns the Job, its pods and what the controller remembers
//! into a [`Plan`], and the task carries the plan out.

use crate::clock::{k8s_time, parse_time};
use crate::objects::{self, condition_true, controller_job, deleting, set_condition};
use crate::sim::{Propagation, Sim};
use crate::store::{EventType, Key, Kind};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

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
    /// Phase.
    pub phase: PodPhase,
    /// Has a deletionTimestamp.
    pub deleting: bool,
}

impl PodView {
    /// Reads a pod.
    pub fn of(pod: &Value) -> Self {
        let phase = match pod["status"]["phase"].as_str() {
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Active,
        };
        PodView {
            name: objects::name(pod).to_string(),
            phase,
            deleting: deleting(pod),
        }
    }
}

/// What the controller remembers of one Job between reconciles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Track {
    /// Every pod it has seen or created.
    pub seen: BTreeSet<String>,
    /// Pods counted: `true` = succeeded, `false` = failed (incl. vanished).
    pub counted: BTreeMap<String, bool>,
    /// The never-gets-a-pod fault applies to this Job.
    pub never_pod: bool,
}

/// What to do for one Job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The Job's new `status` (written only when it differs).
    pub status: Value,
    /// Create one pod from the template.
    pub create_pod: bool,
    /// Pods to delete gracefully.
    pub delete_pods: Vec<String>,
    /// TTL passed: delete the Job (background propagation).
    pub delete_job: bool,
    /// Foreground deletion done: remove the Job.
    pub remove_job: bool,
    /// Reconcile again at this time.
    pub wake_at: Option<Timestamp>,
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// Decides what to do for a Job, given its pods, at `now`. Pure.
pub fn reconcile(job: &Value, pods: &[PodView], track: &mut Track, now: Timestamp) -> Plan {
    let mut pods: Vec<&PodView> = pods.iter().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let spec = &job["spec"];
    let mut wrapper = json!({"status": job["status"].clone()});
    if !wrapper["status"].is_object() {
        wrapper["status"] = json!({});
    }
    let mut plan = Plan::default();

    // Count pods: terminal ones once; pods that vanished unfinished as failed.
    let present: BTreeSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    for p in &pods {
        track.seen.insert(p.name.clone());
        match p.phase {
            PodPhase::Succeeded => {
                track.counted.entry(p.name.clone()).or_insert(true);
            }
            PodPhase::Failed => {
                track.counted.entry(p.name.clone()).or_insert(false);
            }
            PodPhase::Active => {}
        }
    }
    for name in &track.seen {
        if !present.contains(name.as_str()) {
            track.counted.entry(name.clone()).or_insert(false);
        }
    }
    let succeeded = track.counted.values().filter(|s| **s).count() as i64;
    let failed = track.counted.values().filter(|s| !**s).count() as i64;
    let active: Vec<&&PodView> = pods
        .iter()
        .filter(|p| p.phase == PodPhase::Active && !p.deleting)
        .collect();
    let terminating = pods
        .iter()
        .filter(|p| p.phase == PodPhase::Active && p.deleting)
        .count() as i64;

    if deleting(job) {
        plan.delete_pods = active.iter().map(|p| p.name.clone()).collect();
        plan.remove_job = pods.is_empty();
        plan.status = job["status"].clone();
        return plan;
    }

    let status = &mut wrapper["status"];
    let suspended = spec["suspend"] == true;
    if status["startTime"].is_null() && !suspended {
        status["startTime"] = json!(k8s_time(now));
    }
    let set_counts = |status: &mut Value, active_n: i64| {
        let m = objects::ensure_object(status);
        for (k, v) in [
            ("active", active_n),
            ("succeeded", succeeded),
            ("failed", failed),
        ] {
            if v > 0 {
                m.insert(k.into(), json!(v));
            } else {
                m.remove(k);
            }
        }
        m.insert("terminating".into(), json!(terminating));
        m.insert("ready".into(), json!(0));
        m.insert("uncountedTerminatedPods".into(), json!({}));
    };

    let finished = condition_true(&wrapper, "Complete") || condition_true(&wrapper, "Failed");
    if finished {
        plan.delete_pods = active.iter().map(|p| p.name.clone()).collect();
        set_counts(&mut wrapper["status"], 0);
        if let Some(ttl) = int(&spec["ttlSecondsAfterFinished"]) {
            let done_at = parse_time(&wrapper["status"]["completionTime"])
                .or_else(|| finish_time(&wrapper))
                .unwrap_or(now);
            let due = done_at + SignedDuration::from_secs(ttl);
            if now >= due {
                plan.delete_job = true;
            } else {
                plan.wake_at = Some(due);
            }
        }
        plan.status = wrapper["status"].take();
        return plan;
    }

    // A failure already decided: wait for the pods to stop, then Failed.
    let mut failure: Option<(String, String)> = failure_target(&wrapper);
    if failure.is_none() {
        let start = parse_time(&wrapper["status"]["startTime"]);
        if let (Some(ads), Some(start)) = (int(&spec["activeDeadlineSeconds"]), start) {
            let due = start + SignedDuration::from_secs(ads);
            if now >= due {
                failure = Some((
                    "DeadlineExceeded".into(),
                    "Job was active longer than specified deadline".into(),
                ));
            } else {
                plan.wake_at = Some(due);
            }
        }
        if failure.is_none() && failed > int(&spec["backoffLimit"]).unwrap_or(6) {
            failure = Some((
                "BackoffLimitExceeded".into(),
                "Job has reached the specified backoff limit".into(),
            ));
        }
        if let Some((reason, message)) = &failure {
            set_condition(&mut wrapper, "FailureTarget", reason, message, now);
        }
    }
    if let Some((reason, message)) = failure {
        plan.wake_at = None;
        plan.delete_pods = active.iter().map(|p| p.name.clone()).collect();
        let still_running = !active.is_empty() || terminating > 0;
        set_counts(&mut wrapper["status"], 0);
        if !still_running {
            set_condition(&mut wrapper, "Failed", &reason, &message, now);
            plan.wake_at = int(&spec["ttlSecondsAfterFinished"])
                .map(|ttl| now + SignedDuration::from_secs(ttl));
        }
        plan.status = wrapper["status"].take();
        return plan;
    }

    let completions = int(&spec["completions"]).unwrap_or(1);
    if succeeded >= completions {
        set_condition(
            &mut wrapper,
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        );
        set_condition(
            &mut wrapper,
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        );
        wrapper["status"]["completionTime"] = json!(k8s_time(now));
        set_counts(&mut wrapper["status"], active.len() as i64);
        plan.delete_pods = active.iter().map(|p| p.name.clone()).collect();
        plan.wake_at =
            int(&spec["ttlSecondsAfterFinished"]).map(|ttl| now + SignedDuration::from_secs(ttl));
        plan.status = wrapper["status"].take();
        return plan;
    }

    let mut active_n = active.len() as i64;
    if !suspended && active_n == 0 && terminating == 0 && !track.never_pod {
        plan.create_pod = true;
        active_n = 1;
    }
    set_counts(&mut wrapper["status"], active_n);
    plan.status = wrapper["status"].take();
    plan
}

fn failure_target(job: &Value) -> Option<(String, String)> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find_map(|c| {
            (c["type"] == "FailureTarget" && c["status"] == "True").then(|| {
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
    loop {
        for key in std::mem::take(&mut dirty) {
            if let Some(at) = reconcile_one(&sim, &key, &mut tracks) {
                timers.insert((at, key));
            }
        }
        let next_timer = timers.first().map(|(t, _)| *t);
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => mark(&ev, &mut dirty, &mut tracks),
                Err(RecvError::Lagged(_)) => dirty = all_jobs(&sim),
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
                    if let Some((_, k)) = timers.pop_first() { dirty.insert(k); }
                }
            }
            _ = sim.controller_wake.notified() => dirty = all_jobs(&sim),
        }
        // Batch whatever else is queued.
        loop {
            match rx.try_recv() {
                Ok(ev) => mark(&ev, &mut dirty, &mut tracks),
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                    dirty = all_jobs(&sim)
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

fn mark(ev: &crate::store::Event, dirty: &mut BTreeSet<Key>, tracks: &mut HashMap<String, Track>) {
    match ev.key.kind {
        Kind::Job if ev.etype == EventType::Deleted => {
            tracks.remove(objects::uid(&ev.object));
        }
        Kind::Job => {
            dirty.insert(ev.key.clone());
        }
        Kind::Pod => {
            if let Some((job, _)) = controller_job(&ev.object) {
                dirty.insert(Key::new(Kind::Job, &ev.key.ns, job));
            }
        }
    }
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
    let plan = reconcile(&job, &pods, track, sim.clock.now());
    if plan.remove_job {
        sim.store.remove(key);
        return None;
    }
    if plan.delete_job {
        let _ = sim.delete_job(&key.ns, &key.name, Propagation::Background);
        return None;
    }
    let status = plan.status.clone();
    let _ = sim.store.update(key, |j| {
        if j["status"] == status || objects::uid(j) != uid {
            return Ok(false);
        }
        j["status"] = status;
        Ok(true)
    });
    for p in &plan.delete_pods {
        let _ = sim.delete_pod(&key.ns, p, None);
    }
    if plan.create_pod {
        let pod = objects::pod_for_job(&job);
        if let Ok(created) = sim.insert_pod(&key.ns, pod) {
            track.seen.insert(objects::name(&created).to_string());
        }
    }
    plan.wake_at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: Value) -> Value {
        let mut j = json!({"metadata": {"name": "j", "uid": "u"}, "spec": {"backoffLimit": 0, "completions": 1}, "status": {}});
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
            phase,
            deleting: false,
        }
    }
    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn creates_one_pod_then_completes() {
        let mut tr = Track::default();
        let j = job(json!({"ttlSecondsAfterFinished": 10}));
        let p = reconcile(&j, &[], &mut tr, t(0));
        assert!(p.create_pod);
        assert_eq!(p.status["active"], 1);
        let mut j = j.clone();
        j["status"] = p.status;
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(1));
        assert!(!p.create_pod);
        let p = reconcile(&j, &[pod("a", PodPhase::Succeeded)], &mut tr, t(2));
        j["status"] = p.status.clone();
        assert!(condition_true(&j, "Complete") && condition_true(&j, "SuccessCriteriaMet"));
        assert_eq!(j["status"]["succeeded"], 1);
        assert_eq!(p.wake_at, Some(t(12)));
        let p = reconcile(&j, &[pod("a", PodPhase::Succeeded)], &mut tr, t(12));
        assert!(p.delete_job);
    }

    #[test]
    fn a_vanished_pod_counts_failed_and_backoff_zero_fails() {
        let mut tr = Track::default();
        let mut j = job(json!({}));
        j["status"] = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(0)).status;
        let p = reconcile(&j, &[], &mut tr, t(1));
        j["status"] = p.status;
        assert!(!p.create_pod);
        assert_eq!(j["status"]["failed"], 1);
        assert!(condition_true(&j, "Failed") && condition_true(&j, "FailureTarget"));
        assert_eq!(
            j["status"]["conditions"][1]["reason"],
            "BackoffLimitExceeded"
        );
    }

    #[test]
    fn backoff_limit_allows_retries() {
        let mut tr = Track::default();
        let j = job(json!({"backoffLimit": 1}));
        let p = reconcile(&j, &[pod("a", PodPhase::Failed)], &mut tr, t(0));
        assert!(p.create_pod);
        let p = reconcile(
            &j,
            &[pod("a", PodPhase::Failed), pod("b", PodPhase::Failed)],
            &mut tr,
            t(1),
        );
        assert!(!p.create_pod);
        assert_eq!(p.status["failed"], 2);
    }

    #[test]
    fn deadline_terminates_pods_then_fails() {
        let mut tr = Track::default();
        let mut j = job(json!({"activeDeadlineSeconds": 5}));
        let p = reconcile(&j, &[], &mut tr, t(0));
        assert_eq!(p.wake_at, Some(t(5)));
        j["status"] = p.status;
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(5));
        assert_eq!(p.delete_pods, vec!["a".to_string()]);
        j["status"] = p.status;
        assert!(condition_true(&j, "FailureTarget") && !condition_true(&j, "Failed"));
        let terminating = PodView {
            deleting: true,
            ..pod("a", PodPhase::Active)
        };
        let p = reconcile(&j, &[terminating], &mut tr, t(6));
        assert!(p.delete_pods.is_empty() && !p.create_pod);
        j["status"] = p.status;
        assert!(!condition_true(&j, "Failed"));
        let p = reconcile(&j, &[pod("a", PodPhase::Failed)], &mut tr, t(7));
        j["status"] = p.status;
        assert!(condition_true(&j, "Failed"));
        let failed = j["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Failed")
            .unwrap()
            .clone();
        assert_eq!(failed["reason"], "DeadlineExceeded");
        assert_eq!(j["status"]["failed"], 1);
    }

    #[test]
    fn never_pod_and_foreground() {
        let mut tr = Track {
            never_pod: true,
            ..Track::default()
        };
        let j = job(json!({}));
        assert!(!reconcile(&j, &[], &mut tr, t(0)).create_pod);
        let mut j = job(json!({}));
        j["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let mut tr = Track::default();
        let p = reconcile(&j, &[pod("a", PodPhase::Active)], &mut tr, t(0));
        assert_eq!((p.delete_pods.len(), p.remove_job), (1, false));
        assert!(reconcile(&j, &[], &mut tr, t(1)).remove_job);
    }
}
