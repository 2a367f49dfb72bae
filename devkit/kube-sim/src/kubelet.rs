//! The simulated kubelets. One watch over pods ([`run`]) starts a task for
//! every pod bound to a running machine and passes deletions on; the task
//! takes its pod the way the kubelet does:
//!
//! 1. volumes: a non-optional Secret volume whose Secret is missing keeps
//!    the pod `ContainerCreating` with a `FailedMount` Event, retried with
//!    the volume manager's back-off (0.5 s doubling to 2m2s);
//! 2. images: a reference that does not parse is `InvalidImageName`; an
//!    image the admin marked unpullable is `ErrImagePull`, then
//!    `ImagePullBackOff` until the back-off (10 s doubling to 300 s) passes;
//! 3. the container's env: a missing non-optional Secret (envFrom or
//!    secretKeyRef) is `CreateContainerConfigError` (`secret "x" not
//!    found`), retried every 10 s;
//! 4. the container runs its program (fake driver, publisher or plain);
//! 5. deletion: SIGTERM, SIGKILL after the grace period (at least 2 s, as
//!    the runtime's minimum), the terminal status, then the kubelet's own
//!    delete with grace 0. OOM kill: `OOMKilled`, 137. Node-pressure
//!    eviction: grace 1 s (so 2 s), the pod kept `Failed` with reason
//!    `Evicted`. A container stopped by the runtime (the admin `kill`):
//!    SIGTERM, SIGKILL after its grace, the pod kept `Failed`.
//!
//! Every duration is sim time. The signal field of a terminated container
//! is never set (the kubelet does not report it).

use crate::clock::k8s_time;
use crate::events::{EventType, Source};
use crate::images;
use crate::objects::{self, deleting};
use crate::podstatus::{self, Eviction, Stop};
use crate::sim::Sim;
use crate::store::{EventType as Change, Key, Kind};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tcab_workloads::{Host, Program};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch};

/// What the kubelet can be told to do to a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSignal {
    /// The pod is being deleted: SIGTERM now, SIGKILL after `grace` (at least
    /// 2 s); a shorter grace later brings the SIGKILL forward.
    Term {
        /// Time the program has to exit.
        grace: Duration,
    },
    /// The kernel's OOM killer: SIGKILL at once, `OOMKilled`.
    Oom,
    /// Node-pressure eviction by the kubelet itself.
    Evict {
        /// The eviction message.
        message: String,
    },
    /// The container is stopped without deleting the pod (as `crictl stop
    /// --timeout N` would): SIGTERM, SIGKILL after `grace` (zero: SIGKILL at
    /// once). The pod ends `Failed` with the container's exit code.
    Stop {
        /// Time the program has to exit.
        grace: Duration,
    },
}

/// The runtime's minimum grace period (kuberuntime `minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);
/// Grace period of a node-pressure eviction (`immediateEvictionGracePeriodSeconds`).
const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// A pod the kubelet of a machine has taken.
pub(crate) struct PodTask {
    tx: mpsc::UnboundedSender<PodSignal>,
    /// The machine.
    pub(crate) node: String,
    uid: String,
    abort: Option<tokio::task::AbortHandle>,
    /// The container runs (signals other than Term make sense).
    pub(crate) running: bool,
}

/// What a pod's program sees: its pod, its env, a log, and SIGTERM. It is
/// the [`Host`] of the shared fake programs (tcab-workloads) on the sim:
/// sim time, the sim's store, and pods created and deleted in-process.
pub struct ProcCtx {
    /// The shared sim.
    pub sim: Arc<Sim>,
    /// The pod as it was when the container started.
    pub pod: Arc<Value>,
    /// The pod's key.
    pub key: Key,
    /// The container's name.
    pub container: String,
    env: BTreeMap<String, String>,
    sigterm: watch::Receiver<bool>,
}

impl ProcCtx {
    /// Writes a line to the container's log.
    pub fn log(&self, line: impl AsRef<str>) {
        self.sim
            .store
            .append_log(&self.key.ns, &self.key.name, &self.container, line.as_ref());
    }

    /// The value of an env variable of the container (literal values, Secret
    /// keys and the downward API, as the kubelet resolved them).
    pub fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    /// Whether SIGTERM has been delivered.
    pub fn terminated(&self) -> bool {
        *self.sigterm.borrow()
    }

