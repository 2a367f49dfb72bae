//! The admin endpoints under `/admin/` (faults and counters) and a typed
//! client for them.
//!
//! | call | body | effect |
//! |---|---|---|
//! | `GET /admin/counters` | | [`Counters`] |
//! | `POST /admin/counters/reset` | | zero request counts; max live Jobs = current |
//! | `POST /admin/faults/api` | [`ApiFault`] | the next `count` API calls fail or are delayed |
//! | `POST /admin/faults/clear` | | drop pending faults |
//! | `POST /admin/pods/{ns}/{name}/oom` | | OOM-kill the container (SIGKILL, exit 137) |
//! | `POST /admin/pods/{ns}/{name}/evict` | | DisruptionTarget, SIGTERM, grace, pod deleted |
//! | `POST /admin/pods/{ns}/{name}/delete` | `{"grace_seconds": N}` (optional) | delete the pod |
//! | `POST /admin/jobs/never-pod` | `{"name": "job"}` or `{"next": N}` | those Jobs never get a pod |
//! | `POST /admin/node/crash` | | every pod gone at once, no cleanup |
//! | `POST /admin/watch/compact` | | drop the watch history (old resourceVersions get 410) |
//!
//! The admin calls take no token or the admin token; the RBAC token is refused.

use crate::faults::ApiFault;
use crate::http::AppState;
use crate::status::ApiError;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What `GET /admin/counters` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Largest number of non-terminal Jobs seen at once, per
    /// `tcab.dev/job-kind` value ("" = unlabelled).
    pub max_live_jobs: BTreeMap<String, i64>,
    /// Non-terminal Jobs now, per `tcab.dev/job-kind` value.
    pub live_jobs: BTreeMap<String, i64>,
    /// API requests by `"<verb> <resource>"`, e.g. `"list jobs"`, `"get pods/log"`.
    pub requests: BTreeMap<String, u64>,
}

/// Body of `POST /admin/jobs/never-pod`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NeverPod {
    /// A Job name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The next N Jobs created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u32>,
}

fn reply(code: StatusCode, v: Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Serves an `/admin/` request.
pub async fn handle(app: AppState, req: Request) -> Response {
    match serve(app, req).await {
        Ok(v) => reply(StatusCode::OK, v),
        Err(e) => e.into_response(),
    }
}

async fn serve(app: AppState, req: Request) -> Result<Value, ApiError> {
    let sim = app.sim;
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.strip_prefix("Bearer "));
    if let (Some(rbac), Some(t)) = (&sim.rbac, token)
        && t == rbac.token
    {
        return Err(ApiError::forbidden(
            "the admin endpoints are not open to the RBAC token",
        ));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let parse = |b: &[u8]| -> Result<Value, ApiError> {
        if b.is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_slice(b).map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))
        }
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        (Method::GET, ["admin", "healthz"]) => Ok(json!({"ok": true})),
        (Method::GET, ["admin", "counters"]) => {
            let (live, max) = sim.store.job_counts();
            let c = Counters {
                max_live_jobs: max,
                live_jobs: live,
                requests: sim.faults.requests(),
            };
            serde_json::to_value(c).map_err(|e| ApiError::internal(e.to_string()))
        }
        (Method::POST, ["admin", "counters", "reset"]) => {
            sim.faults.reset_requests();
            sim.store.reset_max_jobs();
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "faults", "api"]) => {
            let f: ApiFault = serde_json::from_value(parse(&body)?)
                .map_err(|e| ApiError::bad_request(format!("bad fault: {e}")))?;
            sim.faults.add_api_fault(f);
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "faults", "clear"]) => {
            sim.faults.clear();
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "pods", ns, name, "oom"]) => {
            sim.oom_kill(ns, name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "pods", ns, name, "evict"]) => {
            sim.evict(ns, name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "pods", ns, name, "delete"]) => {
            let grace = parse(&body)?["grace_seconds"].as_i64();
            sim.delete_pod(ns, name, grace)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "jobs", "never-pod"]) => {
            let n: NeverPod = serde_json::from_value(parse(&body)?)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            if n.name.is_none() && n.next.is_none() {
                return Err(ApiError::bad_request("give \"name\" or \"next\""));
            }
            if let Some(name) = &n.name {
                sim.faults.never_pod_named(name);
            }
            if let Some(next) = n.next {
                sim.faults.never_pod_next(next);
            }
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "node", "crash"]) => Ok(json!({"pods_removed": sim.crash_node()})),
        (Method::POST, ["admin", "watch", "compact"]) => {
            Ok(json!({"resource_version": sim.store.compact().to_string()}))
        }
        _ => Err(ApiError::no_route(&path)),
    }
}

