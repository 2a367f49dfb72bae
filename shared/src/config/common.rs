//! The settings more than one binary reads, and the checks between
//! variables that more than one binary applies.

use super::vars;
use super::{ConfigError, Env};
use crate::secret::Secret;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// What all three binaries read.
#[derive(Debug, Clone, PartialEq)]
pub struct CommonConfig {
    /// `POD_NAMESPACE`; `None` means the kube client's default namespace.
    pub namespace: Option<String>,
    /// `TCAB_DISPATCHER_MANAGED_BY`.
    pub managed_by: String,
    /// `TCAB_DISPATCHER_POLL_INTERVAL_SECONDS`.
    pub poll_interval: Duration,
    /// `TCAB_DISPATCHER_LOG_FORMAT`.
    pub log_format: LogFormat,
    /// `TCAB_DISPATCHER_VAULT_ADDR`.
    pub vault_addr: SocketAddr,
    /// `TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS`.
    pub kube_timeout: Duration,
    /// `TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS`.
    pub watch_timeout: Duration,
    /// `TCAB_DISPATCHER_METRICS_ADDR`; `None` means nothing listens.
    pub metrics_addr: Option<SocketAddr>,
}

impl CommonConfig {
    /// Reads the common settings.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let log_format = vars::LOG_FORMAT.get(env)?;
        let vault_addr = vars::VAULT_ADDR.get(env)?;
        let metrics_addr = vars::METRICS_ADDR.read(env)?;
        Ok(CommonConfig {
            namespace: vars::POD_NAMESPACE.read(env)?,
            managed_by: vars::MANAGED_BY.get(env)?,
            poll_interval: vars::POLL_INTERVAL_SECONDS.get(env)?,
            log_format,
            vault_addr,
            kube_timeout: vars::KUBE_TIMEOUT_SECONDS.get(env)?,
            watch_timeout: vars::WATCH_TIMEOUT_SECONDS.get(env)?,
            metrics_addr,
        })
    }
}

/// How to reach the backend.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// `TCAB_BACKEND_URL`, without a trailing slash.
    pub url: String,
    /// `TCAB_BACKEND_SERVICE_TOKEN`.
    pub service_token: Secret,
    /// `TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS`.
    pub timeout: Duration,
}

impl BackendConfig {
    /// Reads the backend settings; the URL and the token are required.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(BackendConfig {
            url: vars::BACKEND_URL.get(env)?,
            service_token: vars::BACKEND_SERVICE_TOKEN.get(env)?,
            timeout: vars::BACKEND_TIMEOUT_SECONDS.get(env)?,
        })
    }
}

/// `var` (of `value`) must be at most half the lease
/// (`TCAB_DISPATCHER_LEASE_SECONDS`), so a renewal can fail once and still
/// land before the lease runs out.
pub fn at_most_half_lease(
    var: &'static str,
    value: Duration,
    lease: Duration,
) -> Result<(), ConfigError> {
    if value > lease / 2 {
        return Err(ConfigError::Invalid {
            var,
            expected: format!("at most half of {}", vars::LEASE_SECONDS.name).into(),
            got: format!("{} (lease {})", value.as_secs_f64(), lease.as_secs_f64()),
        });
    }
    Ok(())
}

/// The poll interval (`poll`) plus the backend timeout (`backend_timeout`)
/// must be at most half the lease (`lease`). The lease-keeper's renewal loop
/// sleeps the poll interval after each round, and a round's call gives up
/// after the backend timeout, so rounds begin at most that sum apart: with
/// the sum at most half the lease, two rounds begin within every lease, and
/// one of them can fail without the lease running out. Both binaries that
/// read the lease check it (the admitter too, which renews nothing), so a pod
/// given such settings stops whole: the chart sets one poll interval for
/// all three containers.
pub fn renewals_fit_in_lease(
    poll: Duration,
    backend_timeout: Duration,
    lease: Duration,
) -> Result<(), ConfigError> {
    if poll.saturating_add(backend_timeout) > lease / 2 {
        return Err(ConfigError::Invalid {
            var: vars::POLL_INTERVAL_SECONDS.name,
            expected: format!(
                "at most half of {} minus {}, so that two lease renewals begin within every lease",
                vars::LEASE_SECONDS.name,
                vars::BACKEND_TIMEOUT_SECONDS.name
            )
            .into(),
            got: format!(
                "{} (backend timeout {}, lease {})",
                poll.as_secs_f64(),
                backend_timeout.as_secs_f64(),
                lease.as_secs_f64()
            ),
        });
    }
    Ok(())
}

/// The driver's managed-by value must differ from the dispatcher's: the
/// reaper tells a sandbox from the driver's own pod (same job id) by that
/// label alone.
pub fn distinct_managed_by(dispatcher: &str, driver: &str) -> Result<(), ConfigError> {
    if dispatcher == driver {
        return Err(ConfigError::Invalid {
            var: vars::DRIVER_MANAGED_BY.name,
            expected: format!(
                "a value different from {} (sandboxes must be told from driver pods)",
                vars::MANAGED_BY.name
            )
            .into(),
            got: driver.to_owned(),
        });
    }
    Ok(())
}

/// A container's limit must be at least its request when both are set: the
/// API server refuses every Job whose limit is below its request (pod
/// validation, `ValidateResourceRequirements`), so such a setting would
/// fail every create. `limit` and `request` are the variables and their
/// values, already parsed as quantities.
pub fn limit_at_least_request(
    limit: (&'static str, Option<&str>),
    request: (&'static str, &str),
) -> Result<(), ConfigError> {
    let (limit_var, Some(limit_text)) = limit else {
        return Ok(());
    };
    let (request_var, request_text) = request;
    // In thousandths, rounded: exact for any size a container asks for
    // (the crate's own comparison converts binary and decimal suffixes
    // through f32 and finds 1Gi below 1073741824).
    let millis = |text: &str| {
        super::kinds::parse_quantity(text)
            .and_then(|q| q.to_bytes_f64())
            .map(|v| (v * 1000.0).round())
    };
    let (Some(l), Some(r)) = (millis(limit_text), millis(request_text)) else {
        return Ok(());
    };
    if l < r {
        return Err(ConfigError::Invalid {
            var: limit_var,
            expected: format!("a limit at least {request_var} ({request_text})").into(),
            got: limit_text.to_owned(),
        });
    }
    Ok(())
}
