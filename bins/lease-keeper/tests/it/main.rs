//! The lease-keeper's integration tests, as one test binary (one link, one
//! process list): `cargo nextest run -p tcab-lease-keeper`. `support` holds
//! its doubles, built on tcab-testkit.

mod backend_sim;
mod cli;
mod config;
mod keeper;
mod run_loop;
mod sims;
mod status;
mod support;
mod vault_grpc;
