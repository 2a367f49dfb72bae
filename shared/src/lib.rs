//! The library the three dispatcher binaries share: the settings every
//! binary reads ([`config`]), names on the cluster and the two lanes
//! ([`names`], [`lane`]), the backend client ([`backend`]), the watch-backed
//! view of owned Jobs ([`job_cache`]) and the bounded Kubernetes calls
//! ([`kube_api`]), the Events left on the Jobs acted on ([`events`]), telemetry, metrics and health ([`metrics`]), the tick loop
//! ([`tick`]) and the skeleton every binary runs on ([`runtime`]: bootstrap,
//! shutdown, the supervisor of its loops); and one way each to tell wall
//! time ([`clock`]), to retry ([`retry`]) and to write an error on one line
//! ([`error`]).
//!
//! Decisions live in the binaries' crates as pure functions; this crate holds
//! the vocabulary and the I/O edges they all use.

pub mod backend;
pub mod clock;
pub mod config;
pub mod error;
pub mod events;
pub mod failing;
pub mod inline_str;
pub mod job_cache;
pub mod kube_api;
pub mod lane;
pub mod metrics;
pub mod names;
pub mod retry;
pub mod runtime;
pub mod secret;
pub mod telemetry;
pub mod tick;

pub use clock::WallClock;
pub use error::error_chain;
pub use lane::Lane;
pub use secret::Secret;
