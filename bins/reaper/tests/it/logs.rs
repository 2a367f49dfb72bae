//! What the reaper logs when the sandbox namespace refuses it. It shares the
//! crate's test binary, so it relies on nextest running each test in its own
//! process: tracing caches per-callsite interest process-wide, and under plain
//! `cargo test` a concurrent test without a subscriber could hide a line.

use crate::support::*;
use tcab_reaper::run::DeleteOutcome;

#[tokio::test(flavor = "current_thread")]
async fn forbidden_list_is_logged_with_the_namespace_and_retried() {
    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // Forbidden twice (RBAC missing), then granted.
    let mut calls = 0;
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let (client, seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, move |req| {
        if is_pod_list(req) {
            calls += 1;
            if calls <= 2 {
                return refuse(403, "Forbidden");
            }
        }
        None
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    for _ in 0..2 {
        let report = r.tick().await;
        assert_eq!(report.listed, None);
        assert_eq!(report.api_errors[0].code, Some(403));
        assert!(report.deletes.is_empty());
    }
    let report = r.tick().await;
    assert_eq!(report.listed, Some(1));
    assert_eq!(
        report.outcomes(),
        [("sandboxes/sb-a".to_string(), DeleteOutcome::Deleted)]
    );
    let seen = journal(&seen);
    assert_eq!(seen.len(), 5, "three LISTs, one read, one DELETE: {seen:?}");
    assert!(seen[..3].iter().all(|s| s.uri == reap_list_uri(&["a"])));
    assert_eq!(seen[4].body["preconditions"]["uid"], "uid-sb-a");

    let text = logs.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{text}");
    for line in warnings {
        assert!(line.contains("namespace=sandboxes"), "{line}");
        assert!(line.contains("code=403"), "{line}");
        assert!(line.contains("RBAC"), "{line}");
    }
    let reaped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("reaped sandbox pod"))
        .collect();
    assert_eq!(reaped.len(), 1, "{text}");
    assert!(reaped[0].contains("job_id=a") && reaped[0].contains("sandboxes/sb-a"));
    assert!(
        reaped[0].contains("driver Job tcab-driver-a-1 failed"),
        "{}",
        reaped[0]
    );
}

/// A delete that fails backs its job id off (5 s, then doubling), and the
/// log says so: the warn line names the failure and the back-off, a line for
/// the job id says when it is tried again, and nothing says "next tick".
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_delete_is_logged_with_its_back_off_not_as_retried_next_tick() {
    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // Every delete of the sandbox fails until the test lets it through.
    let refusing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let refuse_deletes = refusing.clone();
    let jobs = vec![job("tcab-driver-a-1", "a", true)];
    let (client, _seen) = api_with(vec![sandbox("sb-a", "a")], &jobs, move |req| {
        if is_delete(req) && refuse_deletes.load(std::sync::atomic::Ordering::SeqCst) {
            refuse(500, "InternalError")
        } else {
            None
        }
    })
    .await;
    let mut r = reaper(client, cache(jobs));
    let first = r.tick().await;
    assert!(matches!(
        first.outcomes()[0].1,
        DeleteOutcome::Failed {
            code: Some(500),
            ..
        }
    ));
    assert_eq!(first.backed_off["a"].failures, 1);
    assert!(r.tick().await.due.reap.is_empty(), "not at the next tick");
    // Due again after 5 s, failing again: 10 s this time.
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    let second = r.tick().await;
    assert_eq!(second.backed_off["a"].failures, 2);
    refusing.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    let third = r.tick().await;
    assert_eq!(
        third.completed,
        std::collections::BTreeSet::from(["a".to_owned()])
    );
    assert!(third.backed_off.is_empty());

    let text = logs.text();
    assert!(!text.contains("retrying next tick"), "{text}");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("cannot delete sandbox pod"))
        .collect();
    assert_eq!(warnings.len(), 2, "{text}");
    for line in &warnings {
        assert!(line.contains("WARN") && line.contains("code=500"), "{line}");
        assert!(
            line.contains("the reap of its job id backs off before it is tried again"),
            "{line}"
        );
    }
    let backing_off: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("the reap of this job id failed") && l.contains("job_id=a"))
        .collect();
    assert_eq!(backing_off.len(), 2, "{text}");
    // 5 s, then 10 s, each up to a fifth shorter (jitter), in whole seconds.
    assert!(
        ["4", "5"].iter().any(|s| backing_off[0].contains(&format!(
            "it is tried again in {s} s (attempt 1), not at the next tick"
        ))),
        "{}",
        backing_off[0]
    );
    assert!(
        ["8", "9", "10"]
            .iter()
            .any(|s| backing_off[1].contains(&format!("it is tried again in {s} s (attempt 2)"))),
        "{}",
        backing_off[1]
    );
}
