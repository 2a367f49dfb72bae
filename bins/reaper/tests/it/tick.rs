//! The reaper's tick against the test kit's fake Kubernetes API and a mock
//! backend: the requests it makes (and does not make), what it deletes, and
//! how it survives API errors, hung calls and a view that stops being
//! current.

use crate::support::*;
use kube::runtime::watcher::Event;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use tcab_reaper::Due;
use tcab_reaper::run::{DeleteOutcome, SkipReason, SweepOutcome};
use tcab_reaper::{DeleteReason, KeepReason, ReapKind, SweepSettings};

fn ids(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_failed_drivers_sandboxes_are_listed_confirmed_and_deleted_once_then_never_listed_again()
{
    let jobs = vec![
        job("tcab-driver-a-1", "a", true),
        job("tcab-driver-b-1", "b", false),
    ];
    let pods = vec![
        sandbox("sb-a", "a"),
        sandbox("sb-b", "b"),
        // A LIST that ignored the selector must still spare the driver's pod.
        pod(
            "tcab-driver-a-1-pod",
            "a",
            "tcab-dispatcher",
            "2027-01-15T11:00:00Z",
        ),
    ];
    // The LIST is answered with every pod, as if the selector were ignored.
    let listed = pod_list(pods.clone());
    let (client, seen) = api_with(pods, &jobs, move |req| {
        is_pod_list(req).then(|| Answer::Json(200, listed.clone()))
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    let report = r.tick().await;

    assert_eq!(
        report.due,
        Due {
            reap: ids(&["a"]),
            sweep: false
        }
    );
    assert_eq!(report.listed, Some(3));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(
        report.deletes[0].reason,
        DeleteReason::DriverJobFailed {
            job: "tcab-driver-a-1".into()
        }
    );
    assert_eq!(
        report.reaped().collect::<Vec<_>>(),
        [ReapKind::DriverFailed]
    );
    assert_eq!(report.completed, ids(&["a"]));
    assert_eq!(
        requests(&seen),
        [
            format!("GET {}", reap_list_uri(&["a"])),
            format!("GET {}", jobs_uri("a")),
            "DELETE /api/v1/namespaces/sandboxes/pods/sb-a?".to_string(),
        ],
        "one LIST, one confirming read, one DELETE"
    );
    assert_eq!(
        seen.lock().journal[2].body["preconditions"]["uid"],
        "uid-sb-a"
    );
    assert!(!seen.lock().pods.contains_key("sb-a"), "deleted");
    // The reap leaves an Event on the failed driver Job, with its uid.
    let events = events_about(&seen, "tcab-driver-a-1", 1).await;
    let [event] = events.as_slice() else {
        panic!("one Event: {events:?}")
    };
    assert_eq!(event["reason"], "SandboxReaped");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["action"], "DeletePod");
    assert_eq!(event["reportingController"], "tcab.dev/reaper");
    assert_eq!(event["metadata"]["namespace"], "dispatcher");
    assert_eq!(event["regarding"]["namespace"], "dispatcher");
    assert_eq!(event["regarding"]["uid"], "uid-tcab-driver-a-1");
    assert_eq!(
        event["note"],
        "sandbox pod sandboxes/sb-a of job a deleted: driver Job tcab-driver-a-1 failed"
    );

    // The reap is complete: later ticks make no call at all.
    for _ in 0..3 {
        let report = r.tick().await;
        assert_eq!(report.listed, None);
        assert!(!report.due.needs_list());
    }
    assert_eq!(requests(&seen).len(), 3);
}

#[tokio::test]
async fn one_list_whatever_the_number_of_jobs_and_none_once_their_reaps_are_complete() {
    let (client, seen) = api(vec![], &[]).await;
    let jobs = cache(
        (0..200)
            .map(|i| job(&format!("tcab-driver-j{i}-1"), &format!("j{i}"), i % 2 == 0))
            .collect(),
    );
    let mut r = reaper(client, jobs);
    let first = r.tick().await;
    assert_eq!(first.due.reap.len(), 100);
    assert_eq!(first.completed.len(), 100, "no sandbox of them left");
    let journal = seen.lock().journal.clone();
    assert!(
        journal.len() == 1 && is_pod_list(&journal[0]),
        "{journal:?}"
    );
    for _ in 0..3 {
        r.tick().await;
    }
    assert_eq!(requests(&seen).len(), 1, "steady state: no call");
}

#[tokio::test(start_paused = true)]
async fn failed_deletes_are_retried_after_their_backoff_and_404_is_fine() {
    let pods = vec![
        sandbox("sb-1", "a"),
        sandbox("sb-2", "a"),
        sandbox("sb-3", "a"),
    ];
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let mut round = 0;
    // The first round's deletes of sb-1 and sb-2 fail; sb-3 is always gone
    // by the time its delete arrives (the LIST saw it, the DELETE does not).
    let (client, seen) = api_with(pods, &jobs, move |req| {
        if is_pod_list(req) {
            round += 1;
            return None;
        }
        match (round, req.uri.as_str()) {
            (1, "/api/v1/namespaces/sandboxes/pods/sb-1?") => refuse(500, "InternalError"),
            (1, "/api/v1/namespaces/sandboxes/pods/sb-2?") => refuse(403, "Forbidden"),
            (_, "/api/v1/namespaces/sandboxes/pods/sb-3?") => refuse(404, "NotFound"),
            _ => None,
        }
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    let first = r.tick().await;
    let outcomes: Vec<_> = first.deletes.iter().map(|d| d.outcome.clone()).collect();
    assert!(matches!(
        outcomes[0],
        DeleteOutcome::Failed {
            code: Some(500),
            ..
        }
    ));
    assert!(matches!(
        outcomes[1],
        DeleteOutcome::Failed {
            code: Some(403),
            ..
        }
    ));
    assert_eq!(outcomes[2], DeleteOutcome::AlreadyGone);
    assert!(first.completed.is_empty(), "two deletes failed");
    let verbs: Vec<_> = first
        .api_errors
        .iter()
        .map(|e| (e.verb, e.resource, e.code))
        .collect();
    assert_eq!(
        verbs,
        [("delete", "pods", Some(500)), ("delete", "pods", Some(403))]
    );

    // Not complete: the job id backs off alone (no LIST at the next tick),
    // then the tick after its back-off lists again and finishes it.
    assert!(r.tick().await.due.reap.is_empty(), "backing off");
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    let second = r.tick().await;
    let outcomes: Vec<_> = second.deletes.iter().map(|d| d.outcome.clone()).collect();
    assert_eq!(
        outcomes,
        [
            DeleteOutcome::Deleted,
            DeleteOutcome::Deleted,
            DeleteOutcome::AlreadyGone
        ]
    );
    assert_eq!(second.completed, ids(&["a"]));
    assert_eq!(requests(&seen).len(), 10, "LIST, read, 3 DELETEs, twice");
    r.tick().await;
    assert_eq!(requests(&seen).len(), 10, "then nothing");
}

#[tokio::test]
async fn transport_failure_is_not_fatal() {
    // An API server nobody can reach: the tick reports it and returns.
    let mut r = reaper(
        unreachable_api(),
        cache(vec![job("tcab-driver-a-1", "a", true)]),
    );
    let report = r.tick().await;
    assert_eq!(report.listed, None);
    assert_eq!(report.api_errors.len(), 1);
    assert_eq!(
        (report.api_errors[0].verb, report.api_errors[0].resource),
        ("list", "pods")
    );
    assert_eq!(report.api_errors[0].code, None);
    assert!(report.due.reap.contains("a"), "still awaiting");
}

#[tokio::test]
async fn a_view_that_is_not_current_reaps_nothing_and_lists_nothing() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let (client, seen) = api(vec![sandbox("sb-a", "a")], &jobs).await;
    let view = cache(jobs.clone());
    // The watch erred: a newer live Job of job "a" may be missing from the view.
    view.mark_failed("500 Internal Server Error");
    let mut r = reaper(client, view.clone());
    for _ in 0..3 {
        let report = r.tick().await;
        let why = report.view_not_current.expect("not current");
        assert!(why.contains("500"), "{why}");
        assert!(report.deletes.is_empty());
    }
    assert!(requests(&seen).is_empty(), "no call at all");

    // Events after the error do not make it current; only a relist does.
    view.apply(Event::Apply(job("tcab-driver-a-1", "a", true)));
    assert!(r.tick().await.view_not_current.is_some());
    relist(&view, jobs);
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
}

#[tokio::test]
async fn a_view_that_stops_being_current_after_the_list_deletes_nothing() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let view = cache(jobs.clone());
    let failing = view.clone();
    // The watch fails while the LIST is answered.
    let (client, seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, move |req| {
        if is_pod_list(req) {
            failing.mark_failed("watch stream ended");
        }
        None
    })
    .await;
    let mut r = reaper(client, view.clone());
    let report = r.tick().await;
    assert_eq!(report.listed, Some(1));
    assert!(report.view_not_current.is_some());
    assert!(report.deletes.is_empty() && report.plan.delete.is_empty());
    assert_eq!(
        requests(&seen),
        [format!("GET {}", reap_list_uri(&["a"]))],
        "no read, no DELETE"
    );
}

#[tokio::test]
async fn a_view_that_stops_being_current_during_the_confirming_read_skips_the_deletes() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let view = cache(jobs.clone());
    let failing = view.clone();
    let mut fail_once = true;
    let pods = vec![sandbox("sb-a", "a"), sandbox("sb-a2", "a")];
    let (client, seen) = api_with(pods, &jobs, move |req| {
        if is_confirm(req) && std::mem::take(&mut fail_once) {
            failing.mark_failed("watch stream ended");
        }
        None
    })
    .await;
    let mut r = reaper(client, view.clone());
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [
            (
                "sandboxes/sb-a".to_string(),
                DeleteOutcome::Skipped(SkipReason::ViewNotCurrent)
            ),
            (
                "sandboxes/sb-a2".to_string(),
                DeleteOutcome::Skipped(SkipReason::ViewNotCurrent)
            ),
        ]
    );
    assert!(report.completed.is_empty());
    assert!(
        !requests(&seen).iter().any(|r| r.starts_with("DELETE")),
        "{:?}",
        requests(&seen)
    );

    // Not current: nothing. A relist later: the reap goes through.
    assert!(r.tick().await.view_not_current.is_some());
    relist(&view, jobs);
    let report = r.tick().await;
    assert_eq!(report.reaped().count(), 2);
    assert_eq!(report.completed, ids(&["a"]));
}

