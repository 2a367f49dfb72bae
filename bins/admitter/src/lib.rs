//! tcab-admitter: claims queued runs and publishes from the backend and
//! creates one driver or publisher Job for each, through two independent
//! admission lanes, each under its own cap.
//!
//! The decision of a tick is the pure [`plan::plan`] over a snapshot; the
//! rest of the crate gathers that snapshot and carries the decision out:
//!
//! - [`plan`]: per-lane decision (admit, or hold with its reason), pure;
//! - [`gate`]: the lease-keeper's renewal status read into a gate per lane, pure;
//! - [`lanes`]: what each lane remembers between ticks (back-off, rest after
//!   an empty claim, Jobs created that the cache has not shown yet);
//! - [`vault`]: the gRPC client of the token vault and the admission gate;
//! - [`admit`]: one admission (claim, vault `Put`, create the Job);
//! - [`mod@run`]: the tick and the loop (`run(config, deps, shutdown)`);
//! - [`clock`]: the injected clock.

pub mod admit;
pub mod clock;
pub mod gate;
pub mod lanes;
pub mod plan;
pub mod run;
pub mod vault;

pub use clock::{Clock, ManualClock, SystemClock};
pub use run::{Admitter, AdmitterSettings, Deps, TickReport, run};
