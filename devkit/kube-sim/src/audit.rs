//! The sim's own timeline of every change to a Pod or a Job, with who made
//! it, for tests that check a client from the outside (the chaos suite):
//! `GET /admin/audit`.
//!
//! Each change the store commits to a Pod or a Job becomes one
//! [`AuditEntry`]: its position, the wall time (the machine's clock, not
//! the sim's scaled clock, so it lines up with other processes), the event
//! (`ADDED`, `MODIFIED`, `DELETED`) and resourceVersion, the object's
//! identity and labels, the few status facts a check needs (a pod's phase,
//! whether a container runs, a Job's terminal condition, a deletion under
//! way, the owning Job), and the actor:
//!
//! - `rbac`: a request presenting the RBAC token (the dispatcher's, in the
//!   dev stack);
//! - `admin`: a request presenting the admin token, or an admin endpoint;
//! - `anonymous`: a request without a token; `unknown`: another token;
//! - `cluster`: the sim's own components (Job controller, kubelets, the fake
//!   drivers, pod GC, the taint manager).
//!
//! The timeline is kept in memory, the last [`AUDIT_LIMIT`] entries (the
//! count of dropped ones is reported). An API-server restart does not touch
//! it: it is the store's record, as etcd's is.

use crate::store::{EventType, Kind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

/// How many entries are kept.
pub const AUDIT_LIMIT: usize = 200_000;

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// A request with the RBAC token.
    Rbac,
    /// A request with the admin token, or an admin endpoint.
    Admin,
    /// A request without a token.
    Anonymous,
    /// A request with a token the sim does not know.
    Unknown,
    /// The sim's own components.
    Cluster,
}

tokio::task_local! {
    /// The actor of the request the current task serves.
    pub(crate) static ACTOR: Actor;
}

/// The actor of the current task: [`Actor::Cluster`] outside a request.
pub fn current_actor() -> Actor {
    ACTOR.try_with(|a| *a).unwrap_or(Actor::Cluster)
}

/// One change to a Pod or a Job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the timeline (1, 2, ...).
    pub seq: u64,
    /// Wall time of the change.
    pub at: jiff::Timestamp,
    /// The resourceVersion it produced.
    pub rv: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub event: String,
    /// `Pod` or `Job`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// uid.
    pub uid: String,
    /// Who made the change.
    pub actor: Actor,
    /// The object's labels after the change.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A pod's `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// A pod with a container in state `running`.
    #[serde(default)]
    pub running: bool,
    /// `metadata.deletionTimestamp` is set.
    #[serde(default)]
    pub deleting: bool,
    /// A Job's true terminal condition: `Complete` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// A pod's controlling Job (ownerReference with `controller: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// What `GET /admin/audit` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    /// Entries after the `after` asked for, oldest first.
    pub entries: Vec<AuditEntry>,
    /// The last position recorded so far.
    pub last: u64,
    /// Entries dropped because the timeline was full.
    pub dropped: u64,
}

/// The timeline (kept inside the store, under its lock, so its order is the
/// order of the commits).
#[derive(Debug)]
pub struct Audit {
    entries: VecDeque<AuditEntry>,
    limit: usize,
    last: u64,
    dropped: u64,
}

impl Default for Audit {
    fn default() -> Self {
        Audit::with_limit(AUDIT_LIMIT)
    }
}

/// The facts of an object an entry keeps.
fn summary(kind: Kind, obj: &Value) -> (Option<String>, bool, Option<String>, Option<String>) {
    match kind {
        Kind::Pod => {
            let running = obj["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["state"]["running"].is_object()));
            let owner = obj["metadata"]["ownerReferences"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["controller"] == true))
                .and_then(|r| r["name"].as_str())
                .map(str::to_owned);
            let phase = obj["status"]["phase"].as_str().map(str::to_owned);
            (phase, running, None, owner)
        }
        _ => {
            let finished = obj["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter()
                    .find(|c| {
                        (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                    })
                    .and_then(|c| c["type"].as_str())
                    .map(str::to_owned)
            });
            (None, false, finished, None)
        }
    }
}

