//! The whole system on one machine: the reference backend and the simulated
//! cluster as processes, and the three dispatcher binaries as processes, wired
//! together exactly as the chart wires them in a real pod.

use crate::binaries;
use crate::cluster::{ClusterAdmin, ClusterKind, NodeKind};
use crate::console::{Backend, Cluster};
use crate::process::{Proc, Spec, tail};
use crate::real::RealCluster;
use crate::scrape::{DispatcherView, Scrape};
use crate::vault_recorder::VaultRecorder;
use anyhow::{Context, bail};
use kube::config::Kubeconfig;
use secrecy::ExposeSecret;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcab_kube_sim::kubeconfig;

/// The dispatcher's three containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Container {
    Admitter,
    LeaseKeeper,
    Reaper,
}

impl Container {
    /// All three, in start order (the lease-keeper first: it serves the vault).
    pub const ALL: [Container; 3] = [
        Container::LeaseKeeper,
        Container::Admitter,
        Container::Reaper,
    ];

    /// The binary's name.
    pub fn binary(self) -> &'static str {
        match self {
            Container::Admitter => "tcab-admitter",
            Container::LeaseKeeper => "tcab-lease-keeper",
            Container::Reaper => "tcab-reaper",
        }
    }
}

/// How to start a stack.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Where logs, the database and kubeconfigs go.
    pub run_dir: PathBuf,
    /// The cluster: kube-sim (the default) or the real control plane.
    pub cluster: ClusterKind,
    /// On the real control plane: the test binary's shared one (true, the
    /// default; the namespaces then get random names) or one of the stack's
    /// own (`tcab-devstack --cluster real`).
    pub shared_control_plane: bool,
    /// The dispatcher's namespace (on a shared control plane, a random
    /// `tcab-<hex>` replaces it at start).
    pub namespace: String,
    /// The sandbox namespace (`TCAB_K8S_NAMESPACE`; on a shared control
    /// plane, the dispatcher's random one, or another random one when it
    /// differs).
    pub sandbox_namespace: String,
    /// Cap of the run lane.
    pub max_inflight: u32,
    /// Cap of the publish lane.
    pub max_publish_inflight: u32,
    /// The containers' poll interval, in seconds.
    pub poll_seconds: f64,
    /// The backend's lease length, in seconds.
    pub lease_seconds: u64,
    /// ttlSecondsAfterFinished of the Jobs.
    pub job_ttl_seconds: u32,
    /// The reaper's orphan-sweep grace, in seconds.
    pub orphan_grace_seconds: u64,
    /// Driver pods' termination grace, in seconds.
    pub driver_grace_seconds: u32,
    /// Run the dispatcher under the chart's Role (the sim answers 403 to anything else).
    pub rbac: bool,
    /// RUST_LOG for the three containers.
    pub rust_log: String,
    /// Extra environment for the three containers (name, value).
    pub extra_env: Vec<(String, String)>,
    /// How many times faster than real time the simulated cluster runs
    /// (`--speed` of kube-sim: its grace periods, tolerations, pod GC and
    /// the fake drivers' scripts). The real control plane runs in real
    /// time with the launcher's short timings.
    pub cluster_speed: f64,
    /// How many nodes the simulated cluster has (each 3920m CPU, 15Gi, 110
    /// pods). The real control plane has [`crate::real::NODES`].
    pub cluster_nodes: usize,
    /// Pods each node of the real control plane admits (`None`: the node
    /// agent's 110). kube-sim's nodes always admit 110.
    pub node_pods: Option<u32>,
    /// Start the three containers as processes (false: the backend and the
    /// cluster only, e.g. for a dispatcher installed from the chart).
    pub start_containers: bool,
    /// What plays the real control plane's nodes: the node agent (the
    /// default) or real kubelets (a control plane of the stack's own, the
    /// dispatcher only as the chart's pod: `start_containers` must be
    /// false). kube-sim ignores it.
    pub nodes: NodeKind,
}

impl StackOptions {
    /// Defaults for a stack in `run_dir`: caps 8/8, fast polling, RBAC on.
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        StackOptions {
            run_dir: run_dir.into(),
            cluster: ClusterKind::Sim,
            shared_control_plane: true,
            namespace: "tcab".into(),
            sandbox_namespace: "tcab".into(),
            max_inflight: 8,
            max_publish_inflight: 8,
            poll_seconds: 0.2,
            lease_seconds: 120,
            job_ttl_seconds: 600,
            orphan_grace_seconds: 600,
            driver_grace_seconds: 5,
            rbac: true,
            rust_log: "info".into(),
            extra_env: Vec::new(),
            cluster_speed: 1.0,
            cluster_nodes: 2,
            node_pods: None,
            start_containers: true,
            nodes: NodeKind::Agent,
        }
    }
}

