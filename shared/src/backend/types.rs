//! Wire types of the backend contract. Field names and shapes are those of
//! docs/backend-contract.md; the example payloads in docs/contract/ parse
//! into these types (tested in the client's tests and in the reference backend's).

use crate::secret::Secret;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A backend job id (a run or a publish). Opaque to the dispatcher, but it
/// becomes a label value, so the client rejects an id that is not one.
pub type JobId = String;

/// The state of a run job at the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
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

impl JobState {
    /// Not terminal: neither succeeded, failed nor cancelled.
    pub fn is_live(self) -> bool {
        !matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// Starting, running, validating or storing: a driver reported.
    pub fn is_past_dispatched(self) -> bool {
        matches!(
            self,
            JobState::Starting | JobState::Running | JobState::Validating | JobState::Storing
        )
    }

    /// Dispatched through storing: the backend believes a driver holds it.
    pub fn is_driven(self) -> bool {
        self == JobState::Dispatched || self.is_past_dispatched()
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Pending => "pending",
            JobState::Dispatched => "dispatched",
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Validating => "validating",
            JobState::Storing => "storing",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// The state of a publish job at the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishState {
    Queued,
    Dispatched,
    Succeeded,
    Failed,
}

/// `POST /jobs/next` answered 200.
#[derive(Debug, Clone, Deserialize)]
pub struct RunClaim {
    pub job: ClaimedRun,
}

/// A run handed to this dispatcher by an atomic claim.
#[derive(Debug, Clone, Deserialize)]
pub struct ClaimedRun {
    pub id: JobId,
    /// The per-job token the driver presents on its reports.
    pub token: Secret,
    pub queue_seq: i64,
    pub harness: String,
    pub model: String,
    #[serde(default)]
    pub case: Option<String>,
    #[serde(default)]
    pub jam: Option<String>,
    #[serde(default)]
    pub attempt: u32,
    /// What the driver is to run; passed to it serialized, untouched.
    pub launch_request: serde_json::Value,
    pub lease_expires_at: Timestamp,
    /// When the job entered the queue, when the backend says (it feeds the
    /// queue-wait metric only, so one that is absent or unreadable is none).
    #[serde(default, deserialize_with = "lenient_timestamp")]
    pub enqueued_at: Option<Timestamp>,
}

/// `POST /publish-jobs/next` answered 200.
#[derive(Debug, Clone, Deserialize)]
pub struct PublishClaim {
    pub publish_job: ClaimedPublish,
}

/// A publish handed to this dispatcher by an atomic claim.
#[derive(Debug, Clone, Deserialize)]
pub struct ClaimedPublish {
    pub id: JobId,
    pub token: Secret,
    /// What the publisher is to release; passed to it serialized, untouched.
    pub request: serde_json::Value,
    pub lease_expires_at: Timestamp,
    /// When the publish entered the queue, as for a run.
    #[serde(default, deserialize_with = "lenient_timestamp")]
    pub enqueued_at: Option<Timestamp>,
}

/// An optional timestamp that only feeds a metric: anything but an RFC 3339
/// time (absent, `null`, a number, a malformed text) reads as none rather
/// than poisoning the claim it came with.
fn lenient_timestamp<'de, D>(deserializer: D) -> Result<Option<Timestamp>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(value.as_str().and_then(|text| text.parse().ok()))
}

/// What a claim answered 200 came to: a job the dispatcher can make a Job
/// of, or a poisoned answer (the backend committed the claim, but its body
/// cannot become a Job).
#[derive(Debug, Clone)]
pub enum ClaimAnswer<T> {
    /// Every field present, well-typed and checked.
    Job(T),
    /// Not usable; what could be read of it.
    Poisoned(PoisonedClaim),
}

/// A claim answered 200 whose body breaks the contract: the id and token
/// when the answer carried valid ones (so the claim can be reported failed
/// with its own token), why the rest is unusable, and the answer's shape
/// for the log. Its `Debug` never shows the token.
#[derive(Debug, Clone)]
pub struct PoisonedClaim {
    /// The HTTP status the claim was answered with (a success).
    pub status: u16,
    /// The job id, when the answer carried a valid one.
    pub id: Option<JobId>,
    /// The per-job token, when the answer carried a usable one.
    pub token: Option<Secret>,
    /// Why the answer is unusable, naming the field (scrubbed of tokens;
    /// never the value of a token field).
    pub reason: String,
    /// The answer's keys and value types (`{job: {id: string, ...}}`), never
    /// a value.
    pub shape: String,
}

/// The outcome a publisher (or the dispatcher, for a poisoned claim)
/// reports with `POST /publish-jobs/{id}/result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishOutcome {
    Succeeded,
    Failed,
}

