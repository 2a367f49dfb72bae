//! The dev stack on the real control plane: the upstream control plane
//! (`tcab-real-cluster`, with the node agent playing [`NODES`]), the
//! dispatcher's namespaces, its ServiceAccount bound to the chart's golden
//! Role, the drivers' ServiceAccount with what their sandboxes need, and the
//! fault proxy (`tcab-api-proxy`) the dispatcher reaches the API through.
//!
//! Tests share one control plane per test binary ([`Hold::Shared`],
//! `tcab_real_cluster::shared_with`; each stack in namespaces of its own
//! with random names); `tcab-devstack --cluster real` starts one of its own
//! ([`Hold::Own`]). Node faults touch the two shared nodes: each stack
//! starts by making them healthy again ([`heal_nodes`]) and by resuming a
//! controller-manager a killed test left paused, and the real tests run one
//! at a time (the nextest profile gives each the whole machine).
//!
//! With real kubelets ([`crate::NodeKind::Kubelet`], [`Hold::Kubelet`]) the
//! stack starts a `tcab_real_cluster::KubeletCluster` of its own: the
//! upstream kubelet on containerd and runc for each of [`NODES`], in the
//! rig's node network, running the images [`node_images`] writes (the
//! dispatcher's, as the Dockerfile builds it, and the rig's workloads).
//! The dispatcher then runs only as the chart's pod ([`crate::Stack`]
//! refuses its processes): in the node network it reaches the API server
//! through the `kubernetes` Service and the backend through the gateway.

use crate::cluster::RealAdmin;
use crate::console::Cluster;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tcab_api_proxy::{ProxyHandle, ProxyOptions, RestartHook, UpstreamOptions};
use tcab_real_cluster::{
    Access, ControlPlane, KubeletCluster, KubeletSettings, NodeAgent, Settings,
};

/// The nodes the node agent plays (8 CPUs, 32 GiB, 110 pods each).
pub const NODES: [&str; 2] = ["node-1", "node-2"];
/// The dispatcher's ServiceAccount (the chart's name for it).
pub const DISPATCHER_SA: &str = "tcab-dispatcher";
/// The drivers' ServiceAccount (`TCAB_DRIVER_SERVICE_ACCOUNT`): it creates
/// and deletes the sandbox pods.
pub const DRIVER_SA: &str = "tcab-driver";
/// The proxy's name for the dispatcher's token in its counters.
pub const DISPATCHER_IDENTITY: &str = "dispatcher";
/// The images the stack's pods use (made pullable again by a new stack).
pub const IMAGES: [&str; 3] = ["tcab/driver:dev", "tcab/publisher:dev", "tcab-sandbox:sim"];
/// The `image.repository` the rig installs the chart with: the node agent runs pods of
/// this image as the binaries in the stack's bin dir.
pub const CHART_IMAGE: &str = "tcab-dispatcher";
/// The node agent's image pull back-off on the rig: 1 s doubling to 4 s
/// (the kubelet's 10 s to 300 s would make a test that lets an image be
/// pulled again wait minutes).
pub const IMAGE_BACK_OFF: (u32, u32) = (1, 4);
/// The tag of the dispatcher image the stack builds for real kubelets
/// (`tcab-dispatcher:dev`, from the stack's bin dir).
pub const DISPATCHER_TAG: &str = "dev";
/// The node agent's Lease (renewed every quarter of it) against the
/// launcher's 10 s node-monitor grace.
pub const NODE_LEASE_SECONDS: u32 = 4;

