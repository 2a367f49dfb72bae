//! Containers run as local binaries: the dispatcher's own pod.
//!
//! When a pod's image is one of the agent's [`LocalImage`]s (the chart's
//! `image.repository`), each of its containers runs `bin_dir/<command[0]>`
//! (with the rest of `command` and `args`) as a child process, as a
//! container runtime would run the image's binary:
//!
//! - **environment**: exactly the container's resolved env (literal values,
//!   `secretKeyRef` read through the API as the node, `fieldRef` such as
//!   `metadata.namespace`; [`crate::env`]), plus one variable, `KUBECONFIG`,
//!   nothing of the agent's own;
//! - **ServiceAccount credentials**: the kubelet projects a token from the
//!   TokenRequest API (bound to the pod, the API server's audience) and the
//!   API server's CA into `/var/run/secrets/kubernetes.io/serviceaccount/`,
//!   and sets `KUBERNETES_SERVICE_HOST`/`PORT`; kube-rs's in-cluster config
//!   reads those fixed paths, which an agent without root cannot write. The
//!   binaries build their client with `kube::Config::infer()`
//!   (`tcab_shared::kube_api::client_with_url`), which tries `$KUBECONFIG`
//!   first and the in-cluster files only without one. So the agent writes,
//!   per pod, a directory (mode 0700) with `token` (0600), `ca.crt`,
//!   `namespace` and a `kubeconfig` naming the API server, the CA file, the
//!   token as `tokenFile` (kube-rs re-reads it, so a renewed token is
//!   picked up) and the pod's namespace as the context's, and hands the
//!   containers `KUBECONFIG=<dir>/kubeconfig`. The same token, CA and
//!   namespace the in-cluster files would hold; the token is renewed at
//!   80 % of its life, as the kubelet's token manager does. A test may
//!   name another server for one pod with the annotation
//!   [`API_SERVER_ANNOTATION`] (the stack's fault proxy, which serves the
//!   API server's certificate and forwards the pod's token), so API faults
//!   reach the pod's calls.
//! - **probes** (`httpGet` only, on 127.0.0.1 and the container's port,
//!   named or numbered; `initialDelaySeconds`, `periodSeconds`,
//!   `timeoutSeconds`, `failureThreshold`, `successThreshold` with the
//!   API's defaults): liveness failing `failureThreshold` times in a row
//!   restarts the container (SIGTERM, SIGKILL after the pod's grace);
//!   readiness sets the container's `ready` and so the pod's
//!   `ContainersReady` and `Ready`;
//! - **restarts** (restartPolicy `Always`/`OnFailure`): the first at once,
//!   then the kubelet's crash-loop back-off (10 s doubling to 300 s,
//!   `CrashLoopBackOff` while waiting), with `restartCount` and
//!   `lastState.terminated` in the status;
//! - **exit codes**: the process's, or 128 + the signal that killed it;
//! - **logs**: every stdout and stderr line into the container's log, which
//!   the node's `containerLogs` endpoint serves (one log across restarts:
//!   `previous` is not kept apart).
//!
//! The processes share the machine's network (there is no network
//! namespace): two such pods listening on one port collide.

use crate::LocalImage;
use crate::logs::ContainerLog;
use crate::status::Stop;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A pod annotation naming the server its kubeconfig points at instead of
/// the agent's API server (e.g. a fault proxy in front of it, serving the
/// API server's certificate): a test rig's hook, no kubelet's.
pub const API_SERVER_ANNOTATION: &str = "node-agent.tcab.dev/api-server";

/// The server a local-binary pod's kubeconfig names: the annotation's
/// ([`API_SERVER_ANNOTATION`]) if the pod has one, else `default`.
pub fn api_server_of(pod: &Value, default: String) -> String {
    pod["metadata"]["annotations"][API_SERVER_ANNOTATION]
        .as_str()
        .map_or(default, str::to_owned)
}

/// The kubelet's first crash-loop back-off, doubling ...
pub const CRASH_BACK_OFF: Duration = Duration::from_secs(10);
/// ... up to this.
pub const CRASH_BACK_OFF_MAX: Duration = Duration::from_secs(300);

