//! gRPC types for the lease-keeper's localhost services: the per-job token
//! vault and the admission gate, with the gate's verdict as both binaries
//! hold it ([`gate`]). The standard health service is re-exported so the
//! binaries depend on one crate for everything on the wire.

pub mod gate;

/// Generated types and stubs of `tcab.vault.v1`.
pub mod vault {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("tcab.vault.v1");
}

pub use tonic_health;

use std::fmt;

impl fmt::Debug for vault::PutRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PutRequest")
            .field("key", &self.key)
            .field("token", &"<redacted>")
            .field("lane", &self.lane)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::vault::*;

    #[test]
    fn messages_with_a_token_never_print_it() {
        let put = PutRequest {
            key: Some(ClaimKey {
                job_id: "j1".into(),
                claim: "abcd1234".into(),
            }),
            token: "tok-secret-value".into(),
            lane: Lane::Run as i32,
        };
        for printed in [format!("{put:?}"), format!("{put:#?}")] {
            assert!(!printed.contains("tok-secret-value"), "{printed}");
            assert!(printed.contains("<redacted>"), "{printed}");
        }
        assert!(format!("{put:?}").contains("j1"), "the key still shows");
    }
}
