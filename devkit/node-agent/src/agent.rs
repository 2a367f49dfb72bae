//! The agent: its nodes, each node's life (registration, heartbeats,
//! status, the pod watch, the log server, the pod workers), and the
//! faults.

use crate::api::{self, ApiError};
use crate::conn::Conn;
use crate::env::{Data, Sources};
use crate::events::Recorder;
use crate::logs::{self, LogBook, LogQuery};
use crate::node::{self, Health};
use crate::tls::{Server, ServingCert};
use crate::worker::{self, Signal};
use crate::{AgentOptions, NodeSpec, Timing, status};
use anyhow::Context;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every node of the agent shares.
pub(crate) struct Shared {
    pub(crate) conn: Conn,
    pub(crate) timing: Timing,
    pub(crate) http: reqwest::Client,
    pub(crate) kubelet_version: String,
    unpullable: Mutex<BTreeSet<String>>,
    /// Images run as local binaries.
    pub(crate) local_images: Vec<crate::LocalImage>,
    /// The API server's CA (PEM), handed to local binaries.
    pub(crate) ca_pem: Vec<u8>,
    /// Where the pods of local binaries get their files (kubeconfig,
    /// token, CA): one directory per pod.
    pub(crate) pods_dir: std::path::PathBuf,
}

impl Shared {
    /// Whether pulls of `image` fail (the registry answers not found).
    pub(crate) fn unpullable(&self, image: &str) -> bool {
        lock(&self.unpullable).contains(image)
    }
}

/// A pod worker as the node knows it.
struct WorkerEntry {
    ns: String,
    name: String,
    tx: mpsc::UnboundedSender<Signal>,
    task: JoinHandle<()>,
    /// The container runs (OOM, crash and hang make sense).
    running: bool,
}

#[derive(Default)]
struct PodsInner {
    /// The latest object of each pod bound to the node (the pod manager).
    known: HashMap<(String, String), Arc<Value>>,
    /// Pods with a worker, by UID.
    workers: HashMap<String, WorkerEntry>,
    /// Pods whose worker ended (or that were already over), by UID.
    finished: HashSet<String>,
    /// Pods whose final DELETE was sent, by UID.
    deleted: HashSet<String>,
}

/// The pods of one life of a node.
pub(crate) struct Pods {
    inner: Mutex<PodsInner>,
    /// The node's container logs, which outlive a life of the node: the
    /// CRI's log files stay on the machine's disk across a kubelet restart
    /// and a reboot.
    pub(crate) logs: Arc<LogBook>,
}

