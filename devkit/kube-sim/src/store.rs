//! The object store: every [`Kind`] as JSON, one global resourceVersion
//! counter (like etcd's revision), a bounded history of change events per
//! kind for watch resumption (like the API server's watch cache per
//! resource), fan-out to watchers, pod logs, and the per-lane count of
//! non-terminal Jobs.
//!
//! Deletion follows the generic registry: an object with finalizers is only
//! marked (deletionTimestamp); an update that leaves a marked object whose
//! grace period is 0 without finalizers removes it ([`crate::deletion`]).

use crate::audit::{self, Audit, AuditPage};
use crate::clock::k8s_time;
use crate::deletion::{self, DeleteDecision};
use crate::status::ApiError;
use jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// The kinds of object the sim stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// batch/v1 Job.
    Job,
    /// v1 Pod.
    Pod,
    /// v1 Node (cluster-scoped).
    Node,
    /// v1 Secret.
    Secret,
    /// v1 ServiceAccount.
    ServiceAccount,
    /// v1 Event.
    Event,
    /// events.k8s.io/v1 Event: a view of the core v1 Events, never stored
    /// as itself ([`crate::events_v1`]).
    EventV1,
}

/// What the API says about one kind: where it is served and how it is named.
#[derive(Debug)]
pub struct KindInfo {
    /// API group ("" for core).
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// `apiVersion` of the objects (`batch/v1`, `v1`).
    pub api_version: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Singular resource name (discovery).
    pub singular: &'static str,
    /// `kind` of the objects.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names kubectl accepts.
    pub short_names: &'static [&'static str],
    /// Discovery categories (`all`).
    pub categories: &'static [&'static str],
    /// Subresources served, with their verbs.
    pub subresources: &'static [(&'static str, &'static [&'static str])],
}

const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

const INFOS: [KindInfo; 7] = [
    KindInfo {
        group: "batch",
        version: "v1",
        api_version: "batch/v1",
        resource: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &[("status", GET_PATCH_UPDATE)],
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        resource: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        subresources: &[
            ("eviction", &["create"]),
            ("log", &["get"]),
            ("status", GET_PATCH_UPDATE),
        ],
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        resource: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        subresources: &[("status", GET_PATCH_UPDATE)],
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        resource: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        resource: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        categories: &[],
        subresources: &[],
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
    },
    KindInfo {
        group: "events.k8s.io",
        version: "v1",
        api_version: "events.k8s.io/v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
    },
];

impl Kind {
    /// Every kind, in the order of [`Kind`].
    pub const ALL: [Kind; 7] = [
        Kind::Job,
        Kind::Pod,
        Kind::Node,
        Kind::Secret,
        Kind::ServiceAccount,
        Kind::Event,
        Kind::EventV1,
    ];

    /// The static description of this kind.
    pub fn info(self) -> &'static KindInfo {
        &INFOS[self as usize]
    }
    /// API group ("" for core).
    pub fn group(self) -> &'static str {
        self.info().group
    }
    /// `apiVersion` of the objects.
    pub fn api_version(self) -> &'static str {
        self.info().api_version
    }
    /// Plural resource name.
    pub fn resource(self) -> &'static str {
        self.info().resource
    }
    /// `kind` of the objects.
    pub fn kind(self) -> &'static str {
        self.info().kind
    }
    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        self.info().namespaced
    }
    /// The kind served at `group`/`version` as `resource`, if any.
    pub fn from_resource(group: &str, version: &str, resource: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| {
            let i = k.info();
            i.group == group && i.version == version && i.resource == resource
        })
    }
    /// The not-found error for a name of this kind.
    pub fn not_found(self, name: &str) -> ApiError {
        ApiError::not_found(self.group(), self.resource(), name)
    }
}

/// Where an object lives: kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Job or Pod.
    pub kind: Kind,
    /// Namespace.
    pub ns: String,
    /// Name.
    pub name: String,
}

