//! What an API request is, read from its method, path and query as the API
//! server reads it (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`,
//! `RequestInfoFactory.NewRequestInfo`, with the prefixes `api` (groupless)
//! and `apis`).
//!
//! Fault rules are scoped by the verb and resource this gives, so kube-sim
//! and the fault proxy classify a request exactly as the real API server's
//! authorization and priority-and-fairness filters do:
//!
//! - `/api/v1/namespaces/ns/pods` is `pods` in `ns`; `/api/v1/namespaces/ns`
//!   is the `namespaces` resource named `ns` (and `.../ns/status` and
//!   `.../ns/finalize` its subresources);
//! - the method gives the verb (`POST` create, `GET`/`HEAD` get, `PUT`
//!   update, `PATCH` patch, `DELETE` delete); a `get` without a name is a
//!   `list`, or a `watch` with a true `watch` parameter; a `delete` without
//!   a name is a `deletecollection`; a `get` of a named object stays a `get`
//!   whatever its `watch` parameter says;
//! - the deprecated `/watch/` and `/proxy/` path prefixes give those verbs;
//! - a list or watch with a `metadata.name=` field selector names that
//!   object (as upstream fills `Name` for authorization);
//! - any other path (discovery, `/version`, `/healthz`, `/openapi/...`) is
//!   a non-resource request whose verb is the lower-case method.

use http::Method;

/// A request's attributes, as upstream's `RequestInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// A request for a resource (else a non-resource path).
    pub is_resource_request: bool,
    /// `create`, `get`, `list`, `watch`, `update`, `patch`, `delete`,
    /// `deletecollection`, `proxy`; "" for a method the API has no verb
    /// for. A non-resource request's verb is its method in lower case.
    pub verb: String,
    /// `api` or `apis` ("" for a non-resource request).
    pub api_prefix: String,
    /// The API group ("" for the core group).
    pub api_group: String,
    /// The API version (`v1`).
    pub api_version: String,
    /// The namespace the path names, if any.
    pub namespace: Option<String>,
    /// The resource (`pods`, `jobs`, `namespaces`).
    pub resource: String,
    /// The subresource (`log`, `status`, `eviction`), if any.
    pub subresource: Option<String>,
    /// The object's name: from the path, or for a list or watch from a
    /// `metadata.name=` field selector.
    pub name: Option<String>,
    /// The path from the resource on: `[resource, name, subresource, ...]`.
    pub parts: Vec<String>,
}

impl RequestInfo {
    /// Reads a request's method, path and (raw, still encoded) query.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let non_resource = RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            ..RequestInfo::default()
        };
        let mut parts: Vec<&str> = split_path(path);
        if parts.len() < 3 {
            return non_resource;
        }
        let prefix = parts[0];
        if prefix != "api" && prefix != "apis" {
            return non_resource;
        }
        parts.remove(0);
        let mut info = RequestInfo {
            is_resource_request: true,
            api_prefix: prefix.to_string(),
            ..RequestInfo::default()
        };
        if prefix == "apis" {
            if parts.len() < 3 {
                return non_resource;
            }
            info.api_group = parts.remove(0).to_string();
        }
        info.api_version = parts.remove(0).to_string();

        if parts[0] == "watch" || parts[0] == "proxy" {
            if parts.len() < 2 {
                // Upstream fails to place this path (a 500 from its filter);
                // it names no resource.
                info.verb = non_resource.verb;
                return info;
            }
            info.verb = parts.remove(0).to_string();
        } else {
            info.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }

        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = Some(parts[1].to_string());
            // A step after the namespace's name that is not one of its own
            // subresources is a namespaced resource.
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts.drain(..2);
            }
        }
        info.parts = parts.iter().map(|p| p.to_string()).collect();
        let has_subresources = info.verb != "proxy";
        if parts.len() >= 3 && has_subresources {
            info.subresource = Some(parts[2].to_string());
        }
        if parts.len() >= 2 {
            info.name = Some(parts[1].to_string());
        }
        info.resource = parts[0].to_string();

        if info.name.is_none() && info.verb == "get" {
            let watch = parse_bool(first_value(query, "watch").as_deref());
            info.verb = if watch { "watch" } else { "list" }.to_string();
            info.name = first_value(query, "fieldSelector")
                .and_then(|s| exact_match(&s, "metadata.name"))
                .filter(|n| is_path_segment_name(n));
        }
        if info.name.is_none() && info.verb == "delete" {
            info.verb = "deletecollection".to_string();
        }
        info
    }

    /// The resource as fault rules name it: `pods`, or with its
    /// subresource `pods/log`; "" for a non-resource request.
    pub fn resource_path(&self) -> String {
        match &self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// The non-empty segments of a path, as upstream's `splitPath`: the path
/// trimmed of slashes, then split on `/`.
fn split_path(path: &str) -> Vec<&str> {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    }
}

