//! Starting and stopping the four components.
//!
//! Order (each step waits for the one before): etcd (ready when it prints
//! its `etcd ready:` line, naming the port it bound), kube-apiserver (ready at
//! `/readyz` 200), then kube-controller-manager and kube-scheduler together
//! (ready at `/healthz` and `/readyz` 200), then the namespaces and their
//! `default` ServiceAccounts. Stopping goes the other way, etcd last: an API
//! server whose etcd is gone hangs on SIGTERM.

use crate::access::{self, Access, ClientError, Credential, WaitError};
use crate::bins;
use crate::pki::{self, PkiError, PkiFiles};
use crate::process::{Component, Stopped};
use crate::settings::{Settings, go_duration};
use kube::config::AuthInfo;
use rand::Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// How many lines of each log a failed start shows.
pub const TAIL_LINES: usize = 30;

/// How many times a component is started again on a port taken between
/// choosing and binding it.
const PORT_ATTEMPTS: usize = 5;

/// The controllers we run (1.36's canonical names; see devkit/real-cluster/README.md).
pub const CONTROLLERS: [&str; 14] = [
    "job-controller",
    "pod-garbage-collector-controller",
    "garbage-collector-controller",
    "ttl-after-finished-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "clusterrole-aggregation-controller",
    // It copies a ResourceQuota's spec.hard into its status and keeps
    // status.used; the ResourceQuota admission plugin enforces only what
    // the status holds, so without it a quota refuses nothing.
    "resourcequota-controller",
];

/// The service-account token issuer (what in-cluster clients expect).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A start that failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The binaries are not built (the message says how to build them).
    #[error("{0}")]
    NotBuilt(String),
    #[error("preparing the work dir {}", dir.display())]
    Prepare {
        dir: PathBuf,
        #[source]
        source: PrepareError,
    },
    /// A component did not come up: everything started was stopped, the work
    /// dir (with every log) is kept.
    #[error("the control plane did not come up: {failure}\nwork dir kept at {}; the last lines of each log:\n{tails}", work_dir.display())]
    Failed {
        failure: Failure,
        work_dir: PathBuf,
        tails: LogTails,
    },
}

/// What went wrong while preparing the work dir.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Why a start failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("cannot start {component}")]
    Spawn {
        component: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{component} exited ({status}) while {during}")]
    Exited {
        component: &'static str,
        status: String,
        during: String,
    },
    #[error("{component} said it is ready in a way we do not understand: {line}")]
    Unexpected {
        component: &'static str,
        line: String,
    },
    #[error("timed out after {after:?} waiting for {what}; last seen: {last_seen}")]
    Timeout {
        what: String,
        after: Duration,
        last_seen: String,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// The last lines of each component's log.
#[derive(Debug, Clone, Default)]
pub struct LogTails(pub Vec<LogTail>);

/// The last lines of one log.
#[derive(Debug, Clone)]
pub struct LogTail {
    pub component: &'static str,
    pub path: PathBuf,
    pub lines: String,
}

impl fmt::Display for LogTails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.0 {
            writeln!(f, "--- {} ({}):", t.component, t.path.display())?;
            writeln!(f, "{}", t.lines)?;
        }
        Ok(())
    }
}

impl StartError {
    /// The log tails of a failed start.
    pub fn log_tails(&self) -> Option<&LogTails> {
        match self {
            StartError::Failed { tails, .. } => Some(tails),
            _ => None,
        }
    }
}

/// How long each step of the start took, from the start call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StartTimes {
    pub etcd_ready: Duration,
    pub apiserver_ready: Duration,
    pub controllers_ready: Duration,
    /// The `default` ServiceAccount in every namespace asked for: the whole
    /// start without a node agent.
    pub default_service_accounts: Duration,
    /// Every node Ready and untainted, when the launcher runs the node agent.
    pub nodes_ready: Option<Duration>,
}

/// The log path of each component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logs {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    /// Written only when the launcher runs the node agent.
    pub node_agent: PathBuf,
}

/// The ports in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub etcd: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

/// A running control plane. `stop().await` stops it in order; dropping it
/// kills every component at once (SIGKILL to each process group) and reaps
/// them. A temporary work dir is removed with it.
pub struct ControlPlane {
    access: Access,
    components: Vec<Component>,
    logs: Logs,
    ports: Ports,
    times: StartTimes,
    stop_grace: Duration,
    ready_timeout: Duration,
    /// The API server's program and command line, for a restart.
    apiserver: (PathBuf, Vec<String>),
    temp_dir: Option<tempfile::TempDir>,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("api_url", &self.access.api_url)
            .field("work_dir", &self.access.work_dir)
            .field("pids", &self.pids())
            .finish()
    }
}

