//! Configuration: environment variables only, one typed struct per binary.
//!
//! Every variable is documented once, in [`VARIABLES`]; `--help` prints that
//! table and the README's table is checked against it. The environment is read
//! with envy into [`RawEnv`] (every value a string), then each binary's struct
//! is validated from it. A missing or malformed variable is a [`ConfigError`]
//! that names the variable and what was expected; [`load`] prints it on one
//! stderr line and exits with code 2 before the binary does anything.

use crate::job_builder::JobSettings;
use crate::secret::Secret;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Which binary reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `tcab-admitter`
    Admitter,
    /// `tcab-lease-keeper`
    LeaseKeeper,
    /// `tcab-reaper`
    Reaper,
}

impl Binary {
    /// The binary's name.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Admitter => "tcab-admitter",
            Binary::LeaseKeeper => "tcab-lease-keeper",
            Binary::Reaper => "tcab-reaper",
        }
    }
}

use Binary::{Admitter as A, LeaseKeeper as L, Reaper as R};

/// What a binary was built from. Each binary crate's build script bakes the
/// git revision in (bins/revision.rs), so a new commit recompiles only the
/// three binary crates; `main` passes the values here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    /// The workspace version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The git commit id the binary was built from, the `TCAB_GIT_REVISION`
    /// it was built with, or `unknown`.
    pub revision: &'static str,
}

impl fmt::Display for BuildInfo {
    /// `0.1.0 (revision 4eefe8c...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (revision {})", self.version, self.revision)
    }
}

/// The documentation of one variable.
#[derive(Debug, Clone, Copy)]
pub struct VarDoc {
    /// The variable's name.
    pub name: &'static str,
    /// The binaries that read it.
    pub read_by: &'static [Binary],
    /// Its default, or `None` when it is required or simply optional.
    pub default: Option<&'static str>,
    /// Whether the binary refuses to start without it.
    pub required: bool,
    /// What it means.
    pub doc: &'static str,
}

const fn var(
    name: &'static str,
    read_by: &'static [Binary],
    default: Option<&'static str>,
    required: bool,
    doc: &'static str,
) -> VarDoc {
    VarDoc {
        name,
        read_by,
        default,
        required,
        doc,
    }
}