fn rv(pod: &Value) -> u64 {
    pod["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn key_of(pod: &Value) -> (String, String) {
    (
        pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

fn uid_of(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

impl Pods {
    fn new(logs: Arc<LogBook>) -> Self {
        Pods {
            inner: Mutex::default(),
            logs,
        }
    }

    /// Keeps `pod` as the latest known object unless a newer one is known.
    pub(crate) fn remember(&self, pod: &Value) {
        let key = key_of(pod);
        let mut inner = lock(&self.inner);
        match inner.known.get(&key) {
            Some(old) if old["metadata"]["uid"] == pod["metadata"]["uid"] && rv(old) > rv(pod) => {}
            _ => {
                inner.known.insert(key, Arc::new(pod.clone()));
            }
        }
    }

    fn known(&self, ns: &str, name: &str) -> Option<Arc<Value>> {
        lock(&self.inner)
            .known
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    pub(crate) fn set_running(&self, uid: &str, running: bool) {
        if let Some(w) = lock(&self.inner).workers.get_mut(uid) {
            w.running = running;
        }
    }

    /// Sends `sig` to the worker of ns/name.
    fn signal(&self, ns: &str, name: &str, sig: Signal) -> Result<(), String> {
        let inner = lock(&self.inner);
        let w = inner
            .workers
            .values()
            .find(|w| w.ns == ns && w.name == name)
            .ok_or_else(|| format!("no pod {ns}/{name} runs here"))?;
        let needs_running = matches!(
            sig,
            Signal::Oom | Signal::Crash { .. } | Signal::Hang | Signal::Kill { .. }
        );
        if needs_running && !w.running {
            return Err(format!("the container of pod {ns}/{name} is not running"));
        }
        w.tx.send(sig)
            .map_err(|_| format!("pod {ns}/{name} is ending"))
    }

    fn has_worker(&self, ns: &str, name: &str) -> bool {
        lock(&self.inner)
            .workers
            .values()
            .any(|w| w.ns == ns && w.name == name)
    }

    fn abort_all(&self) {
        for (_, w) in lock(&self.inner).workers.drain() {
            w.task.abort();
        }
    }
}

/// One life of a node: from its (re)start to its loss or the agent's end.
pub(crate) struct NodeLife {
    pub(crate) shared: Arc<Shared>,
    pub(crate) client: kube::Client,
    pub(crate) name: String,
    pub(crate) host_ip: String,
    pub(crate) pods: Arc<Pods>,
    pub(crate) recorder: Recorder,
    index: usize,
    ips: Arc<AtomicU32>,
    /// The machine's boot: a kubelet restart keeps it, a reboot makes a new one.
    boot_id: String,
    /// Whether the kubelet process runs: while it is stopped (its programs
    /// running on) nothing of this life reaches the API.
    kubelet_up: tokio::sync::watch::Sender<bool>,
}

impl NodeLife {
    /// Waits until the kubelet runs (at once when it does).
    pub(crate) async fn kubelet_running(&self) {
        let mut up = self.kubelet_up.subscribe();
        let _ = up.wait_for(|up| *up).await;
    }

    /// The next pod IP of this node (10.244.<node>.<n>).
    pub(crate) fn next_pod_ip(&self) -> String {
        let n = self.ips.fetch_add(1, Ordering::Relaxed);
        format!("10.244.{}.{}", self.index % 250, n % 250 + 2)
    }

    /// Where env sources are read: the API, as this node.
    pub(crate) fn sources(&self) -> ApiSources<'_> {
        ApiSources {
            client: &self.client,
        }
    }
}

/// Secrets and ConfigMaps read through the API.
pub(crate) struct ApiSources<'a> {
    client: &'a kube::Client,
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

impl Sources for ApiSources<'_> {
    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Data>, String> {
        let path = format!("/api/v1/namespaces/{ns}/secrets/{name}");
        let secret = api::get(self.client, &path).await.map_err(|e| e.message)?;
        Ok(secret.map(|s| {
            s["data"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), decode_b64(v.as_str()?)?)))
                .collect()
        }))
    }

    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<Data>, String> {
        let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
        let cm = api::get(self.client, &path).await.map_err(|e| e.message)?;
        Ok(cm.map(|c| {
            c["data"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        }))
    }
}

/// A node while it is up.
struct Up {
    life: Arc<NodeLife>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _server: Server,
}

/// One node the agent plays.
pub(crate) struct Node {
    spec: NodeSpec,
    index: usize,
    shared: Arc<Shared>,
    client: kube::Client,
    cert: ServingCert,
    machine_id: String,
    health: Mutex<Health>,
    health_changed: Arc<Notify>,
    port: AtomicU16,
    ips: Arc<AtomicU32>,
    /// The containers' logs, kept across the node's lives.
    logs: Arc<LogBook>,
    up: Mutex<Option<Up>>,
    /// The life whose kubelet was stopped with its programs running on
    /// ([`Node::stop_kubelet`]); the next start resumes it.
    paused: Mutex<Option<Arc<NodeLife>>>,
}

impl Node {
    fn facts(&self, port: u16, boot_id: &str) -> node::Facts {
        node::Facts {
            name: self.spec.name.clone(),
            capacity: self.spec.capacity.clone(),
            allocatable: self
                .spec
                .allocatable
                .clone()
                .unwrap_or_else(|| self.spec.capacity.clone()),
            port,
            kubelet_version: self.shared.kubelet_version.clone(),
            machine_id: self.machine_id.clone(),
            boot_id: boot_id.to_string(),
        }
    }

    /// Starts a life of the node: the log server, the Node (registered or
    /// found), its Lease, then the loops. After [`Self::stop_kubelet`] it
    /// resumes the paused life instead: its programs ran on, and its pod
    /// workers write again once the kubelet is registered and watching.
    async fn start(self: &Arc<Self>) -> anyhow::Result<()> {
        if lock(&self.up).is_some() {
            return Ok(());
        }
        let name = self.spec.name.clone();
        let paused = lock(&self.paused).take();
        let life = match paused {
            Some(life) => life,
            None => Arc::new(NodeLife {
                shared: self.shared.clone(),
                client: self.client.clone(),
                name: name.clone(),
                host_ip: "127.0.0.1".into(),
                pods: Arc::new(Pods::new(self.logs.clone())),
                recorder: Recorder::new(self.client.clone(), &name),
                index: self.index,
                ips: self.ips.clone(),
                boot_id: uuid::Uuid::new_v4().to_string(),
                kubelet_up: tokio::sync::watch::Sender::new(false),
            }),
        };
        let started = self.start_life(&life).await;
        if started.is_err() {
            // Not up: the programs still run under a stopped kubelet.
            *lock(&self.paused) = Some(life);
        }
        started
    }

    async fn start_life(self: &Arc<Self>, life: &Arc<NodeLife>) -> anyhow::Result<()> {
        let name = self.spec.name.clone();
        let server = self.serve_logs(life).await?;
        let port = server.addr().port();
        self.port.store(port, Ordering::Relaxed);
        let facts = self.facts(port, &life.boot_id);
        let health = *lock(&self.health);
        let registered = self.register(&facts, &health).await?;
        let node_uid = registered["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let lease = ensure_lease(&self.client, &name, &node_uid, self.lease_seconds())
            .await
            .with_context(|| format!("making the Lease of node {name}"))?;
        let cancel = CancellationToken::new();
        let tasks = vec![
            tokio::spawn(lease_loop(
                self.client.clone(),
                name.clone(),
                node_uid,
                lease,
                self.shared.timing.lease_duration,
                cancel.clone(),
            )),
            tokio::spawn(status_loop(
                self.clone(),
                facts,
                registered["status"].clone(),
                cancel.clone(),
            )),
            tokio::spawn(watch_pods(life.clone(), cancel.clone())),
        ];
        life.kubelet_up.send_replace(true);
        *lock(&self.up) = Some(Up {
            life: life.clone(),
            cancel,
            tasks,
            _server: server,
        });
        tracing::info!(node = %name, port, "node up");
        Ok(())
    }

    /// The kubelet process stops, its containers run on: heartbeats,
    /// status, the watch and the log server stop, the pod workers hold
    /// their writes; [`Self::start`] resumes.
    fn stop_kubelet(&self) {
        if let Some(up) = lock(&self.up).take() {
            up.cancel.cancel();
            for t in &up.tasks {
                t.abort();
            }
            up.life.kubelet_up.send_replace(false);
            *lock(&self.paused) = Some(up.life.clone());
            tracing::info!(node = %self.spec.name, "kubelet stopped");
        }
    }

    fn lease_seconds(&self) -> i32 {
        self.shared.timing.lease_duration.as_secs().max(1) as i32
    }

    /// Stops the life: heartbeats, status, watch, log server and every
    /// program end where they are; nothing more reaches the API.
    fn stop(&self) {
        if let Some(life) = lock(&self.paused).take() {
            life.pods.abort_all();
        }
        if let Some(up) = lock(&self.up).take() {
            up.cancel.cancel();
            for t in &up.tasks {
                t.abort();
            }
            up.life.pods.abort_all();
            tracing::info!(node = %self.spec.name, "node down");
        }
    }

    fn life(&self) -> Option<Arc<NodeLife>> {
        lock(&self.up).as_ref().map(|u| u.life.clone())
    }

    async fn serve_logs(&self, life: &Arc<NodeLife>) -> anyhow::Result<Server> {
        let app = axum::Router::new()
            .route(
                "/containerLogs/{ns}/{pod}/{container}",
                axum::routing::get(container_logs),
            )
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .with_state(life.pods.clone());
        let wanted = match self.port.load(Ordering::Relaxed) {
            0 => self.spec.port,
            p => p,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], wanted));
        match Server::start(addr, &self.cert, app.clone()).await {
            Ok(s) => Ok(s),
            // The old port was taken meanwhile: any port (the Node's status
            // says which).
            Err(_) if wanted != 0 && self.spec.port == 0 => {
                Server::start(SocketAddr::from(([127, 0, 0, 1], 0)), &self.cert, app).await
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the Node, or finds it and brings its status up to date.
    async fn register(&self, facts: &node::Facts, health: &Health) -> anyhow::Result<Value> {
        let name = &self.spec.name;
        let body = node::initial(facts, &self.spec.labels, &self.spec.taints, health);
        match api::post(&self.client, "/api/v1/nodes", &body).await {
            Ok(created) => Ok(created),
            Err(e) if e.conflict() => {
                let path = format!("/api/v1/nodes/{name}");
                let existing = api::get(&self.client, &path)
                    .await
                    .with_context(|| format!("reading node {name}"))?
                    .with_context(|| format!("node {name} vanished"))?;
                let new = node::status(facts, health, &existing["status"], &node::k8s_now());
                match node::patch(&existing["status"], &new) {
                    Some(p) => api::patch_strategic(&self.client, &format!("{path}/status"), &p)
                        .await
                        .with_context(|| format!("updating the status of node {name}")),
                    None => Ok(existing),
                }
            }
            Err(e) => Err(e).with_context(|| format!("registering node {name}")),
        }
    }
}

async fn ensure_lease(
    client: &kube::Client,
    name: &str,
    node_uid: &str,
    seconds: i32,
) -> Result<Value, ApiError> {
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{name}",
        node::LEASE_NAMESPACE
    );
    match api::get(client, &path).await? {
        Some(l) => renew(client, &path, l, node_uid, seconds).await,
        None => {
            let created = api::post(
                client,
                &format!(
                    "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
                    node::LEASE_NAMESPACE
                ),
                &node::lease(name, node_uid, seconds),
            )
            .await;
            match created {
                Err(e) if e.conflict() => match api::get(client, &path).await? {
                    Some(l) => renew(client, &path, l, node_uid, seconds).await,
                    None => Err(e),
                },
                other => other,
            }
        }
    }
}

/// An update of the last Lease seen with a new renewTime (and the owner
/// reference when it lacks one).
async fn renew(
    client: &kube::Client,
    path: &str,
    mut lease: Value,
    node_uid: &str,
    seconds: i32,
) -> Result<Value, ApiError> {
    lease["spec"]["renewTime"] = json!(node::micro_now());
    lease["spec"]["leaseDurationSeconds"] = json!(seconds);
    if lease["metadata"]["ownerReferences"]
        .as_array()
        .is_none_or(|r| r.is_empty())
    {
        let name = lease["metadata"]["name"].clone();
        lease["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}]);
    }
    api::put(client, path, &lease).await
}

async fn lease_loop(
    client: kube::Client,
    name: String,
    node_uid: String,
    mut lease: Value,
    duration: Duration,
    cancel: CancellationToken,
) {
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{name}",
        node::LEASE_NAMESPACE
    );
    let seconds = duration.as_secs().max(1) as i32;
    let every = duration / 4;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match renew(&client, &path, lease.clone(), &node_uid, seconds).await {
            Ok(l) => lease = l,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "renewing the node lease failed");
                if let Ok(l) = ensure_lease(&client, &name, &node_uid, seconds).await {
                    lease = l;
                }
            }
        }
    }
}

