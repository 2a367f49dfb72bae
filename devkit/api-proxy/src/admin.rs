//! The proxy's admin endpoints under `/admin/`: kube-sim's for API faults,
//! watches, restarts and counters (same paths, same bodies, same answers,
//! so kube-sim's `AdminClient` drives either), and a 404 naming who offers
//! each of kube-sim's other endpoints on a real cluster.
//!
//! | call | body | effect |
//! |---|---|---|
//! | `GET /admin/healthz` | | `{"ok": true}` |
//! | `GET /admin/counters` | | [`ProxyCounters`] |
//! | `POST /admin/counters/reset` | | zero the request counts, forget spent rules |
//! | `POST /admin/faults/api` (or `POST /admin/faults`) | a `FaultRule` (or the older `ApiFault`) | add a rule; answers `{"ok": true, "id": N}` |
//! | `GET /admin/faults` | | every rule as a `FaultStatus` |
//! | `DELETE /admin/faults/api/{id}` (or `/admin/faults/{id}`) | | end one rule now (it stays listed) |
//! | `POST /admin/faults/clear` | | end every rule |
//! | `POST /admin/watches/close` | `WatchScope` (optional) | end open watches cleanly; answers `{"closed": N}` |
//! | `POST /admin/connections/cut` | | cut every connection but the caller's; answers `{"connections_cut": N}` |
//! | `POST /admin/restart` | `{"down_seconds": N}` (optional) | an API-server restart: see below; answers a `RestartReport` |
//!
//! The admin calls take no bearer token, or the proxy's admin token when it
//! has one; any other token is refused (403). Admin calls are never faulted
//! and never reach the API server.
//!
//! **Restart.** Every connection but the caller's is cut (open watches end
//! with a broken stream, requests in flight get no answer) and the port is
//! closed, so new connections are refused, for `down_seconds`. With a
//! restart hook (see [`crate::ProxyOptions::restart_hook`]) the proxy calls
//! it meanwhile (the launcher restarts the real kube-apiserver) and reopens
//! once it returns and the downtime is over; the real server's own restart
//! then moves every client's watch past its history (resumes get 410, and
//! clients relist), as kube-sim's restart does. Without a hook the API
//! server does not restart: connections are cut and refused, but a resume
//! from a recent resourceVersion still succeeds, and the report's
//! `resource_version` is "".

use crate::proxy::{Proxy, bearer, lock};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tcab_api_faults::admin::{Restart, RestartReport};
use tcab_api_faults::answers::status_json;
use tcab_api_faults::net::ConnTag;
use tcab_api_faults::{FaultRule, WatchScope};

/// What `GET /admin/counters` answers: kube-sim's `Counters` fields (the
/// ones about Jobs empty: the proxy keeps no cluster state), and the
/// proxy's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyCounters {
    /// Always empty (kube-sim's largest number of live Jobs per lane; on a
    /// real cluster, count Jobs from the API).
    pub max_live_jobs: BTreeMap<String, i64>,
    /// Always empty (kube-sim's live Jobs per lane).
    pub live_jobs: BTreeMap<String, i64>,
    /// API requests by `"<verb> <resource>"`, e.g. `"list jobs"` (faulted
    /// ones included; discovery and health paths are not counted).
    pub requests: BTreeMap<String, u64>,
    /// The same by identity: a token's given name, `anonymous`, or
    /// `token-<first 8 hex digits of its SHA-256>`.
    pub requests_by_identity: BTreeMap<String, BTreeMap<String, u64>>,
    /// The same by client `User-Agent` (each dispatcher binary names
    /// itself: `tcab-admitter/0.1.0`; "" for a client without one).
    #[serde(default)]
    pub requests_by_agent: BTreeMap<String, BTreeMap<String, u64>>,
    /// Requests (or open watches, for `silence`) each rule affected, by id.
    pub faults: BTreeMap<String, u64>,
    /// Watches open through the proxy now.
    pub open_watches: u64,
    /// Of those, the silenced ones.
    pub silent_watches: u64,
    /// Requests hanging now.
    pub hung_requests: u64,
    /// Restarts so far.
    pub restarts: u64,
    /// Restarts whose hook failed.
    pub restart_failures: u64,
    /// The last hook failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_error: Option<String>,
    /// Connections open to the proxy now.
    pub open_connections: u64,
}

