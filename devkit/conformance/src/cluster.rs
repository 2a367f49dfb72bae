//! The two clusters a probe runs against, behind one handle: raw HTTP to the
//! API (every answer kept as the server sent it), watches, waits in the
//! cluster's own time, and the faults only a kubelet can make (OOM kills,
//! lost nodes) through kube-sim's admin API or the node agent's.

use anyhow::{Context, Result, anyhow, bail};
use reqwest::Method;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tcab_kube_sim::{NodeSpec, SimHandle, SimOptions, Timing};
use tcab_real_cluster::{
    Access, ControlPlane, Identity, NodeAgent, Settings, Timings, built_or_skip, error_chain,
    shared_with,
};

/// The nodes of both clusters. Every probe that runs pods runs them on
/// [`WORKER`]; [`LOST`] is the node the lost-node probe loses, [`GONE`]
/// the one the pod GC probe deletes and [`SICK`] the one the not-ready
/// probe makes report `Ready=False` (each used by one probe only, since the
/// real cluster is shared by every probe of a run); [`SPARE`] keeps the zone
/// healthy while nodes are down (a lone unreachable node is never
/// evicted: its zone is in full disruption). At most two may be down at
/// once (the pod GC probe deletes its node at once): with three, the zone
/// is in partial disruption, where a cluster this small taints nothing.
pub const NODES: [&str; 5] = [WORKER, SPARE, LOST, GONE, SICK];
/// Where probes run their pods.
pub const WORKER: &str = "conf-1";
/// A healthy second node.
pub const SPARE: &str = "conf-2";
/// The node the lost-node probe loses.
pub const LOST: &str = "conf-lost";
/// The node the pod GC probe deletes.
pub const GONE: &str = "conf-gone";
/// The node whose kubelet the not-ready probe makes report `Ready=False`.
pub const SICK: &str = "conf-sick";
/// A static-token user of the real cluster that the 429 probe throttles.
pub const THROTTLED_USER: &str = "conf-throttled";
/// kube-sim's clock runs this many times faster than real time (its
/// timelines, deadlines and grace periods are in its time, as the real
/// cluster's are in real time; durations a probe records are in the
/// cluster's time).
pub const SIM_SPEED: f64 = 10.0;

/// Which cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sim,
    Real,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Sim => "kube-sim",
            Side::Real => "real",
        }
    }
}

enum Backend {
    Sim(SimHandle),
    Real {
        access: Box<Access>,
        agent: Option<tcab_node_agent::AdminClient>,
        /// A control plane of this probe's own (not the shared one).
        _own: Option<Box<ControlPlane>>,
    },
}

/// One cluster, as a probe sees it.
pub struct Cluster {
    pub side: Side,
    /// The probe's namespace (the same name on both sides, so messages that
    /// name it compare as they are).
    pub ns: String,
    api: String,
    token: String,
    http: reqwest::Client,
    backend: Backend,
}