impl Key {
    /// Builds a key.
    pub fn new(kind: Kind, ns: &str, name: &str) -> Self {
        Key {
            kind,
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion this change produced.
    pub rv: u64,
    /// Added, modified or deleted.
    pub etype: EventType,
    /// Which object.
    pub key: Key,
    /// The object after the change (for a deletion, its last state with
    /// the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change (`None` for a creation and for the
    /// synthetic ADDED of a watch's initial state). A filtered watch needs
    /// it to tell "stopped matching" (DELETED) from "started matching"
    /// (ADDED), as the API server's watch cache does.
    pub prev: Option<Arc<Value>>,
}

/// What a watch starts from: events to send first, then the live channel.
pub struct WatchStart {
    /// Events to send before the live ones (history, or synthetic ADDED).
    pub initial: Vec<Arc<Event>>,
    /// The store's resourceVersion when the watch started.
    pub start_rv: u64,
    /// Live events after `start_rv`.
    pub rx: broadcast::Receiver<Arc<Event>>,
}

/// One log line of a pod's container.
#[derive(Debug, Clone)]
struct LogLine {
    container: String,
    line: String,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: BTreeMap<Kind, VecDeque<Arc<Event>>>,
    /// Per kind: every event with rv <= this has left the history.
    compacted: BTreeMap<Kind, u64>,
    logs: HashMap<(String, String), Vec<LogLine>>,
    live_jobs: BTreeMap<String, i64>,
    max_live_jobs: BTreeMap<String, i64>,
    /// Pods by the uid of the Job that controls them.
    owned: HashMap<String, BTreeSet<Key>>,
    /// Every change to a Pod or a Job, with who made it.
    audit: Audit,
}

/// The uid of the controller (ownerReference with `controller: true`) of an object.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
}

/// One page of a LIST ([`Store::list_page`]).
#[derive(Debug, Clone)]
pub struct Page {
    /// The resourceVersion the page was read at (a continued page: the
    /// first page's).
    pub rv: u64,
    /// Its objects, in key order.
    pub items: Vec<Arc<Value>>,
    /// `Some(n)` when more follow (see [`Store::list_page`]).
    pub more: Option<usize>,
}

/// The in-memory object store. All writes take one short lock.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    history_limit: usize,
}