/// The control plane's settings for the dev stack: two nodes played by the
/// node agent (`tcab-node-agent` in `bins`), the launcher's short timings,
/// the audit log on. Every stack of a test binary gives the same, so they
/// share one control plane. `node_pods` raises each node's pod capacity
/// (the agent's default is 110), for a bench with many live Jobs.
pub fn settings(bins: &Path, node_pods: Option<u32>) -> Settings {
    let mut args: Vec<String> = [
        "--api-url",
        "{api_url}",
        "--ca-file",
        "{ca_file}",
        "--tokens",
        "{tokens}",
    ]
    .map(String::from)
    .to_vec();
    for node in NODES {
        let spec = match node_pods {
            Some(pods) => format!("{node},pods={pods}"),
            None => node.to_owned(),
        };
        args.extend(["--node".to_owned(), spec]);
    }
    args.extend([
        "--lease-seconds".to_owned(),
        NODE_LEASE_SECONDS.to_string(),
        "--status-update-seconds".to_owned(),
        "2".to_owned(),
        "--image-back-off-seconds".to_owned(),
        IMAGE_BACK_OFF.0.to_string(),
        "--image-back-off-max-seconds".to_owned(),
        IMAGE_BACK_OFF.1.to_string(),
        // The chart's image runs the locally built binaries.
        "--local-image".to_owned(),
        format!("{CHART_IMAGE}={}", bins.display()),
    ]);
    Settings {
        nodes: NODES.map(String::from).to_vec(),
        node_agent: Some(NodeAgent {
            args,
            ..NodeAgent::new(bins.join("tcab-node-agent"))
        }),
        audit: true,
        ..Settings::default()
    }
}

/// The control plane's settings for real kubelets: the launcher's short
/// timings and the audit log; the nodes are the [`KubeletSettings`]'.
pub fn kubelet_settings() -> Settings {
    Settings {
        audit: true,
        ..Settings::default()
    }
}

/// What this machine lacks for real kubelets (empty: nothing):
/// `tcab_real_cluster::node::missing` and the kubelet and kube-proxy
/// binaries beside the control plane's.
pub fn kubelet_nodes_missing() -> Vec<String> {
    let mut lacking = tcab_real_cluster::node::missing();
    match tcab_real_cluster::binaries_present() {
        Ok(dir) => lacking.extend(
            ["kubelet", "kube-proxy"]
                .iter()
                .filter(|b| !dir.join(b).is_file())
                .map(|b| format!("{} (scripts/control-plane build)", dir.join(b).display())),
        ),
        Err(why) => lacking.push(why),
    }
    lacking
}

/// The OCI archives real kubelets import: the rig's workload images
/// (`tcab/driver:dev`, `tcab/publisher:dev`, `tcab-sandbox:sim`, pause, ...)
/// from `bins/tcab-workload`, and `tcab-dispatcher:`[`DISPATCHER_TAG`] made
/// from the three binaries of `bins` as the Dockerfile's runtime stage makes
/// it. Written into `bins/rig-images` and kept while the binaries are the
/// same (a key beside each archive: the workloads' digest, the dispatcher
/// binaries' sizes and modification times).
pub fn node_images(bins: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = bins.join("rig-images");
    let mut archives = tcab_oci_image::rig::workload_archives(&bins.join("tcab-workload"), &dir)?;
    let mut key = String::new();
    for b in tcab_oci_image::DISPATCHER_BINARIES {
        let path = bins.join(b);
        // Size and modification time: cargo writes a binary anew when it
        // rebuilds it, and hashing three debug binaries in a debug build
        // of this crate takes seconds.
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .unwrap_or_default();
        key.push_str(&format!("{b} {} {}\n", meta.len(), modified.as_nanos()));
    }
    let archive = dir.join(format!("tcab-dispatcher_{DISPATCHER_TAG}.tar"));
    let key_file = archive.with_extension("key");
    let current = archive.is_file() && std::fs::read_to_string(&key_file).is_ok_and(|k| k == key);
    if !current {
        let image = tcab_oci_image::dispatcher_image(
            bins,
            DISPATCHER_TAG,
            env!("CARGO_PKG_VERSION"),
            "devstack",
        )?;
        tcab_oci_image::rig::write_atomically(&image, &archive)?;
        std::fs::write(&key_file, &key)
            .with_context(|| format!("writing {}", key_file.display()))?;
    }
    archives.push(archive);
    Ok(archives)
}