/// Every variable the binaries read, with its default and meaning. Variables
/// named `TCAB_K8S_*` and `TCAB_CONTAINER_*` are also passed through, all of
/// them, from the admitter's environment to every driver pod.
pub const VARIABLES: &[VarDoc] = &[
    var(
        "TCAB_BACKEND_URL",
        &[A, L, R],
        None,
        true,
        "Base URL of the backend's in-cluster Service (the reaper needs it only for the orphan sweep).",
    ),
    var(
        "TCAB_BACKEND_SERVICE_TOKEN",
        &[A, L, R],
        None,
        true,
        "Service token for claims, leases, lost reports and the active lists. Never logged.",
    ),
    var(
        "TCAB_DRIVER_IMAGE",
        &[A],
        None,
        true,
        "Image of every driver Job (pin it by digest or :<git-sha>).",
    ),
    var(
        "TCAB_PUBLISHER_IMAGE",
        &[A, L],
        None,
        false,
        "Image of publisher Jobs. Setting it opens the publish lane (and publish lease renewal).",
    ),
    var(
        "TCAB_DISPATCHER_MAX_INFLIGHT",
        &[A],
        Some("8"),
        false,
        "Cap of the run lane: live driver Jobs at once.",
    ),
    var(
        "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT",
        &[A],
        Some("8"),
        false,
        "Cap of the publish lane: live publisher Jobs at once.",
    ),
    var(
        "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
        &[A, L, R],
        Some("5"),
        false,
        "Sleep after a tick that did nothing (decimals allowed).",
    ),
    var(
        "TCAB_DISPATCHER_MANAGED_BY",
        &[A, L, R],
        Some("tcab-dispatcher"),
        false,
        "Value of app.kubernetes.io/managed-by on every Job this dispatcher owns.",
    ),
    var(
        "POD_NAMESPACE",
        &[A, L, R],
        None,
        false,
        "Namespace of the dispatcher and its Jobs; unset means the kube client's default namespace.",
    ),
    var(
        "TCAB_DISPATCHER_LOG_FORMAT",
        &[A, L, R],
        Some("text"),
        false,
        "Log format: text or json. RUST_LOG filters (default info).",
    ),
    var(
        "TCAB_DISPATCHER_VAULT_ADDR",
        &[A, L],
        Some("127.0.0.1:50051"),
        false,
        "Address of the lease-keeper's token vault and admission gate (gRPC).",
    ),
    var(
        "TCAB_DISPATCHER_METRICS_ADDR",
        &[A, L, R],
        None,
        false,
        "IP:port where the binary serves /metrics, /healthz and /readyz, e.g. 0.0.0.0:9090 (docs/metrics.md); unset means nothing listens. An address that cannot be bound stops the start.",
    ),
    var(
        "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS",
        &[A, L, R],
        Some("10"),
        false,
        "Timeout of one backend call.",
    ),
    var(
        "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS",
        &[A, L, R],
        Some("15"),
        false,
        "Timeout of one Kubernetes API call (every call but the Job watch).",
    ),
    var(
        "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS",
        &[A, L, R],
        Some("60"),
        false,
        "Server-side timeout of each Job watch; a watch silent (not even a bookmark) this long is reconnected, which bounds how stale a stuck watch leaves the view.",
    ),
    var(
        "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS",
        &[A],
        Some("60"),
        false,
        "The admitter claims only while the lease-keeper's last successful renewal is at most this old; at most half the lease.",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS",
        &[A],
        Some("120"),
        false,
        "terminationGracePeriodSeconds of driver pods: time to hand over the record and report after SIGTERM.",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_CPU_REQUEST",
        &[A],
        Some("250m"),
        false,
        "CPU request of the driver container.",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST",
        &[A],
        Some("1Gi"),
        false,
        "Memory request of the driver container (the node's reservation for the post-run toolchain).",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_CPU_LIMIT",
        &[A],
        Some("2"),
        false,
        "CPU limit of the driver container (over-limit CPU throttles, never kills). Empty sets none.",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT",
        &[A],
        None,
        false,
        "Memory limit of the driver container; unset by default, because hitting it SIGKILLs the driver.",
    ),
    var(
        "TCAB_DISPATCHER_JOB_TTL_SECONDS",
        &[A],
        Some("3600"),
        false,
        "ttlSecondsAfterFinished of every Job: how long a finished Job and its logs stay.",
    ),
    var(
        "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS",
        &[A],
        Some("21600"),
        false,
        "activeDeadlineSeconds of driver Jobs: the backstop that ends a hung driver.",
    ),
    var(
        "TCAB_DISPATCHER_PUBLISHER_ACTIVE_DEADLINE_SECONDS",
        &[A],
        Some("2700"),
        false,
        "activeDeadlineSeconds of publisher Jobs (45 minutes).",
    ),
    var(
        "TCAB_DRIVER_ARTIFACTS_URL",
        &[A],
        None,
        false,
        "Where drivers upload the run tree; default <TCAB_BACKEND_URL>/artifacts.",
    ),
    var(
        "TCAB_DRIVER_REPOS_URL",
        &[A],
        None,
        false,
        "Where drivers upload the bundle; default <TCAB_BACKEND_URL>/repos.",
    ),
    var(
        "TCAB_DRIVER_FINISH_DEADLINE_SECONDS",
        &[A],
        Some("5400"),
        false,
        "Passed to the driver: how long a run may take before the driver stops it.",
    ),
    var(
        "TCAB_DRIVER_REPORT_DEADLINE_SECONDS",
        &[A],
        Some("600"),
        false,
        "Passed to the driver: how long it keeps trying to land its terminal report.",
    ),
    var(
        "TCAB_DRIVER_MANAGED_BY",
        &[A, R],
        Some("tcab-driver"),
        false,
        "managed-by value the driver puts on its sandbox pods; the reaper selects on it.",
    ),
    var(
        "TCAB_DRIVER_SECRETS",
        &[A],
        None,
        false,
        "Comma-separated Secret names whose keys reach the driver's env (envFrom), e.g. the harness API key.",
    ),
    var(
        "TCAB_DRIVER_SUBSCRIPTION_SECRET",
        &[A],
        None,
        false,
        "A Secret mounted read-only (optional) into driver pods instead of put in the env.",
    ),
    var(
        "TCAB_DRIVER_SUBSCRIPTION_DIR",
        &[A],
        Some("/var/run/tcab/subscription"),
        false,
        "Where the subscription Secret is mounted.",
    ),
    var(
        "TCAB_DRIVER_FS_GROUP",
        &[A],
        Some("1000"),
        false,
        "fsGroup of driver pods, so the unprivileged driver can read the mounted Secret.",
    ),
    var(
        "TCAB_DRIVER_SERVICE_ACCOUNT",
        &[A],
        None,
        false,
        "Service account of driver pods (it needs pod create in the sandbox namespace).",
    ),
    var(
        "TCAB_DISPATCHER_LEASE_SECONDS",
        &[A, L],
        Some("120"),
        false,
        "Lease length the backend grants; a vaulted token with no Job after this long is dropped. The gate age and the watch timeout must be at most half of it.",
    ),
    var(
        "TCAB_DISPATCHER_START_GRACE_SECONDS",
        &[L],
        Some("300"),
        false,
        "A driver or publisher pod waiting this long on an image pull or a container config error is judged never to start: its Job is deleted and the death reported.",
    ),
    var(
        "TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS",
        &[L],
        Some("1800"),
        false,
        "A driver or publisher pod unschedulable this long is judged never to start.",
    ),
    var(
        "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS",
        &[L, R],
        Some("60"),
        false,
        "How long past its pod's termination grace a failing Job may stay unfinished (a lost node) before it is judged dead: lease no longer renewed, death reported, sandboxes reaped.",
    ),
    var(
        "TCAB_DISPATCHER_LOG_TAIL_LINES",
        &[L],
        Some("50"),
        false,
        "How many of a dead pod's last log lines go into its death report.",
    ),
    var(
        "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK",
        &[L],
        Some("false"),
        false,
        "Allow the vault to listen on a non-loopback address (it holds per-job tokens).",
    ),
    var(
        "TCAB_K8S_NAMESPACE",
        &[A, R],
        None,
        false,
        "Sandbox namespace (passed to drivers); the reaper cleans there. Unset means the dispatcher's own.",
    ),
    var(
        "TCAB_DISPATCHER_ORPHAN_SWEEP",
        &[R],
        Some("true"),
        false,
        "Also delete sandbox pods whose job id matches no owned Job and that the backend does not list as driven (after the grace).",
    ),
    var(
        "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS",
        &[R],
        Some("300"),
        false,
        "How often the orphan sweep lists the sandbox pods (other ticks list them only when a failed driver awaits its reap).",
    ),
    var(
        "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS",
        &[R],
        Some("600"),
        false,
        "Minimum age of a sandbox pod before the orphan sweep may delete it.",
    ),
];

