//! The probes, one module per area. Each test runs one probe on kube-sim
//! and on the real control plane and compares (`tcab_conformance::differential`);
//! see the crate's README for the list and how a difference is judged.

mod common;
mod conflicts;
mod deletes;
mod events;
mod gone;
mod jobs;
mod lists;
mod logs;
mod nodes;
mod podgc;
mod propagation;
mod throttle;
mod ttl;
mod validation;
mod watches;
