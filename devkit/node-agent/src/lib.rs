//! # tcab-node-agent: our kubelet
//!
//! The test rig runs the upstream Kubernetes control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler) with one part
//! of its own: the kubelet. The node agent plays N nodes against any API
//! server, each with its own identity (`system:node:<name>`, group
//! `system:nodes`, so the Node authorizer and NodeRestriction judge it as a
//! kubelet), and runs in their pods the same fake programs kube-sim runs
//! (the tcab driver, the publisher, the plain program: `tcab-workloads`).
//!
//! What each node does, as the upstream kubelet (v1.36) does it:
//! - registers its Node with its status and keeps it current ([`node`]);
//! - renews a Lease in `kube-node-lease` every quarter of its duration;
//! - watches only its own pods (`fieldSelector=spec.nodeName=<name>`);
//! - takes each pod through volumes (Secret volumes), the sandbox (a pod
//!   IP), the image pull (`ErrImagePull`, then `ImagePullBackOff` with
//!   back-off), the env (`CreateContainerConfigError` for a missing Secret,
//!   [`mod@env`]), the container's run and its end, writing the status as the
//!   status manager does: a strategic merge patch of `pods/status` carrying
//!   the pod's UID ([`status`], [`smp`]);
//! - on a graceful delete: SIGTERM, SIGKILL after max(grace, 2 s), the
//!   terminal status, then DELETE with grace 0 and a UID precondition;
//! - serves `GET /containerLogs/...` over TLS on 127.0.0.1 so `pods/log`
//!   works through the API server ([`logs`], [`tls`]).
//!
//! Faults, through [`Agent`]'s methods or its loopback admin API
//! ([`admin`]): lose a node (its heartbeats, status updates, watch, log
//! server and programs stop) and bring it back (as after a reboot: its
//! running containers end exit 255, their logs kept); stop or restart its
//! kubelet with its programs running on; evict a pod for
//! node pressure; OOM-kill it; crash its container with an exit code; make
//! its program ignore SIGTERM (hang); make an image unpullable.
//!
//! ## Starting nodes against a control plane
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use tcab_node_agent::{AgentOptions, Cluster, NodeSpec, start};
//! let cluster = Cluster {
//!     api_url: "https://127.0.0.1:6443".into(),
//!     ca_pem: "/tmp/cp/certs/apiserver.crt".into(),
//! };
//! let agent = start(AgentOptions::new(
//!     cluster,
//!     vec![NodeSpec::new("node-1", "token-of-node-1")],
//! ))
//! .await?; // every Node is registered and its Lease made
//! // Fault methods answer `Err(String)` saying why the fault could not be made.
//! agent.oom_kill("tcab", "some-pod").map_err(anyhow::Error::msg)?;
//! agent.lose_node("node-1").map_err(anyhow::Error::msg)?;
//! agent.restore_node("node-1").await.map_err(anyhow::Error::msg)?;
//! agent.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Programs
//!
//! A pod's first container runs the program `tcab_workloads::Program::for_pod`
//! picks; the pod's other containers share its state (they run and stop
//! with it). A pod whose image is one of [`AgentOptions::local_images`]
//! (the dispatcher's own pod, installed from the chart) runs each of its
//! containers as a child process of a locally built binary instead, with
//! its probes and restarts ([`procs`]).

pub mod admin;
mod agent;
pub mod api;
pub mod conn;
pub mod env;
mod events;
mod host;
pub mod logs;
pub mod node;
pub mod procs;
pub mod runtime;
pub mod smp;
pub mod status;
pub mod tls;
mod worker;

