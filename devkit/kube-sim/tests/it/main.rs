//! Integration tests of the sim over real HTTP (one test binary).

mod api;
mod backend;
mod cli;
mod common;
mod kube_client;
mod kube_writes;
mod kubectl;
mod lifecycle;
mod python_client;
mod writes;
