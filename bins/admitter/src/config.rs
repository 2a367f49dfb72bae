//! `tcab-admitter`'s configuration: the caps of its two lanes, the gate, and
//! everything the Job builders take from the environment. The variables are
//! declared in `tcab_shared::config::vars`; this reads the ones the admitter
//! uses and checks them against each other.

use crate::job_builder::{JobSettings, SecurityContexts, Sizing};
use std::time::Duration;
use tcab_shared::config::{
    BackendConfig, Binary, BinaryConfig, CommonConfig, ConfigError, Env, at_most_half_lease,
    distinct_managed_by, limit_at_least_request, renewals_fit_in_lease, vars,
};

/// `tcab-admitter`'s configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitterConfig {
    pub common: CommonConfig,
    pub backend: BackendConfig,
    /// `TCAB_DISPATCHER_MAX_INFLIGHT`.
    pub max_inflight: u32,
    /// `TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT`.
    pub max_publish_inflight: u32,
    /// Everything the Job builders take from configuration.
    pub jobs: JobSettings,
    /// `TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS` (at most half the lease).
    pub gate_max_age: Duration,
    /// `TCAB_DISPATCHER_LEASE_SECONDS`.
    pub lease_length: Duration,
}

impl BinaryConfig for AdmitterConfig {
    const BINARY: Binary = Binary::Admitter;

    fn common(&self) -> &CommonConfig {
        &self.common
    }

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let backend = BackendConfig::from_env(env)?;
        let common = CommonConfig::from_env(env)?;
        let jobs = job_settings(env, &common, &backend)?;
        // Checked here, passed to the drivers through the passthrough.
        vars::K8S_NAMESPACE.read(env)?;
        distinct_managed_by(&jobs.managed_by, &jobs.driver_managed_by)?;
        let lease_length = vars::LEASE_SECONDS.get(env)?;
        let gate_max_age = vars::GATE_MAX_AGE_SECONDS.get(env)?;
        at_most_half_lease(vars::GATE_MAX_AGE_SECONDS.name, gate_max_age, lease_length)?;
        renewals_fit_in_lease(common.poll_interval, backend.timeout, lease_length)?;
        Ok(AdmitterConfig {
            max_inflight: vars::MAX_INFLIGHT.get(env)?,
            max_publish_inflight: vars::MAX_PUBLISH_INFLIGHT.get(env)?,
            gate_max_age,
            lease_length,
            jobs,
            common,
            backend,
        })
    }
}

