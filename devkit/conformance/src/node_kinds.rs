//! Node conformance: the node agent (`devkit/node-agent`, our kubelet, its
//! pods' programs in-process) against the upstream kubelet on containerd
//! and runc (`tcab_real_cluster::KubeletCluster`), each on a control plane
//! of its own (v1.36.3), one scenario (a death cause) at a time.
//!
//! [`node_differential`] starts both clusters at once (nodes [`NODES`], the
//! same namespace), runs the scenario on both at once, records what each
//! cluster wrote ([`record_pod`], [`record_logs`], [`record_job`]) and
//! compares line by line as the kube-sim probes do ([`crate::run`]); the
//! table of accepted differences is `devkit/node-agent/README.md`'s
//! **Known divergences from the real kubelet** (a listed line that no
//! longer differs fails, as does an unlisted difference). Without real
//! nodes (root, containerd, runc, the kubelet) the scenario prints one
//! `SKIP:` line and passes.

use crate::cluster::{Cluster, ensure_binaries};
use crate::divergences;
use crate::normalise::{compact, job_status, scrub};
use crate::outcome::Outcome;
use crate::run::{Names, Ran, judge, namespace_for};
use anyhow::{Context, Result, anyhow};
use futures::FutureExt;
use serde_json::{Value, json};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use tcab_real_cluster::{
    ControlPlane, KubeletCluster, KubeletSettings, NodeAgent, Settings, error_chain,
};
use tokio::sync::Mutex;

/// The nodes of both clusters: a pod runs on [`NODE`]; the second keeps
/// the zone healthy when the first is lost (a lone unreachable node is
/// never evicted: its zone is in full disruption).
pub const NODES: [&str; 2] = [NODE, "node-2"];
/// Where scenarios pin their pods.
pub const NODE: &str = "node-1";

/// Which kind of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The node agent.
    Agent,
    /// The upstream kubelet with containerd and runc.
    Kubelet,
}

enum Nodes {
    Agent {
        cp: Option<Box<ControlPlane>>,
        admin: tcab_node_agent::AdminClient,
    },
    Kubelet(Box<Mutex<Option<KubeletCluster>>>),
}

/// One side of a scenario: its cluster (raw API calls and waits, as the
/// probes have) and its nodes' faults.
pub struct NodeSide {
    pub kind: Kind,
    pub c: Cluster,
    nodes: Nodes,
}

impl std::ops::Deref for NodeSide {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.c
    }
}

const NAMES: Names = Names {
    model: "node agent",
    upstream: "kubelet",
    readme: "devkit/node-agent/README.md",
};

impl NodeSide {
    /// A control plane with the node agent playing [`NODES`] (the real
    /// nodes' lease and status periods).
    async fn agent(ns: &str) -> Result<NodeSide> {
        let program = ensure_binaries().await?;
        let mut args: Vec<String> = [
            "--api-url",
            "{api_url}",
            "--ca-file",
            "{ca_file}",
            "--tokens",
            "{tokens}",
            "--lease-seconds",
            "4",
            "--status-update-seconds",
            "2",
        ]
        .map(String::from)
        .to_vec();
        for n in NODES {
            args.extend(["--node".to_string(), n.to_string()]);
        }
        let cp = ControlPlane::start(Settings {
            nodes: NODES.map(String::from).to_vec(),
            node_agent: Some(NodeAgent {
                program,
                args,
                ready_prefix: Some("node agent ready:".into()),
            }),
            ..Settings::default()
        })
        .await
        .map_err(|e| {
            anyhow!(
                "starting the node agent's control plane: {}",
                error_chain(&e)
            )
        })?;
        let access = cp.access().clone();
        let url = access
            .node_agent_url()
            .context("the launcher ran no node agent")?
            .to_string();
        let admin = tcab_node_agent::AdminClient::new(&url);
        let side = NodeSide {
            kind: Kind::Agent,
            c: Cluster::over(access, ns, Some(tcab_node_agent::AdminClient::new(&url))).await?,
            nodes: Nodes::Agent {
                cp: Some(Box::new(cp)),
                admin,
            },
        };
        Ok(side)
    }