/// Makes sure the real control plane is built: when its binaries are
/// missing, says so and runs `scripts/control-plane build` (its progress
/// shown; Go from PATH, else `/usr/local/go/bin`). Without Go it fails
/// naming what is missing (the script's own line says it first).
pub fn ensure_built() -> anyhow::Result<()> {
    if tcab_real_cluster::binaries_present().is_ok() {
        return Ok(());
    }
    let script = tcab_real_cluster::workspace_root().join("scripts/control-plane");
    println!(
        "the real control plane is not built yet: building it now with {} build \
         (Kubernetes from Go modules; 10-15 minutes the first time on 2 cores, seconds after that) ...",
        script.display()
    );
    let mut cmd = std::process::Command::new(&script);
    cmd.arg("build");
    if !on_path("go") && Path::new("/usr/local/go/bin/go").is_file() {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{path}:/usr/local/go/bin"));
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {} build", script.display()))?;
    match status.code() {
        Some(0) => {}
        Some(3) => bail!(
            "the real control plane cannot be built here: Go 1.26 or newer is missing (see the line above); \
             --cluster sim needs only Rust"
        ),
        _ => bail!("{} build failed ({status})", script.display()),
    }
    tcab_real_cluster::binaries_present()
        .map(drop)
        .map_err(|why| anyhow::anyhow!("{why}"))
}

/// Whether an executable of this name is on PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The `kubectl` to print: the one on PATH, else the one built beside the
/// control plane (`scripts/control-plane path`), else plain `kubectl`.
pub fn kubectl() -> String {
    if on_path("kubectl") {
        return "kubectl".to_owned();
    }
    tcab_real_cluster::default_bin_dir()
        .ok()
        .map(|dir| dir.join("kubectl"))
        .filter(|k| k.is_file())
        .map_or_else(|| "kubectl".to_owned(), |k| k.display().to_string())
}

/// Whose control plane a stack uses.
pub enum Hold {
    /// The test binary's shared one (its owner process restarts the API
    /// server when asked).
    Shared(&'static Access),
    /// One of its own (`tcab-devstack --cluster real`), stopped with it.
    Own(Arc<tokio::sync::Mutex<ControlPlane>>),
    /// One of its own with real kubelets, stopped with it.
    Kubelet(Arc<tokio::sync::Mutex<KubeletCluster>>),
}

/// Pauses and resumes the control plane's kube-controller-manager
/// (`tcab_real_cluster`'s SIGSTOP and SIGCONT, see its README): the shared
/// one through its owner's control socket, one of the stack's own directly
/// (held weakly: the stack stops it, not an admin handle left behind).
#[derive(Clone)]
pub enum ControllerManagerSwitch {
    Shared(&'static Access),
    Own(std::sync::Weak<tokio::sync::Mutex<ControlPlane>>),
    Kubelet(std::sync::Weak<tokio::sync::Mutex<KubeletCluster>>),
}

impl ControllerManagerSwitch {
    fn of(hold: &Hold) -> Self {
        match hold {
            Hold::Shared(access) => ControllerManagerSwitch::Shared(access),
            Hold::Own(cp) => ControllerManagerSwitch::Own(Arc::downgrade(cp)),
            Hold::Kubelet(c) => ControllerManagerSwitch::Kubelet(Arc::downgrade(c)),
        }
    }

    /// Pauses it (a no-op when paused); returns how long that took.
    pub async fn pause(&self) -> anyhow::Result<Duration> {
        let paused = match self {
            ControllerManagerSwitch::Shared(access) => access.pause_controller_manager().await,
            ControllerManagerSwitch::Own(cp) => {
                let cp = cp.upgrade().context("the control plane has stopped")?;
                let mut cp = cp.lock().await;
                cp.pause_controller_manager().await
            }
            ControllerManagerSwitch::Kubelet(c) => {
                let c = c.upgrade().context("the control plane has stopped")?;
                let mut c = c.lock().await;
                c.pause_controller_manager().await
            }
        };
        paused.map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
    }

    /// Resumes it and waits until it is healthy (a no-op when it runs);
    /// returns how long that took.
    pub async fn resume(&self) -> anyhow::Result<Duration> {
        let resumed = match self {
            ControllerManagerSwitch::Shared(access) => access.resume_controller_manager().await,
            ControllerManagerSwitch::Own(cp) => {
                let cp = cp.upgrade().context("the control plane has stopped")?;
                let mut cp = cp.lock().await;
                cp.resume_controller_manager().await
            }
            ControllerManagerSwitch::Kubelet(c) => {
                let c = c.upgrade().context("the control plane has stopped")?;
                let mut c = c.lock().await;
                c.resume_controller_manager().await
            }
        };
        resumed.map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
    }
}

/// Which control plane [`RealCluster::start`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// The test binary's shared one, its nodes played by the node agent.
    Shared,
    /// One of its own, its nodes played by the node agent.
    Own,
    /// One of its own with real kubelets.
    Kubelets(KubeletSettings),
}

/// A stack's part of the real control plane.
pub struct RealCluster {
    hold: Hold,
    /// How to reach the control plane.
    pub access: Access,
    /// The fault proxy in front of the API server.
    pub proxy: ProxyHandle,
    /// The stack's namespaces: the dispatcher's, then the sandbox one if
    /// it is another.
    pub namespaces: Vec<String>,
    /// `system:serviceaccount:<ns>:tcab-dispatcher`.
    pub dispatcher_user: String,
    /// The dispatcher's TokenRequest token.
    pub dispatcher_token: String,
    /// The control plane's admin token.
    pub admin_token: String,
    /// The node agent's admin API (`None` on real kubelets).
    pub agent_url: Option<String>,
}

impl RealCluster {
    /// Takes the control plane as `take` says (one of its own has its work
    /// dir in `run_dir/control-plane`), makes the node agent's nodes
    /// healthy, creates the
    /// namespaces `namespace` and `sandbox_namespace` (the same or not),
    /// the dispatcher's and the drivers' ServiceAccounts and Roles, and the
    /// fault proxy; writes the dispatcher's and the admin's kubeconfigs
    /// (both through the proxy, HTTPS).
    pub async fn start(
        settings: Settings,
        take: Take,
        run_dir: &Path,
        namespace: &str,
        sandbox_namespace: &str,
        dispatcher_kubeconfig: &Path,
        admin_kubeconfig: &Path,
    ) -> anyhow::Result<RealCluster> {
        if let Err(why) = tcab_real_cluster::binaries_present() {
            bail!("{why}");
        }
        let (hold, access) = if let Take::Kubelets(kubelets) = take {
            let settings = Settings {
                work_dir: Some(run_dir.join("control-plane")),
                ..settings
            };
            let cluster = KubeletCluster::start(settings, kubelets)
                .await
                .map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
                .context("starting the real control plane with real kubelets")?;
            let access = cluster.access().clone();
            (
                Hold::Kubelet(Arc::new(tokio::sync::Mutex::new(cluster))),
                access,
            )
        } else if take == Take::Own {
            let settings = Settings {
                work_dir: Some(run_dir.join("control-plane")),
                ..settings
            };
            let cp = ControlPlane::start(settings)
                .await
                .context("starting the real control plane")?;
            let access = cp.access().clone();
            (Hold::Own(Arc::new(tokio::sync::Mutex::new(cp))), access)
        } else {
            let access = tcab_real_cluster::shared_with(move || settings)
                .await
                .map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&*e)))
                .context("the test binary's shared control plane")?;
            (Hold::Shared(access), access.clone())
        };
        let agent_url = match &hold {
            Hold::Kubelet(_) => None,
            _ => Some(
                access
                    .node_agent_url()
                    .context("the node agent said no admin URL")?
                    .to_owned(),
            ),
        };
        let client = access
            .admin_client()
            .await
            .context("the admin client of the control plane")?;
        // A test that paused the controller-manager and was killed before
        // its guard resumed it must not leave it paused for the next one.
        if let Hold::Shared(access) = &hold
            && access.control_socket.is_some()
        {
            ControllerManagerSwitch::of(&hold)
                .resume()
                .await
                .context("resuming kube-controller-manager")?;
        }
        if let Some(agent_url) = &agent_url {
            heal_nodes(&client, agent_url).await?;
        }

        let mut namespaces = vec![namespace.to_owned()];
        if sandbox_namespace != namespace {
            namespaces.push(sandbox_namespace.to_owned());
        }
        for ns in &namespaces {
            access
                .create_namespace(ns, Duration::from_secs(60))
                .await
                .with_context(|| format!("creating namespace {ns}"))?;
        }
        grant(&client, namespace, sandbox_namespace).await?;

        let direct = run_dir.join("kubeconfig-dispatcher-direct");
        access
            .service_account_kubeconfig(namespace, DISPATCHER_SA, &direct)
            .await
            .context("a token for the dispatcher's ServiceAccount")?;
        let dispatcher_token = crate::stack::kubeconfig_token(&direct)?;
        let admin_token = access.admin.token.clone();

        let ca = std::fs::read(&access.ca_cert)
            .with_context(|| format!("reading {}", access.ca_cert.display()))?;
        let certs = access.work_dir.join("certs");
        let mut chain = std::fs::read(certs.join("apiserver.crt"))
            .with_context(|| format!("reading {}/apiserver.crt", certs.display()))?;
        chain.extend_from_slice(&ca);
        let key = std::fs::read(certs.join("apiserver.key"))
            .with_context(|| format!("reading {}/apiserver.key", certs.display()))?;
        let mut options = ProxyOptions::new(UpstreamOptions {
            url: access.api_url.clone(),
            ca_pem: Some(ca),
        })
        .serve_tls(chain, key)
        .identity(dispatcher_token.clone(), DISPATCHER_IDENTITY)
        .identity(admin_token.clone(), "admin")
        .restart_hook(restart_hook(&hold));
        options.admin_token = Some(admin_token.clone());
        let proxy = tcab_api_proxy::spawn(options)
            .await
            .context("starting the fault proxy")?;
        proxy.write_kubeconfig(dispatcher_kubeconfig, &dispatcher_token, namespace)?;
        proxy.write_kubeconfig(admin_kubeconfig, &admin_token, namespace)?;
        Ok(RealCluster {
            dispatcher_user: format!("system:serviceaccount:{namespace}:{DISPATCHER_SA}"),
            hold,
            access,
            proxy,
            namespaces,
            dispatcher_token,
            admin_token,
            agent_url,
        })
    }

    /// The console of the API as the admin: the proxy's plain-HTTP side
    /// (it serves both on one port), so the test's reads need no CA and
    /// meet an API-server restart as the dispatcher does, while the fault
    /// rules (scoped to the dispatcher's token) leave them alone.
    pub fn console(&self, namespace: &str) -> Cluster {
        Cluster::new(&self.proxy.admin_url(), &self.admin_token, namespace)
    }

    /// The admin interface's parts.
    pub fn admin(&self) -> RealAdmin {
        RealAdmin {
            proxy: tcab_kube_sim::AdminClient::new(&self.proxy.admin_url()),
            agent: self
                .agent_url
                .as_deref()
                .map(tcab_node_agent::AdminClient::new),
            agent_url: self.agent_url.clone(),
            api: self.console(&self.namespaces[0]),
            audit_log: self.access.audit_log.clone().unwrap_or_default(),
            namespaces: self.namespaces.clone(),
            dispatcher_user: self.dispatcher_user.clone(),
            controller_manager: ControllerManagerSwitch::of(&self.hold),
        }
    }

    /// The dispatcher's requests the API server refused (403), from its
    /// audit log.
    pub fn forbidden(&self) -> Vec<String> {
        let Some(log) = &self.access.audit_log else {
            return Vec::new();
        };
        let namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        match crate::timeline::read_audit_log(log, &namespaces) {
            Ok(text) => crate::timeline::forbidden(&text, &self.dispatcher_user),
            Err(e) => vec![format!("the audit log is unreadable: {e}")],
        }
    }

    /// The real kubelets' cluster (`None`: the node agent plays the nodes).
    pub fn kubelets(&self) -> Option<Arc<tokio::sync::Mutex<KubeletCluster>>> {
        match &self.hold {
            Hold::Kubelet(c) => Some(c.clone()),
            _ => None,
        }
    }

    /// The control plane's admin kubeconfig (straight to the API server).
    pub fn direct_kubeconfig(&self) -> &Path {
        &self.access.admin.kubeconfig
    }

    /// Deletes the stack's namespaces (their pods are stopped by the node
    /// agent as a kubelet stops them) and the cluster-scoped objects a test
    /// made for them ([`crate::policy::remove_rig_objects`]), and stops a
    /// control plane of its own.
    pub async fn stop(self) {
        if let Ok(client) = self.access.admin_client().await {
            delete_namespaces(&client, &self.namespaces).await;
        }
        let console = self.console(&self.namespaces[0]);
        for ns in &self.namespaces {
            let _ = crate::policy::remove_rig_objects(&console, ns).await;
        }
        self.proxy.shutdown();
        match self.hold {
            Hold::Own(cp) => {
                if let Ok(cp) = Arc::try_unwrap(cp) {
                    cp.into_inner().stop().await;
                }
            }
            Hold::Kubelet(c) => {
                if let Ok(c) = Arc::try_unwrap(c) {
                    c.into_inner().stop().await;
                }
            }
            Hold::Shared(_) => {}
        }
    }

    /// [`RealCluster::stop`] for a `Drop`: on a thread of its own, waited
    /// for a few seconds at most.
    pub fn stop_blocking(self) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(self.stop());
            }
            let _ = tx.send(());
        });
        let _ = rx.recv_timeout(Duration::from_secs(15));
    }
}

