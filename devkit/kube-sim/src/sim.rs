//! The sim's core: the store plus the operations that have cluster-wide
//! effects (graceful pod deletion, Job deletion with propagation, faults),
//! shared by the HTTP layer, the Job controller, the kubelet and the fake
//! driver.

use crate::clock::{SimClock, k8s_time};
use crate::faults::Faults;
use crate::kubelet::{self, PodSignal};
use crate::objects::{self, controller_job, deleting};
use crate::rbac::Rbac;
use crate::status::ApiError;
use crate::store::{Key, Kind, Store};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// How long the simulated cluster takes for things, in sim time.
#[derive(Debug, Clone)]
pub struct Timing {
    /// A new pod waits this long before it is scheduled.
    pub schedule_delay: Duration,
    /// A scheduled pod waits this long before its container runs.
    pub start_delay: Duration,
    /// How long a plain (non-driver) Job pod runs when not annotated.
    pub default_job_pod_run: Duration,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            schedule_delay: Duration::from_millis(20),
            start_delay: Duration::from_millis(30),
            default_job_pod_run: Duration::from_millis(100),
            bookmark_interval: Duration::from_secs(5),
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
    /// Signal channels of running pods (the kubelet's registry).
    pub(crate) pods: Mutex<HashMap<Key, mpsc::UnboundedSender<PodSignal>>>,
    /// Wakes the Job controller to re-examine every Job.
    pub(crate) controller_wake: Notify,
    /// HTTP client the fake drivers and publishers use.
    pub(crate) http: reqwest::Client,
    /// Container programs started and not yet stopped.
    pub(crate) programs: AtomicUsize,
}

