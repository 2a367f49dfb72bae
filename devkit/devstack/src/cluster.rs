//! Which cluster a stack runs on, and the one admin interface the tests
//! drive on either: kube-sim's admin API on the simulated cluster; on the
//! real control plane the fault proxy (API faults, request counters, an API
//! server restart through the launcher), the node agent (pod and node
//! faults), the API itself (the Eviction API, deletes, taints) and the API
//! server's audit log (the timeline).
//!
//! | call | kube-sim | real control plane |
//! |---|---|---|
//! | `add_fault`, `faults`, `fault_affected`, `remove_fault`, `clear_faults`, `close_watches` | its rules | the proxy's (the same rules, scoped to the dispatcher's token) |
//! | `counters` | its counters | the proxy's, requests of the dispatcher's identity only; `max_live_jobs` and `live_jobs` from the audit timeline |
//! | `restart` | its restart (history compacted) | the proxy closes its port and the launcher restarts kube-apiserver |
//! | `oom_kill`, `kill`, `kubelet_evict` | its kubelets | the node agent (`oom`, `kill`, `evict`) |
//! | `evict` | its Eviction API | the Eviction API |
//! | `delete_pod` | its delete | a DELETE with the grace |
//! | `crash_node`, `restart_node` | its machines | the node agent loses the node, brings it back |
//! | `delete_node`, `out_of_service` | its Node | a DELETE of the Node, the `node.kubernetes.io/out-of-service` taint |
//! | `set_unpullable` | its kubelets | the node agent |
//! | `audit` | its timeline | the audit log read into the same entries ([`crate::timeline`]) |
//! | `dispatcher_writes` | its timeline's changes by the dispatcher | the dispatcher's requests in the audit log ([`timeline::writes_of`]) |
//! | `never_pod_next`, `never_pod_named` | its switch: the Job's pods are never made, and nothing says why | a ValidatingAdmissionPolicy refusing the Job's pods ([`crate::policy`]): a refusal, with the Job controller's `FailedCreate` Events, that the dispatcher fails after its start grace |
//! | `preempt` | its call: the scheduler's condition, the delete, the Event | a real preemption by a pod of a higher priority that fits only without the victim ([`crate::preempt`]) |
//! | `compact` | its admin call | unsupported ([`UNSUPPORTED`] says why) |
//! | `pause_controller_manager` | unsupported ([`SIM_UNSUPPORTED`] says why) | the launcher stops kube-controller-manager (SIGSTOP) until the guard it returns resumes it (SIGCONT), by [`ControllerManagerPause::resume`] or its `Drop` |
//!
//! With real kubelets ([`NodeKind::Kubelet`]) there is no node agent: its
//! calls (`oom_kill`, `kill`, `kubelet_evict`, `crash_node`,
//! `restart_node`, `set_unpullable`) answer [`AdminError::Unsupported`]
//! with [`NO_NODE_AGENT`]; the dispatcher's pod reaches the API server
//! through the `kubernetes` Service, not the fault proxy, so the proxy's
//! fault rules and counters do not see it either.

use crate::console::Cluster;
use crate::timeline;
use anyhow::Context;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tcab_kube_sim::admin::{AdminError as SimError, RestartReport};
use tcab_kube_sim::audit::AuditEntry;
use tcab_kube_sim::{AdminClient, Counters, FaultRule, FaultStatus, WatchScope};

/// Which Kubernetes a stack runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ClusterKind {
    /// kube-sim: the embedded simulated cluster (fast, sim time).
    #[default]
    Sim,
    /// The upstream control plane built from Go modules, with the node
    /// agent playing two nodes (real time).
    Real,
}

impl ClusterKind {
    /// `sim` or `real`.
    pub fn name(self) -> &'static str {
        match self {
            ClusterKind::Sim => "sim",
            ClusterKind::Real => "real",
        }
    }

    /// Whether this is the real control plane.
    pub fn is_real(self) -> bool {
        self == ClusterKind::Real
    }
}

