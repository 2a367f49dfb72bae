//! The pod tracker: learns which Jobs are gone while a pod of theirs lives
//! on, and follows those pods until they finish ([`super::pods`] holds what
//! is decided about them). Its edits of the view are here too.

use super::job_watch::WatchSettings;
use super::pods::{self, Gone, OwnedPod, gone_after_list, standing};
use super::{OwnedJobs, ViewState};
use crate::kube_api::KubeCall;
use crate::names;
use crate::retry::{Backoff, JITTER_PERCENT, random_sample};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use std::time::Duration;
use tokio::sync::mpsc;

/// Work for the pod tracker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Check {
    /// The Jobs were (re)listed: list every live owned pod.
    Relisted,
    /// A live Job vanished: list its pods.
    Vanished(String),
}

impl OwnedJobs {
    // The pod tracker's edits.

    /// A complete list of the live owned pods arrived: the gone Jobs are
    /// those whose pods the Job view does not hold.
    pub(super) fn pods_listed(&self, pods: Vec<OwnedPod>) {
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
    pub(super) fn vanished_checked(&self, job: &str, pods: Vec<OwnedPod>) {
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
    pub(super) fn standing_read(&self, job: &str, pod: Option<OwnedPod>) {
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
    pub(super) fn pods_failed(&self, error: &str) {
        let view = {
            let mut state = self.write();
            state.pods_view = ViewState::Failed(format!("listing the owned pods failed: {error}"));
            state.view()
        };
        self.announce_failure(view, error, "listing the owned pods failed");
    }

    /// The pods standing for gone Jobs: (Job name, pod name).
    pub(super) fn standing_pods(&self) -> Vec<(String, String)> {
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
    pub(super) fn gone_names(&self) -> Vec<String> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = state.gone.keys().cloned().collect();
        names.sort();
        names
    }
}

/// Learns which Jobs are gone while a pod of theirs lives on, and follows
/// those pods until they finish: a list of every live owned pod after each
/// Job relist, a list of a vanished Job's pods, and a read of each standing
/// pod every `pod_poll`. A failed list makes the view not current and is
/// tried again (as a full list) after a back-off.
pub(super) async fn track_pods(
    api: Api<Pod>,
    selector: String,
    settings: WatchSettings,
    cache: OwnedJobs,
    mut checks: mpsc::UnboundedReceiver<Check>,
) {
    let backoff =
        Backoff::doubling(settings.min_backoff, settings.max_backoff).with_jitter(JITTER_PERCENT);
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
                retry_at =
                    Some(tokio::time::Instant::now() + backoff.wait(failures, random_sample()));
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
    use crate::job_cache::summary::tests::job;
    use crate::lane::Lane;
    use k8s_openapi::api::batch::v1::Job;
    use kube::runtime::watcher::Event;
    use serde_json::json;

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
}
