//! Waiting for something a test can observe, never for a fixed time: each
//! helper polls (or awaits) until the condition holds and panics with `what`
//! once the deadline passes. The deadline is measured on tokio's clock, so
//! these work under a paused clock too.

use std::future::Future;
use std::time::Duration;

/// How long a poll waits before looking again.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `check` until it holds; panics naming `what` after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the asynchronous `check` until it returns `Some`, and returns that;
/// panics naming `what` after `limit`.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Runs the asynchronous `check` until it returns `Ok`, and returns that;
/// after `limit` panics naming `what` and the last `Err` it gave (what was
/// seen instead), so a timeout says how far things got. `check` may borrow
/// mutably (a tick driven by the test, say).
pub async fn settled<T, S: std::fmt::Display>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<T, S>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for: {what}; last seen: {seen}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `fut`; panics naming `what` if it has not finished after `limit`.
pub async fn within<T>(what: &str, limit: Duration, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn eventually_returns_once_the_condition_holds() {
        let n = Arc::new(AtomicUsize::new(0));
        let seen = n.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::task::yield_now().await;
                n.fetch_add(1, Ordering::SeqCst);
            }
        });
        eventually("three increments", Duration::from_secs(5), || {
            seen.load(Ordering::SeqCst) == 3
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out waiting for: never")]
    async fn eventually_panics_with_what_after_the_deadline() {
        eventually("never", Duration::from_secs(1), || false).await;
    }

    #[tokio::test]
    async fn until_returns_the_first_value() {
        let mut calls = 0;
        let got = until("the third call", Duration::from_secs(5), || {
            calls += 1;
            let now = calls;
            async move { (now == 3).then_some(now) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out: a pending future")]
    async fn within_panics_with_what_after_the_deadline() {
        within(
            "a pending future",
            Duration::from_secs(1),
            std::future::pending::<()>(),
        )
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn settled_returns_the_first_ok_and_may_borrow_mutably() {
        let mut calls = 0;
        let got = settled("the third call", Duration::from_secs(5), async || {
            calls += 1;
            if calls == 3 { Ok(calls) } else { Err(calls) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out waiting for: never; last seen: 2 of 3")]
    async fn settled_names_what_it_saw_last() {
        settled(
            "never",
            Duration::from_secs(1),
            async || -> Result<(), String> { Err("2 of 3".to_owned()) },
        )
        .await;
    }
}
