//! Deletion as the generic registry does it (apiserver `rest.BeforeDelete`,
//! `Store.Delete`, `ShouldDeleteDuringUpdate`) with the pod strategy's grace
//! rules (pkg/registry/core/pod `CheckGracefulDelete`). Pure functions; the
//! store applies them under its lock.
//!
//! - Pods are deleted gracefully: the grace period is the request's, else
//!   the pod's `terminationGracePeriodSeconds`; an unscheduled or terminal
//!   pod gets 0. Other kinds have no graceful deletion (grace 0).
//! - Grace 0 and no finalizers: the object goes at once (a pod is first
//!   written with its deletionTimestamp, as upstream's update-then-delete).
//! - Otherwise the object stays, with `deletionTimestamp` (now + grace) and
//!   `deletionGracePeriodSeconds`, until the kubelet confirms (a delete with
//!   grace 0) and its finalizers are gone.
//! - An object already being deleted: only a shorter grace period changes
//!   anything; one marked with grace 0 is removed when it has no finalizers.
//! - An update that removes the last finalizer of an object marked with
//!   grace 0 deletes it.

use crate::clock::{k8s_time, parse_time};
use crate::store::Kind;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

/// What a delete request does to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteDecision {
    /// The object goes now; `mark` is first written (deletionTimestamp,
    /// grace) when the kind deletes gracefully.
    Remove {
        /// deletionTimestamp and grace written before the removal.
        mark: Option<(Timestamp, i64)>,
    },
    /// The object stays, marked with this deletionTimestamp and grace.
    Mark {
        /// The new deletionTimestamp.
        at: Timestamp,
        /// The new deletionGracePeriodSeconds.
        grace: i64,
    },
    /// Nothing changes (a deletion is already pending).
    Unchanged,
}

/// The finalizers of an object.
pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|fs| fs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn has_finalizers(obj: &Value) -> bool {
    !finalizers(obj).is_empty()
}

fn deletion_grace(obj: &Value) -> Option<i64> {
    obj["metadata"]["deletionGracePeriodSeconds"].as_i64()
}

/// The grace period a pod gets for a delete request (pod strategy
/// `CheckGracefulDelete`).
pub fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let mut period = requested
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(0);
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        period = 0;
    }
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Failed" | "Succeeded")
    ) {
        period = 0;
    }
    if period < 0 { 1 } else { period }
}

/// Decides what a delete request with `requested` grace does to `obj`.
pub fn decide(kind: Kind, obj: &Value, requested: Option<i64>, now: Timestamp) -> DeleteDecision {
    let finalized = has_finalizers(obj);
    if obj["metadata"]["deletionTimestamp"].is_string() {
        let current = deletion_grace(obj).unwrap_or(0);
        if current == 0 {
            return if finalized {
                DeleteDecision::Unchanged
            } else {
                DeleteDecision::Remove { mark: None }
            };
        }
        return match requested {
            Some(g) if kind == Kind::Pod && g.max(0) < current => {
                let g = g.max(0);
                let old = parse_time(&obj["metadata"]["deletionTimestamp"]).unwrap_or(now);
                let at = old - SignedDuration::from_secs(current) + SignedDuration::from_secs(g);
                if g == 0 && !finalized {
                    DeleteDecision::Remove {
                        mark: Some((at, 0)),
                    }
                } else {
                    DeleteDecision::Mark { at, grace: g }
                }
            }
            _ => DeleteDecision::Unchanged,
        };
    }
    if kind != Kind::Pod {
        return if finalized {
            DeleteDecision::Mark { at: now, grace: 0 }
        } else {
            DeleteDecision::Remove { mark: None }
        };
    }
    let grace = pod_grace(obj, requested);
    let at = now + SignedDuration::from_secs(grace);
    if grace == 0 && !finalized {
        DeleteDecision::Remove {
            mark: Some((at, 0)),
        }
    } else {
        DeleteDecision::Mark { at, grace }
    }
}

/// Writes a deletion mark into an object.
pub fn mark(obj: &mut Value, at: Timestamp, grace: i64) {
    obj["metadata"]["deletionTimestamp"] = json!(k8s_time(at));
    obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
}

