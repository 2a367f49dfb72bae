//! The admin endpoints under `/admin/` (faults and counters) and a typed
//! client for them.
//!
//! | call | body | effect |
//! |---|---|---|
//! | `GET /admin/counters` | | [`Counters`] |
//! | `POST /admin/counters/reset` | | zero request counts, forget spent fault rules; max live Jobs = current |
//! | `POST /admin/faults/api` | [`FaultRule`] (or the older [`ApiFault`]) | add a fault rule; answers `{"ok": true, "id": N}` |
//! | `GET /admin/faults` | | every rule as a [`FaultStatus`] (id, rule without its token, affected, remaining, seconds left, live) |
//! | `DELETE /admin/faults/api/{id}` | | end one rule now (it stays listed) |
//! | `POST /admin/faults/clear` | | end every rule and never-pod switch |
//! | `POST /admin/watches/close` | [`WatchScope`] (optional) | end open watches cleanly; answers `{"closed": N}` |
//! | `POST /admin/restart` | [`Restart`] (optional) | API-server restart: see [`RestartReport`] |
//! | `POST /admin/pods/{ns}/{name}/oom` | | OOM-kill the container (SIGKILL, `OOMKilled`, exit 137) |
//! | `POST /admin/pods/{ns}/{name}/evict` | | the Eviction API: DisruptionTarget `EvictionByEvictionAPI`, graceful delete |
//! | `POST /admin/pods/{ns}/{name}/preempt` | | preemption: DisruptionTarget `PreemptionByScheduler`, graceful delete |
//! | `POST /admin/pods/{ns}/{name}/kubelet-evict` | `{"resource": "memory"}` (optional) | node-pressure eviction: pod kept `Failed`, reason `Evicted` |
//! | `POST /admin/pods/{ns}/{name}/kill` | `{"grace_seconds": N}` (optional, default 0) | the runtime stops the container, the pod not deleted: SIGTERM, SIGKILL after N s (0: at once; `Error`, 137); the pod stays `Failed` |
//! | `POST /admin/pods/{ns}/{name}/delete` | `{"grace_seconds": N}` (optional) | delete the pod |
//! | `POST /admin/jobs/never-pod` | `{"name": "job"}` or `{"next": N}` | those Jobs never get a pod |
//! | `POST /admin/nodes/{name}/crash` | | the machine dies: its pods stay as they were, nothing reports |
//! | `POST /admin/nodes/{name}/restart` | | the machine boots again: lost containers `ContainerStatusUnknown` |
//! | `POST /admin/nodes/{name}/delete` | | delete the Node object (as `kubectl delete node`) |
//! | `POST /admin/nodes/{name}/out-of-service` | | add the `node.kubernetes.io/out-of-service` NoExecute taint |
//! | `POST /admin/nodes/{name}/health` | `{"notReady": true}` | its kubelet reports `Ready=False` (`KubeletNotReady`) and goes on running its pods; `false`: Ready again |
//! | `POST /admin/images/unpullable` | `{"image": "x:1", "unpullable": true}` | pulls of the image fail (`ErrImagePull`) |
//! | `POST /admin/watch/compact` | | drop the watch history (old resourceVersions get 410) |
//! | `GET /admin/audit?after=N&limit=M` | | every change to a Pod or a Job after position N (default 0), at most M (default and maximum 200000), with who made it: [`AuditPage`] (see [`crate::audit`]) |
//!
//! The admin calls take no token or the admin token; the RBAC token is
//! refused. Admin calls are never faulted.
//!
//! ## Fault rules
//!
//! A rule (`mode`, scope, bound) applies to each API request it covers
//! while it is live; the first live rule added wins. Scope: `verbs`
//! (`get list watch create update patch delete deletecollection`),
//! `resources` (`jobs`, `pods`, `pods/log`, `jobs/status`, ...: exact), and
//! `token` (only requests presenting that bearer token). Bound: `count`
//! requests, `seconds` of real time from when the sim receives the rule
//! (not scaled by `--speed`), or both, whichever ends first. Modes:
//!
//! - `error500`: 500 `InternalError` Status ("Internal error occurred: ...").
//! - `unavailable`: 503 `ServiceUnavailable` Status (`Retry-After` with
//!   `retry_after_seconds`).
//! - `throttle`: 429 as API Priority and Fairness rejects: `Retry-After`
//!   (`retry_after_seconds`, default 1), plain-text body "Too many requests,
//!   please try again later.", not a Status.
//! - `delay`: answer normally after `delay_ms` (default 200).
//! - `hang`: accept and never answer, until the client gives up or a restart
//!   cuts the connection (a hung watch sends no headers either).
//! - `silence` (watches only): the watch opens and sends nothing, no events,
//!   no bookmarks, until its `timeoutSeconds` deadline (then it ends cleanly)
//!   or the client closes it. Watches already open go silent at the next
//!   event or bookmark they would send while the rule is live. A silenced
//!   watch stays silent after the rule ends, as one stuck on a broken watch
//!   cache does; the events it missed stay in the history, so a resume from
//!   the client's last resourceVersion gets them.
//!
//! Faults on `list` and `watch` meet new requests; watches already open go
//! on unless the rule has `close_open_watches` (they are ended cleanly, and
//! the client's re-watch meets the fault) or the mode is `silence`.
//! [`Counters::faults`] tells how many requests each rule affected.
//!
//! ## Restart
//!
//! `POST /admin/restart` with `{"down_seconds": N}` (default 0) does what a
//! crashed and restarted API server does to its clients: the watch history
//! is compacted (the resourceVersion moves on by one, as the restarting
//! server's own writes move etcd's revision, and the new watch cache starts
//! there: every resume from a resourceVersion a client holds gets 410
//! Expired, and the client relists), every open connection except the caller's is cut (open watches
//! end with a broken stream, requests in flight get no answer), and for
//! `down_seconds` the port is closed, so new connections are refused. The
//! answer carries `Connection: close`. The store itself (etcd) loses
//! nothing, and the Job controller and kubelet go on.

