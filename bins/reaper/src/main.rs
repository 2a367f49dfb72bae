//! tcab-reaper: deletes the sandbox pods dead drivers left behind.

use anyhow::Context;
use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, run};
use tcab_shared::backend::client_from_config;
use tcab_shared::config::{self, Binary, BuildInfo};
use tcab_shared::tick::Shutdown;

const ABOUT: &str = "Deletes the sandbox pods of driver Jobs that failed, and orphaned sandboxes.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    revision: env!("TCAB_REVISION"),
};

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: ReaperConfig = config::load(ABOUT, &BUILD);
    tcab_shared::telemetry::init(config.common.log_format, Binary::Reaper, &BUILD);
    tcab_shared::metrics::common().set_build_info(Binary::Reaper, &BUILD);
    let client = tcab_shared::kube_api::client().await?;
    // The backend is asked only by the orphan sweep (what it still drives).
    let backend = config
        .backend
        .as_ref()
        .map(client_from_config)
        .transpose()
        .context("cannot build the backend client")?;
    let shutdown = Shutdown::on_signals().context("cannot listen for signals")?;
    run(config, Deps::new(client, backend), shutdown).await
}
