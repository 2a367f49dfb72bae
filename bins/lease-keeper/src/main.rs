//! tcab-lease-keeper: renews leases, reports dead and lost drivers and
//! publishers, and serves the token vault. Configuration: environment only.

use anyhow::Context as _;
use tcab_lease_keeper::{Deps, LeaseKeeperConfig, grpc, run};
use tcab_shared::config::{self, Binary, BuildInfo};
use tcab_shared::{backend, runtime};

const ABOUT: &str = "Renews claim leases, reports dead and lost drivers and publishers, and serves the token vault.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

// One thread: every loop waits on I/O, and a single allocator arena keeps the
// footprint small with 10,000 Jobs cached (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let config: LeaseKeeperConfig = config::load(ABOUT, &BUILD);
    let started = runtime::bootstrap(Binary::LeaseKeeper, &BUILD, &config.common).await?;
    let deps = Deps {
        kube: started.kube,
        namespace: started.namespace,
        backend: backend::client_from_config(&config.backend, Binary::LeaseKeeper)
            .context("cannot build the backend client")?,
        vault_listener: grpc::bind(config.common.vault_addr, config.vault_allow_non_loopback)
            .await?,
    };
    run(config, deps, started.shutdown).await
}
