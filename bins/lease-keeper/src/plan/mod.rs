//! The lease-keeper's decisions, pure functions over plain data:
//!
//! - [`renew`]: which leases each lane's renewal call carries;
//! - [`gate`]: each lane's admission gate verdict, which the admitter acts on;
//! - [`failures`]: what to read, judge and report about failing Jobs;
//! - [`deaths`]: which claim's death is reported, once each;
//! - [`events`]: the Event left on a Job reported dead or deleted;
//! - [`lost`]: which driven jobs are lost (lapsed lease, no live Job);
//! - [`refusals`]: which Jobs the cluster gives no pod, and whether it
//!   refuses them (the Job controller's `FailedCreate` Events);
//! - [`tokens`]: which held per-job tokens to keep.
//!
//! What a backend answer means for a report is decided here too
//! ([`deaths::settle_death_check`], [`deaths::settle_death_report`],
//! [`lost::settle_lost_report`]), over the answer as [`Answer`] reads it.

pub(crate) mod deaths;
pub(crate) mod events;
pub(crate) mod failures;
pub(crate) mod gate;
pub(crate) mod lost;
pub(crate) mod refusals;
pub(crate) mod renew;
pub(crate) mod tokens;

use tcab_shared::backend::BackendError;

/// A backend answer as the report-settling rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 200 with the contract's body.
    Ok,
    /// 401 or 403: the per-job token was refused (the job was requeued).
    Refused,
    /// 404: the backend does not know the job.
    NotFound,
    /// 409: the call does not fit the job's state (already terminal).
    Conflict,
    /// Anything else: a timeout, a 5xx, a malformed answer. It says nothing
    /// about the job.
    Failed,
}

impl Answer {
    /// How the rules read `result`.
    pub(crate) fn of<T>(result: &Result<T, BackendError>) -> Answer {
        match result {
            Ok(_) => Answer::Ok,
            Err(e) if e.is_unauthorized() => Answer::Refused,
            Err(e) if e.is_not_found() => Answer::NotFound,
            Err(e) if e.is_conflict() => Answer::Conflict,
            Err(_) => Answer::Failed,
        }
    }
}
