//! What one reaper tick did: each planned delete and how it went, what the
//! sweep learned, the API calls that failed. The tick ([`crate::run`])
//! writes it; the metrics ([`crate::metrics`]), the logs and the tests read
//! it.

use crate::memory::{Attempt, Due};
use crate::plan::{DeleteReason, KeepReason, ReapKind, ReapPlan};
use std::collections::{BTreeMap, BTreeSet};
use tcab_shared::error_chain;
use tcab_shared::kube_api::CallError;
use tcab_shared::retry::KeyWait;

/// A Kubernetes API call that failed, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFailure {
    /// The Kubernetes verb: `list` or `delete`.
    pub verb: &'static str,
    /// The resource: `pods` or `jobs`.
    pub resource: &'static str,
    /// The HTTP code, when the API answered one.
    pub code: Option<u16>,
    /// What went wrong.
    pub message: String,
}

impl ApiFailure {
    pub(crate) fn new(verb: &'static str, resource: &'static str, error: &CallError) -> Self {
        ApiFailure {
            verb,
            resource,
            code: error.code(),
            message: error_chain(error),
        }
    }
}

/// Why a planned delete was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The Job view stopped being current (or changed) after the plan.
    ViewNotCurrent,
    /// The confirming read of the owned Jobs with the pod's job id failed.
    ConfirmReadFailed,
    /// The confirming read found a reason to keep the pod.
    Held(KeepReason),
}

/// How one planned delete went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The API accepted the delete.
    Deleted,
    /// 404: the pod was already gone, which is what we wanted.
    AlreadyGone,
    /// 409: the pod changed (another pod now has the name); next tick decides.
    Changed,
    /// Any other failure (403, 5xx, timeout, transport); retried later.
    Failed {
        /// The HTTP code, when the API answered.
        code: Option<u16>,
        /// What went wrong.
        message: String,
    },
    /// Not sent.
    Skipped(SkipReason),
}

impl DeleteOutcome {
    /// Whether the pod is reaped as far as the memory is concerned.
    pub fn attempt(&self) -> Attempt {
        match self {
            DeleteOutcome::Deleted | DeleteOutcome::AlreadyGone => Attempt::Done,
            // A call for this job's reap failed: it backs off alone.
            DeleteOutcome::Failed { .. }
            | DeleteOutcome::Skipped(SkipReason::ConfirmReadFailed) => Attempt::Failed,
            // Not the reap's own failure (the view, a keep reason, a pod
            // replaced): the next tick decides.
            DeleteOutcome::Changed
            | DeleteOutcome::Skipped(SkipReason::ViewNotCurrent | SkipReason::Held(_)) => {
                Attempt::NotDone
            }
        }
    }
}

/// One planned delete and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecord {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Its job id.
    pub job_id: String,
    /// Why it was planned.
    pub reason: DeleteReason,
    /// How it went.
    pub outcome: DeleteOutcome,
}

/// What the orphan sweep learned from the backend this tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SweepOutcome {
    /// No sweep this tick.
    #[default]
    NotDue,
    /// The backend listed this many driven jobs.
    Driven(usize),
    /// The backend's active list could not be read: no orphan was swept.
    BackendFailed(String),
}

/// What one tick did, for tests, logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Why the Job view was not trusted, when it was not: then nothing more
    /// happened this tick (or, if it stopped being current after the LIST,
    /// nothing was deleted).
    pub view_not_current: Option<String>,
    /// What was due.
    pub due: Due,
    /// Pods the LIST returned; `None` when the tick made no LIST (or it failed).
    pub listed: Option<usize>,
    /// What the sweep learned from the backend.
    pub sweep: SweepOutcome,
    /// The plan, when there was one.
    pub plan: ReapPlan,
    /// Each planned delete and how it went, by job id, then in plan order.
    pub deletes: Vec<DeleteRecord>,
    /// Job ids whose reap completed this tick (no sandbox of theirs left).
    pub completed: BTreeSet<String>,
    /// Job ids whose reap failed this tick (a delete, or the confirming
    /// read), each with its back-off: not tried again before it ends.
    pub backed_off: BTreeMap<String, KeyWait>,
    /// Job ids of dead drivers with sandbox pods of another managed-by value
    /// than the driver's, warned about for the first time this tick (each
    /// id once), with those pods.
    pub mismatches: BTreeMap<String, Vec<String>>,
    /// Kubernetes API calls that failed.
    pub api_errors: Vec<ApiFailure>,
}

impl TickReport {
    /// Each planned delete as (`namespace/name`, outcome).
    pub fn outcomes(&self) -> Vec<(String, DeleteOutcome)> {
        self.deletes
            .iter()
            .map(|d| (d.pod.clone(), d.outcome.clone()))
            .collect()
    }

    /// The kind of every sandbox deleted this tick (a 404 counts: it is gone).
    pub fn reaped(&self) -> impl Iterator<Item = ReapKind> + '_ {
        self.deletes
            .iter()
            .filter(|d| d.outcome.attempt() == Attempt::Done)
            .map(|d| d.reason.kind())
    }
}
