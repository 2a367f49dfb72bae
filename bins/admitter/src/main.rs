//! tcab-admitter: claims queued runs and publishes and creates their Jobs.

use anyhow::Context as _;
use tcab_admitter::{Deps, run};
use tcab_shared::config::{self, AdmitterConfig, Binary, BuildInfo};
use tcab_shared::{telemetry, tick::Shutdown};

const ABOUT: &str = "Claims queued runs and publishes from the backend and creates their Jobs.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    revision: env!("TCAB_REVISION"),
};

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: AdmitterConfig = config::load(ABOUT, &BUILD);
    telemetry::init(config.common.log_format, Binary::Admitter, &BUILD);
    tcab_shared::metrics::common().set_build_info(Binary::Admitter, &BUILD);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kube = tcab_shared::kube_api::client().await?;
    let namespace = config
        .common
        .namespace
        .clone()
        .unwrap_or_else(|| kube.default_namespace().to_owned());
    let backend = tcab_shared::backend::client_from_config(&config.backend)
        .context("building the backend client")?;
    let shutdown = Shutdown::on_signals().context("installing signal handlers")?;
    run(
        config,
        Deps {
            kube,
            namespace,
            backend,
        },
        shutdown,
    )
    .await
}
