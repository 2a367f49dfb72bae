//! Writes: update, merge patch and delete (with propagation).

use super::{Query, parse_body};
use crate::objects::ensure_object;
use crate::sim::{Propagation, Sim};
use crate::status::ApiError;
use crate::store::{Key, Kind};
use axum::body::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;

/// Options of a delete call, from the body (DeleteOptions) and the query.
#[derive(Debug, Default)]
pub(super) struct DeleteOpts {
    propagation: Option<Propagation>,
    grace: Option<i64>,
}

impl DeleteOpts {
    pub(super) fn read(body: &Bytes, q: &Query) -> Result<Self, ApiError> {
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

pub(super) fn delete_one(
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
        other => sim.delete_object(other, ns, name)?,
    };
    Ok((*gone).clone())
}

/// Fields of metadata a client may change with update/patch.
pub(super) const MUTABLE_METADATA: [&str; 4] =
    ["labels", "annotations", "finalizers", "ownerReferences"];

pub(super) fn replace(
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

pub(super) fn apply_changes(cur: &mut Value, new: &Value, status_only: bool) {
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
    // Everything outside metadata and status is the object's own content
    // (`spec`, a Secret's `data`, an Event's fields, ...).
    if let Some(fields) = new.as_object() {
        for (k, v) in fields {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status") || v.is_null() {
                continue;
            }
            ensure_object(cur).insert(k.clone(), v.clone());
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
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

pub(super) fn patch(
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
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut t, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(t, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
