//! Real nodes: the upstream kubelet with containerd and runc, beside the
//! control plane, inside a network the rig makes ([`network`]).
//!
//! [`KubeletCluster::start`] makes the node network, starts the control
//! plane with the API server's egress going through the rig's proxy, then
//! per node containerd (images imported from OCI archives: no registry
//! answers here) and the kubelet, and one kube-proxy for the Service
//! network, and waits until every node is Ready. The `kubernetes` Service
//! points at the gateway, where the API server's port is forwarded, so a
//! pod reaches the API as pods do: its Service, in-cluster config and
//! mounted token.
//!
//! It needs root, cgroup v1's memory hierarchy, and Debian's containerd,
//! runc, containernetworking-plugins and iptables: [`missing`] names what
//! is not there, for a SKIP line.

pub mod containerd;
pub mod kubelet;
pub mod network;

use crate::process::Component;
use crate::{ControlPlane, Identity, Settings, StartError};
use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::PostParams;
use network::{GATEWAY_IP, NodeNetwork};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The user kube-proxy runs as (bound to `system:node-proxier` by the API
/// server's default RBAC).
pub const KUBE_PROXY_USER: &str = "system:kube-proxy";
/// Where the v1 cgroup hierarchies are mounted.
const CGROUP_V1: &str = "/sys/fs/cgroup";

/// What the real nodes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletSettings {
    /// Node names; node `i` gets `network::node_ip(i)`.
    pub nodes: Vec<String>,
    /// OCI image archives imported into every node's containerd; one must
    /// be [`containerd::PAUSE_IMAGE`].
    pub images: Vec<PathBuf>,
    /// The node Lease's duration (renewed at a quarter of it).
    pub lease_seconds: u32,
}

impl KubeletSettings {
    pub fn new(nodes: Vec<String>, images: Vec<PathBuf>) -> Self {
        KubeletSettings {
            nodes,
            images,
            lease_seconds: 4,
        }
    }
}

/// What this machine lacks for real nodes (empty: nothing).
pub fn missing() -> Vec<String> {
    let mut out = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        out.push("root (containerd and runc need it)".to_owned());
    }
    for cmd in [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "iptables",
        "ip",
        "nsenter",
        "unshare",
        "sysctl",
    ] {
        if find_in_path(cmd).is_none() {
            out.push(format!("`{cmd}`"));
        }
    }
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        let p = Path::new(containerd::CNI_BIN_DIR).join(plugin);
        if !p.is_file() {
            out.push(format!("the CNI plugin {}", p.display()));
        }
    }
    if !Path::new(CGROUP_V1).join("memory").is_dir() {
        out.push(format!(
            "cgroup v1's memory hierarchy at {CGROUP_V1}/memory"
        ));
    }
    out
}

/// With this set to `1`, a machine that cannot run real nodes fails the
/// tests that need them instead of skipping them (scripts/test sets it once
/// it has installed what they need).
pub const REQUIRED_ENV: &str = "TCAB_REAL_NODES_REQUIRED";

/// For a test that needs real nodes: the control plane's bin dir, or
/// `None` after one `SKIP: ...` line naming what is missing (the test then
/// returns and passes); with [`REQUIRED_ENV`]`=1` it panics instead.
pub fn ready_or_skip() -> Option<PathBuf> {
    let why = match crate::binaries_present() {
        Ok(dir) => {
            let mut lacking = missing();
            lacking.extend(
                ["kubelet", "kube-proxy"]
                    .iter()
                    .filter(|b| !dir.join(b).is_file())
                    .map(|b| format!("{} (scripts/control-plane build)", dir.join(b).display())),
            );
            if lacking.is_empty() {
                return Some(dir);
            }
            format!("real nodes cannot run here: missing {}", lacking.join(", "))
        }
        Err(why) => why,
    };
    if std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1") {
        panic!("{why} ({REQUIRED_ENV}=1)");
    }
    println!("SKIP: {why}");
    None
}