async fn status_loop(
    node: Arc<Node>,
    mut facts: node::Facts,
    mut last: Value,
    cancel: CancellationToken,
) {
    let timing = node.shared.timing.clone();
    let path = format!("/api/v1/nodes/{}/status", node.spec.name);
    let mut reported = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(timing.status_update) => {}
            _ = node.health_changed.notified() => {}
        }
        facts.port = node.port.load(Ordering::Relaxed);
        // As the kubelet's tryUpdateNodeStatus, from the Node as it is now:
        // the node lifecycle controller sets the conditions Unknown when
        // it missed the heartbeats (an API-server restart longer than the
        // node-monitor grace), and only a status that differs from what it
        // wrote puts Ready back.
        let mut current_differs = false;
        if let Ok(Some(n)) =
            api::get(&node.client, &format!("/api/v1/nodes/{}", node.spec.name)).await
            && n["status"]["conditions"] != last["conditions"]
        {
            last = n["status"].clone();
            current_differs = true;
        }
        let health = *lock(&node.health);
        let new = node::status(&facts, &health, &last, &node::k8s_now());
        if !current_differs
            && !node::changed(&last, &new)
            && reported.elapsed() < timing.status_report
        {
            continue;
        }
        let Some(p) = node::patch(&last, &new) else {
            continue;
        };
        match api::patch_strategic(&node.client, &path, &p).await {
            Ok(n) => {
                last = n["status"].clone();
                reported = tokio::time::Instant::now();
            }
            Err(e) => {
                tracing::warn!(node = %node.spec.name, error = %e, "updating the node status failed")
            }
        }
    }
}