/// Prefixes of the variables passed through to driver pods.
pub const PASSTHROUGH_PREFIXES: [&str; 2] = ["TCAB_K8S_", "TCAB_CONTAINER_"];

/// A variable that is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("{var}: required, expected {expected}")]
    Missing {
        var: &'static str,
        expected: &'static str,
    },
    /// A variable's value does not parse.
    #[error("{var}: expected {expected}, got {got:?}")]
    Invalid {
        var: &'static str,
        expected: &'static str,
        got: String,
    },
    /// The environment itself could not be read (a value that is not UTF-8).
    #[error("environment: {0}")]
    Environment(String),
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
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

/// The environment as envy reads it: every variable of [`VARIABLES`] as an
/// optional string (field names are the variable names, lowercased).
#[derive(Debug, Default, Deserialize)]
#[allow(missing_docs)]
struct RawEnv {
    tcab_backend_url: Option<String>,
    tcab_backend_service_token: Option<Secret>,
    tcab_driver_image: Option<String>,
    tcab_publisher_image: Option<String>,
    tcab_dispatcher_max_inflight: Option<String>,
    tcab_dispatcher_max_publish_inflight: Option<String>,
    tcab_dispatcher_poll_interval_seconds: Option<String>,
    tcab_dispatcher_managed_by: Option<String>,
    pod_namespace: Option<String>,
    tcab_dispatcher_log_format: Option<String>,
    tcab_dispatcher_vault_addr: Option<String>,
    tcab_dispatcher_metrics_addr: Option<String>,
    tcab_dispatcher_backend_timeout_seconds: Option<String>,
    tcab_dispatcher_gate_max_age_seconds: Option<String>,
    tcab_dispatcher_driver_termination_grace_seconds: Option<String>,
    tcab_dispatcher_driver_cpu_request: Option<String>,
    tcab_dispatcher_driver_memory_request: Option<String>,
    tcab_dispatcher_driver_cpu_limit: Option<String>,
    tcab_dispatcher_driver_memory_limit: Option<String>,
    tcab_dispatcher_job_ttl_seconds: Option<String>,
    tcab_dispatcher_driver_active_deadline_seconds: Option<String>,
    tcab_dispatcher_publisher_active_deadline_seconds: Option<String>,
    tcab_driver_artifacts_url: Option<String>,
    tcab_driver_repos_url: Option<String>,
    tcab_driver_finish_deadline_seconds: Option<String>,
    tcab_driver_report_deadline_seconds: Option<String>,
    tcab_driver_managed_by: Option<String>,
    tcab_driver_secrets: Option<String>,
    tcab_driver_subscription_secret: Option<String>,
    tcab_driver_subscription_dir: Option<String>,
    tcab_driver_fs_group: Option<String>,
    tcab_driver_service_account: Option<String>,
    tcab_dispatcher_lease_seconds: Option<String>,
    tcab_dispatcher_log_tail_lines: Option<String>,
    tcab_dispatcher_vault_allow_non_loopback: Option<String>,
    tcab_k8s_namespace: Option<String>,
    tcab_dispatcher_orphan_sweep: Option<String>,
    tcab_dispatcher_orphan_grace_seconds: Option<String>,
    tcab_dispatcher_orphan_sweep_interval_seconds: Option<String>,
    tcab_dispatcher_kube_timeout_seconds: Option<String>,
    tcab_dispatcher_watch_timeout_seconds: Option<String>,
    tcab_dispatcher_start_grace_seconds: Option<String>,
    tcab_dispatcher_unschedulable_grace_seconds: Option<String>,
    tcab_dispatcher_terminating_margin_seconds: Option<String>,
}

