//! A throwaway launcher of the upstream control plane for these tests,
//! until devkit's own launcher lands: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler on free loopback ports, with
//! static tokens for an admin and each node, `Node,RBAC` authorization and
//! NodeRestriction, and short node-lifecycle timings (the flags of
//! /work/notes/control-plane.md). What the node agent gets from it is what
//! the real launcher will hand out: the API URL, the CA file, a token per
//! node. Everything started is stopped by PID, in reverse order, on drop.

use anyhow::Context;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tcab_node_agent::Cluster;
use tcab_node_agent::api;
use tcab_node_agent::conn::Conn;

/// Timings of the control plane (short, for tests).
#[derive(Debug, Clone)]
pub struct Timings {
    /// kube-controller-manager `--node-monitor-grace-period`.
    pub node_monitor_grace: Duration,
    /// kube-apiserver `--default-{not-ready,unreachable}-toleration-seconds`.
    pub toleration_seconds: u32,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            node_monitor_grace: Duration::from_secs(8),
            toleration_seconds: 5,
        }
    }
}

/// The directory of the built control plane binaries
/// (`TCAB_CONTROL_PLANE_BIN`, else `scripts/control-plane path`), or why
/// there is none.
pub fn bin_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var("TCAB_CONTROL_PLANE_BIN") {
        Ok(d) => PathBuf::from(d),
        Err(_) => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let out = Command::new(root.join("scripts/control-plane"))
                .arg("path")
                .output()
                .map_err(|e| format!("scripts/control-plane path: {e}"))?;
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    for b in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        if !dir.join(b).is_file() {
            return Err(format!(
                "no {b} in {} (run scripts/control-plane build)",
                dir.display()
            ));
        }
    }
    Ok(dir)
}

