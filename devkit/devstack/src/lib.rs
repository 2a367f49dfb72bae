//! tcab-devstack: the whole dispatcher system on one machine.
//!
//! It starts the reference backend (`tcab-backend-sim`) and a cluster, the
//! simulated one (`tcab-kube-sim`) as a process or the upstream control
//! plane ([`real`]: the launcher, the node agent and the fault proxy), then
//! the three dispatcher binaries as processes wired exactly as the chart
//! wires the pod's containers, each serving its metrics and probes on its
//! own port of 127.0.0.1. The
//! `tcab-devstack` binary runs it for a person; the tests in `tests/` use the
//! same [`Stack`] for end-to-end and chaos scenarios.

pub mod binaries;
pub mod chart;
pub mod cluster;
pub mod console;
pub mod demo;
pub mod invariants;
pub mod policy;
pub mod preempt;
pub mod process;
pub mod real;
pub mod scrape;
pub mod stack;
pub mod timeline;
pub mod vault_recorder;

pub use cluster::{AdminError, ClusterAdmin, ClusterKind, NodeKind};
pub use stack::{Container, Stack, StackOptions, wait_for};
