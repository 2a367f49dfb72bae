//! The sim's vocabulary: job states, failure kinds, and their wire spellings.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The state of a run job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Pending,
    Dispatched,
    Starting,
    Running,
    Validating,
    Storing,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunState {
    /// Every state, in order.
    pub const ALL: [RunState; 10] = [
        RunState::Queued,
        RunState::Pending,
        RunState::Dispatched,
        RunState::Starting,
        RunState::Running,
        RunState::Validating,
        RunState::Storing,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Cancelled,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Pending => "pending",
            RunState::Dispatched => "dispatched",
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Validating => "validating",
            RunState::Storing => "storing",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Succeeded, failed or cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Failed | RunState::Cancelled
        )
    }

    /// Queued or pending: waiting for a claim.
    pub fn is_waiting(self) -> bool {
        matches!(self, RunState::Queued | RunState::Pending)
    }

    /// Dispatched through storing: a driver is believed to hold it.
    pub fn is_driven(self) -> bool {
        self.progress().is_some()
    }

    /// Position along the driven states (dispatched = 0 .. storing = 4),
    /// used to keep reports moving forward only.
    pub fn progress(self) -> Option<u8> {
        match self {
            RunState::Dispatched => Some(0),
            RunState::Starting => Some(1),
            RunState::Running => Some(2),
            RunState::Validating => Some(3),
            RunState::Storing => Some(4),
            _ => None,
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The states that appear in SQL `IN (...)` lists for driven runs.
pub(crate) const DRIVEN_SQL: &str = "('dispatched','starting','running','validating','storing')";

/// The state of a publish job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishState {
    Queued,
    Dispatched,
    Succeeded,
    Failed,
}

impl PublishState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PublishState::Queued => "queued",
            PublishState::Dispatched => "dispatched",
            PublishState::Succeeded => "succeeded",
            PublishState::Failed => "failed",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            PublishState::Queued,
            PublishState::Dispatched,
            PublishState::Succeeded,
            PublishState::Failed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

impl fmt::Display for PublishState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The platform failed the run (a dead driver): retried automatically.
    Infrastructure,
    /// The agent or the case failed: not retried.
    Agent,
}

impl FailureKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Infrastructure => "infrastructure",
            FailureKind::Agent => "agent",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "infrastructure" => Some(FailureKind::Infrastructure),
            "agent" => Some(FailureKind::Agent),
            _ => None,
        }
    }
}

/// The outcome a publisher reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishOutcome {
    Succeeded,
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for s in RunState::ALL {
            assert_eq!(RunState::parse(s.as_str()), Some(s));
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, serde_json::Value::String(s.as_str().into()));
        }
        assert_eq!(RunState::parse("nope"), None);
        for k in [FailureKind::Infrastructure, FailureKind::Agent] {
            assert_eq!(FailureKind::parse(k.as_str()), Some(k));
        }
    }

    #[test]
    fn driven_sql_lists_exactly_the_driven_states() {
        let listed: Vec<&str> = RunState::ALL
            .into_iter()
            .filter(|s| s.is_driven())
            .map(RunState::as_str)
            .collect();
        let sql: Vec<&str> = DRIVEN_SQL
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .map(|s| s.trim_matches('\''))
            .collect();
        assert_eq!(listed, sql);
    }
}
