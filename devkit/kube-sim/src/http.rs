//! The HTTP API: request attributes, RBAC, fault injection, counters, and
//! the handlers for Jobs, Pods, pod logs, watches and discovery.

use crate::admin;
use crate::discovery;
use crate::faults::FaultAction;
use crate::objects::{self, ensure_object};
use crate::rbac::{Attributes, Rbac};
use crate::selector::{FieldSelector, LabelSelector};
use crate::sim::{Propagation, Sim};
use crate::status::ApiError;
use crate::store::{Event, Key, Kind};
use crate::table::{self, IncludeObject};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// Largest request body accepted.
const MAX_BODY: usize = 8 << 20;

/// State of the HTTP layer.
#[derive(Clone)]
pub struct AppState {
    /// The sim.
    pub sim: Arc<Sim>,
    /// `host:port` the server listens on.
    pub addr: String,
}

/// Builds the router.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut res = (code, json_body(&self.to_status())).into_response();
        if let Some(s) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        res
    }
}

fn json_body(v: &Value) -> ([(header::HeaderName, &'static str); 1], String) {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string())
}

fn ok(code: StatusCode, v: &Value) -> Response {
    (code, json_body(v)).into_response()
}

/// What a resource request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// Kubernetes verb.
    pub verb: &'static str,
    /// Jobs or Pods.
    pub kind: Kind,
    /// Namespace (`None` = all namespaces).
    pub ns: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource (`log`, `status`, `eviction`).
    pub subresource: Option<String>,
}

impl ReqInfo {
    /// `pods`, `pods/log`, `jobs`, ...
    pub fn resource_path(&self) -> String {
        match &self.subresource {
            Some(s) => format!("{}/{s}", self.kind.resource()),
            None => self.kind.resource().to_string(),
        }
    }
}

/// Parses the path and method of a resource request; `None` when the path
/// is not a Job or Pod path.
pub fn parse_request(method: &Method, path: &str, watch: bool) -> Option<ReqInfo> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    type KindOf = fn(&str) -> Option<Kind>;
    let (group_ok, rest): (KindOf, &[&str]) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => (|r| (r == "pods").then_some(Kind::Pod), rest),
        ["apis", "batch", "v1", rest @ ..] => (|r| (r == "jobs").then_some(Kind::Job), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let (kind, name, sub) = match rest {
        [r] => (group_ok(r)?, None, None),
        [r, n] if ns.is_some() => (group_ok(r)?, Some(n.to_string()), None),
        [r, n, s] if ns.is_some() => (group_ok(r)?, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    let verb = match (method.as_str(), name.is_some(), watch) {
        ("GET", true, true) | ("GET", false, true) => "watch",
        ("GET", true, false) => "get",
        ("GET", false, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", true, _) => "update",
        ("PATCH", true, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => return None,
    };
    Some(ReqInfo {
        verb,
        kind,
        ns,
        name,
        subresource: sub,
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

type Query = HashMap<String, String>;

fn query_of(req: &Request) -> Query {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|q| q.0.into_iter().collect())
        .unwrap_or_default()
}

async fn handle(State(app): State<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if path == "/admin" || path.starts_with("/admin/") {
        return admin::handle(app, req).await;
    }
    let method = req.method().clone();
    if method == Method::GET
        && let Some(doc) = discovery_doc(&app, &path)
    {
        return ok(StatusCode::OK, &doc);
    }
    match handle_resource(app, req, &path).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn discovery_doc(app: &AppState, path: &str) -> Option<Value> {
    let p = path.trim_end_matches('/');
    Some(match p {
        "/version" => discovery::version(),
        "/api" => discovery::api(&app.addr),
        "/apis" => discovery::apis(),
        "/apis/batch" => discovery::batch(),
        "/api/v1" => discovery::core_v1(),
        "/apis/batch/v1" => discovery::batch_v1(),
        "/healthz" | "/readyz" | "/livez" => return None,
        "/api/v1/namespaces" => {
            let mut names: std::collections::BTreeSet<String> =
                ["default".to_string(), app.sim.namespace.clone()]
                    .into_iter()
                    .collect();
            for kind in [Kind::Job, Kind::Pod] {
                for o in app.sim.store.list(kind, None, |_| true).1 {
                    names.insert(
                        o["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                    );
                }
            }
            json!({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                "items": names.iter().map(|n| discovery::namespace(n)).collect::<Vec<_>>()})
        }
        _ => {
            let ns = p.strip_prefix("/api/v1/namespaces/")?;
            if ns.contains('/') {
                return None;
            }
            discovery::namespace(ns)
        }
    })
}

async fn handle_resource(app: AppState, req: Request, path: &str) -> Result<Response, ApiError> {
    let q = query_of(&req);
    if path.trim_end_matches('/') == "/healthz" || path == "/readyz" || path == "/livez" {
        return Ok((StatusCode::OK, "ok").into_response());
    }
    let is_watch = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    let info =
        parse_request(req.method(), path, is_watch).ok_or_else(|| ApiError::no_route(path))?;
    let sim = app.sim.clone();
    let ns_label = info.ns.clone().unwrap_or_default();
    if let Some(rbac) = &sim.rbac
        && bearer(req.headers()) == Some(rbac.token.as_str())
    {
        let attrs = Attributes {
            verb: info.verb,
            group: info.kind.group(),
            resource: info.kind.resource(),
            subresource: info.subresource.as_deref(),
            name: info.name.as_deref(),
            namespace: &ns_label,
        };
        if !rbac.allows(&attrs) {
            return Err(ApiError::forbidden(Rbac::forbidden_message(&attrs)));
        }
    }
    let resource = info.resource_path();
    sim.faults.count_request(info.verb, &resource);
    match sim.faults.take_api_fault(info.verb, &resource) {
        Some(FaultAction::Fail(e)) => return Err(e),
        Some(FaultAction::Delay(d)) => tokio::time::sleep(d).await,
        None => {}
    }
    let table = wants_table(req.headers());
    let include = IncludeObject::parse(q.get("includeObject").map(String::as_str));
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
    let kind = info.kind;
    let ns = info.ns.clone();
    let view = View {
        sim: &sim,
        table,
        include,
    };
    match (info.verb, info.name.as_deref(), info.subresource.as_deref()) {
        ("list", None, None) => list(&view, kind, ns.as_deref(), &q),
        ("watch", _, None) => watch(&sim, kind, ns, info.name.clone(), &q, table, include),
        ("get", Some(name), None | Some("status")) => {
            let obj = sim
                .store
                .get(&Key::new(kind, &ns.unwrap_or_default(), name))
                .ok_or_else(|| kind.not_found(name))?;
            Ok(view.one(kind, &obj, StatusCode::OK))
        }
        ("get", Some(name), Some("log")) if kind == Kind::Pod => {
            logs(&sim, &ns.unwrap_or_default(), name, &q)
        }
        ("create", None, None) => {
            let ns = ns.ok_or_else(|| ApiError::method_not_allowed("create needs a namespace"))?;
            let mut obj = parse_body(&body)?;
            check_body_identity(&mut obj, kind, &ns, None)?;
            let created = match kind {
                Kind::Job => sim.create_job(&ns, obj)?,
                Kind::Pod => sim.create_pod(&ns, obj)?,
            };
            Ok(view.one(kind, &created, StatusCode::CREATED))
        }
        ("create", Some(name), Some("eviction")) if kind == Kind::Pod => {
            sim.evict(&ns.unwrap_or_default(), name)?;
            Ok(ok(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        ("update", Some(name), sub @ (None | Some("status"))) => {
            let ns = ns.unwrap_or_default();
            let mut obj = parse_body(&body)?;
            check_body_identity(&mut obj, kind, &ns, Some(name))?;
            let updated = replace(&sim, kind, &ns, name, obj, sub.is_some())?;
            Ok(view.one(kind, &updated, StatusCode::OK))
        }
        ("patch", Some(name), sub @ (None | Some("status"))) => {
            let ns = ns.unwrap_or_default();
            let patched = patch(&sim, kind, &ns, name, &content_type, &body, sub.is_some())?;
            Ok(view.one(kind, &patched, StatusCode::OK))
        }
        ("delete", Some(name), None) => {
            let ns = ns.unwrap_or_default();
            let opts = DeleteOpts::read(&body, &q)?;
            let gone = delete_one(&sim, kind, &ns, name, &opts)?;
            Ok(ok(StatusCode::OK, &gone))
        }
        ("deletecollection", None, None) => {
            let ns = ns.ok_or_else(|| {
                ApiError::method_not_allowed("deletecollection needs a namespace")
            })?;
            let opts = DeleteOpts::read(&body, &q)?;
            let (label, field) = selectors(kind, &q)?;
            let (rv, victims) = sim
                .store
                .list(kind, Some(&ns), |o| label.matches(o) && field.matches(o));
            let mut items = Vec::new();
            for v in victims {
                if let Ok(gone) = delete_one(&sim, kind, &ns, objects::name(&v), &opts) {
                    items.push(gone);
                }
            }
            Ok(ok(
                StatusCode::OK,
                &json!({"kind": format!("{}List", kind.kind()), "apiVersion": kind.api_version(),
                "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {}",
            info.verb, resource
        ))),
    }
}

struct View<'a> {
    sim: &'a Sim,
    table: bool,
    include: IncludeObject,
}

impl View<'_> {
    fn one(&self, kind: Kind, obj: &Value, code: StatusCode) -> Response {
        if self.table {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            ok(
                code,
                &table::table(&self.sim.clock, kind, [obj], rv, None, self.include),
            )
        } else {
            ok(code, obj)
        }
    }
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

fn check_body_identity(
    obj: &mut Value,
    kind: Kind,
    ns: &str,
    name: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(k) = obj["kind"].as_str()
        && k != kind.kind()
    {
        return Err(ApiError::bad_request(format!(
            "the kind {k:?} does not match the resource {}",
            kind.resource()
        )));
    }
    let md = ensure_object(&mut obj["metadata"]);
    if let Some(n) = md.get("namespace").and_then(Value::as_str)
        && !n.is_empty()
        && n != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if let Some(name) = name
        && md
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n != name)
    {
        return Err(ApiError::bad_request(
            "the name of the object does not match the name on the URL",
        ));
    }
    Ok(())
}

fn selectors(kind: Kind, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let field = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        kind.resource(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((label, field))
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A continue token: the list's resourceVersion, then the last key sent.
fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    hex(&format!("{rv}\u{0}{ns}\u{0}{name}"))
}

fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    let s = unhex(token)?;
    let mut parts = s.split('\u{0}');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

fn list(view: &View<'_>, kind: Kind, ns: Option<&str>, q: &Query) -> Result<Response, ApiError> {
    let sim = view.sim;
    let (label, field) = selectors(kind, q)?;
    let limit: Option<usize> = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0);
    let after = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let (rv, cns, cname) = decode_continue(c)
                .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
            sim.store.check_not_expired(rv)?;
            Some((rv, cns, cname))
        }
        None => None,
    };
    if q.get("resourceVersionMatch").map(String::as_str) == Some("Exact")
        && let Some(rv) = q.get("resourceVersion").and_then(|r| r.parse::<u64>().ok())
        && rv != sim.store.rv()
    {
        return Err(ApiError::expired(rv));
    }
    let (store_rv, items) = sim.store.list(kind, ns, |o| {
        if let Some((_, cns, cname)) = &after {
            let ons = o["metadata"]["namespace"].as_str().unwrap_or("");
            if (ons, objects::name(o)) <= (cns.as_str(), cname.as_str()) {
                return false;
            }
        }
        label.matches(o) && field.matches(o)
    });
    let rv = after.as_ref().map_or(store_rv, |(rv, _, _)| *rv);
    let (page, cont, remaining) = match limit {
        Some(l) if items.len() > l => {
            let last = &items[l - 1];
            let token = encode_continue(
                rv,
                last["metadata"]["namespace"].as_str().unwrap_or(""),
                objects::name(last),
            );
            (&items[..l], Some(token), Some(items.len() - l))
        }
        _ => (&items[..], None, None),
    };
    if view.table {
        let t = table::table(
            &sim.clock,
            kind,
            page.iter().map(|a| &**a),
            rv,
            cont,
            view.include,
        );
        return Ok(ok(StatusCode::OK, &t));
    }
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        md["continue"] = json!(c);
        md["remainingItemCount"] = json!(remaining);
    }
    // Serialize by hand so 10,000 items are not cloned into one Value.
    let mut out = String::with_capacity(page.len() * 1024 + 128);
    out.push_str(&format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        kind.kind(),
        kind.api_version(),
        md
    ));
    for (i, item) in page.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item.to_string());
    }
    out.push_str("]}");
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}

fn event_line(etype: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": etype, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn watch(
    sim: &Arc<Sim>,
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    q: &Query,
    table: bool,
    include: IncludeObject,
) -> Result<Response, ApiError> {
    let (label, mut field) = selectors(kind, q)?;
    if let Some(n) = name {
        field = FieldSelector::parse(&format!("metadata.name={n}"), kind.resource())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let bookmarks = matches!(
        q.get("allowWatchBookmarks").map(String::as_str),
        Some("true" | "1")
    );
    let initial_events = matches!(
        q.get("sendInitialEvents").map(String::as_str),
        Some("true" | "1")
    );
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let from = if initial_events { None } else { from };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let start = sim.store.watch(kind, ns.as_deref(), from);
    let sim = sim.clone();
    tokio::spawn(async move {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Ok(event_line("ERROR", &e.to_status()))).await;
                return;
            }
        };
        let matches = |ev: &Event| {
            ev.key.kind == kind
                && ns.as_deref().is_none_or(|n| ev.key.ns == n)
                && label.matches(&ev.object)
                && field.matches(&ev.object)
        };
        let render = |ev: &Event| -> Bytes {
            if table {
                let rv = ev.rv;
                event_line(
                    ev.etype.as_str(),
                    &table::table(&sim.clock, kind, [&*ev.object], rv, None, include),
                )
            } else {
                event_line(ev.etype.as_str(), &ev.object)
            }
        };
        let bookmark = |rv: u64, end: bool| {
            let mut md = json!({"resourceVersion": rv.to_string()});
            if end {
                md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                &json!({"kind": kind.kind(), "apiVersion": kind.api_version(), "metadata": md}),
            )
        };
        let mut seen = start.start_rv;
        for ev in start.initial.iter().filter(|e| matches(e)) {
            if tx.send(Ok(render(ev))).await.is_err() {
                return;
            }
        }
        if initial_events && bookmarks && tx.send(Ok(bookmark(seen, true))).await.is_err() {
            return;
        }
        let mut live = start.rx;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(
            sim.clock
                .real(sim.timing.bookmark_interval)
                .max(Duration::from_millis(10)),
        );
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = &mut deadline => {
                    if bookmarks {
                        let _ = tx.send(Ok(bookmark(seen, false))).await;
                    }
                    return;
                }
                _ = tick.tick(), if bookmarks => {
                    if tx.send(Ok(bookmark(seen, false))).await.is_err() {
                        return;
                    }
                }
                ev = live.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= seen {
                            continue;
                        }
                        seen = ev.rv;
                        if matches(&ev) && tx.send(Ok(render(&ev))).await.is_err() {
                            return;
                        }
                    }
                    // A watcher too slow to keep up is closed; the client resumes.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut res = Response::new(Body::from_stream(stream));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(res)
}

/// The last `tail` lines (all of them when `None`).
fn tail_of(lines: &[String], tail: Option<usize>) -> &[String] {
    match tail {
        Some(n) => &lines[lines.len().saturating_sub(n)..],
        None => lines,
    }
}

/// Log lines as the response text: each ends with a newline.
fn log_text(lines: &[String]) -> String {
    lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect()
}

fn logs(sim: &Arc<Sim>, ns: &str, name: &str, q: &Query) -> Result<Response, ApiError> {
    let pod = sim
        .store
        .get(&Key::new(Kind::Pod, ns, name))
        .ok_or_else(|| Kind::Pod.not_found(name))?;
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let container = match q.get("container") {
        Some(c) if containers.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    if pod["status"]["containerStatuses"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    let tail = q
        .get("tailLines")
        .and_then(|t| t.parse::<i64>().ok())
        .map(|t| t.max(0) as usize);
    // One read gives both the text sent now and where following resumes, so
    // a line appended meanwhile is neither lost nor sent twice.
    let all = sim.store.read_log(ns, name, &container, None);
    let text = log_text(tail_of(&all, tail));
    let follow = matches!(q.get("follow").map(String::as_str), Some("true" | "1"));
    if !follow {
        return Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response());
    }
    // Follow: send what is there, then new lines until the container stops.
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let sim = sim.clone();
    let (ns, name) = (ns.to_string(), name.to_string());
    let mut sent = all.len();
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(text))).await.is_err() {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Whether it runs is read before the log: the lines a container
            // writes before it stops are all in the read that follows.
            let running = sim
                .pods
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&Key::new(Kind::Pod, &ns, &name));
            let all = sim.store.read_log(&ns, &name, &container, None);
            let chunk = log_text(all.get(sent..).unwrap_or_default());
            sent = sent.max(all.len());
            if !chunk.is_empty() && tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                return;
            }
            if !running || tx.is_closed() {
                return;
            }
        }
    });
    let mut res = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(res)
}

/// Options of a delete call, from the body (DeleteOptions) and the query.
#[derive(Debug, Default)]
struct DeleteOpts {
    propagation: Option<Propagation>,
    grace: Option<i64>,
}

impl DeleteOpts {
    fn read(body: &Bytes, q: &Query) -> Result<Self, ApiError> {
        let v: Value = if body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
            })?
        };
        let policy = v["propagationPolicy"]
            .as_str()
            .map(str::to_string)
            .or_else(|| q.get("propagationPolicy").cloned());
        let propagation = match policy.as_deref() {
            None => match v["orphanDependents"].as_bool() {
                Some(true) => Some(Propagation::Orphan),
                Some(false) => Some(Propagation::Background),
                None => None,
            },
            Some("Orphan") => Some(Propagation::Orphan),
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "unknown propagationPolicy {other:?}"
                )));
            }
        };
        let grace = v["gracePeriodSeconds"]
            .as_i64()
            .or_else(|| q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()));
        Ok(DeleteOpts { propagation, grace })
    }
}