fn restart_hook(hold: &Hold) -> RestartHook {
    match hold {
        Hold::Shared(access) => {
            let access: &'static Access = access;
            Arc::new(move || {
                Box::pin(async move {
                    access
                        .restart_apiserver()
                        .await
                        .map(drop)
                        .map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
                })
            })
        }
        Hold::Own(cp) => {
            let cp = Arc::downgrade(cp);
            Arc::new(move || {
                let cp = cp.clone();
                Box::pin(async move {
                    let cp = cp.upgrade().context("the control plane has stopped")?;
                    cp.lock()
                        .await
                        .restart_apiserver()
                        .await
                        .map(drop)
                        .map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
                })
            })
        }
        Hold::Kubelet(c) => {
            let c = Arc::downgrade(c);
            Arc::new(move || {
                let c = c.clone();
                Box::pin(async move {
                    let c = c.upgrade().context("the control plane has stopped")?;
                    c.lock()
                        .await
                        .restart_apiserver()
                        .await
                        .map(drop)
                        .map_err(|e| anyhow::anyhow!("{}", tcab_real_cluster::error_chain(&e)))
                })
            })
        }
    }
}

async fn delete_namespaces(client: &kube::Client, namespaces: &[String]) {
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let _ = api.delete(ns, &DeleteParams::default()).await;
    }
}

