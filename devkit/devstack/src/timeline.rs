//! The cluster's own timeline on the real control plane: the API server's
//! audit log (see `tcab_real_cluster::AUDIT_POLICY`) read into the same
//! entries kube-sim's `GET /admin/audit` answers, so the invariants
//! ([`crate::invariants`]) check a run on either cluster alike.
//!
//! Every change to a Pod or a Job goes through a request the audit log
//! records once it completed, with its author and the object as it became.
//! The entries follow from those records:
//!
//! - a create is `ADDED`, an update or patch (of the object or its status)
//!   `MODIFIED`; a dry run (`dryRun=All`, the admitter's preflight) nothing;
//! - a delete answered with the object still there (finalizers, or a grace
//!   period) is `MODIFIED` with `deleting`; answered with the object gone, or
//!   with a success `Status`, it is `DELETED`;
//! - a write that leaves an object with a `deletionTimestamp`, no finalizers
//!   and no grace left ends it: `DELETED` (the last finalizer removed from a
//!   terminating pod);
//! - an eviction (`pods/eviction`) is `MODIFIED` with `deleting` on the
//!   pod's last known state (the API server deletes it in the request);
//! - the author: the dispatcher's user is [`Actor::Rbac`] (as kube-sim's RBAC
//!   token), `admin` [`Actor::Admin`], every other user (the controllers,
//!   the nodes, the drivers' ServiceAccount) [`Actor::Cluster`].
//!
//! Pure: text in, entries out.

use jiff::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;
use tcab_kube_sim::audit::{Actor, AuditEntry};