/// The `tcab.dev/job-kind` label of a Job ("" when unlabelled).
pub fn lane_of(job: &Value) -> String {
    job["metadata"]["labels"]["tcab.dev/job-kind"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Whether a Job has a true `Complete` or `Failed` condition.
pub fn job_finished(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Five random characters, as the API server appends for `generateName`.
pub fn random_suffix() -> String {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[..5]
        .iter()
        .map(|b| NAME_CHARS[*b as usize % NAME_CHARS.len()] as char)
        .collect()
}

impl Store {
    /// A store keeping up to `history_limit` events for watch resumption.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(65_536);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: BTreeMap::new(),
                compacted: BTreeMap::new(),
                logs: HashMap::new(),
                live_jobs: BTreeMap::new(),
                max_live_jobs: BTreeMap::new(),
                owned: HashMap::new(),
                audit: Audit::default(),
            }),
            tx,
            history_limit: history_limit.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// A receiver of every future event.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    fn commit(&self, inner: &mut Inner, etype: EventType, key: Key, mut obj: Value) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let obj = Arc::new(obj);
        let old = match etype {
            EventType::Deleted => inner.objects.remove(&key),
            _ => inner.objects.insert(key.clone(), obj.clone()),
        };
        if key.kind == Kind::Job {
            let live = |j: &Value| (lane_of(j), !job_finished(j));
            if let Some(o) = &old {
                let (lane, was_live) = live(o);
                if was_live {
                    *inner.live_jobs.entry(lane).or_default() -= 1;
                }
            }
            if etype != EventType::Deleted {
                let (lane, is_live) = live(&obj);
                if is_live {
                    let n = inner.live_jobs.entry(lane.clone()).or_default();
                    *n += 1;
                    let n = *n;
                    let max = inner.max_live_jobs.entry(lane).or_default();
                    *max = (*max).max(n);
                }
            }
        }
        if key.kind == Kind::Pod {
            if etype == EventType::Deleted {
                inner.logs.remove(&(key.ns.clone(), key.name.clone()));
            }
            if let Some(uid) = old.as_deref().and_then(controller_uid)
                && let Some(set) = inner.owned.get_mut(uid)
            {
                set.remove(&key);
                if set.is_empty() {
                    inner.owned.remove(uid);
                }
            }
            if etype != EventType::Deleted
                && let Some(uid) = controller_uid(&obj)
            {
                inner
                    .owned
                    .entry(uid.to_string())
                    .or_default()
                    .insert(key.clone());
            }
        }
        inner
            .audit
            .record(etype, key.kind, rv, &obj, audit::current_actor());
        let ev = Arc::new(Event {
            rv,
            etype,
            key,
            object: obj.clone(),
            prev: old,
        });
        let kind = ev.key.kind;
        let history = inner.history.entry(kind).or_default();
        history.push_back(ev.clone());
        let mut dropped = None;
        while history.len() > self.history_limit {
            if let Some(old) = history.pop_front() {
                dropped = Some(old.rv);
            }
        }
        if let Some(rv) = dropped {
            inner.compacted.insert(kind, rv);
        }
        let _ = self.tx.send(ev);
        obj
    }

    /// Creates an object: fills name (from generateName), namespace, uid,
    /// creationTimestamp and resourceVersion. 409 when the name is taken
    /// ([`ApiError::already_exists_as`]).
    pub fn create(
        &self,
        kind: Kind,
        ns: &str,
        mut obj: Value,
        now: Timestamp,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let given = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let name = if given.is_empty() {
            let prefix = obj["metadata"]["generateName"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut name = format!("{prefix}{}", random_suffix());
            for _ in 0..8 {
                if !inner.objects.contains_key(&Key::new(kind, ns, &name)) {
                    break;
                }
                name = format!("{prefix}{}", random_suffix());
            }
            name
        } else {
            given
        };
        let key = Key::new(kind, ns, &name);
        if let Some(existing) = inner.objects.get(&key) {
            return Err(ApiError::already_exists_as(kind, &name, existing));
        }
        obj["apiVersion"] = json!(kind.api_version());
        obj["kind"] = json!(kind.kind());
        let md = &mut obj["metadata"];
        md["name"] = json!(name);
        if kind.namespaced() {
            md["namespace"] = json!(ns);
        } else if let Some(m) = md.as_object_mut() {
            m.remove("namespace");
        }
        if md["uid"].as_str().is_none_or(str::is_empty) {
            md["uid"] = json!(uuid::Uuid::new_v4().to_string());
        }
        md["creationTimestamp"] = json!(k8s_time(now));
        if let Some(m) = md.as_object_mut() {
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
        }
        if kind == Kind::Job {
            md["generation"] = json!(1);
        }
        Ok(self.commit(&mut inner, EventType::Added, key, obj))
    }

    /// Reads one object.
    pub fn get(&self, key: &Key) -> Option<Arc<Value>> {
        self.lock().objects.get(key).cloned()
    }

    /// Lists objects of a kind (in one namespace, or all) that pass `keep`,
    /// sorted by namespace and name, with the store's resourceVersion.
    pub fn list(
        &self,
        kind: Kind,
        ns: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> (u64, Vec<Arc<Value>>) {
        let inner = self.lock();
        let items = inner
            .objects
            .range(range_of(kind, ns))
            .filter(|(k, _)| ns.is_none_or(|n| k.ns == n))
            .filter(|(_, v)| keep(v))
            .map(|(_, v)| v.clone())
            .collect();
        (inner.rv, items)
    }

    /// One page of a LIST (see [`Page`]): the objects of `kind` (in `ns`, or all) after
    /// `after` (a namespace and name, as a continue token carries them) that
    /// `keep` accepts, at most `limit` of them, and how many more follow
    /// (`Some(n)` when the page is not the last; with `keep: None`, every
    /// object is kept and `n` counts the rest, as etcd's range count does;
    /// with a `keep`, `n` is 1, since counting what it accepts would read the
    /// whole rest). The range starts after `after` and stops at the first
    /// object past the page unless counting, so a selected page costs its
    /// own size, not the whole kind's.
    ///
    /// A continued page (`after` with the first page's resourceVersion) is
    /// read at that resourceVersion, as etcd (or the watch cache's
    /// snapshot) serves it: what was created, changed or deleted since shows
    /// as it was then, rebuilt from the history (each changed object's state
    /// before its first change since); 410 `Expired` when that history is
    /// gone.
    pub fn list_page(
        &self,
        kind: Kind,
        ns: Option<&str>,
        after: Option<(u64, &str, &str)>,
        limit: Option<usize>,
        keep: Option<&dyn Fn(&Value) -> bool>,
    ) -> Result<Page, ApiError> {
        use std::ops::Bound;
        let inner = self.lock();
        let whole = range_of(kind, ns);
        let start = match after {
            Some((rv, ans, aname)) => {
                if rv < inner.compacted.get(&kind).copied().unwrap_or(1) {
                    return Err(ApiError::expired_continue());
                }
                Bound::Excluded(Key::new(kind, ans, aname))
            }
            None => Bound::Included(whole.start().clone()),
        };
        let end = Bound::Included(whole.end().clone());
        // The state at the snapshot of every object changed since (`None`:
        // it did not exist then).
        let mut then: BTreeMap<Key, Option<Arc<Value>>> = BTreeMap::new();
        if let Some((rv, _, _)) = after {
            for ev in inner.history.get(&kind).into_iter().flatten() {
                if ev.rv > rv && !then.contains_key(&ev.key) {
                    then.insert(ev.key.clone(), ev.prev.clone());
                }
            }
        }
        let snapshot: Vec<(&Key, &Arc<Value>)> = if then.is_empty() {
            inner.objects.range((start, end)).collect()
        } else {
            let mut at: BTreeMap<&Key, &Arc<Value>> = inner
                .objects
                .range((start.clone(), end.clone()))
                .filter(|(k, _)| !then.contains_key(*k))
                .collect();
            for (k, v) in then.range((start, end)) {
                if let Some(v) = v {
                    at.insert(k, v);
                }
            }
            at.into_iter().collect()
        };
        let mut items = Vec::new();
        let mut more = 0;
        for (k, v) in snapshot {
            if ns.is_some_and(|n| k.ns != n) || keep.is_some_and(|keep| !keep(v)) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more += 1;
                if keep.is_some() {
                    break;
                }
                continue;
            }
            items.push(v.clone());
        }
        Ok(Page {
            rv: after.map_or(inner.rv, |(rv, _, _)| rv),
            items,
            more: (more > 0).then_some(more),
        })
    }

    /// The pods whose controller is the object with this uid, by name.
    pub fn owned_pods(&self, uid: &str) -> Vec<Arc<Value>> {
        let inner = self.lock();
        inner
            .owned
            .get(uid)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.objects.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Applies `change` to an object; a change that returns `Ok(false)`
    /// writes nothing. 404 when absent.
    pub fn update(
        &self,
        key: &Key,
        change: impl FnOnce(&mut Value) -> Result<bool, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let current = inner
            .objects
            .get(key)
            .ok_or_else(|| key.kind.not_found(&key.name))?;
        let mut obj = (**current).clone();
        if !change(&mut obj)? {
            return Ok(current.clone());
        }
        if deletion::should_delete_during_update(current, &obj) {
            // Upstream's store does not write the update: it deletes the
            // stored object (`deleteWithoutFinalizers`), so the DELETED
            // event carries it as it was, finalizers included (etcd's
            // previous key-value).
            let stored = (**current).clone();
            return Ok(self.commit(&mut inner, EventType::Deleted, key.clone(), stored));
        }
        Ok(self.commit(&mut inner, EventType::Modified, key.clone(), obj))
    }

    /// Deletes an object as the generic registry does (see
    /// [`deletion::decide`]): removed at once, or marked with a
    /// deletionTimestamp while finalizers or a grace period hold it.
    /// Returns the object's last state and whether it is gone.
    pub fn delete(
        &self,
        key: &Key,
        grace: Option<i64>,
        now: Timestamp,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let mut inner = self.lock();
        let current = inner
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| key.kind.not_found(&key.name))?;
        match deletion::decide(key.kind, &current, grace, now) {
            DeleteDecision::Unchanged => Ok((current, false)),
            DeleteDecision::Remove { mark } => {
                let mut obj = (*current).clone();
                if let Some((at, g)) = mark {
                    deletion::mark(&mut obj, at, g);
                    obj = (*self.commit(&mut inner, EventType::Modified, key.clone(), obj)).clone();
                }
                Ok((
                    self.commit(&mut inner, EventType::Deleted, key.clone(), obj),
                    true,
                ))
            }
            DeleteDecision::Mark { at, grace } => {
                let mut obj = (*current).clone();
                deletion::mark(&mut obj, at, grace);
                Ok((
                    self.commit(&mut inner, EventType::Modified, key.clone(), obj),
                    false,
                ))
            }
        }
    }

    /// Removes an object; returns its last state (with the deletion's rv).
    pub fn remove(&self, key: &Key) -> Option<Arc<Value>> {
        let mut inner = self.lock();
        let obj = (**inner.objects.get(key)?).clone();
        Some(self.commit(&mut inner, EventType::Deleted, key.clone(), obj))
    }

    /// Starts a watch of `kind` (one namespace or all). With `from` = a
    /// resourceVersion, the history after it is replayed (410 when that
    /// history is gone); with `None`, every current object is sent as ADDED.
    pub fn watch(
        &self,
        kind: Kind,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        let in_scope = |k: &Key| k.kind == kind && ns.is_none_or(|n| k.ns == n);
        let compacted = inner.compacted.get(&kind).copied().unwrap_or(1);
        let initial = match from {
            Some(rv) if rv < compacted => return Err(ApiError::expired_watch(rv, compacted)),
            Some(rv) => inner
                .history
                .get(&kind)
                .into_iter()
                .flatten()
                .filter(|e| e.rv > rv && in_scope(&e.key))
                .cloned()
                .collect(),
            None => inner
                .objects
                .range(range_of(kind, ns))
                .filter(|(k, _)| in_scope(k))
                .map(|(k, v)| {
                    let rv = v["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    Arc::new(Event {
                        rv,
                        etype: EventType::Added,
                        key: k.clone(),
                        object: v.clone(),
                        prev: None,
                    })
                })
                .collect(),
        };
        Ok(WatchStart {
            initial,
            start_rv: inner.rv,
            rx,
        })
    }

    /// Drops the whole event history (an admin action): every watch resumed
    /// from an older resourceVersion then gets 410 Gone.
    pub fn compact(&self) -> u64 {
        let mut inner = self.lock();
        inner.history.clear();
        let rv = inner.rv;
        for kind in Kind::ALL {
            inner.compacted.insert(kind, rv);
        }
        rv
    }

    /// Compacts as an API-server restart does: the revision moves on (the
    /// restarting server writes its own lease and endpoints, so etcd's
    /// revision is past anything a client saw) and the new watch cache
    /// starts there, empty. Every resourceVersion a client holds is then too
    /// old to resume from (410). Returns the new resourceVersion.
    pub fn compact_for_restart(&self) -> u64 {
        let mut inner = self.lock();
        inner.rv += 1;
        inner.history.clear();
        let rv = inner.rv;
        for kind in Kind::ALL {
            inner.compacted.insert(kind, rv);
        }
        rv
    }

    /// The audit timeline after position `after`, at most `limit` entries
    /// (see [`crate::audit`]).
    pub fn audit_page(&self, after: u64, limit: usize) -> AuditPage {
        self.lock().audit.page(after, limit)
    }

    /// Appends a line to a pod container's log.
    pub fn append_log(&self, ns: &str, pod: &str, container: &str, line: &str) {
        let mut inner = self.lock();
        if !inner.objects.contains_key(&Key::new(Kind::Pod, ns, pod)) {
            return;
        }
        inner
            .logs
            .entry((ns.to_string(), pod.to_string()))
            .or_default()
            .push(LogLine {
                container: container.to_string(),
                line: line.to_string(),
            });
    }

    /// The log lines of one container of a pod (the last `tail` of them).
    pub fn read_log(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        tail: Option<usize>,
    ) -> Vec<String> {
        let inner = self.lock();
        let lines: Vec<String> = inner
            .logs
            .get(&(ns.to_string(), pod.to_string()))
            .map(|ls| {
                ls.iter()
                    .filter(|l| l.container == container)
                    .map(|l| l.line.clone())
                    .collect()
            })
            .unwrap_or_default();
        match tail {
            Some(n) if n < lines.len() => lines[lines.len() - n..].to_vec(),
            _ => lines,
        }
    }

    /// The current and the largest number of non-terminal Jobs per
    /// `tcab.dev/job-kind` value ("" = unlabelled).
    pub fn job_counts(&self) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        let inner = self.lock();
        (inner.live_jobs.clone(), inner.max_live_jobs.clone())
    }

    /// Resets the largest-seen counts to the current counts.
    pub fn reset_max_jobs(&self) {
        let mut inner = self.lock();
        inner.max_live_jobs = inner.live_jobs.clone();
    }
}