/// An answer as the server sent it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: u16,
    /// The body as JSON, or `Value::String` of the text when it is not JSON.
    pub body: Value,
    pub content_type: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Answer {
    /// The resourceVersion of the object in the body.
    pub fn rv(&self) -> String {
        self.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// The settings of the shared real control plane: every probe process
/// asks with the same ones, so they share one instance.
pub fn real_settings(node_agent: &Path) -> Settings {
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
    for n in NODES {
        args.extend(["--node".to_string(), n.to_string()]);
    }
    // Leases of 4 s renewed every second (against the 10 s node-monitor
    // grace), status every 2 s: a lost node is judged in seconds.
    args.extend(
        [
            "--lease-seconds",
            "4",
            "--status-update-seconds",
            "2",
            "--image-back-off-seconds",
            "1",
        ]
        .map(String::from),
    );
    Settings {
        nodes: NODES.map(String::from).to_vec(),
        identities: vec![Identity::new(THROTTLED_USER, &[])],
        node_agent: Some(NodeAgent {
            program: node_agent.to_owned(),
            args,
            ready_prefix: Some("node agent ready:".into()),
        }),
        ..Settings::default()
    }
}

/// kube-sim with the real side's nodes and node timings.
pub fn sim_options(ns: &str) -> SimOptions {
    let real = Timings::default();
    SimOptions {
        namespace: ns.to_string(),
        speed: SIM_SPEED,
        nodes: NODES.iter().map(|n| NodeSpec::standard(n)).collect(),
        timing: Timing {
            node_monitor_grace: real.node_monitor_grace_period,
            default_toleration_seconds: real.unreachable_toleration.as_secs() as i64,
            ..Timing::default()
        },
        ..SimOptions::default()
    }
}

/// The directory of the workspace's binaries (`target/<profile>/`), beside
/// the test executable.
fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test executable")?;
    let mut dir = exe.parent().context("no directory")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    Ok(dir)
}

/// The node agent and the launcher's shared owner are binaries of other
/// crates, which a test run does not build: build them (a quick no-op when
/// current), as `scripts/test` does before the tests. On a blocking thread:
/// the probe's kube-sim side runs on the same task meanwhile.
pub(crate) async fn ensure_binaries() -> Result<PathBuf> {
    tokio::task::spawn_blocking(build_binaries)
        .await
        .context("building the binaries")?
}

fn build_binaries() -> Result<PathBuf> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = bin_dir().map_err(|e| format!("{e:#}"))?;
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = std::process::Command::new(&cargo);
            cmd.args([
                "build",
                "-p",
                "tcab-node-agent",
                "-p",
                "tcab-real-cluster",
                // The container entrypoint of the real nodes' images.
                "-p",
                "tcab-workloads",
                "--bins",
                "--quiet",
            ]);
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            // Variables cargo sets for the crate under test would make build
            // scripts that watch them rerun, and rebuild their dependents.
            for (key, _) in std::env::vars_os() {
                if key.to_str().is_some_and(|k| {
                    k.starts_with("CARGO_PKG_")
                        || k.starts_with("CARGO_BIN_EXE_")
                        || [
                            "CARGO_MANIFEST_DIR",
                            "CARGO_MANIFEST_PATH",
                            "CARGO_MANIFEST_LINKS",
                            "CARGO_CRATE_NAME",
                            "CARGO_BIN_NAME",
                            "CARGO_PRIMARY_PACKAGE",
                            "CARGO_TARGET_TMPDIR",
                            "CARGO_RUSTC_CURRENT_DIR",
                            "OUT_DIR",
                        ]
                        .contains(&k)
                }) {
                    cmd.env_remove(&key);
                }
            }
            match cmd.status() {
                Ok(s) if s.success() => {}
                Ok(s) => {
                    return Err(format!(
                        "cargo build -p tcab-node-agent -p tcab-real-cluster -p tcab-workloads --bins failed ({s})"
                    ));
                }
                Err(e) => eprintln!("cannot run {cargo} ({e}); using the binaries as they are"),
            }
            let agent = dir.join("tcab-node-agent");
            if agent.is_file() {
                Ok(agent)
            } else {
                Err(format!("no {}", agent.display()))
            }
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn http_client(ca_pem: Option<&[u8]>) -> Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder();
    if let Some(pem) = ca_pem {
        for ca in reqwest::Certificate::from_pem_bundle(pem).context("reading the CA")? {
            b = b.add_root_certificate(ca);
        }
    }
    b.build().context("building the HTTP client")
}

impl Cluster {
    /// A fresh kube-sim.
    pub async fn sim(ns: &str) -> Result<Cluster> {
        let handle = tcab_kube_sim::spawn(sim_options(ns)).await?;
        Ok(Cluster {
            side: Side::Sim,
            ns: ns.to_string(),
            api: handle.url().to_string(),
            token: handle.admin_token().to_string(),
            http: http_client(None)?,
            backend: Backend::Sim(handle),
        })
    }

    /// The shared real control plane with its node agent, the namespace
    /// made; `None` (after one `SKIP:` line) when it is not built.
    pub async fn real(ns: &str) -> Result<Option<Cluster>> {
        if built_or_skip().is_none() {
            return Ok(None);
        }
        let agent = ensure_binaries().await?;
        let access = shared_with(|| real_settings(&agent))
            .await
            .map_err(|e| anyhow!("the shared control plane: {}", error_chain(&*e)))?;
        let url = access
            .node_agent_url()
            .context("the launcher ran no node agent")?
            .to_string();
        let c = Self::from_access(
            access.clone(),
            ns,
            Some(tcab_node_agent::AdminClient::new(&url)),
            None,
        )
        .await?;
        Ok(Some(c))
    }

    /// A control plane of the probe's own with `settings` (no nodes unless
    /// asked), for what the shared one cannot show (e.g. no watch cache);
    /// stopped when the cluster is dropped.
    pub async fn real_own(ns: &str, settings: Settings) -> Result<Option<Cluster>> {
        if built_or_skip().is_none() {
            return Ok(None);
        }
        let cp = ControlPlane::start(settings)
            .await
            .map_err(|e| anyhow!("starting a control plane: {}", error_chain(&e)))?;
        let access = cp.access().clone();
        let c = Self::from_access(access, ns, None, Some(Box::new(cp))).await?;
        Ok(Some(c))
    }

