//! One pod on one node, from admission to its end: the kubelet's pod
//! worker (pkg/kubelet/pod_workers.go) with the parts of `SyncPod` the rig
//! needs.
//!
//! 1. the first status: `Pending`, every container waiting
//!    `ContainerCreating`, `PodReadyToStartContainers` False;
//! 2. volumes: a non-optional Secret volume whose Secret is missing keeps
//!    it there, with a `FailedMount` Event, retried with the volume
//!    manager's back-off (0.5 s doubling to 2m2s);
//! 3. the sandbox: a pod IP, `PodReadyToStartContainers` True;
//! 4. the image (pkg/kubelet/images): `InvalidImageName`, or for an image
//!    marked unpullable `ErrImagePull`, then `ImagePullBackOff` until the
//!    back-off passes;
//! 5. the env (`makeEnvironmentVariables`): a missing Secret is
//!    `CreateContainerConfigError`, retried after the worker's back-off;
//! 6. the container runs its program (`Running`, Ready);
//! 7. its end: the program's exit; on a graceful delete SIGTERM and
//!    SIGKILL after max(grace, 2 s) (kuberuntime `killContainer`,
//!    `minimumGracePeriodInSeconds`); an OOM kill (`OOMKilled`, 137), also
//!    at start for a plain program allocating more than its memory limit; a
//!    node-pressure eviction (grace 1 s, so 2 s; `Failed`, `Evicted`,
//!    `DisruptionTarget`); then the terminal status, and for a pod being
//!    deleted the DELETE with grace 0 and a UID precondition
//!    (status_manager.go `syncPod`).
//!
//! Every status write is the status manager's: a GET of the pod, the
//! kubelet's status merged into it, a strategic merge patch of
//! `pods/status` with the UID.

use crate::agent::NodeLife;
use crate::api;
use crate::env;
use crate::host::AgentHost;
use crate::runtime::{self, Workload};
use crate::status::{self, ContainerState, Local, Stop};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tcab_workloads::images;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the kubelet can be told about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The pod is being deleted: SIGTERM now, SIGKILL after `grace` (at
    /// least 2 s); a shorter grace later brings the SIGKILL forward.
    Term {
        /// Time the program has to exit.
        grace: Duration,
    },
    /// The pod left the API: stop at once (the minimum grace), no more
    /// writes.
    Gone,
    /// The kernel's OOM killer: SIGKILL at once, `OOMKilled` 137.
    Oom,
    /// The container exits now with this code.
    Crash {
        /// Its exit code.
        exit_code: i32,
    },
    /// From now on the program does not see SIGTERM (it hangs until the
    /// SIGKILL).
    Hang,
    /// The runtime stops the container without the pod being deleted:
    /// SIGTERM now, SIGKILL after `grace` (at least 2 s).
    Kill {
        /// Time the program has to exit.
        grace: Duration,
    },
    /// Node-pressure eviction by the kubelet.
    Evict {
        /// The eviction message.
        message: String,
    },
    /// A container run as a local binary is frozen (SIGSTOP): a wedged
    /// process, for its liveness probe to find. Fake programs ignore it.
    Freeze {
        /// The container.
        container: String,
    },
}

/// The runtime's minimum grace period (kuberuntime
/// `minimumGracePeriodInSeconds`).
pub const MIN_GRACE: Duration = Duration::from_secs(2);
/// A node-pressure eviction's grace (`immediateEvictionGracePeriodSeconds`).
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);
/// How long a status write is retried: an API-server restart (13 s seen
/// under load on 2 cores) must not leave a finished pod Running for good,
/// which a kubelet's status manager, retrying until it lands, never does.
const WRITE_PATIENCE: Duration = Duration::from_secs(60);

/// The pod worker's view of its pod and what it wrote.
pub(crate) struct Worker {
    life: Arc<NodeLife>,
    ns: String,
    name: String,
    uid: String,
    local: Local,
    /// The pod as the API last answered (with our latest status).
    pod: Value,
    /// The pod left the API (or was replaced): nothing more to write.
    gone: bool,
}

