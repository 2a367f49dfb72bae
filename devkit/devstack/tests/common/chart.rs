//! The steps the chart's tests share: values for the stack, an install
//! that waits for the dispatcher's pod, the pod's containers and
//! conditions, runs to enqueue, and what the API server's audit log says
//! the chart's ServiceAccount did.

use super::{TestStack, run};
use serde_json::Value;
use std::time::Duration;
use tcab_devstack::chart;
use tcab_devstack::console::Backend;
use tcab_devstack::timeline;
use tcab_devstack::wait_for;
use tcab_kube_sim::audit::AuditEntry;

/// The release name the tests install the chart as.
pub const RELEASE: &str = "chart";

/// The chart's full name for `release` (release name, then the chart's):
/// its objects' names and its ServiceAccount's.
pub fn fullname(release: &str) -> String {
    format!("{release}-tcab-dispatcher")
}

/// The user of the ServiceAccount the chart makes for `release` in `ns`.
pub fn service_account_user(ns: &str, release: &str) -> String {
    format!("system:serviceaccount:{ns}:{}", fullname(release))
}

/// The stack's chart values (its backend, namespace, caps and free ports:
/// the pod's processes share the machine's network) with `extra` merged in.
pub fn values(t: &TestStack, extra: Value) -> Value {
    let mut v = t.stack.chart_values();
    merge(&mut v, extra);
    v
}

/// Merges `from` into `into`, objects key by key, anything else replaced.
pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The admin's client of the stack's real control plane.
pub async fn admin_client(t: &TestStack) -> kube::Client {
    let real = t.stack.real.as_ref().expect("a real cluster");
    real.access.admin_client().await.expect("admin client")
}

/// Installs the chart as [`RELEASE`] into the stack's namespace and waits
/// for its pod to be Ready; returns the release and the pod.
pub async fn install_ready(
    t: &TestStack,
    client: &kube::Client,
    values: &Value,
) -> (chart::Release, Value) {
    let release = chart::install(client, RELEASE, &t.ns(), values)
        .await
        .unwrap_or_else(|e| t.fail(format!("installing the chart: {e:#}")));
    let pod = ready_pod(t, RELEASE).await;
    (release, pod)
}

/// Waits until the dispatcher's pod of `release` is Ready (the Deployment
/// and ReplicaSet controllers make it, our kubelet runs it, the readiness
/// probes make it Ready); returns it.
pub async fn ready_pod(t: &TestStack, release: &str) -> Value {
    wait_for(
        &format!("release {release}'s pod Ready"),
        Duration::from_secs(120),
        || async {
            let pods = dispatcher_pods_of(t, release).await;
            Ok(pods.into_iter().find(|p| condition(p, "Ready")))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e))
}

/// The dispatcher's pods of [`RELEASE`].
pub async fn dispatcher_pods(t: &TestStack) -> Vec<Value> {
    dispatcher_pods_of(t, RELEASE).await
}

/// The dispatcher's pods of `release`.
pub async fn dispatcher_pods_of(t: &TestStack, release: &str) -> Vec<Value> {
    t.stack
        .cluster
        .pods(
            &t.ns(),
            Some(&format!("app.kubernetes.io/instance={release}")),
        )
        .await
        .unwrap_or_default()
}

/// The status of the pod's container `name` (null when it has none).
pub fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or(&Value::Null)
}

/// Whether the pod's condition `kind` is True.
pub fn condition(pod: &Value, kind: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// The name of an object.
pub fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Enqueues `n` runs at `backend`, cases `<prefix>-<i>`, each following
/// `sim`; returns their ids.
pub async fn enqueue_runs(backend: &Backend, prefix: &str, n: usize, sim: Value) -> Vec<String> {
    let runs = (0..n)
        .map(|i| run(&format!("{prefix}-{i}"), sim.clone()))
        .collect();
    backend.enqueue_batch(runs).await.expect("enqueue runs")
}

/// What the API server's audit log says of the stack's namespaces, and of
/// one user in them.
pub struct Audit {
    /// The log's lines that may concern the namespaces.
    pub text: String,
    /// The user's Pod and Job changes.
    pub timeline: Vec<AuditEntry>,
    /// The user.
    pub user: String,
}

impl Audit {
    /// Reads the audit log for `user` in `namespaces`.
    pub fn read(t: &TestStack, namespaces: &[&str], user: &str) -> Audit {
        let real = t.stack.real.as_ref().expect("a real cluster");
        let log = real.access.audit_log.clone().expect("the audit log is on");
        let text = timeline::read_audit_log(&log, namespaces).expect("audit log");
        let timeline = timeline::from_audit_log(&text, namespaces, user);
        Audit {
            text,
            timeline,
            user: user.to_owned(),
        }
    }

    /// The audit of the ServiceAccount of [`RELEASE`] in the stack's
    /// namespace.
    pub fn of_release(t: &TestStack) -> Audit {
        let ns = t.ns();
        Audit::read(t, &[ns.as_str()], &service_account_user(&ns, RELEASE))
    }

    /// Fails unless the user met no 403.
    pub fn assert_nothing_forbidden(&self) {
        let forbidden = timeline::forbidden(&self.text, &self.user);
        assert!(
            forbidden.is_empty(),
            "forbidden to {}: {forbidden:?}",
            self.user
        );
    }
}
