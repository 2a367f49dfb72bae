//! # tcab-conformance: kube-sim against the real control plane, probe by probe
//!
//! kube-sim is our model of Kubernetes; the dispatcher is only as correct as
//! that model. A *probe* does one API interaction (a create that validation
//! refuses, a DELETE with a precondition, a label change under a selector
//! watch, an OOM kill under a running Job, ...) and records, as an
//! [`Outcome`], what the cluster answered and wrote. Each probe runs against
//! both clusters at once ([`differential`]):
//!
//! - **kube-sim**, in process, a fresh one per probe, with the same node
//!   names and the same shortened node timings as the real side, its clock
//!   `SIM_SPEED` times faster than real time;
//! - **the real control plane** (etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler v1.36.3, built by `scripts/control-plane build`), the
//!   launcher's shared instance for the test binary, with the node agent
//!   (`devkit/node-agent`) playing its nodes; each probe in a namespace of
//!   its own.
//!
//! The outcomes are normalised ([`normalise`]: codes, reasons, messages,
//! field paths, condition types and reasons in order, counts; no uids,
//! timestamps or resourceVersions) and compared line by line. Every line
//! that differs fails the probe unless `devkit/kube-sim/README.md` lists it
//! in its table of known divergences ([`divergences`]), with what upstream
//! does, what kube-sim does and why it is left; a listed line that no longer
//! differs fails too (the row is stale). Without the built control plane the
//! real side prints one `SKIP:` line and only kube-sim's side runs; with
//! `TCAB_REAL_CLUSTER_REQUIRED=1` that is a failure instead.
//!
//! The probes are this crate's integration tests (`tests/it/`, one module
//! per area); `README.md` lists them.

pub mod cluster;
pub mod divergences;
pub mod node_kinds;
pub mod normalise;
pub mod outcome;
pub mod run;

pub use cluster::{Answer, Cluster, Recording, Side, Watch};
pub use outcome::Outcome;
pub use run::differential;
