//! The backend contract (docs/backend-contract.md): its wire types and the
//! HTTP client the binaries use to claim, renew and report.

pub mod client;
pub mod error;
pub mod types;

pub use client::{BackendClient, RetryPolicy};
pub use error::{BackendError, BackendErrorKind};
pub use types::*;

use crate::config::BackendConfig;
use std::time::Duration;

/// The version of the backend contract this dispatcher speaks: the version
/// docs/backend-contract.md states. Each binary names it in its first log
/// line and in the `contract` label of `tcab_dispatcher_build_info`, and
/// `tcab-admitter check` prints it, so an operator can match a dispatcher
/// to the backend it talks to. It is not sent to the backend.
///
/// A whole number, written as text because it is only ever shown. It goes
/// up when the contract changes in a way an older backend or an older
/// dispatcher cannot follow (a call, field or meaning added that the other
/// side must know of, or one removed or changed); a change either side may
/// ignore keeps it.
pub const CONTRACT_VERSION: &str = "1";

/// How the dispatcher's loops retry a backend that answers 429/503: once,
/// waiting at most a few seconds. A loop must not sit in one call for a
/// minute: the next tick retries anyway, and renewals and the other lane
/// should not wait behind it.
pub const LOOP_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 1,
    max_wait: Duration::from_secs(5),
    default_wait: Duration::from_secs(1),
};

/// The backend client of a dispatcher binary, from its configuration.
pub fn client_from_config(
    config: &BackendConfig,
    binary: crate::config::Binary,
) -> Result<BackendClient, BackendError> {
    Ok(BackendClient::with_user_agent(
        &config.url,
        config.service_token.clone(),
        config.timeout,
        &binary.user_agent(),
    )?
    .with_retry_policy(LOOP_RETRY))
}