impl std::ops::Deref for ControlPlane {
    type Target = Access;
    fn deref(&self) -> &Access {
        &self.access
    }
}

/// The exit of each component after a stop, in stop order.
#[derive(Debug, Clone)]
pub struct StopReport(pub Vec<(&'static str, String)>);

/// A restart of the API server that did not end with it ready.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("the control plane runs no API server")]
    NoApiServer,
    #[error("cannot start kube-apiserver again")]
    Spawn(#[source] std::io::Error),
    #[error(
        "kube-apiserver exited ({status}) while starting again; the last lines of its log:\n{tail}"
    )]
    Exited { status: String, tail: String },
    #[error(
        "kube-apiserver was not ready within {after:?} of its restart; last seen: {last_seen}; the last lines of its log:\n{tail}"
    )]
    Timeout {
        after: Duration,
        last_seen: String,
        tail: String,
    },
    /// `Access::restart_apiserver` of a control plane with no owner process
    /// to ask (one started in this process: call `ControlPlane::restart_apiserver`).
    #[error(
        "this control plane has no owner process to ask for a restart (a shared one's owner serves restarts; call ControlPlane::restart_apiserver on your own)"
    )]
    NoOwner,
    #[error("asking the shared control plane's owner ({}) for a restart", path.display())]
    Owner {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the shared control plane's owner could not restart the API server: {0}")]
    Refused(String),
}

