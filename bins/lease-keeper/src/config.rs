//! `tcab-lease-keeper`'s configuration: the lease, the graces after which a
//! pod is judged never to start or dead, and the vault's exposure. The
//! variables are declared in `tcab_shared::config::vars`; this reads the ones
//! the lease-keeper uses and checks them against each other.

use std::time::Duration;
use tcab_shared::config::{
    BackendConfig, Binary, BinaryConfig, CommonConfig, ConfigError, Env, at_most_half_lease,
    renewals_fit_in_lease, vars,
};

/// `tcab-lease-keeper`'s configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseKeeperConfig {
    pub common: CommonConfig,
    pub backend: BackendConfig,
    /// Whether publishing is on (`TCAB_PUBLISHER_IMAGE` is set).
    pub publishing: bool,
    /// `TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK`.
    pub vault_allow_non_loopback: bool,
    /// `TCAB_DISPATCHER_LEASE_SECONDS`.
    pub lease_length: Duration,
    /// `TCAB_DISPATCHER_LOG_TAIL_LINES`.
    pub log_tail_lines: i64,
    /// `TCAB_DISPATCHER_START_GRACE_SECONDS`.
    pub start_grace: Duration,
    /// `TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS`.
    pub unschedulable_grace: Duration,
    /// `TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS`.
    pub terminating_margin: Duration,
}

impl BinaryConfig for LeaseKeeperConfig {
    const BINARY: Binary = Binary::LeaseKeeper;

    fn common(&self) -> &CommonConfig {
        &self.common
    }

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let common = CommonConfig::from_env(env)?;
        let lease_length = vars::LEASE_SECONDS.get(env)?;
        at_most_half_lease(
            vars::WATCH_TIMEOUT_SECONDS.name,
            common.watch_timeout,
            lease_length,
        )?;
        let backend = BackendConfig::from_env(env)?;
        renewals_fit_in_lease(common.poll_interval, backend.timeout, lease_length)?;
        let vault_allow_non_loopback = vars::VAULT_ALLOW_NON_LOOPBACK.get(env)?;
        if !vault_allow_non_loopback && !common.vault_addr.ip().is_loopback() {
            return Err(ConfigError::Invalid {
                var: vars::VAULT_ADDR.name,
                expected: format!(
                    "a loopback address (the vault holds per-job tokens; set {}=true to override)",
                    vars::VAULT_ALLOW_NON_LOOPBACK.name
                )
                .into(),
                got: common.vault_addr.to_string(),
            });
        }
        Ok(LeaseKeeperConfig {
            backend,
            common,
            // Only whether it is set: the admitter is the one that checks the image.
            publishing: vars::PUBLISHER_IMAGE.is_set(env),
            vault_allow_non_loopback,
            lease_length,
            start_grace: vars::START_GRACE_SECONDS.get(env)?,
            unschedulable_grace: vars::UNSCHEDULABLE_GRACE_SECONDS.get(env)?,
            terminating_margin: vars::TERMINATING_MARGIN_SECONDS.get(env)?,
            log_tail_lines: vars::LOG_TAIL_LINES.get(env)?,
        })
    }
}
