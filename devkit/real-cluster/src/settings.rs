//! What a control plane is started with. Every field has a default fit for
//! tests; [`Settings::default`] is what `ControlPlane::start` is usually given,
//! with a few fields changed.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How to start a control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Where the binaries are. `None`: `$TCAB_CONTROL_PLANE_BIN` when set, else
    /// `target/control-plane/<version>/bin` of this workspace (what
    /// `scripts/control-plane path` prints).
    pub bin_dir: Option<PathBuf>,
    /// The work dir (keys, tokens, kubeconfigs, logs, etcd's data). `None`: a
    /// fresh temporary directory, removed on a clean stop and kept after a
    /// failed start. A given directory is created if missing and never
    /// removed; its `etcd/` is emptied at start (a fresh cluster each time).
    pub work_dir: Option<PathBuf>,
    /// Nodes that get a static token, as `system:node:<name>` in group
    /// `system:nodes`. The nodes themselves are played by a node agent that
    /// the caller starts after the control plane (see `Access`).
    pub nodes: Vec<String>,
    /// More static token identities (besides admin, controller-manager,
    /// scheduler and the nodes). Prefer ServiceAccount tokens
    /// (`Access::service_account_kubeconfig`) for anything that should run as
    /// a Role, as the dispatcher does.
    pub identities: Vec<Identity>,
    /// Namespaces to create; the start waits until each, and `default`, has
    /// its `default` ServiceAccount (Job pods cannot be created before).
    pub namespaces: Vec<String>,
    /// How long the start may take before it is abandoned (everything
    /// stopped, the logs' tails in the error).
    pub ready_timeout: Duration,
    /// After SIGTERM, how long each component has to exit before SIGKILL.
    pub stop_grace: Duration,
    /// The upstream timelines, shortened for tests.
    pub timings: Timings,
    /// The API server's watch cache (`--watch-cache`). With it (upstream's
    /// default), a watch from an old resourceVersion is served from the
    /// cache's history (about 75 s) whatever etcd compacted; a 410 on a watch
    /// then needs a resourceVersion older than that window. Without it,
    /// watches go to etcd and a compacted resourceVersion answers 410.
    pub watch_cache: bool,
    /// Extra command-line arguments per component, appended after ours (a
    /// repeated flag's last value wins for most flags). The escape hatch.
    pub extra_args: ExtraArgs,
    /// The API server's audit log (`--audit-log-path`, one JSON event per
    /// line, written before each request is answered): every write to a Pod
    /// or a Job with the object as it became, and every request of a
    /// ServiceAccount (its 403s included) without bodies. The cluster's own
    /// record of who changed what, and when (see [`crate::AUDIT_POLICY`]).
    pub audit: bool,
    /// A node agent to run as a fifth component once the control plane is
    /// ready; the start then also waits until every node of `nodes` is Ready
    /// without the not-ready taint. `None`: the caller starts one (with
    /// `Access::node_access`) and calls `Access::wait_for_nodes`.
    pub node_agent: Option<NodeAgent>,
}

/// How to run the node agent: a command line, so this crate needs nothing
/// of the agent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAgent {
    /// Its executable (e.g. `target/debug/tcab-node-agent`).
    pub program: PathBuf,
    /// Its arguments, with `{api_url}`, `{ca_file}`, `{tokens}` (the API
    /// server's token file, CSV `token,user,uid,"groups"`), `{node_access}`
    /// (a JSON `NodeAccess`) and `{work_dir}` replaced. Empty: `--api-url
    /// {api_url} --ca-file {ca_file} --tokens {tokens}` and `--node <name>`
    /// for each of `Settings::nodes` (tcab-node-agent's command line).
    pub args: Vec<String>,
    /// The start of the stdout line that says it is up (its rest is kept as
    /// `Access::node_agent_ready`); `None`: only the nodes are waited for.
    pub ready_prefix: Option<String>,
}

impl NodeAgent {
    /// `program` with the default arguments, ready at `node agent ready:`
    /// (tcab-node-agent's first line).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        NodeAgent {
            program: program.into(),
            args: Vec::new(),
            ready_prefix: Some("node agent ready:".into()),
        }
    }
}

/// A static token identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The user name (also the kubeconfig's file name stem: keep it a plain
    /// word such as `dispatcher-test`).
    pub name: String,
    /// Its groups (besides `system:authenticated`, which every token gets).
    pub groups: Vec<String>,
}

/// The upstream timings a test meets, each with a short default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    /// How often the node lifecycle controller looks at Nodes
    /// (`--node-monitor-period`; upstream 5 s).
    pub node_monitor_period: Duration,
    /// How long a Node may go without a heartbeat before it is `Unknown`
    /// (`--node-monitor-grace-period`; upstream 50 s).
    pub node_monitor_grace_period: Duration,
    /// The same for a Node that never posted Ready
    /// (`--node-startup-grace-period`; upstream 1 min).
    pub node_startup_grace_period: Duration,
    /// Nodes per second whose pods are evicted when their zone is healthy
    /// (`--node-eviction-rate`; upstream 0.1, one node every 10 s).
    pub node_eviction_rate: f32,
    /// The `tolerationSeconds` of the not-ready NoExecute toleration added to
    /// every pod (`--default-not-ready-toleration-seconds`; upstream 300).
    pub not_ready_toleration: Duration,
    /// The same for unreachable (`--default-unreachable-toleration-seconds`;
    /// upstream 300).
    pub unreachable_toleration: Duration,
    /// How often the API server compacts etcd (`--etcd-compaction-interval`;
    /// upstream 5 min). A LIST at an old resourceVersion answers 410 about
    /// one to two intervals after the writes.
    pub etcd_compaction_interval: Duration,
    /// Terminated pods beyond this many are deleted by pod GC, oldest first
    /// (`--terminated-pod-gc-threshold`; upstream 12500, kept: a low value
    /// deletes the dead pods the dispatcher reads). Pod GC's 20 s period and
    /// 40 s quarantine of a deleted node's pods are constants upstream.
    pub terminated_pod_gc_threshold: u32,
}

/// Extra arguments per component.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExtraArgs {
    pub etcd: Vec<String>,
    pub apiserver: Vec<String>,
    pub controller_manager: Vec<String>,
    pub scheduler: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bin_dir: None,
            work_dir: None,
            nodes: Vec::new(),
            identities: Vec::new(),
            namespaces: Vec::new(),
            ready_timeout: Duration::from_secs(90),
            stop_grace: Duration::from_secs(10),
            timings: Timings::default(),
            watch_cache: true,
            extra_args: ExtraArgs::default(),
            audit: true,
            node_agent: None,
        }
    }
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            node_monitor_period: Duration::from_secs(1),
            node_monitor_grace_period: Duration::from_secs(10),
            node_startup_grace_period: Duration::from_secs(10),
            node_eviction_rate: 1.0,
            not_ready_toleration: Duration::from_secs(10),
            unreachable_toleration: Duration::from_secs(10),
            etcd_compaction_interval: Duration::from_secs(30),
            terminated_pod_gc_threshold: 12500,
        }
    }
}

impl Identity {
    /// An identity with these groups.
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        Identity {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }
}

/// A duration as Go's flag package reads it (`1500ms`, `10s`).
pub(crate) fn go_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn settings_round_trip_through_json_and_accept_partial_input() {
        let s = Settings {
            nodes: vec!["node-1".into()],
            ..Settings::default()
        };
        let back: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let partial: Settings = serde_json::from_str(r#"{"nodes":["a"]}"#).unwrap();
        assert_eq!(partial.nodes, ["a"]);
        assert_eq!(partial.timings, Timings::default());
    }
}
