//! `tcab-backend-sim`: the reference backend. It implements the HTTP
//! contract of `docs/backend-contract.md` and every backend-side rule of the
//! dispatcher spec (atomic claims in `queue_seq` order, per-harness
//! parallelism, one jam entry per jam and model, leases and their lapse,
//! driver reports, held records, lost reports and their retries, late
//! terminal reports, publishes and the publish backstop), with its state in
//! an SQLite file so a restart keeps every job, token and lease.
//!
//! # In-process use (other crates' tests)
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use tcab_backend_sim::{SimOptions, spawn};
//! let sim = spawn(SimOptions::in_memory("service-token")).await?;
//! let base = sim.url(); // http://127.0.0.1:NNNN
//! sim.advance_clock(std::time::Duration::from_secs(121)); // lapse every lease
//! // Every call answers 10 ms late for the next minute:
//! let delay = serde_json::json!({"paths": ["/**"], "mode": "delay", "delay_ms": 10, "seconds": 60});
//! sim.add_fault(serde_json::from_value(delay)?).map_err(anyhow::Error::msg)?;
//! sim.shutdown().await; // or just drop it
//! # Ok(()) }
//! ```
//!
//! `SimOptions::new(path, token)` keeps the state in a file; spawning again on
//! the same file resumes it. `SimOptions::clock` takes any [`Clock`] (e.g. a
//! [`ManualClock`]). The console calls (`POST /jobs`, `POST /jobs/batch`,
//! `POST /publish-jobs`, `PUT /harnesses/{name}`, `GET /jobs/{id}`,
//! `GET /jobs?state=`) are listed in the contract doc.
//!
//! # Choices the contract leaves open
//!
//! - Holds are re-decided after every operation, so a waiting run's state is
//!   always `queued` or `pending` as the rules say now; each change is a
//!   history entry whose detail names the rule.
//! - A lapsed lease is judged only by `POST /jobs/next` (as the contract
//!   says); `POST /publish-jobs/next` does not requeue lapsed publishes (the
//!   dispatcher reports them lost, and the backstop catches the rest).
//! - A `failed` report without `failure_kind` is an agent failure.
//!   `failure_kind` with any other state is a 400. A repeated report of the
//!   current state is acknowledged without a change.
//! - A held record (`{"state_reached", "record"}`) finishes a run as
//!   succeeded when it reached validating or later, as failed (agent) when it
//!   says failed, and as failed (infrastructure, no retry) when taken earlier.
//! - Per-job calls answer 401 for an unknown id too, and check the token
//!   before the body, so a wrong token learns nothing.
//! - `POST /admin/clock/advance` takes the service token.
//! - `GET /jobs/{id}` adds `launch_request`, `enqueued_at`, `failure_kind`,
//!   `detail`, `has_record`, `record_state_reached`, `finished_from_record`,
//!   `lost`, `lost_superseded`, `retry_of`, `retry_id` to the example's fields.
//!
//! Module map: [`clock`] (time), `db` (schema, rows), [`rules`] (pure
//! decisions), `ops` (transactions), `http` (routes, auth), [`cli`] (flags),
//! [`faults`] (injected stalls and errors), [`audit`] (who changed what
//! when, for tests).

pub mod audit;
pub mod cli;
pub mod clock;
mod db;
pub mod faults;
mod http;
pub mod model;
mod ops;
pub mod rules;
mod sim;
pub mod wire;

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::HistoryEntry;

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How to start the sim.
#[derive(Clone)]
pub struct SimOptions {
    /// Where to listen (`127.0.0.1:0` picks a free port). Ignored by [`spawn_on`].
    pub listen: SocketAddr,
    /// The SQLite file; `None` keeps the state in memory.
    pub db: Option<PathBuf>,
    /// The service token the dispatcher presents.
    pub service_token: String,
    /// The lease a claim or renewal sets (default 120 s).
    pub lease_length: Duration,
    /// How long a publish may stay dispatched with no result (default 1 h).
    pub publish_backstop: Duration,
    /// Serve `POST /admin/clock/advance`.
    pub enable_test_clock: bool,
    /// The clock (default: the system clock).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimOptions")
            .field("listen", &self.listen)
            .field("db", &self.db)
            .field("service_token", &"<redacted>")
            .field("lease_length", &self.lease_length)
            .field("publish_backstop", &self.publish_backstop)
            .field("enable_test_clock", &self.enable_test_clock)
            .finish_non_exhaustive()
    }
}