/// The release name `tcab-devstack --install chart` installs the chart as.
pub const CHART_RELEASE: &str = "tcab";

/// The service token the stack's backend and dispatcher share.
pub const SERVICE_TOKEN: &str = "devstack-service-token";
/// The token the dispatcher presents to the simulated cluster (bound to the chart's Role).
pub const DISPATCHER_TOKEN: &str = "devstack-dispatcher-token";

/// A running dev stack. Dropping it kills every process (and, on the real
/// control plane, deletes its namespaces).
pub struct Stack {
    pub options: StackOptions,
    /// The reference backend's console.
    pub backend: Backend,
    /// The cluster's API (and on kube-sim its admin endpoints), with the
    /// admin token.
    pub cluster: Cluster,
    /// kubeconfig with the admin token (for kubectl).
    pub admin_kubeconfig: PathBuf,
    /// kubeconfig the dispatcher uses.
    pub dispatcher_kubeconfig: PathBuf,
    /// The token the dispatcher presents (the fault rules scoped to the
    /// dispatcher name it).
    pub dispatcher_token: String,
    /// The stack's part of the real control plane.
    pub real: Option<RealCluster>,
    /// The backend's URL as pods on real kubelets reach it (the node
    /// network's gateway, forwarded to the backend's port of the host's
    /// loopback); `None` elsewhere, where pods share the host's loopback.
    pub pod_backend_url: Option<String>,
    bins: PathBuf,
    vault_addr: String,
    /// Where the admitter calls the vault instead, when a
    /// [`VaultRecorder`] stands in front of the lease-keeper's.
    admitter_vault_addr: Option<String>,
    /// Each container's metrics address (127.0.0.1, a port of its own).
    metrics_addrs: BTreeMap<Container, String>,
    http: reqwest::Client,
    sims: Vec<Proc>,
    containers: BTreeMap<Container, Proc>,
}

/// The containers' backend timeout: the binaries' default of 10 s, shorter
/// under a short lease, since the poll interval plus the backend timeout
/// (how far apart the lease-keeper's renewal rounds begin, at most) must be
/// at most half the lease. A poll interval's worth of margin is left below
/// that bound.
fn backend_timeout_seconds(o: &StackOptions) -> f64 {
    (o.lease_seconds as f64 / 2.0 - 2.0 * o.poll_seconds).min(10.0)
}

/// The chart's Role, as rendered and checked by charts/check_chart.py.
pub fn golden_role() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/tcab-dispatcher/tests/role.golden.yaml")
}

/// A free port of 127.0.0.1 for the vault or a container's metrics, chosen
/// below the kernel's ephemeral range (32768 and up), so no outgoing
/// connection can take it between stack start and a container's restart.
/// Each call of a process gets another.
pub fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 100) as u16 * 100;
    for _ in 0..2_000 {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 2_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port between 20000 and 32000")
}

/// The bearer token of a kubeconfig's first user.
pub fn kubeconfig_token(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Kubeconfig::from_yaml(&text).context("kubeconfig is not YAML")?;
    config
        .auth_infos
        .first()
        .and_then(|u| u.auth_info.as_ref()?.token.as_ref())
        .map(|t| t.expose_secret().to_owned())
        .context("kubeconfig has no users[0].user.token")
}

fn write_kubeconfig(path: &Path, server: &str, token: &str, namespace: &str) -> anyhow::Result<()> {
    let names = kubeconfig::Names {
        cluster: "sim",
        user: "dispatcher",
    };
    let config = kubeconfig::build(names, server, namespace, token);
    kubeconfig::write_config(path, &config).with_context(|| format!("writing {}", path.display()))
}

