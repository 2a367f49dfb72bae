//! tcab-lease-keeper: renews leases, reports dead and lost drivers and
//! publishers, and serves the token vault. Configuration: environment only.

use tcab_lease_keeper::{Deps, LeaseKeeperConfig, grpc, run};
use tcab_shared::config::BuildInfo;
use tcab_shared::runtime;

const ABOUT: &str = "Renews claim leases, reports dead and lost drivers and publishers, and serves the token vault.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

fn main() -> anyhow::Result<()> {
    runtime::main(
        ABOUT,
        &BUILD,
        |config: LeaseKeeperConfig, started| async move {
            let vault_addr = config.common.vault_addr;
            let deps = Deps {
                backend: started.backend(&config.backend)?,
                vault_listener: grpc::bind(vault_addr, config.vault_allow_non_loopback).await?,
                kube: started.kube,
                namespace: started.namespace,
                clock: tcab_shared::WallClock::system(),
            };
            run(config, deps, started.shutdown).await
        },
    )
}
