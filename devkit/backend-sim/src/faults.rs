//! Injected faults, for tests of how the dispatcher lives through a backend
//! that stalls or fails: served under `/admin/faults` when the test admin is
//! on (`--enable-test-clock`).
//!
//! - `stall`: a request arriving during the window is held until the window
//!   ends and only then applied, even if its caller gave up meanwhile (a
//!   backend stuck on a database lock applies a claim late);
//! - `error`: a request arriving during the window is answered 500 and
//!   changes nothing;
//! - `status`: answered with the given status (400..=599) and the
//!   contract's error body, changing nothing (a report the backend refuses);
//! - `body`: the request is applied, and a 200 answer is replaced by the
//!   given JSON (a claim committed whose answer is poisoned); with
//!   `"merge": true` the JSON is a merge patch (RFC 7386) on the real answer,
//!   so one field can be poisoned while the id and token stay the real ones.
//!   Any other answer (a 204 empty claim, an error) passes unchanged;
//! - `delay`: the request waits `delay_ms` milliseconds, then is served as
//!   usual (a backend that answers in milliseconds, not microseconds: the
//!   latency profile of a benchmark); nothing of it is applied before the
//!   wait ends (unlike `stall`, a caller that hangs up may cancel it).
//!
//! A rule names the paths it applies to; `*` matches one path segment
//! (`/jobs/*/status`), and `**` as the last segment any rest of the path
//! (`/**` is every call but the admin's). Windows are real time (the dispatcher lives in real
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

/// The `mode` of `POST /admin/faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    /// Hold it until the window ends, then apply it.
    Stall,
    /// Answer 500 and change nothing.
    Error,
    /// Answer `status` with the contract's error body and change nothing.
    Status,
    /// Apply it, then answer 200 with `body` instead (or `body` merged into
    /// the answer, with `merge`).
    Body,
    /// Wait `delay_ms`, then serve it as usual.
    Delay,
}

/// The body of `POST /admin/faults`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRequest {
    /// Path patterns (`*` = one segment).
    pub paths: Vec<String>,
    /// What to do.
    pub mode: FaultMode,
    /// How long the window lasts, from now.
    pub seconds: f64,
    /// The status a `status` fault answers (400..=599).
    #[serde(default)]
    pub status: Option<u16>,
    /// The answer a `body` fault gives instead of a 200's own.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// A `body` fault merges `body` into the real answer (RFC 7386) instead
    /// of replacing it.
    #[serde(default)]
    pub merge: bool,
    /// How long a `delay` fault holds each request, in milliseconds
    /// (1..=60000).
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

/// What a fault does to a matching request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Hold it until the window ends, then apply it.
    Stall,
    /// Answer 500 and change nothing.
    Error,
    /// Answer this status with the contract's error body, change nothing.
    Status(StatusCode),
    /// Apply it; a 200 answer becomes this body (merged into the answer's
    /// own when `merge`).
    Body {
        /// The JSON answered (or merged).
        body: serde_json::Value,
        /// Merge instead of replace.
        merge: bool,
    },
    /// Wait this long, then serve it as usual.
    Delay(Duration),
}

impl Action {
    fn of(req: &FaultRequest) -> Result<Action, String> {
        match req.mode {
            FaultMode::Stall => Ok(Action::Stall),
            FaultMode::Error => Ok(Action::Error),
            FaultMode::Status => match req.status.map(StatusCode::from_u16) {
                Some(Ok(code)) if (400..=599).contains(&code.as_u16()) => Ok(Action::Status(code)),
                _ => Err("mode status needs \"status\": a number in 400..=599".into()),
            },
            FaultMode::Body => match &req.body {
                Some(body) => Ok(Action::Body {
                    body: body.clone(),
                    merge: req.merge,
                }),
                None => Err("mode body needs \"body\": the JSON to answer".into()),
            },
            FaultMode::Delay => match req.delay_ms {
                Some(ms @ 1..=MAX_DELAY_MS) => Ok(Action::Delay(Duration::from_millis(ms))),
                _ => Err(format!(
                    "mode delay needs \"delay_ms\": a number of milliseconds in 1..={MAX_DELAY_MS}"
                )),
            },
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Action::Stall => "stall",
            Action::Error => "error",
            Action::Status(_) => "status",
            Action::Body { .. } => "body",
            Action::Delay(_) => "delay",
        }
    }
}