/// The pod watch of one life of a node: only its pods, by field selector.
async fn watch_pods(life: Arc<NodeLife>, cancel: CancellationToken) {
    use kube::runtime::watcher::{self, Event};
    let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(life.client.clone(), &ar);
    let cfg = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", life.name))
        .timeout(50);
    let mut stream =
        kube::runtime::WatchStreamExt::default_backoff(watcher::watcher(api, cfg)).boxed();
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        match ev {
            Ok(Event::Init) => listed = Some(HashSet::new()),
            Ok(Event::InitApply(obj)) => {
                let pod = to_json(obj);
                if let Some(l) = listed.as_mut() {
                    l.insert(uid_of(&pod));
                }
                on_pod(&life, pod);
            }
            Ok(Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    let gone: Vec<Value> = lock(&life.pods.inner)
                        .known
                        .values()
                        .filter(|p| !listed.contains(&uid_of(p)))
                        .map(|p| (**p).clone())
                        .collect();
                    for p in gone {
                        on_deleted(&life, &p);
                    }
                }
            }
            Ok(Event::Apply(obj)) => on_pod(&life, to_json(obj)),
            Ok(Event::Delete(obj)) => on_deleted(&life, &to_json(obj)),
            Err(e) => {
                tracing::warn!(node = %life.name, error = %crate::error_chain(&e), "pod watch")
            }
        }
    }
}

