//! The admitter's integration tests, as one test binary (one link, one
//! process list): `cargo nextest run -p tcab-admitter`, or one module with
//! `cargo nextest run -p tcab-admitter -E 'test(/^tick::/)'`. `support` is
//! the admitter's rig, built on tcab-testkit.

mod check;
mod cli;
mod config;
mod drain;
mod job_builder;
mod poison_and_stale;
mod restricted;
mod revision;
mod run_loop;
mod sims;
mod status;
mod support;
mod tick;