impl std::fmt::Display for ClusterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What plays the real control plane's nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum NodeKind {
    /// The node agent (`tcab-node-agent`): two simulated kubelets whose
    /// pods are local processes, with admin calls for node and pod faults.
    #[default]
    Agent,
    /// Real nodes: the upstream kubelet on containerd and runc in the rig's
    /// node network (`tcab_real_cluster::KubeletCluster`), running OCI
    /// images built here.
    Kubelet,
}

impl NodeKind {
    /// `agent` or `kubelet`.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Agent => "agent",
            NodeKind::Kubelet => "kubelet",
        }
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the node agent's calls are refused on real kubelets.
pub const NO_NODE_AGENT: &str = "the nodes are real kubelets (--node kubelet), with no node agent to kill, OOM, evict, lose or restore on request; stop a kubelet through tcab_real_cluster::KubeletCluster::stop_kubelet, or signal a container's processes found through its cgroup";

/// kube-sim's admin calls that have no equivalent on the real control
/// plane, and why.
pub const UNSUPPORTED: [(&str, &str); 1] = [(
    "compact",
    "etcd compacts on the API server's own interval (--etcd-compaction-interval), and a watch resumes from the watch cache's history whatever was compacted; a restart (`restart`) is what makes every resume answer 410",
)];

/// The admin calls of the real control plane that kube-sim cannot play,
/// and why.
pub const SIM_UNSUPPORTED: [(&str, &str); 1] = [(
    "pause_controller_manager",
    "kube-sim's Job controller cannot be paused and resumed: never_pod_next leaves a Job without a pod or an Event, as a paused controller-manager does, but for good (the Job takes the switch at its first sync), so nothing plays the resume; the lease-keeper's own kube-sim test of the wait (a_driver_job_without_a_pod_and_without_a_refusal_waits_past_the_grace) uses it",
)];

