//! tcab-reaper: deletes the sandbox pods dead drivers left behind.

use anyhow::Context as _;
use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, run};
use tcab_shared::config::{self, Binary, BuildInfo};
use tcab_shared::{backend, runtime};

const ABOUT: &str = "Deletes the sandbox pods of driver Jobs that failed, and orphaned sandboxes.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: ReaperConfig = config::load(ABOUT, &BUILD);
    let started = runtime::bootstrap(Binary::Reaper, &BUILD, &config.common).await?;
    // The backend is asked only by the orphan sweep (what it still drives).
    let backend = config
        .backend
        .as_ref()
        .map(|b| backend::client_from_config(b, Binary::Reaper));
    let backend = backend
        .transpose()
        .context("cannot build the backend client")?;
    let deps = Deps::new(started.kube, started.namespace, backend);
    run(config, deps, started.shutdown).await
}