/// Why an admin call failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Transport or decoding error.
    #[error("admin call {path} failed")]
    Http {
        /// The path called.
        path: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The sim answered an error status.
    #[error("admin call {path} answered {status}: {body}")]
    Status {
        /// The path called.
        path: String,
        /// HTTP status.
        status: u16,
        /// Response body (a Status object).
        body: String,
    },
}

/// A typed client for the admin endpoints.
#[derive(Debug, Clone)]
pub struct AdminClient {
    base: String,
    http: reqwest::Client,
}

impl AdminClient {
    /// A client for the sim at `base` (e.g. `http://127.0.0.1:1234`).
    pub fn new(base: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        AdminClient {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, AdminError> {
        let url = format!("{}{path}", self.base);
        let mut rb = self.http.request(method, &url);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let err = |source| AdminError::Http {
            path: path.to_string(),
            source,
        };
        let res = rb.send().await.map_err(err)?;
        let status = res.status().as_u16();
        let text = res.text().await.map_err(err)?;
        if !(200..300).contains(&status) {
            return Err(AdminError::Status {
                path: path.to_string(),
                status,
                body: text,
            });
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Option<Value>) -> Result<Value, AdminError> {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// Reads the counters.
    pub async fn counters(&self) -> Result<Counters, AdminError> {
        let v = self
            .call(reqwest::Method::GET, "/admin/counters", None)
            .await?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }

    /// Zeroes the request counters and resets the max live Jobs.
    pub async fn reset_counters(&self) -> Result<(), AdminError> {
        self.post("/admin/counters/reset", None).await.map(drop)
    }

    /// Queues an API fault.
    pub async fn api_fault(&self, fault: &ApiFault) -> Result<(), AdminError> {
        let body = serde_json::to_value(fault).unwrap_or(Value::Null);
        self.post("/admin/faults/api", Some(body)).await.map(drop)
    }

    /// Clears pending faults.
    pub async fn clear_faults(&self) -> Result<(), AdminError> {
        self.post("/admin/faults/clear", None).await.map(drop)
    }

    /// OOM-kills a pod's container.
    pub async fn oom_kill(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/pods/{ns}/{pod}/oom"), None)
            .await
            .map(drop)
    }

    /// Evicts a pod.
    pub async fn evict(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/pods/{ns}/{pod}/evict"), None)
            .await
            .map(drop)
    }

    /// Deletes a pod (default grace = the pod's terminationGracePeriodSeconds).
    pub async fn delete_pod(
        &self,
        ns: &str,
        pod: &str,
        grace_seconds: Option<i64>,
    ) -> Result<(), AdminError> {
        let body = json!({"grace_seconds": grace_seconds});
        self.post(&format!("/admin/pods/{ns}/{pod}/delete"), Some(body))
            .await
            .map(drop)
    }

    /// The Job with this name never gets a pod.
    pub async fn never_pod_named(&self, job: &str) -> Result<(), AdminError> {
        self.post("/admin/jobs/never-pod", Some(json!({"name": job})))
            .await
            .map(drop)
    }

    /// The next `n` Jobs never get a pod.
    pub async fn never_pod_next(&self, n: u32) -> Result<(), AdminError> {
        self.post("/admin/jobs/never-pod", Some(json!({"next": n})))
            .await
            .map(drop)
    }

    /// Crashes the node; returns how many pods vanished.
    pub async fn crash_node(&self) -> Result<u64, AdminError> {
        let v = self.post("/admin/node/crash", None).await?;
        Ok(v["pods_removed"].as_u64().unwrap_or(0))
    }

    /// Drops the watch history; returns the current resourceVersion.
    pub async fn compact(&self) -> Result<String, AdminError> {
        let v = self.post("/admin/watch/compact", None).await?;
        Ok(v["resource_version"].as_str().unwrap_or("").to_string())
    }
}
