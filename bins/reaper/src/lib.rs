//! tcab-reaper: deletes the sandbox pods a dead driver left behind.
//!
//! The reaper decides from its watch-backed view of the owned Jobs, and only
//! while that view is current (listed, no watch error since). A tick lists
//! pods of the sandbox namespace only when something is due (`memory`): a
//! dead driver Job whose sandboxes were not yet reaped completely (the pods
//! carrying its job id, whatever their managed-by value, so a sandbox of
//! another value is told apart and reported, never touched), or the orphan
//! sweep on its own slower cadence (the pods carrying the driver's
//! managed-by value). A steady state therefore makes no LIST at all.
//!
//! The pure `plan::plan_with` then selects:
//! - the sandboxes of driver Jobs that failed terminally once their pods
//!   finished terminating, or that are judged dead because they cannot
//!   finish failing (a lost node), unless a Job with the same job id is live;
//! - when the orphan sweep is on, sandboxes whose job id no owned Job
//!   carries, that the backend does not list as driven (`GET /jobs/active`,
//!   the reaper's only backend call), and that are older than the grace.
//!
//! Before it deletes the sandboxes of a job id, the reaper confirms with one
//! fresh, bounded read of the owned Jobs carrying that id that none is live;
//! on any doubt it keeps them and plans again on a later tick. Every
//! Kubernetes call is bounded; a tick in progress at SIGTERM is finished.
//!
//! - `plan`: the reap plan and the confirmation, pure: the verdict of a job
//!   id from its Jobs (`plan::judge_ids`) and the fresh read before a delete
//!   (`plan::confirm`), the keep or delete of one pod (`plan::plan_with`),
//!   what a reap lists (`plan::reap_selector`);
//! - `memory`: what is due (a reap awaited, the sweep's cadence);
//! - [`run`]: the tick's I/O, one step a file (the tick and its reads of the
//!   Job view, listing the sandboxes, asking the backend, confirming and
//!   deleting), and
//!   `run(config, deps, shutdown)`, which runs the loop under the shared
//!   supervisor (`tcab_shared::runtime`);
//! - `report`: what a tick did, which the loop hands to the metrics;
//! - `metrics`: the reaper's metrics, recorded from each tick's report;
//! - [`config`]: the reaper's configuration, read from the environment.

// What other crates (the binary, the dev stack, the tests) use is public;
// the rest is private to this crate, and `unreachable_pub` keeps it so.
#![warn(unreachable_pub)]

pub mod config;
mod memory;
mod metrics;
mod plan;
mod report;
pub mod run;
mod status;

pub use config::ReaperConfig;
// What a tick's report carries, for the tests that read it.
pub use memory::Due;
pub use plan::{DeleteReason, KeepReason, ReapKind, SweepSettings};