    /// A cluster over a control plane someone else started (the node
    /// conformance's own clusters), namespace `ns` made; `agent` the node
    /// agent's admin API when it plays the nodes.
    pub async fn over(
        access: Access,
        ns: &str,
        agent: Option<tcab_node_agent::AdminClient>,
    ) -> Result<Cluster> {
        Self::from_access(access, ns, agent, None).await
    }

    async fn from_access(
        access: Access,
        ns: &str,
        agent: Option<tcab_node_agent::AdminClient>,
        own: Option<Box<ControlPlane>>,
    ) -> Result<Cluster> {
        access
            .create_namespace(ns, Duration::from_secs(30))
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        let pem = std::fs::read(&access.ca_cert).context("reading the CA")?;
        Ok(Cluster {
            side: Side::Real,
            ns: ns.to_string(),
            api: access.api_url.clone(),
            token: access.admin.token.clone(),
            http: http_client(Some(&pem))?,
            backend: Backend::Real {
                access: Box::new(access),
                agent,
                _own: own,
            },
        })
    }

    /// The sim, on kube-sim's side.
    pub fn sim_handle(&self) -> Option<&SimHandle> {
        match &self.backend {
            Backend::Sim(h) => Some(h),
            Backend::Real { .. } => None,
        }
    }

    /// How to reach the real cluster, on its side.
    pub fn access(&self) -> Option<&Access> {
        match &self.backend {
            Backend::Real { access, .. } => Some(access),
            Backend::Sim(_) => None,
        }
    }

    /// The API's base URL.
    pub fn api_url(&self) -> &str {
        &self.api
    }

    /// `/api/v1/namespaces/<ns>/pods`.
    pub fn pods(&self) -> String {
        format!("/api/v1/namespaces/{}/pods", self.ns)
    }

    /// `/apis/batch/v1/namespaces/<ns>/jobs`.
    pub fn jobs(&self) -> String {
        format!("/apis/batch/v1/namespaces/{}/jobs", self.ns)
    }