/// Starts kube-sim (under the chart's Role when `options.rbac`), writes its
/// kubeconfigs; returns it, its console and the dispatcher's token.
async fn start_sim(
    bins: &Path,
    options: &StackOptions,
    admin_kubeconfig: &Path,
    dispatcher_kubeconfig: &Path,
) -> anyhow::Result<(Proc, Cluster, String)> {
    let dir = &options.run_dir;
    let mut args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--kubeconfig-out".into(),
        admin_kubeconfig.display().to_string(),
        "--namespace".into(),
        options.namespace.clone(),
        "--speed".into(),
        options.cluster_speed.to_string(),
        "--nodes".into(),
        options.cluster_nodes.to_string(),
    ];
    if options.rbac {
        let role = golden_role();
        if !role.is_file() {
            bail!(
                "the chart's golden Role {} is missing (charts/check_chart.py --update-golden writes it)",
                role.display()
            );
        }
        args.extend([
            "--rbac-role".into(),
            role.display().to_string(),
            "--rbac-token".into(),
            DISPATCHER_TOKEN.into(),
        ]);
    }
    let (kube_proc, kube_url) = Proc::start(
        Spec {
            name: "kube-sim".into(),
            program: binaries::path(bins, "tcab-kube-sim"),
            args,
            env: vec![("RUST_LOG".into(), "info".into())],
            log: dir.join("kube-sim.log"),
        },
        true,
    )
    .await?;
    let kube_url = kube_url.context("kube url")?;
    let admin_token = kubeconfig_token(admin_kubeconfig)?;
    let token = if options.rbac {
        DISPATCHER_TOKEN
    } else {
        admin_token.as_str()
    };
    write_kubeconfig(dispatcher_kubeconfig, &kube_url, token, &options.namespace)?;
    let cluster = Cluster::new(&kube_url, &admin_token, &options.namespace);
    Ok((kube_proc, cluster, token.to_owned()))
}

impl Stack {
    /// Starts everything and waits until each process is up.
    pub async fn start(mut options: StackOptions) -> anyhow::Result<Stack> {
        let bins = binaries::bin_dir()?;
        binaries::ensure_built(&bins)?;
        std::fs::create_dir_all(&options.run_dir)
            .with_context(|| format!("creating {}", options.run_dir.display()))?;
        let dir = options.run_dir.clone();
        if options.cluster.is_real() && options.shared_control_plane {
            // Namespaces of its own on the shared control plane.
            let id = format!("{:08x}", rand::random::<u32>());
            let separate = options.sandbox_namespace != options.namespace;
            options.namespace = format!("tcab-{id}");
            options.sandbox_namespace = if separate {
                format!("tcab-sandbox-{id}")
            } else {
                options.namespace.clone()
            };
        }

        let db = dir.join("backend.db");
        let (backend_proc, backend_url) = Proc::start(
            Spec {
                name: "backend-sim".into(),
                program: binaries::path(&bins, "tcab-backend-sim"),
                args: vec![
                    "--listen".into(),
                    "127.0.0.1:0".into(),
                    "--db".into(),
                    db.display().to_string(),
                    "--service-token".into(),
                    SERVICE_TOKEN.into(),
                    "--lease-seconds".into(),
                    options.lease_seconds.to_string(),
                    "--enable-test-clock".into(),
                ],
                env: vec![("RUST_LOG".into(), "info".into())],
                log: dir.join("backend-sim.log"),
            },
            true,
        )
        .await?;
        let backend_url = backend_url.context("backend url")?;

        let admin_kubeconfig = dir.join("kubeconfig");
        let dispatcher_kubeconfig = dir.join("kubeconfig-dispatcher");
        let mut sims = vec![backend_proc];
        let kubelets = options.cluster.is_real() && options.nodes == NodeKind::Kubelet;
        if kubelets && options.start_containers {
            bail!(
                "on real kubelets the dispatcher runs only as the chart's pod (start_containers false): \
                 its processes on this host and the drivers in the node network cannot share one backend URL"
            );
        }
        let mut pod_backend_url = None;
        let (cluster, dispatcher_token, real) = match options.cluster {
            ClusterKind::Sim => {
                let (kube_proc, cluster, token) =
                    start_sim(&bins, &options, &admin_kubeconfig, &dispatcher_kubeconfig).await?;
                sims.push(kube_proc);
                (cluster, token, None)
            }
            ClusterKind::Real if kubelets => {
                let missing = crate::real::kubelet_nodes_missing();
                if !missing.is_empty() {
                    bail!(
                        "real kubelets cannot run on this machine: missing {}",
                        missing.join(", ")
                    );
                }
                let images = crate::real::node_images(&bins)
                    .context("writing the images the real kubelets run")?;
                let nodes = crate::real::NODES.map(String::from).to_vec();
                let real = RealCluster::start(
                    crate::real::kubelet_settings(),
                    crate::real::Take::Kubelets(tcab_real_cluster::KubeletSettings::new(
                        nodes, images,
                    )),
                    &dir,
                    &options.namespace,
                    &options.sandbox_namespace,
                    &dispatcher_kubeconfig,
                    &admin_kubeconfig,
                )
                .await?;
                let port = reqwest::Url::parse(&backend_url)
                    .ok()
                    .and_then(|u| u.port())
                    .with_context(|| format!("the backend's URL {backend_url} has no port"))?;
                let kubelets = real.kubelets().context("the real kubelets")?;
                let gateway = kubelets
                    .lock()
                    .await
                    .network()
                    .forward_host_port(port)
                    .context("forwarding the backend's port into the node network")?;
                pod_backend_url = Some(format!("http://{gateway}"));
                let cluster = real.console(&options.namespace);
                (cluster, real.dispatcher_token.clone(), Some(real))
            }
            ClusterKind::Real => {
                let real = RealCluster::start(
                    crate::real::settings(&bins, options.node_pods),
                    if options.shared_control_plane {
                        crate::real::Take::Shared
                    } else {
                        crate::real::Take::Own
                    },
                    &dir,
                    &options.namespace,
                    &options.sandbox_namespace,
                    &dispatcher_kubeconfig,
                    &admin_kubeconfig,
                )
                .await?;
                let cluster = real.console(&options.namespace);
                (cluster, real.dispatcher_token.clone(), Some(real))
            }
        };

        let mut stack = Stack {
            backend: Backend::new(&backend_url, SERVICE_TOKEN),
            cluster,
            admin_kubeconfig,
            dispatcher_kubeconfig,
            dispatcher_token,
            real,
            pod_backend_url,
            bins,
            vault_addr: format!("127.0.0.1:{}", free_port()?),
            admitter_vault_addr: None,
            metrics_addrs: Container::ALL
                .into_iter()
                .map(|c| Ok((c, format!("127.0.0.1:{}", free_port()?))))
                .collect::<anyhow::Result<_>>()?,
            http: {
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .context("building the HTTP client")?
            },
            sims,
            containers: BTreeMap::new(),
            options,
        };
        if stack.options.start_containers {
            for c in Container::ALL {
                stack.start_container(c).await?;
            }
        }
        Ok(stack)
    }