/// The token of an `Authorization` header value, as the API server's bearer
/// token authenticator reads it (`staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken`):
/// the scheme `bearer` in any case, one space, then the token up to the
/// next space; an empty token is none.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let mut parts = authorization.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A boolean query parameter as upstream converts it
/// (`apimachinery/pkg/runtime/conversion.go` `Convert_Slice_string_To_bool`):
/// absent is false; present, anything but `0` or (any case) `false` is
/// true, an empty value included.
pub fn parse_bool(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) => v != "0" && !v.eq_ignore_ascii_case("false"),
    }
}

/// The first value of a query parameter, decoded (`+` is a space).
pub fn first_value(query: Option<&str>, key: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The value a field selector requires `field` to equal exactly (`f=v` or
/// `f==v`), as `fields.Selector.RequiresExactMatch` answers; `None` when it
/// does not, or when the selector does not parse.
fn exact_match(selector: &str, field: &str) -> Option<String> {
    let mut found = None;
    for term in split_unescaped(selector, ',')? {
        if term.is_empty() {
            continue;
        }
        let (key, op, value) = split_term(&term)?;
        let value = unescape(&value)?;
        if key == field && op != "!=" && found.is_none() {
            found = Some(value);
        }
    }
    found
}

/// Splits on `sep` where it is not escaped by a backslash; the pieces keep
/// their escapes. `None` for a dangling backslash.
fn split_unescaped(s: &str, sep: char) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            cur.push(c);
            cur.push(chars.next()?);
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    Some(out)
}

/// A term's field, operator (`!=`, `==` or `=`, the first unescaped one)
/// and still-escaped value.
fn split_term(term: &str) -> Option<(String, &'static str, String)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            _ => {
                for op in ["!=", "==", "="] {
                    if term[i..].starts_with(op) {
                        let value = term[i + op.len()..].to_string();
                        return Some((term[..i].to_string(), op, value));
                    }
                }
                i += 1;
            }
        }
    }
    None
}

