//! # tcab-kube-sim: a simulated Kubernetes cluster for tests and the dev stack
//!
//! A Kubernetes API server on `127.0.0.1` that speaks the real JSON over
//! HTTP for `batch/v1` Jobs and `v1` Pods, Nodes, Secrets, ServiceAccounts
//! and Events (create, get, list, watch, update, merge patch, delete,
//! deletecollection, `pods/log`, `pods/eviction`, Tables for kubectl,
//! discovery), with the control plane that makes them fail the way
//! Kubernetes 1.31+ fails: a Job controller with tracking finalizers and
//! delayed terminal conditions, a scheduler, kubelets on simulated
//! machines, the node lifecycle controller, the taint manager, pod GC and
//! the admission plugins a default server runs; plus a fake tcab driver and
//! publisher, RBAC mode, fault injection and counters. State is in memory
//! only.
//!
//! ## In-process use (tests)
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use tcab_kube_sim::{SimOptions, spawn};
//! let sim = spawn(SimOptions { namespace: "tcab".into(), ..SimOptions::default() }).await?;
//! // kube-rs: default namespace = the sim's, bearer = the admin token
//! let client = sim.kube_client(None)?;
//! // or from the kubeconfig file: sim.kubeconfig_path()
//! let counters = sim.admin().counters().await?;          // max live Jobs, requests
//! sim.admin().oom_kill("tcab", "some-pod").await.ok();    // faults
//! sim.admin().crash_node("sim-node-1").await.ok();        // node loss
//! # Ok(()) }
//! ```
//!
//! `SimOptions::speed` makes sim time run faster than real time (deadlines,
//! TTLs, grace periods and the fake driver's script all scale with it).
//!
//! ## Behaviour worth knowing
//!
//! - resourceVersions are one global counter; a watch from a version older
//!   than the history kept for its resource gets an `ERROR` event with a
//!   410 `Expired` Status
//!   (as a real server does); `POST /admin/watch/compact` forces that.
//! - Deleting a Job with no `propagationPolicy` orphans its pods, as for a
//!   real `batch/v1` Job; `Background` and `Foreground` delete them.
//! - A pod on a node is deleted gracefully: deletionTimestamp, SIGTERM to
//!   its program, SIGKILL after the grace period, the terminal status, then
//!   the kubelet's delete with grace 0; the object goes once its finalizers
//!   are gone ([`deletion`]).
//! - Job pods carry the `batch.kubernetes.io/job-tracking` finalizer; a
//!   Job fails with `FailureTarget` first and `Failed` only once none of its
//!   pods terminates any more ([`controller`]).
//! - Nodes ([`SimOptions::nodes`], two by default) host the pods; a crashed
//!   node keeps its pods as they were until the taint manager and pod GC
//!   act on upstream's timeline ([`nodes`], [`taints`], [`podgc`]).
//! - Job pods run a program chosen by the Job: `tcab.dev/job-kind=run` (or a
//!   `tcab-driver-` name) runs the fake driver, `publish` (or
//!   `tcab-publisher-`) the fake publisher; other pods run for the
//!   annotation `kube-sim.tcab.dev/run-seconds` (Job pods default to
//!   [`Timing::default_job_pod_run`], bare pods run until deleted) and exit
//!   with `kube-sim.tcab.dev/exit-code` (default 0).
//! - The fake driver follows docs/job-contract.md; its script is the `sim`
//!   key of `TCAB_LAUNCH_REQUEST` ([`driver::Script`]). The programs live in
//!   `tcab-workloads`, which the node agent (`devkit/node-agent`) runs too;
//!   here they run in sim time ([`kubelet::ProcCtx`] is their host). It retries backend
//!   errors other than 401/409 a few times; its terminal report is retried
//!   until `TCAB_DRIVER_REPORT_DEADLINE_SECONDS` (sim time) when that is set.
//!   It does not enforce `TCAB_DRIVER_FINISH_DEADLINE_SECONDS` (`hang`
//!   means hang, for deadline and fault tests).
//! - Writes are checked as the API server checks them: Jobs and Pods are
//!   defaulted and validated ([`validation`]: `422 Invalid` with upstream's
//!   causes), unknown fields are dropped with a `Warning` header or refused
//!   under `fieldValidation=Strict` ([`schema`]), `dryRun=All` changes
//!   nothing, DELETE honours `preconditions`, and boolean query parameters
//!   read as upstream's ([`http::params::parse_bool`]).
//! - A watch with a label or field selector gets ADDED when an object starts
//!   matching and DELETED (its previous content, at the change's
//!   resourceVersion) when it stops, live and in a replay, as the API
//!   server's watch cache sends them.
//! - Admin endpoints, fault rules (errors, 429 storms, latency, hung
//!   requests, silent watches, each scoped by verb, resource and token and
//!   bounded by a count or real seconds) and the API-server restart: see
//!   [`admin`].
//! - Every change to a Pod or a Job is kept in a timeline with its wall time
//!   and who made it (the RBAC token, the admin, the cluster itself):
//!   `GET /admin/audit` ([`audit`]).

