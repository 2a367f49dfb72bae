//! The sim's core: the store plus the operations that have cluster-wide
//! effects (creates through admission, deletion, Job deletion with
//! propagation, disruptions, machines), shared by the HTTP layer, the
//! controllers, the kubelets and the fake driver.

use crate::admission;
use crate::clock::{SimClock, k8s_time};
use crate::events::{self, EventType, Source};
use crate::faults::Faults;
use crate::http::params::Preconditions;
use crate::kubelet::{self, PodSignal, PodTask};
use crate::nodes::{self, NodeSpec};
use crate::objects::{self, controller_job, deleting};
use crate::podstatus;
use crate::quantity;
use crate::rbac::Rbac;
use crate::status::ApiError;
use crate::store::{Key, Kind, Store};
use crate::taints::TAINT_OUT_OF_SERVICE;
use jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// How long the simulated cluster takes for things, in sim time. The
/// defaults are upstream's where upstream has one.
#[derive(Debug, Clone)]
pub struct Timing {
    /// A new pod waits this long before the scheduler tries it.
    pub schedule_delay: Duration,
    /// A pod whose volumes, images and env are ready waits this long
    /// before its container runs.
    pub start_delay: Duration,
    /// How long a plain (non-driver) Job pod runs when not annotated.
    pub default_job_pod_run: Duration,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// A node whose kubelet stopped posting becomes NotReady after this
    /// (kube-controller-manager `--node-monitor-grace-period`; 50 s since
    /// Kubernetes 1.32, 40 s before).
    pub node_monitor_grace: Duration,
    /// `tolerationSeconds` the DefaultTolerationSeconds admission plugin
    /// gives every pod for the not-ready and unreachable taints.
    pub default_toleration_seconds: i64,
    /// How often pod GC runs (upstream: 20 s).
    pub pod_gc_period: Duration,
    /// How long a node must be gone before pod GC deletes its pods
    /// (upstream: 40 s).
    pub pod_gc_quarantine: Duration,
    /// The first image pull back-off (upstream: 10 s), doubling ...
    pub image_back_off: Duration,
    /// ... up to this (upstream: 300 s).
    pub image_back_off_max: Duration,
    /// How soon the kubelet retries a pod it could not start for its
    /// config (upstream's pod worker back-off: 10 s).
    pub kubelet_retry: Duration,
    /// Pods that fit nowhere are retried at least this often (upstream's
    /// unschedulable queue flush: 5 minutes).
    pub unschedulable_flush: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            schedule_delay: Duration::from_millis(20),
            start_delay: Duration::from_millis(30),
            default_job_pod_run: Duration::from_millis(100),
            bookmark_interval: Duration::from_secs(5),
            node_monitor_grace: Duration::from_secs(50),
            default_toleration_seconds: 300,
            pod_gc_period: Duration::from_secs(20),
            pod_gc_quarantine: Duration::from_secs(40),
            image_back_off: Duration::from_secs(10),
            image_back_off_max: Duration::from_secs(300),
            kubelet_retry: Duration::from_secs(10),
            unschedulable_flush: Duration::from_secs(300),
        }
    }
}

/// How a Job's dependents are treated when it is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Pods are left, with their ownerReference removed.
    Orphan,
    /// The Job goes at once; its pods are deleted after.
    Background,
    /// The Job stays (deletionTimestamp set) until its pods are gone.
    Foreground,
}

/// The state of one machine (a node's host and its kubelet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Machine {
    /// Since when the machine has been down (None while it runs).
    pub down_since: Option<Timestamp>,
    /// Its kubelet runs but reports `Ready=False` ([`Sim::set_node_ready`]).
    pub not_ready: bool,
}