/// A pause or a resume of kube-controller-manager that did not take.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("the control plane runs no kube-controller-manager")]
    NoControllerManager,
    #[error("kube-controller-manager has exited ({0})")]
    Exited(String),
    #[error("cannot send {signal} to kube-controller-manager")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "kube-controller-manager was not stopped within {after:?} of its SIGSTOP; last seen: {last_seen}"
    )]
    NotStopped { after: Duration, last_seen: String },
    #[error(
        "kube-controller-manager's /healthz did not answer 200 within {after:?} of its SIGCONT; last seen: {last_seen}"
    )]
    NotResumed { after: Duration, last_seen: String },
    /// `Access::pause_controller_manager` (or resume) of a control plane
    /// with no owner process to ask (one started in this process: call the
    /// `ControlPlane` method).
    #[error(
        "this control plane has no owner process to ask to {0} (a shared one's owner does; call ControlPlane's own method on yours)"
    )]
    NoOwner(&'static str),
    #[error("asking the shared control plane's owner ({}) to {what}", path.display())]
    Owner {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the shared control plane's owner could not {what}: {why}")]
    Refused { what: &'static str, why: String },
}

/// How long a pause may take to stop every thread of the controller-manager
/// (it takes milliseconds).
const PAUSE_LIMIT: Duration = Duration::from_secs(10);

impl ControlPlane {
    /// Starts etcd, kube-apiserver, kube-controller-manager and
    /// kube-scheduler and waits until they are ready (see the module's doc),
    /// within `settings.ready_timeout`.
    pub async fn start(settings: Settings) -> Result<ControlPlane, StartError> {
        let bin_dir = match &settings.bin_dir {
            Some(dir) => dir.clone(),
            None => bins::default_bin_dir().map_err(StartError::NotBuilt)?,
        };
        let missing = bins::missing(&bin_dir);
        if !missing.is_empty() {
            return Err(StartError::NotBuilt(format!(
                "the control plane's binaries are not built ({} missing in {}): run scripts/control-plane build",
                missing.join(", "),
                bin_dir.display()
            )));
        }
        let (work_dir, temp_dir) = match &settings.work_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| StartError::Prepare {
                    dir: dir.clone(),
                    source: e.into(),
                })?;
                (dir.clone(), None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("tcab-control-plane-")
                    .tempdir()
                    .map_err(|e| StartError::Prepare {
                        dir: std::env::temp_dir(),
                        source: e.into(),
                    })?;
                (temp.path().to_owned(), Some(temp))
            }
        };
        let prepared = prepare(&work_dir, &settings).map_err(|source| StartError::Prepare {
            dir: work_dir.clone(),
            source,
        })?;
        let mut launch = Launch {
            bin_dir,
            work_dir,
            settings,
            prepared,
            components: Vec::new(),
            started: Instant::now(),
            apiserver_args: Vec::new(),
        };
        match launch.run().await {
            Ok((access, ports, times)) => Ok(ControlPlane {
                access,
                logs: launch.prepared.logs.clone(),
                components: std::mem::take(&mut launch.components),
                ports,
                times,
                stop_grace: launch.settings.stop_grace,
                ready_timeout: launch.settings.ready_timeout,
                apiserver: (
                    launch.bin_dir.join("kube-apiserver"),
                    std::mem::take(&mut launch.apiserver_args),
                ),
                temp_dir,
            }),
            Err(failure) => {
                // Reverse order, etcd last; a failed start need not be gentle
                // for long.
                let grace = launch.settings.stop_grace.min(Duration::from_secs(5));
                for c in launch.components.iter_mut().rev() {
                    c.stop(grace).await;
                }
                let tails = LogTails(
                    launch
                        .prepared
                        .logs
                        .all()
                        .into_iter()
                        .filter(|(_, path)| std::fs::metadata(path).is_ok_and(|m| m.len() > 0))
                        .map(|(component, path)| LogTail {
                            component,
                            lines: crate::process::tail(&path, TAIL_LINES),
                            path,
                        })
                        .collect(),
                );
                let work_dir = match temp_dir {
                    Some(temp) => temp.keep(),
                    None => launch.work_dir.clone(),
                };
                Err(StartError::Failed {
                    failure,
                    work_dir,
                    tails,
                })
            }
        }
    }

    /// How to reach it (also through `Deref`).
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Each component's log.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// The ports it listens on (all on 127.0.0.1).
    pub fn ports(&self) -> Ports {
        self.ports
    }

    /// How long the start took, step by step.
    pub fn start_times(&self) -> StartTimes {
        self.times
    }

    /// The PID of each component in start order (etcd first); each is also
    /// its process group's id.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.components.iter().map(|c| (c.name, c.pid())).collect()
    }

    /// A component that has exited since the start, with its status.
    pub fn exited(&mut self) -> Option<(&'static str, String)> {
        self.components
            .iter_mut()
            .find_map(|c| c.exited().map(|s| (c.name, s.to_string())))
    }

    /// Keeps the work dir after the stop (a temporary one is otherwise
    /// removed), e.g. to read the logs of a component that died.
    pub fn keep_work_dir(&mut self) -> &Path {
        if let Some(temp) = self.temp_dir.take() {
            let _ = temp.keep();
        }
        &self.access.work_dir
    }

    /// Restarts the API server as a crash and a supervisor would: SIGTERM
    /// (SIGKILL after the stop grace), then the same command line again (same
    /// port, same etcd, same audit log, appended to), and waits until
    /// `/readyz` answers 200, within the start's `ready_timeout`. Clients see
    /// their connections end and, while it is down, refused; watches resumed
    /// from a resourceVersion older than the new watch cache get `410 Expired`.
    /// Returns how long the API was away.
    pub async fn restart_apiserver(&mut self) -> Result<Duration, RestartError> {
        let began = Instant::now();
        let i = self
            .components
            .iter()
            .position(|c| c.name == "kube-apiserver")
            .ok_or(RestartError::NoApiServer)?;
        self.components[i].stop(self.stop_grace).await;
        let (program, args) = &self.apiserver;
        let c = Component::spawn("kube-apiserver", program, args, &self.logs.apiserver)
            .map_err(RestartError::Spawn)?;
        self.components[i] = c;
        let http = health_client().map_err(RestartError::Spawn)?;
        let url = format!("{}/readyz", self.access.api_url);
        let tail = |log: &Path| crate::process::tail(log, TAIL_LINES);
        loop {
            let seen = match get_ok(&http, &url).await {
                Ok(()) => return Ok(began.elapsed()),
                Err(seen) => seen,
            };
            if let Some(status) = self.components[i].exited() {
                return Err(RestartError::Exited {
                    status: status.to_string(),
                    tail: tail(&self.logs.apiserver),
                });
            }
            if began.elapsed() >= self.ready_timeout {
                return Err(RestartError::Timeout {
                    after: self.ready_timeout,
                    last_seen: seen,
                    tail: tail(&self.logs.apiserver),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Pauses kube-controller-manager as a controller-manager that is down
    /// looks to the cluster: SIGSTOP to its process, then waits until every
    /// thread of it is stopped. Until it resumes no controller of it acts:
    /// a Job gets no pod and no Event, a node is not tainted, nothing is
    /// garbage-collected; the API server, etcd, the scheduler and the nodes
    /// go on. Its process, port and connections stay (the API server may
    /// close a watch it stopped reading; it is opened again on resume).
    /// Pausing a paused one is a no-op. A stop or a drop of the control
    /// plane ends a paused one as a running one. Returns how long it took.
    pub async fn pause_controller_manager(&mut self) -> Result<Duration, PauseError> {
        let began = Instant::now();
        let c = self.controller_manager()?;
        let pid = c.pid();
        c.signal(nix::sys::signal::Signal::SIGSTOP)
            .map_err(|source| PauseError::Signal {
                signal: "SIGSTOP",
                source,
            })?;
        loop {
            let seen = match crate::process::all_threads_stopped(pid) {
                Ok(()) => return Ok(began.elapsed()),
                Err(seen) => seen,
            };
            if began.elapsed() >= PAUSE_LIMIT {
                return Err(PauseError::NotStopped {
                    after: PAUSE_LIMIT,
                    last_seen: seen,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Resumes a paused kube-controller-manager (SIGCONT) and waits until its
    /// `/healthz` answers 200, within the start's `ready_timeout`: its
    /// controllers take up where they stopped (a Job made meanwhile gets its
    /// pod). Resuming a running one is a no-op. Returns how long it took.
    pub async fn resume_controller_manager(&mut self) -> Result<Duration, PauseError> {
        let began = Instant::now();
        let port = self.ports.controller_manager;
        let limit = self.ready_timeout;
        self.controller_manager()?
            .signal(nix::sys::signal::Signal::SIGCONT)
            .map_err(|source| PauseError::Signal {
                signal: "SIGCONT",
                source,
            })?;
        let http = health_client().map_err(|e| PauseError::NotResumed {
            after: Duration::ZERO,
            last_seen: format!("no client for its /healthz: {e}"),
        })?;
        let url = format!("https://127.0.0.1:{port}/healthz");
        loop {
            let seen = match get_ok(&http, &url).await {
                Ok(()) => return Ok(began.elapsed()),
                Err(seen) => seen,
            };
            self.controller_manager()?;
            if began.elapsed() >= limit {
                return Err(PauseError::NotResumed {
                    after: limit,
                    last_seen: seen,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The running kube-controller-manager.
    fn controller_manager(&mut self) -> Result<&mut Component, PauseError> {
        let c = self
            .components
            .iter_mut()
            .find(|c| c.name == "kube-controller-manager")
            .ok_or(PauseError::NoControllerManager)?;
        match c.exited() {
            Some(status) => Err(PauseError::Exited(status.to_string())),
            None => Ok(c),
        }
    }

    /// Stops every component in reverse start order (SIGTERM, then SIGKILL
    /// after the grace), etcd last, and removes a temporary work dir. The
    /// scheduler exiting 1 and the controller-manager dying of SIGTERM are
    /// their normal ways out. A paused controller-manager is continued after
    /// its SIGTERM, so it stops the same way.
    pub async fn stop(mut self) -> StopReport {
        let mut report = Vec::new();
        while let Some(mut c) = self.components.pop() {
            let how = match c.stop(self.stop_grace).await {
                Stopped::Already(status) => format!("had exited ({status})"),
                Stopped::Terminated(status) => format!("stopped ({status})"),
                Stopped::Killed => format!("killed after {:?}", self.stop_grace),
            };
            report.push((c.name, how));
        }
        if let Some(temp) = self.temp_dir.take() {
            let _ = temp.close();
        }
        StopReport(report)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(mut c) = self.components.pop() {
            c.kill_now();
        }
    }
}

/// The files written before anything starts.
struct Prepared {
    pki: PkiFiles,
    token_file: PathBuf,
    /// Where the API server writes its audit log, when it does.
    audit_log: Option<PathBuf>,
    logs: Logs,
    etcd_data: PathBuf,
    admin: Credential,
    controller_manager: Credential,
    scheduler: Credential,
    nodes: BTreeMap<String, Credential>,
    identities: BTreeMap<String, Credential>,
}

impl Logs {
    fn all(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("etcd", self.etcd.clone()),
            ("kube-apiserver", self.apiserver.clone()),
            ("kube-controller-manager", self.controller_manager.clone()),
            ("kube-scheduler", self.scheduler.clone()),
            ("node-agent", self.node_agent.clone()),
        ]
    }
}

fn random_token() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Keys, certificates and the token file; the kubeconfigs come once the API
/// server's port is known.
fn prepare(dir: &Path, settings: &Settings) -> Result<Prepared, PrepareError> {
    // A fresh cluster every start, also in a given work dir used before.
    match std::fs::remove_dir_all(dir.join("etcd")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    for sub in ["certs", "logs", "etcd", "kubeconfigs"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let pki = pki::generate(&dir.join("certs"))?;
    let credential = |user: &str, groups: &[&str], file: &str| Credential {
        user: user.to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        token: random_token(),
        kubeconfig: dir.join("kubeconfigs").join(format!("{file}.kubeconfig")),
    };
    let admin = credential("admin", &["system:masters"], "admin");
    // The subjects of the bootstrap ClusterRoleBindings of the same names.
    let controller_manager = credential(
        "system:kube-controller-manager",
        &[],
        "kube-controller-manager",
    );
    let scheduler = credential("system:kube-scheduler", &[], "kube-scheduler");
    let nodes: BTreeMap<String, Credential> = settings
        .nodes
        .iter()
        .map(|n| {
            (
                n.clone(),
                credential(
                    &format!("system:node:{n}"),
                    &["system:nodes"],
                    &format!("node-{n}"),
                ),
            )
        })
        .collect();
    let identities: BTreeMap<String, Credential> = settings
        .identities
        .iter()
        .map(|i| {
            let groups: Vec<&str> = i.groups.iter().map(String::as_str).collect();
            (i.name.clone(), credential(&i.name, &groups, &i.name))
        })
        .collect();
    // token,user,uid,"group1,group2"
    let mut csv = String::new();
    for c in [&admin, &controller_manager, &scheduler]
        .into_iter()
        .chain(nodes.values())
        .chain(identities.values())
    {
        csv.push_str(&format!("{},{},{}", c.token, c.user, c.user));
        if !c.groups.is_empty() {
            csv.push_str(&format!(",\"{}\"", c.groups.join(",")));
        }
        csv.push('\n');
    }
    let token_file = dir.join("certs/tokens.csv");
    std::fs::write(&token_file, csv)?;
    let logs = dir.join("logs");
    let logs = Logs {
        etcd: logs.join("etcd.log"),
        apiserver: logs.join("kube-apiserver.log"),
        controller_manager: logs.join("kube-controller-manager.log"),
        scheduler: logs.join("kube-scheduler.log"),
        node_agent: logs.join("node-agent.log"),
    };
    // Each start's logs alone (a ready line from before must not count).
    for (_, log) in logs.all() {
        std::fs::write(log, "")?;
    }
    let audit_log = settings.audit.then(|| dir.join("logs/audit.jsonl"));
    if let Some(audit) = &audit_log {
        std::fs::write(audit, "")?;
    }
    Ok(Prepared {
        pki,
        token_file,
        audit_log,
        logs,
        etcd_data: dir.join("etcd"),
        admin,
        controller_manager,
        scheduler,
        nodes,
        identities,
    })
}

/// A free port on 127.0.0.1 (free now: another process may take it before
/// the component binds it, which the start notices and retries).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One start in progress.
struct Launch {
    bin_dir: PathBuf,
    work_dir: PathBuf,
    settings: Settings,
    prepared: Prepared,
    components: Vec<Component>,
    started: Instant,
    /// The API server's arguments, once it is up.
    apiserver_args: Vec<String>,
}

/// Whether a component's log says its port was taken.
fn port_taken(log: &Path) -> bool {
    crate::process::tail(log, 50).contains("address already in use")
}

impl Launch {
    fn deadline(&self) -> Instant {
        self.started + self.settings.ready_timeout
    }

    fn spawn(
        &mut self,
        component: &'static str,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<(), Failure> {
        let program = self.bin_dir.join(component);
        self.spawn_program(component, &program, args, log)
    }

    fn spawn_program(
        &mut self,
        component: &'static str,
        program: &Path,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<(), Failure> {
        let c = Component::spawn(component, program, &args, &log)
            .map_err(|source| Failure::Spawn { component, source })?;
        self.components.push(c);
        Ok(())
    }

    /// Polls `check` until it gives a value, failing when any component has
    /// exited or the start's deadline passes.
    async fn wait<T>(
        &mut self,
        what: &str,
        mut check: impl AsyncFnMut() -> Result<T, String>,
    ) -> Result<T, Failure> {
        let deadline = self.deadline();
        loop {
            let seen = match check().await {
                Ok(value) => return Ok(value),
                Err(seen) => seen,
            };
            for c in &mut self.components {
                if let Some(status) = c.exited() {
                    return Err(Failure::Exited {
                        component: c.name,
                        status: status.to_string(),
                        during: format!("waiting for {what}"),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Failure::Timeout {
                    what: what.to_owned(),
                    after: self.settings.ready_timeout,
                    last_seen: seen,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run(&mut self) -> Result<(Access, Ports, StartTimes), Failure> {
        let mut times = StartTimes::default();
        let etcd = self.start_etcd().await?;
        times.etcd_ready = self.started.elapsed();

        let http = health_client().map_err(|e| Failure::Unexpected {
            component: "kube-apiserver",
            line: format!("cannot build an HTTP client: {e}"),
        })?;
        let api_port = self.start_apiserver(etcd, &http).await?;
        times.apiserver_ready = self.started.elapsed();
        let access = self.write_kubeconfigs(api_port)?;

        let (kcm_port, sched_port) = self.start_controllers(&access, &http).await?;
        times.controllers_ready = self.started.elapsed();

        let client = access.admin_client().await?;
        let mut namespaces = vec!["default".to_owned()];
        namespaces.extend(self.settings.namespaces.iter().cloned());
        for ns in &namespaces {
            let client = client.clone();
            self.wait(&format!("namespace {ns} created"), async || {
                access::create_namespace(&client, ns)
                    .await
                    .map_err(|e| crate::error_chain(&e))
            })
            .await?;
        }
        for ns in &namespaces {
            let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
                kube::Api::namespaced(client.clone(), ns);
            self.wait(
                &format!("the default ServiceAccount in {ns}"),
                async || match sas.get_opt("default").await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err("not there yet".into()),
                    Err(e) => Err(e.to_string()),
                },
            )
            .await?;
        }
        times.default_service_accounts = self.started.elapsed();
        let mut access = access;
        if let Some(agent) = self.settings.node_agent.clone() {
            access.node_agent_ready = self.start_node_agent(&agent, &access, &client).await?;
            times.nodes_ready = Some(self.started.elapsed());
        }
        let ports = Ports {
            etcd,
            apiserver: api_port,
            controller_manager: kcm_port,
            scheduler: sched_port,
        };
        Ok((access, ports, times))
    }

    /// The node agent, then its ready line (if it has one) and every node
    /// Ready without the not-ready taint.
    async fn start_node_agent(
        &mut self,
        agent: &crate::settings::NodeAgent,
        access: &Access,
        client: &kube::Client,
    ) -> Result<Option<String>, Failure> {
        let node_access = self.work_dir.join("node-access.json");
        let json = serde_json::to_vec_pretty(&access.node_access()).unwrap_or_default();
        std::fs::write(&node_access, json).map_err(|source| Failure::Spawn {
            component: "node-agent",
            source,
        })?;
        let args: Vec<String> = if agent.args.is_empty() {
            let mut args: Vec<String> = ["--api-url", "{api_url}", "--ca-file", "{ca_file}"]
                .into_iter()
                .chain(["--tokens", "{tokens}"])
                .map(String::from)
                .collect();
            for n in &self.settings.nodes {
                args.extend(["--node".to_owned(), n.clone()]);
            }
            args
        } else {
            agent.args.clone()
        };
        let args = args
            .iter()
            .map(|a| {
                a.replace("{api_url}", &access.api_url)
                    .replace("{ca_file}", &access.ca_cert.display().to_string())
                    .replace("{tokens}", &access.token_file.display().to_string())
                    .replace("{node_access}", &node_access.display().to_string())
                    .replace("{work_dir}", &self.work_dir.display().to_string())
            })
            .collect();
        let log = self.prepared.logs.node_agent.clone();
        self.spawn_program("node-agent", &agent.program, args, log.clone())?;
        let ready = match &agent.ready_prefix {
            Some(prefix) => Some(
                self.wait("the node agent's ready line", async || {
                    crate::process::tail(&log, 200)
                        .lines()
                        .find_map(|l| l.strip_prefix(prefix.as_str()))
                        .map(|rest| rest.trim().to_owned())
                        .ok_or_else(|| format!("no `{prefix}` line yet"))
                })
                .await?,
            ),
            None => None,
        };
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        let names = self.settings.nodes.clone();
        self.wait(
            &format!("nodes {} Ready and untainted", names.join(", ")),
            async || access::nodes_ready(&nodes, &names).await,
        )
        .await?;
        Ok(ready)
    }

    /// etcd on port 0 (no race): the ready line names the port it bound.
    async fn start_etcd(&mut self) -> Result<u16, Failure> {
        let p = &self.prepared;
        let mut args = vec![
            format!("--data-dir={}", p.etcd_data.display()),
            "--client-url=http://127.0.0.1:0".into(),
            "--listen-peer-urls=http://127.0.0.1:0".into(),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        args.extend(self.settings.extra_args.etcd.iter().cloned());
        let log = p.logs.etcd.clone();
        self.spawn("etcd", args, log.clone())?;
        let line = self
            .wait("etcd's ready line", async || {
                crate::process::tail(&log, 200)
                    .lines()
                    .find(|l| l.starts_with("etcd ready:"))
                    .map(str::to_owned)
                    .ok_or_else(|| "no `etcd ready:` line yet".to_owned())
            })
            .await?;
        // etcd ready: client http://127.0.0.1:45317 peer http://... data ...
        line.split_whitespace()
            .skip_while(|w| *w != "client")
            .nth(1)
            .and_then(|url| url.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .ok_or(Failure::Unexpected {
                component: "etcd",
                line,
            })
    }

    async fn start_apiserver(&mut self, etcd: u16, http: &reqwest::Client) -> Result<u16, Failure> {
        let p = &self.prepared;
        let s = &self.settings;
        let t = &s.timings;
        let base = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            format!("--cert-dir={}", self.work_dir.join("certs").display()),
            format!("--tls-cert-file={}", p.pki.serving_cert.display()),
            format!("--tls-private-key-file={}", p.pki.serving_key.display()),
            format!("--client-ca-file={}", p.pki.ca_cert.display()),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", p.pki.sa_pub.display()),
            format!(
                "--service-account-signing-key-file={}",
                p.pki.sa_key.display()
            ),
            format!("--token-auth-file={}", p.token_file.display()),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            format!(
                "--default-not-ready-toleration-seconds={}",
                t.not_ready_toleration.as_secs()
            ),
            format!(
                "--default-unreachable-toleration-seconds={}",
                t.unreachable_toleration.as_secs()
            ),
            format!(
                "--etcd-compaction-interval={}",
                go_duration(t.etcd_compaction_interval)
            ),
            format!("--watch-cache={}", s.watch_cache),
        ];
        let mut base = base;
        if let Some(log) = &p.audit_log {
            let policy = self.work_dir.join("certs/audit-policy.yaml");
            std::fs::write(&policy, crate::AUDIT_POLICY).map_err(|source| Failure::Spawn {
                component: "kube-apiserver",
                source,
            })?;
            base.extend([
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", log.display()),
                "--audit-log-format=json".into(),
                // Each event is written before the request is answered, so
                // a reader that saw an answer finds its event.
                "--audit-log-mode=blocking".into(),
                "--audit-log-maxbackup=0".into(),
            ]);
        }
        let extra = s.extra_args.apiserver.clone();
        let log = p.logs.apiserver.clone();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port().map_err(|source| Failure::Spawn {
                component: "kube-apiserver",
                source,
            })?;
            let mut args = base.clone();
            args.push(format!("--secure-port={port}"));
            args.extend(extra.iter().cloned());
            self.spawn("kube-apiserver", args.clone(), log.clone())?;
            let url = format!("https://127.0.0.1:{port}/readyz");
            match self
                .wait("kube-apiserver's /readyz", async || {
                    get_ok(http, &url).await
                })
                .await
            {
                Ok(()) => {
                    self.apiserver_args = args;
                    return Ok(port);
                }
                Err(Failure::Exited { component, .. })
                    if component == "kube-apiserver"
                        && attempt < PORT_ATTEMPTS
                        && port_taken(&log) =>
                {
                    self.components.pop();
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }

    fn write_kubeconfigs(&self, api_port: u16) -> Result<Access, Failure> {
        let p = &self.prepared;
        let api_url = format!("https://127.0.0.1:{api_port}");
        let access = Access {
            api_url: api_url.clone(),
            ca_cert: p.pki.ca_cert.clone(),
            ca_key: p.pki.ca_key.clone(),
            work_dir: self.work_dir.clone(),
            admin: p.admin.clone(),
            controller_manager: p.controller_manager.clone(),
            scheduler: p.scheduler.clone(),
            nodes: p.nodes.clone(),
            identities: p.identities.clone(),
            token_file: p.token_file.clone(),
            audit_log: p.audit_log.clone(),
            node_agent_ready: None,
            control_socket: None,
        };
        for c in [&access.admin, &access.controller_manager, &access.scheduler]
            .into_iter()
            .chain(access.nodes.values())
            .chain(access.identities.values())
        {
            let user = AuthInfo {
                token: Some(c.token.clone().into()),
                ..AuthInfo::default()
            };
            access::write_kubeconfig(&c.kubeconfig, &api_url, &access.ca_cert, user, "default")?;
        }
        Ok(access)
    }

    async fn start_controllers(
        &mut self,
        access: &Access,
        http: &reqwest::Client,
    ) -> Result<(u16, u16), Failure> {
        let p = &self.prepared;
        let t = &self.settings.timings;
        let kcm_base = vec![
            format!(
                "--kubeconfig={}",
                access.controller_manager.kubeconfig.display()
            ),
            "--bind-address=127.0.0.1".into(),
            "--leader-elect=false".into(),
            // Each controller as its own ServiceAccount with its bootstrap
            // role: as system:kube-controller-manager, the Job controller
            // cannot create pods.
            "--use-service-account-credentials=true".into(),
            format!("--controllers={}", CONTROLLERS.join(",")),
            format!(
                "--service-account-private-key-file={}",
                p.pki.sa_key.display()
            ),
            format!("--root-ca-file={}", p.pki.ca_cert.display()),
            format!(
                "--node-monitor-period={}",
                go_duration(t.node_monitor_period)
            ),
            format!(
                "--node-monitor-grace-period={}",
                go_duration(t.node_monitor_grace_period)
            ),
            format!(
                "--node-startup-grace-period={}",
                go_duration(t.node_startup_grace_period)
            ),
            format!("--node-eviction-rate={}", t.node_eviction_rate),
            format!(
                "--terminated-pod-gc-threshold={}",
                t.terminated_pod_gc_threshold
            ),
        ];
        let sched_base = vec![
            format!("--kubeconfig={}", access.scheduler.kubeconfig.display()),
            "--bind-address=127.0.0.1".into(),
            "--leader-elect=false".into(),
        ];
        let kcm = self
            .start_serving(
                "kube-controller-manager",
                kcm_base,
                self.settings.extra_args.controller_manager.clone(),
                p.logs.controller_manager.clone(),
                &["/healthz"],
                http,
            )
            .await?;
        let sched = self
            .start_serving(
                "kube-scheduler",
                sched_base,
                self.settings.extra_args.scheduler.clone(),
                self.prepared.logs.scheduler.clone(),
                &["/healthz", "/readyz"],
                http,
            )
            .await?;
        Ok((kcm, sched))
    }

    /// Starts a component serving health endpoints on a free port and waits
    /// for each path to answer 200; a taken port: again on another.
    async fn start_serving(
        &mut self,
        component: &'static str,
        base: Vec<String>,
        extra: Vec<String>,
        log: PathBuf,
        paths: &[&str],
        http: &reqwest::Client,
    ) -> Result<u16, Failure> {
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port().map_err(|source| Failure::Spawn { component, source })?;
            let mut args = base.clone();
            args.push(format!("--secure-port={port}"));
            args.extend(extra.iter().cloned());
            self.spawn(component, args, log.clone())?;
            let urls: Vec<String> = paths
                .iter()
                .map(|p| format!("https://127.0.0.1:{port}{p}"))
                .collect();
            let what = format!("{component}'s {}", paths.join(" and "));
            let outcome = self
                .wait(&what, async || {
                    for url in &urls {
                        get_ok(http, url).await?;
                    }
                    Ok(())
                })
                .await;
            match outcome {
                Ok(()) => return Ok(port),
                Err(Failure::Exited { component: c, .. })
                    if c == component && attempt < PORT_ATTEMPTS && port_taken(&log) =>
                {
                    if let Some(i) = self.components.iter().rposition(|x| x.name == component) {
                        self.components.remove(i);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }
}

/// The client of the components' health checks.
fn health_client() -> std::io::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        // The controller-manager's and scheduler's serving certificates are
        // self-signed in memory; these are loopback health checks.
        .tls_danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(std::io::Error::other)
}

/// GET `url`: `Ok` on 200, else what was seen.
async fn get_ok(http: &reqwest::Client, url: &str) -> Result<(), String> {
    match http.get(url).send().await {
        Ok(r) if r.status() == reqwest::StatusCode::OK => Ok(()),
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            let last = body.lines().filter(|l| l.contains("failed")).take(3);
            Err(format!(
                "{url}: {status} {}",
                last.collect::<Vec<_>>().join("; ")
            ))
        }
        Err(e) => Err(format!("{url}: {}", crate::error_chain(&e))),
    }
}

impl From<WaitError> for Failure {
    fn from(e: WaitError) -> Self {
        match e {
            WaitError::Timeout {
                what,
                after,
                last_seen,
            } => Failure::Timeout {
                what,
                after,
                last_seen,
            },
            WaitError::Client(c) => Failure::Client(c),
        }
    }
}