/// The repository of an image reference: without its digest and tag.
pub fn repository(image: &str) -> &str {
    let name = image.split('@').next().unwrap_or(image);
    match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    }
}

/// The binaries' directory when the pod's (first) container's image is a
/// local one.
pub fn local_binaries<'a>(images: &'a [LocalImage], pod: &Value) -> Option<&'a Path> {
    let image = pod["spec"]["containers"][0]["image"].as_str()?;
    images
        .iter()
        .find(|l| l.repository == repository(image))
        .map(|l| l.bin_dir.as_path())
}

/// An `httpGet` probe as the prober runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The request path.
    pub path: String,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// `initialDelaySeconds` (0).
    pub initial_delay: Duration,
    /// `periodSeconds` (10).
    pub period: Duration,
    /// `timeoutSeconds` (1).
    pub timeout: Duration,
    /// `failureThreshold` (3).
    pub failure_threshold: u32,
    /// `successThreshold` (1).
    pub success_threshold: u32,
}

/// The container's probe `key` (`livenessProbe`, `readinessProbe`): `None`
/// without one; an error for a probe this agent cannot run.
pub fn probe(container: &Value, key: &str) -> Result<Option<Probe>, String> {
    let p = &container[key];
    if p.is_null() {
        return Ok(None);
    }
    let get = &p["httpGet"];
    if get.is_null() {
        return Err(format!("{key}: only httpGet probes are supported"));
    }
    let port = match &get["port"] {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(name) => container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|cp| cp["name"] == name.as_str())
            .and_then(|cp| cp["containerPort"].as_u64())
            .and_then(|n| u16::try_from(n).ok()),
        _ => None,
    }
    .ok_or_else(|| format!("{key}: port {} is not a container port", get["port"]))?;
    let secs =
        |field: &str, default: u64| Duration::from_secs(p[field].as_u64().unwrap_or(default));
    let count = |field: &str, default: u64| p[field].as_u64().unwrap_or(default).max(1) as u32;
    Ok(Some(Probe {
        path: get["path"].as_str().unwrap_or("/").to_string(),
        port,
        initial_delay: secs("initialDelaySeconds", 0),
        period: secs("periodSeconds", 10).max(Duration::from_secs(1)),
        timeout: secs("timeoutSeconds", 1).max(Duration::from_secs(1)),
        failure_threshold: count("failureThreshold", 3),
        success_threshold: count("successThreshold", 1),
    }))
}

/// One probe attempt: a 2xx or 3xx answer within the timeout passes.
async fn probe_once(http: &reqwest::Client, p: &Probe) -> Result<(), String> {
    let url = format!("http://127.0.0.1:{}{}", p.port, p.path);
    match tokio::time::timeout(p.timeout, http.get(&url).send()).await {
        Err(_) => Err(format!(
            "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
        Ok(Err(e)) => Err(format!("Get \"{url}\": {e}")),
        Ok(Ok(r)) if r.status().as_u16() < 400 => Ok(()),
        Ok(Ok(r)) => Err(format!(
            "HTTP probe failed with statuscode: {}",
            r.status().as_u16()
        )),
    }
}

/// A probe's running verdict: consecutive successes and failures against
/// its thresholds.
#[derive(Debug, Clone)]
struct Prober {
    probe: Probe,
    next: Instant,
    successes: u32,
    failures: u32,
}

impl Prober {
    fn new(probe: Probe, started: Instant) -> Self {
        Prober {
            next: started + probe.initial_delay,
            probe,
            successes: 0,
            failures: 0,
        }
    }

    /// Records one result; `Some(verdict)` when a threshold is reached.
    fn record(&mut self, ok: bool) -> Option<bool> {
        self.next = Instant::now() + self.probe.period;
        if ok {
            self.failures = 0;
            self.successes += 1;
            (self.successes >= self.probe.success_threshold).then_some(true)
        } else {
            self.successes = 0;
            self.failures += 1;
            (self.failures >= self.probe.failure_threshold).then_some(false)
        }
    }
}

/// One container to run.
pub(crate) struct Spec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub liveness: Option<Probe>,
    pub readiness: Option<Probe>,
    /// restartPolicy Always (any exit) or OnFailure (a non-zero one).
    pub restart: Restart,
    /// The pod's `terminationGracePeriodSeconds`: the time a container
    /// killed for its liveness probe has after SIGTERM.
    pub grace: Duration,
    pub log: Arc<ContainerLog>,
    pub workdir: PathBuf,
}

/// The pod's restartPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    Always,
    OnFailure,
    Never,
}

