//! tcab-lease-keeper: renews leases, reports dead and lost drivers and
//! publishers, and serves the token vault. Configuration: environment only.

use anyhow::Context as _;
use tcab_lease_keeper::{Deps, LeaseKeeperConfig, grpc, run};
use tcab_shared::config::{self, Binary, BuildInfo};
use tcab_shared::tick::Shutdown;

const ABOUT: &str = "Renews claim leases, reports dead and lost drivers and publishers, and serves the token vault.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    revision: env!("TCAB_REVISION"),
};

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: LeaseKeeperConfig = config::load(ABOUT, &BUILD);
    tcab_shared::telemetry::init(config.common.log_format, Binary::LeaseKeeper, &BUILD);
    tcab_shared::metrics::common().set_build_info(Binary::LeaseKeeper, &BUILD);
    let backend = tcab_shared::backend::client_from_config(&config.backend)
        .context("cannot build the backend client")?;
    let kube = tcab_shared::kube_api::client().await?;
    let vault_listener =
        grpc::bind(config.common.vault_addr, config.vault_allow_non_loopback).await?;
    let shutdown = Shutdown::on_signals().context("cannot install signal handlers")?;
    run(
        config,
        Deps {
            backend,
            kube,
            vault_listener,
        },
        shutdown,
    )
    .await
}