    /// A control plane with real nodes [`NODES`] running the rig's images.
    async fn kubelet(ns: &str) -> Result<NodeSide> {
        ensure_binaries().await?;
        let images = tokio::task::spawn_blocking(|| -> Result<_> {
            let workload = tcab_oci_image::rig::target_binary("tcab-workload")?;
            let dir = workload
                .parent()
                .context("tcab-workload has no directory")?
                .join("rig-images");
            tcab_oci_image::rig::workload_archives(&workload, &dir)
        })
        .await
        .context("making the images")??;
        let cluster = KubeletCluster::start(
            Settings::default(),
            KubeletSettings::new(NODES.map(String::from).to_vec(), images),
        )
        .await
        .map_err(|e| anyhow!("starting the real nodes: {}", error_chain(&e)))?;
        let access = cluster.access().clone();
        let nodes = Nodes::Kubelet(Box::new(Mutex::new(Some(cluster))));
        let c = match Cluster::over(access, ns, None).await {
            Ok(c) => c,
            Err(e) => {
                stop(nodes).await;
                return Err(e);
            }
        };
        Ok(NodeSide {
            kind: Kind::Kubelet,
            c,
            nodes,
        })
    }

    /// The node's kubelet stops, its containers run on (the node agent:
    /// `stop-kubelet`, its programs run on and nothing reaches the API).
    pub async fn stop_kubelet(&self, node: &str) -> Result<()> {
        match &self.nodes {
            Nodes::Agent { admin, .. } => {
                admin.stop_kubelet(node).await.map_err(|e| anyhow!("{e:#}"))
            }
            Nodes::Kubelet(k) => with(k, async |k| k.stop_kubelet(node).await).await,
        }
    }

    /// The node's kubelet starts again after [`Self::stop_kubelet`] (the
    /// node agent: `restore`).
    pub async fn start_kubelet(&self, node: &str) -> Result<()> {
        match &self.nodes {
            Nodes::Agent { admin, .. } => {
                admin.restore_node(node).await.map_err(|e| anyhow!("{e:#}"))
            }
            Nodes::Kubelet(k) => with(k, async |k| k.start_kubelet_again(node)).await,
        }
    }

    /// The node reboots: its kubelet and runtime stop, its containers die,
    /// both start again (the node agent: lost, then restored).
    pub async fn reboot(&self, node: &str) -> Result<()> {
        match &self.nodes {
            Nodes::Agent { admin, .. } => {
                admin.lose_node(node).await.map_err(|e| anyhow!("{e:#}"))?;
                admin.restore_node(node).await.map_err(|e| anyhow!("{e:#}"))
            }
            Nodes::Kubelet(k) => with(k, async |k| k.reboot(node).await).await,
        }
    }

    /// Pulls of `image` fail on the node agent (no registry answers on the
    /// real nodes: nothing to do there).
    pub async fn unpullable(&self, image: &str) -> Result<()> {
        match &self.nodes {
            Nodes::Agent { admin, .. } => admin
                .set_unpullable(image, true)
                .await
                .map_err(|e| anyhow!("{e:#}")),
            Nodes::Kubelet(_) => Ok(()),
        }
    }