fn why_unsupported(cluster: ClusterKind, call: &'static str) -> &'static str {
    let table: &[(&str, &str)] = match cluster {
        ClusterKind::Sim => &SIM_UNSUPPORTED,
        ClusterKind::Real => &UNSUPPORTED,
    };
    table
        .iter()
        .find(|(c, _)| *c == call)
        .map_or("no equivalent", |(_, why)| why)
}

/// An admin call that failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The call has no equivalent on this cluster (a test turns this into
    /// a `SKIP:` line of its real variant).
    #[error("{call} is unsupported on the {cluster} cluster: {reason}")]
    Unsupported {
        call: &'static str,
        cluster: ClusterKind,
        reason: &'static str,
    },
    /// kube-sim's admin API (or the proxy's, which is the same) failed.
    #[error(transparent)]
    Admin(#[from] SimError),
    /// A call on the real control plane failed.
    #[error("{0:#}")]
    Real(anyhow::Error),
}

impl AdminError {
    /// What is unsupported and why, when that is the failure.
    pub fn unsupported(&self) -> Option<String> {
        matches!(self, AdminError::Unsupported { .. }).then(|| self.to_string())
    }
}

impl From<anyhow::Error> for AdminError {
    fn from(e: anyhow::Error) -> Self {
        AdminError::Real(e)
    }
}

/// The admin interface of a stack's cluster (cheap to clone).
#[derive(Clone)]
pub struct ClusterAdmin {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Sim(AdminClient),
    Real(Arc<RealAdmin>),
}

/// What the admin interface reaches on the real control plane.
#[derive(Clone)]
pub struct RealAdmin {
    /// The fault proxy's admin API (kube-sim's calls).
    pub proxy: AdminClient,
    /// The node agent's admin API (`None`: real kubelets play the nodes).
    pub agent: Option<tcab_node_agent::AdminClient>,
    /// The node agent's admin URL (for the calls its client lacks).
    pub agent_url: Option<String>,
    /// The API as the admin (through the proxy).
    pub api: Cluster,
    /// The API server's audit log.
    pub audit_log: PathBuf,
    /// The stack's namespaces (the timeline keeps only theirs).
    pub namespaces: Vec<String>,
    /// The user the dispatcher authenticates as.
    pub dispatcher_user: String,
    /// Pauses and resumes the control plane's kube-controller-manager.
    pub controller_manager: crate::real::ControllerManagerSwitch,
}

impl ClusterAdmin {
    /// kube-sim's admin API at `url`.
    pub fn sim(url: &str) -> Self {
        ClusterAdmin {
            inner: Inner::Sim(AdminClient::new(url)),
        }
    }

    /// The real control plane's.
    pub fn real(admin: RealAdmin) -> Self {
        ClusterAdmin {
            inner: Inner::Real(Arc::new(admin)),
        }
    }

    /// Which cluster.
    pub fn kind(&self) -> ClusterKind {
        match self.inner {
            Inner::Sim(_) => ClusterKind::Sim,
            Inner::Real(_) => ClusterKind::Real,
        }
    }

    /// The client of the API fault rules, counters and restarts: kube-sim's
    /// admin API, or the proxy's (the same calls).
    pub fn faults_client(&self) -> &AdminClient {
        match &self.inner {
            Inner::Sim(c) => c,
            Inner::Real(r) => &r.proxy,
        }
    }

    fn unsupported<T>(&self, call: &'static str) -> Result<T, AdminError> {
        Err(AdminError::Unsupported {
            call,
            cluster: self.kind(),
            reason: why_unsupported(self.kind(), call),
        })
    }

    /// The counters. On the real cluster: the proxy's, with the requests of
    /// the dispatcher's identity only (kube-sim counts every client, but the
    /// tests' own reads of Jobs come after what they check), and the live
    /// Jobs per lane from the audit timeline.
    pub async fn counters(&self) -> Result<Counters, AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.counters().await?),
            Inner::Real(r) => {
                let v = r.api.get("/admin/counters").await?;
                let proxy: tcab_api_proxy::ProxyCounters =
                    serde_json::from_value(v).context("the proxy's counters are unreadable")?;
                let timeline = r.timeline()?;
                Ok(Counters {
                    max_live_jobs: timeline::max_live_jobs(&timeline),
                    live_jobs: timeline::live_jobs(&timeline),
                    requests: proxy
                        .requests_by_identity
                        .get(crate::real::DISPATCHER_IDENTITY)
                        .cloned()
                        .unwrap_or_default(),
                    requests_by_agent: proxy.requests_by_agent,
                    faults: proxy.faults,
                    open_watches: proxy.open_watches,
                    silent_watches: proxy.silent_watches,
                    hung_requests: proxy.hung_requests,
                    restarts: proxy.restarts,
                })
            }
        }
    }

    /// Zeroes the request counters.
    pub async fn reset_counters(&self) -> Result<(), AdminError> {
        Ok(self.faults_client().reset_counters().await?)
    }

    /// Adds an API fault rule; returns its id.
    pub async fn add_fault(&self, rule: &FaultRule) -> Result<u64, AdminError> {
        Ok(self.faults_client().add_fault(rule).await?)
    }

    /// Every fault rule.
    pub async fn faults(&self) -> Result<Vec<FaultStatus>, AdminError> {
        Ok(self.faults_client().faults().await?)
    }

    /// How many requests a rule affected.
    pub async fn fault_affected(&self, id: u64) -> Result<u64, AdminError> {
        Ok(self.faults_client().fault_affected(id).await?)
    }

    /// Ends one rule.
    pub async fn remove_fault(&self, id: u64) -> Result<(), AdminError> {
        Ok(self.faults_client().remove_fault(id).await?)
    }

    /// Ends every rule (and, on kube-sim, every never-pod switch).
    pub async fn clear_faults(&self) -> Result<(), AdminError> {
        Ok(self.faults_client().clear_faults().await?)
    }

    /// Ends the open watches in scope; returns how many.
    pub async fn close_watches(&self, scope: &WatchScope) -> Result<u64, AdminError> {
        Ok(self.faults_client().close_watches(scope).await?)
    }

    /// Restarts the API server: connections cut, the port closed for
    /// `down_seconds` (on the real cluster, also until kube-apiserver is
    /// ready again), every resume then answered 410.
    pub async fn restart(&self, down_seconds: f64) -> Result<RestartReport, AdminError> {
        Ok(self.faults_client().restart(down_seconds).await?)
    }

    /// OOM-kills a pod's container.
    pub async fn oom_kill(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.oom_kill(ns, pod).await?),
            Inner::Real(r) => Ok(r.agent("oom_kill")?.oom_kill(ns, pod).await?),
        }
    }

    /// The runtime stops a pod's container without deleting the pod:
    /// SIGTERM, SIGKILL after `grace_seconds`.
    pub async fn kill(&self, ns: &str, pod: &str, grace_seconds: f64) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.kill(ns, pod, grace_seconds).await?),
            Inner::Real(r) => Ok(r.agent("kill")?.kill(ns, pod, grace_seconds).await?),
        }
    }

    /// Evicts a pod through the Eviction API.
    pub async fn evict(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.evict(ns, pod).await?),
            Inner::Real(r) => {
                let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod, "namespace": ns}});
                r.api
                    .post(
                        &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
                        body,
                    )
                    .await?;
                Ok(())
            }
        }
    }

    /// Deletes a pod (default grace: the pod's own).
    pub async fn delete_pod(
        &self,
        ns: &str,
        pod: &str,
        grace_seconds: Option<i64>,
    ) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.delete_pod(ns, pod, grace_seconds).await?),
            Inner::Real(r) => {
                let body = match grace_seconds {
                    Some(g) => json!({"gracePeriodSeconds": g}),
                    None => json!({}),
                };
                r.api
                    .delete(&format!("/api/v1/namespaces/{ns}/pods/{pod}"), body)
                    .await?;
                Ok(())
            }
        }
    }

    /// The pod's kubelet evicts it for node pressure on `resource`.
    pub async fn kubelet_evict(
        &self,
        ns: &str,
        pod: &str,
        resource: &str,
    ) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.kubelet_evict(ns, pod, resource).await?),
            // The agent's own message names memory, the container and its use.
            Inner::Real(r) if resource == "memory" => {
                Ok(r.agent("kubelet_evict")?.evict(ns, pod).await?)
            }
            Inner::Real(r) => {
                r.agent("kubelet_evict")?;
                let message = format!("The node was low on resource: {resource}. ");
                r.agent_post(
                    &format!("/pods/{ns}/{pod}/evict"),
                    json!({"message": message}),
                )
                .await?;
                Ok(())
            }
        }
    }

    /// Crashes a node's machine (on the real cluster the node agent loses
    /// the node: its heartbeats, status, watch, log server and programs
    /// stop); returns how many of its pods were running.
    pub async fn crash_node(&self, node: &str) -> Result<u64, AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.crash_node(node).await?),
            Inner::Real(r) => {
                let pods = r
                    .api
                    .get(&format!(
                        "/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
                    ))
                    .await?;
                let running = pods["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["status"]["phase"] == "Running")
                    .count() as u64;
                r.agent("crash_node")?.lose_node(node).await?;
                Ok(running)
            }
        }
    }

    /// Boots a crashed node again (the node agent brings it back as a
    /// restarted kubelet).
    pub async fn restart_node(&self, node: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.restart_node(node).await?),
            Inner::Real(r) => Ok(r.agent("restart_node")?.restore_node(node).await?),
        }
    }

    /// Deletes a Node object.
    pub async fn delete_node(&self, node: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.delete_node(node).await?),
            Inner::Real(r) => {
                r.api
                    .delete(&format!("/api/v1/nodes/{node}"), json!({}))
                    .await?;
                Ok(())
            }
        }
    }

    /// Taints a node `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`.
    pub async fn out_of_service(&self, node: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.out_of_service(node).await?),
            Inner::Real(r) => {
                r.add_taint(
                    node,
                    json!({"key": "node.kubernetes.io/out-of-service",
                        "value": "nodeshutdown", "effect": "NoExecute"}),
                )
                .await?;
                Ok(())
            }
        }
    }

    /// Makes pulls of `image` fail, or succeed again.
    pub async fn set_unpullable(&self, image: &str, unpullable: bool) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.set_unpullable(image, unpullable).await?),
            Inner::Real(r) => Ok(r
                .agent("set_unpullable")?
                .set_unpullable(image, unpullable)
                .await?),
        }
    }

    /// The cluster's whole timeline of Pod and Job changes (of the stack's
    /// namespaces, on the real cluster).
    pub async fn audit(&self) -> Result<Vec<AuditEntry>, AdminError> {
        match &self.inner {
            Inner::Sim(c) => {
                let mut entries: Vec<AuditEntry> = Vec::new();
                loop {
                    let after = entries.last().map_or(0, |e| e.seq);
                    let page = c.audit(after).await?;
                    if page.dropped > 0 {
                        return Err(AdminError::Real(anyhow::anyhow!(
                            "kube-sim's audit timeline overflowed ({} entries dropped)",
                            page.dropped
                        )));
                    }
                    if page.entries.is_empty() {
                        return Ok(entries);
                    }
                    entries.extend(page.entries);
                }
            }
            Inner::Real(r) => Ok(r.timeline()?),
        }
    }

    /// The creates and deletes of Jobs and Pods the dispatcher made (of the
    /// stack's namespaces), in the order the API server received them, each
    /// with when it was received and when answered. On the real cluster from
    /// the audit log's requests ([`timeline::writes_of`]); on kube-sim from
    /// its timeline, where a write's one time is its commit, which falls
    /// between the request's receipt and its answer (a delete is the
    /// dispatcher's first change of the object that marks it deleted or
    /// removes it).
    pub async fn dispatcher_writes(&self) -> Result<Vec<timeline::Write>, AdminError> {
        match &self.inner {
            Inner::Sim(_) => {
                let entries = self.audit().await?;
                let mut deleted = std::collections::BTreeSet::new();
                let mut writes = Vec::new();
                for e in entries {
                    // Jobs and pods, as the audit log's reading keeps (not
                    // the Events the dispatcher leaves on them).
                    if e.actor != tcab_kube_sim::audit::Actor::Rbac
                        || !matches!(e.kind.as_str(), "Job" | "Pod")
                    {
                        continue;
                    }
                    let verb = if e.event == "ADDED" {
                        "create"
                    } else if (e.deleting || e.event == "DELETED") && deleted.insert(e.uid.clone())
                    {
                        "delete"
                    } else {
                        continue;
                    };
                    writes.push(timeline::Write {
                        verb: verb.to_owned(),
                        kind: e.kind,
                        namespace: e.namespace,
                        name: e.name,
                        received: e.at,
                        completed: e.at,
                    });
                }
                Ok(writes)
            }
            Inner::Real(r) => {
                let namespaces: Vec<&str> = r.namespaces.iter().map(String::as_str).collect();
                let text = timeline::read_audit_log(&r.audit_log, &namespaces)
                    .context("reading the audit log")?;
                Ok(timeline::writes_of(&text, &namespaces, &r.dispatcher_user))
            }
        }
    }

    /// Drops the watch history (kube-sim only).
    pub async fn compact(&self) -> Result<String, AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.compact().await?),
            Inner::Real(_) => self.unsupported("compact"),
        }
    }

    /// The next `n` Jobs created never get a pod. On kube-sim they simply
    /// get none; on the real control plane a ValidatingAdmissionPolicy
    /// refuses their pods ([`crate::policy::never_pod_next`]), which the
    /// dispatcher fails after its start grace.
    pub async fn never_pod_next(&self, n: u32) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.never_pod_next(n).await?),
            Inner::Real(r) => {
                crate::policy::never_pod_next(&r.api, &r.namespaces[0], n).await?;
                Ok(())
            }
        }
    }

    /// The Job with this name never gets a pod (on the real control plane:
    /// a refusal of its pods, as for [`ClusterAdmin::never_pod_next`]).
    pub async fn never_pod_named(&self, job: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.never_pod_named(job).await?),
            Inner::Real(r) => {
                crate::policy::never_pod_named(&r.api, &r.namespaces[0], job).await?;
                Ok(())
            }
        }
    }

    /// Preempts a pod: on kube-sim its call; on the real control plane the
    /// scheduler preempts it for a pod of a higher priority, which is then
    /// removed ([`crate::preempt`]); returns once that pod took the
    /// victim's place.
    pub async fn preempt(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        match &self.inner {
            Inner::Sim(c) => Ok(c.preempt(ns, pod).await?),
            Inner::Real(r) => Ok(crate::preempt::preempt(&r.api, ns, pod).await?),
        }
    }

    /// Pauses kube-controller-manager (real cluster only): until it resumes,
    /// its Job controller makes no pod and records no Event, as when it is
    /// down, and its other controllers stand still too (no node tainted, no
    /// garbage collected). Returns once every thread of it is stopped, with
    /// the guard that resumes it: [`ControllerManagerPause::resume`], or,
    /// should the test fail first, its `Drop`. The shared control plane
    /// serves every test of the binary, so only a test that runs alone on it
    /// (the real variants' test groups) may pause it; a stack started later
    /// resumes one a killed test left paused.
    pub async fn pause_controller_manager(&self) -> Result<ControllerManagerPause, AdminError> {
        match &self.inner {
            Inner::Sim(_) => self.unsupported("pause_controller_manager"),
            Inner::Real(r) => {
                let switch = r.controller_manager.clone();
                switch
                    .pause()
                    .await
                    .context("pausing kube-controller-manager")?;
                Ok(ControllerManagerPause {
                    switch: Some(switch),
                })
            }
        }
    }
}

