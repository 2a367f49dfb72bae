//! The node agent against the upstream control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler built by `scripts/control-plane
//! build`). Each test starts its own control plane (nextest runs each test
//! in its own process) and skips with one `SKIP:` line when the binaries
//! are absent.

mod support;

mod driver;
mod lifecycle;
mod nodes;
