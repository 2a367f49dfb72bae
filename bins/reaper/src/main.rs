//! tcab-reaper: deletes the sandbox pods dead drivers left behind.

use tcab_reaper::ReaperConfig;
use tcab_reaper::run::{Deps, run};
use tcab_shared::config::BuildInfo;
use tcab_shared::runtime;

const ABOUT: &str = "Deletes the sandbox pods of driver Jobs that failed, and orphaned sandboxes.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

fn main() -> anyhow::Result<()> {
    runtime::main(ABOUT, &BUILD, |config: ReaperConfig, started| async move {
        // The backend is asked only by the orphan sweep (what it still drives).
        let backend = match &config.backend {
            Some(backend) => Some(started.backend(backend)?),
            None => None,
        };
        let deps = Deps::new(started.kube, started.namespace, backend);
        run(config, deps, started.shutdown).await
    })
}
