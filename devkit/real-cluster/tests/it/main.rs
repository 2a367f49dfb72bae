//! The launcher against the real binaries: real processes, the real API.
//! Without the binaries each test prints one SKIP line and passes (CI builds
//! them first when Go is there: see devkit/real-cluster/README.md).

mod api;
mod lifecycle;
mod pause;
mod shared;
mod support;