fn to_json(obj: kube::api::DynamicObject) -> Value {
    let mut v = serde_json::to_value(&obj).unwrap_or(Value::Null);
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Pod");
    v
}

/// The kubelet's reaction to a pod it is told about.
fn on_pod(life: &Arc<NodeLife>, pod: Value) {
    life.pods.remember(&pod);
    let uid = uid_of(&pod);
    let (ns, name) = key_of(&pod);
    let deleting = pod["metadata"]["deletionTimestamp"].is_string();
    let mut inner = lock(&life.pods.inner);
    if let Some(w) = inner.workers.get(&uid) {
        if deleting {
            let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(0);
            let _ = w.tx.send(Signal::Term {
                grace: Duration::from_secs(grace),
            });
        }
        return;
    }
    if inner.finished.contains(&uid) {
        if deleting && status::terminal(&pod) && inner.deleted.insert(uid.clone()) {
            let life = life.clone();
            tokio::spawn(async move { worker::delete_now(&life, &ns, &name, &uid).await });
        }
        return;
    }
    inner.finished.insert(uid.clone());
    if status::terminal(&pod) {
        if deleting && inner.deleted.insert(uid.clone()) {
            let life = life.clone();
            tokio::spawn(async move { worker::delete_now(&life, &ns, &name, &uid).await });
        }
        return;
    }
    if pod["status"]["phase"] == "Running" {
        // Running before this life of the node began: its containers are
        // gone with the old life.
        tokio::spawn(worker::end_lost(life.clone(), pod));
        return;
    }
    inner.finished.remove(&uid);
    let (tx, rx) = mpsc::unbounded_channel();
    let task_life = life.clone();
    let task_uid = uid.clone();
    let task = tokio::spawn(async move {
        worker::run(task_life.clone(), pod, rx).await;
        let mut inner = lock(&task_life.pods.inner);
        inner.workers.remove(&task_uid);
        inner.finished.insert(task_uid);
    });
    inner.workers.insert(
        uid,
        WorkerEntry {
            ns,
            name,
            tx,
            task,
            running: false,
        },
    );
}

