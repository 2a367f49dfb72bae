//! Request and answer bodies, exactly as docs/backend-contract.md and the
//! examples in docs/contract/ spell them (plus the console-only extras).

use crate::db::HistoryEntry;
use crate::model::{FailureKind, PublishOutcome, PublishState, RunState};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

// ---- requests ----

/// `POST /jobs` (and each entry of `POST /jobs/batch`).
#[derive(Debug, Clone, Deserialize)]
pub struct EnqueueRun {
    pub harness: String,
    pub model: String,
    #[serde(default)]
    pub case: Option<String>,
    #[serde(default)]
    pub jam: Option<String>,
    /// What the driver runs; must be a JSON object.
    pub launch_request: serde_json::Value,
}

/// `POST /jobs/batch`.
#[derive(Debug, Clone, Deserialize)]
pub struct EnqueueBatch {
    pub runs: Vec<EnqueueRun>,
}

/// `POST /publish-jobs`.
#[derive(Debug, Clone, Deserialize)]
pub struct EnqueuePublish {
    /// What the publisher releases; must be a JSON object.
    pub request: serde_json::Value,
}

/// `PUT /harnesses/{name}`.
#[derive(Debug, Clone, Deserialize)]
pub struct HarnessLimit {
    pub max_parallel: u32,
}

/// `POST /jobs/leases`, `POST /publish-jobs/leases`.
#[derive(Debug, Clone, Deserialize)]
pub struct LeaseRequest {
    pub job_ids: Vec<String>,
}

/// `POST /admin/driven` (test admin only): jobs to hold as already claimed
/// and driven, under these ids, for benchmarks that need a backend driving
/// thousands of jobs without claiming each one.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct SeedDriven {
    #[serde(default)]
    pub runs: Vec<String>,
    #[serde(default)]
    pub publish_jobs: Vec<String>,
}

/// `POST /jobs/{id}/lost`, `POST /publish-jobs/{id}/lost`.
#[derive(Debug, Clone, Deserialize)]
pub struct LostReport {
    pub detail: String,
}

/// `POST /jobs/{id}/status`.
#[derive(Debug, Clone, Deserialize)]
pub struct StatusReport {
    pub state: RunState,
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default)]
    pub failure_kind: Option<FailureKind>,
}

/// `POST /jobs/{id}/record`: the record a driver hands over (on SIGTERM,
/// or before storing), and how far the run got.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordReport {
    pub state_reached: RunState,
    pub record: serde_json::Value,
}

/// `POST /publish-jobs/{id}/result`.
#[derive(Debug, Clone, Deserialize)]
pub struct PublishResult {
    pub outcome: PublishOutcome,
    #[serde(default)]
    pub detail: Option<String>,
}

/// `POST /admin/clock/advance` (only with `--enable-test-clock`).
#[derive(Debug, Clone, Deserialize)]
pub struct ClockAdvance {
    pub seconds: f64,
}

// ---- answers ----

/// `201` of `POST /jobs`.
#[derive(Debug, Clone, Serialize)]
pub struct Enqueued {
    pub id: String,
    pub queue_seq: i64,
}

/// `201` of `POST /jobs/batch`.
#[derive(Debug, Clone, Serialize)]
pub struct BatchEnqueued {
    pub ids: Vec<String>,
}

/// `200` of `POST /jobs/next` (claim-run.json).
#[derive(Debug, Clone, Serialize)]
pub struct RunClaim {
    pub job: ClaimedRun,
}

/// A claimed run.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimedRun {
    pub id: String,
    pub token: String,
    pub queue_seq: i64,
    pub harness: String,
    pub model: String,
    pub case: Option<String>,
    pub jam: Option<String>,
    pub attempt: i64,
    pub launch_request: serde_json::Value,
    pub lease_expires_at: Timestamp,
    /// When the run entered the queue (its first enqueue: a lapsed claim
    /// returns it to the queue at its old place and time).
    pub enqueued_at: Timestamp,
}

/// `200` of `POST /publish-jobs/next` (claim-publish.json).
#[derive(Debug, Clone, Serialize)]
pub struct PublishClaim {
    pub publish_job: ClaimedPublish,
}