/// Returns from the test with one `SKIP:` line when the control plane is
/// not built.
#[macro_export]
macro_rules! require_control_plane {
    () => {
        match $crate::support::control_plane::bin_dir() {
            Ok(d) => d,
            Err(why) => {
                println!("SKIP: the upstream control plane is not available: {why}");
                return;
            }
        }
    };
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A running control plane.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:PORT`.
    pub api_url: String,
    /// The CA (the API server's self-signed serving certificate and CA).
    pub ca_pem: PathBuf,
    /// An admin token (`system:masters`).
    pub admin_token: String,
    node_tokens: BTreeMap<String, String>,
    procs: Vec<(String, Child)>,
    /// How long the start took.
    pub started_in: Duration,
}

fn kubeconfig(path: &Path, url: &str, ca: &Path, token: &str) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {url}\n    certificate-authority: {}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: user\ncurrent-context: local\n",
            ca.display()
        ),
    )
}

impl ControlPlane {
    /// Starts one with a token for each of `nodes`; returns once the API is
    /// ready and the `default` ServiceAccount of `default` exists.
    pub async fn start(bin: &Path, nodes: &[&str], t: Timings) -> anyhow::Result<ControlPlane> {
        let began = Instant::now();
        let dir = tempfile::Builder::new().prefix("tcab-cp-").tempdir()?;
        let w = dir.path();
        for d in ["etcd", "certs", "logs"] {
            std::fs::create_dir_all(w.join(d))?;
        }
        // The service-account signing key: ECDSA P-256 (PKCS#8), and its
        // public half for verification.
        let sa = rcgen::KeyPair::generate()?;
        std::fs::write(w.join("certs/sa.key"), sa.serialize_pem())?;
        std::fs::write(w.join("certs/sa.pub"), sa.public_key_pem())?;
        let admin_token = token();
        let kcm_token = token();
        let sched_token = token();
        let mut csv = format!(
            "{admin_token},admin,admin,\"system:masters\"\n{kcm_token},system:kube-controller-manager,system:kube-controller-manager\n{sched_token},system:kube-scheduler,system:kube-scheduler\n"
        );
        let mut node_tokens = BTreeMap::new();
        for n in nodes {
            let t = token();
            csv.push_str(&format!(
                "{t},system:node:{n},system:node:{n},\"system:nodes\"\n"
            ));
            node_tokens.insert(n.to_string(), t);
        }
        std::fs::write(w.join("tokens.csv"), csv)?;
        let mut cp = ControlPlane {
            api_url: String::new(),
            ca_pem: w.join("certs/apiserver.crt"),
            admin_token,
            node_tokens,
            procs: Vec::new(),
            started_in: Duration::ZERO,
            dir,
        };
        let r = cp.boot(bin, &kcm_token, &sched_token, &t).await;
        if let Err(e) = r {
            let tails = cp.log_tails();
            cp.stop();
            return Err(e.context(tails));
        }
        cp.started_in = began.elapsed();
        Ok(cp)
    }

    fn spawn(
        &mut self,
        name: &str,
        bin: &Path,
        args: &[String],
        stdout: Stdio,
    ) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join(format!("logs/{name}.log")))?;
        let child = Command::new(bin.join(name))
            .args(args)
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.procs.push((name.to_string(), child));
        Ok(())
    }

    async fn boot(
        &mut self,
        bin: &Path,
        kcm_token: &str,
        sched_token: &str,
        t: &Timings,
    ) -> anyhow::Result<()> {
        let w = self.dir.path().to_path_buf();
        // etcd: prints one line with the addresses it bound.
        self.spawn(
            "etcd",
            bin,
            &[
                format!("--data-dir={}", w.join("etcd").display()),
                "--client-url=http://127.0.0.1:0".into(),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            Stdio::piped(),
        )?;
        let out = self.procs[0].1.stdout.take().context("etcd's stdout")?;
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line).map(|_| line)
        })
        .await??;
        let etcd = line
            .split_whitespace()
            .skip_while(|w| *w != "client")
            .nth(1)
            .with_context(|| format!("etcd said {line:?}"))?
            .to_string();
        let api_port = free_port();
        self.api_url = format!("https://127.0.0.1:{api_port}");
        let certs = w.join("certs");
        self.spawn(
            "kube-apiserver",
            bin,
            &[
                format!("--etcd-servers={etcd}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                "--advertise-address=127.0.0.1".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--cert-dir={}", certs.display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!(
                    "--service-account-key-file={}",
                    certs.join("sa.pub").display()
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    certs.join("sa.key").display()
                ),
                format!("--token-auth-file={}", w.join("tokens.csv").display()),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                format!(
                    "--default-not-ready-toleration-seconds={}",
                    t.toleration_seconds
                ),
                format!(
                    "--default-unreachable-toleration-seconds={}",
                    t.toleration_seconds
                ),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
            ],
            Stdio::null(),
        )?;
        // Ready: the serving certificate is written and /readyz answers.
        let deadline = Instant::now() + Duration::from_secs(90);
        let admin = loop {
            anyhow::ensure!(
                Instant::now() < deadline,
                "kube-apiserver not ready within 90 s"
            );
            self.check_alive()?;
            if self.ca_pem.is_file()
                && let Ok(client) =
                    Conn::new(&self.cluster()).and_then(|c| c.client(&self.admin_token))
            {
                let req = http::Request::get("/readyz").body(Vec::new())?;
                if let Ok(body) = client.request_text(req).await
                    && body.trim() == "ok"
                {
                    break client;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let kcm_cfg = w.join("kcm.kubeconfig");
        kubeconfig(&kcm_cfg, &self.api_url, &self.ca_pem, kcm_token)?;
        let sched_cfg = w.join("sched.kubeconfig");
        kubeconfig(&sched_cfg, &self.api_url, &self.ca_pem, sched_token)?;
        self.spawn(
            "kube-controller-manager",
            bin,
            &[
                format!("--kubeconfig={}", kcm_cfg.display()),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=true".into(),
                "--controllers=job-controller,pod-garbage-collector-controller,garbage-collector-controller,ttl-after-finished-controller,node-lifecycle-controller,taint-eviction-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller".into(),
                format!("--service-account-private-key-file={}", certs.join("sa.key").display()),
                format!("--root-ca-file={}", self.ca_pem.display()),
                "--node-monitor-period=1s".into(),
                format!("--node-monitor-grace-period={}s", t.node_monitor_grace.as_secs().max(1)),
            ],
            Stdio::null(),
        )?;
        self.spawn(
            "kube-scheduler",
            bin,
            &[
                format!("--kubeconfig={}", sched_cfg.display()),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()),
                "--leader-elect=false".into(),
            ],
            Stdio::null(),
        )?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            anyhow::ensure!(
                Instant::now() < deadline,
                "no default ServiceAccount within 60 s"
            );
            self.check_alive()?;
            if let Ok(Some(_)) =
                api::get(&admin, "/api/v1/namespaces/default/serviceaccounts/default").await
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, c) in &mut self.procs {
            if let Some(status) = c.try_wait()? {
                anyhow::bail!("{name} exited ({status})");
            }
        }
        Ok(())
    }

    /// The last lines of every component's log.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        for (name, _) in &self.procs {
            let text = std::fs::read_to_string(self.dir.path().join(format!("logs/{name}.log")))
                .unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("--- {name} (last 15 lines)\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// What the node agent is given.
    pub fn cluster(&self) -> Cluster {
        Cluster {
            api_url: self.api_url.clone(),
            ca_pem: self.ca_pem.clone(),
        }
    }

    /// The API server's token file (CSV `token,user,uid,groups`).
    pub fn tokens_file(&self) -> PathBuf {
        self.dir.path().join("tokens.csv")
    }

    /// The token of `system:node:<name>`.
    pub fn node_token(&self, name: &str) -> String {
        self.node_tokens[name].clone()
    }

    /// A client with the admin token.
    pub fn admin(&self) -> kube::Client {
        Conn::new(&self.cluster())
            .and_then(|c| c.client(&self.admin_token))
            .expect("admin client")
    }

    /// Creates a namespace and waits for its `default` ServiceAccount (Job
    /// pods cannot be created before it exists).
    pub async fn namespace(&self, ns: &str) -> anyhow::Result<()> {
        let admin = self.admin();
        api::post(
            &admin,
            "/api/v1/namespaces",
            &serde_json::json!({"metadata": {"name": ns}}),
        )
        .await?;
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/default");
        let deadline = Instant::now() + Duration::from_secs(30);
        while api::get(&admin, &path).await?.is_none() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "no default ServiceAccount in {ns}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Writes a kubeconfig with the admin token; returns its path.
    pub fn write_admin_kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("admin.kubeconfig");
        kubeconfig(&path, &self.api_url, &self.ca_pem, &self.admin_token)
            .expect("admin kubeconfig");
        path
    }

    /// Stops everything by PID, newest first (etcd last: the API server
    /// hangs on SIGTERM when etcd is gone).
    pub fn stop(&mut self) {
        while let Some((name, mut child)) = self.procs.pop() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        eprintln!("{name} still alive 15 s after SIGTERM: SIGKILL");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}