    /// A node's kubelet log, for a failure's message (real nodes only).
    pub async fn kubelet_log_tail(&self, node: &str, lines: usize) -> String {
        match &self.nodes {
            Nodes::Agent { .. } => String::new(),
            Nodes::Kubelet(k) => {
                let k = k.lock().await;
                let Some(dir) = k.as_ref().and_then(|k| k.node_dir(node)) else {
                    return String::new();
                };
                let text = std::fs::read_to_string(dir.join("kubelet.log")).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
        }
    }

    /// Creates a pod from `spec` (see [`plain_pod`]); its name.
    pub async fn create_pod(&self, pod: &Value) -> Result<String> {
        let made = self.c.create(&self.c.pods(), pod).await?;
        Ok(made["metadata"]["name"].as_str().unwrap_or("").to_string())
    }

    /// The pod, `None` once gone.
    pub async fn pod(&self, name: &str) -> Result<Option<Value>> {
        self.c.object(&format!("{}/{name}", self.c.pods())).await
    }

    /// Waits up to `limit` until the pod satisfies `done`; the pod.
    pub async fn pod_until(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        self.c
            .until(what, limit, async || {
                Ok(self.pod(name).await?.filter(|p| done(p)))
            })
            .await
    }

    async fn shutdown(self) {
        stop(self.nodes).await;
    }
}

async fn with<T>(
    k: &Mutex<Option<KubeletCluster>>,
    f: impl AsyncFnOnce(&mut KubeletCluster) -> Result<T, tcab_real_cluster::node::NodeError>,
) -> Result<T> {
    let mut guard = k.lock().await;
    let cluster = guard.as_mut().context("the real nodes are stopped")?;
    f(cluster).await.map_err(|e| anyhow!("{}", error_chain(&e)))
}

async fn stop(nodes: Nodes) {
    match nodes {
        Nodes::Agent { mut cp, .. } => {
            if let Some(cp) = cp.take() {
                cp.stop().await;
            }
        }
        Nodes::Kubelet(k) => {
            if let Some(k) = (*k).into_inner() {
                k.stop().await;
            }
        }
    }
}

/// Runs `scenario` on a control plane with the node agent and on one with
/// real nodes, at once; prints both outcomes and panics on a difference
/// `devkit/node-agent/README.md` does not list (or a listed one that is
/// gone). `name` is the scenario's name in that table. Without real nodes:
/// one `SKIP:` line, and nothing runs.
pub async fn node_differential(
    name: &str,
    scenario: impl AsyncFn(&NodeSide, &mut Outcome) -> Result<()>,
) {
    if tcab_real_cluster::node::ready_or_skip().is_none() {
        return;
    }
    let ns = namespace_for(name);
    let scenario = &scenario;
    let side = async |kind: Kind| -> Ran {
        let t = Instant::now();
        let mut outcome = Outcome::new();
        let started = match kind {
            Kind::Agent => NodeSide::agent(&ns).await,
            Kind::Kubelet => NodeSide::kubelet(&ns).await,
        };
        let error = match started {
            Err(e) => Some(e),
            Ok(side) => {
                let ran = AssertUnwindSafe(scenario(&side, &mut outcome))
                    .catch_unwind()
                    .await;
                let error = match ran {
                    Ok(r) => r.err(),
                    Err(panic) => Some(anyhow!(
                        "the scenario panicked: {}",
                        panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    )),
                };
                let error = match error {
                    Some(e) if kind == Kind::Kubelet => {
                        Some(e.context(side.kubelet_log_tail(NODE, 30).await))
                    }
                    e => e,
                };
                side.shutdown().await;
                error
            }
        };
        Ran {
            outcome,
            error,
            took: t.elapsed(),
        }
    };
    let (agent, kubelet) = tokio::join!(side(Kind::Agent), side(Kind::Kubelet));
    let rows = divergences::load_from(&divergences::node_readme_path(), divergences::NODE_HEADING)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let listed = divergences::of_probe(&rows, name);
    let (report, failures) = judge(name, &ns, &agent, Some(&kubelet), &listed, &NAMES);
    println!("{report}");
    if !failures.is_empty() {
        panic!("scenario {name}:\n{}", failures.join("\n"));
    }
}

/// A bare pod on [`NODE`] running the plain program of the workload image
/// `tcab/plain:dev`, `restartPolicy: Never`, its parameters given both as
/// the annotations the node agent reads and as the env the image's
/// entrypoint reads (`params`: `[(annotation suffix, value)]`, e.g.
/// `("run-seconds", "5")`).
pub fn plain_pod(name: &str, params: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = params
        .iter()
        .map(|(k, v)| (format!("kube-sim.tcab.dev/{k}"), json!(v)))
        .collect();
    let env: Vec<Value> = params
        .iter()
        .map(|(k, v)| {
            json!({"name": format!("TCAB_{}", k.to_ascii_uppercase().replace('-', "_")),
                   "value": v})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [{"name": "main", "image": "tcab/plain:dev", "env": env}]
        }
    })
}

/// A container state as compared: `waiting` (reason, message), `running`,
/// `terminated` (reason, exit code, signal, message).
fn state(s: &Value) -> Value {
    if let Some(t) = s.get("terminated") {
        compact(&json!({"terminated": {
            "reason": t["reason"], "exitCode": t["exitCode"], "signal": t["signal"],
            "message": t["message"].as_str().map(scrub),
        }}))
    } else if let Some(w) = s.get("waiting") {
        compact(&json!({"waiting": {
            "reason": w["reason"], "message": w["message"].as_str().map(scrub),
        }}))
    } else if s.get("running").is_some() {
        json!("running")
    } else {
        json!("-")
    }
}