fn find_in_path(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// Why real nodes did not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("this machine cannot run real nodes: missing {}", .0.join(", "))]
    Missing(Vec<String>),
    #[error("the control plane did not start")]
    ControlPlane(#[source] Box<StartError>),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Api(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// One real node's processes and places.
struct RealNode {
    name: String,
    index: usize,
    dir: PathBuf,
    containerd: Option<Component>,
    kubelet: Option<Component>,
    cgroup_root: String,
}

/// How long the start took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeTimes {
    /// The node network's setup (namespaces, gateway, egress proxy).
    pub network: Duration,
    /// The control plane's start.
    pub control_plane: Duration,
    /// Every node's containerd started and the images imported (summed).
    pub runtimes: Duration,
    /// From the control plane being ready to every node Ready.
    pub nodes_ready: Duration,
}

/// A control plane with real nodes.
pub struct KubeletCluster {
    cp: Option<ControlPlane>,
    network: NodeNetwork,
    nodes: Vec<RealNode>,
    proxy: Option<Component>,
    dir: Option<tempfile::TempDir>,
    settings: KubeletSettings,
    api_addr: std::net::SocketAddr,
    bin_dir: PathBuf,
    times: NodeTimes,
}

impl std::ops::Deref for KubeletCluster {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        self.cp.as_ref().expect("the control plane runs until stop")
    }
}

/// The control plane's own calls that change it (restarting the API server,
/// pausing the controller-manager) leave the nodes as they are: the API
/// server comes back on the same port, which the gateway forwards.
impl std::ops::DerefMut for KubeletCluster {
    fn deref_mut(&mut self) -> &mut ControlPlane {
        self.cp.as_mut().expect("the control plane runs until stop")
    }
}

