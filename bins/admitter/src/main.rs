//! tcab-admitter: claims queued runs and publishes and creates their Jobs.

use anyhow::Context as _;
use tcab_admitter::{AdmitterConfig, Deps, run};
use tcab_shared::config::{self, Binary, BuildInfo};
use tcab_shared::{backend, runtime};

const ABOUT: &str = "Claims queued runs and publishes from the backend and creates their Jobs.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: AdmitterConfig = config::load(ABOUT, &BUILD);
    let started = runtime::bootstrap(Binary::Admitter, &BUILD, &config.common).await?;
    let deps = Deps {
        kube: started.kube,
        namespace: started.namespace,
        backend: backend::client_from_config(&config.backend, Binary::Admitter)
            .context("cannot build the backend client")?,
    };
    let result = run(config, deps, started.shutdown).await;
    // The API server refuses a Job built from the settings: a configuration
    // error found at start, so the same exit as a bad variable.
    if let Err(error) = &result
        && let Some(refused) = error.downcast_ref::<tcab_admitter::Refused>()
    {
        tracing::error!(error = %refused, "the API server refuses the Jobs these settings make");
        eprintln!("tcab-admitter: configuration error: {refused}");
        std::process::exit(2);
    }
    result
}
