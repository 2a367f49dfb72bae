//! The reaper's integration tests, as one test binary (one link, one
//! process list): `cargo nextest run -p tcab-reaper`. `support` holds its
//! doubles, built on tcab-testkit.

mod cli;
mod config;
mod kube_sim;
mod logs;
mod run_loop;
mod start_logs;
mod support;
mod tick;
