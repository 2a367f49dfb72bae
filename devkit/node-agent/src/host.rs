//! The host of a program on the node agent: real time, the container's
//! log, SIGTERM from the pod worker, and the API reached with the pod's
//! own ServiceAccount token. The token comes from the TokenRequest API, as
//! the kubelet gets a projected token: the node identity may ask for one
//! bound to a pod scheduled on it (NodeRestriction's `admitServiceAccount`:
//! a `boundObjectRef` to the Pod with its UID; the audience is the API
//! server's, which the pod's default projected token volume names).

use crate::api::{self, ApiError};
use crate::conn::Conn;
use crate::logs::ContainerLog;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Lifetime asked of a pod's token (the kubelet asks one hour).
pub(crate) const TOKEN_SECONDS: u64 = 3600;

/// What a program on the node agent runs with.
pub struct AgentHost {
    pub(crate) namespace: String,
    pub(crate) pod_name: String,
    pub(crate) pod_uid: String,
    pub(crate) service_account: String,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) log: Arc<ContainerLog>,
    pub(crate) sigterm: watch::Receiver<bool>,
    pub(crate) http: reqwest::Client,
    pub(crate) conn: Conn,
    /// The node's client (for TokenRequests).
    pub(crate) node_client: kube::Client,
    pub(crate) token: tokio::sync::Mutex<Option<(kube::Client, Instant)>>,
}

impl AgentHost {
    /// A client with the pod's ServiceAccount token, renewed when 80 % of
    /// its life has passed (as the kubelet's token manager does).
    async fn pod_client(&self) -> Result<kube::Client, String> {
        let mut cached = self.token.lock().await;
        if let Some((c, at)) = cached.as_ref()
            && at.elapsed() < Duration::from_secs(TOKEN_SECONDS * 8 / 10)
        {
            return Ok(c.clone());
        }
        let token = request_token(
            &self.node_client,
            &self.namespace,
            &self.service_account,
            &self.pod_name,
            &self.pod_uid,
        )
        .await?;
        let client = self.conn.client(&token).map_err(|e| e.to_string())?;
        *cached = Some((client.clone(), Instant::now()));
        Ok(client)
    }
}

/// A token of the pod's ServiceAccount from the TokenRequest API, bound to
/// the pod (the node identity may ask only for that), for the API server's
/// own audience, valid [`TOKEN_SECONDS`].
pub(crate) async fn request_token(
    node_client: &kube::Client,
    namespace: &str,
    service_account: &str,
    pod_name: &str,
    pod_uid: &str,
) -> Result<String, String> {
    let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token");
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": TOKEN_SECONDS,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                "name": pod_name, "uid": pod_uid},
        },
    });
    let answer = api::post(node_client, &path, &request)
        .await
        .map_err(|e| format!("requesting the pod's token: {}", e.message))?;
    answer["status"]["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the TokenRequest answer has no token".to_string())
}

fn message(e: ApiError) -> String {
    e.message
}

impl tcab_workloads::Host for AgentHost {
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn log(&self, line: &str) {
        self.log.append(line);
    }

    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await
    }

    fn terminated(&self) -> bool {
        *self.sigterm.borrow()
    }

    async fn sigterm(&self) {
        let mut rx = self.sigterm.clone();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn http(&self) -> &reqwest::Client {
        &self.http
    }

    async fn create_pod(&self, namespace: &str, mut pod: Value) -> Result<String, String> {
        let client = self.pod_client().await?;
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        let created = api::post(
            &client,
            &format!("/api/v1/namespaces/{namespace}/pods"),
            &pod,
        )
        .await
        .map_err(message)?;
        Ok(created["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), String> {
        let client = self.pod_client().await?;
        api::delete(&client, &api::pod_path(namespace, name), &json!({}))
            .await
            .map(|_| ())
            .map_err(message)
    }
}
