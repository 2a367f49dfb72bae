//! gRPC types for the lease-keeper's localhost services: the per-job token
//! vault and the admission gate. The standard health service is re-exported
//! so the binaries depend on one crate for everything on the wire.

/// Generated types and stubs of `tcab.vault.v1`.
pub mod vault {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("tcab.vault.v1");
}

pub use tonic_health;
