//! Logging: tracing to stderr, text or JSON, filtered by `RUST_LOG` (default `info`).
//!
//! **JSON lines** are written by [`JsonLines`]: one object per event with
//! `timestamp`, `level`, `target`, `message` and every field of the event at
//! the top level. A field whose value is a JSON array (what [`list`] writes)
//! is written as that array, so a list of job ids is a list to a log
//! pipeline, not a Rust debug string; every other field is a string, a
//! number or a boolean as it was recorded.
//!
//! **The Kubernetes client's own error line** (kube-rs logs
//! `failed with error ...` at error level, with nothing of what was being
//! done) is off unless `RUST_LOG` names `kube_client`: every failed call is
//! logged by the dispatcher itself, saying what it was doing and to what.

use crate::config::{Binary, BuildInfo, LogFormat, vars};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The directive that turns the Kubernetes client's own error line off.
pub const QUIET_KUBE_CLIENT: &str = "kube_client::client::builder=off";

/// The filter for a `RUST_LOG` value (`None`: unset): the value, or `info`
/// when it is unset, blank or malformed (then with the parse error), plus
/// [`QUIET_KUBE_CLIENT`] unless the value names `kube_client` itself.
pub fn filter(spec: Option<&str>) -> (EnvFilter, Option<String>) {
    let (mut filter, bad, named) = match spec {
        Some(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(spec) {
            Ok(filter) => (filter, None, spec.contains("kube_client")),
            Err(error) => (
                EnvFilter::new(vars::DEFAULT_LOG_FILTER),
                Some(error.to_string()),
                false,
            ),
        },
        _ => (EnvFilter::new(vars::DEFAULT_LOG_FILTER), None, false),
    };
    if !named && let Ok(directive) = QUIET_KUBE_CLIENT.parse() {
        filter = filter.add_directive(directive);
    }
    (filter, bad)
}

/// Installs the global subscriber and logs the first line: the binary, its
/// version and git revision, and the backend contract it speaks
/// ([`crate::backend::CONTRACT_VERSION`]). Call once, first thing in `main`. A malformed
/// `RUST_LOG` falls back to `info` and says so, after that first line.
pub fn init(format: LogFormat, binary: Binary, build: &BuildInfo) {
    let spec = std::env::var(vars::RUST_LOG.name).ok();
    let (filter, bad) = filter(spec.as_deref());
    // Colour only for a person at a terminal, never into a log file or pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
    if installed.is_err() {
        return; // a subscriber was already installed (tests): it logs as it likes
    }
    tracing::info!(
        version = build.version,
        revision = build.revision,
        contract = crate::backend::CONTRACT_VERSION,
        "{} {build} starting, backend contract {}",
        binary.name(),
        crate::backend::CONTRACT_VERSION
    );
    if let Some(error) = bad {
        tracing::warn!(%error, "RUST_LOG is malformed; logging at info");
    }
}

/// A list for a log field, written as a JSON array of its items' text:
/// `tracing::info!(jobs = %list(&names), "...")` logs `jobs=["a","b"]` in
/// text and `"jobs":["a","b"]` in JSON lines.
pub fn list<I>(items: I) -> LogList
where
    I: IntoIterator,
    I::Item: fmt::Display,
{
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    // A list of strings always serializes.
    LogList(serde_json::to_string(&items).unwrap_or_else(|_| "[]".to_owned()))
}

/// A list made by [`list`]: its JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogList(String);

impl fmt::Display for LogList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The JSON line formatter (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writeln!(writer, "{}", json_line(event, jiff::Timestamp::now()))
    }
}

/// One event as a JSON object, stamped `at`.
pub fn json_line(event: &Event<'_>, at: jiff::Timestamp) -> String {
    let meta = event.metadata();
    let mut fields = serde_json::Map::new();
    fields.insert("timestamp".into(), at.to_string().into());
    fields.insert("level".into(), meta.level().as_str().into());
    let mut visitor = JsonFields(&mut fields);
    event.record(&mut visitor);
    fields.insert("target".into(), meta.target().into());
    serde_json::Value::Object(fields).to_string()
}

/// Records an event's fields into a JSON object.
struct JsonFields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl JsonFields<'_> {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for JsonFields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, crate::error_chain(value).into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        // A list written by `list` (any value that is a JSON array) stays
        // one; everything else is its text.
        let value = if field.name() != "message" && text.starts_with('[') {
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(array @ serde_json::Value::Array(_)) => array,
                _ => text.into(),
            }
        } else {
            text.into()
        };
        self.put(field, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn lines(buffer: &Buffer) -> Vec<serde_json::Value> {
        let bytes = buffer.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8(bytes)
            .expect("UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn a_list_is_a_json_array_in_a_json_line_and_reads_well_in_text() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let names = ["tcab-driver-a-1", "tcab-driver-\"b\"-2"];
            tracing::info!(
                jobs = %list(names),
                none = %list(Vec::<String>::new()),
                count = 2,
                ok = true,
                note = "[not a list",
                "Jobs gone"
            );
        });
        let line = &lines(&buffer)[0];
        assert_eq!(
            line["jobs"],
            serde_json::json!(["tcab-driver-a-1", "tcab-driver-\"b\"-2"]),
            "{line}"
        );
        assert_eq!(line["none"], serde_json::json!([]));
        assert_eq!(line["count"], 2);
        assert_eq!(line["ok"], true);
        assert_eq!(line["note"], "[not a list");
        assert_eq!(line["message"], "Jobs gone");
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(
            list(["a", "b"]).to_string(),
            r#"["a","b"]"#,
            "text logs show the same list"
        );
    }

    #[test]
    fn the_kube_clients_own_error_line_is_off_unless_asked_for() {
        let quiet = |spec: Option<&str>| filter(spec).0.to_string();
        assert!(quiet(None).contains(QUIET_KUBE_CLIENT), "{}", quiet(None));
        assert!(quiet(Some("tcab=debug,info")).contains(QUIET_KUBE_CLIENT));
        assert!(!quiet(Some("kube_client=debug,info")).contains(QUIET_KUBE_CLIENT));
        let (bad, why) = filter(Some("tcab=[="));
        assert!(why.is_some());
        assert!(bad.to_string().contains(QUIET_KUBE_CLIENT));
    }
}
