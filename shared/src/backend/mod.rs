//! The backend contract (docs/backend-contract.md): its wire types and the
//! HTTP client the binaries use to claim, renew and report.

pub mod client;
pub mod error;
pub mod types;

pub use client::BackendClient;
pub use error::BackendError;
pub use types::*;
