//! Helpers of the node agent's tests on the real control plane.

pub mod control_plane;

use control_plane::{ControlPlane, Timings};
use serde_json::{Value, json};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};
use tcab_node_agent::{Agent, AgentOptions, NodeSpec, Timing, api};

/// The namespace of every test's objects.
pub const NS: &str = "t";

/// Short agent timings: leases of 4 s (renewed every second, well inside
/// the control plane's 8 s grace), status every 2 s, image back-off 1 s.
pub fn fast_timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(4),
        status_update: Duration::from_secs(2),
        image_back_off: Duration::from_secs(1),
        image_back_off_max: Duration::from_secs(4),
        retry: Duration::from_secs(1),
        ..Timing::default()
    }
}

/// A control plane with tokens for `nodes`, the test namespace, and an
/// agent playing the nodes.
pub struct Rig {
    pub agent: Agent,
    pub cp: ControlPlane,
    pub client: kube::Client,
}

impl Rig {
    pub async fn start(bin: &Path, nodes: &[&str]) -> Rig {
        Self::start_with(bin, nodes, Timings::default(), |_| {}).await
    }

    pub async fn start_with(
        bin: &Path,
        nodes: &[&str],
        timings: Timings,
        tweak: impl FnOnce(&mut AgentOptions),
    ) -> Rig {
        let cp = ControlPlane::start(bin, nodes, timings)
            .await
            .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
        eprintln!("control plane up in {:?}", cp.started_in);
        cp.namespace(NS).await.expect("test namespace");
        let specs = nodes
            .iter()
            .map(|n| NodeSpec::new(*n, cp.node_token(n)))
            .collect();
        let mut opts = AgentOptions::new(cp.cluster(), specs);
        opts.timing = fast_timing();
        tweak(&mut opts);
        let agent = tcab_node_agent::start(opts)
            .await
            .unwrap_or_else(|e| panic!("the agent did not start: {e:#}"));
        let client = cp.admin();
        let rig = Rig { agent, cp, client };
        let t = Instant::now();
        for n in nodes {
            rig.wait_node_ready(n).await;
        }
        eprintln!("nodes ready in {:?}", t.elapsed());
        rig
    }

    /// Waits until the node is Ready and carries no not-ready taint.
    pub async fn wait_node_ready(&self, node: &str) -> Value {
        let path = format!("/api/v1/nodes/{node}");
        self.until(
            &format!("node {node} Ready"),
            Duration::from_secs(30),
            || async {
                let n = self.get(&path).await?;
                let ready = cond(&n["status"], "Ready")?["status"] == "True";
                let tainted = n["spec"]["taints"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"));
                (ready && !tainted).then_some(n)
            },
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Option<Value> {
        api::get(&self.client, path).await.ok().flatten()
    }

    /// A text answer (pod logs), as the admin.
    pub async fn get_text(&self, path: &str) -> String {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        self.client
            .request_text(req)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    pub async fn post(&self, path: &str, body: &Value) -> Value {
        api::post(&self.client, path, body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    pub async fn pod(&self, name: &str) -> Option<Value> {
        self.get(&api::pod_path(NS, name)).await
    }

    pub async fn job(&self, name: &str) -> Option<Value> {
        self.get(&format!("/apis/batch/v1/namespaces/{NS}/jobs/{name}"))
            .await
    }

    pub async fn create_job(&self, job: &Value) -> Value {
        self.post(&format!("/apis/batch/v1/namespaces/{NS}/jobs"), job)
            .await
    }

    pub async fn create_pod(&self, pod: &Value) -> Value {
        self.post(&format!("/api/v1/namespaces/{NS}/pods"), pod)
            .await
    }

    /// The pods of a Job (by the controller's label).
    pub async fn job_pods(&self, job: &str) -> Vec<Value> {
        self.get(&format!(
            "/api/v1/namespaces/{NS}/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}"
        ))
        .await
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
    }

    /// Waits for the Job's (first) pod to exist and satisfy `f`.
    pub async fn job_pod_where(&self, job: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        self.until(what, Duration::from_secs(60), || async {
            self.job_pods(job).await.into_iter().find(|p| f(p))
        })
        .await
    }

    /// Polls `f` every 200 ms until it gives a value; panics after `within`
    /// with what it waited for and the control plane's log tails.
    pub async fn until<T, F, Fut>(&self, what: &str, within: Duration, f: F) -> T
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {within:?} waiting for {what}\n{}",
                    self.cp.log_tails()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A condition of a status by type.
pub fn cond<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether the condition is there with status True.
pub fn is_true(status: &Value, kind: &str) -> bool {
    cond(status, kind).is_some_and(|c| c["status"] == "True")
}

/// The first container's state.
pub fn state(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]["state"]
}

/// A Job of one plain pod pinned to `node`.
pub fn plain_job(
    name: &str,
    node: &str,
    run_seconds: Option<f64>,
    extra: impl FnOnce(&mut Value),
) -> Value {
    let mut annotations = json!({});
    if let Some(s) = run_seconds {
        annotations["kube-sim.tcab.dev/run-seconds"] = json!(s.to_string());
    }
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "main", "image": "busybox:1.36"}]}}}
    });
    extra(&mut job);
    job
}

/// A bare pod pinned to `node` that runs until deleted.
pub fn plain_pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "busybox:1.36"}]}
    })
}
