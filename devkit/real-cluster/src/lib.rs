//! The upstream Kubernetes control plane on loopback, for tests and people:
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
//! from Go modules by `scripts/control-plane build`, started as child
//! processes with test timings. The kubelet is not here: a node agent plays
//! the nodes, started by the caller with [`Access::node_access`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tcab_real_cluster::{ControlPlane, Settings};
//! let cp = ControlPlane::start(Settings {
//!     nodes: vec!["node-1".into()],
//!     namespaces: vec!["t1".into()],
//!     ..Settings::default()
//! })
//! .await?;
//! // Start the node agent with cp.node_access() (API URL, CA, token per node), then:
//! cp.wait_for_nodes(&["node-1".into()], std::time::Duration::from_secs(30)).await?;
//! let client = cp.admin_client().await?;
//! # let _ = client;
//! cp.stop().await;
//! # Ok(()) }
//! ```
//!
//! Tests share one control plane per test binary (and nextest run) with
//! [`shared_with`] and isolate themselves by namespace.

mod access;
mod bins;
mod control_plane;
pub mod node;
pub mod pki;
mod process;
mod settings;
mod shared;

pub use access::{
    Access, ClientError, Credential, NOT_READY_TAINT, NodeAccess, WaitError, node_not_ready,
};
pub use bins::{
    BIN_ENV, BINARIES, REQUIRED_ENV, binaries_present, built_or_skip, default_bin_dir,
    workspace_root,
};
pub use control_plane::{
    CONTROLLERS, ControlPlane, Failure, LogTail, LogTails, Logs, PauseError, Ports, PrepareError,
    RestartError, SERVICE_ACCOUNT_ISSUER, StartError, StartTimes, StopReport, TAIL_LINES,
};
pub use node::{KubeletCluster, KubeletSettings, NodeError};
pub use process::children_die_with_us;
pub use settings::{ExtraArgs, Identity, NodeAgent, Settings, Timings};

/// The API server's audit policy (with [`Settings::audit`]): every write to
/// a Pod or a Job (and their status, and evictions) with the request and the
/// object as it became, so the log is the cluster's timeline of who changed
/// what and when; every other request of a ServiceAccount without bodies
/// (the dispatcher's 403s show there); nothing else.
pub const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
    resources:
      - group: ""
        resources: ["pods", "pods/status", "pods/eviction"]
      - group: "batch"
        resources: ["jobs", "jobs/status"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"#;
pub use shared::{
    DAEMON_ENV, IDLE_EXIT_ENV, SharedControlPlane, SharedError, serve_shared, shared, shared_with,
};

/// An error and all its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