use crate::audit::{AUDIT_LIMIT, AuditPage};
use crate::faults::{ApiFault, ConnTag, FaultRule, FaultStatus, WatchScope};
use crate::http::AppState;
use crate::status::ApiError;
use axum::extract::{ConnectInfo, Request};
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
    /// API requests by `"<verb> <resource>"`, e.g. `"list jobs"`, `"get pods/log"`
    /// (faulted ones included).
    pub requests: BTreeMap<String, u64>,
    /// The same per client `User-Agent` (each dispatcher binary names
    /// itself: `tcab-admitter/0.1.0`; "" for a client without one).
    #[serde(default)]
    pub requests_by_agent: BTreeMap<String, BTreeMap<String, u64>>,
    /// Requests (or open watches, for `silence`) each fault rule affected,
    /// by rule id.
    #[serde(default)]
    pub faults: BTreeMap<String, u64>,
    /// Watches open now.
    #[serde(default)]
    pub open_watches: u64,
    /// Of those, the silenced ones.
    #[serde(default)]
    pub silent_watches: u64,
    /// Requests hanging now (a `hang` fault; back to 0 once their clients
    /// gave up).
    #[serde(default)]
    pub hung_requests: u64,
    /// API-server restarts so far.
    #[serde(default)]
    pub restarts: u64,
}

pub use tcab_api_faults::admin::{Restart, RestartReport};

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
    let restart =
        req.method() == Method::POST && req.uri().path().trim_end_matches('/') == "/admin/restart";
    match serve(app, req).await {
        Ok(v) => {
            let mut res = reply(StatusCode::OK, v);
            if restart {
                // The caller's connection was spared the cut; it closes now.
                res.headers_mut().insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
            }
            res
        }
        Err(e) => e.into_response(),
    }
}

/// Restarts the API server (see the module docs); `keep` is the caller's
/// connection.
fn restart(app: &AppState, keep: Option<u64>, r: &Restart) -> Result<RestartReport, ApiError> {
    let down = r.down().map_err(ApiError::bad_request)?;
    let sim = &app.sim;
    let rv = sim.store.compact_for_restart();
    if !down.is_zero() {
        sim.faults.net.go_down(down);
    }
    let cut = sim.faults.net.cut(keep);
    let closed = sim.faults.book.close_watches(&WatchScope::default());
    let n = sim.faults.book.count_restart();
    tracing::info!(
        restart = n,
        resource_version = rv,
        connections_cut = cut,
        down_seconds = r.down_seconds,
        "API server restarted (simulated)"
    );
    Ok(RestartReport {
        resource_version: rv.to_string(),
        connections_cut: cut as u64,
        watches_closed: closed as u64,
    })
}

