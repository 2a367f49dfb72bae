//! The skeleton the three binaries share, so each `main` is a few lines and
//! each `run(config, deps, shutdown)` differs only in what it runs:
//!
//! - [`main`]: the whole of each binary's `main`: its configuration
//!   loaded (or `--help`, `--version`, exit 2 on a bad variable), one
//!   thread's runtime, [`bootstrap`], then the binary's own start;
//! - [`bootstrap`]: in a fixed order, telemetry (and the build-info
//!   metric), the TLS provider, the Kubernetes client, the namespace and the
//!   shutdown token ([`shutdown::on_signals`]);
//! - [`shutdown`]: one [`CancellationToken`] per process, cancelled by
//!   SIGTERM or SIGINT; the tick in flight always finishes;
//! - [`supervise`]: first list, then loop; stop when a needed task dies or
//!   on shutdown ([`Supervisor`]). The loops are [`crate::tick::Tick`]s;
//! - [`heap`]: freed heap pages go back to the system whenever a loop goes
//!   idle, so the resident size follows what is held, not the peak.

pub mod heap;
pub mod shutdown;
pub mod supervise;

pub use supervise::{Loops, Supervisor};
pub use tokio_util::sync::CancellationToken;

use crate::backend::{self, BackendClient};
use crate::config::{BackendConfig, Binary, BinaryConfig, BuildInfo, CommonConfig};
use crate::{kube_api, metrics, telemetry};
use anyhow::Context as _;

/// A binary's `main`: loads its configuration (`--help` and `--version`
/// print and exit 0, a bad variable exits 2 naming it), then on one thread
/// bootstraps the process and runs `start` with the configuration and what
/// every binary starts from.
///
/// One thread: every loop waits on I/O, and a single allocator arena keeps
/// the footprint small with 10,000 Jobs cached (docs/performance.md).
pub fn main<C, F, Fut>(about: &str, build: &BuildInfo, start: F) -> anyhow::Result<()>
where
    C: BinaryConfig,
    F: FnOnce(C, Started) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let config: C = crate::config::load(about, build);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let started = bootstrap(C::BINARY, build, config.common()).await?;
        start(config, started).await
    })
}

/// What every binary starts from, whatever else its `Deps` hold.
#[derive(Clone)]
pub struct Started {
    /// The Kubernetes client (every call bounded, see [`kube_api::client`]).
    pub kube: kube::Client,
    /// The namespace of the owned Jobs: `POD_NAMESPACE`, else the client's default.
    pub namespace: String,
    /// Cancelled on SIGTERM or SIGINT.
    pub shutdown: CancellationToken,
    /// The binary started (read through [`Started::backend`]).
    binary: Binary,
}

impl Started {
    /// The binary's backend client, built from its backend settings.
    pub fn backend(&self, config: &BackendConfig) -> anyhow::Result<BackendClient> {
        backend::client_from_config(config, self.binary).context("cannot build the backend client")
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Starts a binary whose configuration is loaded: telemetry first (its
/// first line names the binary, version and revision, before anything can
/// fail), the build-info metric, the TLS provider, the Kubernetes client,
/// the namespace, then the signal handlers.
pub async fn bootstrap(
    binary: Binary,
    build: &BuildInfo,
    common: &CommonConfig,
) -> anyhow::Result<Started> {
    heap::map_large_blocks();
    telemetry::init(common.log_format, binary, build);
    crate::config::warn_unknown_variables();
    metrics::common().start(binary, build);
    install_tls_provider();
    let (kube, api_server) = kube_api::client_with_url(Some(&binary.user_agent())).await?;
    let namespace = namespace(common, &kube);
    tracing::info!(%api_server, %namespace, "using the Kubernetes API");
    let shutdown = shutdown::on_signals().context("cannot install the signal handlers")?;
    Ok(Started {
        kube,
        namespace,
        shutdown,
        binary,
    })
}

/// Installs rustls' ring provider as the process default, once (every TLS
/// client of the process, kube and the backend's, uses it).
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The namespace of the owned Jobs: `POD_NAMESPACE`, else the client's default.
fn namespace(common: &CommonConfig, kube: &kube::Client) -> String {
    common
        .namespace
        .clone()
        .unwrap_or_else(|| kube.default_namespace().to_owned())
}