/// An admin call's failure: its code and message (sent as a Status).
struct Failure(u16, String);

impl Failure {
    fn bad(msg: impl Into<String>) -> Self {
        Failure(400, msg.into())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let reason = match self.0 {
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            _ => "InternalError",
        };
        let code = StatusCode::from_u16(self.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            status_json(self.0, reason, &self.1, None).to_string(),
        )
            .into_response()
    }
}

/// Who offers, on a real cluster, what kube-sim's admin API does beyond API
/// faults; `None` for paths kube-sim does not serve either.
pub fn offered_elsewhere(method: &Method, segs: &[&str]) -> Option<&'static str> {
    if *method != Method::POST && !(*method == Method::GET && segs == ["admin", "audit"]) {
        return None;
    }
    Some(match segs {
        ["admin", "pods", _, _, "oom"] => {
            "a container's death is the kubelet's: on the real cluster the node agent's admin \
             API OOM-kills it (POST /pods/{ns}/{name}/oom)"
        }
        ["admin", "pods", _, _, "kill"] => {
            "a container's death is the kubelet's: on the real cluster the node agent's admin \
             API ends it (POST /pods/{ns}/{name}/crash {\"exit_code\": 137})"
        }
        ["admin", "pods", _, _, "kubelet-evict"] => {
            "node-pressure eviction is the kubelet's: on the real cluster the node agent's \
             admin API does it (POST /pods/{ns}/{name}/evict)"
        }
        ["admin", "pods", _, _, "evict"] => {
            "on the real cluster evict through the API itself: POST \
             /api/v1/namespaces/{ns}/pods/{name}/eviction (kubectl drain does)"
        }
        ["admin", "pods", _, _, "delete"] => {
            "on the real cluster delete the pod through the API itself (kubectl delete pod)"
        }
        ["admin", "pods", _, _, "preempt"] => {
            "preemption is the scheduler's: on the real cluster it happens only when a \
             higher-priority pod does not fit; kube-sim alone offers it on demand"
        }
        ["admin", "nodes", _, "crash" | "restart"] => {
            "nodes are the node agent's: on the real cluster its admin API loses a node and \
             brings it back (POST /nodes/{node}/lose, /nodes/{node}/restore)"
        }
        ["admin", "nodes", _, "delete" | "out-of-service"] => {
            "on the real cluster delete or taint the Node through the API itself (kubectl \
             delete node, kubectl taint node ... node.kubernetes.io/out-of-service=nodeshutdown:NoExecute)"
        }
        ["admin", "images", "unpullable"] => {
            "image pulls are the kubelet's: on the real cluster the node agent's admin API \
             makes an image unpullable (POST /images/unpullable)"
        }
        ["admin", "jobs", "never-pod"] => {
            "kube-sim alone holds back a Job's pods; on the real cluster a Job whose pod the \
             API refuses (a missing ServiceAccount, a quota) gets none"
        }
        ["admin", "watch", "compact"] => {
            "on the real cluster 410s come from etcd compaction (--etcd-compaction-interval) \
             and the watch cache's window, or from a restart through this proxy with a \
             restart hook"
        }
        ["admin", "audit"] => {
            "kube-sim alone keeps the audit timeline; on the real cluster read the API \
             server's audit log"
        }
        _ => return None,
    })
}