/// `after` and `limit` of `GET /admin/audit`.
fn audit_query(query: Option<&str>) -> Result<(u64, usize), ApiError> {
    let (mut after, mut limit) = (0u64, AUDIT_LIMIT);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let bad =
            || ApiError::bad_request(format!("{key} must be a whole number >= 0, got {value:?}"));
        match key {
            "after" => after = value.parse().map_err(|_| bad())?,
            "limit" => limit = value.parse::<usize>().map_err(|_| bad())?.min(AUDIT_LIMIT),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {pair:?}; after=<seq> and limit=<n> are accepted"
                )));
            }
        }
    }
    Ok((after, limit))
}

async fn serve(app: AppState, req: Request) -> Result<Value, ApiError> {
    let sim = app.sim.clone();
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(tcab_api_faults::request::bearer_token);
    if let (Some(rbac), Some(t)) = (&sim.rbac, token)
        && t == rbac.token
    {
        return Err(ApiError::forbidden(
            "the admin endpoints are not open to the RBAC token",
        ));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_owned);
    let conn = req
        .extensions()
        .get::<ConnectInfo<ConnTag>>()
        .map(|c| c.0.id);
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
    let json_err = |e: serde_json::Error| ApiError::bad_request(format!("bad body: {e}"));
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        (Method::GET, ["admin", "healthz"]) => Ok(json!({"ok": true})),
        (Method::GET, ["admin", "counters"]) => {
            let (live, max) = sim.store.job_counts();
            let (open_watches, silent_watches) = sim.faults.book.open_watches();
            let c = Counters {
                max_live_jobs: max,
                live_jobs: live,
                requests: sim.faults.book.requests(),
                requests_by_agent: sim.faults.book.requests_by_agent(),
                faults: sim.faults.book.affected(),
                open_watches,
                silent_watches,
                hung_requests: sim.faults.book.hung_requests(),
                restarts: sim.faults.book.restarts(),
            };
            serde_json::to_value(c).map_err(|e| ApiError::internal(e.to_string()))
        }
        (Method::POST, ["admin", "counters", "reset"]) => {
            sim.faults.book.reset_requests();
            sim.store.reset_max_jobs();
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "faults", "api"]) => {
            let f: FaultRule = serde_json::from_value(parse(&body)?)
                .map_err(|e| ApiError::bad_request(format!("bad fault: {e}")))?;
            let id = sim.faults.book.add_rule(f);
            Ok(json!({"ok": true, "id": id}))
        }
        (Method::GET, ["admin", "faults"]) => serde_json::to_value(sim.faults.book.rules())
            .map_err(|e| ApiError::internal(e.to_string())),
        (Method::DELETE, ["admin", "faults", "api", id]) => {
            let id: u64 = id
                .parse()
                .map_err(|_| ApiError::bad_request(format!("bad fault id {id:?}")))?;
            if sim.faults.book.remove_rule(id) {
                Ok(json!({"ok": true}))
            } else {
                Err(ApiError::no_route(&path))
            }
        }
        (Method::POST, ["admin", "watches", "close"]) => {
            let scope: WatchScope = serde_json::from_value(parse(&body)?).map_err(json_err)?;
            Ok(json!({"closed": sim.faults.book.close_watches(&scope)}))
        }
        (Method::POST, ["admin", "restart"]) => {
            let r: Restart = serde_json::from_value(parse(&body)?).map_err(json_err)?;
            let report = restart(&app, conn, &r)?;
            serde_json::to_value(report).map_err(|e| ApiError::internal(e.to_string()))
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
        (Method::POST, ["admin", "pods", ns, name, "preempt"]) => {
            sim.preempt(ns, name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "pods", ns, name, "kubelet-evict"]) => {
            let body = parse(&body)?;
            let resource = body["resource"].as_str().unwrap_or("memory");
            sim.kubelet_evict(ns, name, resource)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "pods", ns, name, "kill"]) => {
            let grace = parse(&body)?["grace_seconds"].as_f64().unwrap_or(0.0);
            if !(grace.is_finite() && (0.0..=3600.0).contains(&grace)) {
                return Err(ApiError::bad_request(format!(
                    "\"grace_seconds\" must be between 0 and 3600, got {grace}"
                )));
            }
            sim.kill_container(ns, name, std::time::Duration::from_secs_f64(grace))?;
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
        (Method::POST, ["admin", "nodes", name, "crash"]) => {
            Ok(json!({"pods_stopped": sim.crash_node(name)?}))
        }
        (Method::POST, ["admin", "nodes", name, "restart"]) => {
            sim.restart_node(name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "nodes", name, "delete"]) => {
            sim.delete_object(crate::store::Kind::Node, "", name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "nodes", name, "health"]) => {
            let body = parse(&body)?;
            let not_ready = match &body["notReady"] {
                Value::Bool(b) => *b,
                Value::Null => false,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "notReady must be a boolean, got {other}"
                    )));
                }
            };
            sim.set_node_ready(name, !not_ready)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "nodes", name, "out-of-service"]) => {
            sim.taint_out_of_service(name)?;
            Ok(json!({"ok": true}))
        }
        (Method::POST, ["admin", "images", "unpullable"]) => {
            let body = parse(&body)?;
            let image = body["image"]
                .as_str()
                .filter(|i| !i.is_empty())
                .ok_or_else(|| ApiError::bad_request("give \"image\""))?;
            sim.set_unpullable(image, body["unpullable"].as_bool().unwrap_or(true));
            Ok(json!({"ok": true}))
        }
        (Method::GET, ["admin", "audit"]) => {
            let (after, limit) = audit_query(query.as_deref())?;
            serde_json::to_value(sim.store.audit_page(after, limit))
                .map_err(|e| ApiError::internal(e.to_string()))
        }
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
        serde_json::from_value(v.clone()).map_err(|e| AdminError::Status {
            path: "/admin/counters".into(),
            status: 200,
            body: format!("undecodable counters ({e}): {v}"),
        })
    }

    /// Zeroes the request counters and resets the max live Jobs.
    pub async fn reset_counters(&self) -> Result<(), AdminError> {
        self.post("/admin/counters/reset", None).await.map(drop)
    }

    /// Queues a count-bound API fault (the original form; see
    /// [`AdminClient::add_fault`]).
    pub async fn api_fault(&self, fault: &ApiFault) -> Result<(), AdminError> {
        let body = serde_json::to_value(fault).unwrap_or(Value::Null);
        self.post("/admin/faults/api", Some(body)).await.map(drop)
    }

    /// Adds a fault rule; returns its id (see [`Counters::faults`]).
    pub async fn add_fault(&self, rule: &FaultRule) -> Result<u64, AdminError> {
        let body = serde_json::to_value(rule).unwrap_or(Value::Null);
        let v = self.post("/admin/faults/api", Some(body)).await?;
        Ok(v["id"].as_u64().unwrap_or(0))
    }

    /// Every fault rule, oldest first.
    pub async fn faults(&self) -> Result<Vec<FaultStatus>, AdminError> {
        let path = "/admin/faults";
        let v = self.call(reqwest::Method::GET, path, None).await?;
        serde_json::from_value(v).map_err(|e| AdminError::Status {
            path: path.to_string(),
            status: 200,
            body: format!("unreadable fault list: {e}"),
        })
    }

    /// How many requests the rule with this id affected so far.
    pub async fn fault_affected(&self, id: u64) -> Result<u64, AdminError> {
        Ok(self
            .counters()
            .await?
            .faults
            .get(&id.to_string())
            .copied()
            .unwrap_or(0))
    }

    /// Ends one fault rule now.
    pub async fn remove_fault(&self, id: u64) -> Result<(), AdminError> {
        self.call(
            reqwest::Method::DELETE,
            &format!("/admin/faults/api/{id}"),
            None,
        )
        .await
        .map(drop)
    }

    /// Ends every fault rule and never-pod switch.
    pub async fn clear_faults(&self) -> Result<(), AdminError> {
        self.post("/admin/faults/clear", None).await.map(drop)
    }

    /// Ends the open watches in scope (cleanly); returns how many.
    pub async fn close_watches(&self, scope: &WatchScope) -> Result<u64, AdminError> {
        let body = serde_json::to_value(scope).unwrap_or(Value::Null);
        let v = self.post("/admin/watches/close", Some(body)).await?;
        Ok(v["closed"].as_u64().unwrap_or(0))
    }

    /// Restarts the API server: history compacted, connections cut, the port
    /// closed for `down_seconds`. The sim is unreachable meanwhile.
    pub async fn restart(&self, down_seconds: f64) -> Result<RestartReport, AdminError> {
        let path = "/admin/restart";
        let body = serde_json::to_value(Restart { down_seconds }).unwrap_or(Value::Null);
        let v = self.post(path, Some(body)).await?;
        serde_json::from_value(v).map_err(|e| AdminError::Status {
            path: path.to_string(),
            status: 200,
            body: format!("unreadable restart report: {e}"),
        })
    }

    /// OOM-kills a pod's container.
    pub async fn oom_kill(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/pods/{ns}/{pod}/oom"), None)
            .await
            .map(drop)
    }

    /// The runtime stops a pod's container without deleting the pod:
    /// SIGTERM, SIGKILL after `grace_seconds` (0: SIGKILL at once).
    pub async fn kill(&self, ns: &str, pod: &str, grace_seconds: f64) -> Result<(), AdminError> {
        self.post(
            &format!("/admin/pods/{ns}/{pod}/kill"),
            Some(json!({"grace_seconds": grace_seconds})),
        )
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

    /// Preempts a pod (DisruptionTarget `PreemptionByScheduler`, graceful delete).
    pub async fn preempt(&self, ns: &str, pod: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/pods/{ns}/{pod}/preempt"), None)
            .await
            .map(drop)
    }

    /// The pod's kubelet evicts it for node pressure on `resource`
    /// (`memory`, `ephemeral-storage`, ...): kept, `Failed`, `Evicted`.
    pub async fn kubelet_evict(
        &self,
        ns: &str,
        pod: &str,
        resource: &str,
    ) -> Result<(), AdminError> {
        self.post(
            &format!("/admin/pods/{ns}/{pod}/kubelet-evict"),
            Some(json!({"resource": resource})),
        )
        .await
        .map(drop)
    }

    /// Crashes the machine of a node; returns how many pods it ran.
    pub async fn crash_node(&self, node: &str) -> Result<u64, AdminError> {
        let v = self
            .post(&format!("/admin/nodes/{node}/crash"), None)
            .await?;
        Ok(v["pods_stopped"].as_u64().unwrap_or(0))
    }

    /// Boots the machine of a node again.
    pub async fn restart_node(&self, node: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/nodes/{node}/restart"), None)
            .await
            .map(drop)
    }

    /// Deletes a Node object.
    pub async fn delete_node(&self, node: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/nodes/{node}/delete"), None)
            .await
            .map(drop)
    }

    /// The node's kubelet reports `Ready=False` (`ready` false) while its
    /// pods run on, or Ready again.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), AdminError> {
        self.post(
            &format!("/admin/nodes/{node}/health"),
            Some(json!({"notReady": !ready})),
        )
        .await
        .map(drop)
    }

    /// Taints a node `node.kubernetes.io/out-of-service:NoExecute`.
    pub async fn out_of_service(&self, node: &str) -> Result<(), AdminError> {
        self.post(&format!("/admin/nodes/{node}/out-of-service"), None)
            .await
            .map(drop)
    }

    /// Makes pulls of `image` fail (`unpullable`) or succeed again.
    pub async fn set_unpullable(&self, image: &str, unpullable: bool) -> Result<(), AdminError> {
        self.post(
            "/admin/images/unpullable",
            Some(json!({"image": image, "unpullable": unpullable})),
        )
        .await
        .map(drop)
    }

    /// The audit timeline after position `after` (see [`crate::audit`]).
    pub async fn audit(&self, after: u64) -> Result<AuditPage, AdminError> {
        let path = format!("/admin/audit?after={after}");
        let v = self.call(reqwest::Method::GET, &path, None).await?;
        serde_json::from_value(v).map_err(|e| AdminError::Status {
            path,
            status: 200,
            body: format!("unreadable audit page: {e}"),
        })
    }

    /// Drops the watch history; returns the current resourceVersion.
    pub async fn compact(&self) -> Result<String, AdminError> {
        let v = self.post("/admin/watch/compact", None).await?;
        Ok(v["resource_version"].as_str().unwrap_or("").to_string())
    }
}
