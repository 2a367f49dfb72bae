//! tcab-lease-keeper: renews the leases of live Jobs, captures the evidence
//! of failing Jobs at their first sign, reports driver deaths, Jobs that
//! cannot finish failing and pods that never start, reports lost drivers and
//! publishers, and serves the token vault and the admission gate.
//!
//! - `plan`: every decision, pure (`plan::renew`, `plan::gate`,
//!   `plan::failures`, `plan::deaths`, `plan::lost`, `plan::tokens`);
//! - `cause`: reading why a Job died (`cause::death_cause`), one input
//!   a file: the pod's status, the Job's conditions, a pod that can never
//!   start (`cause::start_failure`), and the cause in words with the log
//!   tail of the death detail (`cause::death_detail`);
//! - [`run`](mod@run): the renewal and report loops, and `run(config, deps, shutdown)`,
//!   which serves the vault and runs both loops under the shared supervisor
//!   (`tcab_shared::runtime`);
//! - [`inspect`]: the cluster reads (and the delete of a Job that never starts);
//! - [`gate`]: the per-lane renewal state, from which each lane's admission
//!   gate verdict is judged when the admitter asks;
//! - `report`: what one pass of each loop did, as data;
//! - `metrics`: renewals, reports and renewal ages, recorded from those reports;
//! - [`tokens`] and [`grpc`]: the per-job token store and its gRPC face;
//! - [`config`]: the lease-keeper's configuration, read from the environment.

// What other crates (the binary, the dev stack, the tests) use is public;
// the rest is private to this crate, and `unreachable_pub` keeps it so.
#![warn(unreachable_pub)]

mod cause;
pub mod config;
pub mod gate;
pub mod grpc;
pub mod inspect;
mod metrics;
mod plan;
mod report;
pub mod run;
mod status;
pub mod tokens;

pub use config::LeaseKeeperConfig;
pub use run::{Deps, Keeper, TickReport, run};