pub mod admin;
pub mod admission;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod deletion;
pub mod discovery;
/// The fake driver and publisher, from the crate both kubelets of the rig share.
pub use tcab_workloads::driver;
pub mod events;
pub mod events_v1;
pub mod faults;
pub mod http;
/// The kubelet's image rules, from the crate both kubelets of the rig share.
pub use tcab_workloads::images;
pub mod kubeconfig;
pub mod kubelet;
pub mod nodes;
pub mod objects;
pub mod openapi;
pub mod podgc;
pub mod podstatus;
pub mod quantity;
pub mod rbac;
pub mod scheduler;
pub mod schema;
pub mod selector;
pub mod sim;
pub mod status;
pub mod store;
pub mod table;
pub mod taints;
pub mod validation;

pub use admin::{AdminClient, Counters};
pub use faults::{ApiFault, ApiFaultMode, FaultRule, FaultStatus, WatchScope};
pub use nodes::NodeSpec;
pub use rbac::Rbac;
pub use sim::{Propagation, Sim, Timing};

use anyhow::Context;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// How to start a sim.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where to write the kubeconfig; `None` writes a temporary file that is
    /// removed when the handle is dropped.
    pub kubeconfig_out: Option<PathBuf>,
    /// The namespace written to the kubeconfig (every namespace exists).
    pub namespace: String,
    /// The bearer token written to the kubeconfig (unrestricted).
    pub admin_token: String,
    /// RBAC mode: the Role manifest (YAML text) and the token it binds.
    pub rbac: Option<Rbac>,
    /// How many times faster than real time the sim's clock runs.
    pub speed: f64,
    /// Delays of the simulated cluster.
    pub timing: Timing,
    /// How many change events are kept for watch resumption, per resource
    /// (as the API server's watch cache keeps one per resource).
    pub history: usize,
    /// Run the Job controller (off: Jobs never get pods; for benchmarks).
    pub controller: bool,
    /// The cluster's nodes (default: two of [`NodeSpec::standard`] size).
    pub nodes: Vec<NodeSpec>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig_out: None,
            namespace: "default".into(),
            admin_token: "kube-sim-admin".into(),
            rbac: None,
            speed: 1.0,
            timing: Timing::default(),
            history: 50_000,
            controller: true,
            nodes: NodeSpec::cluster(2),
        }
    }
}