/// Reads an audit log (JSON lines) into the timeline of the Pods and Jobs of
/// `namespaces`, in the order the writes were committed (their
/// resourceVersion), else the order the requests completed. `dispatcher` is the
/// user the dispatcher authenticates as
/// (`system:serviceaccount:<ns>:<name>`).
pub fn from_audit_log(text: &str, namespaces: &[&str], dispatcher: &str) -> Vec<AuditEntry> {
    let mut events: Vec<(Timestamp, u64, usize, Value)> = text
        .lines()
        .enumerate()
        .filter_map(|(line, l)| {
            let event: Value = serde_json::from_str(l).ok()?;
            let ns = event["objectRef"]["namespace"].as_str()?;
            let resource = event["objectRef"]["resource"].as_str()?;
            let ok = event["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| (200..300).contains(&c));
            // A dry run (the admitter's preflight Job) changes nothing.
            let dry_run = event["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains("dryRun="));
            let wanted = event["stage"] == "ResponseComplete"
                && ok
                && !dry_run
                && namespaces.contains(&ns)
                && matches!(resource, "pods" | "jobs");
            let at: Timestamp = event["stageTimestamp"].as_str()?.parse().ok()?;
            let rv = event["responseObject"]["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            wanted.then_some((at, rv, line, event))
        })
        .collect();
    events.sort_by_key(|e| (e.0, e.1, e.2));
    // The order of the writes is etcd's revision (every write's
    // resourceVersion): two requests may complete in the other order than
    // they were committed (a Job's `Complete` committed first, a patch of
    // it committed just before but answered after), and by completion time
    // the older state would come last. A record with no revision (a delete
    // answered with a Status, an eviction) stays after the writes that had
    // completed before it.
    let mut high = 0;
    let mut keyed: Vec<((u64, usize), Timestamp, Value)> = events
        .into_iter()
        .enumerate()
        .map(|(i, (at, rv, _, event))| {
            high = high.max(rv);
            (((if rv > 0 { rv } else { high }), i), at, event)
        })
        .collect();
    keyed.sort_by_key(|e| e.0);

    let mut last: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    let mut out: Vec<AuditEntry> = Vec::new();
    for (_, at, event) in keyed {
        let r = &event["objectRef"];
        let kind = match r["resource"].as_str() {
            Some("pods") => "Pod",
            _ => "Job",
        };
        let ns = r["namespace"].as_str().unwrap_or_default().to_owned();
        let name = r["name"].as_str().unwrap_or_default().to_owned();
        let key = (kind.to_owned(), ns.clone(), name.clone());
        let response = &event["responseObject"];
        let is_object = response["kind"].as_str() == Some(kind);
        let actor = actor_of(event["user"]["username"].as_str().unwrap_or(""), dispatcher);
        let verb = event["verb"].as_str().unwrap_or_default();
        let subresource = r["subresource"].as_str().unwrap_or_default();
        let (object, change) = match (verb, subresource) {
            ("create", "eviction") => match last.get(&key) {
                Some(obj) => (obj.clone(), Change::Evicted),
                None => continue,
            },
            ("create", _) if is_object => (response.clone(), Change::Added),
            ("update" | "patch", _) if is_object => (response.clone(), Change::Modified),
            ("delete", _) if is_object => (response.clone(), Change::Deleted),
            ("delete", _) => match last.get(&key) {
                Some(obj) => (obj.clone(), Change::Gone),
                None => continue,
            },
            _ => continue,
        };
        let (event_name, deleting, gone) = classify(&object, change);
        if gone {
            last.remove(&key);
        } else {
            last.insert(key, object.clone());
        }
        out.push(entry(
            out.len() as u64 + 1,
            at,
            event_name,
            kind,
            ns,
            name,
            actor,
            &object,
            deleting,
        ));
    }
    out
}

/// What a request did, before the object's state says more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    /// A delete answered with the object (still there, or its last state).
    Deleted,
    /// A delete answered with a `Status`: the object is gone.
    Gone,
    /// An eviction: the pod is being deleted.
    Evicted,
}

/// The entry's event, whether the object is being deleted, and whether it
/// is gone.
fn classify(object: &Value, change: Change) -> (&'static str, bool, bool) {
    let meta = &object["metadata"];
    let deleting = !meta["deletionTimestamp"].is_null();
    let finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let grace_left = meta["deletionGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|g| g > 0);
    // Still there while a finalizer or a grace period holds it.
    let ends = deleting && !finalizers && !grace_left;
    match change {
        Change::Added => ("ADDED", deleting, false),
        Change::Evicted => ("MODIFIED", true, false),
        Change::Gone => ("DELETED", true, true),
        Change::Deleted if finalizers || grace_left => ("MODIFIED", true, false),
        Change::Deleted => ("DELETED", true, true),
        Change::Modified if ends => ("DELETED", true, true),
        Change::Modified => ("MODIFIED", deleting, false),
    }
}

fn actor_of(user: &str, dispatcher: &str) -> Actor {
    match user {
        u if u == dispatcher => Actor::Rbac,
        "admin" => Actor::Admin,
        "" | "system:anonymous" => Actor::Anonymous,
        _ => Actor::Cluster,
    }
}

#[allow(clippy::too_many_arguments)]
fn entry(
    seq: u64,
    at: Timestamp,
    event: &str,
    kind: &str,
    namespace: String,
    name: String,
    actor: Actor,
    object: &Value,
    deleting: bool,
) -> AuditEntry {
    let meta = &object["metadata"];
    let labels = meta["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let status = &object["status"];
    let (phase, running, finished, owner) = if kind == "Pod" {
        (
            status["phase"].as_str().map(str::to_owned),
            status["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["state"]["running"].is_object())),
            None,
            meta["ownerReferences"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["controller"] == true))
                .and_then(|r| r["name"].as_str())
                .map(str::to_owned),
        )
    } else {
        let finished = status["conditions"].as_array().and_then(|cs| {
            cs.iter()
                .find(|c| {
                    (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                })
                .and_then(|c| c["type"].as_str())
                .map(str::to_owned)
        });
        (None, false, finished, None)
    };
    AuditEntry {
        seq,
        at,
        rv: meta["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        event: event.to_owned(),
        kind: kind.to_owned(),
        namespace,
        name,
        uid: meta["uid"].as_str().unwrap_or_default().to_owned(),
        actor,
        labels,
        phase,
        // A pod being deleted is not running any more once it is gone.
        running: running && event != "DELETED",
        deleting,
        finished,
        owner,
    }
}

/// The most live Jobs of each lane (`tcab.dev/job-kind`) ever present at
/// once in a timeline, as kube-sim's counters give them.
pub fn max_live_jobs(timeline: &[AuditEntry]) -> BTreeMap<String, i64> {
    let mut live: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut max: BTreeMap<String, i64> = BTreeMap::new();
    for e in timeline.iter().filter(|e| e.kind == "Job") {
        let lane = e
            .labels
            .get("tcab.dev/job-kind")
            .cloned()
            .unwrap_or_else(|| "run".to_owned());
        let is_live = e.event != "DELETED" && e.finished.is_none();
        live.insert(e.uid.clone(), (lane.clone(), is_live));
        let count = live.values().filter(|(l, on)| *l == lane && *on).count() as i64;
        let slot = max.entry(lane).or_default();
        *slot = (*slot).max(count);
    }
    max
}

/// The live (non-terminal) Jobs of each lane at the end of a timeline, as
/// kube-sim's counters give them.
pub fn live_jobs(timeline: &[AuditEntry]) -> BTreeMap<String, i64> {
    let mut last: BTreeMap<&str, &AuditEntry> = BTreeMap::new();
    for e in timeline.iter().filter(|e| e.kind == "Job") {
        last.insert(e.uid.as_str(), e);
    }
    let mut live: BTreeMap<String, i64> = BTreeMap::new();
    for e in last.values() {
        if e.event != "DELETED" && e.finished.is_none() {
            let lane = e
                .labels
                .get("tcab.dev/job-kind")
                .cloned()
                .unwrap_or_else(|| "run".to_owned());
            *live.entry(lane).or_default() += 1;
        }
    }
    live
}

/// The lines of an audit log (and of its rotated backups beside it,
/// `audit-<time>.jsonl`, oldest first) that may concern `namespaces`: a
/// cheap filter before [`from_audit_log`] parses them, as the log of a
/// shared control plane holds every test's requests.
pub fn read_audit_log(path: &std::path::Path, namespaces: &[&str]) -> std::io::Result<String> {
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    if let (Some(dir), Some(stem), Some(ext)) = (
        path.parent(),
        path.file_stem().and_then(|s| s.to_str()),
        path.extension().and_then(|s| s.to_str()),
    ) {
        let prefix = format!("{stem}-");
        let suffix = format!(".{ext}");
        let mut backups: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&suffix))
            })
            .collect();
        // lumberjack names backups after their time: the names sort by age.
        backups.sort();
        files.extend(backups);
    }
    files.push(path.to_owned());
    let needles: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("\"namespace\":\"{ns}\""))
        .collect();
    let mut out = String::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in text.lines() {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// One request the API server refused with 403, as its audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The request's verb (`get`, `list`, `watch`, `create`, `delete`, ...).
    pub verb: String,
    /// Its resource, with its subresource after a slash (`pods/log`).
    pub resource: String,
    /// Its namespace (`(cluster)` for a cluster-scoped request).
    pub namespace: String,
    /// The request's `User-Agent` (it names the binary).
    pub agent: String,
    /// The refusal's message.
    pub message: String,
    /// When the API server received the request.
    pub received: Option<Timestamp>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}: {}",
            self.verb, self.resource, self.namespace, self.message
        )
    }
}

