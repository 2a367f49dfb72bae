//! The container entrypoint: its Host's Kubernetes calls (`kube`) and the
//! built `tcab-workload` binary run as a child process (`binary`), and the
//! HTTPS way a pod reaches the API, with the ServiceAccount's CA (`tls`).

mod binary;
mod kube;
mod support;
mod tls;