impl Restart {
    pub(crate) fn of(pod: &Value) -> Restart {
        match pod["spec"]["restartPolicy"].as_str() {
            Some("Never") => Restart::Never,
            Some("OnFailure") => Restart::OnFailure,
            _ => Restart::Always,
        }
    }

    fn again(self, code: i32) -> bool {
        match self {
            Restart::Always => true,
            Restart::OnFailure => code != 0,
            Restart::Never => false,
        }
    }
}

/// What a container reports to its pod.
#[derive(Debug)]
pub(crate) enum Event {
    /// Its process runs (again), since `at`.
    Started {
        name: String,
        at: String,
        restart_count: u32,
        last: Option<Stop>,
    },
    /// The readiness verdict changed.
    Ready { name: String, ready: bool },
    /// Its process ended; `again`: it is started again after this wait.
    Exited {
        name: String,
        stop: Stop,
        again: Option<Duration>,
    },
}

/// The pod's stop: SIGTERM now, SIGKILL at the instant; `oom`: SIGKILL at
/// once, `OOMKilled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodStop {
    pub kill_at: Instant,
    pub oom: bool,
}

/// Commands to one container from the pod (faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// SIGSTOP: the process is frozen (its loops, its endpoints), as a
    /// wedged process is; the kubelet's SIGKILL still ends it.
    Freeze,
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(255)
}

fn signal(pid: Option<u32>, sig: nix::sys::signal::Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
}

/// util-linux's `setpriv` when it knows `--pdeathsig`: the processes then
/// die with the agent even when it is SIGKILLed (it execs, same PID).
fn setpriv() -> Option<&'static Path> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = ["/usr/bin/setpriv", "/bin/setpriv"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())?;
            let help = std::process::Command::new(&path)
                .arg("--help")
                .output()
                .ok()?;
            String::from_utf8_lossy(&help.stdout)
                .contains("--pdeathsig")
                .then_some(path)
        })
        .as_deref()
}

fn spawn(spec: &Spec, kubeconfig: &Path) -> std::io::Result<tokio::process::Child> {
    let mut cmd = match setpriv() {
        Some(setpriv) => {
            let mut cmd = tokio::process::Command::new(setpriv);
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(&spec.program);
            cmd
        }
        None => tokio::process::Command::new(&spec.program),
    };
    cmd.args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(&spec.workdir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn()
}

fn copy_lines<R>(reader: R, log: Arc<ContainerLog>)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            log.append(&line);
        }
    });
}