/// Why a pod stopped before its container ran.
enum Early {
    Deleted,
    Evicted(String),
    Gone,
}

struct Pull {
    failures: u32,
    next_try: Option<Instant>,
}

fn deleting(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_string()
}

impl Worker {
    fn now() -> String {
        crate::node::k8s_now()
    }

    /// The status manager's sync: GET, merge, patch. Retries (100 ms
    /// doubling to 2 s) for [`WRITE_PATIENCE`], as the kubelet's status
    /// manager retries until the API server is back; marks the worker gone
    /// when the pod is.
    async fn write(&mut self) {
        if self.gone {
            return;
        }
        // A stopped kubelet writes nothing; its status manager starts
        // over from the pod when it is back.
        self.life.kubelet_running().await;
        let client = &self.life.client;
        let path = api::pod_path(&self.ns, &self.name);
        let mut pause = Duration::from_millis(100);
        let give_up = tokio::time::Instant::now() + WRITE_PATIENCE;
        for attempt in 0.. {
            if attempt > 0 {
                if tokio::time::Instant::now() >= give_up {
                    tracing::error!(pod = %self.name, "the pod's status could not be written; giving up");
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            let pod = match api::get(client, &path).await {
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.gone = true;
                    return;
                }
                Err(e) => {
                    tracing::warn!(pod = %self.name, error = %e, "reading the pod for its status failed");
                    continue;
                }
            };
            if pod["metadata"]["uid"] != self.uid.as_str() {
                self.gone = true;
                return;
            }
            let new = status::generate(&pod, &self.local, &Self::now());
            let Some(patch) = status::patch(&pod, &new) else {
                self.pod = pod;
                return;
            };
            match api::patch_strategic(client, &format!("{path}/status"), &patch).await {
                Ok(written) => {
                    self.life.pods.remember(&written);
                    self.pod = written;
                    return;
                }
                Err(e) if e.not_found() => {
                    self.gone = true;
                    return;
                }
                Err(e) => {
                    tracing::warn!(pod = %self.name, error = %e, "patching the pod's status failed")
                }
            }
        }
    }

    /// After the terminal status of an evicted pod: the kubelet removes its
    /// dead containers at once, and their logs with them.
    fn remove_if_evicted(&self) {
        if self.local.eviction.is_some() && status::terminal(&self.pod) {
            self.life.pods.logs.remove_containers(&self.uid);
        }
    }

    /// After the terminal status: a pod being deleted is deleted with grace
    /// 0 and its UID as precondition.
    async fn delete_if_deleting(&mut self) {
        if self.gone || !deleting(&self.pod) || !status::terminal(&self.pod) {
            return;
        }
        delete_now(&self.life, &self.ns, &self.name, &self.uid).await;
    }

    fn set_waiting(&mut self, reason: &str, message: Option<&str>) {
        self.local.set_all(status::waiting(reason, message));
    }

    fn event(&self, warning: bool, reason: &str, message: &str) {
        self.life.recorder.pod(&self.pod, warning, reason, message);
    }

    /// The first missing non-optional Secret volume: (volume, secret).
    async fn missing_secret_volume(&self) -> Option<(String, String)> {
        for v in self.pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let Some(secret) = v["secret"]["secretName"].as_str() else {
                continue;
            };
            if v["secret"]["optional"] == true {
                continue;
            }
            let path = format!("/api/v1/namespaces/{}/secrets/{secret}", self.ns);
            if let Ok(None) = api::get(&self.life.client, &path).await {
                return Some((
                    v["name"].as_str().unwrap_or("").to_string(),
                    secret.to_string(),
                ));
            }
        }
        None
    }