#[tokio::test]
async fn a_confirming_read_that_finds_a_live_job_of_the_same_id_stops_the_delete() {
    // The view has only the failed claim; the cluster already has a newer,
    // live one (the view lags).
    let view_jobs = vec![job("tcab-driver-a-1", "a", true)];
    let cluster_jobs = vec![
        job("tcab-driver-a-1", "a", true),
        job("tcab-driver-a-2", "a", false),
    ];
    let (client, seen) = api(vec![sandbox("sb-a", "a")], &cluster_jobs).await;
    let mut r = reaper(client, cache(view_jobs));
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [(
            "sandboxes/sb-a".to_string(),
            DeleteOutcome::Skipped(SkipReason::Held(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            }))
        )]
    );
    assert!(report.completed.is_empty());
    assert_eq!(
        requests(&seen),
        [
            format!("GET {}", reap_list_uri(&["a"])),
            format!("GET {}", jobs_uri("a"))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_confirming_read_that_fails_stops_the_delete() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let (client, seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, |req| {
        is_confirm(req)
            .then(|| refuse(500, "InternalError"))
            .flatten()
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [(
            "sandboxes/sb-a".to_string(),
            DeleteOutcome::Skipped(SkipReason::ConfirmReadFailed)
        )]
    );
    assert_eq!(
        (
            report.api_errors[0].verb,
            report.api_errors[0].resource,
            report.api_errors[0].code
        ),
        ("list", "jobs", Some(500))
    );
    assert!(!requests(&seen).iter().any(|r| r.starts_with("DELETE")));
    // The reap still awaits, on its own back-off: not at the next tick, but
    // once 5 s have passed.
    assert!(!r.tick().await.due.reap.contains("a"));
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    assert!(r.tick().await.due.reap.contains("a"));
}

#[tokio::test(start_paused = true)]
async fn every_call_is_bounded() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];

    // A LIST that never answers.
    let (client, seen) = api_with(vec![], &jobs, |_| Some(Answer::Hang)).await;
    let mut r = reaper(client, cache(jobs.clone()));
    let started = tokio::time::Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(600), r.tick())
        .await
        .expect("a hung LIST ends the tick");
    assert_eq!(started.elapsed(), KUBE_TIMEOUT);
    assert_eq!(report.listed, None);
    assert_eq!(
        (report.api_errors[0].verb, report.api_errors[0].code),
        ("list", None)
    );
    assert!(report.api_errors[0].message.contains("did not answer"));
    // The call reached the API and hung there (not a failure to connect).
    let list = format!("GET {}", reap_list_uri(&["a"]));
    assert_eq!(requests(&seen), std::slice::from_ref(&list));

    // A confirming read that never answers.
    let (client, seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, |req| {
        is_confirm(req).then_some(Answer::Hang)
    })
    .await;
    let mut r = reaper(client, cache(jobs.clone()));
    let report = tokio::time::timeout(Duration::from_secs(600), r.tick())
        .await
        .expect("a hung read ends the tick");
    assert_eq!(
        report.outcomes(),
        [(
            "sandboxes/sb-a".to_string(),
            DeleteOutcome::Skipped(SkipReason::ConfirmReadFailed)
        )]
    );
    assert_eq!(
        requests(&seen),
        [list.clone(), format!("GET {}", jobs_uri("a"))]
    );

    // A DELETE that never answers.
    let (client, seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, |req| {
        is_delete(req).then_some(Answer::Hang)
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    let report = tokio::time::timeout(Duration::from_secs(600), r.tick())
        .await
        .expect("a hung DELETE ends the tick");
    assert!(matches!(
        report.deletes[0].outcome,
        DeleteOutcome::Failed { code: None, .. }
    ));
    assert_eq!(report.api_errors[0].verb, "delete");
    assert_eq!(
        requests(&seen),
        [
            list,
            format!("GET {}", jobs_uri("a")),
            "DELETE /api/v1/namespaces/sandboxes/pods/sb-a?".to_string()
        ]
    );
    assert!(seen.lock().pods.contains_key("sb-a"), "never deleted");
}

/// A driver Job bound to fail (FailureTarget) whose pod never finishes
/// terminating: what a lost node leaves on Kubernetes 1.31+.
fn stuck_job(name: &str, id: &str) -> k8s_openapi::api::batch::v1::Job {
    job_with_status(
        name,
        id,
        json!({"active": 0, "terminating": 1, "failed": 0, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"}]}),
    )
}

#[tokio::test(start_paused = true)]
async fn a_driver_job_stuck_failing_has_its_sandboxes_reaped_after_its_grace_and_margin() {
    let jobs = vec![stuck_job("tcab-driver-a-1", "a")];
    let (client, seen) = api(vec![sandbox("sb-a", "a")], &jobs).await;
    let mut r = reaper(client, cache(jobs));
    // Live and failing: its own Job holds the sandbox, nothing is listed.
    assert!(!r.tick().await.due.needs_list());
    // Termination grace 120 s + margin 60 s.
    tokio::time::advance(Duration::from_secs(180)).await;
    assert!(!r.tick().await.due.needs_list());
    assert!(requests(&seen).is_empty());
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(
        report.deletes[0].reason,
        DeleteReason::DriverJobStuck {
            job: "tcab-driver-a-1".into()
        }
    );
    assert_eq!(
        report.reaped().collect::<Vec<_>>(),
        [ReapKind::DriverFailed]
    );
    assert_eq!(report.completed, ids(&["a"]));
}

/// A driver Job marked Failed while its pod still terminates (before 1.31).
fn failed_terminating(name: &str, id: &str, terminating: i32) -> k8s_openapi::api::batch::v1::Job {
    job_with_status(
        name,
        id,
        json!({"failed": 1, "terminating": terminating, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
    )
}

#[tokio::test(start_paused = true)]
async fn a_job_failed_while_its_pods_still_terminate_is_reaped_once_they_finish() {
    let jobs = vec![failed_terminating("tcab-driver-a-1", "a", 1)];
    let view = cache(jobs);
    let finished = vec![failed_terminating("tcab-driver-a-1", "a", 0)];
    let (client, seen) = api(vec![sandbox("sb-a", "a")], &finished).await;
    let mut r = reaper(client, view.clone());
    for _ in 0..3 {
        assert!(!r.tick().await.due.needs_list());
        tokio::time::advance(Duration::from_secs(30)).await;
    }
    assert!(requests(&seen).is_empty(), "held: no LIST");
    // The pod finished terminating.
    view.apply(Event::Apply(finished[0].clone()));
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(
        report.deletes[0].reason,
        DeleteReason::DriverJobFailed {
            job: "tcab-driver-a-1".into()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_failed_whose_pods_never_finish_terminating_is_reaped_once_judged_dead() {
    let jobs = vec![failed_terminating("tcab-driver-a-1", "a", 1)];
    let (client, _seen) = api(vec![sandbox("sb-a", "a")], &jobs).await;
    let mut r = reaper(client, cache(jobs));
    assert!(!r.tick().await.due.needs_list());
    tokio::time::advance(Duration::from_secs(181)).await;
    let report = r.tick().await;
    assert_eq!(
        report.deletes[0].reason,
        DeleteReason::DriverJobStuck {
            job: "tcab-driver-a-1".into()
        }
    );
    assert_eq!(report.deletes[0].outcome, DeleteOutcome::Deleted);
}

fn sweeping(interval: Duration) -> SweepSettings {
    SweepSettings {
        orphan_sweep: true,
        orphan_grace: Duration::ZERO,
        orphan_sweep_interval: interval,
        ..settings()
    }
}

#[tokio::test]
async fn an_orphan_the_backend_still_drives_is_not_swept_even_with_no_grace() {
    let backend = MockBackend::start(Active::Driven(vec!["x".into()])).await;
    // A sandbox of job "x", which no owned Job carries (the view lags, or
    // its Job is in another namespace) but the backend drives.
    let (client, seen) = api(vec![sandbox("sb-x", "x")], &[]).await;
    let mut r = reaper_with(
        client,
        cache(vec![]),
        sweeping(Duration::ZERO),
        Some(backend.client()),
    );
    let report = r.tick().await;
    assert!(report.due.sweep);
    assert_eq!(report.sweep, SweepOutcome::Driven(1));
    assert!(report.deletes.is_empty());
    assert_eq!(report.plan.keep[0].reason, KeepReason::DrivenByBackend);
    assert_eq!(requests(&seen), [format!("GET {SWEEP_LIST_URI}")]);

    // The backend stops driving it: the next sweep reaps it.
    backend.set(Active::Driven(vec![]));
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-x".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(report.reaped().collect::<Vec<_>>(), [ReapKind::Orphan]);
    assert_eq!(backend.calls(), 2);
    let seen = requests(&seen);
    assert_eq!(seen[2], format!("GET {}", jobs_uri("x")), "confirmed first");
    assert_eq!(seen[3], "DELETE /api/v1/namespaces/sandboxes/pods/sb-x?");
}

#[tokio::test]
async fn the_backend_failing_stops_the_sweep_but_not_the_reap_of_failed_drivers() {
    let backend = MockBackend::start(Active::Fails(500)).await;
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let pods = vec![sandbox("sb-a", "a"), sandbox("sb-x", "x")];
    let (client, _seen) = api(pods, &jobs).await;
    let mut r = reaper_with(
        client,
        cache(jobs),
        sweeping(Duration::ZERO),
        Some(backend.client()),
    );
    let report = r.tick().await;
    assert!(matches!(report.sweep, SweepOutcome::BackendFailed(_)));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)],
        "the failed driver's sandbox is reaped, the orphan is not"
    );
    let kept = report
        .plan
        .keep
        .iter()
        .find(|k| k.pod.name == "sb-x")
        .expect("orphan kept");
    assert_eq!(kept.reason, KeepReason::DrivenUnknown);

    backend.set(Active::Driven(vec![]));
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-x".to_string(), DeleteOutcome::Deleted)]
    );
}

#[tokio::test]
async fn an_orphan_whose_job_a_fresh_read_finds_is_kept() {
    let backend = MockBackend::start(Active::Driven(vec![])).await;
    // The view misses the live Job of "x"; the confirming read finds it.
    let live = [job("tcab-driver-x-1", "x", false)];
    let (client, seen) = api(vec![sandbox("sb-x", "x")], &live).await;
    let mut r = reaper_with(
        client,
        cache(vec![]),
        sweeping(Duration::ZERO),
        Some(backend.client()),
    );
    let report = r.tick().await;
    assert_eq!(
        report.outcomes(),
        [(
            "sandboxes/sb-x".to_string(),
            DeleteOutcome::Skipped(SkipReason::Held(KeepReason::JobFound {
                job: "tcab-driver-x-1".into()
            }))
        )]
    );
    assert!(!requests(&seen).iter().any(|r| r.starts_with("DELETE")));
}

#[tokio::test]
async fn the_sweep_lists_on_its_own_cadence() {
    let backend = MockBackend::start(Active::Driven(vec![])).await;
    let (client, seen) = api(vec![], &[]).await;
    let mut r = reaper_with(
        client,
        cache(vec![job("tcab-driver-b-1", "b", false)]),
        sweeping(Duration::from_secs(3600)),
        Some(backend.client()),
    );
    let first = r.tick().await;
    assert!(first.due.sweep);
    assert_eq!(first.listed, Some(0));
    for _ in 0..3 {
        let report = r.tick().await;
        assert!(!report.due.needs_list());
        assert_eq!(report.sweep, SweepOutcome::NotDue);
    }
    assert_eq!(requests(&seen).len(), 1, "one LIST for the sweep");
    assert_eq!(backend.calls(), 1);
}

#[tokio::test]
async fn a_sweep_whose_list_is_refused_waits_for_its_next_interval() {
    let backend = MockBackend::start(Active::Driven(vec![])).await;
    let (client, seen) = api_with(vec![], &[], |_| refuse(403, "Forbidden")).await;
    let mut r = reaper_with(
        client,
        cache(vec![]),
        sweeping(Duration::from_secs(3600)),
        Some(backend.client()),
    );
    let first = r.tick().await;
    assert!(first.due.sweep);
    assert_eq!(first.api_errors[0].code, Some(403));
    for _ in 0..3 {
        assert!(!r.tick().await.due.needs_list());
    }
    assert_eq!(requests(&seen).len(), 1, "one refused LIST");
    assert_eq!(backend.calls(), 0, "no backend call without a LIST");
}

/// A dead driver's job id with sandbox pods of another managed-by value (a
/// driver that labels with a fixed value of its own): the reap lists the
/// pods by job id alone, deletes only the driver-managed sandboxes, leaves
/// the others alone and reports them once.
#[tokio::test]
async fn sandboxes_of_another_managed_by_are_left_alone_and_reported_once() {
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let pods = vec![
        sandbox("sb-a", "a"),
        pod("sb-a-fixed", "a", "some-driver", "2027-01-15T11:00:00Z"),
        pod(
            "tcab-driver-a-1-pod",
            "a",
            "tcab-dispatcher",
            "2027-01-15T11:00:00Z",
        ),
    ];
    let (client, seen) = api(pods, &jobs).await;
    let mut r = reaper(client, cache(jobs));
    let report = r.tick().await;
    assert_eq!(requests(&seen)[0], format!("GET {}", reap_list_uri(&["a"])));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(
        report.mismatches.get("a").map(Vec::as_slice),
        Some(&["sandboxes/sb-a-fixed".to_string()][..])
    );
    assert_eq!(report.completed, ids(&["a"]), "the reap of a is complete");
    // Complete: nothing more is listed, and the mismatch is not reported again.
    let again = r.tick().await;
    assert_eq!(again.listed, None);
    assert!(again.mismatches.is_empty());
}

/// A driver Job that fails while a reap's LIST (named by the ids due) is in
/// flight is judged by the plan, but the LIST did not name its id: its reap
/// is not complete until the next tick lists it and deletes its sandbox.
#[tokio::test]
async fn a_driver_failing_during_a_reaps_list_is_reaped_on_the_next_tick() {
    let jobs = vec![
        job("tcab-driver-a-1", "a", true),
        job("tcab-driver-b-1", "b", false),
    ];
    let view = cache(jobs.clone());
    let failing = view.clone();
    let b_failed = job("tcab-driver-b-1", "b", true);
    let answered = [jobs[0].clone(), b_failed.clone()];
    let pods = vec![sandbox("sb-a", "a"), sandbox("sb-b", "b")];
    let mut first = true;
    let (client, seen) = api_with(pods, &answered, move |req| {
        if is_pod_list(req) && std::mem::take(&mut first) {
            // Answered as its selector asks (job id a only), while b fails.
            failing.apply(Event::Apply(b_failed.clone()));
        }
        None
    })
    .await;
    let mut r = reaper(client, view);
    let report = r.tick().await;
    assert_eq!(report.due.reap, ids(&["a"]));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(
        report.completed,
        ids(&["a"]),
        "b was not listed: not complete"
    );
    let report = r.tick().await;
    assert_eq!(report.due.reap, ids(&["b"]));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-b".to_string(), DeleteOutcome::Deleted)]
    );
    assert!(requests(&seen).contains(&format!("GET {}", reap_list_uri(&["b"]))));
}