    /// Waits until SIGTERM is delivered (forever if it never is).
    pub async fn sigterm(&self) {
        let mut rx = self.sigterm.clone();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sleeps `sim` of sim time; returns `false` when SIGTERM cut it short.
    pub async fn sleep(&self, sim: Duration) -> bool {
        tcab_workloads::sleep_unless_terminated(self, sim).await
    }
}

impl Host for ProcCtx {
    fn env(&self, name: &str) -> Option<String> {
        ProcCtx::env(self, name)
    }

    fn namespace(&self) -> &str {
        &self.key.ns
    }

    fn log(&self, line: &str) {
        ProcCtx::log(self, line)
    }

    fn now(&self) -> jiff::Timestamp {
        self.sim.clock.now()
    }

    async fn sleep(&self, d: Duration) {
        self.sim.clock.sleep(d).await
    }

    fn terminated(&self) -> bool {
        ProcCtx::terminated(self)
    }

    async fn sigterm(&self) {
        ProcCtx::sigterm(self).await
    }

    fn http(&self) -> &reqwest::Client {
        &self.sim.http
    }

    async fn create_pod(&self, namespace: &str, pod: Value) -> Result<String, String> {
        self.sim
            .create_pod(namespace, pod)
            .map(|p| objects::name(&p).to_string())
            .map_err(|e| e.message)
    }

    async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), String> {
        self.sim
            .delete_pod(namespace, name, None)
            .map(|_| ())
            .map_err(|e| e.message)
    }
}

/// Annotation: a plain container's exit code.
pub use tcab_workloads::EXIT_CODE;
/// Annotation: how long a plain container runs, in (sim) seconds.
pub use tcab_workloads::RUN_SECONDS;

fn program_for(sim: &Sim, pod: &Value) -> Program {
    Program::for_pod(pod, sim.timing.default_job_pod_run)
}

async fn run_program(program: Program, ctx: ProcCtx) -> i32 {
    tcab_workloads::run(&program, &ctx).await
}

/// Counts a program in [`Sim::programs_running`] until it is dropped, which
/// happens when the program returns or is killed.
struct Running(Arc<Sim>);

impl Running {
    fn new(sim: &Arc<Sim>) -> Self {
        sim.programs.fetch_add(1, Ordering::SeqCst);
        Running(sim.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.programs.fetch_sub(1, Ordering::SeqCst);
    }
}

fn pod_key(p: &Value) -> Key {
    Key::new(
        Kind::Pod,
        p["metadata"]["namespace"].as_str().unwrap_or(""),
        objects::name(p),
    )
}

/// The kubelets' pod watch.
pub async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    resync(&sim);
    loop {
        match rx.recv().await {
            Ok(ev) if ev.key.kind == Kind::Pod => {
                if ev.etype == Change::Deleted {
                    signal_if(
                        &sim,
                        &ev.key,
                        objects::uid(&ev.object),
                        PodSignal::Term {
                            grace: Duration::ZERO,
                        },
                    );
                } else {
                    observe(&sim, &ev.key, &ev.object);
                }
            }
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => resync(&sim),
            Err(RecvError::Closed) => return,
        }
    }
}

fn resync(sim: &Arc<Sim>) {
    for p in sim
        .store
        .list(Kind::Pod, None, |p| p["spec"]["nodeName"].is_string())
        .1
    {
        observe(sim, &pod_key(&p), &p);
    }
}

/// Reacts to one pod: a deleting pod's task gets `Term`; a bound pod with no
/// task on a running machine gets one.
fn observe(sim: &Arc<Sim>, key: &Key, pod: &Value) {
    let uid = objects::uid(pod);
    if deleting(pod) {
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            .max(0) as u64;
        if signal_if(
            sim,
            key,
            uid,
            PodSignal::Term {
                grace: Duration::from_secs(grace),
            },
        ) {
            return;
        }
    }
    kick(sim, key);
}

fn signal_if(sim: &Sim, key: &Key, uid: &str, sig: PodSignal) -> bool {
    let pods = sim.pods.lock().unwrap_or_else(|p| p.into_inner());
    match pods.get(key) {
        Some(t) if t.uid == uid => t.tx.send(sig).is_ok(),
        _ => false,
    }
}

