//! Shutdown: one [`CancellationToken`] per process, cancelled by SIGTERM or
//! SIGINT. Every loop reads it only between ticks, so the tick in flight
//! always finishes; tests cancel it by hand.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT (Ctrl-C). The handlers
/// are installed before this returns, so a signal sent after it is never
/// lost to the default action (which would end the process mid-tick).
pub fn on_signals() -> std::io::Result<CancellationToken> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let shutdown = CancellationToken::new();
    let cancel = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; finishing the current tick"),
            _ = int.recv() => tracing::info!("SIGINT received; finishing the current tick"),
        }
        cancel.cancel();
    });
    Ok(shutdown)
}