/// Body of `POST /publish-jobs/{id}/result` (per-job token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishResult {
    pub outcome: PublishOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Body of `POST /jobs/leases` and `POST /publish-jobs/leases`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeaseRequest {
    pub job_ids: Vec<JobId>,
}

/// Answer of a lease renewal: the leases renewed (ids not driven are left out).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct LeaseRenewal {
    /// The backend's clock (informational; nothing is judged on it).
    pub now: Timestamp,
    pub leases: Vec<Lease>,
    /// Entries of the answer that could not be read (counted as not renewed).
    #[serde(skip)]
    pub skipped: Vec<SkippedEntry>,
}

/// A lease renewal as the client reads it: which of the asked ids the
/// backend renewed, as positions in the ask (in the answer's order), and the
/// entries that could not be read (counted as not renewed).
#[derive(Debug, Clone, PartialEq)]
pub struct RenewedLeases {
    /// The backend's clock (informational; nothing is judged on it).
    pub now: Timestamp,
    /// Positions in the ask of the renewed ids.
    pub renewed: Vec<usize>,
    /// Entries of the answer that could not be read.
    pub skipped: Vec<SkippedEntry>,
}

/// An entry of a list answer that could not be read: the rest of the list
/// is used, and this one is named in a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedEntry {
    /// Its position in the list.
    pub index: usize,
    /// Its id, when that much was readable and valid.
    pub id: Option<JobId>,
    /// Why it was skipped (the field and what was wrong, never a token).
    pub why: String,
}

/// One renewed lease.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Lease {
    pub id: JobId,
    pub lease_expires_at: Timestamp,
}

/// `GET /jobs/active`: the runs the backend believes are driven.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ActiveRuns {
    /// The backend's clock when it answered.
    pub now: Timestamp,
    pub jobs: Vec<ActiveRun>,
    /// Entries that could not be read (e.g. a state this client does not
    /// know): left out, so the rest are judged.
    #[serde(skip)]
    pub skipped: Vec<SkippedEntry>,
}

/// One driven run and its lease.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ActiveRun {
    pub id: JobId,
    pub state: JobState,
    pub lease_expires_at: Option<Timestamp>,
}

/// `GET /publish-jobs/active`: the publishes the backend believes are driven.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ActivePublishes {
    pub now: Timestamp,
    pub publish_jobs: Vec<ActivePublish>,
    /// Entries that could not be read: left out, so the rest are judged.
    #[serde(skip)]
    pub skipped: Vec<SkippedEntry>,
}

/// One dispatched publish and its lease.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ActivePublish {
    pub id: JobId,
    pub state: PublishState,
    pub lease_expires_at: Option<Timestamp>,
}

/// `GET /jobs/{id}` (the fields the dispatcher reads; the backend may send more).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct JobView {
    pub id: JobId,
    pub state: JobState,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub lease_expires_at: Option<Timestamp>,
}

/// Body of `POST /jobs/{id}/lost` and `POST /publish-jobs/{id}/lost`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LostReport {
    /// What the cluster shows: the dead pod's reason, a driver that exited
    /// without its report landing, or a Job that no longer exists.
    pub detail: String,
}

/// Answer of a lost report.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct LostOutcome {
    pub id: JobId,
    /// True when the job was no longer driven and the report changed nothing.
    pub ignored: bool,
    /// The job's state after the report.
    pub state: String,
    /// The id of the automatic retry, when one was enqueued.
    #[serde(default)]
    pub retry_id: Option<JobId>,
}

/// Why a run failed, as the backend classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The platform failed the run (a dead driver); retried automatically.
    Infrastructure,
    /// The agent or the case failed; not retried.
    Agent,
}

/// Body of `POST /jobs/{id}/status`, made with the per-job token. The
/// dispatcher sends only `failed` + `infrastructure` (a death report).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatusReport {
    pub state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
}

/// Answer of a status report.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct StatusAck {
    pub id: JobId,
    pub state: JobState,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_predicates() {
        use JobState::*;
        for s in [Starting, Running, Validating, Storing] {
            assert!(s.is_past_dispatched() && s.is_driven() && s.is_live());
        }
        assert!(Dispatched.is_driven() && !Dispatched.is_past_dispatched());
        for s in [Succeeded, Failed, Cancelled] {
            assert!(!s.is_live() && !s.is_driven());
        }
        assert!(Queued.is_live() && !Queued.is_driven());
    }
}