/// Whether an update from `old` to `new` deletes the object: it was marked
/// for deletion with grace 0 and has no finalizers left.
pub fn should_delete_during_update(old: &Value, new: &Value) -> bool {
    old["metadata"]["deletionTimestamp"].is_string()
        && deletion_grace(old) == Some(0)
        && !has_finalizers(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn pod(node: Option<&str>, phase: &str, finalizers: &[&str]) -> Value {
        let mut p = json!({"metadata": {"name": "p", "finalizers": finalizers},
            "spec": {"terminationGracePeriodSeconds": 30}, "status": {"phase": phase}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    #[test]
    fn a_running_pod_is_marked_with_its_grace() {
        let p = pod(Some("n"), "Running", &[]);
        assert_eq!(
            decide(Kind::Pod, &p, None, t(0)),
            DeleteDecision::Mark {
                at: t(30),
                grace: 30
            }
        );
        assert_eq!(
            decide(Kind::Pod, &p, Some(5), t(0)),
            DeleteDecision::Mark { at: t(5), grace: 5 }
        );
        assert_eq!(
            decide(Kind::Pod, &p, Some(0), t(0)),
            DeleteDecision::Remove {
                mark: Some((t(0), 0))
            }
        );
    }

    #[test]
    fn unscheduled_and_terminal_pods_go_at_once_unless_finalized() {
        let now = DeleteDecision::Remove {
            mark: Some((t(0), 0)),
        };
        assert_eq!(
            decide(Kind::Pod, &pod(None, "Pending", &[]), None, t(0)),
            now
        );
        assert_eq!(
            decide(Kind::Pod, &pod(Some("n"), "Failed", &[]), None, t(0)),
            now
        );
        assert_eq!(
            decide(Kind::Pod, &pod(None, "Pending", &["f"]), None, t(0)),
            DeleteDecision::Mark { at: t(0), grace: 0 }
        );
    }

    #[test]
    fn a_pending_deletion_only_shortens() {
        let mut p = pod(Some("n"), "Running", &["f"]);
        mark(&mut p, t(30), 30);
        assert_eq!(decide(Kind::Pod, &p, None, t(1)), DeleteDecision::Unchanged);
        assert_eq!(
            decide(Kind::Pod, &p, Some(40), t(1)),
            DeleteDecision::Unchanged
        );
        assert_eq!(
            decide(Kind::Pod, &p, Some(10), t(1)),
            DeleteDecision::Mark {
                at: t(10),
                grace: 10
            }
        );
        assert_eq!(
            decide(Kind::Pod, &p, Some(0), t(1)),
            DeleteDecision::Mark { at: t(0), grace: 0 }
        );
        // confirmed (grace 0): removed once no finalizer is left
        mark(&mut p, t(0), 0);
        assert_eq!(
            decide(Kind::Pod, &p, Some(0), t(1)),
            DeleteDecision::Unchanged
        );
        p["metadata"]["finalizers"] = json!([]);
        assert_eq!(
            decide(Kind::Pod, &p, Some(0), t(1)),
            DeleteDecision::Remove { mark: None }
        );
    }

    #[test]
    fn other_kinds_have_no_grace() {
        let j = json!({"metadata": {"name": "j"}});
        assert_eq!(
            decide(Kind::Job, &j, Some(30), t(0)),
            DeleteDecision::Remove { mark: None }
        );
        let j = json!({"metadata": {"name": "j", "finalizers": ["foregroundDeletion"]}});
        assert_eq!(
            decide(Kind::Job, &j, None, t(0)),
            DeleteDecision::Mark { at: t(0), grace: 0 }
        );
    }

    #[test]
    fn removing_the_last_finalizer_of_a_confirmed_object_deletes_it() {
        let mut old = pod(Some("n"), "Failed", &["a"]);
        mark(&mut old, t(0), 0);
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!([]);
        assert!(should_delete_during_update(&old, &new));
        let mut graceful = pod(Some("n"), "Running", &["a"]);
        mark(&mut graceful, t(30), 30);
        let mut new = graceful.clone();
        new["metadata"]["finalizers"] = json!([]);
        assert!(!should_delete_during_update(&graceful, &new));
        assert!(!should_delete_during_update(
            &pod(Some("n"), "Running", &["a"]),
            &new
        ));
    }
}