/// The environment a binary validates its configuration from.
pub struct Env {
    raw: RawEnv,
    passthrough: Vec<(String, String)>,
}

impl Env {
    /// Reads the given variables (the process environment in [`load`]).
    pub fn from_vars<I>(vars: I) -> Result<Env, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let passthrough = vars
            .iter()
            .filter(|(k, _)| PASSTHROUGH_PREFIXES.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let raw: RawEnv =
            envy::from_iter(vars).map_err(|e| ConfigError::Environment(e.to_string()))?;
        Ok(Env { raw, passthrough })
    }

    /// Reads the process environment; a value that is not UTF-8 is an error naming its variable.
    pub fn from_process() -> Result<Env, ConfigError> {
        let mut vars = Vec::new();
        for (key, value) in std::env::vars_os() {
            let (Some(key), value) = (key.to_str().map(str::to_owned), value) else {
                continue;
            };
            match value.into_string() {
                Ok(value) => vars.push((key, value)),
                Err(_) if is_known(&key) => {
                    return Err(ConfigError::Environment(format!(
                        "{key}: expected UTF-8 text"
                    )));
                }
                Err(_) => {}
            }
        }
        Env::from_vars(vars)
    }
}

fn is_known(name: &str) -> bool {
    VARIABLES.iter().any(|v| v.name == name)
        || PASSTHROUGH_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A value that is set and not blank.
fn set(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn required(
    var: &'static str,
    value: &Option<String>,
    expected: &'static str,
) -> Result<String, ConfigError> {
    set(value)
        .map(str::to_owned)
        .ok_or(ConfigError::Missing { var, expected })
}

fn url(
    var: &'static str,
    value: &Option<String>,
    must: bool,
) -> Result<Option<String>, ConfigError> {
    const EXPECTED: &str = "an http:// or https:// URL without a query or fragment";
    let Some(v) = set(value) else {
        return if must {
            Err(ConfigError::Missing {
                var,
                expected: EXPECTED,
            })
        } else {
            Ok(None)
        };
    };
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"));
    match rest {
        Some(host)
            if !host.is_empty()
                && !host.starts_with('/')
                && !v.contains(char::is_whitespace)
                && !v.contains(['?', '#']) =>
        {
            Ok(Some(v.trim_end_matches('/').to_owned()))
        }
        _ => Err(ConfigError::Invalid {
            var,
            expected: EXPECTED,
            got: v.to_owned(),
        }),
    }
}

fn number<T: std::str::FromStr + PartialOrd + Copy>(
    var: &'static str,
    value: &Option<String>,
    default: T,
    min: T,
    expected: &'static str,
) -> Result<T, ConfigError> {
    let Some(v) = set(value) else {
        return Ok(default);
    };
    match v.parse::<T>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(ConfigError::Invalid {
            var,
            expected,
            got: v.to_owned(),
        }),
    }
}

fn seconds(
    var: &'static str,
    value: &Option<String>,
    default: f64,
) -> Result<Duration, ConfigError> {
    const EXPECTED: &str = "a number of seconds > 0";
    let Some(v) = set(value) else {
        return Ok(Duration::from_secs_f64(default));
    };
    match v.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n < 1e9 => Ok(Duration::from_secs_f64(n)),
        _ => Err(ConfigError::Invalid {
            var,
            expected: EXPECTED,
            got: v.to_owned(),
        }),
    }
}

/// A whole number of seconds >= 1 (the watch timeout is sent as an integer).
fn whole_seconds(
    var: &'static str,
    value: &Option<String>,
    default: u64,
) -> Result<Duration, ConfigError> {
    number(var, value, default, 1, WHOLE_AT_LEAST_1).map(Duration::from_secs)
}

/// `var` must be at most half the lease (`TCAB_DISPATCHER_LEASE_SECONDS`).
fn at_most_half_lease(
    var: &'static str,
    value: Duration,
    lease: Duration,
) -> Result<(), ConfigError> {
    if value > lease / 2 {
        return Err(ConfigError::Invalid {
            var,
            expected: "at most half of TCAB_DISPATCHER_LEASE_SECONDS",
            got: format!("{} (lease {})", value.as_secs_f64(), lease.as_secs_f64()),
        });
    }
    Ok(())
}