/// A paused kube-controller-manager ([`ClusterAdmin::pause_controller_manager`]):
/// [`ControllerManagerPause::resume`] resumes it; dropped without that (a
/// failing test), it is resumed on a thread of its own, waited for up to
/// 30 s, so the other tests of the binary find it running.
#[must_use = "dropping the guard resumes the controller-manager at once"]
pub struct ControllerManagerPause {
    switch: Option<crate::real::ControllerManagerSwitch>,
}

impl ControllerManagerPause {
    /// Resumes the controller-manager and waits until it is healthy;
    /// returns how long that took.
    pub async fn resume(mut self) -> Result<std::time::Duration, AdminError> {
        let switch = self.switch.take().expect("resumed once");
        Ok(switch
            .resume()
            .await
            .context("resuming kube-controller-manager")?)
    }
}

impl Drop for ControllerManagerPause {
    fn drop(&mut self) {
        let Some(switch) = self.switch.take() else {
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let resumed = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(switch.resume()));
            let _ = tx.send(resumed);
        });
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("could not resume kube-controller-manager: {e:#}"),
            Err(_) => eprintln!("kube-controller-manager not resumed within 30 s"),
        }
    }
}

impl RealAdmin {
    /// The stack's timeline from the audit log.
    pub fn timeline(&self) -> anyhow::Result<Vec<AuditEntry>> {
        let namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        let text = timeline::read_audit_log(&self.audit_log, &namespaces)?;
        Ok(timeline::from_audit_log(
            &text,
            &namespaces,
            &self.dispatcher_user,
        ))
    }

