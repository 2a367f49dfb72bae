//! HTTP tests of the reference backend, through a real listener with reqwest.
//! Each rule of issue 3 has at least one test here; time moves through the
//! test-clock endpoint, never by sleeping.

mod support;

mod audit;
mod auth;
mod claims;
mod contract;
mod faults;
mod leases;
mod lost;
mod publishes;
mod reports;
mod restart;