/// The taints a test may have left on a node that a new stack removes (the
/// node lifecycle controller's own ones it leaves to the controller).
fn foreign_taint(key: &str) -> bool {
    !matches!(
        key,
        "node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable"
    )
}

/// Makes the shared nodes healthy after whatever an earlier stack did to
/// them: a lost node is brought back, a deleted Node registered again, the
/// taints and the cordon of a test removed, the images pullable; then waits
/// until each is Ready with no taint at all.
pub async fn heal_nodes(client: &kube::Client, agent_url: &str) -> anyhow::Result<()> {
    let agent = tcab_node_agent::AdminClient::new(agent_url);
    let nodes: Api<Node> = Api::all(client.clone());
    let states = agent.nodes().await.context("the node agent's nodes")?;
    for node in NODES {
        let up = states
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == node)
            .is_some_and(|s| s["up"] == true);
        let registered = nodes.get_opt(node).await?.is_some();
        if !registered && up {
            // Deleted under a running kubelet: it registers on its restart.
            agent.lose_node(node).await?;
        }
        if !up || !registered {
            agent
                .restore_node(node)
                .await
                .with_context(|| format!("bringing node {node} back"))?;
        }
        if let Some(n) = nodes.get_opt(node).await? {
            let spec = n.spec.unwrap_or_default();
            let taints = spec.taints.unwrap_or_default();
            let kept: Vec<_> = taints.iter().filter(|t| !foreign_taint(&t.key)).collect();
            if kept.len() != taints.len() || spec.unschedulable == Some(true) {
                let patch = json!({"spec": {"taints": kept, "unschedulable": null}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("removing the taints of node {node}"))?;
            }
        }
    }
    for image in IMAGES {
        agent.set_unpullable(image, false).await?;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut pending = Vec::new();
        for node in NODES {
            match nodes.get_opt(node).await? {
                None => pending.push(format!("{node}: not registered")),
                Some(n) => {
                    if let Some(why) = tcab_real_cluster::node_not_ready(&n) {
                        pending.push(format!("{node}: {why}"));
                    } else if let Some(t) = n.spec.and_then(|s| s.taints).filter(|t| !t.is_empty())
                    {
                        pending.push(format!("{node}: tainted {}", t[0].key));
                    }
                }
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the nodes did not become healthy within 60 s: {}",
                pending.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The chart's dispatcher Role, as rendered and checked by
/// charts/check_chart.py (`role.golden.yaml`), in `namespace`.
pub fn golden_role(namespace: &str) -> anyhow::Result<Role> {
    let path = crate::stack::golden_role();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut role: Role = serde_saphyr::from_str(&text)
        .with_context(|| format!("{} is not a Role", path.display()))?;
    role.metadata.namespace = Some(namespace.to_owned());
    Ok(role)
}

/// The chart's template of the sandbox Role (rendered when the sandbox
/// namespace is not the dispatcher's).
pub fn sandbox_role_template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/tcab-dispatcher/templates/sandbox-role.yaml")
}

/// The rules of the chart's sandbox Role: the template's `rules:` block,
/// which holds no template expression.
pub fn sandbox_role_rules(template: &str) -> anyhow::Result<Vec<PolicyRule>> {
    let mut lines = template.lines().skip_while(|l| l.trim() != "rules:");
    anyhow::ensure!(
        lines.next().is_some(),
        "the sandbox Role template has no rules: block"
    );
    let block: Vec<&str> = lines
        .take_while(|l| l.starts_with(' ') || l.starts_with("- "))
        .collect();
    anyhow::ensure!(
        !block.iter().any(|l| l.contains("{{")),
        "the sandbox Role's rules are templated now; render them"
    );
    serde_saphyr::from_str(&block.join("\n")).context("the sandbox Role's rules are not YAML")
}

fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    }
}

fn binding(name: &str, namespace: &str, role: &str, sa: &str, sa_namespace: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(name, namespace),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(sa_namespace.into()),
            ..Subject::default()
        }]),
    }
}

