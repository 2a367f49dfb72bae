//! tcab-lease-keeper: hosts the token vault and the admission gate, renews
//! the leases of live Jobs, reports driver deaths, lost drivers and lost
//! publishers. See docs/backend-contract.md and the architecture handbook.
//!
//! Decisions are pure functions ([`renew`], [`deaths`], [`lost`], the
//! vault's [`vault::judge_token`]); [`run`] performs them each tick.

pub mod deaths;
pub mod gate;
pub mod inspect;
pub mod lost;
pub mod renew;
pub mod run;
pub mod vault;

pub use run::{Deps, Keeper, TickReport, run};