/// Shared state of one running sim.
pub struct Sim {
    /// All objects.
    pub store: Store,
    /// Sim time.
    pub clock: SimClock,
    /// Delays.
    pub timing: Timing,
    /// Fault switches and request counters.
    pub faults: Faults,
    /// The Role restricting the RBAC token, when RBAC mode is on.
    pub rbac: Option<Rbac>,
    /// The default namespace (written to the kubeconfig).
    pub namespace: String,
    /// The token written to the kubeconfig (unrestricted).
    pub admin_token: String,
    /// The pods the kubelets have taken.
    pub(crate) pods: Mutex<HashMap<Key, PodTask>>,
    /// Wakes the Job controller to re-examine every Job.
    pub(crate) controller_wake: Notify,
    /// HTTP client the fake drivers and publishers use.
    pub(crate) http: reqwest::Client,
    /// Container programs started and not yet stopped.
    pub(crate) programs: AtomicUsize,
    /// The Event recorder.
    pub(crate) recorder: events::Recorder,
    machines: Mutex<BTreeMap<String, Machine>>,
    /// Wakes the node lifecycle controller when a machine changes.
    pub(crate) machines_changed: Notify,
    node_specs: Vec<NodeSpec>,
    unpullable: Mutex<BTreeSet<String>>,
    halted: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const STANDARD_B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn encode_b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(STANDARD_B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn valid_b64(s: &str) -> bool {
    s.len().is_multiple_of(4)
        && s.trim_end_matches('=')
            .bytes()
            .all(|c| STANDARD_B64.contains(&c))
        && s.len() - s.trim_end_matches('=').len() <= 2
}

impl Sim {
    pub(crate) fn new(
        clock: SimClock,
        timing: Timing,
        history: usize,
        rbac: Option<Rbac>,
        namespace: String,
        admin_token: String,
        nodes: Vec<NodeSpec>,
    ) -> Result<Arc<Self>, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let sim = Arc::new(Sim {
            store: Store::new(history),
            clock,
            timing,
            faults: Faults::default(),
            rbac,
            namespace,
            admin_token,
            pods: Mutex::new(HashMap::new()),
            controller_wake: Notify::new(),
            http,
            programs: AtomicUsize::new(0),
            recorder: events::Recorder::default(),
            machines: Mutex::new(BTreeMap::new()),
            machines_changed: Notify::new(),
            node_specs: nodes,
            unpullable: Mutex::new(BTreeSet::new()),
            halted: AtomicBool::new(false),
        });
        let now = sim.clock.now();
        for (i, spec) in sim.node_specs.iter().enumerate() {
            let _ = sim
                .store
                .create(Kind::Node, "", nodes::node_object(spec, i, now), now);
            lock(&sim.machines).insert(spec.name.clone(), Machine::default());
        }
        sim.ensure_namespace("default");
        let ns = sim.namespace.clone();
        sim.ensure_namespace(&ns);
        Ok(sim)
    }

    /// How many container programs (fake drivers, publishers, plain
    /// containers) run now. A killed program counts until it has stopped
    /// for good, so `0` after a node crash means nothing can act any more.
    pub fn programs_running(&self) -> usize {
        self.programs.load(Ordering::SeqCst)
    }

    /// Records an Event about an object.
    pub fn record(
        &self,
        kind: Kind,
        obj: &Value,
        etype: EventType,
        reason: &str,
        message: &str,
        source: &Source,
    ) {
        self.recorder.record(
            &self.store,
            kind,
            obj,
            etype,
            reason,
            message,
            source,
            self.clock.now(),
        );
    }

    /// The machines by node name.
    pub fn machines(&self) -> BTreeMap<String, Machine> {
        lock(&self.machines).clone()
    }

    /// Whether the machine of `node` runs.
    pub fn machine_up(&self, node: &str) -> bool {
        lock(&self.machines)
            .get(node)
            .is_some_and(|m| m.down_since.is_none())
    }

    /// The index of a node in the cluster's node list (0 for others).
    pub fn node_index(&self, node: &str) -> usize {
        self.node_specs
            .iter()
            .position(|s| s.name == node)
            .unwrap_or(0)
    }

    /// The InternalIP of a node.
    pub fn host_ip(&self, node: &str) -> String {
        nodes::host_ip(self.node_index(node))
    }

    /// Whether pulls of this image fail.
    pub fn unpullable(&self, image: &str) -> bool {
        lock(&self.unpullable).contains(image)
    }

    /// Makes pulls of `image` fail (or succeed again).
    pub fn set_unpullable(&self, image: &str, unpullable: bool) {
        let mut set = lock(&self.unpullable);
        if unpullable {
            set.insert(image.to_string());
        } else {
            set.remove(image);
        }
    }

    /// A Secret.
    pub fn secret(&self, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(&Key::new(Kind::Secret, ns, name))
    }

    pub(crate) fn halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    /// Stops every program at once without modelling anything (the sim is
    /// going away).
    pub(crate) fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
        kubelet::stop_node(self, None);
    }

