//! `tcab-reaper`'s configuration: where sandboxes live, how they are told
//! from driver pods, and the orphan sweep. The variables are declared in
//! `tcab_shared::config::vars`; this reads the ones the reaper uses.

use std::time::Duration;
use tcab_shared::config::{
    BackendConfig, Binary, BinaryConfig, CommonConfig, ConfigError, Env, distinct_managed_by, vars,
};

/// `tcab-reaper`'s configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ReaperConfig {
    pub common: CommonConfig,
    /// `TCAB_K8S_NAMESPACE`; `None` means the dispatcher's own namespace.
    pub sandbox_namespace: Option<String>,
    /// `TCAB_DRIVER_MANAGED_BY`.
    pub driver_managed_by: String,
    /// `TCAB_DISPATCHER_ORPHAN_SWEEP`.
    pub orphan_sweep: bool,
    /// `TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS`.
    pub orphan_grace: Duration,
    /// `TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS`.
    pub orphan_sweep_interval: Duration,
    /// `TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS`.
    pub terminating_margin: Duration,
    /// The backend, which the orphan sweep asks what it still drives; `None`
    /// only when the sweep is off.
    pub backend: Option<BackendConfig>,
}

impl BinaryConfig for ReaperConfig {
    const BINARY: Binary = Binary::Reaper;

    fn common(&self) -> &CommonConfig {
        &self.common
    }

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let common = CommonConfig::from_env(env)?;
        let driver_managed_by = vars::DRIVER_MANAGED_BY.get(env)?;
        distinct_managed_by(&common.managed_by, &driver_managed_by)?;
        let orphan_sweep = vars::ORPHAN_SWEEP.get(env)?;
        // The sweep asks the backend which jobs it still drives; without the
        // sweep the reaper never calls the backend.
        let backend = if orphan_sweep {
            Some(BackendConfig::from_env(env)?)
        } else {
            None
        };
        Ok(ReaperConfig {
            common,
            backend,
            orphan_sweep_interval: vars::ORPHAN_SWEEP_INTERVAL_SECONDS.get(env)?,
            terminating_margin: vars::TERMINATING_MARGIN_SECONDS.get(env)?,
            sandbox_namespace: vars::K8S_NAMESPACE.read(env)?,
            driver_managed_by,
            orphan_sweep,
            orphan_grace: vars::ORPHAN_GRACE_SECONDS.get(env)?,
        })
    }
}