/// A running sim. Dropping it stops the server, the controller and every pod.
pub struct SimHandle {
    addr: SocketAddr,
    url: String,
    kubeconfig: PathBuf,
    temp_kubeconfig: bool,
    sim: Arc<Sim>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The kubeconfig written at start.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }
    /// The kubeconfig's namespace.
    pub fn namespace(&self) -> &str {
        &self.sim.namespace
    }
    /// The kubeconfig's (unrestricted) token.
    pub fn admin_token(&self) -> &str {
        &self.sim.admin_token
    }
    /// A client for the admin endpoints.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(&self.url)
    }
    /// The shared state, for in-process inspection (store, clock, faults).
    pub fn sim(&self) -> &Arc<Sim> {
        &self.sim
    }
    /// The kube-rs configuration for this sim: plain HTTP to
    /// [`SimHandle::url`], default namespace [`SimHandle::namespace`], bearer
    /// `token` (the admin token when `None`, e.g. `Some(rbac_token)` for RBAC
    /// mode). For tweaks such as `default_retry`; else see
    /// [`SimHandle::kube_client`].
    pub fn kube_config(&self, token: Option<&str>) -> anyhow::Result<kube::Config> {
        let url = self
            .url
            .parse()
            .with_context(|| format!("the sim's URL {:?}", self.url))?;
        let mut cfg = kube::Config::new(url);
        cfg.default_namespace = self.sim.namespace.clone();
        cfg.auth_info.token = Some(token.unwrap_or(&self.sim.admin_token).to_owned().into());
        Ok(cfg)
    }
    /// A kube-rs client built from [`SimHandle::kube_config`]. Installs the
    /// ring rustls provider if none is installed yet.
    pub fn kube_client(&self, token: Option<&str>) -> anyhow::Result<kube::Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        kube::Client::try_from(self.kube_config(token)?)
            .context("building the kube-rs client for the sim")
    }
    /// Writes another kubeconfig for this sim with a different token (e.g.
    /// the RBAC token).
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> std::io::Result<()> {
        kubeconfig::write(path, &self.url, &self.sim.namespace, token)
    }
    /// Stops everything now.
    pub fn shutdown(mut self) {
        self.stop();
    }
    fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        // Connections outlive the server task: cut them, so no hung request
        // or watch stays behind.
        self.sim.faults.net.stop();
        self.sim.halt();
        if self.temp_kubeconfig {
            let _ = std::fs::remove_file(&self.kubeconfig);
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a sim: binds the listener, writes the kubeconfig, starts the
/// server and the Job controller.
pub async fn spawn(opts: SimOptions) -> anyhow::Result<SimHandle> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let url = format!("http://{addr}");
    let sim = Sim::new(
        clock::SimClock::new(opts.speed),
        opts.timing.clone(),
        opts.history,
        opts.rbac.clone(),
        opts.namespace.clone(),
        opts.admin_token.clone(),
        opts.nodes.clone(),
    )
    .context("building the HTTP client of the fake drivers")?;
    let (kubeconfig, temp) = match &opts.kubeconfig_out {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "kube-sim-{}-{}.kubeconfig",
                addr.port(),
                uuid::Uuid::new_v4().simple()
            )),
            true,
        ),
    };
    kubeconfig::write(&kubeconfig, &url, &opts.namespace, &opts.admin_token)
        .with_context(|| format!("writing the kubeconfig {}", kubeconfig.display()))?;
    let mut tasks = Vec::new();
    if opts.controller {
        tasks.push(tokio::spawn(controller::run(sim.clone())));
    }
    tasks.push(tokio::spawn(scheduler::run(sim.clone())));
    tasks.push(tokio::spawn(kubelet::run(sim.clone())));
    tasks.push(tokio::spawn(nodes::run(sim.clone())));
    tasks.push(tokio::spawn(taints::run(sim.clone())));
    tasks.push(tokio::spawn(podgc::run(sim.clone())));
    let app = http::router(http::AppState {
        sim: sim.clone(),
        addr: addr.to_string(),
    });
    let listener = faults::FaultListener::new(listener, sim.faults.net.clone())
        .context("reading the bound address")?;
    let app = app.into_make_service_with_connect_info::<faults::ConnTag>();
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "kube-sim server stopped");
        }
    }));
    Ok(SimHandle {
        addr,
        url,
        kubeconfig,
        temp_kubeconfig: temp,
        sim,
        tasks,
    })
}