    /// The ServiceAccount controller: every namespace has a `default`
    /// ServiceAccount.
    pub fn ensure_namespace(&self, ns: &str) {
        if ns.is_empty() {
            return;
        }
        let key = Key::new(Kind::ServiceAccount, ns, "default");
        if self.store.get(&key).is_none() {
            let sa = json!({"metadata": {"name": "default"}});
            let _ = self
                .store
                .create(Kind::ServiceAccount, ns, sa, self.clock.now());
        }
    }

    /// Validates, defaults and stores a new Job (see
    /// [`crate::validation::admit_create`]).
    pub fn create_job(&self, ns: &str, job: Value) -> Result<Arc<Value>, ApiError> {
        let job = crate::validation::admit_create(Kind::Job, job, false)?;
        self.ensure_namespace(ns);
        self.store.create(Kind::Job, ns, job, self.clock.now())
    }

    /// Validates, defaults and admits a new Pod from the API.
    pub fn create_pod(self: &Arc<Self>, ns: &str, pod: Value) -> Result<Arc<Value>, ApiError> {
        let pod = crate::validation::admit_create(Kind::Pod, pod, false)?;
        self.create_pod_internal(ns, pod)
    }

    /// Admits and stores an already defaulted pod; the scheduler and the
    /// kubelet take it from there.
    pub(crate) fn create_pod_internal(
        &self,
        ns: &str,
        mut pod: Value,
    ) -> Result<Arc<Value>, ApiError> {
        self.ensure_namespace(ns);
        admission::service_account(&mut pod, ns, |sa| {
            self.store
                .get(&Key::new(Kind::ServiceAccount, ns, sa))
                .is_some()
        })?;
        admission::default_tolerations(&mut pod, self.timing.default_toleration_seconds);
        admission::priority(&mut pod);
        self.store.create(Kind::Pod, ns, pod, self.clock.now())
    }