/// The requests of `user` the API server refused with 403, from the audit
/// log, in the order it records them.
pub fn refusals(text: &str, user: &str) -> Vec<Refusal> {
    text.lines()
        .filter(|l| l.contains("403"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["user"]["username"] == user
                && e["responseStatus"]["code"] == 403
                && e["stage"] == "ResponseComplete"
        })
        .map(|e| {
            let r = &e["objectRef"];
            let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
            let resource = match r["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", text(&r["resource"])),
                None => text(&r["resource"]),
            };
            Refusal {
                verb: text(&e["verb"]),
                resource,
                namespace: r["namespace"].as_str().unwrap_or("(cluster)").to_owned(),
                agent: text(&e["userAgent"]),
                message: text(&e["responseStatus"]["message"]),
                received: e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse().ok()),
            }
        })
        .collect()
}

/// The dispatcher's requests the API server refused with 403, from the
/// audit log: `"<verb> <resource> <namespace>: <message>"` each.
pub fn forbidden(text: &str, dispatcher: &str) -> Vec<String> {
    refusals(text, dispatcher)
        .iter()
        .map(Refusal::to_string)
        .collect()
}

/// One request as the API server's audit log records it: who sent it (its
/// `User-Agent`, which names the binary), what it asked (`"<verb>
/// <resource>[/<subresource>]"`, marked when a dry run), and when it was
/// received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedRequest {
    /// The request's `User-Agent`.
    pub agent: String,
    /// `"<verb> <resource>[/<subresource>]"`, with ` (dry run)` for a dry run.
    pub call: String,
    /// `requestReceivedTimestamp`.
    pub received: Timestamp,
}

