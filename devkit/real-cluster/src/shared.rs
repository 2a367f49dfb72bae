//! One control plane per test process, started by the first test that asks
//! and shared by the others (each isolated in its own namespace).
//!
//! It is never stopped by us: statics are not dropped. Its components die
//! with the process instead (the parent-death signal, see `process`), and
//! the next process's first start removes the work dirs of processes that are
//! gone. Under cargo-nextest every test is its own process, so there "per
//! process" means per test.

use crate::{Access, ControlPlane, Settings, StartError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::OnceCell;

static SHARED: OnceCell<Result<ControlPlane, Arc<StartError>>> = OnceCell::const_new();

/// The process's control plane with default settings; see [`shared_with`].
pub async fn shared() -> Result<&'static Access, Arc<StartError>> {
    shared_with(Settings::default).await
}

/// The process's control plane, started on first use with `settings()`
/// (later callers' settings are ignored: give every test of a binary the
/// same). A failed start is not tried again; every caller gets its error.
/// Its work dir is `<temp>/tcab-control-plane-shared/<pid>` unless the
/// settings name one.
pub async fn shared_with(
    settings: impl FnOnce() -> Settings,
) -> Result<&'static Access, Arc<StartError>> {
    let started = SHARED
        .get_or_init(|| async {
            let mut settings = settings();
            if settings.work_dir.is_none() {
                let root = std::env::temp_dir().join("tcab-control-plane-shared");
                sweep(&root);
                settings.work_dir = Some(root.join(std::process::id().to_string()));
            }
            if !crate::children_die_with_us() {
                eprintln!(
                    "control plane: setpriv --pdeathsig is not available: the shared control plane's processes may outlive this process"
                );
            }
            ControlPlane::start(settings).await.map_err(Arc::new)
        })
        .await;
    match started {
        Ok(cp) => Ok(cp.access()),
        Err(e) => Err(e.clone()),
    }
}

/// Removes the work dirs under `root` whose process is gone.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path: PathBuf = entry.path();
        let alive = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
            .map(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if alive == Some(false) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