    /// Creates an `events.k8s.io/v1` Event as upstream does: validated as
    /// that API validates a create, stored as the core v1 Event it is a
    /// view of, and answered in the `events.k8s.io/v1` form
    /// ([`crate::events_v1`]).
    /// With `dry_run` it is validated and answered, not stored.
    pub fn create_event_v1(&self, ns: &str, obj: Value, dry_run: bool) -> Result<Value, ApiError> {
        let mut core = crate::events_v1::to_core(&obj);
        objects::strip_server_fields(&mut core, true);
        core["metadata"]["namespace"] = json!(ns);
        let md = &mut core["metadata"];
        if md["name"].as_str().is_none_or(str::is_empty)
            && let Some(prefix) = md["generateName"].as_str().filter(|p| !p.is_empty())
        {
            md["name"] = json!(crate::validation::generate_name(prefix));
        }
        let errs = crate::events_v1::validate_create(&core, ns);
        if !errs.is_empty() {
            // Upstream validates the internal (core) Event, so the Status
            // names the core kind, whichever API the create came through.
            return Err(crate::validation::invalid(
                "",
                "Event",
                objects::name(&core),
                &errs,
            ));
        }
        if dry_run {
            core["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
            core["metadata"]["creationTimestamp"] = json!(k8s_time(self.clock.now()));
            return Ok(crate::events_v1::from_core(&core));
        }
        self.ensure_namespace(ns);
        let stored = self.store.create(Kind::Event, ns, core, self.clock.now())?;
        Ok(crate::events_v1::from_core(&stored))
    }

    /// Stores a new object of a kind without special handling (Secret,
    /// ServiceAccount, Event, Node).
    pub fn create_object(
        &self,
        kind: Kind,
        ns: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        objects::strip_server_fields(&mut obj, kind == Kind::Event || kind == Kind::Node);
        let md = &obj["metadata"];
        if md["name"].as_str().is_none_or(str::is_empty)
            && md["generateName"].as_str().is_none_or(str::is_empty)
        {
            return Err(crate::validation::invalid(
                kind.group(),
                kind.kind(),
                "",
                &[crate::validation::FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        if kind == Kind::Secret {
            prepare_secret(&mut obj)?;
        }
        if kind.namespaced() {
            self.ensure_namespace(ns);
        }
        self.store.create(kind, ns, obj, self.clock.now())
    }

    /// Deletes a pod as the API server does: gracefully, so a pod on a node
    /// stays (with its deletionTimestamp) until its kubelet has stopped it
    /// and its finalizers are gone; an unscheduled or terminal pod, or
    /// `grace = Some(0)`, goes at once unless finalizers hold it.
    pub fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        grace: Option<i64>,
    ) -> Result<Arc<Value>, ApiError> {
        self.store
            .delete(&Key::new(Kind::Pod, ns, name), grace, self.clock.now())
            .map(|(obj, _)| obj)
    }

    /// Deletes an object of a kind without propagation (everything but
    /// Jobs): removed at once unless finalizers hold it.
    pub fn delete_object(&self, kind: Kind, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        let (obj, _) = self
            .store
            .delete(&Key::new(kind, ns, name), None, self.clock.now())?;
        if kind == Kind::ServiceAccount && name == "default" {
            self.ensure_namespace(ns);
        }
        Ok(obj)
    }

    /// The pods a Job controls (by ownerReference uid).
    pub fn pods_of_job(&self, ns: &str, job: &Value) -> Vec<Arc<Value>> {
        self.store
            .owned_pods(objects::uid(job))
            .into_iter()
            .filter(|p| {
                p["metadata"]["namespace"] == ns
                    && controller_job(p).is_some_and(|(_, u)| u == objects::uid(job))
            })
            .collect()
    }

    /// Deletes a Job with the given propagation; answers what the DELETE
    /// answers (the Job as removed, or as marked).
    ///
    /// As the generic registry and the garbage collector do it
    /// (`registry/generic/registry/store.go` `Delete`,
    /// `deletionFinalizersForGarbageCollection`, `markAsDeleting`;
    /// `pkg/controller/garbagecollector`): `Background` removes the Job at
    /// once and then deletes its pods; `Orphan` and `Foreground` mark it
    /// (deletionTimestamp, grace 0) with the `orphan` or
    /// `foregroundDeletion` finalizer, which is the answer. For `Orphan`
    /// the collector then takes the Job's ownerReference off its pods and
    /// removes the finalizer, which deletes the Job; for `Foreground` it
    /// deletes the pods, and the Job goes once none is left (at once when it
    /// has none). The collector's steps run within the call here.
    /// `preconditions` are checked first (`409 Conflict`, nothing changes),
    /// as `BeforeDelete` does.
    pub fn delete_job(
        &self,
        ns: &str,
        name: &str,
        policy: Propagation,
        preconditions: &Preconditions,
    ) -> Result<Arc<Value>, ApiError> {
        let key = Key::new(Kind::Job, ns, name);
        let job = self
            .store
            .get(&key)
            .ok_or_else(|| Kind::Job.not_found(name))?;
        preconditions.check(Kind::Job, &job)?;
        let pods = self.pods_of_job(ns, &job);
        let now = self.clock.now();
        let uid = objects::uid(&job).to_string();
        let mark_with = |finalizer: &'static str| {
            self.store.update(&key, |j| {
                if deleting(j) {
                    return Ok(false);
                }
                mark_for_collector(j, finalizer, now);
                Ok(true)
            })
        };
        // The collector's last step: its finalizer off (the Job goes when
        // no other finalizer holds it).
        let release = |finalizer: &'static str| {
            let _ = self.store.update(&key, |j| {
                let Some(fs) = j["metadata"]["finalizers"].as_array_mut() else {
                    return Ok(false);
                };
                let before = fs.len();
                fs.retain(|f| f != finalizer);
                Ok(fs.len() != before)
            });
        };
        match policy {
            Propagation::Orphan => {
                let marked = mark_with(ORPHAN_FINALIZER)?;
                for p in &pods {
                    let _ = self
                        .store
                        .update(&Key::new(Kind::Pod, ns, objects::name(p)), |p| {
                            let Some(refs) = p["metadata"]["ownerReferences"].as_array_mut() else {
                                return Ok(false);
                            };
                            refs.retain(|r| r["uid"] != uid.as_str());
                            if refs.is_empty()
                                && let Some(m) = p["metadata"].as_object_mut()
                            {
                                m.remove("ownerReferences");
                            }
                            Ok(true)
                        });
                }
                release(ORPHAN_FINALIZER);
                Ok(marked)
            }
            Propagation::Background => {
                let (gone, _) = self.store.delete(&key, None, now)?;
                // The Job controller lets go of the pods of a Job that is
                // gone (`deleteJob`, its orphan queue) before the garbage
                // collector, which first confirms the owner is gone, deletes
                // them: the usual order on a real cluster.
                for p in &pods {
                    crate::controller::remove_finalizer(
                        self,
                        &Key::new(Kind::Pod, ns, objects::name(p)),
                    );
                }
                for p in &pods {
                    let _ = self.delete_pod(ns, objects::name(p), None);
                }
                Ok(gone)
            }
            Propagation::Foreground => {
                let marked = mark_with(FOREGROUND_FINALIZER)?;
                if pods.is_empty() {
                    release(FOREGROUND_FINALIZER);
                }
                // The collector deletes the pods; the Job controller, seeing
                // the Job marked, lets go of them at once
                // (`canRemoveFinalizer`), which kube-sim's controller loop
                // could otherwise leave until after the pod has stopped.
                for p in &pods {
                    let _ = self.delete_pod(ns, objects::name(p), None);
                    crate::controller::remove_finalizer(
                        self,
                        &Key::new(Kind::Pod, ns, objects::name(p)),
                    );
                }
                Ok(marked)
            }
        }
    }

    fn pod(&self, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.store
            .get(&Key::new(Kind::Pod, ns, name))
            .ok_or_else(|| Kind::Pod.not_found(name))
    }

    /// Fault: the kernel OOM-kills the pod's container (SIGKILL, exit 137,
    /// `OOMKilled`, no cleanup by the program).
    pub fn oom_kill(&self, ns: &str, name: &str) -> Result<(), ApiError> {
        self.pod(ns, name)?;
        if kubelet::signal(self, &Key::new(Kind::Pod, ns, name), PodSignal::Oom) {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "pod {name:?} has no running container"
            )))
        }
    }

    /// Fault: the container runtime stops the pod's container without the
    /// pod being deleted (as `crictl stop --timeout N` would): SIGTERM, then
    /// SIGKILL after `grace` (none: SIGKILL at once, `Error`, 137). The pod
    /// ends `Failed` (restartPolicy Never) and stays.
    pub fn kill_container(&self, ns: &str, name: &str, grace: Duration) -> Result<(), ApiError> {
        self.pod(ns, name)?;
        if kubelet::signal(
            self,
            &Key::new(Kind::Pod, ns, name),
            PodSignal::Stop { grace },
        ) {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "pod {name:?} has no running container"
            )))
        }
    }

    /// Adds a true DisruptionTarget condition to a pod that is not terminal
    /// (`UpdatePodCondition`).
    fn disruption_target(
        &self,
        ns: &str,
        name: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ApiError> {
        let now = k8s_time(self.clock.now());
        self.store.update(&Key::new(Kind::Pod, ns, name), |p| {
            if podstatus::terminal(p) {
                return Ok(false);
            }
            Ok(podstatus::set_condition(
                p,
                "DisruptionTarget",
                reason,
                message,
                &now,
            ))
        })?;
        Ok(())
    }

    /// The Eviction API (`pods/eviction`): DisruptionTarget
    /// `EvictionByEvictionAPI`, then a delete with the pod's grace period.
    pub fn evict(&self, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.pod(ns, name)?;
        self.disruption_target(ns, name, "EvictionByEvictionAPI", "Eviction API: evicting")?;
        self.delete_pod(ns, name, None)
    }

    /// Preemption by the scheduler: DisruptionTarget `PreemptionByScheduler`,
    /// a delete with the pod's grace period, and a `Preempted` Event.
    pub fn preempt(&self, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        let pod = self.pod(ns, name)?;
        self.disruption_target(
            ns,
            name,
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        )?;
        let gone = self.delete_pod(ns, name, None)?;
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        self.record(
            Kind::Pod,
            &pod,
            EventType::Normal,
            "Preempted",
            &format!("Preempted by pod kube-sim-preemptor on node {node}"),
            &Source::component("default-scheduler"),
        );
        Ok(gone)
    }

    /// Node-pressure eviction by the pod's kubelet: the pod is stopped
    /// (grace 1 s) and kept, phase `Failed`, reason `Evicted`, with a
    /// DisruptionTarget `TerminationByKubelet` condition.
    pub fn kubelet_evict(&self, ns: &str, name: &str, resource: &str) -> Result<(), ApiError> {
        let pod = self.pod(ns, name)?;
        let container = pod["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap_or("main");
        let request = pod["spec"]["containers"][0]["resources"]["requests"][resource]
            .as_str()
            .and_then(quantity::bytes)
            .unwrap_or(0);
        let message = format!(
            "The node was low on resource: {resource}. Threshold quantity: 100Mi, available: 51200Ki. Container {container} was using {}, request is {}, has larger consumption of {resource}. ",
            quantity::format_bytes(request + (512 << 20)),
            quantity::format_bytes(request)
        );
        if kubelet::signal(
            self,
            &Key::new(Kind::Pod, ns, name),
            PodSignal::Evict { message },
        ) {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "pod {name:?} is not on a running kubelet"
            )))
        }
    }

    fn node_exists(&self, name: &str) -> Result<(), ApiError> {
        if lock(&self.machines).contains_key(name) {
            Ok(())
        } else {
            Err(Kind::Node.not_found(name))
        }
    }

    /// Fault: the kubelet of `node` reports `Ready=False` (`KubeletNotReady`,
    /// its runtime's network down) while it goes on running its pods, or
    /// `Ready=True` again. The kubelet posts the condition at once (when its
    /// machine runs); the node lifecycle controller then taints the node
    /// (see [`crate::nodes`]).
    pub fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), ApiError> {
        self.node_exists(node)?;
        let up = {
            let mut machines = lock(&self.machines);
            let m = machines.entry(node.to_string()).or_default();
            m.not_ready = !ready;
            m.down_since.is_none()
        };
        if up {
            let now = self.clock.now();
            let _ = self.store.update(&Key::new(Kind::Node, "", node), |n| {
                let before = n.clone();
                nodes::post_ready(n, ready, now);
                Ok(*n != before)
            });
        }
        self.machines_changed.notify_one();
        Ok(())
    }

    /// Fault: the machine of `node` dies. Its programs stop where they are;
    /// nothing about them reaches the API any more.
    pub fn crash_node(&self, node: &str) -> Result<usize, ApiError> {
        self.node_exists(node)?;
        let now = self.clock.now();
        if let Some(m) = lock(&self.machines).get_mut(node)
            && m.down_since.is_none()
        {
            m.down_since = Some(now);
        }
        let before = lock(&self.pods).values().filter(|t| t.node == node).count();
        kubelet::stop_node(self, Some(node));
        self.machines_changed.notify_one();
        Ok(before)
    }

    /// The machine of `node` boots again: its kubelet registers the node if
    /// it was deleted, marks the containers that ran as lost
    /// (`ContainerStatusUnknown`, 137) and takes up pods that had not started.
    pub fn restart_node(self: &Arc<Self>, node: &str) -> Result<(), ApiError> {
        self.node_exists(node)?;
        kubelet::stop_node(self, Some(node));
        if let Some(m) = lock(&self.machines).get_mut(node) {
            m.down_since = None;
        }
        let key = Key::new(Kind::Node, "", node);
        if self.store.get(&key).is_none()
            && let Some(i) = self.node_specs.iter().position(|s| s.name == node)
        {
            let now = self.clock.now();
            let _ = self.store.create(
                Kind::Node,
                "",
                nodes::node_object(&self.node_specs[i], i, now),
                now,
            );
        }
        kubelet::machine_restarted(self, node);
        self.machines_changed.notify_one();
        Ok(())
    }

    /// Adds the `node.kubernetes.io/out-of-service` NoExecute taint.
    pub fn taint_out_of_service(&self, node: &str) -> Result<Arc<Value>, ApiError> {
        let now = k8s_time(self.clock.now());
        self.store.update(&Key::new(Kind::Node, "", node), |n| {
            let taints = objects::ensure_object(&mut n["spec"])
                .entry("taints")
                .or_insert_with(|| json!([]));
            if !taints.is_array() {
                *taints = json!([]);
            }
            let Some(ts) = taints.as_array_mut() else {
                return Ok(false);
            };
            if ts.iter().any(|t| t["key"] == TAINT_OUT_OF_SERVICE) {
                return Ok(false);
            }
            ts.push(json!({"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute", "timeAdded": now}));
            Ok(true)
        })
    }
}

