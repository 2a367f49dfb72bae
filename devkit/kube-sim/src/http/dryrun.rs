//! `dryRun=All`: a write validated and answered as it would have been,
//! changing nothing (no store write, no signal to a pod, no controller
//! wake-up).
//!
//! Upstream: the registry runs the whole write path and skips only the
//! storage call (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/dryrun.go`):
//! a dry-run create answers the object with its generated name, uid and
//! creationTimestamp but no new resourceVersion; a dry-run graceful delete
//! answers the object with its deletionTimestamp set.

use super::params::DeleteOpts;
use crate::clock::k8s_time;
use crate::deletion::{self, DeleteDecision};
use crate::objects::{self, deleting};
use crate::sim::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Sim, mark_for_collector};
use crate::status::ApiError;
use crate::store::{Key, Kind};
use serde_json::{Value, json};

/// What a create would answer.
pub(super) fn create(sim: &Sim, kind: Kind, ns: &str, obj: Value) -> Result<Value, ApiError> {
    let mut obj = crate::validation::admit_create(kind, obj, true)?;
    let name = objects::name(&obj).to_string();
    if let Some(existing) = sim.store.get(&Key::new(kind, ns, &name)) {
        return Err(ApiError::already_exists_as(kind, &name, &existing));
    }
    obj["apiVersion"] = json!(kind.api_version());
    obj["kind"] = json!(kind.kind());
    let md = &mut obj["metadata"];
    md["namespace"] = json!(ns);
    if md["uid"].as_str().is_none_or(str::is_empty) {
        md["uid"] = json!(uuid::Uuid::new_v4().to_string());
    }
    md["creationTimestamp"] = json!(k8s_time(sim.clock.now()));
    if kind == Kind::Job {
        md["generation"] = json!(1);
    }
    Ok(obj)
}

/// What a delete of `cur` would answer.
pub(super) fn delete(sim: &Sim, kind: Kind, cur: &Value, opts: &DeleteOpts) -> Value {
    let mut out = cur.clone();
    if deleting(cur) {
        return out;
    }
    match kind {
        // batch/v1 Jobs orphan by default: marked for the garbage
        // collector unless the policy is Background (`Sim::delete_job`).
        Kind::Job => match opts.propagation.unwrap_or(Propagation::Orphan) {
            Propagation::Orphan => mark_for_collector(&mut out, ORPHAN_FINALIZER, sim.clock.now()),
            Propagation::Foreground => {
                mark_for_collector(&mut out, FOREGROUND_FINALIZER, sim.clock.now())
            }
            Propagation::Background => {}
        },
        // Every other kind as the registry would decide it (a graceful
        // pod delete shows its deletionTimestamp).
        _ => match deletion::decide(kind, cur, opts.grace, sim.clock.now()) {
            DeleteDecision::Remove {
                mark: Some((at, grace)),
            }
            | DeleteDecision::Mark { at, grace } => deletion::mark(&mut out, at, grace),
            DeleteDecision::Remove { mark: None } | DeleteDecision::Unchanged => {}
        },
    }
    out
}
