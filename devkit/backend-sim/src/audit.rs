//! The backend's own record of who changed what and when, for tests that
//! check the dispatcher from the outside (the chaos suite): served at
//! `GET /admin/history` only with `--enable-test-clock`.
//!
//! - Every history entry is stamped with the request that made it: the wall
//!   time (the sim's clock without the test-clock offset, so it lines up with
//!   other processes on the machine while `at` follows the test clock), the
//!   call (`POST /jobs/{id}/status`), the caller's `User-Agent` (the
//!   dispatcher's binaries name themselves,
//!   `tcab-admitter/<version>`; the fake drivers
//!   send none), and the claim tag of the token in effect (the first 8 hex
//!   digits of its SHA-256, the same tag the dispatcher puts on a Job's
//!   `tcab.dev/claim` label).
//! - A per-job call refused for its token (401) is kept in memory (the last
//!   [`MAX_REFUSALS`]): when, which call, which job, which claim's token.
//!   Refusals change nothing, so they have no history entry.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;

/// The longest `User-Agent` kept.
const MAX_AGENT: usize = 80;
/// How many refusals are kept (the oldest go first).
pub const MAX_REFUSALS: usize = 10_000;

/// The request being served, as the history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `METHOD /path`.
    pub call: String,
    /// The `User-Agent` header, cut to 80 characters.
    pub agent: Option<String>,
}

impl Caller {
    /// The caller of a request with this method, path and `User-Agent`.
    pub fn new(method: &str, path: &str, agent: Option<&str>) -> Self {
        Caller {
            call: format!("{method} {path}"),
            agent: agent.map(|a| a.chars().take(MAX_AGENT).collect()),
        }
    }
}

tokio::task_local! {
    /// The request the current task serves (set by the HTTP layer).
    pub(crate) static CALLER: Caller;
}

/// The caller of the request the current task serves, if any.
pub(crate) fn current_caller() -> Option<Caller> {
    CALLER.try_with(Clone::clone).ok()
}

/// The claim tag of a token hash (hex SHA-256): its first 8 digits.
pub fn claim_tag(token_hash: &str) -> String {
    token_hash.chars().take(8).collect()
}

/// One history entry as `GET /admin/history` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditEntry {
    /// Position in the history (increasing).
    pub seq: i64,
    /// `run` or `publish`.
    pub lane: String,
    /// The job.
    pub job_id: String,
    /// The state entered.
    pub state: String,
    /// When, by the backend's clock (the test clock).
    pub at: jiff::Timestamp,
    /// When, by the wall clock (`None` for entries written before this
    /// record existed).
    pub wall_at: Option<jiff::Timestamp>,
    /// The detail of the change.
    pub detail: Option<String>,
    /// The call that made it (`None`: made outside a request).
    pub call: Option<String>,
    /// That call's `User-Agent`.
    pub caller: Option<String>,
    /// The claim tag of the job's token when the change was made (none for
    /// a job waiting in the queue).
    pub claim: Option<String>,
}

/// A per-job call refused for its token.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Refusal {
    /// When, by the wall clock.
    pub wall_at: jiff::Timestamp,
    /// When, by the backend's clock.
    pub at: jiff::Timestamp,
    /// `METHOD /path`.
    pub call: String,
    /// The job the path names.
    pub job_id: String,
    /// The claim tag of the token presented.
    pub claim: String,
    /// The caller's `User-Agent`.
    pub caller: Option<String>,
}

/// The refusals kept in memory.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    kept: Mutex<VecDeque<Refusal>>,
}

impl Refusals {
    /// Keeps one refusal (dropping the oldest past [`MAX_REFUSALS`]).
    pub(crate) fn push(&self, r: Refusal) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= MAX_REFUSALS {
            kept.pop_front();
        }
        kept.push_back(r);
    }

    /// Every refusal kept, oldest first.
    pub(crate) fn all(&self) -> Vec<Refusal> {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// What `GET /admin/history` answers.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryDump {
    /// History entries after the `after` asked for, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Every refusal kept.
    pub refused: Vec<Refusal>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_keeps_its_call_and_a_bounded_agent() {
        let long = "x".repeat(200);
        let c = Caller::new("POST", "/jobs/a/status", Some(&long));
        assert_eq!(c.call, "POST /jobs/a/status");
        assert_eq!(c.agent.as_deref().map(str::len), Some(MAX_AGENT));
        assert_eq!(Caller::new("GET", "/x", None).agent, None);
    }

    #[test]
    fn claim_tags_are_the_first_eight_digits() {
        assert_eq!(claim_tag("0123456789abcdef"), "01234567");
        assert_eq!(claim_tag("ab"), "ab");
    }

    #[test]
    fn refusals_are_bounded_oldest_first() {
        let r = Refusals::default();
        let t = jiff::Timestamp::UNIX_EPOCH;
        for i in 0..MAX_REFUSALS + 2 {
            r.push(Refusal {
                wall_at: t,
                at: t,
                call: format!("POST /jobs/{i}/status"),
                job_id: i.to_string(),
                claim: "c".into(),
                caller: None,
            });
        }
        let all = r.all();
        assert_eq!(all.len(), MAX_REFUSALS);
        assert_eq!(all[0].job_id, "2");
    }

    #[tokio::test]
    async fn the_caller_is_read_inside_its_scope_only() {
        assert_eq!(current_caller(), None);
        let c = Caller::new("POST", "/jobs/next", Some("tcab-dispatcher/1"));
        let seen = CALLER.scope(c.clone(), async { current_caller() }).await;
        assert_eq!(seen, Some(c));
    }
}

/// Calls served, per caller `User-Agent` ("" without one) and route
/// (`POST /jobs/{id}/status`): how many backend calls each dispatcher
/// binary makes (the benchmarks read it from `GET /admin/calls`).
#[derive(Debug, Default)]
pub(crate) struct Calls(Mutex<CallCounts>);

/// Calls per `User-Agent`, then per route.
pub type CallCounts = std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>;

impl Calls {
    /// Counts one call of `route` by `agent`.
    pub(crate) fn count(&self, agent: Option<&str>, route: &str) {
        let agent: String = agent.unwrap_or_default().chars().take(MAX_AGENT).collect();
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *calls
            .entry(agent)
            .or_default()
            .entry(route.to_owned())
            .or_default() += 1;
    }

    /// The counts so far; with `reset`, starts again from none.
    pub(crate) fn take(&self, reset: bool) -> CallCounts {
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if reset {
            std::mem::take(&mut *calls)
        } else {
            calls.clone()
        }
    }
}