/// The finalizer an `Orphan` delete puts on the owner until its dependents
/// are orphaned (`metav1.FinalizerOrphanDependents`).
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer a `Foreground` delete puts on the owner until its
/// dependents are gone (`metav1.FinalizerDeleteDependents`).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Marks an object for deletion by the garbage collector as the registry
/// does (`markAsDeleting`: deletionTimestamp now, grace 0) and adds the
/// collector's finalizer.
pub fn mark_for_collector(obj: &mut Value, finalizer: &str, now: Timestamp) {
    obj["metadata"]["deletionTimestamp"] = json!(k8s_time(now));
    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    let fs = objects::ensure_object(&mut obj["metadata"])
        .entry("finalizers")
        .or_insert_with(|| json!([]));
    if !fs.is_array() {
        *fs = json!([]);
    }
    if let Some(a) = fs.as_array_mut()
        && !a.iter().any(|f| f == finalizer)
    {
        a.push(json!(finalizer));
    }
}

/// Secret defaulting (`type: Opaque`), `stringData` merged into `data`, and
/// the check that `data` values are base64.
fn prepare_secret(secret: &mut Value) -> Result<(), ApiError> {
    let name = objects::name(secret).to_string();
    if secret["type"].as_str().is_none_or(str::is_empty) {
        secret["type"] = json!("Opaque");
    }
    if let Some(sd) = secret
        .as_object_mut()
        .and_then(|m| m.remove("stringData"))
        .and_then(|v| v.as_object().cloned())
    {
        let data = objects::ensure_object(&mut secret["data"]);
        for (k, v) in sd {
            data.insert(k, json!(encode_b64(v.as_str().unwrap_or("").as_bytes())));
        }
    }
    let mut causes = Vec::new();
    if let Some(data) = secret["data"].as_object() {
        for (k, v) in data {
            if !v.as_str().is_some_and(valid_b64) {
                causes.push(crate::validation::FieldError::invalid(
                    &format!("data[{k}]"),
                    crate::validation::BadValue::Raw("<secret contents redacted>".into()),
                    "must be base64-encoded bytes",
                ));
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(crate::validation::invalid("", "Secret", &name, &causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_get_base64_data() {
        let mut s = json!({"metadata": {"name": "x"}, "stringData": {"k": "value!"}});
        prepare_secret(&mut s).unwrap();
        assert_eq!(s["type"], "Opaque");
        assert_eq!(s["data"]["k"], "dmFsdWUh");
        assert!(s.get("stringData").is_none());
        assert_eq!(encode_b64(b"ab"), "YWI=");
        let mut bad = json!({"metadata": {"name": "x"}, "data": {"k": "not base64!"}});
        assert_eq!(prepare_secret(&mut bad).unwrap_err().code, 422);
    }
}