fn reply(v: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Serves an `/admin/` request that came on connection `conn`.
pub(crate) async fn handle(p: Arc<Proxy>, conn: ConnTag, req: Request) -> Response {
    let restart =
        req.method() == Method::POST && req.uri().path().trim_end_matches('/') == "/admin/restart";
    match serve(p, conn, req).await {
        Ok(v) => {
            let mut res = reply(v);
            if restart {
                // The caller's connection was spared the cut; it closes now.
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            res
        }
        Err(f) => f.into_response(),
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, Failure> {
    serde_json::to_value(v).map_err(|e| Failure(500, e.to_string()))
}

async fn serve(p: Arc<Proxy>, conn: ConnTag, req: Request) -> Result<Value, Failure> {
    if let Some(t) = bearer(req.headers())
        && p.admin_token.as_deref() != Some(t.as_str())
    {
        return Err(Failure(
            403,
            "the fault proxy's admin endpoints take no bearer token (or the proxy's admin token)"
                .into(),
        ));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| Failure::bad(e.to_string()))?;
    let parse = |b: &[u8]| -> Result<Value, Failure> {
        if b.is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_slice(b).map_err(|e| Failure::bad(format!("bad JSON: {e}")))
        }
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["admin", "healthz"]) => Ok(json!({"ok": true})),
        (&Method::GET, ["admin", "counters"]) => to_value(&counters(&p)),
        (&Method::POST, ["admin", "counters", "reset"]) => {
            p.reset_counters();
            Ok(json!({"ok": true}))
        }
        (&Method::POST, ["admin", "faults"] | ["admin", "faults", "api"]) => {
            let rule: FaultRule = serde_json::from_value(parse(&body)?)
                .map_err(|e| Failure::bad(format!("bad fault: {e}")))?;
            tracing::info!(mode = rule.mode.as_str(), verbs = ?rule.verbs, resources = ?rule.resources,
                token_scoped = rule.token.is_some(), count = ?rule.count, seconds = ?rule.seconds, "fault rule added");
            Ok(json!({"ok": true, "id": p.book.add_rule(rule)}))
        }
        (&Method::GET, ["admin", "faults"]) => to_value(&p.book.rules()),
        (&Method::POST, ["admin", "faults", "clear"]) => {
            p.book.clear();
            Ok(json!({"ok": true}))
        }
        (&Method::DELETE, ["admin", "faults", id] | ["admin", "faults", "api", id]) => {
            let id: u64 = id
                .parse()
                .map_err(|_| Failure::bad(format!("bad fault id {id:?}")))?;
            if p.book.remove_rule(id) {
                Ok(json!({"ok": true}))
            } else {
                Err(Failure(404, format!("no fault rule {id}")))
            }
        }
        (&Method::POST, ["admin", "watches", "close"]) => {
            let scope: WatchScope = serde_json::from_value(parse(&body)?)
                .map_err(|e| Failure::bad(format!("bad body: {e}")))?;
            Ok(json!({"closed": p.book.close_watches(&scope)}))
        }
        (&Method::POST, ["admin", "connections", "cut"]) => {
            let n = p.net.cut(Some(conn.id));
            tracing::info!(connections_cut = n, "connections cut");
            Ok(json!({"connections_cut": n}))
        }
        (&Method::POST, ["admin", "restart"]) => {
            let r: Restart = serde_json::from_value(parse(&body)?)
                .map_err(|e| Failure::bad(format!("bad body: {e}")))?;
            to_value(&restart(&p, conn, &r)?)
        }
        _ => match offered_elsewhere(&method, &segs) {
            Some(who) => Err(Failure(
                404,
                format!("the fault proxy does not offer {method} {path}: {who}"),
            )),
            None => Err(Failure(
                404,
                format!("the fault proxy has no admin endpoint {method} {path}"),
            )),
        },
    }
}

fn counters(p: &Proxy) -> ProxyCounters {
    let (open_watches, silent_watches) = p.book.open_watches();
    let (restart_failures, last_restart_error) = lock(&p.restart_failures).clone();
    ProxyCounters {
        max_live_jobs: BTreeMap::new(),
        live_jobs: BTreeMap::new(),
        requests: p.book.requests(),
        requests_by_identity: p.requests_by_identity(),
        requests_by_agent: p.book.requests_by_agent(),
        faults: p.book.affected(),
        open_watches,
        silent_watches,
        hung_requests: p.book.hung_requests(),
        restarts: p.book.restarts(),
        restart_failures,
        last_restart_error,
        open_connections: p.net.open_connections() as u64,
    }
}

/// An API-server restart (see the module docs).
fn restart(p: &Arc<Proxy>, conn: ConnTag, r: &Restart) -> Result<RestartReport, Failure> {
    let down = r.down().map_err(Failure::bad)?;
    let hook = p.restart_hook.clone();
    if hook.is_some() && p.restarting.swap(true, Ordering::SeqCst) {
        return Err(Failure(
            409,
            "a restart of the API server is under way".into(),
        ));
    }
    match &hook {
        // Closed until the hook is done (and the downtime over).
        Some(_) => p.net.go_down(Duration::from_secs(
            tcab_api_faults::admin::MAX_DOWN_SECONDS as u64,
        )),
        None if !down.is_zero() => p.net.go_down(down),
        None => {}
    }
    let cut = p.net.cut(Some(conn.id));
    let closed = p.book.close_watches(&WatchScope::default());
    let n = p.book.count_restart();
    tracing::info!(
        restart = n,
        connections_cut = cut,
        down_seconds = r.down_seconds,
        hooked = hook.is_some(),
        "API server restart"
    );
    if let Some(hook) = hook {
        let p = p.clone();
        let started = tokio::time::Instant::now();
        tokio::spawn(async move {
            if let Err(e) = hook().await {
                let msg = format!("{e:#}");
                tracing::error!(error = %msg, "the restart hook failed");
                let mut f = lock(&p.restart_failures);
                f.0 += 1;
                f.1 = Some(msg);
            }
            p.net.go_down(down.saturating_sub(started.elapsed()));
            p.restarting.store(false, Ordering::SeqCst);
        });
    }
    Ok(RestartReport {
        resource_version: String::new(),
        connections_cut: cut as u64,
        watches_closed: closed as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kube_sim_endpoint_beyond_api_faults_names_who_offers_it() {
        for path in [
            "/admin/pods/ns/p/oom",
            "/admin/pods/ns/p/kill",
            "/admin/pods/ns/p/kubelet-evict",
            "/admin/pods/ns/p/evict",
            "/admin/pods/ns/p/delete",
            "/admin/pods/ns/p/preempt",
            "/admin/nodes/n/crash",
            "/admin/nodes/n/restart",
            "/admin/nodes/n/delete",
            "/admin/nodes/n/out-of-service",
            "/admin/images/unpullable",
            "/admin/jobs/never-pod",
            "/admin/watch/compact",
        ] {
            let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
            assert!(offered_elsewhere(&Method::POST, &segs).is_some(), "{path}");
        }
        assert!(offered_elsewhere(&Method::GET, &["admin", "audit"]).is_some());
        assert!(offered_elsewhere(&Method::POST, &["admin", "nope"]).is_none());
        assert!(offered_elsewhere(&Method::GET, &["admin", "pods", "n", "p", "oom"]).is_none());
        assert!(
            offered_elsewhere(&Method::POST, &["admin", "pods", "n", "p", "oom"])
                .unwrap()
                .contains("node agent")
        );
    }

    #[test]
    fn the_counters_read_as_kube_sims() {
        // kube-sim's Counters needs these keys (it has no serde defaults for
        // them); the proxy always sends them.
        let v = serde_json::to_value(ProxyCounters::default()).unwrap();
        for key in [
            "max_live_jobs",
            "live_jobs",
            "requests",
            "faults",
            "restarts",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
    }
}