/// Undoes a field selector value's escapes (`\\`, `\,`, `\=`); any other
/// escape is invalid.
fn unescape(v: &str) -> Option<String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next()? {
                e @ ('\\' | ',' | '=') => out.push(e),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// `IsPathSegmentName`: not `.` or `..`, no `/` and no `%`.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path_and_query: &str) -> RequestInfo {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        RequestInfo::parse(&method, path, query)
    }

    /// verb, resource path, namespace, name.
    fn brief(i: &RequestInfo) -> (String, String, Option<String>, Option<String>) {
        (
            i.verb.clone(),
            i.resource_path(),
            i.namespace.clone(),
            i.name.clone(),
        )
    }

    fn b(
        verb: &str,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> (String, String, Option<String>, Option<String>) {
        (
            verb.into(),
            resource.into(),
            ns.map(Into::into),
            name.map(Into::into),
        )
    }

    #[test]
    fn resource_requests_as_upstream_reads_them() {
        let cases = [
            (
                Method::GET,
                "/apis/batch/v1/namespaces/ns/jobs",
                b("list", "jobs", Some("ns"), None),
            ),
            (
                Method::GET,
                "/apis/batch/v1/namespaces/ns/jobs?watch=true&resourceVersion=5",
                b("watch", "jobs", Some("ns"), None),
            ),
            (
                Method::GET,
                "/apis/batch/v1/namespaces/ns/jobs?watch=0",
                b("list", "jobs", Some("ns"), None),
            ),
            (
                Method::GET,
                "/apis/batch/v1/namespaces/ns/jobs?watch=",
                b("watch", "jobs", Some("ns"), None),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods/p/log?tailLines=5",
                b("get", "pods/log", Some("ns"), Some("p")),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/pods/p/eviction",
                b("create", "pods/eviction", Some("ns"), Some("p")),
            ),
            (
                Method::PUT,
                "/apis/batch/v1/namespaces/ns/jobs/j/status",
                b("update", "jobs/status", Some("ns"), Some("j")),
            ),
            (
                Method::PATCH,
                "/apis/batch/v1/namespaces/ns/jobs/j",
                b("patch", "jobs", Some("ns"), Some("j")),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods",
                b("deletecollection", "pods", Some("ns"), None),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods/p",
                b("delete", "pods", Some("ns"), Some("p")),
            ),
            (Method::GET, "/api/v1/pods", b("list", "pods", None, None)),
            (
                Method::HEAD,
                "/api/v1/nodes/n1",
                b("get", "nodes", None, Some("n1")),
            ),
            // the namespaces resource and its own subresources
            (
                Method::GET,
                "/api/v1/namespaces",
                b("list", "namespaces", None, None),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns",
                b("get", "namespaces", Some("ns"), Some("ns")),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/ns/finalize",
                b("update", "namespaces/finalize", Some("ns"), Some("ns")),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/status",
                b("get", "namespaces/status", Some("ns"), Some("ns")),
            ),
            // a named get stays a get, whatever `watch` says
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods/p?watch=true",
                b("get", "pods", Some("ns"), Some("p")),
            ),
            // the deprecated verb-by-path forms
            (
                Method::GET,
                "/api/v1/watch/namespaces/ns/pods",
                b("watch", "pods", Some("ns"), None),
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/ns/pods/p",
                b("watch", "pods", Some("ns"), Some("p")),
            ),
            (
                Method::GET,
                "/api/v1/proxy/namespaces/ns/pods/p/some/path",
                b("proxy", "pods", Some("ns"), Some("p")),
            ),
            // another group, cluster-scoped
            (
                Method::POST,
                "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                b("create", "flowschemas", None, None),
            ),
            // a trailing slash changes nothing
            (
                Method::GET,
                "/apis/batch/v1/namespaces/ns/jobs/",
                b("list", "jobs", Some("ns"), None),
            ),
        ];
        for (method, path, want) in cases {
            assert_eq!(brief(&info(method, path)), want, "{path}");
        }
        let i = info(Method::GET, "/apis/batch/v1/namespaces/ns/jobs/j/status");
        assert_eq!(
            (
                i.api_prefix.as_str(),
                i.api_group.as_str(),
                i.api_version.as_str()
            ),
            ("apis", "batch", "v1")
        );
        assert_eq!(i.parts, ["jobs", "j", "status"]);
        assert_eq!(info(Method::OPTIONS, "/api/v1/pods").verb, "");
    }

    #[test]
    fn a_metadata_name_field_selector_names_the_object() {
        let name = |q: &str| info(Method::GET, &format!("/api/v1/namespaces/ns/pods?{q}")).name;
        assert_eq!(
            name("fieldSelector=metadata.name%3Dp1&watch=1"),
            Some("p1".into())
        );
        assert_eq!(
            name("fieldSelector=metadata.name%3D%3Dp1"),
            Some("p1".into())
        );
        assert_eq!(
            name("fieldSelector=spec.nodeName%3Dn%2Cmetadata.name%3Dp1"),
            Some("p1".into())
        );
        assert_eq!(name("fieldSelector=metadata.name%21%3Dp1"), None);
        assert_eq!(name("fieldSelector=spec.nodeName%3Dn"), None);
        assert_eq!(name("fieldSelector=metadata.name%3D.."), None);
        // a selector that does not parse names nothing
        assert_eq!(name("fieldSelector=metadata.name"), None);
        assert_eq!(name("fieldSelector=metadata.name%3Da%5Cx"), None);
        // escapes
        assert_eq!(
            name("fieldSelector=metadata.name%3Da%5C%2Cb"),
            Some("a,b".into())
        );
        // a name already in the path wins; the verb stays a get
        let i = info(
            Method::GET,
            "/api/v1/namespaces/ns/pods/p?fieldSelector=metadata.name%3Dq",
        );
        assert_eq!((i.verb.as_str(), i.name.as_deref()), ("get", Some("p")));
        // with a name, a delete is a delete, not a deletecollection; the
        // selector only names objects for list and watch
        let i = info(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dq",
        );
        assert_eq!((i.verb.as_str(), i.name), ("deletecollection", None));
    }

    #[test]
    fn other_paths_are_non_resource_requests() {
        for (method, path) in [
            (Method::GET, "/"),
            (Method::GET, "/version"),
            (Method::GET, "/healthz"),
            (Method::GET, "/readyz"),
            (Method::GET, "/api"),
            (Method::GET, "/api/v1"),
            (Method::GET, "/apis"),
            (Method::GET, "/apis/batch"),
            (Method::GET, "/apis/batch/v1"),
            (Method::GET, "/openapi/v3/apis/batch/v1"),
            (Method::POST, "/metrics/x/y"),
        ] {
            let i = info(method.clone(), path);
            assert!(!i.is_resource_request, "{path}");
            assert_eq!(i.verb, method.as_str().to_ascii_lowercase(), "{path}");
            assert_eq!(i.resource_path(), "", "{path}");
        }
    }

    #[test]
    fn bearer_tokens_as_the_authenticator_reads_them() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc extra"), Some("abc"));
        assert_eq!(bearer_token("Bearer abc "), Some("abc"));
        assert_eq!(bearer_token("Bearer  abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Basic abc"), None);
    }

    #[test]
    fn booleans_read_as_upstream_converts_them() {
        for (v, want) in [
            (None, false),
            (Some(""), true),
            (Some("1"), true),
            (Some("true"), true),
            (Some("True"), true),
            (Some("yes"), true),
            (Some("0"), false),
            (Some("false"), false),
            (Some("FALSE"), false),
        ] {
            assert_eq!(parse_bool(v), want, "{v:?}");
        }
        // the first value counts
        assert_eq!(
            first_value(Some("watch=0&watch=1"), "watch").as_deref(),
            Some("0")
        );
        assert_eq!(
            first_value(Some("a=b+c%2Fd"), "a").as_deref(),
            Some("b c/d")
        );
    }

    proptest::proptest! {
        /// Any path parses (no panic), and a resource request's resource is
        /// one of its path segments.
        #[test]
        fn any_path_parses(segs in proptest::collection::vec("[a-z0-9.]{0,6}|watch|proxy|namespaces|api|apis|v1|status", 0..8),
                           q in "[a-z=&%0-9.]{0,20}") {
            let path = format!("/{}", segs.join("/"));
            for m in [Method::GET, Method::POST, Method::DELETE] {
                let i = RequestInfo::parse(&m, &path, Some(&q));
                if i.is_resource_request && !i.resource.is_empty() {
                    proptest::prop_assert!(segs.contains(&i.resource));
                }
            }
        }
    }
}
