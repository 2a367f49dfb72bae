//! Kubernetes `Status` errors: every failed API call answers one of these,
//! with the HTTP code, `reason` and `details` a real API server uses.

use serde_json::{Value, json};

/// A failed API call, rendered as a `v1.Status` body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` field (NotFound, AlreadyExists, Invalid, ...).
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `details` object, if any.
    pub details: Option<Value>,
    /// `Retry-After` seconds to send with the answer.
    pub retry_after: Option<u64>,
}

/// A resource reference for error messages: `jobs.batch` or `pods`.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            details: None,
            retry_after: None,
        }
    }

    /// 404 for a named object.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 404 for a path the sim does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 409 AlreadyExists for a create whose name `existing` holds; when
    /// `existing` is being deleted the message starts `object is being
    /// deleted: ` (`registry/generic/registry/store.go` `Create`), which is
    /// how a client tells a name that frees up soon.
    pub fn already_exists_as(kind: crate::store::Kind, name: &str, existing: &Value) -> Self {
        let mut e = Self::already_exists(kind.group(), kind.resource(), name);
        if existing["metadata"]["deletionTimestamp"].is_string() {
            e.message = format!("object is being deleted: {}", e.message);
        }
        e
    }

    /// 409 Conflict (stale resourceVersion on update).
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 422 Invalid; the validation module adds the details and causes.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message.into())
    }

    /// 500 with reason `Unknown` (sent as no reason at all): what the API
    /// server answers for a plain Go error from its storage layer, such as
    /// a create that carries `metadata.resourceVersion`.
    pub fn unknown_internal(message: impl Into<String>) -> Self {
        Self::new(500, "", message.into())
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message.into())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into())
    }

    /// 410 Expired for a watch from a resourceVersion older than the
    /// history kept, as the watch cache words it (`watch_cache.go`
    /// `getAllEventsSinceLocked`: the requested version, then the oldest it
    /// could resume from).
    pub fn expired_watch(rv: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {rv} ({oldest})"),
        )
    }

    /// 410 Expired for a list at an exact resourceVersion that is gone: the
    /// watch cache has no snapshot of it and hands the list to etcd
    /// (`CacheDelegator.GetList`, `ListFromCacheSnapshot`), whose compaction
    /// error it is (`etcd3/errors.go`).
    pub fn expired_list() -> Self {
        Self::new(
            410,
            "Expired",
            "The resourceVersion for the provided list is too old.".to_string(),
        )
    }

    /// 410 Expired for a continue token whose version is gone (etcd's
    /// `continueExpired`; upstream, with a key to continue from, says
    /// `inconsistentContinue` and offers a token at the latest version,
    /// which kube-sim does not).
    pub fn expired_continue() -> Self {
        Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter."
                .to_string(),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct})"
            ),
        )
    }

    /// 500 InternalError (injected faults).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into())
    }

    /// 429 TooManyRequests with Retry-After (injected faults).
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later".into(),
        );
        e.details = Some(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// The `v1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(m) = s.as_object_mut()
        {
            m.remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shape() {
        let s = ApiError::not_found("batch", "jobs", "x").to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "jobs.batch \"x\" not found");
        assert_eq!(s["details"]["kind"], "jobs");
        let s = ApiError::unknown_internal("boom").to_status();
        assert_eq!(s["code"], 500);
        assert!(s.get("reason").is_none(), "{s}");
    }
}