fn boolean(var: &'static str, value: &Option<String>, default: bool) -> Result<bool, ConfigError> {
    let Some(v) = set(value) else {
        return Ok(default);
    };
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Invalid {
            var,
            expected: "true or false",
            got: v.to_owned(),
        }),
    }
}

/// A DNS-1123 label: a namespace, a Secret or service-account name, a label value.
fn name(
    var: &'static str,
    value: &Option<String>,
    default: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    let Some(v) = set(value).or(default) else {
        return Ok(None);
    };
    check_name(var, v).map(Some)
}

fn check_name(var: &'static str, v: &str) -> Result<String, ConfigError> {
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && v.as_bytes()[0].is_ascii_alphanumeric()
        && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(v.to_owned())
    } else {
        Err(ConfigError::Invalid {
            var,
            expected: "a lowercase DNS name ([a-z0-9.-], alphanumeric at both ends)",
            got: v.to_owned(),
        })
    }
}

fn label_value(
    var: &'static str,
    value: &Option<String>,
    default: &str,
) -> Result<String, ConfigError> {
    let v = set(value).unwrap_or(default);
    if !v.is_empty() && crate::names::is_label_value(v) {
        Ok(v.to_owned())
    } else {
        Err(ConfigError::Invalid {
            var,
            expected: "a label value (1-63 of [A-Za-z0-9._-], alphanumeric at both ends)",
            got: v.to_owned(),
        })
    }
}

/// A Kubernetes resource quantity such as `250m`, `2`, `1Gi`, `512M`.
fn quantity(
    var: &'static str,
    value: &Option<String>,
    default: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    let v = match value.as_deref().map(str::trim) {
        Some("") => return Ok(None), // explicitly empty: none
        Some(v) => v,
        None => match default {
            Some(d) => d,
            None => return Ok(None),
        },
    };
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &v[digits.len()..];
    let suffix_ok = matches!(
        suffix,
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
    );
    match digits.parse::<f64>() {
        Ok(n) if suffix_ok && n > 0.0 && !digits.starts_with('+') => Ok(Some(v.to_owned())),
        _ => Err(ConfigError::Invalid {
            var,
            expected: "a Kubernetes quantity such as 250m, 2, 1Gi",
            got: v.to_owned(),
        }),
    }
}

/// The driver's managed-by value must differ from the dispatcher's: the reaper
/// tells a sandbox from the driver's own pod (same job id) by that label alone.
fn distinct_managed_by(dispatcher: &str, driver: &str) -> Result<(), ConfigError> {
    if dispatcher == driver {
        return Err(ConfigError::Invalid {
            var: "TCAB_DRIVER_MANAGED_BY",
            expected: "a value different from TCAB_DISPATCHER_MANAGED_BY (sandboxes must be told from driver pods)",
            got: driver.to_owned(),
        });
    }
    Ok(())
}

fn common(raw: &RawEnv) -> Result<CommonConfig, ConfigError> {
    let log_format = match set(&raw.tcab_dispatcher_log_format)
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(_) => {
            return Err(ConfigError::Invalid {
                var: "TCAB_DISPATCHER_LOG_FORMAT",
                expected: "text or json",
                got: raw.tcab_dispatcher_log_format.clone().unwrap_or_default(),
            });
        }
    };
    let vault_addr = match set(&raw.tcab_dispatcher_vault_addr) {
        None => SocketAddr::from(([127, 0, 0, 1], 50051)),
        Some(v) => v.parse().map_err(|_| ConfigError::Invalid {
            var: "TCAB_DISPATCHER_VAULT_ADDR",
            expected: "an IP:port address such as 127.0.0.1:50051",
            got: v.to_owned(),
        })?,
    };
    let metrics_addr = set(&raw.tcab_dispatcher_metrics_addr)
        .map(|v| {
            v.parse().map_err(|_| ConfigError::Invalid {
                var: "TCAB_DISPATCHER_METRICS_ADDR",
                expected: "an IP:port address such as 0.0.0.0:9090",
                got: v.to_owned(),
            })
        })
        .transpose()?;
    Ok(CommonConfig {
        namespace: name("POD_NAMESPACE", &raw.pod_namespace, None)?,
        managed_by: label_value(
            "TCAB_DISPATCHER_MANAGED_BY",
            &raw.tcab_dispatcher_managed_by,
            "tcab-dispatcher",
        )?,
        poll_interval: seconds(
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
            &raw.tcab_dispatcher_poll_interval_seconds,
            5.0,
        )?,
        log_format,
        vault_addr,
        kube_timeout: seconds(
            "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS",
            &raw.tcab_dispatcher_kube_timeout_seconds,
            15.0,
        )?,
        watch_timeout: whole_seconds(
            "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS",
            &raw.tcab_dispatcher_watch_timeout_seconds,
            60,
        )?,
        metrics_addr,
    })
}

