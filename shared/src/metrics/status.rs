//! The status document each container serves at `/status` beside its
//! metrics (docs/operations.md, "Why is nothing admitted?"): a small JSON
//! object that says, in one read, what the container is doing and why.
//!
//! Each binary gives the server a [`StatusSource`]: a function that renders
//! its part of the document from what its loops last reported (never by
//! calling anything). The server adds the fields every container has
//! ([`frame`]): which binary, its version, the time, and whether it is ready
//! and its Job view current. Nothing in the document carries a token: the
//! parts are rendered from reports that hold none, and free text (an error's
//! words) passes through [`words`], which bounds its length.

use crate::WallClock;
use serde_json::{Map, Value, json};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A container's part of its status document, rendered on each request.
#[derive(Clone)]
pub struct StatusSource {
    binary: &'static str,
    clock: WallClock,
    render: Arc<dyn Fn() -> Value + Send + Sync>,
}

impl fmt::Debug for StatusSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusSource")
            .field("binary", &self.binary)
            .finish_non_exhaustive()
    }
}

impl StatusSource {
    /// The status of `binary` (`tcab-admitter`, ...), its own fields
    /// rendered by `render` (a JSON object).
    pub fn new(binary: &'static str, render: impl Fn() -> Value + Send + Sync + 'static) -> Self {
        StatusSource {
            binary,
            clock: WallClock::system(),
            render: Arc::new(render),
        }
    }

    /// This status with its `now` read on `clock`.
    pub fn with_clock(mut self, clock: WallClock) -> Self {
        self.clock = clock;
        self
    }

    /// A status with no fields of the binary's own (tests of the server).
    pub fn empty(binary: &'static str) -> Self {
        StatusSource::new(binary, || json!({}))
    }

    /// The whole document now, with `ready` and `view_current` as the
    /// probes read them.
    pub fn document(&self, ready: bool, view_current: bool) -> Value {
        frame(
            self.binary,
            (self.render)(),
            self.clock.now(),
            ready,
            view_current,
        )
    }
}

/// The fields every container's document has, then the binary's own (a
/// field of the binary's own never replaces one of these).
pub fn frame(
    binary: &'static str,
    own: Value,
    now: jiff::Timestamp,
    ready: bool,
    view_current: bool,
) -> Value {
    let mut doc = Map::new();
    doc.insert("binary".into(), json!(binary));
    doc.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    doc.insert("now".into(), json!(now.to_string()));
    doc.insert("ready".into(), json!(ready));
    doc.insert("view_current".into(), json!(view_current));
    if let Value::Object(fields) = own {
        for (key, value) in fields {
            doc.entry(key).or_insert(value);
        }
    }
    Value::Object(doc)
}

/// At most this many characters of free text in a document.
pub const MAX_WORDS: usize = 400;

/// Free text for a document: at most [`MAX_WORDS`] characters, the rest cut
/// with an ellipsis.
pub fn words(text: &str) -> String {
    match text.char_indices().nth(MAX_WORDS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Seconds as a document gives them: to the millisecond.
pub fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A moment as a document gives it: when (RFC 3339, on the container's wall
/// clock) and how long before `now` it was, in seconds.
pub fn moment(at: jiff::Timestamp, ago: Duration) -> Value {
    json!({"at": at.to_string(), "seconds_ago": seconds(ago)})
}

/// A moment, on both clocks: the monotonic one says how long ago, the wall
/// clock when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    /// On tokio's clock.
    pub instant: tokio::time::Instant,
    /// On the container's wall clock.
    pub wall: jiff::Timestamp,
}

impl At {
    /// Now, on both clocks.
    pub fn now(clock: &WallClock) -> At {
        At {
            instant: tokio::time::Instant::now(),
            wall: clock.now(),
        }
    }

    /// The moment as the document gives it ([`moment`]), seen from `now`.
    pub fn render(self, now: At) -> Value {
        moment(
            self.wall,
            now.instant.saturating_duration_since(self.instant),
        )
    }

    /// The moment rendered with `fields` added (a job id, a reason).
    pub fn render_with(self, now: At, fields: Value) -> Value {
        let mut out = self.render(now);
        if let (Value::Object(out), Value::Object(fields)) = (&mut out, fields) {
            for (key, value) in fields {
                out.entry(key).or_insert(value);
            }
        }
        out
    }
}

/// Seconds left until `until`, seen from `now`; `None` once it has passed.
pub fn remaining(until: Option<tokio::time::Instant>, now: At) -> Option<f64> {
    until
        .filter(|until| *until > now.instant)
        .map(|until| seconds(until.saturating_duration_since(now.instant)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_comes_first_and_is_never_replaced() {
        let now: jiff::Timestamp = "2026-12-07T11:00:00Z".parse().unwrap();
        let doc = StatusSource::new(
            "tcab-reaper",
            || json!({"binary": "not me", "last_sweep": null}),
        )
        .with_clock(WallClock::fixed(now))
        .document(true, false);
        assert_eq!(doc["binary"], "tcab-reaper");
        assert_eq!(doc["now"], "2026-12-07T11:00:00Z");
        assert_eq!(doc["ready"], true);
        assert_eq!(doc["view_current"], false);
        assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
        assert!(doc.get("last_sweep").is_some_and(Value::is_null));
    }

    #[test]
    fn free_text_is_bounded() {
        assert_eq!(words("short"), "short");
        let long = "é".repeat(MAX_WORDS + 10);
        let cut = words(&long);
        assert_eq!(cut.chars().count(), MAX_WORDS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(seconds(Duration::from_micros(1_234_567)), 1.235);
    }
}
