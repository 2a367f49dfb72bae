//! etcd and kube-apiserver from `scripts/control-plane build`, started for
//! a test binary on free loopback ports (the flags of
//! /work/notes/control-plane.md), stopped by PID when dropped: the API
//! server first, etcd last (an API server whose etcd is gone hangs on
//! SIGTERM). Each runs under `setpriv --pdeathsig KILL`, so they die with the
//! test's thread even when the test process is killed.
//!
//! No controller manager, scheduler or nodes: the proxy's tests need only
//! the API (ConfigMaps, RBAC, flow control). The launcher `tcab-real-cluster`
//! starts the whole control plane but cannot restart its API server, which
//! the restart-hook test does; this helper can.

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The control plane's bin directory (`scripts/control-plane path`), or
/// `TCAB_CONTROL_PLANE_BIN`.
pub fn control_plane_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TCAB_CONTROL_PLANE_BIN") {
        return Some(PathBuf::from(dir));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("scripts/control-plane"))
        .arg("path")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Why the real tier cannot run here, in one line; `None` when it can.
/// With `TCAB_REAL_CLUSTER_REQUIRED=1` (CI, once the build succeeded) a
/// missing piece fails instead, as the launcher's tests do.
pub fn missing() -> Option<String> {
    let why = missing_piece()?;
    if std::env::var("TCAB_REAL_CLUSTER_REQUIRED").as_deref() == Ok("1") {
        panic!("the real tier is required (TCAB_REAL_CLUSTER_REQUIRED=1) but cannot run: {why}");
    }
    Some(why)
}

fn missing_piece() -> Option<String> {
    let Some(bin) = control_plane_bin() else {
        return Some("scripts/control-plane path failed".into());
    };
    for b in ["etcd", "kube-apiserver"] {
        if !bin.join(b).is_file() {
            return Some(format!(
                "no {b} in {} (scripts/control-plane build makes it)",
                bin.display()
            ));
        }
    }
    if Command::new("openssl").arg("version").output().is_err() {
        return Some("no openssl on PATH (it makes the service-account key)".into());
    }
    None
}

/// A bearer token no one can guess from the test's output.
fn token(user: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(user.as_bytes());
    format!("{user}-{:016x}", h.finish())
}

/// A command for `program` that dies with the thread that starts it: under
/// util-linux's `setpriv --pdeathsig KILL` (which execs it, same PID) where
/// it exists, so a test process killed on a timeout leaves nothing running.
fn command(program: &Path) -> Command {
    match Path::new("/usr/bin/setpriv") {
        setpriv if setpriv.is_file() => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).arg(program);
            c
        }
        _ => Command::new(program),
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILL; reaps the child.
fn stop(child: &mut Child, grace: Duration) {
    let pid = Pid::from_raw(child.id() as i32);
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `n` lines of a log, for a failure message.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The identities of the token file.
pub struct Tokens {
    /// `admin`, in `system:masters` (exempt from flow control).
    pub admin: String,
    /// `dispatcher`, bound to `cluster-admin`.
    pub dispatcher: String,
    /// `throttled`, bound to `cluster-admin` (the APF helper's subject).
    pub throttled: String,
}

/// A running etcd and kube-apiserver.
pub struct Cluster {
    dir: tempfile::TempDir,
    etcd: Child,
    apiserver: Arc<Mutex<Option<Child>>>,
    api_cmd: Vec<String>,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The API server's `apiserver.crt` (serving cert and its CA).
    pub ca_pem: Vec<u8>,
    pub tokens: Tokens,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut a) = self
            .apiserver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            stop(&mut a, Duration::from_secs(15));
        }
        stop(&mut self.etcd, Duration::from_secs(5));
    }
}