/// Starts a task for the pod at `key` if its machine runs, it has none and
/// it has not finished.
pub(crate) fn kick(sim: &Arc<Sim>, key: &Key) {
    if sim.halted() {
        return;
    }
    let Some(pod) = sim.store.get(key) else {
        return;
    };
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return;
    };
    if podstatus::terminal(&pod) || pod["status"]["phase"] == "Running" || !sim.machine_up(node) {
        return;
    }
    let mut pods = sim.pods.lock().unwrap_or_else(|p| p.into_inner());
    if pods.contains_key(key) {
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let uid = objects::uid(&pod).to_string();
    pods.insert(
        key.clone(),
        PodTask {
            tx,
            node: node.to_string(),
            uid: uid.clone(),
            abort: None,
            running: false,
        },
    );
    let handle = tokio::spawn(run_pod(sim.clone(), key.clone(), uid, node.to_string(), rx));
    if let Some(t) = pods.get_mut(key) {
        t.abort = Some(handle.abort_handle());
    }
}

/// Sends a signal to a pod's task; `false` when no task has the pod or its
/// container does not run (for signals other than `Term`).
pub(crate) fn signal(sim: &Sim, key: &Key, sig: PodSignal) -> bool {
    let pods = sim.pods.lock().unwrap_or_else(|p| p.into_inner());
    match pods.get(key) {
        Some(t) if t.running || matches!(sig, PodSignal::Term { .. } | PodSignal::Evict { .. }) => {
            t.tx.send(sig).is_ok()
        }
        _ => false,
    }
}

/// Stops every task on `node` at once (the machine died): no status is
/// written, the programs are dropped where they are.
pub(crate) fn stop_node(sim: &Sim, node: Option<&str>) {
    let mut pods = sim.pods.lock().unwrap_or_else(|p| p.into_inner());
    let keys: Vec<Key> = pods
        .iter()
        .filter(|(_, t)| node.is_none_or(|n| t.node == n))
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        if let Some(t) = pods.remove(&k)
            && let Some(a) = t.abort
        {
            a.abort();
        }
    }
}

/// Removes the task's registration when it ends (or is aborted), then
/// starts whatever pod now holds the name, if it waits for a kubelet.
struct TaskGuard {
    sim: Arc<Sim>,
    key: Key,
    uid: String,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mine = {
            let mut pods = self.sim.pods.lock().unwrap_or_else(|p| p.into_inner());
            let mine = pods.get(&self.key).is_some_and(|t| t.uid == self.uid);
            if mine {
                pods.remove(&self.key);
            }
            mine
        };
        if mine {
            kick(&self.sim, &self.key);
        }
    }
}

fn set_running(sim: &Sim, key: &Key, running: bool) {
    let mut pods = sim.pods.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = pods.get_mut(key) {
        t.running = running;
    }
}

/// Why a pod stopped before its container ran.
enum Early {
    /// Deleted (or gone).
    Deleted,
    /// Evicted by the kubelet.
    Evicted(String),
}

enum Prepared {
    Ready(Arc<Value>, BTreeMap<String, String>),
    Stopped(Early),
    Gone,
}

#[derive(Default)]
struct PullState {
    failures: u32,
    next_try: Option<Instant>,
}

fn current(sim: &Sim, key: &Key, uid: &str) -> Option<Arc<Value>> {
    sim.store.get(key).filter(|p| objects::uid(p) == uid)
}

fn write_waiting(
    sim: &Sim,
    key: &Key,
    uid: &str,
    reason: &str,
    message: Option<&str>,
    sandbox: bool,
    host: &str,
) {
    let now = k8s_time(sim.clock.now());
    let _ = sim.store.update(key, |p| {
        if objects::uid(p) != uid {
            return Ok(false);
        }
        Ok(podstatus::mark_waiting(
            p,
            (reason, message),
            sandbox,
            host,
            &now,
        ))
    });
}