fn delete_one(
    sim: &Arc<Sim>,
    kind: Kind,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Value, ApiError> {
    let gone = match kind {
        // batch/v1 Jobs orphan their pods unless told otherwise, as on a real server.
        Kind::Job => sim.delete_job(ns, name, opts.propagation.unwrap_or(Propagation::Orphan))?,
        Kind::Pod => sim.delete_pod(ns, name, opts.grace)?,
    };
    Ok((*gone).clone())
}

/// Fields of metadata a client may change with update/patch.
const MUTABLE_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

fn replace(
    sim: &Sim,
    kind: Kind,
    ns: &str,
    name: &str,
    new: Value,
    status_only: bool,
) -> Result<std::sync::Arc<Value>, ApiError> {
    let key = Key::new(kind, ns, name);
    sim.store.update(&key, |cur| {
        if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
            && cur["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::conflict(
                kind.group(),
                kind.resource(),
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        apply_changes(cur, &new, status_only);
        Ok(true)
    })
}

fn apply_changes(cur: &mut Value, new: &Value, status_only: bool) {
    if status_only {
        cur["status"] = new["status"].clone();
        return;
    }
    for k in MUTABLE_METADATA {
        let v = &new["metadata"][k];
        match ensure_object(&mut cur["metadata"]) {
            m if v.is_null() => {
                m.remove(k);
            }
            m => {
                m.insert(k.to_string(), v.clone());
            }
        }
    }
    if !new["spec"].is_null() {
        cur["spec"] = new["spec"].clone();
    }
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            let t = ensure_object(target);
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn patch(
    sim: &Sim,
    kind: Kind,
    ns: &str,
    name: &str,
    ct: &str,
    body: &Bytes,
    status_only: bool,
) -> Result<std::sync::Arc<Value>, ApiError> {
    let ct = ct.split(';').next().unwrap_or("").trim();
    if ct != "application/merge-patch+json" && ct != "application/strategic-merge-patch+json" {
        return Err(ApiError::unsupported_media(ct));
    }
    let p = parse_body(body)?;
    let key = Key::new(kind, ns, name);
    sim.store.update(&key, |cur| {
        let mut next = cur.clone();
        merge_patch(&mut next, &p);
        let before = cur.clone();
        apply_changes(cur, &next, status_only);
        Ok(*cur != before)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_info() {
        let i = parse_request(&Method::GET, "/apis/batch/v1/namespaces/ns/jobs", false).unwrap();
        assert_eq!(
            (i.verb, i.kind, i.ns.as_deref()),
            ("list", Kind::Job, Some("ns"))
        );
        let i = parse_request(&Method::GET, "/api/v1/namespaces/ns/pods/p/log", false).unwrap();
        assert_eq!((i.verb, i.resource_path().as_str()), ("get", "pods/log"));
        assert_eq!(
            parse_request(&Method::GET, "/api/v1/pods", true)
                .unwrap()
                .verb,
            "watch"
        );
        assert_eq!(
            parse_request(&Method::DELETE, "/api/v1/namespaces/ns/pods", false)
                .unwrap()
                .verb,
            "deletecollection"
        );
        assert!(parse_request(&Method::GET, "/api/v1/namespaces/ns/jobs", false).is_none());
        assert!(
            parse_request(
                &Method::GET,
                "/apis/apps/v1/namespaces/ns/deployments",
                false
            )
            .is_none()
        );
    }

    #[test]
    fn log_tail_and_text() {
        let lines: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(tail_of(&lines, None), &lines[..]);
        assert_eq!(tail_of(&lines, Some(2)), &lines[1..]);
        assert_eq!(tail_of(&lines, Some(9)), &lines[..]);
        assert!(tail_of(&lines, Some(0)).is_empty());
        assert_eq!(log_text(&lines), "a\nb\nc\n");
        assert_eq!(log_text(&[]), "");
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "ns", "job-1");
        assert_eq!(decode_continue(&t), Some((42, "ns".into(), "job-1".into())));
        assert_eq!(decode_continue("zz"), None);
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut t, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(t, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
