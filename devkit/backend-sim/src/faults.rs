//! Injected faults, for tests of how the dispatcher lives through a backend
//! that stalls or fails: served under `/admin/faults` when the test admin is
//! on (`--enable-test-clock`).
//!
//! - `stall`: a request arriving during the window is held until the window
//!   ends and only then applied, even if its caller gave up meanwhile (a
//!   backend stuck on a database lock applies a claim late);
//! - `error`: a request arriving during the window is answered 500 and
//!   changes nothing.
//!
//! A rule names the paths it applies to; `*` matches one path segment
//! (`/jobs/*/status`). Windows are real time (the dispatcher lives in real
//! time; the test clock only moves the backend's own leases).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a fault does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    /// Hold it until the window ends, then apply it.
    Stall,
    /// Answer 500 and change nothing.
    Error,
}

/// The body of `POST /admin/faults`.
#[derive(Debug, Clone, Deserialize)]
pub struct FaultRequest {
    /// Path patterns (`*` = one segment).
    pub paths: Vec<String>,
    /// What to do.
    pub mode: FaultMode,
    /// How long the window lasts, from now.
    pub seconds: f64,
}

#[derive(Debug, Clone)]
struct Rule {
    paths: Vec<String>,
    mode: FaultMode,
    until: Instant,
}

/// The active fault rules.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    rules: Arc<Mutex<Vec<Rule>>>,
}

/// Whether `path` matches `pattern` (`*` matches exactly one segment).
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.trim_matches('/').split('/');
    let mut got = path.trim_matches('/').split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some("*"), Some(_)) => {}
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

impl Faults {
    /// Adds a rule; an invalid one is refused with why.
    pub fn add(&self, req: FaultRequest, now: Instant) -> Result<(), String> {
        if req.paths.is_empty() {
            return Err("paths must name at least one path".into());
        }
        if !req.seconds.is_finite() || req.seconds <= 0.0 || req.seconds > 3600.0 {
            return Err("seconds must be a number in (0, 3600]".into());
        }
        let until = now + Duration::from_secs_f64(req.seconds);
        self.lock().push(Rule {
            paths: req.paths,
            mode: req.mode,
            until,
        });
        Ok(())
    }

    /// Drops every rule.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fault a request to `path` meets at `now`, and until when.
    pub fn find(&self, path: &str, now: Instant) -> Option<(FaultMode, Instant)> {
        let mut rules = self.lock();
        rules.retain(|r| r.until > now);
        rules
            .iter()
            .find(|r| r.paths.iter().any(|p| path_matches(p, path)))
            .map(|r| (r.mode, r.until))
    }
}

/// The middleware: applies the fault a request meets, if any. Admin calls
/// are never faulted.
pub async fn apply(State(faults): State<Faults>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if path.starts_with("/admin/") {
        return next.run(req).await;
    }
    match faults.find(&path, Instant::now()) {
        None => next.run(req).await,
        Some((FaultMode::Error, _)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({"error": {"code": "internal", "message": "injected fault: the backend failed"}})),
        )
            .into_response(),
        Some((FaultMode::Stall, until)) => {
            tracing::info!(%path, "injected stall: the request is held, then applied");
            // Applied in its own task, so a caller that gives up does not
            // cancel it: the backend applies it late, as a stuck one would.
            let held = tokio::spawn(async move {
                tokio::time::sleep_until(until.into()).await;
                next.run(req).await
            });
            match held.await {
                Ok(response) => response,
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_segments() {
        assert!(path_matches("/jobs/next", "/jobs/next"));
        assert!(path_matches("/jobs/*/status", "/jobs/abc/status"));
        assert!(!path_matches("/jobs/*/status", "/jobs/abc/record"));
        assert!(!path_matches("/jobs", "/jobs/next"));
        assert!(!path_matches("/jobs/next", "/jobs"));
    }

    #[test]
    fn rules_apply_within_their_window_only() {
        let faults = Faults::default();
        let t0 = Instant::now();
        faults
            .add(
                FaultRequest {
                    paths: vec!["/jobs/leases".into(), "/jobs/next".into()],
                    mode: FaultMode::Error,
                    seconds: 2.0,
                },
                t0,
            )
            .unwrap();
        assert_eq!(
            faults.find("/jobs/next", t0 + Duration::from_secs(1)),
            Some((FaultMode::Error, t0 + Duration::from_secs(2)))
        );
        assert_eq!(faults.find("/jobs/active", t0), None);
        assert_eq!(faults.find("/jobs/next", t0 + Duration::from_secs(2)), None);
        assert!(
            faults
                .add(
                    FaultRequest {
                        paths: vec![],
                        mode: FaultMode::Stall,
                        seconds: 1.0
                    },
                    t0
                )
                .is_err()
        );
        faults.clear();
        assert_eq!(faults.find("/jobs/leases", t0), None);
    }
}