async fn until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Runs one container until it stops for good: started, probed, restarted
/// as its policy says, stopped when the pod is.
pub(crate) async fn run_container(
    spec: Spec,
    kubeconfig: PathBuf,
    http: reqwest::Client,
    events: mpsc::UnboundedSender<Event>,
    mut pod_stop: watch::Receiver<Option<PodStop>>,
    mut faults: mpsc::UnboundedReceiver<Fault>,
) {
    let now = crate::node::k8s_now;
    let mut restart_count = 0u32;
    let mut last: Option<Stop> = None;
    let mut back_off: Option<Duration> = None;
    let mut faults_closed = false;
    loop {
        if pod_stop.borrow().is_some() {
            return;
        }
        let started_at = now();
        let started = Instant::now();
        let mut child = match spawn(&spec, &kubeconfig) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("failed to start {}: {e}", spec.program.display());
                spec.log.append(&message);
                let stop = Stop {
                    exit_code: 128,
                    reason: "StartError".into(),
                    message: Some(message),
                    ran: Some((started_at.clone(), now())),
                };
                let _ = events.send(Event::Exited {
                    name: spec.name.clone(),
                    stop,
                    again: None,
                });
                return;
            }
        };
        if let Some(out) = child.stdout.take() {
            copy_lines(out, spec.log.clone());
        }
        if let Some(err) = child.stderr.take() {
            copy_lines(err, spec.log.clone());
        }
        let pid = child.id();
        let _ = events.send(Event::Started {
            name: spec.name.clone(),
            at: started_at.clone(),
            restart_count,
            last: last.clone(),
        });
        let mut liveness = spec.liveness.clone().map(|p| Prober::new(p, started));
        let mut readiness = spec.readiness.clone().map(|p| Prober::new(p, started));
        // Ready at once without a readiness probe (after a restart too),
        // else not until the probe says so.
        let mut ready = readiness.is_none();
        let _ = events.send(Event::Ready {
            name: spec.name.clone(),
            ready,
        });
        let mut kill_at: Option<Instant> = None;
        let mut oom = false;
        let mut stopping = false;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = until(kill_at) => {
                    let _ = child.start_kill();
                    kill_at = None;
                }
                changed = pod_stop.changed(), if !stopping => {
                    // The pod's worker gone: stop at once.
                    let gone = PodStop { kill_at: Instant::now(), oom: false };
                    let stop = if changed.is_ok() { *pod_stop.borrow() } else { Some(gone) };
                    if let Some(stop) = stop {
                        stopping = true;
                        oom = stop.oom;
                        if stop.oom {
                            let _ = child.start_kill();
                        } else {
                            signal(pid, nix::sys::signal::Signal::SIGTERM);
                            kill_at = Some(kill_at.map_or(stop.kill_at, |k| k.min(stop.kill_at)));
                        }
                    }
                }
                fault = faults.recv(), if !faults_closed => match fault {
                    Some(Fault::Freeze) => {
                        spec.log.append("(node agent: the process is frozen, SIGSTOP)");
                        signal(pid, nix::sys::signal::Signal::SIGSTOP);
                    }
                    None => faults_closed = true,
                },
                _ = until(liveness.as_ref().map(|p| p.next)), if kill_at.is_none() && !stopping => {
                    let p = liveness.as_mut().expect("a liveness probe");
                    let result = probe_once(&http, &p.probe).await;
                    if let Err(why) = &result {
                        tracing::info!(container = %spec.name, %why, "liveness probe failed");
                    }
                    if p.record(result.is_ok()) == Some(false) {
                        spec.log.append(&format!(
                            "(node agent: liveness probe failed {} times; restarting the container)",
                            p.probe.failure_threshold
                        ));
                        signal(pid, nix::sys::signal::Signal::SIGTERM);
                        kill_at = Some(Instant::now() + spec.grace.max(crate::worker::MIN_GRACE));
                    }
                }
                _ = until(readiness.as_ref().map(|p| p.next)), if !stopping => {
                    let p = readiness.as_mut().expect("a readiness probe");
                    let result = probe_once(&http, &p.probe).await;
                    if let Some(verdict) = p.record(result.is_ok())
                        && verdict != ready
                    {
                        ready = verdict;
                        let _ = events.send(Event::Ready { name: spec.name.clone(), ready });
                    }
                }
            }
        };
        let code = status.map(exit_code).unwrap_or(137);
        let finished = now();
        let stop = if oom {
            Stop::oom(&started_at, &finished)
        } else {
            Stop::exited(code, &started_at, &finished)
        };
        let again =
            (!stopping && pod_stop.borrow().is_none() && spec.restart.again(code)).then(|| {
                // The first restart at once, then the crash-loop back-off;
                // ten minutes of a good run resets it.
                if started.elapsed() > Duration::from_secs(600) {
                    back_off = None;
                }
                let wait = back_off.unwrap_or(Duration::ZERO);
                back_off =
                    Some(back_off.map_or(CRASH_BACK_OFF, |b| (b * 2).min(CRASH_BACK_OFF_MAX)));
                wait
            });
        let _ = events.send(Event::Exited {
            name: spec.name.clone(),
            stop: stop.clone(),
            again,
        });
        let Some(wait) = again else {
            return;
        };
        last = Some(stop);
        restart_count += 1;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = pod_stop.changed() => return,
        }
    }
}

