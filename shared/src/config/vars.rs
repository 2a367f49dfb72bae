//! Every environment variable the binaries read, each declared once: its
//! name, kind (type, parser, minimum), typed default, the binaries that read
//! it and what it means. The binaries' configuration readers, their `--help`,
//! the README's configuration table and the chart's JSON description
//! (`charts/settings.json`) all come from [`SETTINGS`].
//!
//! To add a variable: declare it inside `declare!` below (which also lists
//! it in [`SETTINGS`]), read it in the configuration of each binary that
//! uses it, then regenerate the README table and the JSON description:
//! `UPDATE_GENERATED=1 cargo test -p tcab-shared --test it settings_docs`.

use super::kinds::{
    AbsolutePath, Address, DnsName, DnsNames, Flag, Format, Image, KubeObject, LabelValue,
    Quantity, Seconds, SecretText, Text, Url, Whole, WholeSeconds,
};
use super::setting::{Declared, Fallback::*, Setting};
use super::{Binary, LogFormat};
use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use Binary::{Admitter as A, LeaseKeeper as L, Reaper as R};

/// Declares each variable as a `pub const` and lists them all, in order, in
/// [`SETTINGS`], so no declaration can be left out of the readers' view,
/// the help, the README or the JSON description.
macro_rules! declare {
    ($($(#[$meta:meta])* pub const $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$meta])* pub const $name: $ty = $value;)*

        /// Every declared variable, in the order the documentation lists them.
        pub static SETTINGS: &[&dyn Declared] = &[$(&$name),*];
    };
}

/// The log filter when `RUST_LOG` is unset, blank or malformed.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// The pod securityContext of driver and publisher pods when none is set:
/// with [`RESTRICTED_CONTAINER`], what PodSecurity `restricted` asks of a
/// pod (docs/job-contract.md, "Security contexts").
pub const RESTRICTED_POD: &str =
    r#"{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}"#;

/// The container securityContext of driver and publisher containers when
/// none is set: no privilege escalation, every capability dropped.
pub const RESTRICTED_CONTAINER: &str =
    r#"{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}"#;

declare! {
    pub const BACKEND_URL: Setting<Url> = Setting {
        name: "TCAB_BACKEND_URL",
        kind: Url,
        fallback: Required,
        read_by: &[A, L, R],
        doc: "Base URL of the backend's in-cluster Service (the reaper needs it only for the orphan sweep).",
    };

    pub const BACKEND_SERVICE_TOKEN: Setting<SecretText> = Setting {
        name: "TCAB_BACKEND_SERVICE_TOKEN",
        kind: SecretText {
            what: "the backend's service token",
        },
        fallback: Required,
        read_by: &[A, L, R],
        doc: "Service token for claims, leases, lost reports and the active lists. Never logged.",
    };

    pub const DRIVER_IMAGE: Setting<Image> = Setting {
        name: "TCAB_DRIVER_IMAGE",
        kind: Image,
        fallback: Required,
        read_by: &[A],
        doc: "Image of every driver Job (pin it by digest or :<git-sha>).",
    };

    pub const PUBLISHER_IMAGE: Setting<Image> = Setting {
        name: "TCAB_PUBLISHER_IMAGE",
        kind: Image,
        fallback: Optional,
        read_by: &[A, L],
        doc: "Image of publisher Jobs. Setting it opens the publish lane (and publish lease renewal).",
    };

    pub const MAX_INFLIGHT: Setting<Whole<u32>> = Setting {
        name: "TCAB_DISPATCHER_MAX_INFLIGHT",
        kind: Whole { min: 0u32 },
        fallback: Default(8),
        read_by: &[A],
        doc: "Cap of the run lane: live driver Jobs at once. 0 pauses the lane: no claims, while renewals and reports go on.",
    };

    pub const MAX_PUBLISH_INFLIGHT: Setting<Whole<u32>> = Setting {
        name: "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT",
        kind: Whole { min: 0u32 },
        fallback: Default(8),
        read_by: &[A],
        doc: "Cap of the publish lane: live publisher Jobs at once. 0 pauses the lane: no claims, while renewals and reports go on.",
    };

    pub const POLL_INTERVAL_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(5)),
        read_by: &[A, L, R],
        doc: "Sleep after a tick that did nothing (decimals allowed); the lease-keeper sleeps it between renewal rounds, so with the backend timeout it must be at most half the lease.",
    };

    pub const MANAGED_BY: Setting<LabelValue> = Setting {
        name: "TCAB_DISPATCHER_MANAGED_BY",
        kind: LabelValue,
        fallback: Default("tcab-dispatcher"),
        read_by: &[A, L, R],
        doc: "Value of app.kubernetes.io/managed-by on every Job this dispatcher owns.",
    };

    pub const POD_NAMESPACE: Setting<DnsName> = Setting {
        name: "POD_NAMESPACE",
        kind: DnsName,
        fallback: Optional,
        read_by: &[A, L, R],
        doc: "Namespace of the dispatcher and its Jobs; unset means the kube client's default namespace.",
    };

    pub const LOG_FORMAT: Setting<Format> = Setting {
        name: "TCAB_DISPATCHER_LOG_FORMAT",
        kind: Format,
        fallback: Default(LogFormat::Text),
        read_by: &[A, L, R],
        doc: "Log format: text or json.",
    };

    /// Read by the logging setup (`telemetry::init`) rather than by the
    /// configuration readers: a malformed filter falls back, it does not stop
    /// the binary.
    pub const RUST_LOG: Setting<Text> = Setting {
        name: "RUST_LOG",
        kind: Text,
        fallback: Default(DEFAULT_LOG_FILTER),
        read_by: &[A, L, R],
        doc: "Log filter in tracing's env-filter syntax, e.g. tcab=debug,info; a malformed one logs at info and says so. Read by the logging setup, not validated at start. The Kubernetes client's own error line is off unless the filter names kube_client (the dispatcher logs every failed call itself).",
    };

    pub const VAULT_ADDR: Setting<Address> = Setting {
        name: "TCAB_DISPATCHER_VAULT_ADDR",
        kind: Address {
            example: "127.0.0.1:50051",
        },
        fallback: Default(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::LOCALHOST,
            50051,
        ))),
        read_by: &[A, L],
        doc: "Address of the lease-keeper's token vault and admission gate (gRPC).",
    };

    pub const METRICS_ADDR: Setting<Address> = Setting {
        name: "TCAB_DISPATCHER_METRICS_ADDR",
        kind: Address {
            example: "0.0.0.0:9090",
        },
        fallback: Optional,
        read_by: &[A, L, R],
        doc: "IP:port where the binary serves /metrics, /healthz, /readyz and /status, e.g. 0.0.0.0:9090 (docs/metrics.md); unset means nothing listens. An address that cannot be bound stops the start.",
    };

    pub const BACKEND_TIMEOUT_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(10)),
        read_by: &[A, L, R],
        doc: "Timeout of one backend call.",
    };

    pub const KUBE_TIMEOUT_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(15)),
        read_by: &[A, L, R],
        doc: "Timeout of one Kubernetes API call (every call but the Job watch).",
    };

    pub const WATCH_TIMEOUT_SECONDS: Setting<WholeSeconds> = Setting {
        name: "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS",
        kind: WholeSeconds,
        fallback: Default(Duration::from_secs(60)),
        read_by: &[A, L, R],
        doc: "Server-side timeout of each Job watch; a watch silent (not even a bookmark) this long is reconnected, which bounds how stale a stuck watch leaves the view.",
    };

    pub const GATE_MAX_AGE_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(60)),
        read_by: &[A],
        doc: "The admitter claims only while the lease-keeper's last successful renewal is at most this old; at most half the lease.",
    };

    pub const DRIVER_TERMINATION_GRACE_SECONDS: Setting<Whole<i64>> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS",
        kind: Whole { min: 0i64 },
        fallback: Default(120),
        read_by: &[A],
        doc: "terminationGracePeriodSeconds of driver pods: time to hand over the record and report after SIGTERM.",
    };

    pub const DRIVER_CPU_REQUEST: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_CPU_REQUEST",
        kind: Quantity,
        fallback: Default("250m"),
        read_by: &[A],
        doc: "CPU request of the driver container.",
    };

    pub const DRIVER_MEMORY_REQUEST: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST",
        kind: Quantity,
        fallback: Default("1Gi"),
        read_by: &[A],
        doc: "Memory request of the driver container (the node's reservation for the post-run toolchain).",
    };

    pub const DRIVER_CPU_LIMIT: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_CPU_LIMIT",
        kind: Quantity,
        fallback: DefaultUnlessBlank("2"),
        read_by: &[A],
        doc: "CPU limit of the driver container (over-limit CPU throttles, never kills). Empty sets none. At least the CPU request.",
    };

    pub const DRIVER_MEMORY_LIMIT: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT",
        kind: Quantity,
        fallback: Optional,
        read_by: &[A],
        doc: "Memory limit of the driver container; unset by default, because hitting it SIGKILLs the driver. At least the memory request.",
    };

    pub const PUBLISHER_CPU_REQUEST: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST",
        kind: Quantity,
        fallback: Default("100m"),
        read_by: &[A],
        doc: "CPU request of the publisher container: small, a publisher mostly waits on uploads and the backend.",
    };

    pub const PUBLISHER_MEMORY_REQUEST: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST",
        kind: Quantity,
        fallback: Default("256Mi"),
        read_by: &[A],
        doc: "Memory request of the publisher container (enough to keep it out of BestEffort without reserving a run's share).",
    };

    pub const PUBLISHER_CPU_LIMIT: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT",
        kind: Quantity,
        fallback: DefaultUnlessBlank("1"),
        read_by: &[A],
        doc: "CPU limit of the publisher container (throttles, never kills). Empty sets none. At least the CPU request.",
    };

    pub const PUBLISHER_MEMORY_LIMIT: Setting<Quantity> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT",
        kind: Quantity,
        fallback: DefaultUnlessBlank("1Gi"),
        read_by: &[A],
        doc: "Memory limit of the publisher container: a publisher past it is broken, and failing it (reported lost, retried) protects the runs on its node. Empty sets none. At least the memory request.",
    };

    pub const JOB_TTL_SECONDS: Setting<Whole<i32>> = Setting {
        name: "TCAB_DISPATCHER_JOB_TTL_SECONDS",
        kind: Whole { min: 0i32 },
        fallback: Default(3600),
        read_by: &[A],
        doc: "ttlSecondsAfterFinished of every Job: how long a finished Job and its logs stay.",
    };

    pub const DRIVER_ACTIVE_DEADLINE_SECONDS: Setting<Whole<i64>> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS",
        kind: Whole { min: 1i64 },
        fallback: Default(21600),
        read_by: &[A],
        doc: "activeDeadlineSeconds of driver Jobs: the backstop that ends a hung driver.",
    };

    pub const PUBLISHER_ACTIVE_DEADLINE_SECONDS: Setting<Whole<i64>> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_ACTIVE_DEADLINE_SECONDS",
        kind: Whole { min: 1i64 },
        fallback: Default(2700),
        read_by: &[A],
        doc: "activeDeadlineSeconds of publisher Jobs (45 minutes).",
    };

    pub const DRIVER_ARTIFACTS_URL: Setting<Url> = Setting {
        name: "TCAB_DRIVER_ARTIFACTS_URL",
        kind: Url,
        fallback: Optional,
        read_by: &[A],
        doc: "Where drivers upload the run tree; default <TCAB_BACKEND_URL>/artifacts.",
    };

    pub const DRIVER_REPOS_URL: Setting<Url> = Setting {
        name: "TCAB_DRIVER_REPOS_URL",
        kind: Url,
        fallback: Optional,
        read_by: &[A],
        doc: "Where drivers upload the bundle; default <TCAB_BACKEND_URL>/repos.",
    };

    pub const DRIVER_FINISH_DEADLINE_SECONDS: Setting<Whole<u64>> = Setting {
        name: "TCAB_DRIVER_FINISH_DEADLINE_SECONDS",
        kind: Whole { min: 1u64 },
        fallback: Default(5400),
        read_by: &[A],
        doc: "Passed to the driver: how long a run may take before the driver stops it.",
    };

    pub const DRIVER_REPORT_DEADLINE_SECONDS: Setting<Whole<u64>> = Setting {
        name: "TCAB_DRIVER_REPORT_DEADLINE_SECONDS",
        kind: Whole { min: 1u64 },
        fallback: Default(600),
        read_by: &[A],
        doc: "Passed to the driver: how long it keeps trying to land its terminal report.",
    };

    pub const DRIVER_MANAGED_BY: Setting<LabelValue> = Setting {
        name: "TCAB_DRIVER_MANAGED_BY",
        kind: LabelValue,
        fallback: Default("tcab-driver"),
        read_by: &[A, R],
        doc: "managed-by value the driver puts on its sandbox pods; the reaper selects on it.",
    };

    pub const DRIVER_SECRETS: Setting<DnsNames> = Setting {
        name: "TCAB_DRIVER_SECRETS",
        kind: DnsNames,
        fallback: Optional,
        read_by: &[A],
        doc: "Comma-separated Secret names whose keys reach the driver's env (envFrom), e.g. the harness API key.",
    };

    pub const DRIVER_SUBSCRIPTION_SECRET: Setting<DnsName> = Setting {
        name: "TCAB_DRIVER_SUBSCRIPTION_SECRET",
        kind: DnsName,
        fallback: Optional,
        read_by: &[A],
        doc: "A Secret mounted read-only (optional) into driver pods instead of put in the env.",
    };

    pub const DRIVER_SUBSCRIPTION_DIR: Setting<AbsolutePath> = Setting {
        name: "TCAB_DRIVER_SUBSCRIPTION_DIR",
        kind: AbsolutePath,
        fallback: Default("/var/run/tcab/subscription"),
        read_by: &[A],
        doc: "Where the subscription Secret is mounted.",
    };

    pub const DRIVER_FS_GROUP: Setting<Whole<i64>> = Setting {
        name: "TCAB_DRIVER_FS_GROUP",
        kind: Whole { min: 0i64 },
        fallback: Default(1000),
        read_by: &[A],
        doc: "fsGroup of driver pods, so the unprivileged driver can read the mounted Secret.",
    };

    pub const DRIVER_SERVICE_ACCOUNT: Setting<DnsName> = Setting {
        name: "TCAB_DRIVER_SERVICE_ACCOUNT",
        kind: DnsName,
        fallback: Optional,
        read_by: &[A],
        doc: "Service account of driver pods (it needs pod create in the sandbox namespace).",
    };

    pub const DRIVER_POD_SECURITY_CONTEXT: Setting<KubeObject<PodSecurityContext>> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT",
        kind: KubeObject::new("core/v1 PodSecurityContext"),
        fallback: Default(RESTRICTED_POD),
        read_by: &[A],
        doc: "securityContext of driver pods, as JSON; a value replaces the default whole, {} sets none. The default meets PodSecurity restricted with the container's (docs/job-contract.md#security-contexts). fsGroup is TCAB_DRIVER_FS_GROUP's and refused here.",
    };

    pub const DRIVER_SECURITY_CONTEXT: Setting<KubeObject<SecurityContext>> = Setting {
        name: "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
        kind: KubeObject::new("core/v1 SecurityContext"),
        fallback: Default(RESTRICTED_CONTAINER),
        read_by: &[A],
        doc: "securityContext of the driver container, as JSON; a value replaces the default whole, {} sets none.",
    };

    pub const PUBLISHER_POD_SECURITY_CONTEXT: Setting<KubeObject<PodSecurityContext>> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT",
        kind: KubeObject::new("core/v1 PodSecurityContext"),
        fallback: Default(RESTRICTED_POD),
        read_by: &[A],
        doc: "securityContext of publisher pods, as JSON; a value replaces the default whole, {} sets none. The default meets PodSecurity restricted with the container's.",
    };

    pub const PUBLISHER_SECURITY_CONTEXT: Setting<KubeObject<SecurityContext>> = Setting {
        name: "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT",
        kind: KubeObject::new("core/v1 SecurityContext"),
        fallback: Default(RESTRICTED_CONTAINER),
        read_by: &[A],
        doc: "securityContext of the publisher container, as JSON; a value replaces the default whole, {} sets none.",
    };

    pub const LEASE_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_LEASE_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(120)),
        read_by: &[A, L],
        doc: "Lease length the backend grants; a vaulted token with no Job after this long is dropped. The gate age, the watch timeout, and the poll interval plus the backend timeout must each be at most half of it.",
    };

    pub const START_GRACE_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_START_GRACE_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(300)),
        read_by: &[L],
        doc: "A driver or publisher pod waiting this long on an image pull or a container config error, or a Job that has had no pod this long after its creation and whose pods the API server refuses (a FailedCreate Event: PodSecurity, a quota, a LimitRange, an admission policy, a missing ServiceAccount), is judged never to start: a run's death is reported with the cause, then its Job deleted; a publisher's Job is deleted, then its publish reported lost with the cause.",
    };

    pub const UNSCHEDULABLE_GRACE_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(1800)),
        read_by: &[L],
        doc: "A driver or publisher pod unschedulable this long is judged never to start.",
    };

    pub const TERMINATING_MARGIN_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(60)),
        read_by: &[L, R],
        doc: "How long past its pod's termination grace a failing Job may stay unfinished (a lost node) before it is judged dead: lease no longer renewed, death reported, sandboxes reaped.",
    };

    pub const LOG_TAIL_LINES: Setting<Whole<i64>> = Setting {
        name: "TCAB_DISPATCHER_LOG_TAIL_LINES",
        kind: Whole { min: 1i64 },
        fallback: Default(50),
        read_by: &[L],
        doc: "How many of a dead pod's last log lines go into its death report.",
    };

    pub const VAULT_ALLOW_NON_LOOPBACK: Setting<Flag> = Setting {
        name: "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK",
        kind: Flag,
        fallback: Default(false),
        read_by: &[L],
        doc: "Allow the vault to listen on a non-loopback address (it holds per-job tokens).",
    };

    pub const K8S_NAMESPACE: Setting<DnsName> = Setting {
        name: "TCAB_K8S_NAMESPACE",
        kind: DnsName,
        fallback: Optional,
        read_by: &[A, R],
        doc: "Sandbox namespace (passed to drivers); the reaper cleans there. Unset means the dispatcher's own.",
    };

    pub const ORPHAN_SWEEP: Setting<Flag> = Setting {
        name: "TCAB_DISPATCHER_ORPHAN_SWEEP",
        kind: Flag,
        fallback: Default(true),
        read_by: &[R],
        doc: "Also delete sandbox pods whose job id matches no owned Job (or only driver Jobs that succeeded) and that the backend does not list as driven (after the grace).",
    };

    pub const ORPHAN_SWEEP_INTERVAL_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(300)),
        read_by: &[R],
        doc: "How often the orphan sweep lists the sandbox pods (other ticks list them only when a failed driver awaits its reap).",
    };

    pub const ORPHAN_GRACE_SECONDS: Setting<Seconds> = Setting {
        name: "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS",
        kind: Seconds,
        fallback: Default(Duration::from_secs(600)),
        read_by: &[R],
        doc: "Minimum age of a sandbox pod before the orphan sweep may delete it.",
    };
}

/// Prefixes of the variables the admitter passes through, all of them and
/// unchanged, to every driver pod (sandbox-pod settings, run images).
pub const PASSTHROUGH_PREFIXES: [&str; 2] = ["TCAB_K8S_", "TCAB_CONTAINER_"];