fn on_deleted(life: &Arc<NodeLife>, pod: &Value) {
    let uid = uid_of(pod);
    let key = key_of(pod);
    let mut inner = lock(&life.pods.inner);
    if inner.known.get(&key).is_some_and(|p| uid_of(p) == uid) {
        inner.known.remove(&key);
    }
    if let Some(w) = inner.workers.get(&uid) {
        let _ = w.tx.send(Signal::Gone);
    }
    inner.finished.remove(&uid);
    inner.deleted.remove(&uid);
    drop(inner);
    life.pods.logs.forget(&uid);
}

/// `GET /containerLogs/{ns}/{pod}/{container}`.
async fn container_logs(
    State(pods): State<Arc<Pods>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let q = match LogQuery::parse(query.as_deref()) {
        Ok(q) => q,
        Err((code, msg)) => return (code, msg).into_response(),
    };
    let Some(p) = pods.known(&ns, &pod) else {
        return (
            StatusCode::NOT_FOUND,
            format!("pod \"{pod}\" does not exist"),
        )
            .into_response();
    };
    if status::container_names(&p).iter().all(|c| *c != container) {
        return (
            StatusCode::NOT_FOUND,
            format!("container \"{container}\" not found in pod \"{pod}\""),
        )
            .into_response();
    }
    if let Err(msg) = logs::check_status(&p, &container, q.previous) {
        return (StatusCode::BAD_REQUEST, msg).into_response();
    }
    let uid = uid_of(&p);
    if pods.logs.removed(&uid) {
        // The container is removed: kuberuntime `GetContainerLogs` fails to
        // find it, but `GetKubeletContainerLogs` has already written zero
        // bytes to the stream (since v1.32), so the status is 200 and
        // server.go's `WriteError(400, ...)` only adds its text to the body.
        // (While the kubelet removes it, between its log file and its
        // record, the text is `failed to try resolving symlinks in path
        // ".../0.log": lstat ...: no such file or directory` instead.)
        let id = status::container_id(&uid, &container);
        return (
            StatusCode::OK,
            format!("unable to retrieve container logs for {id}"),
        )
            .into_response();
    }
    logs::respond(pods.logs.get(&uid, &container), q)
}

/// A running agent. Dropping it stops every node (without a word to the
/// API); [`Agent::shutdown`] does the same and waits for the admin server.
pub struct Agent {
    nodes: BTreeMap<String, Arc<Node>>,
    shared: Arc<Shared>,
    admin: Option<(SocketAddr, JoinHandle<()>)>,
}

/// Starts the agent: reads the cluster's CA, registers every node, makes
/// its Lease, starts its loops and log server, and the admin API.
pub async fn start(opts: AgentOptions) -> anyhow::Result<Agent> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let conn = Conn::new(&opts.cluster)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("building the programs' HTTP client")?;
    let mut names = HashSet::new();
    for n in &opts.nodes {
        anyhow::ensure!(
            names.insert(n.name.clone()),
            "node {} is listed twice",
            n.name
        );
    }
    let first = opts.nodes.first().context("no node to play")?;
    let version = server_version(&conn, &first.token).await;
    let shared = Arc::new(Shared {
        conn,
        timing: opts.timing.clone(),
        http,
        kubelet_version: version,
        unpullable: Mutex::new(BTreeSet::new()),
        local_images: opts.local_images.clone(),
        ca_pem: std::fs::read(&opts.cluster.ca_pem)
            .with_context(|| format!("reading the CA file {}", opts.cluster.ca_pem.display()))?,
        pods_dir: crate::procs::pods_dir(),
    });
    let mut nodes = BTreeMap::new();
    for (index, spec) in opts.nodes.iter().enumerate() {
        let client = shared.conn.client(&spec.token)?;
        let node = Arc::new(Node {
            cert: ServingCert::generate(&spec.name)?,
            machine_id: hex_id(&spec.name),
            spec: spec.clone(),
            index,
            shared: shared.clone(),
            client,
            health: Mutex::new(Health::default()),
            health_changed: Arc::new(Notify::new()),
            port: AtomicU16::new(0),
            ips: Arc::new(AtomicU32::new(0)),
            logs: Arc::default(),
            up: Mutex::new(None),
            paused: Mutex::new(None),
        });
        nodes.insert(spec.name.clone(), node);
    }
    let mut agent = Agent {
        nodes,
        shared,
        admin: None,
    };
    for node in agent.nodes.values() {
        node.start().await?;
    }
    if let Some(addr) = opts.admin {
        agent.admin = Some(crate::admin::serve(addr, agent.handle()).await?);
    }
    Ok(agent)
}

