//! WATCH: history replay or synthetic ADDED, bookmarks, timeouts.

use super::{Query, selectors};
use crate::selector::FieldSelector;
use crate::sim::Sim;
use crate::status::ApiError;
use crate::store::{Event, Kind};
use crate::table::{self, IncludeObject};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

pub(super) fn event_line(etype: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": etype, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

pub(super) fn watch(
    sim: &Arc<Sim>,
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    q: &Query,
    table: bool,
    include: IncludeObject,
) -> Result<Response, ApiError> {
    let (label, mut field) = selectors(kind, q)?;
    if let Some(n) = name {
        field = FieldSelector::parse(&format!("metadata.name={n}"), kind.resource())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let bookmarks = super::params::flag(q, "allowWatchBookmarks");
    let initial_events = super::params::flag(q, "sendInitialEvents");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let from = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let from = if initial_events { None } else { from };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let start = sim.store.watch(kind, ns.as_deref(), from);
    let sim = sim.clone();
    tokio::spawn(async move {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Ok(event_line("ERROR", &e.to_status()))).await;
                return;
            }
        };
        let matches = |ev: &Event| {
            ev.key.kind == kind
                && ns.as_deref().is_none_or(|n| ev.key.ns == n)
                && label.matches(&ev.object)
                && field.matches(&ev.object)
        };
        let render = |ev: &Event| -> Bytes {
            if table {
                let rv = ev.rv;
                event_line(
                    ev.etype.as_str(),
                    &table::table(&sim.clock, kind, [&*ev.object], rv, None, include),
                )
            } else {
                event_line(ev.etype.as_str(), &ev.object)
            }
        };
        let bookmark = |rv: u64, end: bool| {
            let mut md = json!({"resourceVersion": rv.to_string()});
            if end {
                md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                &json!({"kind": kind.kind(), "apiVersion": kind.api_version(), "metadata": md}),
            )
        };
        let mut seen = start.start_rv;
        for ev in start.initial.iter().filter(|e| matches(e)) {
            if tx.send(Ok(render(ev))).await.is_err() {
                return;
            }
        }
        if initial_events && bookmarks && tx.send(Ok(bookmark(seen, true))).await.is_err() {
            return;
        }
        let mut live = start.rx;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(
            sim.clock
                .real(sim.timing.bookmark_interval)
                .max(Duration::from_millis(10)),
        );
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = &mut deadline => {
                    if bookmarks {
                        let _ = tx.send(Ok(bookmark(seen, false))).await;
                    }
                    return;
                }
                _ = tick.tick(), if bookmarks => {
                    if tx.send(Ok(bookmark(seen, false))).await.is_err() {
                        return;
                    }
                }
                ev = live.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= seen {
                            continue;
                        }
                        seen = ev.rv;
                        if matches(&ev) && tx.send(Ok(render(&ev))).await.is_err() {
                            return;
                        }
                    }
                    // A watcher too slow to keep up is closed; the client resumes.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                }
            }
        }
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
