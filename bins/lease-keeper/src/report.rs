//! What one pass of each loop did, as data: the renewal loop's
//! [`RenewalReport`] and the report loop's [`ReportTick`]. The loops in
//! `run/` produce them; `metrics` records them and tests read them, so
//! neither has to reach into the loops.

use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::backend::{BackendErrorKind, JobId};
use tcab_shared::lane::PerLane;
use tcab_shared::metrics::labels::{Cause, ReportKind};

/// What one renewal round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenewalReport {
    /// How many run leases the backend renewed; `None` when the call
    /// failed. (The ids are [`Renewer::renewed`](crate::run::renewals::Renewer::renewed).)
    pub runs: Option<usize>,
    /// How many publish leases were renewed; `None` when the call failed or
    /// publishing is off.
    pub publishes: Option<usize>,
}

/// Which report a failure was of (its `report` label is [`Report::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Report {
    /// A death report (`POST /jobs/{id}/status`) or the read before it.
    Death,
    /// A lost report of a lane (`POST /jobs/{id}/lost`, `POST /publish-jobs/{id}/lost`).
    Lost(Lane),
}

impl Report {
    /// The `report` label: `death` or `lost`.
    pub fn kind(self) -> ReportKind {
        match self {
            Report::Death => ReportKind::Death,
            Report::Lost(_) => ReportKind::Lost,
        }
    }

    /// The `report` label, as text.
    pub fn as_str(self) -> &'static str {
        self.kind().as_str()
    }

    /// The lane the report is about.
    pub fn lane(self) -> Lane {
        match self {
            Report::Death => Lane::Run,
            Report::Lost(lane) => lane,
        }
    }
}

/// A report that failed: which, of which job, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedReport {
    /// The report.
    pub report: Report,
    /// The backend job.
    pub job_id: JobId,
    /// The failure's kind.
    pub kind: BackendErrorKind,
    /// The error in words (the backend client's errors carry no token).
    pub message: String,
}

/// What one report tick did; returned for tests and summarised in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportTick {
    /// Whether the view was current (nothing is judged otherwise).
    pub view_current: bool,
    /// Jobs whose evidence was captured this tick.
    pub captured: Vec<String>,
    /// Jobs judged dead this tick (cannot finish failing, or never start).
    pub judged_dead: Vec<String>,
    /// Jobs deleted because their pod can never start.
    pub deleted: Vec<String>,
    /// Runs whose deaths were reported (job id, death kind for metrics).
    pub reported_dead: Vec<(JobId, Cause)>,
    /// Per lane, the live Jobs that have counted no pod for longer than the
    /// start grace and are not (yet) judged refused: they wait for a pod.
    pub podless: PerLane<usize>,
    /// For each death reported with its evidence in hand: from the Job's
    /// first sign of failure to the report landing.
    pub death_delays: Vec<Duration>,
    /// Whether lost runs were judged this tick.
    pub judged_runs: bool,
    /// Whether lost publishes were judged this tick.
    pub judged_publishes: bool,
    /// Runs reported lost.
    pub lost_runs: Vec<JobId>,
    /// Publishes reported lost.
    pub lost_publishes: Vec<JobId>,
    /// Reports that failed, each with the failure's kind (for metrics).
    pub failed_reports: Vec<(Report, BackendErrorKind)>,
    /// The last report of the tick that failed, with its job id and words
    /// (for the status document).
    pub last_failure: Option<FailedReport>,
    /// Whether the tick's budget ran out and work was left for the next one.
    pub deferred: bool,
}