impl Audit {
    /// A timeline keeping the last `limit` entries (at least one).
    pub fn with_limit(limit: usize) -> Self {
        Audit {
            entries: VecDeque::new(),
            limit: limit.max(1),
            last: 0,
            dropped: 0,
        }
    }

    /// Records one committed change (Pods and Jobs only; others are
    /// ignored).
    pub fn record(&mut self, etype: EventType, kind: Kind, rv: u64, obj: &Value, actor: Actor) {
        if !matches!(kind, Kind::Pod | Kind::Job) {
            return;
        }
        let md = &obj["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let labels = md["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let (phase, running, finished, owner) = summary(kind, obj);
        self.last += 1;
        if self.entries.len() >= self.limit {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(AuditEntry {
            seq: self.last,
            at: jiff::Timestamp::now(),
            rv,
            event: etype.as_str().to_owned(),
            kind: kind.kind().to_owned(),
            namespace: text(&md["namespace"]),
            name: text(&md["name"]),
            uid: text(&md["uid"]),
            actor,
            labels,
            phase,
            running,
            deleting: md["deletionTimestamp"].is_string(),
            finished,
            owner,
        });
    }

    /// The entries after position `after`, at most `limit`.
    pub fn page(&self, after: u64, limit: usize) -> AuditPage {
        AuditPage {
            entries: self
                .entries
                .iter()
                .filter(|e| e.seq > after)
                .take(limit)
                .cloned()
                .collect(),
            last: self.last,
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_and_jobs_are_recorded_with_their_facts_and_others_ignored() {
        let mut audit = Audit::default();
        let pod = json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u1",
                "labels": {"tcab.dev/job-id": "j1"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"name": "other", "controller": false}, {"name": "job-a", "controller": true}]},
            "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
        });
        audit.record(EventType::Modified, Kind::Pod, 7, &pod, Actor::Rbac);
        let job = json!({
            "metadata": {"name": "job-a", "namespace": "n", "uid": "u2"},
            "status": {"conditions": [
                {"type": "FailureTarget", "status": "True"},
                {"type": "Failed", "status": "True"}]},
        });
        audit.record(EventType::Added, Kind::Job, 8, &job, Actor::Cluster);
        audit.record(EventType::Added, Kind::Event, 9, &json!({}), Actor::Cluster);
        let page = audit.page(0, 10);
        assert_eq!((page.last, page.dropped, page.entries.len()), (2, 0, 2));
        let p = &page.entries[0];
        assert_eq!((p.seq, p.rv, p.event.as_str()), (1, 7, "MODIFIED"));
        assert_eq!((p.kind.as_str(), p.name.as_str()), ("Pod", "p"));
        assert_eq!(p.actor, Actor::Rbac);
        assert_eq!(p.labels["tcab.dev/job-id"], "j1");
        assert_eq!(p.phase.as_deref(), Some("Running"));
        assert!(p.running && p.deleting);
        assert_eq!(p.owner.as_deref(), Some("job-a"));
        let j = &page.entries[1];
        assert_eq!(j.finished.as_deref(), Some("Failed"));
        assert!(!j.running && !j.deleting && j.phase.is_none());
        assert_eq!(audit.page(1, 10).entries.len(), 1);
        assert_eq!(audit.page(0, 1).entries.len(), 1);
    }

    #[test]
    fn the_oldest_entries_go_first_and_are_counted() {
        let mut audit = Audit::with_limit(2);
        for rv in 1..=3 {
            audit.record(EventType::Added, Kind::Job, rv, &json!({}), Actor::Admin);
        }
        let page = audit.page(0, 10);
        assert_eq!((page.last, page.dropped), (3, 1));
        let seqs: Vec<u64> = page.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3]);
    }

    #[test]
    fn a_terminated_container_is_not_running() {
        let (_, running, _, _) = summary(
            Kind::Pod,
            &json!({"status": {"phase": "Running", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}}),
        );
        assert!(!running);
    }

    #[tokio::test]
    async fn the_actor_is_the_requests_inside_its_scope_and_the_clusters_outside() {
        assert_eq!(current_actor(), Actor::Cluster);
        let inside = ACTOR.scope(Actor::Rbac, async { current_actor() }).await;
        assert_eq!(inside, Actor::Rbac);
    }
}
