//! The container entrypoint: its Host's Kubernetes calls (`kube`) and the
//! built `tcab-workload` binary run as a child process (`binary`).

mod binary;
mod kube;
mod support;