/// The longest delay a `delay` fault may give one request (a minute).
pub const MAX_DELAY_MS: u64 = 60_000;

#[derive(Debug, Clone)]
struct Rule {
    paths: Vec<String>,
    action: Action,
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
    refused: Arc<AtomicU64>,
    replaced: Arc<AtomicU64>,
    delayed: Arc<AtomicU64>,
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
    /// Requests answered with a `status` fault's status so far.
    pub refused: u64,
    /// Answers replaced (or merged into) by a `body` fault so far.
    pub replaced: u64,
    /// Requests held by a `delay` fault so far.
    pub delayed: u64,
}

/// One open window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleStatus {
    /// Its path patterns.
    pub paths: Vec<String>,
    /// `stall`, `error`, `status`, `body` or `delay`.
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

/// Whether `path` matches `pattern` (`*` matches exactly one segment; `**`
/// as the last segment matches whatever follows, one segment or more).
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.trim_matches('/').split('/').peekable();
    let mut got = path.trim_matches('/').split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some("**"), Some(_)) if want.peek().is_none() => return true,
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
        let action = Action::of(&req)?;
        let until = now + Duration::from_secs_f64(req.seconds);
        self.lock().push(Rule {
            paths: req.paths,
            action,
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
    pub fn find(&self, path: &str, now: Instant) -> Option<(Action, Instant)> {
        let mut rules = self.lock();
        rules.retain(|r| r.until > now);
        rules
            .iter()
            .find(|r| r.paths.iter().any(|p| path_matches(p, path)))
            .map(|r| (r.action.clone(), r.until))
    }

    /// The open windows at `now` and what the faults did so far.
    pub fn status(&self, now: Instant) -> FaultsStatus {
        let rules = self
            .lock()
            .iter()
            .filter(|r| r.until > now)
            .map(|r| RuleStatus {
                paths: r.paths.clone(),
                mode: r.action.name(),
                seconds_left: r.until.saturating_duration_since(now).as_secs_f64(),
            })
            .collect();
        FaultsStatus {
            rules,
            held: self.held.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            stalled: self.stalled.load(Ordering::SeqCst),
            errored: self.errored.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
            replaced: self.replaced.load(Ordering::SeqCst),
            delayed: self.delayed.load(Ordering::SeqCst),
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
        Some((Action::Status(status), _)) => {
            faults.refused.fetch_add(1, Ordering::SeqCst);
            let code = match status.as_u16() {
                400 => "bad_request",
                401 => "unauthorized",
                404 => "not_found",
                409 => "conflict",
                500..=599 => "internal",
                _ => "injected",
            };
            let message = format!("injected fault: the backend answered {status}");
            (
                status,
                axum::Json(serde_json::json!({"error": {"code": code, "message": message}})),
            )
                .into_response()
        }
        Some((Action::Body { body, merge }, _)) => {
            let response = next.run(req).await;
            if response.status() != StatusCode::OK {
                return response;
            }
            faults.replaced.fetch_add(1, Ordering::SeqCst);
            let body = if merge {
                let (_, real) = response.into_parts();
                let bytes = axum::body::to_bytes(real, usize::MAX)
                    .await
                    .unwrap_or_default();
                let mut answer: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                json_patch::merge(&mut answer, &body);
                answer
            } else {
                body
            };
            tracing::info!(%path, "injected body: a 200 answer replaced");
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Some((Action::Error, _)) => {
            faults.errored.fetch_add(1, Ordering::SeqCst);
            (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({"error": {"code": "internal", "message": "injected fault: the backend failed"}})),
        )
            .into_response()
        }
        Some((Action::Delay(delay), _)) => {
            faults.delayed.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            next.run(req).await
        }
        Some((Action::Stall, until)) => {
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

    fn request(paths: &[&str], mode: FaultMode, seconds: f64) -> FaultRequest {
        FaultRequest {
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            mode,
            seconds,
            status: None,
            body: None,
            merge: false,
            delay_ms: None,
        }
    }

    #[test]
    fn status_and_body_faults_need_their_value() {
        let faults = Faults::default();
        let t0 = Instant::now();
        let mut status = request(&["/jobs/*/status"], FaultMode::Status, 5.0);
        assert!(faults.add(status.clone(), t0).is_err(), "no status");
        status.status = Some(200);
        assert!(
            faults.add(status.clone(), t0).is_err(),
            "not an error status"
        );
        status.status = Some(400);
        faults.add(status, t0).unwrap();
        assert_eq!(
            faults.find("/jobs/a/status", t0).map(|(a, _)| a),
            Some(Action::Status(StatusCode::BAD_REQUEST))
        );
        let mut body = request(&["/jobs/next"], FaultMode::Body, 5.0);
        assert!(faults.add(body.clone(), t0).is_err(), "no body");
        body.body = Some(serde_json::json!({"job": {"id": "../x"}}));
        faults.add(body, t0).unwrap();
        assert!(matches!(
            faults.find("/jobs/next", t0),
            Some((Action::Body { merge: false, .. }, _))
        ));
        let modes: Vec<&str> = faults.status(t0).rules.iter().map(|r| r.mode).collect();
        assert_eq!(modes, ["status", "body"]);
    }

    #[test]
    fn patterns_match_whole_segments() {
        assert!(path_matches("/jobs/next", "/jobs/next"));
        assert!(path_matches("/jobs/*/status", "/jobs/abc/status"));
        assert!(!path_matches("/jobs/*/status", "/jobs/abc/record"));
        assert!(!path_matches("/jobs", "/jobs/next"));
        assert!(!path_matches("/jobs/next", "/jobs"));
        assert!(path_matches("/**", "/jobs/next"));
        assert!(path_matches("/jobs/**", "/jobs/abc/status"));
        assert!(!path_matches("/jobs/**", "/publish-jobs/next"));
        assert!(!path_matches("/jobs/**", "/jobs"));
        assert!(!path_matches("/**/next", "/jobs/next"));
    }

    #[test]
    fn a_delay_fault_needs_its_delay() {
        let faults = Faults::default();
        let t0 = Instant::now();
        let mut delay = request(&["/**"], FaultMode::Delay, 5.0);
        assert!(faults.add(delay.clone(), t0).is_err(), "no delay_ms");
        delay.delay_ms = Some(0);
        assert!(faults.add(delay.clone(), t0).is_err(), "a zero delay");
        delay.delay_ms = Some(MAX_DELAY_MS + 1);
        assert!(faults.add(delay.clone(), t0).is_err(), "over a minute");
        delay.delay_ms = Some(10);
        faults.add(delay, t0).unwrap();
        assert_eq!(
            faults.find("/publish-jobs/abc/result", t0).map(|(a, _)| a),
            Some(Action::Delay(Duration::from_millis(10)))
        );
        assert_eq!(faults.status(t0).rules[0].mode, "delay");
    }

    #[test]
    fn rules_apply_within_their_window_only() {
        let faults = Faults::default();
        let t0 = Instant::now();
        faults
            .add(
                request(&["/jobs/leases", "/jobs/next"], FaultMode::Error, 2.0),
                t0,
            )
            .unwrap();
        assert_eq!(
            faults.find("/jobs/next", t0 + Duration::from_secs(1)),
            Some((Action::Error, t0 + Duration::from_secs(2)))
        );
        assert_eq!(faults.find("/jobs/active", t0), None);
        let status = faults.status(t0 + Duration::from_secs(1));
        assert_eq!(status.rules.len(), 1);
        assert_eq!(status.rules[0].mode, "error");
        assert!((status.rules[0].seconds_left - 1.0).abs() < 1e-6);
        assert!(faults.status(t0 + Duration::from_secs(2)).rules.is_empty());
        assert_eq!(faults.find("/jobs/next", t0 + Duration::from_secs(2)), None);
        assert!(faults.add(request(&[], FaultMode::Stall, 1.0), t0).is_err());
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