impl KubeletCluster {
    /// Starts the node network, the control plane (with `settings`, plus
    /// the nodes' identities and the egress proxy) and the nodes.
    pub async fn start(
        mut settings: Settings,
        kubelets: KubeletSettings,
    ) -> Result<KubeletCluster, NodeError> {
        let bin_dir = match &settings.bin_dir {
            Some(d) => d.clone(),
            None => crate::bins::default_bin_dir()
                .map_err(|e| NodeError::Missing(vec![e.to_string()]))?,
        };
        let mut lacking = missing();
        for b in ["kubelet", "kube-proxy"] {
            if !bin_dir.join(b).is_file() {
                lacking.push(format!(
                    "{} (scripts/control-plane build makes it)",
                    bin_dir.join(b).display()
                ));
            }
        }
        if !lacking.is_empty() {
            return Err(NodeError::Missing(lacking));
        }
        sweep_stale();
        let begun = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("tcab-nodes-")
            .tempdir()
            .map_err(io_err("making the nodes' directory"))?;
        let network = NodeNetwork::start(&dir.path().join("network"))
            .await
            .map_err(io_err("making the node network"))?;
        std::fs::write(dir.path().join(HOLDER_FILE), network.pid().to_string())
            .map_err(io_err("writing the holder's PID"))?;
        let network_time = begun.elapsed();
        let egress = dir.path().join("egress-selector.yaml");
        std::fs::write(&egress, network::egress_config(network.egress_socket()))
            .map_err(io_err("writing the egress selector configuration"))?;
        settings.extra_args.apiserver.extend([
            format!("--egress-selector-config-file={}", egress.display()),
            // Node names do not resolve here: dial the node's address.
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
        ]);
        for n in &kubelets.nodes {
            if !settings.nodes.contains(n) {
                settings.nodes.push(n.clone());
            }
        }
        settings
            .identities
            .push(Identity::new(KUBE_PROXY_USER, &[]));
        let started = Instant::now();
        let cp = ControlPlane::start(settings)
            .await
            .map_err(|e| NodeError::ControlPlane(Box::new(e)))?;
        let control_plane = started.elapsed();
        let mut cluster = KubeletCluster {
            api_addr: std::net::SocketAddr::from((GATEWAY_IP, cp.ports().apiserver)),
            bin_dir,
            cp: Some(cp),
            network,
            nodes: Vec::new(),
            proxy: None,
            dir: Some(dir),
            settings: kubelets.clone(),
            times: NodeTimes {
                network: network_time,
                control_plane,
                runtimes: Duration::ZERO,
                nodes_ready: Duration::ZERO,
            },
        };
        let api_port = cluster.ports().apiserver;
        cluster.network.forward_host_port(api_port).map_err(io_err(
            "forwarding the API server's port into the node network",
        ))?;
        cluster.point_kubernetes_service().await?;
        for (index, name) in kubelets.nodes.iter().enumerate() {
            let node_dir = cluster.base().join("nodes").join(name);
            let holder = cluster.network.pid();
            cluster.nodes.push(RealNode {
                name: name.clone(),
                index,
                dir: node_dir,
                containerd: None,
                kubelet: None,
                cgroup_root: format!("tcab-{holder}-{name}"),
            });
            // The node's address, on the namespace's loopback (the pods reach
            // it through their bridge's gateway, the API server through the
            // egress proxy).
            network::run_inside(
                holder,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{}/32", network::node_ip(index)),
                    "dev",
                    "lo",
                ],
            )
            .map_err(io_err(format!("giving node {name} its address")))?;
            let runtime = Instant::now();
            cluster.start_runtime(index).await?;
            cluster.times.runtimes += runtime.elapsed();
            cluster.start_kubelet(index)?;
        }
        cluster.start_proxy()?;
        cluster
            .wait_for_nodes(&kubelets.nodes, Duration::from_secs(90))
            .await
            .map_err(|e| {
                NodeError::Api(format!(
                    "waiting for the real nodes: {e}\n{}",
                    cluster.log_tails()
                ))
            })?;
        cluster.times.nodes_ready = started.elapsed() - control_plane;
        Ok(cluster)
    }

    /// The last lines of every node's logs, for a failure's message.
    fn log_tails(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            for log in ["containerd.log", "kubelet.log"] {
                let path = n.dir.join(log);
                out.push_str(&format!(
                    "--- {} {}:\n{}\n",
                    n.name,
                    path.display(),
                    crate::process::tail(&path, 15)
                ));
            }
        }
        out
    }

    fn base(&self) -> &Path {
        self.dir.as_ref().expect("until stop").path()
    }

    /// How long the start took.
    pub fn node_times(&self) -> NodeTimes {
        self.times
    }

    /// The node network (to forward a host port to the pods, say).
    pub fn network(&mut self) -> &mut NodeNetwork {
        &mut self.network
    }

    /// Where a node's logs are: `containerd.log`, `kubelet.log`.
    pub fn node_dir(&self, node: &str) -> Option<&Path> {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.dir.as_path())
    }

    async fn point_kubernetes_service(&self) -> Result<(), NodeError> {
        let client = self
            .admin_client()
            .await
            .map_err(|e| NodeError::Api(e.to_string()))?;
        let port = self.api_addr.port();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes",
                           "endpointslice.kubernetes.io/managed-by": "tcab-real-cluster"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [GATEWAY_IP.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]
        }))
        .map_err(|e| NodeError::Api(e.to_string()))?;
        let endpoints: Endpoints = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": GATEWAY_IP.to_string()}],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
        }))
        .map_err(|e| NodeError::Api(e.to_string()))?;
        let pp = PostParams::default();
        Api::<EndpointSlice>::namespaced(client.clone(), "default")
            .create(&pp, &slice)
            .await
            .map_err(|e| NodeError::Api(format!("creating the kubernetes EndpointSlice: {e}")))?;
        Api::<Endpoints>::namespaced(client, "default")
            .create(&pp, &endpoints)
            .await
            .map_err(|e| NodeError::Api(format!("creating the kubernetes Endpoints: {e}")))?;
        Ok(())
    }

    fn inside(&self, program: &str, args: &[String]) -> Vec<String> {
        let mut all = vec![
            "--target".to_owned(),
            self.network.pid().to_string(),
            "--net".into(),
            "--mount".into(),
            "--".into(),
            program.to_owned(),
        ];
        all.extend(args.iter().cloned());
        all
    }

    /// Starts a node's containerd and imports the images.
    async fn start_runtime(&mut self, index: usize) -> Result<(), NodeError> {
        let node = &self.nodes[index];
        let paths = containerd::Paths::in_dir(&node.dir.join("containerd"));
        std::fs::create_dir_all(&paths.cni_conf_dir)
            .map_err(io_err(format!("creating {}", paths.cni_conf_dir.display())))?;
        std::fs::write(&paths.config, containerd::config(&paths))
            .map_err(io_err("writing containerd's configuration"))?;
        let conflist = containerd::cni_conflist(
            &format!("tcabbr{}", node.index),
            network::pod_subnet(node.index),
            &node.dir.join("ipam"),
        );
        std::fs::write(paths.cni_conf_dir.join("10-tcab.conflist"), conflist)
            .map_err(io_err("writing the CNI configuration"))?;
        make_cgroup_root(&node.cgroup_root).map_err(io_err("making the node's cgroups"))?;
        // containerd goes into the node's memory cgroup before it execs, so
        // the shims it starts (which outlive it by design) are found there by
        // a stop, or by the next start's sweep after a killed run.
        let runtime_cgroup = Path::new(CGROUP_V1)
            .join("memory")
            .join(&node.cgroup_root)
            .join("runtime");
        std::fs::create_dir_all(&runtime_cgroup)
            .map_err(io_err("making the node runtime's cgroup"))?;
        let mut args = vec![
            "-c".to_owned(),
            format!(
                "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
                runtime_cgroup.display()
            ),
            "nsenter".to_owned(),
        ];
        args.extend(self.inside(
            "containerd",
            &["--config".into(), paths.config.display().to_string()],
        ));
        let log = node.dir.join("containerd.log");
        let c = Component::spawn("containerd", Path::new("sh"), &args, &log)
            .map_err(io_err("starting containerd"))?;
        self.nodes[index].containerd = Some(c);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !paths.socket.exists() {
            if Instant::now() > deadline {
                return Err(NodeError::Io {
                    what: format!(
                        "containerd made no socket within 20 s (see {})",
                        log.display()
                    ),
                    source: io::ErrorKind::TimedOut.into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for archive in &self.settings.images {
            let (socket, archive) = (paths.socket.clone(), archive.clone());
            tokio::task::spawn_blocking(move || containerd::import(&socket, &archive))
                .await
                .map_err(|e| NodeError::Api(e.to_string()))?
                .map_err(io_err("importing an image"))?;
        }
        Ok(())
    }

    fn start_kubelet(&mut self, index: usize) -> Result<(), NodeError> {
        let node = &self.nodes[index];
        let name = node.name.clone();
        let kdir = node.dir.join("kubelet");
        std::fs::create_dir_all(&kdir).map_err(io_err("making the kubelet's directory"))?;
        std::fs::create_dir_all(node.dir.join("pod-logs"))
            .map_err(io_err("making the node's pod log directory"))?;
        let socket = containerd::Paths::in_dir(&node.dir.join("containerd")).socket;
        let config = kubelet::config(&kubelet::Config {
            node_ip: network::node_ip(node.index),
            containerd_socket: &socket,
            cgroup_root: &format!("/{}", node.cgroup_root),
            lease_seconds: self.settings.lease_seconds,
            pod_logs_dir: &node.dir.join("pod-logs"),
        });
        let config_file = node.dir.join("kubelet.yaml");
        std::fs::write(&config_file, config).map_err(io_err("writing the kubelet's config"))?;
        let token = self
            .nodes_tokens(&name)
            .ok_or_else(|| NodeError::Api(format!("no token for node {name}")))?;
        let kubeconfig = node.dir.join("kubelet.kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubelet::kubeconfig(self.api_addr, &self.ca_cert, &token),
        )
        .map_err(io_err("writing the kubelet's kubeconfig"))?;
        let args = self.inside(
            &self.bin("kubelet"),
            &[
                format!("--config={}", config_file.display()),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--root-dir={}", kdir.display()),
                format!("--cert-dir={}", kdir.join("pki").display()),
                format!("--hostname-override={name}"),
                format!("--node-ip={}", network::node_ip(node.index)),
                "--v=2".into(),
            ],
        );
        let log = node.dir.join("kubelet.log");
        let k = Component::spawn("kubelet", Path::new("nsenter"), &args, &log)
            .map_err(io_err("starting the kubelet"))?;
        self.nodes[index].kubelet = Some(k);
        Ok(())
    }

    fn start_proxy(&mut self) -> Result<(), NodeError> {
        let Some(first) = self.nodes.first() else {
            return Ok(());
        };
        let token = self
            .identities
            .get(KUBE_PROXY_USER)
            .map(|c| c.token.clone())
            .ok_or_else(|| NodeError::Api(format!("no token for {KUBE_PROXY_USER}")))?;
        let dir = self.base().join("kube-proxy");
        std::fs::create_dir_all(&dir).map_err(io_err("making kube-proxy's directory"))?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubelet::kubeconfig(self.api_addr, &self.ca_cert, &token),
        )
        .map_err(io_err("writing kube-proxy's kubeconfig"))?;
        let config = dir.join("config.yaml");
        std::fs::write(&config, kubelet::proxy_config(&kubeconfig, &first.name))
            .map_err(io_err("writing kube-proxy's config"))?;
        let args = self.inside(
            &self.bin("kube-proxy"),
            &[format!("--config={}", config.display()), "--v=1".into()],
        );
        let p = Component::spawn("kube-proxy", Path::new("nsenter"), &args, &dir.join("log"))
            .map_err(io_err("starting kube-proxy"))?;
        self.proxy = Some(p);
        Ok(())
    }

    fn nodes_tokens(&self, name: &str) -> Option<String> {
        self.access().nodes.get(name).map(|c| c.token.clone())
    }

    fn bin(&self, name: &str) -> String {
        self.bin_dir.join(name).display().to_string()
    }

    fn index(&self, node: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == node)
    }

    /// Stops a node's kubelet (SIGTERM, then SIGKILL): its containers go on
    /// and its Lease stops being renewed, so the node is lost.
    pub async fn stop_kubelet(&mut self, node: &str) -> Result<(), NodeError> {
        let i = self
            .index(node)
            .ok_or_else(|| NodeError::Api(format!("no real node {node}")))?;
        if let Some(mut k) = self.nodes[i].kubelet.take() {
            k.stop(Duration::from_secs(5)).await;
        }
        Ok(())
    }

    /// Starts a node's kubelet again (after [`Self::stop_kubelet`]).
    pub fn start_kubelet_again(&mut self, node: &str) -> Result<(), NodeError> {
        let i = self
            .index(node)
            .ok_or_else(|| NodeError::Api(format!("no real node {node}")))?;
        if self.nodes[i].kubelet.is_none() {
            self.start_kubelet(i)?;
        }
        Ok(())
    }

    /// A reboot: the kubelet and containerd stop, every container of the
    /// node is killed, then both start again.
    pub async fn reboot(&mut self, node: &str) -> Result<(), NodeError> {
        let i = self
            .index(node)
            .ok_or_else(|| NodeError::Api(format!("no real node {node}")))?;
        self.halt(i).await;
        self.start_runtime(i).await?;
        self.start_kubelet(i)
    }

    /// Stops a node's kubelet, its containers, their shims and containerd.
    async fn halt(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if let Some(mut k) = node.kubelet.take() {
            k.stop(Duration::from_secs(5)).await;
        }
        kill_cgroup_tree(&node.cgroup_root);
        let socket = containerd::Paths::in_dir(&node.dir.join("containerd")).socket;
        kill_shims(&socket);
        if let Some(mut c) = node.containerd.take() {
            c.stop(Duration::from_secs(5)).await;
        }
        let _ = std::fs::remove_file(&socket);
    }

    /// Stops everything: nodes, kube-proxy, the control plane, the network;
    /// removes the cgroups and the directory.
    pub async fn stop(mut self) {
        for i in 0..self.nodes.len() {
            self.halt(i).await;
            remove_cgroup_tree(&self.nodes[i].cgroup_root).await;
        }
        if let Some(mut p) = self.proxy.take() {
            p.stop(Duration::from_secs(2)).await;
        }
        if let Some(cp) = self.cp.take() {
            cp.stop().await;
        }
        self.network.stop().await;
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

impl Drop for KubeletCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(k) = node.kubelet.as_mut() {
                k.kill_now();
            }
            kill_cgroup_tree(&node.cgroup_root);
            kill_shims(&containerd::Paths::in_dir(&node.dir.join("containerd")).socket);
        }
    }
}