impl Cluster {
    /// Starts etcd, then the API server (compaction every
    /// `compaction_interval`), and waits until `/readyz` answers 200 and
    /// the two users have their ClusterRoleBindings.
    pub async fn start(compaction_interval: &str) -> anyhow::Result<Cluster> {
        let bin = control_plane_bin().context("the control plane's bin directory")?;
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        std::fs::create_dir_all(d.join("certs"))?;
        for args in [
            vec!["genrsa", "-out", "certs/sa.key", "2048"],
            vec![
                "rsa",
                "-in",
                "certs/sa.key",
                "-pubout",
                "-out",
                "certs/sa.pub",
            ],
        ] {
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(d)
                .output()?;
            anyhow::ensure!(out.status.success(), "openssl {args:?}: {out:?}");
        }
        let tokens = Tokens {
            admin: token("admin"),
            dispatcher: token("dispatcher"),
            throttled: token("throttled"),
        };
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{},admin,admin,\"system:masters\"\n{},dispatcher,dispatcher\n{},throttled,throttled\n",
                tokens.admin, tokens.dispatcher, tokens.throttled
            ),
        )?;

        // etcd: its ready line names the port it bound.
        let etcd_out = d.join("etcd.out");
        let mut etcd = command(&bin.join("etcd"))
            .args(["--data-dir", "etcd", "--client-url", "http://127.0.0.1:0"])
            .args([
                "--listen-peer-urls",
                "http://127.0.0.1:0",
                "--unsafe-no-fsync",
            ])
            .args(["--log-level", "warn"])
            .current_dir(d)
            .stdout(File::create(&etcd_out)?)
            .stderr(File::create(d.join("etcd.log"))?)
            .spawn()
            .context("starting etcd")?;
        let etcd_url = {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let text = std::fs::read_to_string(&etcd_out).unwrap_or_default();
                if let Some(url) = text
                    .lines()
                    .find_map(|l| l.strip_prefix("etcd ready: client "))
                    .and_then(|rest| rest.split_whitespace().next())
                {
                    break url.to_string();
                }
                if etcd.try_wait()?.is_some() || tokio::time::Instant::now() > deadline {
                    stop(&mut etcd, Duration::from_secs(1));
                    bail!("etcd did not start:\n{}", tail(&d.join("etcd.log"), 20));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };

        let port = free_port()?;
        let cert_dir = d.join("certs");
        let api_cmd: Vec<String> = vec![
            bin.join("kube-apiserver").display().to_string(),
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", cert_dir.display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!(
                "--service-account-key-file={}",
                cert_dir.join("sa.pub").display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                cert_dir.join("sa.key").display()
            ),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            format!("--etcd-compaction-interval={compaction_interval}"),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
        ];
        let apiserver = Arc::new(Mutex::new(None));
        let mut cluster = Cluster {
            url: format!("https://127.0.0.1:{port}"),
            ca_pem: Vec::new(),
            dir,
            etcd,
            apiserver,
            api_cmd,
            tokens,
        };
        cluster.start_apiserver().await?;
        cluster.ca_pem = std::fs::read(cert_dir.join("apiserver.crt"))?;
        cluster.bind_users().await?;
        Ok(cluster)
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("kube-apiserver.log")
    }

    /// Starts the API server (appending to its log) and waits for `/readyz`.
    async fn start_apiserver(&self) -> anyhow::Result<()> {
        start_apiserver(&self.api_cmd, &self.log(), &self.url, &self.apiserver).await
    }

    /// A kubeconfig straight to the API server for `token`.
    pub fn kubeconfig(&self, token: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("{}.kubeconfig", &token[..5]));
        let mut kc = tcab_api_proxy::kubeconfig(&self.url, token, "default");
        let ca = self.dir.path().join("certs/apiserver.crt");
        if let Some(c) = kc.clusters[0].cluster.as_mut() {
            c.certificate_authority = Some(ca.display().to_string());
        }
        tcab_api_proxy::write_kubeconfig(&path, &kc)?;
        Ok(path)
    }

    /// A kube-rs client straight to the API server for `token`.
    pub async fn client(&self, token: &str) -> anyhow::Result<kube::Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig(token)?)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// The API server's own serving certificate (chain) and key, PEM: the
    /// proxy serves HTTPS with them, so clients trust it as they trust the
    /// API server.
    pub fn serving_pair(&self) -> (Vec<u8>, Vec<u8>) {
        let certs = self.dir.path().join("certs");
        (
            std::fs::read(certs.join("apiserver.crt")).unwrap(),
            std::fs::read(certs.join("apiserver.key")).unwrap(),
        )
    }

    /// A scratch directory that goes with the cluster.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The API server's PID now.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Child::id)
    }

    /// A restart hook for the proxy: stops the API server by PID and starts
    /// it again with the same flags on the same port, ready when it returns.
    pub fn restart_hook(&self) -> tcab_api_proxy::RestartHook {
        let (cmd, log, url, slot) = (
            self.api_cmd.clone(),
            self.log(),
            self.url.clone(),
            self.apiserver.clone(),
        );
        Arc::new(move || {
            let (cmd, log, url, slot) = (cmd.clone(), log.clone(), url.clone(), slot.clone());
            Box::pin(async move {
                let old = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(mut child) = old {
                    tokio::task::spawn_blocking(move || stop(&mut child, Duration::from_secs(15)))
                        .await?;
                }
                start_apiserver(&cmd, &log, &url, &slot).await
            })
        })
    }

    /// Gives the `dispatcher` and `throttled` users `cluster-admin`.
    async fn bind_users(&self) -> anyhow::Result<()> {
        use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
        let client = self.client(&self.tokens.admin).await?;
        let api: kube::Api<ClusterRoleBinding> = kube::Api::all(client);
        for user in ["dispatcher", "throttled"] {
            let crb = ClusterRoleBinding {
                metadata: kube::api::ObjectMeta {
                    name: Some(format!("test-{user}")),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "cluster-admin".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: user.into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    namespace: None,
                }]),
            };
            api.create(&Default::default(), &crb)
                .await
                .with_context(|| format!("binding {user}"))?;
        }
        Ok(())
    }
}

async fn start_apiserver(
    cmd: &[String],
    log: &Path,
    url: &str,
    slot: &Mutex<Option<Child>>,
) -> anyhow::Result<()> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let child = command(Path::new(&cmd[0]))
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("starting kube-apiserver")?;
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
    let ca_path = cmd
        .iter()
        .find_map(|a| a.strip_prefix("--cert-dir="))
        .map(|d| Path::new(d).join("apiserver.crt"))
        .context("no --cert-dir")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let _ = rustls::crypto::ring::default_provider().install_default();
    loop {
        let exited = slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map(|c| c.try_wait().ok().flatten().is_some())
            .unwrap_or(true);
        if exited || tokio::time::Instant::now() > deadline {
            bail!(
                "kube-apiserver did not become ready (exited: {exited}):\n{}",
                tail(log, 30)
            );
        }
        if let Ok(pem) = std::fs::read(&ca_path)
            && let Ok(cas) = reqwest::Certificate::from_pem_bundle(&pem)
            && let Ok(c) = cas
                .into_iter()
                .fold(reqwest::Client::builder(), |b, ca| {
                    b.add_root_certificate(ca)
                })
                .timeout(Duration::from_secs(2))
                .build()
            && let Ok(r) = c.get(format!("{url}/readyz")).send().await
            && r.status() == 200
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
