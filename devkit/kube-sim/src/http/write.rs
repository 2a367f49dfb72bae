//! Writes: update, merge patch and delete (with propagation), each with
//! upstream's checks (validation, unknown fields, delete preconditions) and
//! `dryRun`.

use super::params::{DeleteOpts, WriteOptions};
use super::{dryrun, fields, parse_body, smp};
use crate::objects::ensure_object;
use crate::sim::{Propagation, Sim};
use crate::status::ApiError;
use crate::store::{Key, Kind};
use axum::body::Bytes;
use serde_json::Value;
use std::sync::Arc;

pub(super) fn delete_one(
    sim: &Arc<Sim>,
    kind: Kind,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Value, ApiError> {
    let cur = sim
        .store
        .get(&Key::new(kind, ns, name))
        .ok_or_else(|| kind.not_found(name))?;
    opts.preconditions.check(kind, &cur)?;
    if opts.dry_run {
        return Ok(dryrun::delete(sim, kind, &cur, opts));
    }
    let gone = match kind {
        // batch/v1 Jobs orphan their pods unless told otherwise, as on a real server.
        Kind::Job => sim.delete_job(
            ns,
            name,
            opts.propagation.unwrap_or(Propagation::Orphan),
            &opts.preconditions,
        )?,
        Kind::Pod => sim.delete_pod(ns, name, opts.grace)?,
        other => sim.delete_object(other, ns, name)?,
    };
    Ok((*gone).clone())
}

/// The answer to a DELETE of one object (`Store.finalizeDelete`, generic
/// registry): the object when it is only marked (a grace period or
/// finalizers hold it) or when the kind's registry returns deleted objects
/// (`ReturnDeletedObject`: pods and ServiceAccounts); otherwise, for an
/// object removed at once, a Success Status naming it, with the resource
/// in `details.kind`.
pub(super) fn delete_answer(kind: Kind, obj: &Value) -> Value {
    let returns_object = matches!(kind, Kind::Pod | Kind::ServiceAccount);
    if returns_object || obj["metadata"]["deletionTimestamp"].is_string() {
        return obj.clone();
    }
    let mut details = serde_json::json!({
        "name": obj["metadata"]["name"],
        "kind": kind.resource(),
        "uid": obj["metadata"]["uid"],
    });
    if !kind.group().is_empty() {
        details["group"] = serde_json::json!(kind.group());
    }
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "details": details})
}

/// Fields of metadata a client may change with update/patch.
pub(super) const MUTABLE_METADATA: [&str; 4] =
    ["labels", "annotations", "finalizers", "ownerReferences"];

/// Applies `change` to the stored object, or (dry run) to a copy that is
/// answered and forgotten.
fn write_or_preview(
    sim: &Sim,
    key: &Key,
    dry_run: bool,
    change: impl FnOnce(&mut Value) -> Result<bool, ApiError>,
) -> Result<Arc<Value>, ApiError> {
    if dry_run {
        let cur = sim
            .store
            .get(key)
            .ok_or_else(|| key.kind.not_found(&key.name))?;
        let mut next = (*cur).clone();
        change(&mut next)?;
        return Ok(Arc::new(next));
    }
    sim.store.update(key, change)
}

pub(super) fn replace(
    sim: &Sim,
    kind: Kind,
    ns: &str,
    name: &str,
    new: Value,
    status_only: bool,
    opts: WriteOptions,
) -> Result<std::sync::Arc<Value>, ApiError> {
    let key = Key::new(kind, ns, name);
    write_or_preview(sim, &key, opts.dry_run, |cur| {
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
        let old = cur.clone();
        apply_changes(cur, &new, status_only);
        crate::validation::admit_update(kind, cur, &old, status_only)?;
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

/// Applies a JSON merge patch (RFC 7386, by `json_patch::merge`) or a
/// strategic merge patch ([`smp`]); returns the object and the warnings
/// (unknown fields dropped).
#[allow(clippy::too_many_arguments)]
pub(super) fn patch(
    sim: &Sim,
    kind: Kind,
    ns: &str,
    name: &str,
    ct: &str,
    body: &Bytes,
    status_only: bool,
    opts: WriteOptions,
) -> Result<(std::sync::Arc<Value>, Vec<String>), ApiError> {
    let strategic = match ct.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => false,
        "application/strategic-merge-patch+json" => true,
        other => return Err(ApiError::unsupported_media(other)),
    };
    let p = parse_body(body)?;
    let key = Key::new(kind, ns, name);
    let mut warnings = Vec::new();
    let out = write_or_preview(sim, &key, opts.dry_run, |cur| {
        // A patch that names a resourceVersion makes it a precondition (the
        // patched object carries it into the store's optimistic update).
        if let Some(rv) = p["metadata"]["resourceVersion"]
            .as_str()
            .filter(|rv| !rv.is_empty())
            && cur["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::conflict(
                kind.group(),
                kind.resource(),
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut next = cur.clone();
        if strategic {
            smp::apply(&mut next, &p);
        } else {
            json_patch::merge(&mut next, &p);
        }
        warnings = fields::check_patched(kind, &p, &mut next, opts.field_validation)?;
        let before = cur.clone();
        apply_changes(cur, &next, status_only);
        if *cur == before {
            return Ok(false);
        }
        crate::validation::admit_update(kind, cur, &before, status_only)?;
        Ok(*cur != before)
    })?;
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}});
        json_patch::merge(&mut t, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(t, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
        // A patch object over a non-object replaces it; nulls inside a new
        // member are dropped rather than stored.
        let mut t = json!({"a": [1]});
        json_patch::merge(&mut t, &json!({"a": {"x": null, "y": 1}}));
        assert_eq!(t, json!({"a": {"y": 1}}));
    }
}