async fn create<K>(client: &kube::Client, namespace: &str, object: &K) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "creating {} {namespace}/{}",
                K::kind(&K::DynamicType::default()),
                object.meta().name.as_deref().unwrap_or("")
            )
        }),
    }
}

/// What the chart grants, as it grants it: the dispatcher's ServiceAccount
/// bound to the golden Role (and to the chart's sandbox Role in another
/// sandbox namespace); the drivers' ServiceAccount, with pod
/// create/get/list/delete in the sandbox namespace (which the chart leaves
/// to the operator).
async fn grant(client: &kube::Client, ns: &str, sandbox_ns: &str) -> anyhow::Result<()> {
    for sa in [DISPATCHER_SA, DRIVER_SA] {
        let account = ServiceAccount {
            metadata: meta(sa, ns),
            ..ServiceAccount::default()
        };
        create(client, ns, &account).await?;
    }
    let role = golden_role(ns)?;
    let role_name = role.metadata.name.clone().unwrap_or_default();
    create(client, ns, &role).await?;
    create(
        client,
        ns,
        &binding(&role_name, ns, &role_name, DISPATCHER_SA, ns),
    )
    .await?;
    if sandbox_ns != ns {
        let template = std::fs::read_to_string(sandbox_role_template())?;
        let name = format!("{role_name}-sandbox");
        let role = Role {
            metadata: meta(&name, sandbox_ns),
            rules: Some(sandbox_role_rules(&template)?),
        };
        create(client, sandbox_ns, &role).await?;
        create(
            client,
            sandbox_ns,
            &binding(&name, sandbox_ns, &name, DISPATCHER_SA, ns),
        )
        .await?;
    }
    let name = "tcab-driver-sandboxes";
    let role = Role {
        metadata: meta(name, sandbox_ns),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: ["create", "get", "list", "delete"]
                .map(String::from)
                .to_vec(),
            ..PolicyRule::default()
        }]),
    };
    create(client, sandbox_ns, &role).await?;
    create(
        client,
        sandbox_ns,
        &binding(name, sandbox_ns, name, DRIVER_SA, ns),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_roles_are_read() {
        let role = golden_role("t-1").expect("the golden Role");
        assert_eq!(role.metadata.namespace.as_deref(), Some("t-1"));
        let rules = role.rules.expect("rules");
        assert!(
            rules
                .iter()
                .any(|r| r.resources.as_deref() == Some(&["jobs".to_owned()][..])
                    && r.verbs.contains(&"create".to_owned())),
            "{rules:?}"
        );
        let template = std::fs::read_to_string(sandbox_role_template()).expect("template");
        let rules = sandbox_role_rules(&template).expect("sandbox rules");
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["pods".to_owned()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "list", "delete"]);
        assert!(sandbox_role_rules("kind: Role\n").is_err());
    }

    #[test]
    fn the_rig_runs_the_node_agent_on_two_nodes_with_short_timings() {
        let s = settings(Path::new("/bins"), None);
        assert_eq!(s.nodes, ["node-1", "node-2"]);
        let agent = s.node_agent.clone().expect("the launcher runs the agent");
        assert_eq!(agent.program, Path::new("/bins/tcab-node-agent"));
        let args = agent.args.join(" ");
        assert!(
            args.contains("--node node-1 --node node-2")
                && args.contains("--image-back-off-seconds 1")
                && args.contains("--lease-seconds 4")
                && args.contains("--local-image tcab-dispatcher=/bins"),
            "{args}"
        );
        assert!(s.audit);
        assert_eq!(s, settings(Path::new("/bins"), None), "the same every time");
        let roomy = settings(Path::new("/bins"), Some(600));
        let args = roomy.node_agent.expect("the agent").args.join(" ");
        assert!(
            args.contains("--node node-1,pods=600 --node node-2,pods=600"),
            "{args}"
        );
    }

    #[test]
    fn only_the_node_lifecycle_taints_stay() {
        assert!(!foreign_taint("node.kubernetes.io/unreachable"));
        assert!(!foreign_taint("node.kubernetes.io/not-ready"));
        assert!(foreign_taint("node.kubernetes.io/out-of-service"));
        assert!(foreign_taint("example.com/maintenance"));
    }
}