fn backend(raw: &RawEnv) -> Result<BackendConfig, ConfigError> {
    let url = url("TCAB_BACKEND_URL", &raw.tcab_backend_url, true)?.unwrap_or_default();
    let service_token = match &raw.tcab_backend_service_token {
        Some(t) if !t.expose().trim().is_empty() => Secret::new(t.expose().trim()),
        _ => {
            return Err(ConfigError::Missing {
                var: "TCAB_BACKEND_SERVICE_TOKEN",
                expected: "the backend's service token",
            });
        }
    };
    Ok(BackendConfig {
        url,
        service_token,
        timeout: seconds(
            "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS",
            &raw.tcab_dispatcher_backend_timeout_seconds,
            10.0,
        )?,
    })
}

fn lease(raw: &RawEnv) -> Result<Duration, ConfigError> {
    seconds(
        "TCAB_DISPATCHER_LEASE_SECONDS",
        &raw.tcab_dispatcher_lease_seconds,
        120.0,
    )
}

fn terminating_margin(raw: &RawEnv) -> Result<Duration, ConfigError> {
    seconds(
        "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS",
        &raw.tcab_dispatcher_terminating_margin_seconds,
        60.0,
    )
}

/// A binary's configuration type.
pub trait BinaryConfig: Sized {
    /// The binary that reads it.
    const BINARY: Binary;
    /// Validates the configuration from an environment.
    fn from_env(env: &Env) -> Result<Self, ConfigError>;

    /// Validates the configuration from a list of variables (tests).
    fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_vars(vars)?)
    }
}

const WHOLE_AT_LEAST_1: &str = "a whole number >= 1";
const WHOLE_AT_LEAST_0: &str = "a whole number >= 0";