fn range_of(kind: Kind, ns: Option<&str>) -> std::ops::RangeInclusive<Key> {
    match ns {
        Some(ns) => {
            Key::new(kind, ns, "")..=Key {
                kind,
                ns: format!("{ns}\u{0}"),
                name: String::new(),
            }
        }
        None => {
            Key::new(kind, "", "")..=Key {
                kind,
                ns: "\u{10FFFF}".into(),
                name: String::new(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn create_get_list_update_remove() {
        let s = Store::new(100);
        let now = Timestamp::now();
        let a = s.create(Kind::Pod, "ns", pod("a"), now).unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert!(s.create(Kind::Pod, "ns", pod("a"), now).is_err());
        s.create(Kind::Pod, "other", pod("a"), now).unwrap();
        let g = s
            .create(
                Kind::Pod,
                "ns",
                json!({"metadata": {"generateName": "x-"}}),
                now,
            )
            .unwrap();
        assert!(g["metadata"]["name"].as_str().unwrap().starts_with("x-"));
        let (rv, items) = s.list(Kind::Pod, Some("ns"), |_| true);
        assert_eq!((rv, items.len()), (4, 2));
        assert_eq!(s.list(Kind::Pod, None, |_| true).1.len(), 3);
        assert_eq!(s.list(Kind::Job, None, |_| true).1.len(), 0);
        let key = Key::new(Kind::Pod, "ns", "a");
        let same = s.update(&key, |_| Ok(false)).unwrap();
        assert_eq!(same["metadata"]["resourceVersion"], "2");
        let up = s.update(&key, |o| {
            o["status"]["phase"] = json!("Running");
            Ok(true)
        });
        assert_eq!(up.unwrap()["metadata"]["resourceVersion"], "5");
        assert_eq!(s.remove(&key).unwrap()["metadata"]["resourceVersion"], "6");
        assert!(s.get(&key).is_none());
    }

    #[test]
    fn continued_pages_are_read_at_the_first_pages_version() {
        let s = Store::new(100);
        let now = Timestamp::now();
        for n in ["p1", "p2", "p3", "p4", "p5"] {
            s.create(Kind::Pod, "ns", pod(n), now).unwrap();
        }
        let names = |items: &[Arc<Value>]| -> Vec<String> {
            items
                .iter()
                .map(|o| {
                    format!(
                        "{}={}",
                        o["metadata"]["name"].as_str().unwrap(),
                        o["metadata"]["labels"]["a"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let first = s
            .list_page(Kind::Pod, Some("ns"), None, Some(2), None)
            .unwrap();
        let rv = first.rv;
        assert_eq!(
            (names(&first.items), first.more),
            (vec!["p1=b".into(), "p2=b".into()], Some(3))
        );
        // Between the pages: one created after the cursor, one deleted, one changed.
        s.create(Kind::Pod, "ns", pod("p9"), now).unwrap();
        s.remove(&Key::new(Kind::Pod, "ns", "p3")).unwrap();
        let p4 = Key::new(Kind::Pod, "ns", "p4");
        for v in ["c", "d"] {
            s.update(&p4, |p| {
                p["metadata"]["labels"]["a"] = json!(v);
                Ok(true)
            })
            .unwrap();
        }
        let page = s
            .list_page(Kind::Pod, Some("ns"), Some((rv, "ns", "p2")), Some(2), None)
            .unwrap();
        assert_eq!(page.rv, rv);
        assert_eq!(names(&page.items), ["p3=b", "p4=b"]);
        assert_eq!(page.more, Some(1));
        let last = s
            .list_page(Kind::Pod, Some("ns"), Some((rv, "ns", "p4")), Some(2), None)
            .unwrap();
        assert_eq!((names(&last.items), last.more), (vec!["p5=b".into()], None));
        // A fresh list sees the present.
        let now_page = s
            .list_page(Kind::Pod, Some("ns"), None, None, None)
            .unwrap();
        assert_eq!(
            names(&now_page.items),
            ["p1=b", "p2=b", "p4=d", "p5=b", "p9=b"]
        );
        // With the history gone, the snapshot cannot be read: 410.
        s.compact();
        let gone = s.list_page(Kind::Pod, Some("ns"), Some((rv, "ns", "p2")), Some(2), None);
        assert_eq!(gone.err().map(|e| e.code), Some(410));
    }

    #[test]
    fn watch_replays_history_and_expires() {
        let s = Store::new(3);
        let now = Timestamp::now();
        for n in ["a", "b", "c", "d"] {
            s.create(Kind::Pod, "ns", pod(n), now).unwrap();
        }
        // rv 2..=5 written; history keeps 3..=5.
        let w = s.watch(Kind::Pod, Some("ns"), Some(3)).unwrap();
        assert_eq!(
            w.initial.iter().map(|e| e.rv).collect::<Vec<_>>(),
            vec![4, 5]
        );
        assert!(s.watch(Kind::Pod, Some("ns"), Some(1)).is_err());
        let w = s.watch(Kind::Pod, Some("ns"), None).unwrap();
        assert_eq!(w.initial.len(), 4);
        s.compact();
        assert_eq!(
            s.watch(Kind::Pod, Some("ns"), Some(4)).err().unwrap().code,
            410
        );
    }

    #[test]
    fn events_carry_the_previous_object() {
        let s = Store::new(10);
        let mut rx = s.subscribe();
        let now = Timestamp::now();
        s.create(Kind::Pod, "ns", pod("a"), now).unwrap();
        let key = Key::new(Kind::Pod, "ns", "a");
        s.update(&key, |p| {
            p["metadata"]["labels"]["a"] = json!("c");
            Ok(true)
        })
        .unwrap();
        s.remove(&key).unwrap();
        let added = rx.try_recv().unwrap();
        assert!(added.prev.is_none());
        let modified = rx.try_recv().unwrap();
        let prev = modified.prev.as_ref().unwrap();
        assert_eq!(
            (
                &prev["metadata"]["labels"]["a"],
                &prev["metadata"]["resourceVersion"]
            ),
            (&json!("b"), &json!("2"))
        );
        assert_eq!(modified.object["metadata"]["labels"]["a"], "c");
        let deleted = rx.try_recv().unwrap();
        assert_eq!(deleted.etype, EventType::Deleted);
        assert_eq!(
            deleted.prev.as_ref().unwrap()["metadata"]["resourceVersion"],
            "3"
        );
        assert_eq!(deleted.object["metadata"]["resourceVersion"], "4");
        // the history replayed to a resuming watch has them too
        let w = s.watch(Kind::Pod, Some("ns"), Some(2)).unwrap();
        assert!(w.initial.iter().all(|e| e.prev.is_some()));
    }

    #[test]
    fn removing_the_last_finalizer_of_a_marked_object_deletes_it_as_stored() {
        let s = Store::new(10);
        let now = Timestamp::now();
        let mut p = pod("a");
        p["metadata"]["finalizers"] = json!(["batch.kubernetes.io/job-tracking"]);
        s.create(Kind::Pod, "ns", p, now).unwrap();
        let key = Key::new(Kind::Pod, "ns", "a");
        let (marked, gone) = s.delete(&key, Some(0), now).unwrap();
        assert!(!gone && marked["metadata"]["deletionTimestamp"].is_string());
        let mut rx = s.subscribe();
        let out = s
            .update(&key, |p| {
                p["metadata"]["finalizers"] = json!([]);
                p["metadata"]["labels"]["a"] = json!("changed");
                Ok(true)
            })
            .unwrap();
        assert!(s.get(&key).is_none());
        let ev = rx.try_recv().unwrap();
        assert_eq!(ev.etype, EventType::Deleted);
        // the stored object, not the update: upstream deletes instead of writing
        for o in [&ev.object, &out] {
            assert_eq!(
                o["metadata"]["finalizers"],
                json!(["batch.kubernetes.io/job-tracking"])
            );
            assert_eq!(o["metadata"]["labels"]["a"], "b");
        }
        assert_eq!(ev.object["metadata"]["resourceVersion"], "4");
    }

    #[test]
    fn a_restart_leaves_every_held_resource_version_too_old() {
        let s = Store::new(10);
        s.create(Kind::Pod, "ns", pod("a"), Timestamp::now())
            .unwrap();
        let held = s.rv();
        assert!(s.watch(Kind::Pod, None, Some(held)).is_ok());
        let now = s.compact_for_restart();
        assert_eq!(now, held + 1);
        let e = s.watch(Kind::Pod, None, Some(held)).err().unwrap();
        assert_eq!(e.code, 410);
        // as the watch cache words it: the version asked, the oldest kept
        assert_eq!(
            e.message,
            format!("too old resource version: {held} ({now})")
        );
        assert!(s.watch(Kind::Pod, None, Some(now)).is_ok());
        let created = s
            .create(Kind::Pod, "ns", pod("b"), Timestamp::now())
            .unwrap();
        assert_eq!(
            created["metadata"]["resourceVersion"],
            (now + 1).to_string()
        );
    }

    #[test]
    fn counts_live_jobs_per_lane() {
        let s = Store::new(10);
        let now = Timestamp::now();
        let job =
            |n: &str| json!({"metadata": {"name": n, "labels": {"tcab.dev/job-kind": "run"}}});
        s.create(Kind::Job, "ns", job("a"), now).unwrap();
        s.create(Kind::Job, "ns", job("b"), now).unwrap();
        s.update(&Key::new(Kind::Job, "ns", "a"), |j| {
            j["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
            Ok(true)
        })
        .unwrap();
        s.create(Kind::Job, "ns", job("c"), now).unwrap();
        let (live, max) = s.job_counts();
        assert_eq!(live["run"], 2);
        assert_eq!(max["run"], 2);
        s.remove(&Key::new(Kind::Job, "ns", "b"));
        assert_eq!(s.job_counts().0["run"], 1);
    }

    #[test]
    fn indexes_pods_by_controller() {
        let s = Store::new(10);
        let now = Timestamp::now();
        let owned = |n: &str| json!({"metadata": {"name": n, "ownerReferences": [{"kind": "Job", "uid": "u1", "controller": true}]}});
        s.create(Kind::Pod, "ns", owned("a"), now).unwrap();
        s.create(Kind::Pod, "ns", owned("b"), now).unwrap();
        s.create(Kind::Pod, "ns", pod("c"), now).unwrap();
        assert_eq!(s.owned_pods("u1").len(), 2);
        s.update(&Key::new(Kind::Pod, "ns", "a"), |p| {
            p["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("ownerReferences");
            Ok(true)
        })
        .unwrap();
        s.remove(&Key::new(Kind::Pod, "ns", "b"));
        assert!(s.owned_pods("u1").is_empty());
    }
}