    /// The first image that cannot be had yet: (reason, message, retry in).
    fn image_trouble(
        &self,
        pulls: &mut HashMap<String, Pull>,
    ) -> Option<(&'static str, String, Duration)> {
        let timing = &self.life.shared.timing;
        for c in self.pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let image = c["image"].as_str().unwrap_or("");
            if let Err(msg) = images::check_reference(image) {
                self.event(true, "InspectFailed", &msg);
                self.event(
                    true,
                    "Failed",
                    &format!("Error: {}", images::INVALID_IMAGE_NAME),
                );
                return Some((images::INVALID_IMAGE_NAME, msg, timing.retry));
            }
            if !self.life.shared.unpullable(image) {
                pulls.remove(image);
                continue;
            }
            let state = pulls.entry(image.to_string()).or_insert(Pull {
                failures: 0,
                next_try: None,
            });
            let now = Instant::now();
            if let Some(next) = state.next_try
                && now < next
            {
                let msg = images::back_off_message(image);
                self.event(false, "BackOff", &images::back_off_event(image));
                self.event(
                    true,
                    "Failed",
                    &format!("Error: {}", images::IMAGE_PULL_BACK_OFF),
                );
                return Some((images::IMAGE_PULL_BACK_OFF, msg, next - now));
            }
            state.failures += 1;
            let back_off = images::back_off(
                state.failures,
                timing.image_back_off,
                timing.image_back_off_max,
            );
            state.next_try = Some(now + back_off);
            let err = images::pull_error(image);
            self.event(false, "Pulling", &format!("Pulling image \"{image}\""));
            self.event(
                true,
                "Failed",
                &format!("Failed to pull image \"{image}\": {err}"),
            );
            self.event(
                true,
                "Failed",
                &format!("Error: {}", images::ERR_IMAGE_PULL),
            );
            // The pod worker comes back soon and finds the back-off running.
            return Some((
                images::ERR_IMAGE_PULL,
                err,
                Duration::from_secs(1).min(back_off),
            ));
        }
        None
    }

    /// Steps 2 to 5, retried until the container can start.
    async fn prepare(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Signal>,
    ) -> Result<BTreeMap<String, String>, Early> {
        let timing = self.life.shared.timing.clone();
        let mut mount_failures = 0u32;
        let mut pulls: HashMap<String, Pull> = HashMap::new();
        loop {
            if self.gone {
                return Err(Early::Gone);
            }
            if deleting(&self.pod) {
                return Err(Early::Deleted);
            }
            let wait;
            if let Some((volume, secret)) = self.missing_secret_volume().await {
                mount_failures += 1;
                self.set_waiting(status::CONTAINER_CREATING, None);
                self.event(
                    true,
                    "FailedMount",
                    &format!("MountVolume.SetUp failed for volume \"{volume}\" : secret \"{secret}\" not found"),
                );
                wait = images::back_off(
                    mount_failures,
                    Duration::from_millis(500),
                    Duration::from_secs(122),
                );
            } else {
                if !self.local.sandbox_ready {
                    self.local.sandbox_ready = true;
                    self.local.pod_ip = Some(self.life.next_pod_ip());
                }
                if let Some((reason, message, retry)) = self.image_trouble(&mut pulls) {
                    self.set_waiting(reason, Some(&message));
                    wait = retry;
                } else {
                    let container = self.pod["spec"]["containers"][0].clone();
                    let facts = env::Facts {
                        pod_ip: self.local.pod_ip.clone().unwrap_or_default(),
                        host_ip: self.local.host_ip.clone(),
                    };
                    match env::resolve(&self.pod, &container, &facts, &self.life.sources()).await {
                        Ok(env) => return Ok(env),
                        Err(msg) => {
                            self.set_waiting(status::CREATE_CONTAINER_CONFIG_ERROR, Some(&msg));
                            self.event(true, "Failed", &format!("Error: {msg}"));
                            wait = timing.retry;
                        }
                    }
                }
            }
            self.write().await;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                sig = rx.recv() => match sig {
                    Some(Signal::Term { .. }) => return Err(Early::Deleted),
                    Some(Signal::Gone) | None => return Err(Early::Gone),
                    Some(Signal::Evict { message }) => return Err(Early::Evicted(message)),
                    Some(Signal::Oom | Signal::Crash { .. } | Signal::Hang | Signal::Kill { .. } | Signal::Freeze { .. }) => {}
                },
            }
        }
    }

    /// The terminal status for a pod whose containers never ran (or were
    /// lost), then the delete if it is being deleted.
    async fn end_unstarted(&mut self, eviction: Option<String>) {
        if let Some(message) = &eviction {
            self.event(true, "Evicted", message);
        }
        self.local.eviction = eviction;
        self.local.terminate(&Stop::unknown());
        self.write().await;
        self.delete_if_deleting().await;
    }
}

