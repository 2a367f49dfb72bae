//! The test rig: a mock backend, a fake lease-keeper (vault + gate) and a
//! fake Jobs API, all on 127.0.0.1:0, plus configuration helpers.
#![allow(dead_code)]

pub mod admitter;
pub mod backend;
pub mod fake_kube;
pub mod gate;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::keeper_client::{KeeperClient, KeeperClientSettings};
use tcab_admitter::{AdmitterSettings, LaneAdmitter};
use tcab_shared::backend::BackendClient;
use tcab_shared::config::{BinaryConfig, Env};
use tcab_shared::job_cache::OwnedJobs;
use tcab_testkit::wait;

pub use admitter::Admitter;

pub const MANAGED_BY: &str = "tcab-dispatcher";

/// A configuration as the binary would load it, from these variables on
/// top of the required ones.
pub fn config(backend_url: &str, vault: SocketAddr, extra: &[(&str, &str)]) -> AdmitterConfig {
    let mut vars: Vec<(String, String)> = vec![
        ("TCAB_BACKEND_URL".into(), backend_url.into()),
        (
            "TCAB_BACKEND_SERVICE_TOKEN".into(),
            backend::SERVICE_TOKEN.into(),
        ),
        ("TCAB_DRIVER_IMAGE".into(), "driver:test".into()),
        ("TCAB_PUBLISHER_IMAGE".into(), "publisher:test".into()),
        ("TCAB_DISPATCHER_VAULT_ADDR".into(), vault.to_string()),
        (
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS".into(),
            "0.05".into(),
        ),
        ("POD_NAMESPACE".into(), fake_kube::NAMESPACE.into()),
    ];
    for (k, v) in extra {
        vars.retain(|(key, _)| key != k);
        if !v.is_empty() {
            vars.push(((*k).into(), (*v).into()));
        }
    }
    let env = Env::from_vars(vars).expect("env");
    AdmitterConfig::from_env(&env).expect("valid test configuration")
}

/// A backend client whose timeout (60 s) outlasts every wait in the tests,
/// so a claim the mock holds stays in flight until the test releases it.
pub fn backend_client(url: &str) -> BackendClient {
    BackendClient::new(url, backend::SERVICE_TOKEN.into(), Duration::from_secs(60)).unwrap()
}

/// Everything a tick-level test drives by hand.
pub struct Rig {
    pub backend: backend::MockBackend,
    pub gate: gate::FakeGate,
    pub kube: fake_kube::FakeKube,
}

impl Rig {
    pub async fn start() -> Self {
        Rig {
            backend: backend::MockBackend::start().await,
            gate: gate::FakeGate::start().await,
            kube: fake_kube::FakeKube::start().await,
        }
    }

    pub fn config(&self, extra: &[(&str, &str)]) -> AdmitterConfig {
        config(&self.backend.url, self.gate.addr, extra)
    }

    /// An admitter over `cache` (fed by the test, or watching), with a vault
    /// at `vault` (the fake gate unless a test points it elsewhere). A
    /// settle pauses 1 ms before creating again, so tests do not wait.
    pub fn admitter_with(
        &self,
        config: &AdmitterConfig,
        cache: OwnedJobs,
        vault: SocketAddr,
    ) -> Admitter {
        let vault_settings = KeeperClientSettings {
            call_timeout: Duration::from_secs(2),
            put_attempts: 3,
            put_retry_delay: Duration::from_millis(1),
        };
        let settings = AdmitterSettings {
            settle_pause: Duration::from_millis(1),
            ..AdmitterSettings::from_config(config)
        };
        Admitter::new(LaneAdmitter::lanes(
            settings,
            backend_client(&self.backend.url),
            fake_kube::jobs_api(&self.kube),
            KeeperClient::connect_lazy(vault, vault_settings).unwrap(),
            cache,
        ))
    }

    /// An admitter over a cache the test feeds (ready, empty).
    pub fn admitter(&self, config: &AdmitterConfig) -> (Admitter, OwnedJobs) {
        let cache = ready_cache();
        (
            self.admitter_with(config, cache.clone(), self.gate.addr),
            cache,
        )
    }
}

/// An empty cache that has finished its first list.
pub fn ready_cache() -> OwnedJobs {
    OwnedJobs::listed([])
}

/// How long an admitter test waits for anything it observes.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Waits until `check` holds, polling, failing after [`PATIENCE`].
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    wait::eventually(what, PATIENCE, check).await
}

/// Waits for a future, failing after [`PATIENCE`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    wait::within(what, PATIENCE, fut).await
}