/// This agent's directory of pod files, `$TMPDIR/tcab-node-agent/<pid>`.
/// The directories of agents no longer running (killed before their pods'
/// files were removed) are removed first.
pub fn pods_dir() -> PathBuf {
    let root = std::env::temp_dir().join("tcab-node-agent");
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries.flatten() {
            let pid = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok());
            let dead = pid.is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    == Err(nix::errno::Errno::ESRCH)
            });
            if dead {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    root.join(std::process::id().to_string())
}

/// The files of a pod's in-cluster configuration (see the module's doc).
pub(crate) struct PodFiles {
    pub dir: PathBuf,
}

impl PodFiles {
    /// Makes the pod's directory and writes the CA, the namespace and the
    /// kubeconfig (the token comes with [`PodFiles::write_token`]).
    pub(crate) fn create(
        root: &Path,
        uid: &str,
        api_url: &str,
        ca_pem: &[u8],
        namespace: &str,
    ) -> std::io::Result<PodFiles> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = root.join(uid);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        std::fs::write(dir.join("ca.crt"), ca_pem)?;
        std::fs::write(dir.join("namespace"), namespace)?;
        let kubeconfig = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "in-cluster", "cluster": {
                "server": api_url,
                "certificate-authority": dir.join("ca.crt"),
            }}],
            "users": [{"name": "service-account", "user": {"tokenFile": dir.join("token")}}],
            "contexts": [{"name": "in-cluster", "context": {
                "cluster": "in-cluster", "user": "service-account", "namespace": namespace,
            }}],
            "current-context": "in-cluster",
        });
        std::fs::write(dir.join("kubeconfig"), kubeconfig.to_string())?;
        Ok(PodFiles { dir })
    }

    /// Writes (or replaces, atomically) the token, mode 0600.
    pub(crate) fn write_token(&self, token: &str) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = self.dir.join(".token.tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(token.as_bytes())?;
        drop(f);
        std::fs::rename(tmp, self.dir.join("token"))
    }

    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
}