fn hex_id(name: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(name.as_bytes())[..16])
}

/// The API server's version (`/version` is public), which the nodes report
/// as their kubelet version.
async fn server_version(conn: &Conn, token: &str) -> String {
    let fallback = "v0.0.0-tcab".to_string();
    let Ok(client) = conn.client(token) else {
        return fallback;
    };
    match api::get(&client, "/version").await {
        Ok(Some(v)) => v["gitVersion"]
            .as_str()
            .map(str::to_string)
            .unwrap_or(fallback),
        _ => fallback,
    }
}

/// A cheap handle on the agent for the admin API.
#[derive(Clone)]
pub(crate) struct Handle {
    nodes: Arc<BTreeMap<String, Arc<Node>>>,
    shared: Arc<Shared>,
}

impl Agent {
    pub(crate) fn handle(&self) -> Handle {
        Handle {
            nodes: Arc::new(self.nodes.clone()),
            shared: self.shared.clone(),
        }
    }

    /// The admin API's URL (`http://127.0.0.1:PORT`), when it serves.
    pub fn admin_url(&self) -> Option<String> {
        self.admin.as_ref().map(|(a, _)| format!("http://{a}"))
    }

    /// The node names.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// A node's kubelet HTTPS port.
    pub fn port(&self, node: &str) -> Option<u16> {
        self.nodes.get(node).map(|n| n.port.load(Ordering::Relaxed))
    }

    /// A node's serving certificate (PEM).
    pub fn serving_cert(&self, node: &str) -> Option<String> {
        self.nodes.get(node).map(|n| n.cert.cert_pem.clone())
    }

    /// Fault: the node is lost (its kubelet and its programs die).
    pub fn lose_node(&self, node: &str) -> Result<(), String> {
        self.handle().lose_node(node)
    }

    /// The lost node comes back (a reboot: its running pods end), or a
    /// node whose kubelet was stopped starts it again (its pods go on).
    pub async fn restore_node(&self, node: &str) -> Result<(), String> {
        self.handle().restore_node(node).await
    }

    /// The node's kubelet stops, its programs run on (nothing reaches the
    /// API until [`Agent::restore_node`] starts it again).
    pub fn stop_kubelet(&self, node: &str) -> Result<(), String> {
        self.handle().stop_kubelet(node)
    }

    /// The node's kubelet restarts with its programs running: it registers
    /// again, watches its pods and goes on with them.
    pub async fn restart_kubelet(&self, node: &str) -> Result<(), String> {
        self.handle().restart_kubelet(node).await
    }

    /// Sets the conditions a node reports.
    pub fn set_health(&self, node: &str, health: Health) -> Result<(), String> {
        self.handle().set_health(node, health)
    }

    /// Fault: node-pressure eviction of a pod.
    pub fn evict(&self, ns: &str, pod: &str) -> Result<(), String> {
        self.handle().evict(ns, pod, None)
    }

    /// Fault: the kernel's OOM killer kills the pod's container.
    pub fn oom_kill(&self, ns: &str, pod: &str) -> Result<(), String> {
        self.handle().signal(ns, pod, Signal::Oom)
    }

    /// Fault: the pod's container exits now with `exit_code`.
    pub fn crash(&self, ns: &str, pod: &str, exit_code: i32) -> Result<(), String> {
        self.handle().signal(ns, pod, Signal::Crash { exit_code })
    }

    /// Fault: the runtime stops the pod's container (SIGTERM, SIGKILL after
    /// `grace`, at least 2 s) without the pod being deleted; the pod ends
    /// with the container's exit (137 `Error` when it had to be killed).
    pub fn kill(&self, ns: &str, pod: &str, grace: Duration) -> Result<(), String> {
        self.handle().signal(ns, pod, Signal::Kill { grace })
    }