/// The DELETE of a finished pod: grace 0, UID precondition.
pub(crate) async fn delete_now(life: &NodeLife, ns: &str, name: &str, uid: &str) {
    life.kubelet_running().await;
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
        "gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
    match api::delete(&life.client, &api::pod_path(ns, name), &options).await {
        Ok(_) => {}
        Err(e) if e.not_found() || e.conflict() => {}
        Err(e) => tracing::warn!(pod = %name, error = %e, "deleting the finished pod failed"),
    }
}

/// Ends a pod whose containers the node lost (it was Running when this
/// life of the node began: the machine went down with them): each container
/// that ran ends as the runtime reports it after the reboot (exit 255,
/// [`Stop::lost`]; its log kept), one that never ran
/// `ContainerStatusUnknown`; `Failed`, then the delete if it is being
/// deleted.
pub(crate) async fn end_lost(life: Arc<NodeLife>, pod: Value) {
    let mut w = Worker {
        ns: pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        name: pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
        uid: pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
        local: lost_local(&pod, &life.host_ip, &Worker::now()),
        pod,
        gone: false,
        life,
    };
    // What the containers wrote before the machine went down stays readable.
    for name in status::container_names(&w.pod) {
        w.life.pods.logs.get(&w.uid, &name).finish();
    }
    w.write().await;
    w.delete_if_deleting().await;
}

fn lost_local(pod: &Value, host_ip: &str, now: &str) -> Local {
    let mut l = Local::admitted(pod, host_ip);
    l.pod_ip = pod["status"]["podIP"].as_str().map(str::to_string);
    for (name, state) in &mut l.containers {
        let started = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name.as_str())
            .and_then(|c| c["state"]["running"]["startedAt"].as_str());
        if let Some(started) = started {
            *state = ContainerState::Terminated(Stop::lost(started, now));
        }
    }
    l.terminate(&Stop::unknown());
    l
}

