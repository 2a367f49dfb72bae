//! The HTTP API: request attributes, RBAC, fault injection, counters, and
//! routing of requests for every [`Kind`] to `list`, `watch`, `logs`
//! and [`write`], and discovery.

mod dryrun;
mod fields;
mod list;
mod logs;
pub mod params;
mod protobuf;
mod smp;
mod watch;
mod write;

use crate::admin;
use crate::audit::{ACTOR, Actor};
use crate::discovery;
use crate::faults::{FaultAction, RequestAttrs, Stage, answers};
use crate::objects::{self, ensure_object};
use crate::rbac::{Attributes, Rbac};
use crate::selector::{FieldSelector, LabelSelector};
use crate::sim::Sim;
use crate::status::ApiError;
use crate::store::{Key, Kind};
use crate::table::{self, IncludeObject};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use tcab_api_faults::RequestInfo;

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
    /// The kind the path names.
    pub kind: Kind,
    /// Namespace (`None` = all namespaces, or a cluster-scoped kind).
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

/// Reads a resource request as the API server does
/// ([`RequestInfo::parse`], shared with the fault proxy, so faults are scoped
/// alike); `None` when it names no resource and verb the sim serves.
pub fn parse_request(method: &Method, path: &str, query: Option<&str>) -> Option<ReqInfo> {
    let info = RequestInfo::parse(method, path, query);
    if !info.is_resource_request || info.parts.len() > 3 {
        return None;
    }
    let kind = Kind::from_resource(&info.api_group, &info.api_version, &info.resource)?;
    let ns = info.namespace;
    // The name in the path (a field selector's name is for authorization).
    let name = info.parts.get(1).cloned();
    // A cluster-scoped kind is never under a namespace; a namespaced object
    // is named only under its namespace.
    if (!kind.namespaced() && ns.is_some()) || (kind.namespaced() && name.is_some() && ns.is_none())
    {
        return None;
    }
    let verb = match (info.verb.as_str(), name.is_some()) {
        ("watch", _) => "watch",
        ("get", true) => "get",
        ("list", false) => "list",
        ("create", _) => "create",
        ("update", true) => "update",
        ("patch", true) => "patch",
        ("delete", true) => "delete",
        ("deletecollection", false) => "deletecollection",
        _ => return None,
    };
    Some(ReqInfo {
        verb,
        kind,
        ns,
        name,
        subresource: info.subresource,
    })
}

/// The bearer token, as the API server's authenticator reads it.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    tcab_api_faults::request::bearer_token(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

type Query = HashMap<String, String>;

/// The query parameters; a repeated one keeps its first value, as upstream's
/// parameter conversion reads it.
fn query_of(req: &Request) -> Query {
    let mut q = Query::new();
    if let Ok(pairs) = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(req.uri()) {
        for (k, v) in pairs.0 {
            q.entry(k).or_insert(v);
        }
    }
    q
}