    /// Fault: the pod's program stops answering SIGTERM.
    pub fn hang(&self, ns: &str, pod: &str) -> Result<(), String> {
        self.handle().signal(ns, pod, Signal::Hang)
    }

    /// Fault: pulls of `image` fail (or work again).
    pub fn set_unpullable(&self, image: &str, unpullable: bool) {
        self.handle().set_unpullable(image, unpullable)
    }

    /// The log lines a pod's container has written on this agent.
    pub fn log_lines(&self, ns: &str, pod: &str, container: &str) -> Option<Vec<String>> {
        self.handle().log_lines(ns, pod, container)
    }

    /// Stops every node and the admin API.
    pub async fn shutdown(mut self) {
        self.stop();
        if let Some((_, t)) = self.admin.take() {
            t.abort();
            let _ = t.await;
        }
    }

    fn stop(&mut self) {
        for n in self.nodes.values() {
            n.stop();
        }
        if let Some((_, t)) = &self.admin {
            t.abort();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Handle {
    fn node(&self, name: &str) -> Result<&Arc<Node>, String> {
        self.nodes
            .get(name)
            .ok_or_else(|| format!("no node {name} here"))
    }

    pub(crate) fn node_states(&self) -> Vec<Value> {
        self.nodes
            .values()
            .map(|n| {
                json!({"name": n.spec.name, "up": lock(&n.up).is_some(),
                    "port": n.port.load(Ordering::Relaxed), "health": *lock(&n.health)})
            })
            .collect()
    }

    pub(crate) fn lose_node(&self, node: &str) -> Result<(), String> {
        self.node(node)?.stop();
        Ok(())
    }

    pub(crate) async fn restore_node(&self, node: &str) -> Result<(), String> {
        self.node(node)?.start().await.map_err(|e| format!("{e:#}"))
    }

    pub(crate) fn stop_kubelet(&self, node: &str) -> Result<(), String> {
        self.node(node)?.stop_kubelet();
        Ok(())
    }

    pub(crate) async fn restart_kubelet(&self, node: &str) -> Result<(), String> {
        self.stop_kubelet(node)?;
        self.restore_node(node).await
    }

    pub(crate) fn set_health(&self, node: &str, health: Health) -> Result<(), String> {
        let n = self.node(node)?;
        *lock(&n.health) = health;
        n.health_changed.notify_one();
        Ok(())
    }

    fn with_pod(&self, ns: &str, pod: &str) -> Result<Arc<NodeLife>, String> {
        self.nodes
            .values()
            .filter_map(|n| n.life())
            .find(|l| l.pods.has_worker(ns, pod))
            .ok_or_else(|| format!("no running node has pod {ns}/{pod}"))
    }

    pub(crate) fn signal(&self, ns: &str, pod: &str, sig: Signal) -> Result<(), String> {
        self.with_pod(ns, pod)?.pods.signal(ns, pod, sig)
    }

    /// A node-pressure eviction with the eviction manager's message
    /// (eviction/helpers.go `evictionMessage` for memory).
    pub(crate) fn evict(&self, ns: &str, pod: &str, message: Option<String>) -> Result<(), String> {
        let life = self.with_pod(ns, pod)?;
        let message = message.unwrap_or_else(|| {
            let p = life.pods.known(ns, pod);
            let c = p.as_ref().map(|p| p["spec"]["containers"][0].clone()).unwrap_or(Value::Null);
            let name = c["name"].as_str().unwrap_or("main");
            let request = c["resources"]["requests"]["memory"].as_str().unwrap_or("0");
            format!(
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. Container {name} was using 1536Mi, request is {request}, has larger consumption of memory. "
            )
        });
        life.pods.signal(ns, pod, Signal::Evict { message })
    }

    pub(crate) fn set_unpullable(&self, image: &str, unpullable: bool) {
        let mut set = lock(&self.shared.unpullable);
        if unpullable {
            set.insert(image.to_string());
        } else {
            set.remove(image);
        }
    }

    pub(crate) fn log_lines(&self, ns: &str, pod: &str, container: &str) -> Option<Vec<String>> {
        self.nodes.values().filter_map(|n| n.life()).find_map(|l| {
            let p = l.pods.known(ns, pod)?;
            Some(l.pods.logs.get(&uid_of(&p), container).text())
        })
    }
}