/// The v1 hierarchies a node's cgroup root is made in (the kubelet checks
/// that it exists in each it uses).
fn hierarchies() -> Vec<PathBuf> {
    std::fs::read_dir(CGROUP_V1)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "unified"))
        .filter(|p| !p.is_symlink())
        .collect()
}

fn make_cgroup_root(root: &str) -> io::Result<()> {
    for h in hierarchies() {
        std::fs::create_dir_all(h.join(root))?;
    }
    Ok(())
}

/// Every process under a cgroup root (memory hierarchy: every process is
/// in exactly one memory cgroup).
fn cgroup_pids(root: &str) -> Vec<i32> {
    fn walk(dir: &Path, out: &mut Vec<i32>) {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(CGROUP_V1).join("memory").join(root), &mut out);
    out
}

/// The processes of a container on real nodes, by its containerd ID: the
/// `cgroup.procs` of the memory cgroup the kubelet (cgroupfs driver) names
/// after the container under a node's cgroup root. Empty when no node has it.
pub fn container_pids(container_id: &str) -> Vec<i32> {
    fn find(dir: &Path, id: &str, depth: usize) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == id {
                return Some(e.path());
            }
            if depth > 0
                && let Some(found) = find(&e.path(), id, depth - 1)
            {
                return Some(found);
            }
        }
        None
    }
    let memory = Path::new(CGROUP_V1).join("memory");
    let roots = std::fs::read_dir(&memory).into_iter().flatten().flatten();
    for root in roots.filter(|e| e.file_name().to_string_lossy().starts_with("tcab-")) {
        // <root>/kubepods/<qos>/pod<uid>/<container>
        if let Some(dir) = find(&root.path(), container_id, 4) {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            return procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
        }
    }
    Vec::new()
}

