//! WATCH: history replay or synthetic ADDED, selector transitions (ADDED
//! when an object starts matching, DELETED when it stops, as the API
//! server's watch cache sends them), bookmarks, the `timeoutSeconds`
//! deadline, and the `silence` fault.

use super::{Query, selectors};
use crate::faults::{RequestAttrs, Stage};
use crate::selector::{FieldSelector, LabelSelector};
use crate::sim::Sim;
use crate::status::ApiError;
use crate::store::{Event, EventType, Kind, WatchStart};
use crate::table::{self, IncludeObject};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// The watch timeout when the client gives none (the API server's
/// `--min-request-timeout` default; it adds up to as much again at random).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

pub(super) fn event_line(etype: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": etype, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// What a watcher whose selectors `passes` sends for one store event, as
/// the API server's cache watcher decides it (`convertToWatchEvent` in
/// staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go): the
/// object matching now and before is MODIFIED, matching only now is ADDED,
/// matching only before is DELETED (the previous object's content, with
/// the event's resourceVersion); neither is nothing. A deletion matches
/// "now" never.
pub(crate) fn convert(
    ev: &Event,
    passes: impl Fn(&Value) -> bool,
) -> Option<(EventType, Arc<Value>)> {
    let deleted = ev.etype == EventType::Deleted;
    let now = !deleted && passes(&ev.object);
    // A deletion's object is its last state; the store always gives the
    // previous one too, but fall back on the object if it did not.
    let before_obj = ev.prev.as_ref().or_else(|| deleted.then_some(&ev.object));
    let before = before_obj.is_some_and(|p| passes(p));
    match (now, before) {
        (true, false) => Some((EventType::Added, ev.object.clone())),
        (true, true) => Some((EventType::Modified, ev.object.clone())),
        (false, true) => {
            // A deletion's object already is the previous content at the
            // deletion's resourceVersion.
            if deleted {
                return Some((EventType::Deleted, ev.object.clone()));
            }
            let mut gone = (**before_obj?).clone();
            gone["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
            Some((EventType::Deleted, Arc::new(gone)))
        }
        (false, false) => None,
    }
}

/// The request's `timeoutSeconds` (0 or absent: the default).
fn timeout_of(q: &Query) -> Result<Duration, ApiError> {
    match q.get("timeoutSeconds").map(String::as_str) {
        None | Some("") => Ok(DEFAULT_TIMEOUT),
        Some(t) => match t.parse::<u64>() {
            Ok(0) => Ok(DEFAULT_TIMEOUT),
            Ok(s) => Ok(Duration::from_secs(s)),
            Err(_) => Err(ApiError::bad_request(format!(
                "invalid timeoutSeconds {t:?}: not a whole number of seconds"
            ))),
        },
    }
}

/// A watch request, as parsed by the router.
pub(super) struct WatchRequest {
    pub kind: Kind,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub table: bool,
    pub include: IncludeObject,
    /// `jobs`, `pods`: for fault scoping.
    pub resource: String,
    /// The bearer token presented: for fault scoping.
    pub token: Option<String>,
    /// A `silence` fault met the request on arrival.
    pub silenced: bool,
}

pub(super) fn watch(sim: &Arc<Sim>, w: WatchRequest, q: &Query) -> Result<Response, ApiError> {
    let (label, mut field) = selectors(w.kind, q)?;
    if let Some(n) = &w.name {
        field = FieldSelector::parse(&format!("metadata.name={n}"), w.kind.resource())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let bookmarks = super::params::flag(q, "allowWatchBookmarks");
    let initial_events = super::params::flag(q, "sendInitialEvents");
    let timeout = timeout_of(q)?;
    let deadline = tokio::time::Instant::now() + timeout;
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let from = if initial_events { None } else { from };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let start = sim.store.watch(w.kind, w.ns.as_deref(), from);
    let (id, close) = sim
        .faults
        .book
        .register_watch(&w.resource, w.token.as_deref());
    let registered = Registered {
        sim: sim.clone(),
        id,
    };
    let mut progress = Progress {
        seen: 0,
        silent: false,
    };
    if w.silenced {
        progress.silent = true;
        sim.faults.book.mark_silenced(id);
    }
    let streamer = Streamer {
        sim: sim.clone(),
        w,
        label,
        field,
        bookmarks,
        initial_events,
        tx,
        close,
        id,
    };
    tokio::spawn(async move {
        let run = streamer.run(start, &mut progress);
        let timed_out = tokio::time::timeout_at(deadline, run).await.is_err();
        // At the deadline a watch that allows bookmarks gets one last
        // bookmark (the API server sends it just before), then the stream
        // ends cleanly; a silenced watch ends with nothing.
        if timed_out && streamer.bookmarks && !progress.silent {
            let _ = streamer
                .tx
                .try_send(Ok(streamer.bookmark(progress.seen, false)));
        }
        // Unregistered before the client sees the end of the stream.
        drop(registered);
        drop(streamer);
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut res = Response::new(Body::from_stream(stream));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(res)
}

/// Unregisters the watch when its task ends, however it ends.
struct Registered {
    sim: Arc<Sim>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.sim.faults.book.unregister_watch(self.id);
    }
}

/// What the watch has done so far.
struct Progress {
    /// The resourceVersion its bookmarks carry.
    seen: u64,
    /// Silenced: it sends nothing more.
    silent: bool,
}

struct Streamer {
    sim: Arc<Sim>,
    w: WatchRequest,
    label: LabelSelector,
    field: FieldSelector,
    bookmarks: bool,
    initial_events: bool,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    close: Arc<Notify>,
    id: u64,
}

/// Why sending stopped.
struct Gone;

impl Streamer {
    async fn run(&self, start: Result<WatchStart, ApiError>, p: &mut Progress) {
        if self.stream(start, p).await.is_err() {
            return;
        }
        // Silenced: nothing more is sent; the deadline (the caller's
        // timeout), the client or the admin ends the watch.
        tokio::select! {
            _ = self.tx.closed() => {}
            _ = self.close.notified() => {}
        }
    }

    /// Streams until the watch ends (`Err`) or goes silent (`Ok`).
    async fn stream(
        &self,
        start: Result<WatchStart, ApiError>,
        p: &mut Progress,
    ) -> Result<(), Gone> {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                if !self.goes_silent(p) {
                    let _ = self.tx.send(Ok(event_line("ERROR", &e.to_status()))).await;
                    return Err(Gone);
                }
                return Ok(());
            }
        };
        p.seen = start.start_rv;
        for ev in start.initial.iter().filter(|e| self.in_scope(e)) {
            if let Some(out) = self.convert(ev) {
                if self.goes_silent(p) {
                    return Ok(());
                }
                self.send(self.render(out, ev.rv)).await?;
            }
        }
        if self.initial_events && self.bookmarks {
            if self.goes_silent(p) {
                return Ok(());
            }
            self.send(self.bookmark(p.seen, true)).await?;
        }
        let mut live = start.rx;
        let mut tick = tokio::time::interval(
            self.sim
                .clock
                .real(self.sim.timing.bookmark_interval)
                .max(Duration::from_millis(10)),
        );
        tick.tick().await;
        loop {
            tokio::select! {
                _ = self.tx.closed() => return Err(Gone),
                _ = self.close.notified() => return Err(Gone),
                _ = tick.tick(), if self.bookmarks => {
                    if self.goes_silent(p) {
                        return Ok(());
                    }
                    self.send(self.bookmark(p.seen, false)).await?;
                }
                ev = live.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= p.seen {
                            continue;
                        }
                        p.seen = ev.rv;
                        if !self.in_scope(&ev) {
                            continue;
                        }
                        if let Some(out) = self.convert(&ev) {
                            if self.goes_silent(p) {
                                return Ok(());
                            }
                            self.send(self.render(out, ev.rv)).await?;
                        }
                    }
                    // A watcher too slow to keep up is closed; the client resumes.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return Err(Gone),
                }
            }
        }
    }

    async fn send(&self, line: Bytes) -> Result<(), Gone> {
        self.tx.send(Ok(line)).await.map_err(|_| Gone)
    }

    /// Whether the watch is (or now goes) silent: a `silence` fault meets
    /// it at the next thing it would send.
    fn goes_silent(&self, p: &mut Progress) -> bool {
        if p.silent {
            return true;
        }
        let attrs = RequestAttrs {
            verb: "watch",
            resource: &self.w.resource,
            token: self.w.token.as_deref(),
        };
        if self
            .sim
            .faults
            .book
            .take(&attrs, Stage::OpenWatch)
            .is_some()
        {
            p.silent = true;
            self.sim.faults.book.mark_silenced(self.id);
        }
        p.silent
    }

    fn in_scope(&self, ev: &Event) -> bool {
        ev.key.kind == self.w.kind && self.w.ns.as_deref().is_none_or(|n| ev.key.ns == n)
    }

    fn convert(&self, ev: &Event) -> Option<(EventType, Arc<Value>)> {
        convert(ev, |o| self.label.matches(o) && self.field.matches(o))
    }

    fn render(&self, (etype, obj): (EventType, Arc<Value>), rv: u64) -> Bytes {
        if self.w.table {
            event_line(
                etype.as_str(),
                &table::table(
                    &self.sim.clock,
                    self.w.kind,
                    [&*obj],
                    rv,
                    None,
                    self.w.include,
                ),
            )
        } else {
            event_line(etype.as_str(), &obj)
        }
    }

    fn bookmark(&self, rv: u64, end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        event_line(
            "BOOKMARK",
            &json!({"kind": self.w.kind.kind(), "apiVersion": self.w.kind.api_version(), "metadata": md}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Key;

    fn obj(labels: Value, rv: u64) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"name": "a", "labels": labels, "resourceVersion": rv.to_string()}}),
        )
    }

    fn ev(etype: EventType, rv: u64, now: Value, before: Option<Value>) -> Event {
        Event {
            rv,
            etype,
            key: Key::new(Kind::Pod, "ns", "a"),
            object: obj(now, rv),
            prev: before.map(|b| obj(b, rv - 1)),
        }
    }

    fn sel(o: &Value) -> bool {
        o["metadata"]["labels"]["k"] == "x"
    }

    fn out(e: &Event) -> Option<(&'static str, String, String)> {
        convert(e, sel).map(|(t, o)| {
            (
                t.as_str(),
                o["metadata"]["labels"]["k"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
    }

    #[test]
    fn selector_transitions_follow_the_watch_cache() {
        let x = || json!({"k": "x"});
        let y = || json!({"k": "y"});
        // created matching / not matching
        assert_eq!(
            out(&ev(EventType::Added, 5, x(), None)),
            Some(("ADDED", "x".into(), "5".into()))
        );
        assert_eq!(out(&ev(EventType::Added, 5, y(), None)), None);
        // starts matching: ADDED with the new object
        assert_eq!(
            out(&ev(EventType::Modified, 6, x(), Some(y()))),
            Some(("ADDED", "x".into(), "6".into()))
        );
        // keeps matching: MODIFIED
        assert_eq!(
            out(&ev(EventType::Modified, 7, x(), Some(x()))),
            Some(("MODIFIED", "x".into(), "7".into()))
        );
        // stops matching: DELETED with the previous content at the event's rv
        assert_eq!(
            out(&ev(EventType::Modified, 8, y(), Some(x()))),
            Some(("DELETED", "x".into(), "8".into()))
        );
        // never matched: nothing
        assert_eq!(out(&ev(EventType::Modified, 9, y(), Some(y()))), None);
        // deleted while matching / while not
        assert_eq!(
            out(&ev(EventType::Deleted, 10, x(), Some(x()))),
            Some(("DELETED", "x".into(), "10".into()))
        );
        assert_eq!(out(&ev(EventType::Deleted, 11, y(), Some(y()))), None);
        // a deletion without its previous object is judged on its last state
        assert_eq!(
            out(&ev(EventType::Deleted, 12, x(), None)),
            Some(("DELETED", "x".into(), "12".into()))
        );
    }

    #[test]
    fn timeout_seconds() {
        let q = |v: &str| Query::from([("timeoutSeconds".to_string(), v.to_string())]);
        assert_eq!(timeout_of(&Query::new()).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout_of(&q("0")).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout_of(&q("7")).unwrap(), Duration::from_secs(7));
        assert_eq!(timeout_of(&q("soon")).unwrap_err().code, 400);
    }
}