/// The requests of `user` in an audit log, each once (a watch is logged at
/// `ResponseStarted` and again at `ResponseComplete`, under one `auditID`),
/// in the order the log first shows them.
pub fn requests_of(text: &str, user: &str) -> Vec<AuditedRequest> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for e in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if e["user"]["username"] != user {
            continue;
        }
        let (Some(id), Some(received)) = (
            e["auditID"].as_str(),
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok()),
        ) else {
            continue;
        };
        if !seen.insert(id.to_owned()) {
            continue;
        }
        let r = &e["objectRef"];
        let resource = r["resource"].as_str().unwrap_or("(none)");
        let mut call = match r["subresource"].as_str() {
            Some(sub) => format!("{} {resource}/{sub}", e["verb"].as_str().unwrap_or("")),
            None => format!("{} {resource}", e["verb"].as_str().unwrap_or("")),
        };
        if e["requestURI"]
            .as_str()
            .is_some_and(|u| u.contains("dryRun="))
        {
            call.push_str(" (dry run)");
        }
        out.push(AuditedRequest {
            agent: e["userAgent"].as_str().unwrap_or("").to_owned(),
            call,
            received,
        });
    }
    out
}

/// One create or delete of a Job or a Pod that the API server carried out,
/// with when it received the request and when it answered: the order of
/// two writes one client made one after the other, read from the server's
/// side. A write answered before another was received came first, whatever
/// order etcd's revisions put the objects in (a deleted object's revision
/// is the one it had before its delete).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// `create` or `delete`.
    pub verb: String,
    /// `Job` or `Pod`.
    pub kind: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// When the API server received the request (`requestReceivedTimestamp`).
    pub received: Timestamp,
    /// When it had answered (the `ResponseComplete` stage's timestamp).
    pub completed: Timestamp,
}

/// The creates and deletes of Jobs and Pods in `namespaces` that `user`
/// made and the API server carried out (2xx, not a dry run), from the audit
/// log, in the order they were received.
pub fn writes_of(text: &str, namespaces: &[&str], user: &str) -> Vec<Write> {
    let mut out: Vec<Write> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let r = &e["objectRef"];
            let kind = match r["resource"].as_str()? {
                "jobs" => "Job",
                "pods" => "Pod",
                _ => return None,
            };
            let verb = e["verb"].as_str()?;
            let namespace = r["namespace"].as_str()?;
            let carried_out = e["stage"] == "ResponseComplete"
                && e["user"]["username"] == user
                && matches!(verb, "create" | "delete")
                && r["subresource"].is_null()
                && namespaces.contains(&namespace)
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c))
                && !e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.contains("dryRun="));
            if !carried_out {
                return None;
            }
            let at = |field: &str| e[field].as_str()?.parse::<Timestamp>().ok();
            Some(Write {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: r["name"].as_str()?.to_owned(),
                received: at("requestReceivedTimestamp")?,
                completed: at("stageTimestamp")?,
            })
        })
        .collect();
    out.sort_by_key(|w| (w.received, w.completed));
    out
}