/// Runs one pod to its end.
pub(crate) async fn run(life: Arc<NodeLife>, pod: Value, mut rx: mpsc::UnboundedReceiver<Signal>) {
    let mut w = Worker {
        ns: pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        name: pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
        uid: pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
        local: Local::admitted(&pod, &life.host_ip),
        pod,
        gone: false,
        life: life.clone(),
    };
    w.write().await;
    let env = match w.prepare(&mut rx).await {
        Ok(env) => env,
        Err(Early::Deleted) => return w.end_unstarted(None).await,
        Err(Early::Evicted(message)) => return w.end_unstarted(Some(message)).await,
        Err(Early::Gone) => return,
    };
    if let Some(bins) = crate::procs::local_binaries(&life.shared.local_images, &w.pod) {
        let bins = bins.to_path_buf();
        return run_local(w, rx, bins).await;
    }
    // The container is created and started.
    tokio::select! {
        _ = tokio::time::sleep(life.shared.timing.start_delay) => {}
        sig = rx.recv() => match sig {
            Some(Signal::Evict { message }) => return w.end_unstarted(Some(message)).await,
            Some(Signal::Gone) | None => return,
            Some(Signal::Oom | Signal::Crash { .. } | Signal::Hang | Signal::Kill { .. } | Signal::Freeze { .. }) => {}
            Some(Signal::Term { .. }) => return w.end_unstarted(None).await,
        },
    }
    let container = w.pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("main")
        .to_string();
    for c in w.pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let n = c["name"].as_str().unwrap_or("");
        let image = c["image"].as_str().unwrap_or("");
        w.event(
            false,
            "Pulled",
            &format!("Container image \"{image}\" already present on machine"),
        );
        w.event(false, "Created", &format!("Created container: {n}"));
        w.event(false, "Started", &format!("Started container {n}"));
    }
    let workload = Workload::for_pod(&w.pod, &life.shared.timing);
    if workload.oom_at_start(&w.pod) {
        // The program's first act, its allocation, is over the limit: the
        // kernel kills it before its first log line, and the kubelet reads
        // the container's end (`OOMKilled`, 137) from the runtime.
        let started = Worker::now();
        life.pods.logs.get(&w.uid, &container).finish();
        w.local.terminate(&Stop::oom(&started, &Worker::now()));
        w.write().await;
        w.delete_if_deleting().await;
        return;
    }
    let started = Worker::now();
    w.local.set_all(ContainerState::Running {
        started_at: started.clone(),
    });
    // Faults for a running container are taken from here on (they wait in
    // the channel until the program runs), so anyone who sees Running in the
    // API can inject one.
    life.pods.set_running(&w.uid, true);
    w.write().await;
    if w.gone {
        return;
    }
    let (term_tx, term_rx) = watch::channel(false);
    let log = life.pods.logs.get(&w.uid, &container);
    let host = AgentHost {
        namespace: w.ns.clone(),
        pod_name: w.name.clone(),
        pod_uid: w.uid.clone(),
        service_account: w.pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        env,
        log: log.clone(),
        sigterm: term_rx,
        http: life.shared.http.clone(),
        conn: life.shared.conn.clone(),
        node_client: life.client.clone(),
        token: tokio::sync::Mutex::new(None),
    };
    // The eviction manager finds a program over its ephemeral-storage limit
    // at its next look (eviction_manager.go `localStorageEviction`).
    let mut storage_eviction = workload.storage_eviction(&w.pod).map(|message| {
        (
            Instant::now() + life.shared.timing.eviction_monitoring,
            message,
        )
    });
    let mut program = Box::pin(async move { runtime::run(&workload, &host).await });
    let mut kill_at: Option<Instant> = None;
    let mut hang = false;
    let mut gone = false;
    let mut eviction: Option<String> = None;
    let pod_for_events = w.pod.clone();
    let term = |grace: Duration, kill_at: &mut Option<Instant>, hang: bool| {
        if !*term_tx.borrow() {
            life.recorder.pod(
                &pod_for_events,
                false,
                "Killing",
                &format!("Stopping container {container}"),
            );
            if !hang {
                let _ = term_tx.send(true);
            }
        }
        let at = Instant::now() + grace.max(MIN_GRACE);
        *kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
    };
    let mut storage_evicted = false;
    let stop = loop {
        let kill_timer = async {
            match kill_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let storage_timer = async {
            match &storage_eviction {
                Some((t, _)) => tokio::time::sleep_until(*t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            code = &mut program => break Stop::exited(code, &started, &Worker::now()),
            _ = kill_timer => break Stop::killed(&started, &Worker::now()),
            _ = storage_timer => {
                // evictPod: the Event, then the kill with grace 1 s (so 2 s);
                // phase Failed, reason Evicted, no DisruptionTarget.
                if let Some((_, message)) = storage_eviction.take()
                    && eviction.is_none()
                {
                    w.event(true, "Evicted", &message);
                    eviction = Some(message);
                    storage_evicted = true;
                    term(EVICTION_GRACE, &mut kill_at, hang);
                }
            }
            sig = rx.recv() => match sig {
                Some(Signal::Term { grace } | Signal::Kill { grace }) => term(grace, &mut kill_at, hang),
                Some(Signal::Gone) | None => {
                    gone = true;
                    term(Duration::ZERO, &mut kill_at, hang);
                }
                Some(Signal::Oom) => break Stop::oom(&started, &Worker::now()),
                Some(Signal::Crash { exit_code }) => break Stop::exited(exit_code, &started, &Worker::now()),
                Some(Signal::Hang) => hang = true,
                Some(Signal::Freeze { .. }) => {}
                Some(Signal::Evict { message }) => {
                    w.event(true, "Evicted", &message);
                    eviction = Some(message);
                    storage_evicted = false;
                    storage_eviction = None;
                    term(EVICTION_GRACE, &mut kill_at, hang);
                }
            },
        }
    };
    // A killed program has stopped for good before its pod says so.
    drop(program);
    log.finish();
    life.pods.set_running(&w.uid, false);
    if gone {
        return;
    }
    w.local.eviction = eviction;
    w.local.storage_eviction = storage_evicted;
    w.local.terminate(&stop);
    w.write().await;
    w.remove_if_evicted();
    w.delete_if_deleting().await;
}

/// What a signal to a pod still preparing means: `None` to keep waiting.
fn early(sig: Option<Signal>) -> Option<Early> {
    match sig {
        Some(Signal::Term { .. }) => Some(Early::Deleted),
        Some(Signal::Gone) | None => Some(Early::Gone),
        Some(Signal::Evict { message }) => Some(Early::Evicted(message)),
        Some(_) => None,
    }
}

impl Worker {
    /// Waits `wait` for a signal that ends a pod before it started.
    async fn pause(
        &mut self,
        wait: Duration,
        rx: &mut mpsc::UnboundedReceiver<Signal>,
    ) -> Result<(), Early> {
        let until = Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return Ok(()),
                sig = rx.recv() => if let Some(e) = early(sig) { return Err(e) },
            }
        }
    }

    /// Every container's env and spec, and the pod's credential files,
    /// retried until they can be had (a missing Secret is
    /// `CreateContainerConfigError`, as for any pod).
    async fn prepare_local(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Signal>,
        bins: &std::path::Path,
    ) -> Result<(Vec<crate::procs::Spec>, crate::procs::PodFiles), Early> {
        use crate::procs::{self, PodFiles, Restart, Spec};
        let life = self.life.clone();
        let retry = life.shared.timing.retry;
        let grace = Duration::from_secs(
            self.pod["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(30),
        );
        loop {
            let facts = env::Facts {
                pod_ip: self.local.pod_ip.clone().unwrap_or_default(),
                host_ip: self.local.host_ip.clone(),
            };
            let mut specs = Vec::new();
            let mut trouble: Option<(&str, String)> = None;
            for c in self.pod["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let name = c["name"].as_str().unwrap_or("").to_string();
                let env = match env::resolve(&self.pod, &c, &facts, &life.sources()).await {
                    Ok(env) => env,
                    Err(msg) => {
                        trouble = Some((status::CREATE_CONTAINER_CONFIG_ERROR, msg));
                        break;
                    }
                };
                let mut command: Vec<String> = c["command"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_string))
                    .collect();
                command.extend(
                    c["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(str::to_string)),
                );
                if command.is_empty() {
                    trouble = Some((
                        "RunContainerError",
                        format!("container {name}: no command (a local image has no entrypoint)"),
                    ));
                    break;
                }
                let program = command.remove(0);
                let probes = procs::probe(&c, "livenessProbe")
                    .and_then(|l| Ok((l, procs::probe(&c, "readinessProbe")?)));
                let (liveness, readiness) = match probes {
                    Ok(p) => p,
                    Err(msg) => {
                        trouble = Some(("RunContainerError", format!("container {name}: {msg}")));
                        break;
                    }
                };
                specs.push(Spec {
                    log: life.pods.logs.get(&self.uid, &name),
                    name,
                    program: bins.join(program),
                    args: command,
                    env,
                    liveness,
                    readiness,
                    restart: Restart::of(&self.pod),
                    grace,
                    workdir: PathBuf::new(),
                });
            }
            if trouble.is_none() {
                let files = PodFiles::create(
                    &life.shared.pods_dir,
                    &self.uid,
                    &procs::api_server_of(&self.pod, life.shared.conn.url()),
                    &life.shared.ca_pem,
                    &self.ns,
                )
                .map_err(|e| format!("writing the pod's credential files: {e}"));
                let token = match &files {
                    Ok(_) => {
                        crate::host::request_token(
                            &life.client,
                            &self.ns,
                            self.pod["spec"]["serviceAccountName"]
                                .as_str()
                                .unwrap_or("default"),
                            &self.name,
                            &self.uid,
                        )
                        .await
                    }
                    Err(e) => Err(e.clone()),
                };
                match (files, token) {
                    (Ok(files), Ok(token)) => match files.write_token(&token) {
                        Ok(()) => {
                            for s in &mut specs {
                                s.workdir = files.dir.clone();
                            }
                            return Ok((specs, files));
                        }
                        Err(e) => {
                            trouble =
                                Some(("RunContainerError", format!("writing the pod's token: {e}")))
                        }
                    },
                    (Err(msg), _) | (_, Err(msg)) => {
                        trouble = Some(("RunContainerError", msg));
                    }
                }
            }
            if let Some((reason, msg)) = trouble {
                self.set_waiting(reason, Some(&msg));
                self.event(true, "Failed", &format!("Error: {msg}"));
            }
            self.write().await;
            if self.gone {
                return Err(Early::Gone);
            }
            self.pause(retry, rx).await?;
        }
    }
}

/// A pod of a local image (the dispatcher's own): its containers run as
/// child processes of the local binaries, probed and restarted
/// ([`crate::procs`]).
async fn run_local(mut w: Worker, mut rx: mpsc::UnboundedReceiver<Signal>, bins: PathBuf) {
    use crate::procs::{self, Event, Fault, PodStop};
    let life = w.life.clone();
    let (specs, files) = match w.prepare_local(&mut rx, &bins).await {
        Ok(ready) => ready,
        Err(Early::Deleted) => return w.end_unstarted(None).await,
        Err(Early::Evicted(message)) => return w.end_unstarted(Some(message)).await,
        Err(Early::Gone) => return,
    };
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel::<Option<PodStop>>(None);
    let mut faults: BTreeMap<String, mpsc::UnboundedSender<Fault>> = BTreeMap::new();
    let mut logs = Vec::new();
    // Dropped (with the worker), the set aborts the containers' tasks,
    // which kills their processes.
    let mut set = tokio::task::JoinSet::new();
    w.local.restarting = procs::Restart::of(&w.pod) != procs::Restart::Never;
    for spec in specs {
        let image = w.pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == spec.name.as_str())
            .and_then(|c| c["image"].as_str())
            .unwrap_or("")
            .to_string();
        w.event(
            false,
            "Pulled",
            &format!("Container image \"{image}\" already present on machine"),
        );
        w.event(
            false,
            "Created",
            &format!("Created container: {}", spec.name),
        );
        w.local.probed.insert(
            spec.name.clone(),
            status::Probed {
                ready: spec.readiness.is_none(),
                ..Default::default()
            },
        );
        let (fault_tx, fault_rx) = mpsc::unbounded_channel();
        faults.insert(spec.name.clone(), fault_tx);
        logs.push(spec.log.clone());
        set.spawn(procs::run_container(
            spec,
            files.kubeconfig(),
            life.shared.http.clone(),
            events_tx.clone(),
            stop_rx.clone(),
            fault_rx,
        ));
    }
    drop(events_tx);
    life.pods.set_running(&w.uid, true);
    let renew_every = Duration::from_secs(crate::host::TOKEN_SECONDS * 8 / 10);
    let mut renew_at = Instant::now() + renew_every;
    let mut gone = false;
    let mut eviction: Option<String> = None;
    let stop = |w: &mut Worker, grace: Duration| {
        if stop_tx.borrow().is_none() {
            for (name, _) in &w.local.containers {
                w.life.recorder.pod(
                    &w.pod,
                    false,
                    "Killing",
                    &format!("Stopping container {name}"),
                );
            }
        }
        w.local.restarting = false;
        let at = Instant::now() + grace.max(MIN_GRACE);
        let kill_at = stop_tx.borrow().map_or(at, |s| s.kill_at.min(at));
        let _ = stop_tx.send(Some(PodStop {
            kill_at,
            oom: false,
        }));
    };
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break };
                match event {
                    Event::Started { name, at, restart_count, last } => {
                        w.event(false, "Started", &format!("Started container {name}"));
                        set_state(&mut w.local, &name, ContainerState::Running { started_at: at });
                        if let Some(p) = w.local.probed.get_mut(&name) {
                            p.restart_count = restart_count;
                            p.last = last;
                        }
                    }
                    Event::Ready { name, ready } => {
                        if let Some(p) = w.local.probed.get_mut(&name) {
                            p.ready = ready;
                        }
                    }
                    Event::Exited { name, stop, again } => {
                        let state = match again {
                            Some(wait) if !wait.is_zero() => {
                                w.event(true, "BackOff", "Back-off restarting failed container");
                                if let Some(p) = w.local.probed.get_mut(&name) {
                                    p.last = Some(stop);
                                }
                                ContainerState::Waiting {
                                    reason: "CrashLoopBackOff".into(),
                                    message: Some(format!(
                                        "back-off {}s restarting failed container={name} pod={}_{}({})",
                                        wait.as_secs(), w.name, w.ns, w.uid
                                    )),
                                    created: true,
                                }
                            }
                            _ => ContainerState::Terminated(stop),
                        };
                        if let Some(p) = w.local.probed.get_mut(&name) {
                            p.ready = false;
                        }
                        set_state(&mut w.local, &name, state);
                    }
                }
                if !gone {
                    w.write().await;
                }
            }
            sig = rx.recv() => match sig {
                Some(Signal::Term { grace } | Signal::Kill { grace }) => stop(&mut w, grace),
                Some(Signal::Gone) | None => {
                    gone = true;
                    stop(&mut w, Duration::ZERO);
                }
                Some(Signal::Oom) => {
                    w.local.restarting = false;
                    let _ = stop_tx.send(Some(PodStop { kill_at: Instant::now(), oom: true }));
                }
                Some(Signal::Evict { message }) => {
                    w.event(true, "Evicted", &message);
                    eviction = Some(message);
                    stop(&mut w, EVICTION_GRACE);
                }
                Some(Signal::Freeze { container }) => {
                    let target = faults.get(&container).or_else(|| faults.values().next());
                    if let Some(tx) = target {
                        let _ = tx.send(Fault::Freeze);
                    }
                }
                Some(Signal::Hang) => {
                    if let Some(tx) = faults.values().next() {
                        let _ = tx.send(Fault::Freeze);
                    }
                }
                Some(Signal::Crash { .. }) => {
                    tracing::warn!(pod = %w.name, "crash is not supported for a pod of local binaries");
                }
            },
            _ = tokio::time::sleep_until(renew_at) => {
                renew_at = Instant::now() + renew_every;
                let sa = w.pod["spec"]["serviceAccountName"].as_str().unwrap_or("default").to_string();
                match crate::host::request_token(&life.client, &w.ns, &sa, &w.name, &w.uid).await {
                    Ok(token) => {
                        if let Err(e) = files.write_token(&token) {
                            tracing::warn!(pod = %w.name, error = %e, "writing the renewed token failed");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(pod = %w.name, error = %e, "renewing the pod's token failed");
                        renew_at = Instant::now() + Duration::from_secs(10);
                    }
                }
            }
        }
    }
    set.shutdown().await;
    for log in logs {
        log.finish();
    }
    life.pods.set_running(&w.uid, false);
    drop(files);
    if gone {
        return;
    }
    w.local.restarting = false;
    w.local.eviction = eviction;
    w.local.terminate(&Stop::unknown());
    w.write().await;
    w.remove_if_evicted();
    w.delete_if_deleting().await;
}

fn set_state(local: &mut Local, name: &str, state: ContainerState) {
    if let Some((_, s)) = local.containers.iter_mut().find(|(n, _)| n == name) {
        *s = state;
    }
}