/// Volumes, images and env, retried until the container can start.
async fn prepare(
    sim: &Arc<Sim>,
    key: &Key,
    uid: &str,
    node: &str,
    rx: &mut mpsc::UnboundedReceiver<PodSignal>,
) -> Prepared {
    let host = sim.host_ip(node);
    let src = Source::kubelet(node);
    let mut mount_failures = 0u32;
    let mut pulls: HashMap<String, PullState> = HashMap::new();
    loop {
        let Some(pod) = current(sim, key, uid) else {
            return Prepared::Gone;
        };
        if deleting(&pod) {
            return Prepared::Stopped(Early::Deleted);
        }
        let wait: Duration;
        if let Some((volume, secret)) = missing_secret_volume(sim, &pod) {
            mount_failures += 1;
            write_waiting(
                sim,
                key,
                uid,
                podstatus::CONTAINER_CREATING,
                None,
                false,
                &host,
            );
            sim.record(
                Kind::Pod,
                &pod,
                EventType::Warning,
                "FailedMount",
                &format!("MountVolume.SetUp failed for volume \"{volume}\" : secret \"{secret}\" not found"),
                &src,
            );
            wait = images::back_off(
                mount_failures,
                Duration::from_millis(500),
                Duration::from_secs(122),
            );
        } else if let Some(w) = image_trouble(sim, &pod, &mut pulls, &src) {
            write_waiting(sim, key, uid, w.reason, Some(&w.message), true, &host);
            wait = w.retry;
        } else {
            match resolve_env(sim, &pod, node) {
                Ok(env) => return Prepared::Ready(pod, env),
                Err(msg) => {
                    write_waiting(
                        sim,
                        key,
                        uid,
                        "CreateContainerConfigError",
                        Some(&msg),
                        true,
                        &host,
                    );
                    sim.record(
                        Kind::Pod,
                        &pod,
                        EventType::Warning,
                        "Failed",
                        &format!("Error: {msg}"),
                        &src,
                    );
                    wait = sim.timing.kubelet_retry;
                }
            }
        }
        tokio::select! {
            _ = sim.clock.sleep(wait) => {}
            sig = rx.recv() => match sig {
                Some(PodSignal::Term { .. }) | None => {
                    return match current(sim, key, uid) {
                        Some(_) => Prepared::Stopped(Early::Deleted),
                        None => Prepared::Gone,
                    };
                }
                Some(PodSignal::Evict { message }) => return Prepared::Stopped(Early::Evicted(message)),
                Some(PodSignal::Oom | PodSignal::Stop { .. }) => {}
            }
        }
    }
}

struct Waiting {
    reason: &'static str,
    message: String,
    retry: Duration,
}

/// The first container image that cannot be had yet, with what the
/// container shows meanwhile (and the Events the kubelet records).
fn image_trouble(
    sim: &Sim,
    pod: &Value,
    pulls: &mut HashMap<String, PullState>,
    src: &Source,
) -> Option<Waiting> {
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let image = c["image"].as_str().unwrap_or("");
        if let Err(msg) = images::check_reference(image) {
            sim.record(
                Kind::Pod,
                pod,
                EventType::Warning,
                "InspectFailed",
                &msg,
                src,
            );
            sim.record(
                Kind::Pod,
                pod,
                EventType::Warning,
                "Failed",
                &format!("Error: {}", images::INVALID_IMAGE_NAME),
                src,
            );
            return Some(Waiting {
                reason: images::INVALID_IMAGE_NAME,
                message: msg,
                retry: sim.timing.kubelet_retry,
            });
        }
        if !sim.unpullable(image) {
            pulls.remove(image);
            continue;
        }
        let state = pulls.entry(image.to_string()).or_default();
        let now = Instant::now();
        if let Some(next) = state.next_try
            && now < next
        {
            let msg = images::back_off_message(image);
            let event = images::back_off_event(image);
            sim.record(Kind::Pod, pod, EventType::Normal, "BackOff", &event, src);
            sim.record(
                Kind::Pod,
                pod,
                EventType::Warning,
                "Failed",
                &format!("Error: {}", images::IMAGE_PULL_BACK_OFF),
                src,
            );
            return Some(Waiting {
                reason: images::IMAGE_PULL_BACK_OFF,
                message: msg,
                retry: sim.clock.sim_duration(next - now),
            });
        }
        state.failures += 1;
        let back_off = images::back_off(
            state.failures,
            sim.timing.image_back_off,
            sim.timing.image_back_off_max,
        );
        state.next_try = Some(now + sim.clock.real(back_off));
        let err = images::pull_error(image);
        sim.record(
            Kind::Pod,
            pod,
            EventType::Normal,
            "Pulling",
            &format!("Pulling image \"{image}\""),
            src,
        );
        sim.record(
            Kind::Pod,
            pod,
            EventType::Warning,
            "Failed",
            &format!("Failed to pull image \"{image}\": {err}"),
            src,
        );
        sim.record(
            Kind::Pod,
            pod,
            EventType::Warning,
            "Failed",
            &format!("Error: {}", images::ERR_IMAGE_PULL),
            src,
        );
        return Some(Waiting {
            reason: images::ERR_IMAGE_PULL,
            message: err,
            retry: Duration::from_secs(1).min(back_off),
        });
    }
    None
}

/// The first non-optional Secret volume whose Secret is missing: (volume, secret).
fn missing_secret_volume(sim: &Sim, pod: &Value) -> Option<(String, String)> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|v| {
            let s = &v["secret"];
            let name = s["secretName"].as_str()?;
            let optional = s["optional"] == true;
            (!optional && sim.secret(ns, name).is_none()).then(|| {
                (
                    v["name"].as_str().unwrap_or("").to_string(),
                    name.to_string(),
                )
            })
        })
}