/// A claimed publish.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimedPublish {
    pub id: String,
    pub token: String,
    pub request: serde_json::Value,
    pub lease_expires_at: Timestamp,
    /// When the publish entered the queue.
    pub enqueued_at: Timestamp,
}

/// lease-renewal.json.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRenewal {
    pub now: Timestamp,
    pub leases: Vec<Lease>,
}

/// One renewed lease.
#[derive(Debug, Clone, Serialize)]
pub struct Lease {
    pub id: String,
    pub lease_expires_at: Timestamp,
}

/// active-runs.json.
#[derive(Debug, Clone, Serialize)]
pub struct ActiveRuns {
    pub now: Timestamp,
    pub jobs: Vec<ActiveRun>,
}

/// One driven run.
#[derive(Debug, Clone, Serialize)]
pub struct ActiveRun {
    pub id: String,
    pub state: RunState,
    pub lease_expires_at: Option<Timestamp>,
}

/// active-publishes.json.
#[derive(Debug, Clone, Serialize)]
pub struct ActivePublishes {
    pub now: Timestamp,
    pub publish_jobs: Vec<ActivePublish>,
}

/// One dispatched publish.
#[derive(Debug, Clone, Serialize)]
pub struct ActivePublish {
    pub id: String,
    pub state: PublishState,
    pub lease_expires_at: Option<Timestamp>,
}

/// lost-outcome.json.
#[derive(Debug, Clone, Serialize)]
pub struct LostOutcome {
    pub id: String,
    pub ignored: bool,
    pub state: String,
    pub retry_id: Option<String>,
}

/// status-ack.json (also the answer to a held record and a publish result).
#[derive(Debug, Clone, Serialize)]
pub struct StatusAck {
    pub id: String,
    pub state: String,
}

/// `GET /jobs/{id}`: job-view.json plus the console's extras.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub id: String,
    pub state: RunState,
    pub attempt: i64,
    pub queue_seq: i64,
    pub harness: String,
    pub model: String,
    pub case: Option<String>,
    pub jam: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub history: Vec<HistoryEntry>,
    pub launch_request: serde_json::Value,
    pub enqueued_at: Timestamp,
    pub failure_kind: Option<FailureKind>,
    pub detail: Option<String>,
    /// A record is held (`POST /jobs/{id}/record`).
    pub has_record: bool,
    /// The `state_reached` of the held record.
    pub record_state_reached: Option<RunState>,
    /// The run was finished from its held record.
    pub finished_from_record: bool,
    /// A lost report finished the run (and was not superseded).
    pub lost: bool,
    /// A late terminal report superseded a lost outcome.
    pub lost_superseded: bool,
    /// The run this one retries.
    pub retry_of: Option<String>,
    /// The automatic retry enqueued for this run.
    pub retry_id: Option<String>,
}

/// `GET /jobs?state=...`.
#[derive(Debug, Clone, Serialize)]
pub struct RunList {
    pub jobs: Vec<RunView>,
}

/// `GET /publish-jobs/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct PublishView {
    pub id: String,
    pub state: PublishState,
    pub attempt: i64,
    pub queue_seq: i64,
    pub request: serde_json::Value,
    pub lease_expires_at: Option<Timestamp>,
    pub enqueued_at: Timestamp,
    pub dispatched_at: Option<Timestamp>,
    pub detail: Option<String>,
    pub retry_of: Option<String>,
    pub retry_id: Option<String>,
    pub history: Vec<HistoryEntry>,
}

/// `GET /publish-jobs?state=...`.
#[derive(Debug, Clone, Serialize)]
pub struct PublishList {
    pub publish_jobs: Vec<PublishView>,
}

/// `201` of `POST /publish-jobs`.
#[derive(Debug, Clone, Serialize)]
pub struct PublishEnqueued {
    pub id: String,
    pub queue_seq: i64,
}

/// `200` of `PUT /harnesses/{name}`.
#[derive(Debug, Clone, Serialize)]
pub struct HarnessView {
    pub name: String,
    pub max_parallel: u32,
}

/// `200` of `POST /admin/clock/advance`.
#[derive(Debug, Clone, Serialize)]
pub struct ClockView {
    pub now: Timestamp,
}
