//! One request through the proxy: read as the API server reads it, counted,
//! met by the first live fault rule that covers it (if any), and forwarded.

use crate::admin;
use crate::upstream::{ForwardError, Upstream, strip_hop_by_hop};
use crate::watch::{self, WatchScopeOf};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use tcab_api_faults::answers;
use tcab_api_faults::net::{ConnTag, NetControl};
use tcab_api_faults::{FaultAction, FaultBook, RequestAttrs, RequestInfo, Stage};

/// Largest request body a hung request reads, and largest answer a request
/// carried out before its fault (`applied`) reads before dropping it.
const MAX_BODY: usize = 8 << 20;

/// What restarts the API server behind the proxy, called by
/// `POST /admin/restart` once the proxy's port is closed and its
/// connections are cut; the port reopens when it returns (and the asked
/// downtime is over). An `Err` is logged and counted; the port reopens all
/// the same.
pub type RestartHook = Arc<dyn Fn() -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// The proxy's shared state.
pub struct Proxy {
    pub(crate) upstream: Upstream,
    /// Fault rules, open watches, request counters.
    pub(crate) book: Arc<FaultBook>,
    /// Connection cuts and downtime of the proxy's port.
    pub(crate) net: Arc<NetControl>,
    /// Names for bearer tokens in the per-identity counters.
    identities: BTreeMap<String, String>,
    /// Requests by identity, then by `"<verb> <resource>"`.
    by_identity: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    pub(crate) admin_token: Option<String>,
    pub(crate) restart_hook: Option<RestartHook>,
    /// A hooked restart is under way.
    pub(crate) restarting: AtomicBool,
    /// Restarts whose hook failed, with the last error.
    pub(crate) restart_failures: Mutex<(u64, Option<String>)>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Proxy {
    pub(crate) fn new(
        upstream: Upstream,
        identities: BTreeMap<String, String>,
        admin_token: Option<String>,
        restart_hook: Option<RestartHook>,
    ) -> Proxy {
        Proxy {
            upstream,
            book: Arc::new(FaultBook::default()),
            net: Arc::new(NetControl::default()),
            identities,
            by_identity: Mutex::new(BTreeMap::new()),
            admin_token,
            restart_hook,
            restarting: AtomicBool::new(false),
            restart_failures: Mutex::new((0, None)),
        }
    }

    /// The name a token is counted under: its given name, `anonymous`
    /// without one, else `token-` and the first 8 hex digits of its SHA-256
    /// (never the token).
    pub fn identity(&self, token: Option<&str>) -> String {
        match token {
            None => "anonymous".into(),
            Some(t) => match self.identities.get(t) {
                Some(name) => name.clone(),
                None => {
                    let digest = Sha256::digest(t.as_bytes());
                    format!("token-{}", &hex::encode(digest)[..8])
                }
            },
        }
    }

    fn count(&self, verb: &str, resource: &str, token: Option<&str>, agent: Option<&str>) {
        self.book.count_request(verb, resource, agent);
        *lock(&self.by_identity)
            .entry(self.identity(token))
            .or_default()
            .entry(format!("{verb} {resource}"))
            .or_default() += 1;
    }

    /// Requests by identity, then by `"<verb> <resource>"`.
    pub fn requests_by_identity(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        lock(&self.by_identity).clone()
    }

    /// Zeroes the counters (and forgets spent rules).
    pub(crate) fn reset_counters(&self) {
        self.book.reset_requests();
        lock(&self.by_identity).clear();
    }
}

/// The bearer token a request presents, as the API server reads it.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    tcab_api_faults::request::bearer_token(v).map(str::to_string)
}

