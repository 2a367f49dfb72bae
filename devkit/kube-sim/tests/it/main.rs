//! Integration tests of the sim over real HTTP (one test binary).

mod api;
mod audit;
mod backend;
mod cli;
mod common;
mod disruptions;
mod faults;
mod kinds;
mod kube_client;
mod kube_writes;
mod kubectl;
mod lifecycle;
mod nodes;
mod pending;
mod python_client;
mod watch;
mod writes;