impl BinaryConfig for AdmitterConfig {
    const BINARY: Binary = Binary::Admitter;

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let raw = &env.raw;
        let backend = backend(raw)?;
        let common = common(raw)?;
        let driver_image = required(
            "TCAB_DRIVER_IMAGE",
            &raw.tcab_driver_image,
            "an image reference",
        )?;
        let image = |var: &'static str, v: String| {
            if v.contains(char::is_whitespace) {
                Err(ConfigError::Invalid {
                    var,
                    expected: "an image reference without spaces",
                    got: v,
                })
            } else {
                Ok(v)
            }
        };
        let driver_image = image("TCAB_DRIVER_IMAGE", driver_image)?;
        let publisher_image = set(&raw.tcab_publisher_image)
            .map(|v| image("TCAB_PUBLISHER_IMAGE", v.to_owned()))
            .transpose()?;
        let driver_secrets = match set(&raw.tcab_driver_secrets) {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| check_name("TCAB_DRIVER_SECRETS", s))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let subscription_dir = set(&raw.tcab_driver_subscription_dir)
            .unwrap_or("/var/run/tcab/subscription")
            .to_owned();
        if !subscription_dir.starts_with('/') {
            return Err(ConfigError::Invalid {
                var: "TCAB_DRIVER_SUBSCRIPTION_DIR",
                expected: "an absolute path",
                got: subscription_dir,
            });
        }
        let jobs = JobSettings {
            managed_by: common.managed_by.clone(),
            artifacts_url: url(
                "TCAB_DRIVER_ARTIFACTS_URL",
                &raw.tcab_driver_artifacts_url,
                false,
            )?
            .unwrap_or_else(|| format!("{}/artifacts", backend.url)),
            repos_url: url("TCAB_DRIVER_REPOS_URL", &raw.tcab_driver_repos_url, false)?
                .unwrap_or_else(|| format!("{}/repos", backend.url)),
            backend_url: backend.url.clone(),
            driver_image,
            publisher_image,
            finish_deadline_seconds: number(
                "TCAB_DRIVER_FINISH_DEADLINE_SECONDS",
                &raw.tcab_driver_finish_deadline_seconds,
                5400,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            report_deadline_seconds: number(
                "TCAB_DRIVER_REPORT_DEADLINE_SECONDS",
                &raw.tcab_driver_report_deadline_seconds,
                600,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            driver_managed_by: label_value(
                "TCAB_DRIVER_MANAGED_BY",
                &raw.tcab_driver_managed_by,
                "tcab-driver",
            )?,
            termination_grace_seconds: number(
                "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS",
                &raw.tcab_dispatcher_driver_termination_grace_seconds,
                120,
                0,
                WHOLE_AT_LEAST_0,
            )?,
            cpu_request: quantity(
                "TCAB_DISPATCHER_DRIVER_CPU_REQUEST",
                &raw.tcab_dispatcher_driver_cpu_request,
                Some("250m"),
            )?
            .unwrap_or_else(|| "250m".into()),
            memory_request: quantity(
                "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST",
                &raw.tcab_dispatcher_driver_memory_request,
                Some("1Gi"),
            )?
            .unwrap_or_else(|| "1Gi".into()),
            cpu_limit: quantity(
                "TCAB_DISPATCHER_DRIVER_CPU_LIMIT",
                &raw.tcab_dispatcher_driver_cpu_limit,
                Some("2"),
            )?,
            memory_limit: quantity(
                "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT",
                &raw.tcab_dispatcher_driver_memory_limit,
                None,
            )?,
            ttl_seconds_after_finished: number(
                "TCAB_DISPATCHER_JOB_TTL_SECONDS",
                &raw.tcab_dispatcher_job_ttl_seconds,
                3600,
                0,
                WHOLE_AT_LEAST_0,
            )?,
            driver_active_deadline_seconds: number(
                "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS",
                &raw.tcab_dispatcher_driver_active_deadline_seconds,
                21600,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            publisher_active_deadline_seconds: number(
                "TCAB_DISPATCHER_PUBLISHER_ACTIVE_DEADLINE_SECONDS",
                &raw.tcab_dispatcher_publisher_active_deadline_seconds,
                2700,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            driver_secrets,
            subscription_secret: name(
                "TCAB_DRIVER_SUBSCRIPTION_SECRET",
                &raw.tcab_driver_subscription_secret,
                None,
            )?,
            subscription_dir,
            fs_group: number(
                "TCAB_DRIVER_FS_GROUP",
                &raw.tcab_driver_fs_group,
                1000,
                0,
                WHOLE_AT_LEAST_0,
            )?,
            driver_service_account: name(
                "TCAB_DRIVER_SERVICE_ACCOUNT",
                &raw.tcab_driver_service_account,
                None,
            )?,
            passthrough_env: env.passthrough.clone(),
        };
        if let Some(ns) = set(&raw.tcab_k8s_namespace) {
            check_name("TCAB_K8S_NAMESPACE", ns)?;
        }
        distinct_managed_by(&jobs.managed_by, &jobs.driver_managed_by)?;
        let lease_length = lease(raw)?;
        let gate_max_age = seconds(
            "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS",
            &raw.tcab_dispatcher_gate_max_age_seconds,
            60.0,
        )?;
        at_most_half_lease(
            "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS",
            gate_max_age,
            lease_length,
        )?;
        Ok(AdmitterConfig {
            max_inflight: number(
                "TCAB_DISPATCHER_MAX_INFLIGHT",
                &raw.tcab_dispatcher_max_inflight,
                8,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            max_publish_inflight: number(
                "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT",
                &raw.tcab_dispatcher_max_publish_inflight,
                8,
                1,
                WHOLE_AT_LEAST_1,
            )?,
            gate_max_age,
            lease_length,
            jobs,
            common,
            backend,
        })
    }
}

impl BinaryConfig for LeaseKeeperConfig {
    const BINARY: Binary = Binary::LeaseKeeper;

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let raw = &env.raw;
        let common = common(raw)?;
        let lease_length = lease(raw)?;
        at_most_half_lease(
            "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS",
            common.watch_timeout,
            lease_length,
        )?;
        let vault_allow_non_loopback = boolean(
            "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK",
            &raw.tcab_dispatcher_vault_allow_non_loopback,
            false,
        )?;
        if !vault_allow_non_loopback && !common.vault_addr.ip().is_loopback() {
            return Err(ConfigError::Invalid {
                var: "TCAB_DISPATCHER_VAULT_ADDR",
                expected: "a loopback address (the vault holds per-job tokens; set TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK=true to override)",
                got: common.vault_addr.to_string(),
            });
        }
        Ok(LeaseKeeperConfig {
            backend: backend(raw)?,
            common,
            publishing: set(&raw.tcab_publisher_image).is_some(),
            vault_allow_non_loopback,
            lease_length,
            start_grace: seconds(
                "TCAB_DISPATCHER_START_GRACE_SECONDS",
                &raw.tcab_dispatcher_start_grace_seconds,
                300.0,
            )?,
            unschedulable_grace: seconds(
                "TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS",
                &raw.tcab_dispatcher_unschedulable_grace_seconds,
                1800.0,
            )?,
            terminating_margin: terminating_margin(raw)?,
            log_tail_lines: number(
                "TCAB_DISPATCHER_LOG_TAIL_LINES",
                &raw.tcab_dispatcher_log_tail_lines,
                50,
                1,
                WHOLE_AT_LEAST_1,
            )?,
        })
    }
}

impl BinaryConfig for ReaperConfig {
    const BINARY: Binary = Binary::Reaper;

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let raw = &env.raw;
        let common = common(raw)?;
        let driver_managed_by = label_value(
            "TCAB_DRIVER_MANAGED_BY",
            &raw.tcab_driver_managed_by,
            "tcab-driver",
        )?;
        distinct_managed_by(&common.managed_by, &driver_managed_by)?;
        let orphan_sweep = boolean(
            "TCAB_DISPATCHER_ORPHAN_SWEEP",
            &raw.tcab_dispatcher_orphan_sweep,
            true,
        )?;
        // The sweep asks the backend which jobs it still drives; without the
        // sweep the reaper never calls the backend.
        let backend = if orphan_sweep {
            Some(backend(raw)?)
        } else {
            None
        };
        Ok(ReaperConfig {
            common,
            backend,
            orphan_sweep_interval: seconds(
                "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS",
                &raw.tcab_dispatcher_orphan_sweep_interval_seconds,
                300.0,
            )?,
            terminating_margin: terminating_margin(raw)?,
            sandbox_namespace: name("TCAB_K8S_NAMESPACE", &raw.tcab_k8s_namespace, None)?,
            driver_managed_by,
            orphan_sweep,
            orphan_grace: seconds(
                "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS",
                &raw.tcab_dispatcher_orphan_grace_seconds,
                600.0,
            )?,
        })
    }
}

/// The `--help` text of a binary: what it is and the variables it reads.
pub fn help_text(binary: Binary, about: &str, build: &BuildInfo) -> String {
    let mut out = format!(
        "{} {build}\n{about}\n\nUsage: {} [--help | --version]\n\nConfiguration is environment variables only:\n\n",
        binary.name(),
        binary.name()
    );
    for v in VARIABLES.iter().filter(|v| v.read_by.contains(&binary)) {
        let default = match (v.required, v.default) {
            (true, _) => "required".to_owned(),
            (false, Some(d)) => format!("default {d}"),
            (false, None) => "optional".to_owned(),
        };
        out.push_str(&format!("  {}  ({default})\n      {}\n", v.name, v.doc));
    }
    if binary == Binary::Admitter {
        out.push_str(
            "  TCAB_K8S_*, TCAB_CONTAINER_*\n      Passed through unchanged to every driver pod.\n",
        );
    }
    out.push_str(
        "\nExit codes: 0 after SIGTERM, 1 on a fatal error, 2 on a configuration error.\n",
    );
    out
}

/// The README's configuration table, generated from [`VARIABLES`].
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | read by | default | meaning |\n|---|---|---|---|\n");
    for v in VARIABLES {
        let by: Vec<&str> = v
            .read_by
            .iter()
            .map(|b| b.name().trim_start_matches("tcab-"))
            .collect();
        let default = match (v.required, v.default) {
            (true, _) => "**required**".to_owned(),
            (false, Some(d)) => format!("`{d}`"),
            (false, None) => "unset".to_owned(),
        };
        out.push_str(&format!(
            "| `{}` | {} | {default} | {} |\n",
            v.name,
            by.join(", "),
            v.doc
        ));
    }
    out
}

