//! tcab-admitter: claims queued runs and publishes from the backend and
//! creates one driver or publisher Job for each, through two independent
//! admission lanes, each under its own cap and each on its own loop.
//!
//! Each lane's tick is: settle what earlier ticks could not, take the lane's
//! snapshot, decide with the pure `plan::ungated` (every check but the
//! gate's), read the gate (every tick, so its reading stays true while the
//! lane holds for another reason) and, when the lane would admit, finish
//! with `plan::gated`, and carry out one admission. The modules:
//!
//! - `plan`: a lane's decision (admit, or hold with its reason), pure;
//! - [`job_builder`]: the driver and publisher Jobs built from a claim, pure;
//! - `settle`: settling a create whose answer did not tell (pure next step,
//!   and the bounded calls that carry it out);
//! - `lanes`: what a lane remembers between ticks (back-off, rest after an
//!   empty claim, Jobs created that the cache has not shown yet, creations
//!   not settled yet);
//! - `admit`: one admission (claim, vault `Put`, create and settle; `Forget`
//!   the token when no Job will exist): reading the claim's answer beside
//!   the steps, then a file each for ending a poisoned claim once and for
//!   deleting the stale Jobs of its id and settling the create into the
//!   lane's outcome;
//! - `events`: the Events left on Jobs (a claim that failed fast, a stale
//!   Job deleted), decided from an admission's outcome, pure;
//! - `lane`: one lane's loop (the tick: settle, snapshot, read the gate,
//!   decide, admit), its report ([`LaneReport`]), and recording each outcome
//!   in the lane's memory (with what earlier ticks left to settle);
//! - [`keeper_client`]: the gRPC client of the lease-keeper's token vault and
//!   admission gate (whose verdict the lease-keeper judges; the admitter acts
//!   on it as given, a lease-keeper it cannot reach being a closed gate);
//! - `metrics`: the lanes' metrics, recorded from each tick's report (what
//!   a report counts as, outcome, error, gate, saturation, queue wait, is
//!   read apart, pure);
//! - `status`: the admitter's status document (`/status`): each lane's
//!   state, gate, back-off and last error, folded from the same reports
//!   and rendered, both pure;
//! - `settings`: what the admitter reads from its configuration (caps,
//!   gate bound, settle limits), which the lanes, the metrics and the loop
//!   read;
//! - `run`: `run(config, deps, shutdown)`, which builds each lane's loop
//!   ([`LaneAdmitter::lanes`]) and runs it under the shared supervisor
//!   (`tcab_shared::runtime`);
//! - [`config`]: the admitter's configuration, read from the environment;
//! - `preflight`: the start-up check that the API server accepts a Job
//!   built from the settings (a dry-run create), before the first claim;
//! - [`check`]: `tcab-admitter check`, an install checking itself with the
//!   admitter's environment (the backend with the service token, dry-run
//!   Jobs, the lists the Role must allow), one line per check, then exit.
//!
//! Back-offs, rests and claim ages are measured on tokio's monotonic
//! [`tokio::time::Instant`]; tests hold it still or move it with paused time.
//!
//! What the admitter holds to:
//! - no claim before a dry-run create of a Job built from its settings
//!   passed (a refusal ends the process with exit code 2);
//! - no claim while its own Job view is not current (listed and no watch
//!   error since), nor while the lane's gate is closed;
//! - every Kubernetes call is bounded by `TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS`;
//! - a lane slot is held for a failed create only while whether its Job
//!   exists is truly unknown;
//! - no Job is created for a claim older than half the lease;
//! - on shutdown each lane finishes the admission in flight.

// What other crates (the binary, the dev stack, the tests) use is public;
// the rest is private to this crate, and `unreachable_pub` keeps it so.
#![warn(unreachable_pub)]

mod admit;
pub mod check;
pub mod config;
mod events;
pub mod job_builder;
pub mod keeper_client;
mod lane;
mod lanes;
mod metrics;
mod plan;
mod preflight;
mod run;
mod settings;
mod settle;
mod status;

// What a tick's report carries, for the tests that read it.
pub use admit::{
    CreateFailure, LaneOutcome, MAX_REQUEST_BYTES, PoisonReason, PoisonReport, Settled,
};
pub use config::AdmitterConfig;
pub use lane::{AdmissionResult, LaneAdmitter, LaneReport};
pub use lanes::LaneState;
pub use plan::{Decision, HoldReason};
pub use preflight::Refused;
pub use run::{Deps, run};
pub use settings::AdmitterSettings;
pub use settle::Confirmation;