    /// A request as the admin.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Answer> {
        self.call_as(&self.token, method, path, body, content_type)
            .await
    }

    /// A request with another bearer token.
    pub async fn call_as(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Answer> {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.api))
            .bearer_auth(token)
            .timeout(Duration::from_secs(30));
        if let Some(b) = body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(b.to_string());
        }
        let r = rb
            .send()
            .await
            .with_context(|| format!("{method} {path} on {}", self.side.name()))?;
        read_answer(r).await
    }

    pub async fn get(&self, path: &str) -> Result<Answer> {
        self.call(Method::GET, path, None, "").await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Answer> {
        self.call(Method::POST, path, Some(body), "application/json")
            .await
    }

    pub async fn merge_patch(&self, path: &str, body: &Value) -> Result<Answer> {
        self.call(
            Method::PATCH,
            path,
            Some(body),
            "application/merge-patch+json",
        )
        .await
    }

    pub async fn delete(&self, path: &str, options: Option<&Value>) -> Result<Answer> {
        self.call(Method::DELETE, path, options, "application/json")
            .await
    }

    /// A POST that must succeed (201 or 200): the object written.
    pub async fn create(&self, path: &str, body: &Value) -> Result<Value> {
        let a = self.post(path, body).await?;
        if !(200..300).contains(&a.code) {
            bail!("POST {path} on {}: {} {}", self.side.name(), a.code, a.body);
        }
        Ok(a.body)
    }

    /// The object at `path`, `None` when it is gone.
    pub async fn object(&self, path: &str) -> Result<Option<Value>> {
        let a = self.get(path).await?;
        match a.code {
            200 => Ok(Some(a.body)),
            404 => Ok(None),
            c => bail!("GET {path} on {}: {c} {}", self.side.name(), a.body),
        }
    }

    /// Opens a watch (`path` with its query; `watch=true` is added).
    pub async fn watch(&self, path: &str) -> Result<Watch> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = format!("{}{path}{sep}watch=true", self.api);
        let resp = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("watch {path} on {}", self.side.name()))?;
        Ok(Watch {
            code: resp.status().as_u16(),
            resp,
            buf: Vec::new(),
        })
    }

    /// The cluster's clock (kube-sim's sim time; the wall clock).
    pub fn now(&self) -> jiff::Timestamp {
        match &self.backend {
            Backend::Sim(h) => h.sim().clock.now(),
            Backend::Real { .. } => jiff::Timestamp::now(),
        }
    }

    /// Cluster time since `t` (from [`Cluster::now`]).
    pub fn since(&self, t: jiff::Timestamp) -> Duration {
        self.now().duration_since(t).unsigned_abs()
    }

    /// The real duration of `d` of cluster time.
    pub fn real_duration(&self, d: Duration) -> Duration {
        match &self.backend {
            Backend::Sim(h) => h.sim().clock.real(d),
            Backend::Real { .. } => d,
        }
    }

    /// Sleeps `d` of cluster time.
    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(self.real_duration(d)).await;
    }

    /// Polls `f` until it gives a value, for at most `limit` of cluster
    /// time; `None` when it never did (a probe records that as what it saw).
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        mut f: impl AsyncFnMut() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let deadline = Instant::now() + self.real_duration(limit);
        loop {
            if let Some(v) = f().await? {
                return Ok(Some(v));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`Cluster::wait_for`], where not seeing it is an error (a probe's
    /// set-up: the pod must run before it is killed).
    pub async fn until<T>(
        &self,
        what: &str,
        limit: Duration,
        f: impl AsyncFnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        self.wait_for(limit, f).await?.with_context(|| {
            format!(
                "{}: not within {limit:?} (cluster time): {what}",
                self.side.name()
            )
        })
    }

    /// The container is OOM-killed (kube-sim's admin API; the node agent's).
    pub async fn oom_kill(&self, pod: &str) -> Result<()> {
        match &self.backend {
            Backend::Sim(h) => h.admin().oom_kill(&self.ns, pod).await.map_err(Into::into),
            Backend::Real { agent, .. } => agent
                .as_ref()
                .context("no node agent")?
                .oom_kill(&self.ns, pod)
                .await
                .map_err(|e| anyhow!("{e:#}")),
        }
    }

    /// The node's kubelet reports `Ready=False` (`ready` false) and goes on
    /// running its pods, or reports Ready again (kube-sim's admin API; the
    /// node agent's).
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<()> {
        match &self.backend {
            Backend::Sim(h) => h
                .admin()
                .set_node_ready(node, ready)
                .await
                .map_err(Into::into),
            Backend::Real { agent, .. } => agent
                .as_ref()
                .context("no node agent")?
                .set_health(
                    node,
                    tcab_node_agent::Health {
                        not_ready: !ready,
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| anyhow!("{e:#}")),
        }
    }

    /// The node's kubelet and machine are lost: no heartbeat, no status,
    /// its programs stop where they are.
    pub async fn lose_node(&self, node: &str) -> Result<()> {
        match &self.backend {
            Backend::Sim(h) => h
                .admin()
                .crash_node(node)
                .await
                .map(drop)
                .map_err(Into::into),
            Backend::Real { agent, .. } => agent
                .as_ref()
                .context("no node agent")?
                .lose_node(node)
                .await
                .map_err(|e| anyhow!("{e:#}")),
        }
    }
}

async fn read_answer(r: reqwest::Response) -> Result<Answer> {
    let code = r.status().as_u16();
    let headers = r.headers().clone();
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = r.text().await.context("reading the answer")?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(Answer {
        code,
        body,
        content_type,
        headers,
    })
}

/// An open watch: newline-delimited JSON events.
pub struct Watch {
    /// The HTTP status of the watch request.
    pub code: u16,
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Watch {
    /// The next event within `limit` (real time); `None` when the stream
    /// ended or nothing came.
    pub async fn next(&mut self, limit: Duration) -> Result<Option<Value>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(
                    serde_json::from_slice(&line).context("a watch event")?,
                ));
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Ok(None)) | Err(_) => return Ok(None),
                Ok(Err(e)) => return Err(anyhow!("watch stream: {e}")),
            }
        }
    }

    /// Every event until `done` says so (that event included) or `limit`
    /// (real time) passes.
    pub async fn until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Value) -> bool,
    ) -> Result<Vec<Value>> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await? {
                Some(ev) => {
                    let stop = done(&ev);
                    out.push(ev);
                    if stop {
                        return Ok(out);
                    }
                }
                None => return Ok(out),
            }
        }
    }

    /// Reads the watch in the background into a [`Recording`].
    pub fn record(mut self) -> Recording {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(ev)) = self.next(Duration::from_secs(3600)).await {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(ev);
            }
        });
        Recording { events, task }
    }

    /// Every event that comes within `quiet` of the last (real time).
    pub async fn drain(&mut self, quiet: Duration) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        while let Some(ev) = self.next(quiet).await? {
            out.push(ev);
        }
        Ok(out)
    }
}

/// A watch read in the background; stopped when dropped.
pub struct Recording {
    events: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recording {
    /// The events so far.
    pub fn events(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits (at most `limit`, cluster time) until some event satisfies
    /// `f`; whether one did.
    pub async fn saw(&self, c: &Cluster, limit: Duration, f: impl Fn(&Value) -> bool) -> bool {
        c.wait_for(limit, async || {
            Ok(self.events().iter().any(&f).then_some(()))
        })
        .await
        .ok()
        .flatten()
        .is_some()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.task.abort();
    }
}