fn decode_b64(s: &str) -> Option<String> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut buf, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The first container's environment as the kubelet builds it
/// (`makeEnvironmentVariables`): envFrom Secrets first, then `env` (literal
/// values, `secretKeyRef`, the downward API). ConfigMaps are not modelled
/// (their references resolve to nothing).
fn resolve_env(sim: &Sim, pod: &Value, node: &str) -> Result<BTreeMap<String, String>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let c = &pod["spec"]["containers"][0];
    let mut env = BTreeMap::new();
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let Some(name) = from["secretRef"]["name"].as_str() else {
            continue;
        };
        let prefix = from["prefix"].as_str().unwrap_or("");
        match sim.secret(ns, name) {
            Some(secret) => {
                for (k, v) in secret["data"].as_object().into_iter().flatten() {
                    if let Some(v) = v.as_str().and_then(decode_b64) {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
            }
            None if from["secretRef"]["optional"] == true => {}
            None => return Err(format!("secret \"{name}\" not found")),
        }
    }
    let pod_ip = podstatus::pod_ip(sim.node_index(node), objects::name(pod));
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        if let Some(v) = e["value"].as_str() {
            env.insert(name.to_string(), v.to_string());
            continue;
        }
        let from = &e["valueFrom"];
        if let Some(r) = from["secretKeyRef"].as_object() {
            let sname = r.get("name").and_then(Value::as_str).unwrap_or("");
            let key = r.get("key").and_then(Value::as_str).unwrap_or("");
            let optional = r.get("optional") == Some(&Value::Bool(true));
            match sim.secret(ns, sname) {
                Some(secret) => match secret["data"][key].as_str().and_then(decode_b64) {
                    Some(v) => {
                        env.insert(name.to_string(), v);
                    }
                    None if optional => {}
                    None => return Err(format!("couldn't find key {key} in Secret {ns}/{sname}")),
                },
                None if optional => {}
                None => return Err(format!("secret \"{sname}\" not found")),
            }
        } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            let v = match path {
                "metadata.name" => objects::name(pod).to_string(),
                "metadata.namespace" => ns.to_string(),
                "metadata.uid" => objects::uid(pod).to_string(),
                "spec.nodeName" => node.to_string(),
                "spec.serviceAccountName" => pod["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                "status.podIP" => pod_ip.clone(),
                "status.hostIP" => sim.host_ip(node),
                _ => String::new(),
            };
            env.insert(name.to_string(), v);
        }
    }
    Ok(env)
}