    /// The environment of one container, as the chart would set it.
    pub fn container_env(&self, c: Container) -> Vec<(String, String)> {
        let o = &self.options;
        let mut env: Vec<(String, String)> = vec![
            (
                "KUBECONFIG".into(),
                self.dispatcher_kubeconfig.display().to_string(),
            ),
            ("POD_NAMESPACE".into(), o.namespace.clone()),
            ("RUST_LOG".into(), o.rust_log.clone()),
            (
                "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS".into(),
                o.poll_seconds.to_string(),
            ),
            ("TCAB_DISPATCHER_VAULT_ADDR".into(), self.vault_addr.clone()),
            (
                "TCAB_DISPATCHER_METRICS_ADDR".into(),
                self.metrics_addrs[&c].clone(),
            ),
            (
                "TCAB_DISPATCHER_LEASE_SECONDS".into(),
                o.lease_seconds.to_string(),
            ),
            // A watch that goes quiet is reconnected within this; at most
            // half the lease, as the binaries require.
            (
                "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS".into(),
                (o.lease_seconds / 2).clamp(1, 60).to_string(),
            ),
            (
                "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS".into(),
                backend_timeout_seconds(o).to_string(),
            ),
        ];
        let backend = [
            ("TCAB_BACKEND_URL", self.backend.url().to_owned()),
            ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN.to_owned()),
            ("TCAB_PUBLISHER_IMAGE", "tcab/publisher:dev".to_owned()),
        ];
        match c {
            Container::Admitter => {
                env.extend(backend.map(|(k, v)| (k.to_owned(), v)));
                env.extend(
                    [
                        ("TCAB_DRIVER_IMAGE", "tcab/driver:dev".to_owned()),
                        ("TCAB_DISPATCHER_MAX_INFLIGHT", o.max_inflight.to_string()),
                        (
                            "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT",
                            o.max_publish_inflight.to_string(),
                        ),
                        (
                            "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS",
                            (o.poll_seconds * 25.0)
                                .max(5.0)
                                .min(o.lease_seconds as f64 / 2.0)
                                .to_string(),
                        ),
                        (
                            "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS",
                            o.driver_grace_seconds.to_string(),
                        ),
                        (
                            "TCAB_DISPATCHER_JOB_TTL_SECONDS",
                            o.job_ttl_seconds.to_string(),
                        ),
                        ("TCAB_K8S_NAMESPACE", o.sandbox_namespace.clone()),
                    ]
                    .map(|(k, v)| (k.to_owned(), v)),
                );
                if self.real.is_some() {
                    // The drivers make their sandboxes as their own
                    // ServiceAccount (kube-sim lets any pod do it).
                    env.push((
                        "TCAB_DRIVER_SERVICE_ACCOUNT".into(),
                        crate::real::DRIVER_SA.into(),
                    ));
                }
            }
            Container::LeaseKeeper => {
                env.extend(backend.map(|(k, v)| (k.to_owned(), v)));
            }
            Container::Reaper => {
                // The orphan sweep asks the backend which jobs it still drives.
                env.extend(
                    backend[..2]
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), v.clone())),
                );
                env.push(("TCAB_K8S_NAMESPACE".into(), o.sandbox_namespace.clone()));
                env.push((
                    "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS".into(),
                    o.orphan_grace_seconds.to_string(),
                ));
            }
        }
        if let (Container::Admitter, Some(addr)) = (c, &self.admitter_vault_addr) {
            env.push(("TCAB_DISPATCHER_VAULT_ADDR".into(), addr.clone()));
        }
        env.extend(o.extra_env.iter().cloned());
        env
    }

    /// Puts a [`VaultRecorder`] between the admitter and the lease-keeper's
    /// vault: the admitter (restarted now if it runs, and on every later
    /// start) calls the recorder, which forwards each call to the
    /// lease-keeper and notes the vault's. The recording lasts while the
    /// returned recorder lives.
    pub async fn record_vault_calls(&mut self) -> anyhow::Result<VaultRecorder> {
        let recorder = VaultRecorder::start(&self.vault_addr).await?;
        self.admitter_vault_addr = Some(recorder.addr());
        if self.is_running(Container::Admitter) {
            self.stop_container(Container::Admitter).await;
            self.start_container(Container::Admitter).await?;
        }
        Ok(recorder)
    }

    /// The base URL of a container's endpoints (`/metrics`, `/healthz`,
    /// `/readyz`). On real kubelets, the API server's pod proxy of the
    /// dispatcher's pod, with `<pod>` for its name.
    pub fn endpoint_url(&self, c: Container) -> String {
        if self.on_real_kubelets() {
            return format!(
                "{}/api/v1/namespaces/{}/pods/<pod>:{}/proxy",
                self.cluster.url(),
                self.options.namespace,
                self.metrics_port(c)
            );
        }
        format!("http://{}", self.metrics_addrs[&c])
    }

    /// The URL of a container's metrics.
    pub fn metrics_url(&self, c: Container) -> String {
        format!("{}/metrics", self.endpoint_url(c))
    }

    /// GETs `path` of a container's endpoints: the status and the body. On
    /// real kubelets through the API server's pod proxy (the host cannot
    /// reach a pod's address, and must not try).
    pub async fn endpoint(&self, c: Container, path: &str) -> anyhow::Result<(u16, String)> {
        if self.on_real_kubelets() {
            let at = format!("{}{path}", self.pod_proxy_path(c).await?);
            return self.cluster.get_answer(&at).await;
        }
        let url = format!("{}{path}", self.endpoint_url(c));
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status().as_u16();
        let body = response
            .text()
            .await
            .with_context(|| format!("GET {url}: reading the answer"))?;
        Ok((status, body))
    }

    /// Scrapes a container's metrics.
    pub async fn scrape(&self, c: Container) -> anyhow::Result<Scrape> {
        let (status, body) = self.endpoint(c, "/metrics").await?;
        if status != 200 {
            bail!("GET {}: {status}: {body}", self.metrics_url(c));
        }
        Scrape::parse(&body).with_context(|| format!("reading {}", self.metrics_url(c)))
    }

    /// The dispatcher's own view from the three containers' metrics (a
    /// container that cannot be scraped leaves its part unknown).
    pub async fn dispatcher_view(&self) -> DispatcherView {
        let admitter = self.scrape(Container::Admitter).await.ok();
        let keeper = self.scrape(Container::LeaseKeeper).await.ok();
        let reaper = self.scrape(Container::Reaper).await.ok();
        DispatcherView::read(admitter.as_ref(), keeper.as_ref(), reaper.as_ref())
    }

    /// The log file of a container.
    pub fn log_path(&self, c: Container) -> PathBuf {
        self.options.run_dir.join(format!("{}.log", c.binary()))
    }

    /// A container's log so far.
    pub fn log(&self, c: Container) -> String {
        std::fs::read_to_string(self.log_path(c)).unwrap_or_default()
    }

    /// Starts (or restarts) one container.
    pub async fn start_container(&mut self, c: Container) -> anyhow::Result<()> {
        let spec = Spec {
            name: c.binary().into(),
            program: binaries::path(&self.bins, c.binary()),
            args: Vec::new(),
            env: self.container_env(c),
            log: self.log_path(c),
        };
        let (proc, _) = Proc::start(spec, false).await?;
        self.containers.insert(c, proc);
        Ok(())
    }

    /// SIGKILLs one container (as a crash would) and leaves it down.
    pub async fn kill_container(&mut self, c: Container) {
        if let Some(p) = self.containers.get_mut(&c) {
            p.kill().await;
        }
    }

    /// SIGTERMs one container and returns its exit code (None: it had to be killed).
    pub async fn stop_container(&mut self, c: Container) -> Option<i32> {
        match self.containers.get_mut(&c) {
            Some(p) => p.stop(Duration::from_secs(10)).await,
            None => None,
        }
    }

    /// Waits up to `limit` for a container to exit by itself; its exit code
    /// (`None`: still running, killed by a signal, or never started).
    pub async fn wait_exit(&mut self, c: Container, limit: Duration) -> Option<i32> {
        match self.containers.get_mut(&c) {
            Some(p) => p.wait_exit(limit).await,
            None => None,
        }
    }

    /// A running container's process id.
    pub fn pid(&self, c: Container) -> Option<u32> {
        self.containers.get(&c).and_then(Proc::pid)
    }

    /// Whether a container is running.
    pub fn is_running(&mut self, c: Container) -> bool {
        self.containers.get_mut(&c).is_some_and(Proc::is_running)
    }

    /// Fails with the containers' log tails if one of them has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for c in Container::ALL {
            if !self.is_running(c) && self.containers.contains_key(&c) {
                bail!(
                    "{} exited; log:\n{}",
                    c.binary(),
                    tail(&self.log_path(c), 40)
                );
            }
        }
        Ok(())
    }

    /// The chart's values for this stack, as the three processes are
    /// configured: its backend and token, the drivers' image and
    /// ServiceAccount, the sandbox namespace, the caps, poll interval,
    /// lease, Job TTL and driver grace, and the stack's vault and metrics
    /// ports (so [`Stack::scrape`] and the console read the chart's pod).
    pub fn chart_values(&self) -> serde_json::Value {
        let o = &self.options;
        let port = |c: Container| {
            self.metrics_addrs[&c]
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .unwrap_or(0)
        };
        let mut values = serde_json::json!({
            // The chart requires a repository; the node agent maps this name
            // to the local binaries.
            "image": {"repository": crate::real::CHART_IMAGE},
            "backend": {"url": self.backend.url(), "serviceToken": {"value": SERVICE_TOKEN},
                "timeoutSeconds": backend_timeout_seconds(o)},
            "driver": {"image": "tcab/driver:dev",
                "terminationGraceSeconds": o.driver_grace_seconds},
            "publisher": {"image": "tcab/publisher:dev"},
            "dispatcher": {
                "maxInflight": o.max_inflight, "maxPublishInflight": o.max_publish_inflight,
                "pollIntervalSeconds": o.poll_seconds, "leaseSeconds": o.lease_seconds,
                "watchTimeoutSeconds": (o.lease_seconds / 2).clamp(1, 60),
                "gateMaxAgeSeconds": (o.poll_seconds * 25.0).max(5.0).min(o.lease_seconds as f64 / 2.0),
                "jobTtlSeconds": o.job_ttl_seconds, "orphanGraceSeconds": o.orphan_grace_seconds,
                "vaultAddr": self.vault_addr, "logFormat": "text", "rustLog": o.rust_log,
            },
            "metrics": {"listenHost": "127.0.0.1", "admitterPort": port(Container::Admitter),
                "leaseKeeperPort": port(Container::LeaseKeeper), "reaperPort": port(Container::Reaper)},
        });
        if o.sandbox_namespace != o.namespace {
            values["sandbox"] = serde_json::json!({"namespace": o.sandbox_namespace});
        }
        if self.real.is_some() {
            values["driver"]["serviceAccount"] = crate::real::DRIVER_SA.into();
        }
        if let Some(url) = &self.pod_backend_url {
            // Real kubelets: the image built here and imported into each
            // node's containerd (no registry to pull from, so never pulled);
            // the backend through the node network's gateway; the vault on
            // the pod's own loopback (the chart's default address); the
            // metrics ports on every address, where the kubelet probes them
            // at the pod's IP and the stack reads them through the API
            // server's pod proxy.
            values["image"] = serde_json::json!({"repository": crate::real::CHART_IMAGE,
                "tag": crate::real::DISPATCHER_TAG, "pullPolicy": "Never"});
            values["backend"]["url"] = url.as_str().into();
            values["dispatcher"]["vaultAddr"] = serde_json::Value::Null;
            values["metrics"]["listenHost"] = "0.0.0.0".into();
        }
        values
    }

    /// Whether the dispatcher's pod runs on real kubelets, in the node
    /// network the host cannot reach but through the API server.
    pub fn on_real_kubelets(&self) -> bool {
        self.pod_backend_url.is_some()
    }

    /// The path, under the API server, of a container's endpoints in the
    /// dispatcher's running pod (the newest, when a rollout leaves two):
    /// `/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy`.
    async fn pod_proxy_path(&self, c: Container) -> anyhow::Result<String> {
        let ns = &self.options.namespace;
        let pods = self
            .cluster
            .pods(ns, Some("app.kubernetes.io/name=tcab-dispatcher"))
            .await?;
        let pod = pods
            .iter()
            .filter(|p| {
                p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .max_by_key(|p| {
                p["metadata"]["creationTimestamp"]
                    .as_str()
                    .map(str::to_owned)
            })
            .context("no running pod of the dispatcher")?;
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        Ok(format!(
            "/api/v1/namespaces/{ns}/pods/{name}:{}/proxy",
            self.metrics_port(c)
        ))
    }

    /// The port a container serves its endpoints on.
    fn metrics_port(&self, c: Container) -> u16 {
        self.metrics_addrs[&c]
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Installs the chart as release `release` with `values` (see
    /// [`Stack::chart_values`]) into the stack's namespace, as `helm
    /// install` does ([`crate::chart`]), and waits for the dispatcher's pod
    /// to be Ready. The real control plane only: its node agent runs the
    /// chart's image as the stack's binaries.
    pub async fn install_chart(
        &mut self,
        release: &str,
        values: &serde_json::Value,
        limit: Duration,
    ) -> anyhow::Result<crate::chart::Release> {
        let Some(real) = &self.real else {
            bail!("the chart installs only on the real control plane (--cluster real)");
        };
        let client = real.access.admin_client().await?;
        let installed =
            crate::chart::install(&client, release, &self.options.namespace, values).await?;
        let selector = format!("app.kubernetes.io/instance={release}");
        let cluster = self.cluster.clone();
        let ns = self.options.namespace.clone();
        wait_for("the dispatcher's pod Ready", limit, || {
            let (cluster, ns, selector) = (cluster.clone(), ns.clone(), selector.clone());
            async move {
                let pods = cluster.pods(&ns, Some(&selector)).await?;
                let ready = pods.iter().any(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                Ok(ready.then_some(()))
            }
        })
        .await?;
        Ok(installed)
    }

    /// Stops everything politely (on the real control plane, deletes the
    /// stack's namespaces; a control plane of its own stops too).
    pub async fn shutdown(mut self) {
        for c in Container::ALL {
            self.stop_container(c).await;
        }
        for p in &mut self.sims {
            p.stop(Duration::from_secs(5)).await;
        }
        if let Some(real) = self.real.take() {
            real.stop().await;
        }
    }

    /// Which cluster the stack runs on.
    pub fn kind(&self) -> ClusterKind {
        self.options.cluster
    }

    /// The dispatcher's namespace.
    pub fn namespace(&self) -> &str {
        &self.options.namespace
    }

    /// The cluster's admin interface (see [`crate::cluster`]).
    pub fn admin(&self) -> ClusterAdmin {
        match &self.real {
            Some(real) => ClusterAdmin::real(real.admin()),
            None => ClusterAdmin::sim(self.cluster.url()),
        }
    }

    /// What says the dispatcher was refused by RBAC: each container's log
    /// lines naming a 403 (`Forbidden`), and on the real control plane the
    /// 403s the API server's audit log records for the dispatcher's user.
    pub fn forbidden(&self) -> Vec<String> {
        let mut found: Vec<String> = Container::ALL
            .into_iter()
            .flat_map(|c| {
                self.log(c)
                    .lines()
                    .filter(|l| is_forbidden(l))
                    .map(|l| format!("{}: {l}", c.binary()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if let Some(real) = &self.real {
            found.extend(
                real.forbidden()
                    .into_iter()
                    .map(|r| format!("audit log: 403 {r}")),
            );
        }
        found
    }
}

/// Whether a log line tells of an API request of the dispatcher refused by
/// RBAC: the authorizer's words (`<resource> is forbidden: User "..." cannot
/// <verb> ...`), or a failed call logged with `reason=forbidden` (a 403).
/// An admission refusal the dispatcher quotes (a pod the API server would
/// not create, `pods "x" is forbidden: violates PodSecurity ...`, read from
/// a `FailedCreate` Event) is not one: no request of its own was refused.
pub fn is_forbidden(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let authorizer = lower
        .find("is forbidden: user ")
        .is_some_and(|at| lower[at..].contains(" cannot "));
    authorizer || lower.contains("reason=forbidden") || lower.contains("\"reason\":\"forbidden\"")
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(real) = self.real.take() {
            // The containers first, so nothing recreates what goes.
            for p in self.containers.values_mut() {
                if let Some(pid) = p.pid() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            real.stop_blocking();
        }
    }
}

/// Waits until `check` returns `Some`, polling every 50 ms, up to `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_err {
                Some(e) => {
                    bail!("timed out after {limit:?} waiting for {what} (last error: {e:#})")
                }
                None => bail!("timed out after {limit:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Enqueues the demo workload, prints how to reach everything, then prints a
/// status line whenever it changes until Ctrl-C (or, with
/// `exit_when_drained`, until every job is terminal). Returns whether every
/// job ended as the demo scripted it (true on Ctrl-C).
pub async fn run_demo(
    stack: &mut Stack,
    args: &crate::demo::Args,
    every: Duration,
) -> anyhow::Result<bool> {
    use crate::demo;
    let runs: Vec<_> = (0..args.runs).map(demo::demo_run).collect();
    if !runs.is_empty() {
        stack.backend.enqueue_batch(runs).await?;
    }
    for i in 0..args.publishes {
        stack.backend.enqueue_publish(demo::demo_publish(i)).await?;
    }
    let cluster = match &stack.real {
        None => format!("kube-sim {}", stack.cluster.url()),
        Some(real) => format!(
            "real control plane {} (Kubernetes from Go modules), {}\n           nodes {}: {}\n           control plane logs {}",
            real.access.api_url,
            if stack.options.start_containers {
                format!(
                    "the dispatcher through the fault proxy {}",
                    real.proxy.url()
                )
            } else {
                format!(
                    "the dispatcher's pod (from the chart) straight to the API server; its logs: kubectl logs -l app.kubernetes.io/instance={CHART_RELEASE} -c admitter"
                )
            },
            crate::real::NODES.join(", "),
            match &real.agent_url {
                Some(url) => format!("the node agent, {url}"),
                None => "real kubelets on containerd and runc, in the rig's node network; \
                    the dispatcher's pod reaches the API server through the kubernetes Service \
                    and the backend at its forwarded gateway address"
                    .to_owned(),
            },
            real.access.work_dir.join("logs").display()
        ),
    };
    println!(
        "\ndev stack up\n  backend  {}  (service token {SERVICE_TOKEN})\n  cluster  {}\n  kubectl  {} --kubeconfig {} get jobs,pods\n  logs     {}/*.log\n  metrics  admitter {}\n           lease-keeper {}\n           reaper {}\n           (/healthz, /readyz and /status beside each)\n\nenqueued {} runs and {} publishes; enqueue more with\n  curl -H 'Authorization: Bearer {SERVICE_TOKEN}' -H 'Content-Type: application/json' \\\n    -d '{{\"harness\":\"h\",\"model\":\"m\",\"case\":\"c\",\"jam\":null,\"launch_request\":{{\"sim\":{{\"duration_ms\":2000}}}}}}' {}/jobs\nCtrl-C stops everything.\n",
        stack.backend.url(),
        cluster,
        crate::real::kubectl(),
        stack.admin_kubeconfig.display(),
        stack.options.run_dir.display(),
        stack.metrics_url(Container::Admitter),
        stack.metrics_url(Container::LeaseKeeper),
        stack.metrics_url(Container::Reaper),
        args.runs,
        args.publishes,
        stack.backend.url(),
    );
    let mut last = String::new();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(true),
            _ = tokio::time::sleep(every) => {}
        }
        stack.check_alive()?;
        let runs = stack.backend.jobs().await?;
        let pubs = stack.backend.publish_jobs().await?;
        let line = format!(
            "runs: {} | publishes: {} | dispatcher: {}",
            demo::count_states(&runs),
            demo::count_states(&pubs),
            stack.dispatcher_view().await.line()
        );
        if line != last {
            println!("{line}");
            last = line;
        }
        if args.exit_when_drained
            && runs
                .iter()
                .chain(pubs.iter())
                .all(|j| demo::terminal(&j["state"]))
        {
            return Ok(demo::ended_as_scripted(&runs, &pubs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_forbidden;

    #[test]
    fn an_rbac_refusal_is_told_from_a_quoted_admission_refusal() {
        for refused in [
            r#"WARN create failed error=jobs.batch is forbidden: User "system:serviceaccount:tcab:tcab-dispatcher" cannot create resource "jobs" in API group "batch" in the namespace "tcab""#,
            "WARN cannot read the Job controller's FailedCreate Events reason=forbidden error=events is forbidden",
            r#"{"level":"WARN","fields":{"reason":"forbidden","message":"..."}}"#,
        ] {
            assert!(is_forbidden(refused), "{refused}");
        }
        for quoted in [
            r#"WARN judged dead: the cluster refuses to create the Job's pod cause=pod never started: the API server refused to create the Job's pod: FailedCreate: Error creating: pods "tcab-driver-a-b-" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true waited_s=403"#,
            r#"INFO reported dead cause=... pods "x" is forbidden: error looking up service account tcab/sa: serviceaccount "sa" not found"#,
        ] {
            assert!(!is_forbidden(quoted), "{quoted}");
        }
    }
}