/// The Job builders' settings. The artifacts and repos URLs default to
/// paths under the backend URL.
fn job_settings(
    env: &Env,
    common: &CommonConfig,
    backend: &BackendConfig,
) -> Result<JobSettings, ConfigError> {
    let driver_image = vars::DRIVER_IMAGE.get(env)?;
    let publisher_image = vars::PUBLISHER_IMAGE.read(env)?;
    let driver_secrets = vars::DRIVER_SECRETS.read(env)?.unwrap_or_default();
    let subscription_dir = vars::DRIVER_SUBSCRIPTION_DIR.get(env)?;
    let cpu_request = vars::DRIVER_CPU_REQUEST.get(env)?;
    let memory_request = vars::DRIVER_MEMORY_REQUEST.get(env)?;
    let cpu_limit = vars::DRIVER_CPU_LIMIT.read(env)?;
    let memory_limit = vars::DRIVER_MEMORY_LIMIT.read(env)?;
    limit_at_least_request(
        (vars::DRIVER_CPU_LIMIT.name, cpu_limit.as_deref()),
        (vars::DRIVER_CPU_REQUEST.name, &cpu_request),
    )?;
    limit_at_least_request(
        (vars::DRIVER_MEMORY_LIMIT.name, memory_limit.as_deref()),
        (vars::DRIVER_MEMORY_REQUEST.name, &memory_request),
    )?;
    Ok(JobSettings {
        managed_by: common.managed_by.clone(),
        artifacts_url: vars::DRIVER_ARTIFACTS_URL
            .read(env)?
            .unwrap_or_else(|| format!("{}/artifacts", backend.url)),
        repos_url: vars::DRIVER_REPOS_URL
            .read(env)?
            .unwrap_or_else(|| format!("{}/repos", backend.url)),
        backend_url: backend.url.clone(),
        driver_image,
        publisher_image,
        finish_deadline_seconds: vars::DRIVER_FINISH_DEADLINE_SECONDS.get(env)?,
        report_deadline_seconds: vars::DRIVER_REPORT_DEADLINE_SECONDS.get(env)?,
        driver_managed_by: vars::DRIVER_MANAGED_BY.get(env)?,
        termination_grace_seconds: vars::DRIVER_TERMINATION_GRACE_SECONDS.get(env)?,
        cpu_request,
        memory_request,
        cpu_limit,
        memory_limit,
        publisher_resources: publisher_resources(env)?,
        ttl_seconds_after_finished: vars::JOB_TTL_SECONDS.get(env)?,
        driver_active_deadline_seconds: vars::DRIVER_ACTIVE_DEADLINE_SECONDS.get(env)?,
        publisher_active_deadline_seconds: vars::PUBLISHER_ACTIVE_DEADLINE_SECONDS.get(env)?,
        driver_secrets,
        subscription_secret: vars::DRIVER_SUBSCRIPTION_SECRET.read(env)?,
        subscription_dir,
        fs_group: vars::DRIVER_FS_GROUP.get(env)?,
        driver_security: driver_security(env)?,
        publisher_security: SecurityContexts {
            pod: vars::PUBLISHER_POD_SECURITY_CONTEXT.get(env)?,
            container: vars::PUBLISHER_SECURITY_CONTEXT.get(env)?,
        },
        driver_service_account: vars::DRIVER_SERVICE_ACCOUNT.read(env)?,
        passthrough_env: env.passthrough().to_vec(),
    })
}

/// The driver pod's and container's securityContext. The pod's may not set
/// `fsGroup`: that is `TCAB_DRIVER_FS_GROUP`'s, and two variables for one
/// field would leave the operator to guess which wins.
fn driver_security(env: &Env) -> Result<SecurityContexts, ConfigError> {
    let pod = vars::DRIVER_POD_SECURITY_CONTEXT.get(env)?;
    if let Some(fs_group) = pod.fs_group {
        return Err(ConfigError::Refused {
            var: vars::DRIVER_POD_SECURITY_CONTEXT.name,
            expected: "a driver pod securityContext without fsGroup".into(),
            reason: format!(
                "it sets fsGroup {fs_group}, which is {}'s: set that variable instead",
                vars::DRIVER_FS_GROUP.name
            ),
        });
    }
    Ok(SecurityContexts {
        pod,
        container: vars::DRIVER_SECURITY_CONTEXT.get(env)?,
    })
}

/// The publisher container's requests and limits, each limit at least its
/// request (the API server refuses a Job otherwise).
fn publisher_resources(env: &Env) -> Result<Sizing, ConfigError> {
    let sizing = Sizing {
        cpu_request: vars::PUBLISHER_CPU_REQUEST.get(env)?,
        memory_request: vars::PUBLISHER_MEMORY_REQUEST.get(env)?,
        cpu_limit: vars::PUBLISHER_CPU_LIMIT.read(env)?,
        memory_limit: vars::PUBLISHER_MEMORY_LIMIT.read(env)?,
    };
    limit_at_least_request(
        (vars::PUBLISHER_CPU_LIMIT.name, sizing.cpu_limit.as_deref()),
        (vars::PUBLISHER_CPU_REQUEST.name, &sizing.cpu_request),
    )?;
    limit_at_least_request(
        (
            vars::PUBLISHER_MEMORY_LIMIT.name,
            sizing.memory_limit.as_deref(),
        ),
        (vars::PUBLISHER_MEMORY_REQUEST.name, &sizing.memory_request),
    )?;
    Ok(sizing)
}
