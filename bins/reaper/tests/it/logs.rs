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
    let seen = seen.lock().journal.clone();
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