pub use admin::AdminClient;
pub use agent::{Agent, start};
pub use conn::Cluster;
pub use node::Health;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// One node the agent plays.
#[derive(Clone)]
pub struct NodeSpec {
    /// The Node's name.
    pub name: String,
    /// The static bearer token of `system:node:<name>` (group
    /// `system:nodes`).
    pub token: String,
    /// `status.capacity` (cpu, memory, pods, ephemeral-storage, ...).
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable`; `None` is the capacity.
    pub allocatable: Option<BTreeMap<String, String>>,
    /// Labels beside the kubelet's own (hostname, os, arch).
    pub labels: BTreeMap<String, String>,
    /// Taints to register with (`--register-with-taints`), as JSON taints.
    pub taints: Vec<serde_json::Value>,
    /// The kubelet's HTTPS port on 127.0.0.1 (0 picks a free one, kept
    /// across a loss and return of the node when it can be).
    pub port: u16,
}

impl std::fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("capacity", &self.capacity)
            .field("allocatable", &self.allocatable)
            .field("labels", &self.labels)
            .field("taints", &self.taints)
            .field("port", &self.port)
            .finish()
    }
}

impl NodeSpec {
    /// A node of 8 CPUs, 32 GiB, 110 pods and 100 GiB of ephemeral storage.
    pub fn new(name: impl Into<String>, token: impl Into<String>) -> Self {
        let capacity = BTreeMap::from([
            ("cpu".to_string(), "8".to_string()),
            ("memory".to_string(), "32Gi".to_string()),
            ("pods".to_string(), "110".to_string()),
            ("ephemeral-storage".to_string(), "100Gi".to_string()),
            ("hugepages-1Gi".to_string(), "0".to_string()),
            ("hugepages-2Mi".to_string(), "0".to_string()),
        ]);
        NodeSpec {
            name: name.into(),
            token: token.into(),
            capacity,
            allocatable: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            port: 0,
        }
    }

    /// With a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// With a capacity entry (allocatable follows unless set).
    pub fn capacity(mut self, resource: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.capacity.insert(resource.into(), quantity.into());
        self
    }
}

/// The agent's timings. The defaults are the kubelet's.
#[derive(Debug, Clone)]
pub struct Timing {
    /// The node Lease's duration; it is renewed every quarter of it
    /// (kubelet `nodeLeaseDurationSeconds`: 40 s).
    pub lease_duration: Duration,
    /// How often the node status is recomputed
    /// (`nodeStatusUpdateFrequency`: 10 s).
    pub status_update: Duration,
    /// How often an unchanged node status is written anyway
    /// (`nodeStatusReportFrequency`: 5 min).
    pub status_report: Duration,
    /// The first image pull back-off (10 s), doubling ...
    pub image_back_off: Duration,
    /// ... up to this (300 s).
    pub image_back_off_max: Duration,
    /// How soon a pod that could not start for its config is retried (the
    /// pod worker's back-off: 10 s).
    pub retry: Duration,
    /// How long a container takes to start once everything is ready.
    pub start_delay: Duration,
    /// How long a plain Job pod without the run-seconds annotation runs.
    pub job_pod_run: Duration,
    /// How long after a container starts the eviction manager finds it
    /// over its `ephemeral-storage` limit (it looks every
    /// `evictionMonitoringPeriod`, 10 s, kubelet.go).
    pub eviction_monitoring: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(40),
            status_update: Duration::from_secs(10),
            status_report: Duration::from_secs(300),
            image_back_off: Duration::from_secs(10),
            image_back_off_max: Duration::from_secs(300),
            retry: Duration::from_secs(10),
            start_delay: Duration::from_millis(50),
            job_pod_run: Duration::from_millis(100),
            eviction_monitoring: Duration::from_secs(10),
        }
    }
}

/// How to start an agent.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The API server.
    pub cluster: Cluster,
    /// The nodes to play.
    pub nodes: Vec<NodeSpec>,
    /// Timings.
    pub timing: Timing,
    /// Where the admin API listens (loopback); `None` serves none.
    pub admin: Option<SocketAddr>,
    /// Images whose containers run as local binaries (the dispatcher's own
    /// pod, [`procs`]); every other pod runs the fake programs.
    pub local_images: Vec<LocalImage>,
}

/// An image the node "has" as a directory of locally built binaries: a
/// container of it runs `bin_dir/<command[0]>` as a child process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// The image repository (`registry/name`, without tag or digest) it
    /// stands for, e.g. the chart's `image.repository`.
    pub repository: String,
    /// The directory with the binaries (e.g. `target/debug`).
    pub bin_dir: std::path::PathBuf,
}

impl AgentOptions {
    /// Upstream's timings, the admin API on a free loopback port.
    pub fn new(cluster: Cluster, nodes: Vec<NodeSpec>) -> Self {
        AgentOptions {
            cluster,
            nodes,
            timing: Timing::default(),
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            local_images: Vec::new(),
        }
    }
}

/// An error with each of its sources, on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}