/// How many of `requests` were received in `[from, to)`, by call.
pub fn count_calls<'a>(
    requests: impl IntoIterator<Item = &'a AuditedRequest>,
    from: Timestamp,
    to: Timestamp,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in requests {
        if r.received >= from && r.received < to {
            *out.entry(r.call.clone()).or_default() += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_users_requests_are_counted_once_each_by_call_and_window() {
        let line = |id: &str, user: &str, stage: &str, verb: &str, sub: Option<&str>, at: &str| {
            let mut r = serde_json::json!({"resource": "jobs", "namespace": "ns"});
            if let Some(sub) = sub {
                r["subresource"] = sub.into();
            }
            serde_json::json!({"auditID": id, "stage": stage, "verb": verb,
                "user": {"username": user}, "userAgent": "tcab-admitter/0.1.0",
                "objectRef": r, "requestReceivedTimestamp": at})
            .to_string()
        };
        let me = "system:serviceaccount:ns:tcab-dispatcher";
        let text = [
            line(
                "1",
                me,
                "ResponseStarted",
                "watch",
                None,
                "2026-12-02T00:00:01.000000Z",
            ),
            line(
                "2",
                me,
                "ResponseComplete",
                "create",
                None,
                "2026-12-02T00:00:02.000000Z",
            ),
            line(
                "1",
                me,
                "ResponseComplete",
                "watch",
                None,
                "2026-12-02T00:00:01.000000Z",
            ),
            line(
                "3",
                "someone-else",
                "ResponseComplete",
                "list",
                None,
                "2026-12-02T00:00:02.500000Z",
            ),
            line(
                "4",
                me,
                "ResponseComplete",
                "get",
                Some("status"),
                "2026-12-02T00:00:03.000000Z",
            ),
            line(
                "5",
                me,
                "ResponseComplete",
                "create",
                None,
                "2026-12-02T00:00:04.000000Z",
            )
            .replace(
                "\"stage\"",
                "\"requestURI\":\"/apis/batch/v1/namespaces/ns/jobs?dryRun=All\",\"stage\"",
            ),
            "not json".to_owned(),
        ]
        .join("\n");
        let requests = requests_of(&text, me);
        assert_eq!(requests.len(), 4, "{requests:?}");
        assert_eq!(requests[3].call, "create jobs (dry run)");
        assert_eq!(requests[0].agent, "tcab-admitter/0.1.0");
        let at = |t: &str| t.parse::<Timestamp>().expect("ts");
        let all = count_calls(
            &requests,
            at("2026-12-02T00:00:00Z"),
            at("2026-12-02T00:01:00Z"),
        );
        assert_eq!(
            all,
            BTreeMap::from([
                ("create jobs".to_owned(), 1),
                ("create jobs (dry run)".to_owned(), 1),
                ("get jobs/status".to_owned(), 1),
                ("watch jobs".to_owned(), 1)
            ])
        );
        let window = count_calls(
            &requests,
            at("2026-12-02T00:00:02Z"),
            at("2026-12-02T00:00:03Z"),
        );
        assert_eq!(window, BTreeMap::from([("create jobs".to_owned(), 1)]));
    }

    const DISPATCHER: &str = "system:serviceaccount:t:tcab-dispatcher";

    fn line(
        at: &str,
        user: &str,
        verb: &str,
        resource: &str,
        sub: &str,
        name: &str,
        response: Value,
    ) -> String {
        let mut r = json!({"resource": resource, "namespace": "t", "name": name});
        if !sub.is_empty() {
            r["subresource"] = json!(sub);
        }
        json!({"stage": "ResponseComplete", "stageTimestamp": at, "verb": verb,
               "user": {"username": user}, "objectRef": r,
               "responseStatus": {"code": 200}, "responseObject": response})
        .to_string()
    }

    fn pod(name: &str, rv: u64, extra: Value) -> Value {
        let mut p = json!({"kind": "Pod", "metadata": {"name": name, "uid": format!("u-{name}"),
            "resourceVersion": rv.to_string(), "labels": {"tcab.dev/job-id": "j"}}, "status": {}});
        json_merge(&mut p, extra);
        p
    }

    fn json_merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    json_merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn a_pods_life_reads_as_the_sims_timeline() {
        let log = [
            line("2026-12-01T10:00:00.100Z", "system:serviceaccount:t:driver", "create", "pods", "", "sb", pod("sb", 1, json!({}))),
            line("2026-12-01T10:00:00.200Z", "system:node:n1", "patch", "pods", "status", "sb",
                pod("sb", 2, json!({"status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}}))),
            // The dispatcher deletes it gracefully: still there.
            line("2026-12-01T10:00:01.000Z", DISPATCHER, "delete", "pods", "", "sb",
                pod("sb", 3, json!({"metadata": {"deletionTimestamp": "2026-12-01T10:00:31Z", "deletionGracePeriodSeconds": 30},
                    "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}}))),
            // The kubelet's final delete: gone.
            line("2026-12-01T10:00:02.000Z", "system:node:n1", "delete", "pods", "", "sb",
                pod("sb", 4, json!({"metadata": {"deletionTimestamp": "2026-12-01T10:00:02Z", "deletionGracePeriodSeconds": 0}}))),
            // Another namespace, and a refused request: not in the timeline.
            line("2026-12-01T10:00:03.000Z", "admin", "create", "pods", "", "other", pod("other", 5, json!({}))).replace("\"namespace\":\"t\"", "\"namespace\":\"u\""),
        ]
        .join("\n");
        let t = from_audit_log(&log, &["t"], DISPATCHER);
        let seen: Vec<(&str, Actor, bool, bool)> = t
            .iter()
            .map(|e| (e.event.as_str(), e.actor, e.running, e.deleting))
            .collect();
        assert_eq!(
            seen,
            [
                ("ADDED", Actor::Cluster, false, false),
                ("MODIFIED", Actor::Cluster, true, false),
                ("MODIFIED", Actor::Rbac, true, true),
                ("DELETED", Actor::Cluster, false, true),
            ]
        );
        assert_eq!(t[0].labels["tcab.dev/job-id"], "j");
        assert_eq!(t.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn a_finalizer_removed_from_a_deleted_pod_ends_it_and_an_eviction_marks_it() {
        let log = [
            line("2026-12-01T10:00:00Z", "admin", "create", "pods", "", "p", pod("p", 1, json!({"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking"]}}))),
            line("2026-12-01T10:00:01Z", "admin", "create", "pods", "eviction", "p", json!({"kind": "Status", "status": "Success"})),
            line("2026-12-01T10:00:02Z", "system:serviceaccount:kube-system:job-controller", "patch", "pods", "", "p",
                pod("p", 3, json!({"metadata": {"deletionTimestamp": "2026-12-01T10:00:02Z", "deletionGracePeriodSeconds": 0, "finalizers": []}}))),
        ]
        .join("\n");
        let t = from_audit_log(&log, &["t"], DISPATCHER);
        let seen: Vec<(&str, Actor, bool)> = t
            .iter()
            .map(|e| (e.event.as_str(), e.actor, e.deleting))
            .collect();
        assert_eq!(
            seen,
            [
                ("ADDED", Actor::Admin, false),
                ("MODIFIED", Actor::Admin, true),
                ("DELETED", Actor::Cluster, true)
            ]
        );
    }

    #[test]
    fn the_most_live_jobs_per_lane_are_counted() {
        let job = |name: &str, kind: &str, rv: u64, finished: bool| {
            let mut j = json!({"kind": "Job", "metadata": {"name": name, "uid": format!("u-{name}"),
                "resourceVersion": rv.to_string(), "labels": {"tcab.dev/job-kind": kind}}, "status": {}});
            if finished {
                j["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
            }
            j
        };
        let log = [
            line(
                "2026-12-01T10:00:00Z",
                DISPATCHER,
                "create",
                "jobs",
                "",
                "a",
                job("a", "run", 1, false),
            ),
            line(
                "2026-12-01T10:00:01Z",
                DISPATCHER,
                "create",
                "jobs",
                "",
                "b",
                job("b", "run", 2, false),
            ),
            line(
                "2026-12-01T10:00:02Z",
                "system:kube-controller-manager",
                "patch",
                "jobs",
                "status",
                "a",
                job("a", "run", 3, true),
            ),
            line(
                "2026-12-01T10:00:03Z",
                DISPATCHER,
                "create",
                "jobs",
                "",
                "c",
                job("c", "run", 4, false),
            ),
            line(
                "2026-12-01T10:00:04Z",
                DISPATCHER,
                "create",
                "jobs",
                "",
                "p",
                job("p", "publish", 5, false),
            ),
        ]
        .join("\n");
        let t = from_audit_log(&log, &["t"], DISPATCHER);
        assert_eq!(
            max_live_jobs(&t),
            BTreeMap::from([("publish".to_owned(), 1), ("run".to_owned(), 2)])
        );
        assert_eq!(
            live_jobs(&t),
            BTreeMap::from([("publish".to_owned(), 1), ("run".to_owned(), 2)])
        );
    }

    #[test]
    fn writes_are_ordered_by_revision_not_by_when_they_were_answered() {
        let job = |rv: u64, finished: bool| {
            let mut j = json!({"kind": "Job", "metadata": {"name": "a", "uid": "u-a",
                "resourceVersion": rv.to_string(), "labels": {"tcab.dev/job-kind": "run"}}, "status": {}});
            if finished {
                j["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
            }
            j
        };
        let at = |ms: u32| format!("2026-12-01T10:00:00.{ms:03}Z");
        let log = [
            line(&at(0), DISPATCHER, "create", "jobs", "", "a", job(1, false)),
            // Committed at 3, answered last.
            line(&at(9), "admin", "patch", "jobs", "", "a", job(3, false)),
            line(
                &at(5),
                "system:serviceaccount:kube-system:job-controller",
                "update",
                "jobs",
                "status",
                "a",
                job(4, true),
            ),
        ]
        .join("\n");
        let t = from_audit_log(&log, &["t"], DISPATCHER);
        assert_eq!(
            t.iter().map(|e| e.rv).collect::<Vec<_>>(),
            [1, 3, 4],
            "{t:?}"
        );
        assert!(live_jobs(&t).is_empty(), "{t:?}");
    }

    #[test]
    fn the_dispatchers_writes_carry_when_they_were_received_and_answered() {
        let write = |verb: &str, name: &str, received: &str, completed: &str| {
            json!({"stage": "ResponseComplete", "verb": verb,
                "user": {"username": DISPATCHER},
                "objectRef": {"resource": "jobs", "namespace": "t", "name": name},
                "requestURI": "/apis/batch/v1/namespaces/t/jobs",
                "responseStatus": {"code": 201},
                "requestReceivedTimestamp": received, "stageTimestamp": completed})
        };
        let mut dry = write(
            "create",
            "preflight",
            "2026-12-01T10:00:00.000001Z",
            "2026-12-01T10:00:00.000002Z",
        );
        dry["requestURI"] = json!("/apis/batch/v1/namespaces/t/jobs?dryRun=All");
        let mut refused = write(
            "create",
            "refused",
            "2026-12-01T10:00:00.5Z",
            "2026-12-01T10:00:00.6Z",
        );
        refused["responseStatus"]["code"] = json!(422);
        let mut started = write(
            "create",
            "new",
            "2026-12-01T10:00:02.000100Z",
            "2026-12-01T10:00:02.000300Z",
        );
        started["stage"] = json!("RequestReceived");
        let mut others = write(
            "delete",
            "someone",
            "2026-12-01T10:00:01Z",
            "2026-12-01T10:00:01Z",
        );
        others["user"]["username"] = json!("admin");
        let log = [
            write(
                "create",
                "new",
                "2026-12-01T10:00:02.000100Z",
                "2026-12-01T10:00:02.000300Z",
            ),
            started,
            write(
                "delete",
                "stale",
                "2026-12-01T10:00:01.9Z",
                "2026-12-01T10:00:02.000050Z",
            ),
            dry,
            refused,
            others,
        ]
        .map(|v| v.to_string())
        .join("\n");
        let writes = writes_of(&log, &["t"], DISPATCHER);
        let seen: Vec<(&str, &str)> = writes
            .iter()
            .map(|w| (w.verb.as_str(), w.name.as_str()))
            .collect();
        assert_eq!(seen, [("delete", "stale"), ("create", "new")]);
        assert!(writes[0].completed < writes[1].received);
        assert_eq!(
            writes[1].completed,
            "2026-12-01T10:00:02.0003Z".parse::<Timestamp>().unwrap()
        );
        assert!(writes_of(&log, &["u"], DISPATCHER).is_empty());
    }

    #[test]
    fn a_dry_run_create_is_no_job() {
        let job = json!({"kind": "Job", "metadata": {"name": "preflight", "uid": "u-p",
            "resourceVersion": "", "labels": {"tcab.dev/job-kind": "run"}}, "status": {}});
        let mut dry: Value = serde_json::from_str(&line(
            "2026-12-01T10:00:00Z",
            DISPATCHER,
            "create",
            "jobs",
            "",
            "preflight",
            job,
        ))
        .unwrap();
        dry["requestURI"] = json!("/apis/batch/v1/namespaces/t/jobs?dryRun=All");
        let t = from_audit_log(&dry.to_string(), &["t"], DISPATCHER);
        assert!(t.is_empty(), "{t:?}");
    }

    #[test]
    fn the_log_and_its_backups_are_read_for_the_namespaces_asked_and_403s_found() {
        let dir = tempfile::tempdir().expect("temp dir");
        let current = dir.path().join("audit.jsonl");
        let in_t = |name: &str| {
            line(
                "2026-12-01T10:00:00Z",
                DISPATCHER,
                "create",
                "jobs",
                "",
                name,
                json!({}),
            )
        };
        std::fs::write(
            dir.path().join("audit-2026-12-01T09-00-00.000.jsonl"),
            format!("{}\n", in_t("old")),
        )
        .unwrap();
        let other = in_t("elsewhere").replace("\"namespace\":\"t\"", "\"namespace\":\"u\"");
        let refused =
            json!({"stage": "ResponseComplete", "verb": "get", "user": {"username": DISPATCHER},
            "userAgent": "tcab-lease-keeper/0.1.0",
            "requestReceivedTimestamp": "2026-12-01T09:30:00.000000Z",
            "objectRef": {"resource": "pods", "subresource": "log", "namespace": "t"},
            "responseStatus": {"code": 403, "message": "pods is forbidden"}})
            .to_string();
        std::fs::write(&current, format!("{}\n{other}\n{refused}\n", in_t("new"))).unwrap();
        let text = read_audit_log(&current, &["t"]).unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("\"name\":\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(names, ["old", "new"], "{text}");
        assert_eq!(
            forbidden(&text, DISPATCHER),
            ["get pods/log t: pods is forbidden"]
        );
        assert!(forbidden(&text, "someone-else").is_empty());
        let refusals = refusals(&text, DISPATCHER);
        let r = &refusals[0];
        assert_eq!(
            (r.verb.as_str(), r.resource.as_str(), r.agent.as_str()),
            ("get", "pods/log", "tcab-lease-keeper/0.1.0")
        );
        assert_eq!(r.received, Some("2026-12-01T09:30:00Z".parse().unwrap()));
    }
}
