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
//! `GET /admin/faults` shows the open windows, the paths of the requests
//! held right now, and how many were stalled and errored so far.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The active fault rules, and what they did so far.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    rules: Arc<Mutex<Vec<Rule>>>,
    /// Paths of the requests held right now.
    held: Arc<Mutex<Vec<String>>>,
    stalled: Arc<AtomicU64>,
    errored: Arc<AtomicU64>,
}

/// What `GET /admin/faults` answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultsStatus {
    /// The windows still open.
    pub rules: Vec<RuleStatus>,
    /// Paths of the requests held right now (a stalled request until it is
    /// applied).
    pub held: Vec<String>,
    /// Requests stalled so far.
    pub stalled: u64,
    /// Requests answered 500 so far.
    pub errored: u64,
}

/// One open window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleStatus {
    /// Its path patterns.
    pub paths: Vec<String>,
    /// `stall` or `error`.
    pub mode: &'static str,
    /// Real seconds left.
    pub seconds_left: f64,
}

/// Counts a held request while it is held.
struct Holding {
    held: Arc<Mutex<Vec<String>>>,
    path: String,
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.iter().position(|p| *p == self.path) {
            held.remove(i);
        }
    }
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

    /// The open windows at `now` and what the faults did so far.
    pub fn status(&self, now: Instant) -> FaultsStatus {
        let rules = self
            .lock()
            .iter()
            .filter(|r| r.until > now)
            .map(|r| RuleStatus {
                paths: r.paths.clone(),
                mode: match r.mode {
                    FaultMode::Stall => "stall",
                    FaultMode::Error => "error",
                },
                seconds_left: r.until.saturating_duration_since(now).as_secs_f64(),
            })
            .collect();
        FaultsStatus {
            rules,
            held: self.held.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            stalled: self.stalled.load(Ordering::SeqCst),
            errored: self.errored.load(Ordering::SeqCst),
        }
    }

    fn hold(&self, path: &str) -> Holding {
        self.stalled.fetch_add(1, Ordering::SeqCst);
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.to_owned());
        Holding {
            held: self.held.clone(),
            path: path.to_owned(),
        }
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
        Some((FaultMode::Error, _)) => {
            faults.errored.fetch_add(1, Ordering::SeqCst);
            (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({"error": {"code": "internal", "message": "injected fault: the backend failed"}})),
        )
            .into_response()
        }
        Some((FaultMode::Stall, until)) => {
            tracing::info!(%path, "injected stall: the request is held, then applied");
            let holding = faults.hold(&path);
            // Applied in its own task, so a caller that gives up does not
            // cancel it: the backend applies it late, as a stuck one would.
            let held = tokio::spawn(async move {
                tokio::time::sleep_until(until.into()).await;
                let response = next.run(req).await;
                drop(holding);
                response
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
        let status = faults.status(t0 + Duration::from_secs(1));
        assert_eq!(status.rules.len(), 1);
        assert_eq!(status.rules[0].mode, "error");
        assert!((status.rules[0].seconds_left - 1.0).abs() < 1e-6);
        assert!(faults.status(t0 + Duration::from_secs(2)).rules.is_empty());
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

    #[test]
    fn held_requests_are_listed_while_held_and_counted() {
        let faults = Faults::default();
        let a = faults.hold("/jobs/next");
        let b = faults.hold("/jobs/next");
        let status = faults.status(Instant::now());
        assert_eq!(status.held, ["/jobs/next", "/jobs/next"]);
        drop(a);
        assert_eq!(faults.status(Instant::now()).held.len(), 1);
        drop(b);
        let status = faults.status(Instant::now());
        assert!(status.held.is_empty());
        assert_eq!((status.stalled, status.errored), (2, 0));
    }
}