impl Drop for PodFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_repositories() {
        assert_eq!(repository("tcab-dispatcher:0.1.0"), "tcab-dispatcher");
        assert_eq!(
            repository("registry.example:5000/tcab-dispatcher@sha256:abc"),
            "registry.example:5000/tcab-dispatcher"
        );
        assert_eq!(
            repository("registry.example:5000/x"),
            "registry.example:5000/x"
        );
        let images = [LocalImage {
            repository: "tcab-dispatcher".into(),
            bin_dir: "/bins".into(),
        }];
        let pod = json!({"spec": {"containers": [{"image": "tcab-dispatcher:0.1.0"}]}});
        assert_eq!(local_binaries(&images, &pod), Some(Path::new("/bins")));
        let other = json!({"spec": {"containers": [{"image": "tcab/driver:dev"}]}});
        assert_eq!(local_binaries(&images, &other), None);
    }

    #[test]
    fn the_api_server_annotation_overrides_the_kubeconfig_server() {
        let api = "https://127.0.0.1:6443".to_owned();
        let plain = json!({"metadata": {"annotations": {"other": "x"}}});
        assert_eq!(api_server_of(&plain, api.clone()), api);
        let proxied = json!({"metadata": {"annotations":
            {API_SERVER_ANNOTATION: "https://127.0.0.1:7000"}}});
        assert_eq!(api_server_of(&proxied, api), "https://127.0.0.1:7000");
    }

    #[test]
    fn probes_as_the_chart_renders_them() {
        let c = json!({
            "ports": [{"name": "admit-metrics", "containerPort": 9090}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "admit-metrics"},
                "periodSeconds": 5, "failureThreshold": 2},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 9090}},
            "startupProbe": {"exec": {"command": ["true"]}},
        });
        let l = probe(&c, "livenessProbe").unwrap().unwrap();
        assert_eq!((l.path.as_str(), l.port), ("/healthz", 9090));
        assert_eq!(
            (l.period, l.failure_threshold, l.timeout),
            (Duration::from_secs(5), 2, Duration::from_secs(1))
        );
        let r = probe(&c, "readinessProbe").unwrap().unwrap();
        assert_eq!(
            (r.period, r.success_threshold),
            (Duration::from_secs(10), 1)
        );
        assert!(probe(&c, "startupProbe").is_err());
        assert_eq!(probe(&c, "nothing").unwrap(), None);
        let bad = json!({"livenessProbe": {"httpGet": {"port": "nope"}}});
        assert!(probe(&bad, "livenessProbe").is_err());
    }

    #[test]
    fn thresholds_need_consecutive_results() {
        let p = Probe {
            path: "/".into(),
            port: 1,
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            failure_threshold: 3,
            success_threshold: 1,
        };
        let mut pr = Prober::new(p, Instant::now());
        assert_eq!(pr.record(false), None);
        assert_eq!(pr.record(false), None);
        assert_eq!(pr.record(true), Some(true));
        assert_eq!(pr.record(false), None);
        assert_eq!(pr.record(false), None);
        assert_eq!(pr.record(false), Some(false));
    }

    #[test]
    fn restart_policies() {
        assert_eq!(Restart::of(&json!({"spec": {}})), Restart::Always);
        assert!(Restart::Always.again(0));
        assert!(!Restart::OnFailure.again(0) && Restart::OnFailure.again(1));
        assert!(!Restart::of(&json!({"spec": {"restartPolicy": "Never"}})).again(1));
    }

    /// A container whose process exits is started again at once, then after
    /// the back-off: exit codes kept, restartCount and lastState carried,
    /// ready again after each start (no readiness probe), its output in its
    /// log; the pod's stop ends it for good.
    #[tokio::test]
    async fn an_exiting_container_is_restarted_with_its_exit_code_and_ready_again() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Arc::new(ContainerLog::default());
        let spec = Spec {
            name: "c".into(),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo \"hello $GREETING\"; exit 3".into()],
            env: BTreeMap::from([("GREETING".to_string(), "pod".to_string())]),
            liveness: None,
            readiness: None,
            restart: Restart::Always,
            grace: Duration::from_secs(1),
            log: log.clone(),
            workdir: dir.path().to_owned(),
        };
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = watch::channel(None);
        let (_faults_tx, faults_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_container(
            spec,
            dir.path().join("kubeconfig"),
            reqwest::Client::new(),
            events_tx,
            stop_rx,
            faults_rx,
        ));
        let mut seen = Vec::new();
        let deadline = Duration::from_secs(30);
        while seen.len() < 6 {
            let event = tokio::time::timeout(deadline, events.recv())
                .await
                .expect("an event in time")
                .expect("the container still runs");
            seen.push(event);
        }
        let _ = stop_tx.send(Some(PodStop {
            kill_at: Instant::now(),
            oom: false,
        }));
        tokio::time::timeout(deadline, task)
            .await
            .expect("stopped in time")
            .expect("no panic");
        let summary: Vec<String> = seen
            .iter()
            .map(|e| match e {
                Event::Started {
                    restart_count,
                    last,
                    ..
                } => format!(
                    "started {restart_count} last {:?}",
                    last.as_ref().map(|s| s.exit_code)
                ),
                Event::Ready { ready, .. } => format!("ready {ready}"),
                Event::Exited { stop, again, .. } => {
                    format!("exited {} {} again {again:?}", stop.exit_code, stop.reason)
                }
            })
            .collect();
        assert_eq!(
            summary,
            [
                "started 0 last None",
                "ready true",
                "exited 3 Error again Some(0ns)",
                "started 1 last Some(3)",
                "ready true",
                "exited 3 Error again Some(10s)",
            ]
        );
        assert_eq!(log.text()[0], "hello pod", "the env reached the process");
    }

    #[test]
    fn the_pod_files_of_dead_agents_are_swept() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        let root = std::env::temp_dir().join("tcab-node-agent");
        let stale = root.join(dead.to_string()).join("some-pod-uid");
        std::fs::create_dir_all(&stale).expect("mkdir");
        std::fs::write(stale.join("token"), "x").expect("write");
        let mine = pods_dir();
        assert_eq!(mine, root.join(std::process::id().to_string()));
        assert!(!root.join(dead.to_string()).exists(), "swept");
    }
}