/// What [`load`] decided from the command line and environment.
#[derive(Debug)]
pub enum Startup<C> {
    /// Run with this configuration.
    Run(C),
    /// Print this to stdout and exit 0 (`--help`, `--version`).
    Print(String),
    /// Print this to stderr and exit 2.
    Fail(String),
}

/// Decides what a binary does from its arguments and environment (pure, for tests).
pub fn startup<C: BinaryConfig>(
    args: &[String],
    about: &str,
    build: &BuildInfo,
    env: Result<Env, ConfigError>,
) -> Startup<C> {
    match args.first().map(String::as_str) {
        Some("--help" | "-h") => return Startup::Print(help_text(C::BINARY, about, build)),
        Some("--version" | "-V") => {
            return Startup::Print(format!("{} {build}\n", C::BINARY.name()));
        }
        Some(other) => {
            return Startup::Fail(format!(
                "{}: unexpected argument {other:?}; configuration is environment variables only (see --help)",
                C::BINARY.name()
            ));
        }
        None => {}
    }
    match env.and_then(|env| C::from_env(&env)) {
        Ok(config) => Startup::Run(config),
        Err(error) => Startup::Fail(format!(
            "{}: configuration error: {error}",
            C::BINARY.name()
        )),
    }
}

/// Reads the binary's configuration from its arguments and the process
/// environment. `--help` and `--version` (which names the version and the git
/// revision of `build`) print and exit 0; any other argument or a bad variable
/// prints one line to stderr and exits 2.
pub fn load<C: BinaryConfig>(about: &str, build: &BuildInfo) -> C {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match startup::<C>(&args, about, build, Env::from_process()) {
        Startup::Run(config) => config,
        Startup::Print(text) => {
            print!("{text}");
            std::process::exit(0)
        }
        Startup::Fail(line) => {
            eprintln!("{line}");
            std::process::exit(2)
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}
