//! Logging: tracing to stderr, text or JSON, filtered by `RUST_LOG` (default `info`).

use crate::config::{Binary, BuildInfo, LogFormat, vars};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber and logs the first line: the binary, its
/// version and git revision. Call once, first thing in `main`. A malformed
/// `RUST_LOG` falls back to `info` and says so, after that first line.
pub fn init(format: LogFormat, binary: Binary, build: &BuildInfo) {
    let (filter, bad) = match std::env::var(vars::RUST_LOG.name) {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new(vars::DEFAULT_LOG_FILTER),
                Some(error.to_string()),
            ),
        },
        _ => (EnvFilter::new(vars::DEFAULT_LOG_FILTER), None),
    };
    // Colour only for a person at a terminal, never into a log file or pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    if installed.is_err() {
        return; // a subscriber was already installed (tests): it logs as it likes
    }
    tracing::info!(
        version = build.version,
        revision = build.revision,
        "{} {build} starting",
        binary.name()
    );
    if let Some(error) = bad {
        tracing::warn!(%error, "RUST_LOG is malformed; logging at info");
    }
}