async fn handle(State(app): State<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if path == "/admin" || path.starts_with("/admin/") {
        return ACTOR.scope(Actor::Admin, admin::handle(app, req)).await;
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
        "/apis/events.k8s.io" => discovery::events(),
        "/apis/events.k8s.io/v1" => discovery::events_v1(),
        "/openapi/v3" => crate::openapi::root(),
        _ if p.starts_with("/openapi/v3/") => {
            crate::openapi::group_version(&p["/openapi/v3/".len()..])?
        }
        "/healthz" | "/readyz" | "/livez" => return None,
        "/api/v1/namespaces" => {
            let mut names: std::collections::BTreeSet<String> =
                ["default".to_string(), app.sim.namespace.clone()]
                    .into_iter()
                    .collect();
            for kind in Kind::ALL.into_iter().filter(|k| k.namespaced()) {
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
    let info = parse_request(req.method(), path, req.uri().query())
        .ok_or_else(|| ApiError::no_route(path))?;
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
    let agent = req
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    sim.faults.book.count_request(info.verb, &resource, agent);
    let token = bearer(req.headers()).map(str::to_string);
    let attrs = RequestAttrs {
        verb: info.verb,
        resource: &resource,
        token: token.as_deref(),
    };
    let mut silenced = false;
    let mut after = None;
    match sim.faults.book.take(&attrs, Stage::Arrival) {
        Some(hit) if hit.applied => after = Some(hit.action),
        Some(hit) => match hit.action {
            FaultAction::Error500 => return Ok(answer_of(answers::internal_error())),
            FaultAction::Unavailable(retry_after) => {
                return Ok(answer_of(answers::unavailable(retry_after)));
            }
            FaultAction::Throttle(retry_after) => {
                return Ok(answer_of(answers::apf_rejection(retry_after)));
            }
            FaultAction::Delay(d) => tokio::time::sleep(d).await,
            FaultAction::Hang => {
                return Ok(answers::hang(&sim.faults.book, req.into_body(), MAX_BODY).await);
            }
            FaultAction::Silence => silenced = true,
        },
        None => {}
    }
    let actor = match token.as_deref() {
        None => Actor::Anonymous,
        Some(t) if sim.rbac.as_ref().is_some_and(|r| r.token == t) => Actor::Rbac,
        Some(t) if t == sim.admin_token => Actor::Admin,
        Some(_) => Actor::Unknown,
    };
    let fault = Faulted {
        resource,
        token,
        silenced,
    };
    let answer = ACTOR
        .scope(actor, serve_resource(sim.clone(), info, q, req, fault))
        .await;
    // A fault that strikes after the request was carried out: its effect
    // stays, its answer is replaced or lost.
    match after {
        None => answer,
        Some(FaultAction::Unavailable(retry_after)) => {
            Ok(answer_of(answers::unavailable(retry_after)))
        }
        Some(FaultAction::Hang) => {
            drop(answer);
            Ok(answers::hang(&sim.faults.book, axum::body::Body::empty(), 0).await)
        }
        Some(_) => Ok(answer_of(answers::internal_error())),
    }
}

/// A fault's answer as the server sends it.
fn answer_of(res: axum::http::Response<Bytes>) -> Response {
    res.map(axum::body::Body::from)
}

/// What the fault decision left for serving the request.
struct Faulted {
    resource: String,
    token: Option<String>,
    silenced: bool,
}

async fn serve_resource(
    sim: Arc<Sim>,
    info: ReqInfo,
    q: Query,
    req: Request,
    fault: Faulted,
) -> Result<Response, ApiError> {
    let Faulted {
        resource,
        token,
        silenced,
    } = fault;
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
    // events.k8s.io/v1 is a view of the core Events: created, listed and
    // read here, nothing else.
    if kind == Kind::EventV1 && !matches!(info.verb, "create" | "list" | "get") {
        return Err(ApiError::method_not_allowed(format!(
            "kube-sim serves only create, list and get on {}.events.k8s.io",
            resource
        )));
    }
    match (info.verb, info.name.as_deref(), info.subresource.as_deref()) {
        ("list", None, None) if kind == Kind::EventV1 => {
            list::list_events_v1(&view, ns.as_deref(), &q)
        }
        ("get", Some(name), None) if kind == Kind::EventV1 => {
            let obj = sim
                .store
                .get(&Key::new(Kind::Event, &ns.unwrap_or_default(), name))
                .ok_or_else(|| kind.not_found(name))?;
            Ok(view.one(kind, &crate::events_v1::from_core(&obj), StatusCode::OK))
        }
        ("list", None, None) => list::list(&view, kind, ns.as_deref(), &q),
        ("watch", _, None) => watch::watch(
            &sim,
            watch::WatchRequest {
                kind,
                ns,
                name: info.name.clone(),
                table,
                include,
                resource,
                token,
                silenced,
            },
            &q,
        ),
        ("get", Some(name), None | Some("status")) => {
            let obj = sim
                .store
                .get(&Key::new(kind, &ns.unwrap_or_default(), name))
                .ok_or_else(|| kind.not_found(name))?;
            Ok(view.one(kind, &obj, StatusCode::OK))
        }
        ("get", Some(name), Some("log")) if kind == Kind::Pod => {
            logs::logs(&sim, &ns.unwrap_or_default(), name, &q)
        }
        ("create", None, None) => {
            let ns = match ns {
                Some(ns) => ns,
                None if !kind.namespaced() => String::new(),
                None => return Err(ApiError::method_not_allowed("create needs a namespace")),
            };
            let opts = params::WriteOptions::from_query(&q, "CreateOptions")?;
            let mut obj = if content_type.starts_with(protobuf::MEDIA_TYPE) {
                protobuf::decode(kind, &body)?
            } else {
                parse_body(&body)?
            };
            check_body_identity(&mut obj, kind, &ns, None)?;
            let mut warnings = fields::check_body(kind, &mut obj, opts.field_validation)?;
            warnings.extend(crate::validation::warnings(kind, &obj));
            let created = match (opts.dry_run, kind) {
                (dry_run, Kind::EventV1) => Arc::new(sim.create_event_v1(&ns, obj, dry_run)?),
                (true, _) => Arc::new(dryrun::create(&sim, kind, &ns, obj)?),
                (false, Kind::Job) => sim.create_job(&ns, obj)?,
                (false, Kind::Pod) => sim.create_pod(&ns, obj)?,
                (false, _) => sim.create_object(kind, &ns, obj)?,
            };
            Ok(params::with_warnings(
                view.one(kind, &created, StatusCode::CREATED),
                &warnings,
            ))
        }
        ("create", Some(name), Some("eviction")) if kind == Kind::Pod => {
            let ns = ns.unwrap_or_default();
            let opts = params::WriteOptions::from_query(&q, "CreateOptions")?;
            let eviction = params::EvictionOpts::read(&body, name, opts.dry_run)?;
            let pod = sim
                .store
                .get(&Key::new(Kind::Pod, &ns, name))
                .ok_or_else(|| kind.not_found(name))?;
            eviction.preconditions.check(Kind::Pod, &pod)?;
            if !eviction.dry_run {
                sim.evict(&ns, name)?;
            }
            Ok(ok(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        ("update", Some(name), sub @ (None | Some("status"))) => {
            let ns = ns.unwrap_or_default();
            let opts = params::WriteOptions::from_query(&q, "UpdateOptions")?;
            let mut obj = parse_body(&body)?;
            check_body_identity(&mut obj, kind, &ns, Some(name))?;
            let mut warnings = fields::check_body(kind, &mut obj, opts.field_validation)?;
            if sub.is_none() {
                warnings.extend(crate::validation::warnings(kind, &obj));
            }
            let updated = write::replace(&sim, kind, &ns, name, obj, sub.is_some(), opts)?;
            Ok(params::with_warnings(
                view.one(kind, &updated, StatusCode::OK),
                &warnings,
            ))
        }
        ("patch", Some(name), sub @ (None | Some("status"))) => {
            let ns = ns.unwrap_or_default();
            let opts = params::WriteOptions::from_query(&q, "PatchOptions")?;
            let (patched, warnings) = write::patch(
                &sim,
                kind,
                &ns,
                name,
                &content_type,
                &body,
                sub.is_some(),
                opts,
            )?;
            Ok(params::with_warnings(
                view.one(kind, &patched, StatusCode::OK),
                &warnings,
            ))
        }
        ("delete", Some(name), None) => {
            let ns = ns.unwrap_or_default();
            let opts = params::DeleteOpts::read(&body, &q)?;
            let gone = write::delete_one(&sim, kind, &ns, name, &opts)?;
            Ok(ok(StatusCode::OK, &write::delete_answer(kind, &gone)))
        }
        ("deletecollection", None, None) => {
            let ns = match ns {
                Some(ns) => ns,
                None if !kind.namespaced() => String::new(),
                None => {
                    return Err(ApiError::method_not_allowed(
                        "deletecollection needs a namespace",
                    ));
                }
            };
            let opts = params::DeleteOpts::read(&body, &q)?;
            let (label, field) = selectors(kind, &q)?;
            let scope = kind.namespaced().then_some(ns.as_str());
            let (rv, victims) = sim
                .store
                .list(kind, scope, |o| label.matches(o) && field.matches(o));
            // Each item is deleted as a delete of it would be (preconditions
            // included); the first failure other than NotFound is the answer.
            let mut failed = None;
            for v in &victims {
                match write::delete_one(&sim, kind, &ns, objects::name(v), &opts) {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
            // The answer is the list as it was read before the deletes
            // (`Store.DeleteCollection` returns its list), not their results.
            let items: Vec<&Value> = victims.iter().map(|v| &**v).collect();
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
        && kind.namespaced()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_info() {
        let i = parse_request(&Method::GET, "/apis/batch/v1/namespaces/ns/jobs", None).unwrap();
        assert_eq!(
            (i.verb, i.kind, i.ns.as_deref()),
            ("list", Kind::Job, Some("ns"))
        );
        let i = parse_request(&Method::GET, "/api/v1/namespaces/ns/pods/p/log", None).unwrap();
        assert_eq!((i.verb, i.resource_path().as_str()), ("get", "pods/log"));
        assert_eq!(
            parse_request(&Method::GET, "/api/v1/pods", Some("watch=true"))
                .unwrap()
                .verb,
            "watch"
        );
        assert_eq!(
            parse_request(&Method::DELETE, "/api/v1/namespaces/ns/pods", None)
                .unwrap()
                .verb,
            "deletecollection"
        );
        assert!(parse_request(&Method::GET, "/api/v1/namespaces/ns/jobs", None).is_none());
        let i = parse_request(&Method::GET, "/api/v1/nodes/n1", None).unwrap();
        assert_eq!(
            (i.kind, i.ns, i.name.as_deref()),
            (Kind::Node, None, Some("n1"))
        );
        assert!(parse_request(&Method::GET, "/api/v1/namespaces/ns/nodes", None).is_none());
        assert!(parse_request(&Method::GET, "/api/v1/secrets/s", None).is_none());
        let i = parse_request(
            &Method::GET,
            "/api/v1/namespaces/ns/events",
            Some("watch=true"),
        )
        .unwrap();
        assert_eq!((i.verb, i.kind), ("watch", Kind::Event));
        let i =
            parse_request(&Method::POST, "/api/v1/namespaces/ns/serviceaccounts", None).unwrap();
        assert_eq!((i.verb, i.kind), ("create", Kind::ServiceAccount));
        assert!(
            parse_request(
                &Method::GET,
                "/apis/apps/v1/namespaces/ns/deployments",
                None
            )
            .is_none()
        );
        // as upstream: a named get stays a get whatever `watch` says; the
        // deprecated /watch/ prefix watches; PUT and PATCH need a name
        let i = parse_request(
            &Method::GET,
            "/api/v1/namespaces/ns/pods/p",
            Some("watch=true"),
        )
        .unwrap();
        assert_eq!((i.verb, i.name.as_deref()), ("get", Some("p")));
        let i = parse_request(&Method::GET, "/api/v1/watch/namespaces/ns/pods/p", None).unwrap();
        assert_eq!((i.verb, i.name.as_deref()), ("watch", Some("p")));
        assert!(parse_request(&Method::PUT, "/api/v1/namespaces/ns/pods", None).is_none());
        assert!(parse_request(&Method::PATCH, "/api/v1/namespaces/ns/pods", None).is_none());
        // a field selector's name does not make a list a get
        let i = parse_request(
            &Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name%3Dp"),
        )
        .unwrap();
        assert_eq!((i.verb, i.name), ("list", None));
        assert!(parse_request(&Method::GET, "/api/v1/namespaces/ns/pods/p/log/x", None).is_none());
    }
}
