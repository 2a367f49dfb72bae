//! Events the kubelet records about its pods (core/v1 Events, source
//! `kubelet` on the node; pkg/kubelet/events for the reasons). Best effort:
//! a failed write is dropped, as the kubelet's broadcaster drops them.

use crate::api;
use serde_json::{Value, json};

/// Records events as one node's kubelet.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    node: String,
}

impl Recorder {
    /// A recorder for `node`, writing with its identity.
    pub fn new(client: kube::Client, node: &str) -> Self {
        Recorder {
            client,
            node: node.to_string(),
        }
    }

    /// Records `reason` about `pod` (type `Normal` or `Warning`), without
    /// waiting for the write.
    pub fn pod(&self, pod: &Value, warning: bool, reason: &str, message: &str) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let now = crate::node::k8s_now();
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": ns},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": name,
                "uid": pod["metadata"]["uid"], "resourceVersion": pod["metadata"]["resourceVersion"],
                "fieldPath": "spec.containers{" .to_string() + pod["spec"]["containers"][0]["name"].as_str().unwrap_or("") + "}"},
            "reason": reason, "message": message,
            "type": if warning { "Warning" } else { "Normal" },
            "source": {"component": "kubelet", "host": self.node},
            "reportingComponent": "kubelet", "reportingInstance": self.node,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        });
        let client = self.client.clone();
        tokio::spawn(async move {
            let path = format!("/api/v1/namespaces/{ns}/events");
            if let Err(e) = api::post(&client, &path, &event).await {
                tracing::debug!(error = %e, "event not recorded");
            }
        });
    }
}
