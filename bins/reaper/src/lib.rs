//! tcab-reaper: deletes the sandbox pods a dead driver left behind.
//!
//! Each tick it LISTs the pods in the sandbox namespace that carry the
//! driver's managed-by value (one call, whatever the number of Jobs), reads
//! the owned driver Jobs from a watch-backed cache, and deletes what the pure
//! [`plan::plan`] selects: the sandboxes of driver Jobs that failed
//! terminally (unless a Job with the same job id is live) and, when the
//! orphan sweep is on, sandboxes whose job id matches no owned Job and that
//! are older than the grace. It never talks to the backend.

pub mod plan;
pub mod run;
