//! Watches through the proxy: the API server's stream passed on event by
//! event, so a `silence` rule can stop it at an event boundary while the
//! upstream watch stays open, and the admin can end it cleanly.
//!
//! Framing, as the API server writes a watch: JSON (and `as=Table`) events
//! one per line; protobuf events (`application/vnd.kubernetes.protobuf;stream=watch`)
//! each behind a 4-byte big-endian length; anything else is passed on as
//! it arrives, each chunk counting as one event.

use crate::upstream::strip_hop_by_hop;
use axum::body::Body;
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use http::header;
use http_body_util::BodyExt;
use std::sync::Arc;
use tcab_api_faults::{FaultBook, RequestAttrs, Stage};
use tokio::sync::mpsc;

/// How a watch stream is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON document per line.
    Lines,
    /// Each frame behind a 4-byte big-endian length (protobuf).
    LengthPrefixed,
    /// Unknown: each chunk as it comes.
    Chunks,
}

impl Framing {
    /// The framing of a watch answered with this `Content-Type`.
    pub fn of(content_type: &str) -> Framing {
        let ct = content_type.to_ascii_lowercase();
        if ct.starts_with("application/vnd.kubernetes.protobuf") {
            Framing::LengthPrefixed
        } else if ct.starts_with("application/json") || ct.contains("+json") {
            Framing::Lines
        } else {
            Framing::Chunks
        }
    }
}

/// Cuts a byte stream into whole events.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    buf: BytesMut,
}

impl Framer {
    /// An empty framer.
    pub fn new(framing: Framing) -> Self {
        Framer {
            framing,
            buf: BytesMut::new(),
        }
    }

    /// Takes in the next bytes of the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole event, if one is buffered.
    pub fn next_event(&mut self) -> Option<Bytes> {
        match self.framing {
            Framing::Chunks => (!self.buf.is_empty()).then(|| self.buf.split().freeze()),
            Framing::Lines => {
                let end = self.buf.iter().position(|b| *b == b'\n')?;
                Some(self.buf.split_to(end + 1).freeze())
            }
            Framing::LengthPrefixed => {
                if self.buf.len() < 4 {
                    return None;
                }
                let len = (&self.buf[..4]).get_u32() as usize;
                if self.buf.len() < 4 + len {
                    return None;
                }
                Some(self.buf.split_to(4 + len).freeze())
            }
        }
    }

    /// Whatever is left that makes no whole event.
    pub fn rest(&mut self) -> Bytes {
        self.buf.split().freeze()
    }
}

/// The scope a watch was opened with, for its silence decisions.
#[derive(Debug, Clone)]
pub struct WatchScopeOf {
    /// The resource (`jobs`).
    pub resource: String,
    /// The bearer token it presented.
    pub token: Option<String>,
}

/// Forgets the watch when its task ends, however it ends.
struct Registered {
    book: Arc<FaultBook>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.book.unregister_watch(self.id);
    }
}

/// Passes an upstream watch answer on. A non-2xx answer (a Status) goes as
/// it is. Otherwise the stream is registered as an open watch and relayed
/// event by event; it is silent from the start when `silenced` (a `silence`
/// rule met it on arrival), or from the first event a `silence` rule meets.
/// A silent watch keeps reading (and dropping) the upstream stream, so the
/// API server keeps it open until its timeout. The client's stream ends
/// cleanly when the upstream one does or the admin closes the watch, and
/// breaks when the upstream one breaks.
pub fn relay(
    book: Arc<FaultBook>,
    scope: WatchScopeOf,
    silenced: bool,
    upstream: http::Response<hyper::body::Incoming>,
) -> Response {
    let (mut parts, mut body) = upstream.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if !parts.status.is_success() {
        return Response::from_parts(parts, Body::new(body));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    let framing = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or(Framing::Chunks, Framing::of);
    let (id, close) = book.register_watch(&scope.resource, scope.token.as_deref());
    if silenced {
        book.mark_silenced(id);
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let registered = Registered {
        book: book.clone(),
        id,
    };
    tokio::spawn(async move {
        let _registered = registered;
        let attrs = RequestAttrs {
            verb: "watch",
            resource: &scope.resource,
            token: scope.token.as_deref(),
        };
        let mut framer = Framer::new(framing);
        let mut silent = silenced;
        loop {
            let frame = tokio::select! {
                _ = tx.closed() => return,
                _ = close.notified() => return,
                frame = body.frame() => frame,
            };
            match frame {
                None => break,
                Some(Err(e)) => {
                    // The API server's stream broke: so does the client's.
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
                Some(Ok(f)) => {
                    let Ok(data) = f.into_data() else { continue };
                    framer.push(&data);
                    while let Some(event) = framer.next_event() {
                        if !silent && book.take(&attrs, Stage::OpenWatch).is_some() {
                            silent = true;
                            book.mark_silenced(id);
                        }
                        if !silent && tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        let rest = framer.rest();
        if !silent && !rest.is_empty() {
            let _ = tx.send(Ok(rest)).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(f: &mut Framer) -> Vec<Bytes> {
        std::iter::from_fn(|| f.next_event()).collect()
    }

    #[test]
    fn framing_follows_the_content_type() {
        assert_eq!(Framing::of("application/json"), Framing::Lines);
        assert_eq!(
            Framing::of("application/json;as=Table;v=v1;g=meta.k8s.io"),
            Framing::Lines
        );
        assert_eq!(
            Framing::of("application/vnd.kubernetes.protobuf;stream=watch"),
            Framing::LengthPrefixed
        );
        assert_eq!(Framing::of("application/cbor-seq"), Framing::Chunks);
    }

    #[test]
    fn json_lines_come_out_whole_whatever_the_chunks() {
        let mut f = Framer::new(Framing::Lines);
        f.push(b"{\"type\":\"ADDED\"}\n{\"ty");
        assert_eq!(
            drain(&mut f),
            [Bytes::from_static(b"{\"type\":\"ADDED\"}\n")]
        );
        f.push(b"pe\":\"BOOKMARK\"}\n{\"a\":1}\n{\"b\"");
        assert_eq!(
            drain(&mut f),
            [
                Bytes::from_static(b"{\"type\":\"BOOKMARK\"}\n"),
                Bytes::from_static(b"{\"a\":1}\n")
            ]
        );
        assert_eq!(f.rest(), Bytes::from_static(b"{\"b\""));
        assert!(f.next_event().is_none());
    }

    #[test]
    fn length_prefixed_frames_come_out_whole() {
        let mut f = Framer::new(Framing::LengthPrefixed);
        f.push(&[0, 0, 0, 3, b'a']);
        assert!(drain(&mut f).is_empty());
        f.push(&[b'b', b'c', 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            drain(&mut f),
            [
                Bytes::from_static(&[0, 0, 0, 3, b'a', b'b', b'c']),
                Bytes::from_static(&[0, 0, 0, 0])
            ]
        );
        assert_eq!(f.rest(), Bytes::from_static(&[0, 0]));
    }

    #[test]
    fn unknown_framing_passes_chunks() {
        let mut f = Framer::new(Framing::Chunks);
        assert!(f.next_event().is_none());
        f.push(b"abc");
        f.push(b"de");
        assert_eq!(drain(&mut f), [Bytes::from_static(b"abcde")]);
    }
}