/// One pod on one machine, from Pending to its end.
async fn run_pod(
    sim: Arc<Sim>,
    key: Key,
    uid: String,
    node: String,
    mut rx: mpsc::UnboundedReceiver<PodSignal>,
) {
    let _guard = TaskGuard {
        sim: sim.clone(),
        key: key.clone(),
        uid: uid.clone(),
    };
    let src = Source::kubelet(&node);
    let (pod, env) = match prepare(&sim, &key, &uid, &node, &mut rx).await {
        Prepared::Ready(pod, env) => (pod, env),
        Prepared::Stopped(Early::Deleted) => {
            finish(&sim, &key, &uid, &Stop::unknown(), None);
            return;
        }
        Prepared::Stopped(Early::Evicted(message)) => {
            if let Some(p) = current(&sim, &key, &uid) {
                sim.record(Kind::Pod, &p, EventType::Warning, "Evicted", &message, &src);
            }
            finish(
                &sim,
                &key,
                &uid,
                &Stop::unknown(),
                Some(&Eviction { message }),
            );
            return;
        }
        Prepared::Gone => return,
    };
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("main")
        .to_string();
    // The container is created and started.
    tokio::select! {
        _ = sim.clock.sleep(sim.timing.start_delay) => {}
        sig = rx.recv() => {
            match sig {
                Some(PodSignal::Evict { message }) => {
                    sim.record(Kind::Pod, &pod, EventType::Warning, "Evicted", &message, &src);
                    finish(&sim, &key, &uid, &Stop::unknown(), Some(&Eviction { message }));
                }
                _ => finish(&sim, &key, &uid, &Stop::unknown(), None),
            }
            return;
        }
    }
    let started = k8s_time(sim.clock.now());
    let host = sim.host_ip(&node);
    let ip = podstatus::pod_ip(sim.node_index(&node), &key.name);
    let Ok(pod) = sim.store.update(&key, |p| {
        if objects::uid(p) != uid {
            return Ok(false);
        }
        podstatus::mark_running(p, &started, &host, &ip);
        Ok(true)
    }) else {
        return;
    };
    if objects::uid(&pod) != uid || pod["status"]["phase"] != "Running" {
        return;
    }
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let n = c["name"].as_str().unwrap_or("");
        let image = c["image"].as_str().unwrap_or("");
        sim.record(
            Kind::Pod,
            &pod,
            EventType::Normal,
            "Pulled",
            &format!("Container image \"{image}\" already present on machine"),
            &src,
        );
        sim.record(
            Kind::Pod,
            &pod,
            EventType::Normal,
            "Created",
            &format!("Created container: {n}"),
            &src,
        );
        sim.record(
            Kind::Pod,
            &pod,
            EventType::Normal,
            "Started",
            &format!("Started container {n}"),
            &src,
        );
    }
    set_running(&sim, &key, true);
    let (term_tx, term_rx) = watch::channel(false);
    let ctx = ProcCtx {
        sim: sim.clone(),
        pod: pod.clone(),
        key: key.clone(),
        container: container.clone(),
        env,
        sigterm: term_rx,
    };
    let program = program_for(&sim, &pod);
    let counted = Running::new(&sim);
    let mut proc = Box::pin(async move {
        let _counted = counted;
        run_program(program, ctx).await
    });
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut eviction: Option<Eviction> = None;
    let term = |grace: Duration, kill_at: &mut Option<tokio::time::Instant>| {
        if !*term_tx.borrow() {
            let _ = term_tx.send(true);
            sim.record(
                Kind::Pod,
                &pod,
                EventType::Normal,
                "Killing",
                &format!("Stopping container {container}"),
                &src,
            );
        }
        let at = tokio::time::Instant::now() + sim.clock.real(grace.max(MIN_GRACE));
        *kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
    };
    let stop = loop {
        let kill_timer = async {
            match kill_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            code = &mut proc => break Stop::exited(code),
            _ = kill_timer => break Stop::killed(),
            sig = rx.recv() => match sig {
                Some(PodSignal::Term { grace }) => term(grace, &mut kill_at),
                Some(PodSignal::Oom) => break Stop::oom(),
                Some(PodSignal::Stop { grace }) if grace.is_zero() => break Stop::killed(),
                Some(PodSignal::Stop { grace }) => term(grace, &mut kill_at),
                Some(PodSignal::Evict { message }) => {
                    sim.record(Kind::Pod, &pod, EventType::Warning, "Evicted", &message, &src);
                    eviction = Some(Eviction { message });
                    term(EVICTION_GRACE, &mut kill_at);
                }
                None => break Stop::killed(),
            }
        }
    };
    // A killed program has stopped for good before its pod says so: nothing
    // it does can follow the terminated status (or the pod's disappearance).
    drop(proc);
    set_running(&sim, &key, false);
    finish(&sim, &key, &uid, &stop, eviction.as_ref());
}

/// Writes the terminal status; a pod being deleted is then deleted by the
/// kubelet with grace 0 (it goes once its finalizers are gone).
fn finish(sim: &Sim, key: &Key, uid: &str, stop: &Stop, eviction: Option<&Eviction>) {
    let finished = k8s_time(sim.clock.now());
    let Ok(pod) = sim.store.update(key, |p| {
        if objects::uid(p) != uid || podstatus::terminal(p) {
            return Ok(false);
        }
        podstatus::mark_terminated(p, stop, eviction, &finished);
        Ok(true)
    }) else {
        return;
    };
    if objects::uid(&pod) == uid && deleting(&pod) {
        let _ = sim.store.delete(key, Some(0), sim.clock.now());
    }
}

/// The machine came back: containers that ran are gone, so their pods
/// become `Failed` with `ContainerStatusUnknown` (exit 137); pods that had
/// not started are taken up again.
pub(crate) fn machine_restarted(sim: &Arc<Sim>, node: &str) {
    for p in sim
        .store
        .list(Kind::Pod, None, |p| p["spec"]["nodeName"] == node)
        .1
    {
        let key = pod_key(&p);
        if p["status"]["phase"] == "Running" {
            finish(sim, &key, objects::uid(&p), &Stop::unknown(), None);
        } else if podstatus::terminal(&p) && deleting(&p) {
            let _ = sim.store.delete(&key, Some(0), sim.clock.now());
        } else {
            kick(sim, &key);
        }
    }
}