    /// The node agent's client, or `call` refused when real kubelets play
    /// the nodes ([`NO_NODE_AGENT`]).
    fn agent(&self, call: &'static str) -> Result<&tcab_node_agent::AdminClient, AdminError> {
        self.agent.as_ref().ok_or(AdminError::Unsupported {
            call,
            cluster: ClusterKind::Real,
            reason: NO_NODE_AGENT,
        })
    }

    async fn agent_post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let url = self.agent_url.as_deref().context("no node agent")?;
        let r = reqwest::Client::new()
            .post(format!("{url}{path}"))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path} to the node agent"))?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        anyhow::ensure!(
            status.is_success(),
            "POST {path} to the node agent: {status} {}",
            v["error"]
        );
        Ok(v)
    }

    /// Adds a taint to a Node (kept: the others it has).
    pub async fn add_taint(&self, node: &str, taint: Value) -> anyhow::Result<()> {
        let path = format!("/api/v1/nodes/{node}");
        let current = self.api.get(&path).await?;
        let mut taints = current["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        taints.retain(|t| t["key"] != taint["key"]);
        taints.push(taint);
        self.api
            .patch(
                &path,
                "application/merge-patch+json",
                json!({"spec": {"taints": taints}}),
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kube_sim_cannot_pause_the_controller_manager_and_says_why() {
        // No call reaches the address: the answer is kube-sim's table.
        let admin = ClusterAdmin::sim("http://127.0.0.1:9");
        let Err(e) = admin.pause_controller_manager().await else {
            panic!("paused on kube-sim");
        };
        let why = e.unsupported().expect("unsupported");
        assert!(
            why.contains("pause_controller_manager is unsupported on the sim cluster")
                && why.contains("never_pod_next"),
            "{why}"
        );
    }
}