impl Sim {
    pub(crate) fn new(
        clock: SimClock,
        timing: Timing,
        history: usize,
        rbac: Option<Rbac>,
        namespace: String,
        admin_token: String,
    ) -> Result<Arc<Self>, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Arc::new(Sim {
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
        }))
    }

    /// How many container programs (fake drivers, publishers, plain
    /// containers) run now. A killed program counts until it has stopped
    /// for good, so `0` after a node crash means nothing can act any more.
    pub fn programs_running(&self) -> usize {
        self.programs.load(Ordering::SeqCst)
    }

    /// Validates, defaults and stores a new Job (see
    /// [`crate::validation::admit_create`]).
    pub fn create_job(&self, ns: &str, job: Value) -> Result<Arc<Value>, ApiError> {
        let job = crate::validation::admit_create(Kind::Job, job, false)?;
        self.store.create(Kind::Job, ns, job, self.clock.now())
    }

    /// Validates, defaults and stores a new Pod, and starts it.
    pub fn create_pod(self: &Arc<Self>, ns: &str, pod: Value) -> Result<Arc<Value>, ApiError> {
        let pod = crate::validation::admit_create(Kind::Pod, pod, false)?;
        self.insert_pod(ns, pod)
    }

    /// Stores an already defaulted pod and hands it to the kubelet.
    pub(crate) fn insert_pod(
        self: &Arc<Self>,
        ns: &str,
        pod: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let created = self.store.create(Kind::Pod, ns, pod, self.clock.now())?;
        kubelet::start(
            self.clone(),
            Key::new(Kind::Pod, ns, objects::name(&created)),
        );
        Ok(created)
    }

    fn signal(&self, key: &Key, sig: PodSignal) -> bool {
        let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        pods.get(key).is_some_and(|tx| tx.send(sig).is_ok())
    }

    /// Deletes a pod. A pod whose container runs is terminated gracefully
    /// (deletionTimestamp set, SIGTERM, SIGKILL after the grace period) and
    /// removed once stopped; any other pod, or `grace = Some(0)`, goes at once.
    pub fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        grace: Option<i64>,
    ) -> Result<Arc<Value>, ApiError> {
        let key = Key::new(Kind::Pod, ns, name);
        let pod = self
            .store
            .get(&key)
            .ok_or_else(|| Kind::Pod.not_found(name))?;
        let grace = grace
            .unwrap_or_else(|| {
                pod["spec"]["terminationGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(30)
            })
            .max(0);
        let running = self
            .pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&key);
        if grace == 0 || !running {
            self.signal(&key, PodSignal::Vanish);
            return self
                .store
                .remove(&key)
                .ok_or_else(|| Kind::Pod.not_found(name));
        }
        if deleting(&pod) {
            return Ok(pod);
        }
        let at = self.clock.now() + jiff::SignedDuration::from_secs(grace);
        let updated = self.store.update(&key, |p| {
            p["metadata"]["deletionTimestamp"] = json!(k8s_time(at));
            p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            Ok(true)
        })?;
        if !self.signal(
            &key,
            PodSignal::Term {
                grace: Duration::from_secs(grace as u64),
            },
        ) {
            // The container stopped meanwhile: nothing left to wait for.
            return self
                .store
                .remove(&key)
                .ok_or_else(|| Kind::Pod.not_found(name));
        }
        Ok(updated)
    }

    /// The pods a Job controls (by ownerReference uid).
    pub fn pods_of_job(&self, ns: &str, job: &Value) -> Vec<Arc<Value>> {
        let uid = objects::uid(job).to_string();
        self.store
            .list(Kind::Pod, Some(ns), |p| {
                controller_job(p).is_some_and(|(_, u)| u == uid)
            })
            .1
    }

    /// Deletes a Job with the given propagation.
    pub fn delete_job(
        &self,
        ns: &str,
        name: &str,
        policy: Propagation,
    ) -> Result<Arc<Value>, ApiError> {
        let key = Key::new(Kind::Job, ns, name);
        let job = self
            .store
            .get(&key)
            .ok_or_else(|| Kind::Job.not_found(name))?;
        let pods = self.pods_of_job(ns, &job);
        match policy {
            Propagation::Orphan => {
                for p in &pods {
                    let _ = self
                        .store
                        .update(&Key::new(Kind::Pod, ns, objects::name(p)), |p| {
                            if let Some(m) = p["metadata"].as_object_mut() {
                                m.remove("ownerReferences");
                            }
                            Ok(true)
                        });
                }
                self.store
                    .remove(&key)
                    .ok_or_else(|| Kind::Job.not_found(name))
            }
            Propagation::Background => {
                let gone = self
                    .store
                    .remove(&key)
                    .ok_or_else(|| Kind::Job.not_found(name))?;
                for p in &pods {
                    let _ = self.delete_pod(ns, objects::name(p), None);
                }
                Ok(gone)
            }
            Propagation::Foreground => {
                if pods.is_empty() {
                    return self
                        .store
                        .remove(&key)
                        .ok_or_else(|| Kind::Job.not_found(name));
                }
                let now = self.clock.now();
                let updated = self.store.update(&key, |j| {
                    if deleting(j) {
                        return Ok(false);
                    }
                    j["metadata"]["deletionTimestamp"] = json!(k8s_time(now));
                    j["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                    j["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
                    Ok(true)
                })?;
                for p in &pods {
                    let _ = self.delete_pod(ns, objects::name(p), None);
                }
                Ok(updated)
            }
        }
    }

    /// Fault: the pod's container is OOM-killed (SIGKILL, exit 137, no
    /// cleanup by the program).
    pub fn oom_kill(&self, ns: &str, name: &str) -> Result<(), ApiError> {
        let key = Key::new(Kind::Pod, ns, name);
        self.store
            .get(&key)
            .ok_or_else(|| Kind::Pod.not_found(name))?;
        if self.signal(&key, PodSignal::Kill { oom: true }) {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "pod {name:?} has no running container"
            )))
        }
    }

    /// Fault: evicts a pod through the Eviction API: a DisruptionTarget
    /// condition, then a graceful deletion.
    pub fn evict(&self, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        let key = Key::new(Kind::Pod, ns, name);
        let now = self.clock.now();
        self.store.update(&key, |p| {
            Ok(objects::set_condition(
                p,
                "DisruptionTarget",
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
                now,
            ))
        })?;
        self.delete_pod(ns, name, None)
    }

    /// Fault: the node crashes. Every pod is gone at once; no program gets
    /// to clean up.
    pub fn crash_node(&self) -> usize {
        let senders: Vec<_> = {
            let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
            pods.drain().map(|(_, tx)| tx).collect()
        };
        for tx in senders {
            let _ = tx.send(PodSignal::Vanish);
        }
        self.store.remove_all(Kind::Pod)
    }
}
