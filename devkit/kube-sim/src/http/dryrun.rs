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
use crate::objects::{self, deleting};
use crate::sim::{Propagation, Sim};
use crate::status::ApiError;
use crate::store::{Key, Kind};
use serde_json::{Value, json};

/// What a create would answer.
pub(super) fn create(sim: &Sim, kind: Kind, ns: &str, obj: Value) -> Result<Value, ApiError> {
    let mut obj = crate::validation::admit_create(kind, obj, true)?;
    let name = objects::name(&obj).to_string();
    if sim.store.get(&Key::new(kind, ns, &name)).is_some() {
        return Err(ApiError::already_exists(
            kind.group(),
            kind.resource(),
            &name,
        ));
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
    let ns = cur["metadata"]["namespace"].as_str().unwrap_or("");
    match kind {
        Kind::Pod => {
            let grace = opts
                .grace
                .unwrap_or_else(|| {
                    cur["spec"]["terminationGracePeriodSeconds"]
                        .as_i64()
                        .unwrap_or(30)
                })
                .max(0);
            let key = Key::new(Kind::Pod, ns, objects::name(cur));
            let running = sim
                .pods
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&key);
            if grace > 0 && running {
                let at = sim.clock.now() + jiff::SignedDuration::from_secs(grace);
                out["metadata"]["deletionTimestamp"] = json!(k8s_time(at));
                out["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            }
        }
        Kind::Job => {
            if opts.propagation == Some(Propagation::Foreground)
                && !sim.pods_of_job(ns, cur).is_empty()
            {
                out["metadata"]["deletionTimestamp"] = json!(k8s_time(sim.clock.now()));
                out["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                out["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
            }
        }
    }
    out
}