/// The default lease length (two minutes).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
/// The default publish backstop (one hour).
pub const DEFAULT_PUBLISH_BACKSTOP: Duration = Duration::from_secs(3600);

impl SimOptions {
    /// State in the SQLite file `db`, on `127.0.0.1:0`, defaults elsewhere.
    pub fn new(db: impl Into<PathBuf>, service_token: impl Into<String>) -> Self {
        Self {
            db: Some(db.into()),
            ..Self::in_memory(service_token)
        }
    }

    /// State in memory, on `127.0.0.1:0`, defaults elsewhere.
    pub fn in_memory(service_token: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            db: None,
            service_token: service_token.into(),
            lease_length: DEFAULT_LEASE,
            publish_backstop: DEFAULT_PUBLISH_BACKSTOP,
            enable_test_clock: false,
            clock: Arc::new(SystemClock),
        }
    }
}

/// A running sim. Dropping it stops the server (abruptly);
/// [`SimHandle::shutdown`] stops it gracefully and waits.
pub struct SimHandle {
    addr: SocketAddr,
    sim: Arc<sim::Sim>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:NNNN`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Moves the sim's clock forward (works whether or not the test-clock
    /// endpoint is enabled).
    pub fn advance_clock(&self, by: Duration) {
        self.sim
            .clock
            .advance_ms(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    /// Adds a fault rule, as `POST /admin/faults` does (served or not): e.g.
    /// a `delay` on `/**` gives every call a latency.
    pub fn add_fault(&self, rule: faults::FaultRequest) -> Result<(), String> {
        self.sim.faults.add(rule, std::time::Instant::now())
    }

    /// Drops every fault rule.
    pub fn clear_faults(&self) {
        self.sim.faults.clear();
    }

    /// The sim's current time.
    pub fn now(&self) -> jiff::Timestamp {
        clock::ts_from_ms(self.sim.clock.now_ms())
    }

    /// Stops accepting, lets in-flight requests finish, and waits.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "server ended with an error"),
                Err(e) => tracing::warn!(error = %e, "server task failed"),
            }
        }
    }

    /// Waits until the server ends (it ends only after a shutdown signal).
    async fn wait(&mut self) {
        if let Some(task) = self.task.as_mut() {
            let _ = task.await;
        }
        self.task = None;
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Binds `opts.listen` and starts the sim on it.
pub async fn spawn(opts: SimOptions) -> anyhow::Result<SimHandle> {
    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    spawn_on(listener, opts).await
}

/// Starts the sim on a listener the caller bound.
pub async fn spawn_on(listener: TcpListener, opts: SimOptions) -> anyhow::Result<SimHandle> {
    let addr = listener.local_addr().context("listener has no address")?;
    let db_path = opts.db.clone();
    let conn = tokio::task::spawn_blocking(move || db::open(db_path.as_deref()))
        .await
        .context("database open task failed")?
        .with_context(|| match &opts.db {
            Some(p) => format!("cannot open database {}", p.display()),
            None => "cannot open in-memory database".to_string(),
        })?;
    let settings = sim::Settings {
        lease_ms: millis(opts.lease_length),
        backstop_ms: millis(opts.publish_backstop),
    };
    let sim = Arc::new(sim::Sim::new(
        conn,
        clock::SimClock::new(Arc::clone(&opts.clock)),
        settings,
        &opts.service_token,
    ));
    let app = http::router(Arc::clone(&sim), opts.enable_test_clock);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    Ok(SimHandle {
        addr,
        sim,
        stop: Some(stop),
        task: Some(task),
    })
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Runs the sim until `shutdown` resolves, printing the listening line
/// first (the binary's body).
pub async fn run_until(
    opts: SimOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut handle = spawn(opts).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", handle.url()).context("cannot write to stdout")?;
        out.flush().context("cannot flush stdout")?;
    }
    tokio::select! {
        () = shutdown => {}
        () = handle.wait() => anyhow::bail!("server stopped unexpectedly"),
    }
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}