fn kill_cgroup_tree(root: &str) {
    for pid in cgroup_pids(root) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Kills the containerd shims of the containerd at `socket` (they outlive
/// containerd by design, and would keep the node's mounts and containers).
fn kill_shims(socket: &Path) {
    let want = socket.display().to_string();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_shim = args
            .first()
            .is_some_and(|a| a.ends_with("containerd-shim-runc-v2"));
        if is_shim && args.windows(2).any(|w| w[0] == "-address" && w[1] == want) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Removes a node's cgroups, deepest first, once their processes are gone.
async fn remove_cgroup_tree(root: &str) {
    fn dirs(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs(&e.path(), out);
            }
        }
        out.push(dir.to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        kill_cgroup_tree(root);
        let mut left = 0;
        for h in hierarchies() {
            let top = h.join(root);
            if !top.exists() {
                continue;
            }
            let mut all = Vec::new();
            dirs(&top, &mut all);
            for d in all {
                if std::fs::remove_dir(&d).is_err() {
                    left += 1;
                }
            }
        }
        if left == 0 || Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The file in a cluster's directory naming its holder's PID (for the sweep).
const HOLDER_FILE: &str = "holder.pid";

/// Cleans up after runs that were killed (their holder, whose PID the
/// cgroup names and the directory's [`HOLDER_FILE`] carry, is gone): kills
/// what is left in their cgroups (containers, and the containerd shims,
/// which run in the runtime's cgroup), removes the cgroups, then the
/// directory (images and all).
fn sweep_stale() {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let memory = Path::new(CGROUP_V1).join("memory");
    let mut roots = Vec::new();
    for e in std::fs::read_dir(&memory).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("tcab-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !alive(p)) {
            kill_cgroup_tree(&name);
            roots.push(name);
        }
    }
    let mut dirs = Vec::new();
    for e in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if !e.file_name().to_string_lossy().starts_with("tcab-nodes-") {
            continue;
        }
        let holder = std::fs::read_to_string(e.path().join(HOLDER_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if holder.is_some_and(|p| !alive(p)) {
            dirs.push(e.path());
        }
    }
    if roots.is_empty() && dirs.is_empty() {
        return;
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            for root in roots {
                remove_cgroup_tree(&root).await;
            }
            for dir in dirs {
                let _ = std::fs::remove_dir_all(&dir);
            }
        });
    }
}
