//! The reaper's tick against a mocked Kubernetes API (tower-test): the
//! requests it makes, what it deletes, and how it survives API errors.

mod support;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use support::*;
use tcab_reaper::run::DeleteOutcome;

#[tokio::test]
async fn failed_driver_sandbox_is_deleted_in_one_tick_with_one_list() {
    let listed = pod_list(vec![
        pod("sb-a", "a", "tcab-driver", "2027-01-15T11:59:00Z"),
        pod("sb-b", "b", "tcab-driver", "2027-01-15T11:59:00Z"),
        // A LIST that ignored the selector must still spare the driver's pod.
        pod(
            "tcab-driver-a-1-pod",
            "a",
            "tcab-dispatcher",
            "2027-01-15T11:00:00Z",
        ),
    ]);
    let (client, seen) = mock_client(Box::new(move |req| match req.method {
        Method::GET => (200, listed.clone()),
        _ => (200, pod("sb-a", "a", "tcab-driver", "2027-01-15T11:59:00Z")),
    }));
    let jobs = cache(vec![
        job("tcab-driver-a-1", "a", true),
        job("tcab-driver-b-1", "b", false),
    ]);
    let report = reaper(client, jobs).tick().await;

    assert!(!report.list_failed);
    assert_eq!(report.listed, 3);
    assert_eq!(
        report.deletes,
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 2, "one LIST and one DELETE: {seen:?}");
    assert_eq!(
        (seen[0].method.clone(), seen[0].uri.as_str()),
        (Method::GET, LIST_URI)
    );
    assert_eq!(seen[1].method, Method::DELETE);
    assert_eq!(seen[1].uri, "/api/v1/namespaces/sandboxes/pods/sb-a?");
    assert_eq!(seen[1].body["preconditions"]["uid"], "uid-sb-a");
}

#[tokio::test]
async fn list_calls_do_not_grow_with_the_number_of_jobs() {
    let (client, seen) = mock_client(Box::new(|_| (200, pod_list(vec![]))));
    let jobs = cache(
        (0..200)
            .map(|i| job(&format!("tcab-driver-j{i}-1"), &format!("j{i}"), i % 2 == 0))
            .collect(),
    );
    let r = reaper(client, jobs);
    r.tick().await;
    r.tick().await;
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 2, "one LIST per tick");
    assert!(
        seen.iter()
            .all(|s| s.method == Method::GET && s.uri == LIST_URI)
    );
}

#[tokio::test]
async fn orphans_older_than_the_grace_are_swept() {
    let listed = pod_list(vec![
        pod("old", "gone", "tcab-driver", "2027-01-15T11:49:00Z"),
        pod("young", "gone", "tcab-driver", "2027-01-15T11:55:00Z"),
    ]);
    let (client, seen) = mock_client(Box::new(move |req| match req.method {
        Method::GET => (200, listed.clone()),
        _ => (200, success()),
    }));
    let report = reaper(client, cache(vec![])).tick().await;
    assert_eq!(
        report.deletes,
        [("sandboxes/old".to_string(), DeleteOutcome::Deleted)]
    );
    assert_eq!(seen.lock().expect("log").len(), 2);
}

#[tokio::test]
async fn failed_deletes_are_retried_next_tick_and_404_is_fine() {
    let listed = pod_list(vec![
        pod("sb-1", "a", "tcab-driver", "2027-01-15T11:59:00Z"),
        pod("sb-2", "a", "tcab-driver", "2027-01-15T11:59:00Z"),
        pod("sb-3", "a", "tcab-driver", "2027-01-15T11:59:00Z"),
    ]);
    let mut round = 0;
    let (client, seen) = mock_client(Box::new(move |req| {
        if req.method == Method::GET {
            round += 1;
            return (200, listed.clone());
        }
        let ok = (200, success());
        match (round, req.uri.as_str()) {
            (1, "/api/v1/namespaces/sandboxes/pods/sb-1?") => (500, status(500, "InternalError")),
            (1, "/api/v1/namespaces/sandboxes/pods/sb-2?") => (403, status(403, "Forbidden")),
            (_, "/api/v1/namespaces/sandboxes/pods/sb-3?") => (404, status(404, "NotFound")),
            _ => ok,
        }
    }));
    let r = reaper(client, cache(vec![job("tcab-driver-a-1", "a", true)]));
    let first = r.tick().await;
    let outcomes: Vec<_> = first.deletes.iter().map(|(_, o)| o.clone()).collect();
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

    let second = r.tick().await;
    let outcomes: Vec<_> = second.deletes.iter().map(|(_, o)| o.clone()).collect();
    assert_eq!(
        outcomes,
        [
            DeleteOutcome::Deleted,
            DeleteOutcome::Deleted,
            DeleteOutcome::AlreadyGone
        ]
    );
    assert_eq!(seen.lock().expect("log").len(), 8);
}

#[tokio::test]
async fn transport_failure_is_not_fatal() {
    // A service that fails every call: the tick reports it and returns.
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let mut handle = Box::pin(handle);
    tokio::spawn(async move {
        while let Some((_, send)) = handle.next_request().await {
            send.send_error(std::io::Error::other("connection reset"));
        }
    });
    let client = Client::new(service, "dispatcher");
    let report = reaper(client, cache(vec![job("tcab-driver-a-1", "a", true)]))
        .tick()
        .await;
    assert!(report.list_failed);
}

#[tokio::test]
async fn a_degraded_job_watch_pauses_reaping() {
    let listed = pod_list(vec![pod(
        "sb-a",
        "a",
        "tcab-driver",
        "2027-01-15T11:59:00Z",
    )]);
    let (client, seen) = mock_client(Box::new(move |_| (200, listed.clone())));
    let jobs = cache(vec![job("tcab-driver-a-1", "a", true)]);
    // The watch erred: a newer live Job of job "a" may be missing from the view.
    jobs.mark_degraded(std::time::Instant::now());
    let reaper = reaper(client, jobs.clone());
    let report = reaper.tick().await;
    assert!(report.view_stale);
    assert!(report.deletes.is_empty());
    assert!(seen.lock().expect("log").is_empty(), "no call at all");
}
