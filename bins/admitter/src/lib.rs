//! tcab-admitter: claims queued runs and publishes from the backend and
//! creates one driver or publisher Job for each, through two independent
//! admission lanes, each under its own cap.
//!
//! The decision of a tick is the pure [`plan::plan`] over a snapshot; the
//! rest of the crate gathers that snapshot and carries the decision out.

pub mod admit;
pub mod clock;
pub mod gate;
pub mod lanes;
pub mod plan;
pub mod run;
pub mod vault;

pub use clock::{Clock, ManualClock, SystemClock};
pub use run::{Admitter, AdmitterSettings, Deps, TickReport, run};