/// A pod's lines under `prefix`: phase, reason, message, whether it is
/// being deleted, its conditions (`Type=Status/Reason`, sorted),
/// `DisruptionTarget` in full, and its first container's state, last
/// state, readiness and restart count.
pub fn record_pod(o: &mut Outcome, prefix: &str, pod: &Value) {
    let st = &pod["status"];
    o.put(format!("{prefix}.phase"), st["phase"].clone());
    o.put(format!("{prefix}.reason"), st["reason"].clone());
    o.put(
        format!("{prefix}.message"),
        st["message"].as_str().map(scrub).unwrap_or_default(),
    );
    o.put(
        format!("{prefix}.deleting"),
        pod["metadata"]["deletionTimestamp"].is_string(),
    );
    let mut conds: Vec<String> = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "DisruptionTarget")
        .map(|c| {
            format!(
                "{}={}/{}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    conds.sort();
    o.put(format!("{prefix}.conditions"), json!(conds));
    let disruption = crate::normalise::condition(st, "DisruptionTarget").map(|c| {
        format!(
            "{}/{}: {}",
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
            scrub(c["message"].as_str().unwrap_or(""))
        )
    });
    o.put(format!("{prefix}.DisruptionTarget"), json!(disruption));
    let c = &st["containerStatuses"][0];
    o.put(format!("{prefix}.state"), state(&c["state"]));
    o.put(format!("{prefix}.lastState"), state(&c["lastState"]));
    o.put(format!("{prefix}.ready"), c["ready"].clone());
    o.put(format!("{prefix}.restartCount"), c["restartCount"].clone());
}

static CONTAINER_ID: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"containerd://[0-9a-f]{64}").unwrap());

/// The pod's log through the API server, whole and `previous`: the code
/// and the text (or the Status's message), under `prefix`.
pub async fn record_logs(side: &NodeSide, o: &mut Outcome, prefix: &str, pod: &str) -> Result<()> {
    for (key, query) in [("log", ""), ("log.previous", "&previous=true")] {
        let a = side
            .c
            .get(&format!(
                "{}/{pod}/log?container=main{query}",
                side.c.pods()
            ))
            .await?;
        let text = match &a.body {
            Value::String(s) => s.clone(),
            b if b["kind"] == "Status" => b["message"].as_str().map(scrub).unwrap_or_default(),
            b => b.to_string(),
        };
        // A Job's pod's generated name is masked, uids, and container IDs
        // (a removed container is named in the error the kubelet streams).
        let text = scrub(&text.replace(pod, "<pod>"));
        let text = CONTAINER_ID.replace_all(&text, "containerd://<id>");
        o.put(format!("{prefix}.{key}"), format!("{} {text}", a.code));
    }
    Ok(())
}

/// A Job's status line and its conditions with reasons and messages.
pub fn record_job(o: &mut Outcome, prefix: &str, job: &Value) {
    o.put(format!("{prefix}.status"), job_status(&job["status"]));
    let conds: Vec<String> = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}/{}: {}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
                scrub(c["message"].as_str().unwrap_or(""))
            )
        })
        .collect();
    o.put(format!("{prefix}.conditions"), json!(conds));
}

/// Creates the pod and follows it from its creation (a watch, so no state
/// its kubelet wrote is missed) until its container has been waiting with
/// each of `enough` or `limit` passes: the waiting reasons in order
/// (repeats once) and the pod as last seen.
pub async fn waiting_reasons(
    side: &NodeSide,
    pod: &Value,
    enough: &[&str],
    limit: Duration,
) -> Result<(Vec<String>, Value)> {
    let made = side.c.create(&side.c.pods(), pod).await?;
    let name = made["metadata"]["name"].as_str().unwrap_or("");
    let rv = made["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let mut watch = side
        .c
        .watch(&format!(
            "{}?fieldSelector=metadata.name%3D{name}&resourceVersion={rv}",
            side.c.pods()
        ))
        .await?;
    let deadline = Instant::now() + limit;
    let mut seen: Vec<String> = Vec::new();
    let mut last = made.clone();
    while !enough.iter().all(|r| seen.iter().any(|s| s == r)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(ev) = watch.next(left).await? else {
            break;
        };
        last = ev["object"].clone();
        let reason = last["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if !reason.is_empty() && seen.last() != Some(&reason) {
            seen.push(reason);
        }
    }
    Ok((seen, last))
}