/// Serves one request: the admin endpoints, or a request for the API
/// server.
pub(crate) async fn handle(
    State(p): State<Arc<Proxy>>,
    ConnectInfo(conn): ConnectInfo<ConnTag>,
    req: Request,
) -> Response {
    let path = req.uri().path();
    if path == "/admin" || path.starts_with("/admin/") {
        return admin::handle(p, conn, req).await;
    }
    let info = RequestInfo::parse(req.method(), path, req.uri().query());
    if !info.is_resource_request {
        // Discovery, /version, health: never faulted nor counted (as in
        // kube-sim, which serves them before its fault rules).
        return match p.upstream.forward(req).await {
            Ok(res) => pass_on(res),
            Err(e) => unreachable_answer(&e),
        };
    }
    let resource = info.resource_path();
    let token = bearer(req.headers());
    let agent = req
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    p.count(&info.verb, &resource, token.as_deref(), agent);
    let attrs = RequestAttrs {
        verb: &info.verb,
        resource: &resource,
        token: token.as_deref(),
    };
    let hit = p.book.take(&attrs, Stage::Arrival);
    let is_watch = info.verb == "watch";
    let mut silenced = false;
    if let Some(hit) = hit {
        if hit.applied {
            return applied_then(&p, req, is_watch, hit.action).await;
        }
        match hit.action {
            FaultAction::Error500 => return answer_of(answers::internal_error()),
            FaultAction::Unavailable(ra) => return answer_of(answers::unavailable(ra)),
            FaultAction::Throttle(ra) => return answer_of(answers::apf_rejection(ra)),
            FaultAction::Delay(d) => tokio::time::sleep(d).await,
            FaultAction::Hang => return answers::hang(&p.book, req.into_body(), MAX_BODY).await,
            FaultAction::Silence => silenced = true,
        }
    }
    let res = match p.upstream.forward(req).await {
        Ok(res) => res,
        Err(e) => return unreachable_answer(&e),
    };
    if is_watch {
        let scope = WatchScopeOf { resource, token };
        watch::relay(p.book.clone(), scope, silenced, res)
    } else {
        pass_on(res)
    }
}

/// A fault that strikes after the request was carried out: the API server
/// does the work, its answer is read and dropped, and the client gets the
/// fault's answer (or none).
async fn applied_then(p: &Proxy, req: Request, is_watch: bool, action: FaultAction) -> Response {
    if let Ok(res) = p.upstream.forward(req).await
        && !is_watch
    {
        let _ = http_body_util::Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await;
    }
    match action {
        FaultAction::Hang => answers::hang(&p.book, Body::empty(), 0).await,
        FaultAction::Unavailable(ra) => answer_of(answers::unavailable(ra)),
        _ => answer_of(answers::internal_error()),
    }
}

/// The API server's answer, streamed on.
fn pass_on(res: http::Response<hyper::body::Incoming>) -> Response {
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
}

fn answer_of(res: http::Response<Bytes>) -> Response {
    res.map(Body::from)
}

/// The API server could not be reached: 503 with a Status saying so.
fn unreachable_answer(e: &ForwardError) -> Response {
    tracing::warn!(error = %e, "forwarding to the API server failed");
    let body = answers::status_json(
        503,
        "ServiceUnavailable",
        &format!("the fault proxy could not reach the API server: {e}"),
        None,
    );
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::UpstreamOptions;

    fn proxy() -> Proxy {
        let up = Upstream::new(&UpstreamOptions {
            url: "http://127.0.0.1:1".into(),
            ca_pem: None,
        })
        .unwrap();
        Proxy::new(
            up,
            BTreeMap::from([("secret".to_string(), "dispatcher".to_string())]),
            None,
            None,
        )
    }

    #[test]
    fn identities_are_named_never_shown() {
        let p = proxy();
        assert_eq!(p.identity(Some("secret")), "dispatcher");
        assert_eq!(p.identity(None), "anonymous");
        let other = p.identity(Some("other-token"));
        assert!(other.starts_with("token-") && other.len() == 14, "{other}");
        assert!(!other.contains("other"));
        p.count("list", "jobs", Some("secret"), None);
        p.count("list", "jobs", Some("secret"), None);
        p.count("get", "pods/log", None, None);
        let by = p.requests_by_identity();
        assert_eq!(by["dispatcher"]["list jobs"], 2);
        assert_eq!(by["anonymous"]["get pods/log"], 1);
        assert_eq!(p.book.requests()["list jobs"], 2);
        p.reset_counters();
        assert!(p.requests_by_identity().is_empty() && p.book.requests().is_empty());
    }

    #[test]
    fn bearer_tokens_are_read_as_the_api_server_reads_them() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, v.parse().unwrap());
            bearer(&m)
        };
        assert_eq!(h("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(h("bearer abc extra").as_deref(), Some("abc"));
        assert_eq!(h("Basic abc"), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
