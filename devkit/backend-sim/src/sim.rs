//! The running backend's state: the database connection, the clock and the
//! configuration. Every operation runs in one IMMEDIATE transaction on a
//! blocking thread, so claims are atomic even with another process on the
//! same database file.

use crate::audit::Caller;
use crate::clock::SimClock;
use crate::db;
use crate::ops::{self, Ctx, OpError};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::sync::{Arc, Mutex};

/// Configuration the operations read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub lease_ms: i64,
    pub backstop_ms: i64,
}

/// The backend's shared state.
pub(crate) struct Sim {
    conn: Mutex<Connection>,
    pub(crate) clock: SimClock,
    settings: Settings,
    /// SHA-256 (hex) of the service token.
    service_token_hash: String,
    /// Injected stalls and errors (test admin only).
    pub(crate) faults: crate::faults::Faults,
    /// Per-job calls refused for their token (test admin only).
    pub(crate) refusals: crate::audit::Refusals,
    /// Calls served per caller and route (test admin only).
    pub(crate) calls: crate::audit::Calls,
}

impl Sim {
    pub(crate) fn new(
        conn: Connection,
        clock: SimClock,
        settings: Settings,
        service_token: &str,
    ) -> Self {
        Self {
            conn: Mutex::new(conn),
            clock,
            settings,
            service_token_hash: ops::hash_token(service_token),
            faults: crate::faults::Faults::default(),
            refusals: crate::audit::Refusals::default(),
            calls: crate::audit::Calls::default(),
        }
    }

    /// Whether `token` is the service token.
    pub(crate) fn is_service_token(&self, token: &str) -> bool {
        ops::hash_token(token) == self.service_token_hash
    }

    /// Runs `op` in one transaction: the publish backstop first, then the
    /// operation, then the hold rules; commits on success, rolls back (so
    /// nothing changes) on error. The history entries it writes are stamped
    /// with the request the current task serves (see [`crate::audit`]).
    pub(crate) async fn run<T, F>(self: &Arc<Self>, op: F) -> Result<T, OpError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, &Ctx) -> Result<T, OpError> + Send + 'static,
    {
        let sim = Arc::clone(self);
        let caller = crate::audit::current_caller();
        tokio::task::spawn_blocking(move || sim.run_blocking(op, caller.as_ref()))
            .await
            .map_err(|e| OpError::Internal(format!("operation task failed: {e}")))?
    }

    fn run_blocking<T, F>(&self, op: F, caller: Option<&Caller>) -> Result<T, OpError>
    where
        F: FnOnce(&Transaction<'_>, &Ctx) -> Result<T, OpError>,
    {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ctx = Ctx {
            now_ms: self.clock.now_ms(),
            lease_ms: self.settings.lease_ms,
            backstop_ms: self.settings.backstop_ms,
        };
        let before = db::last_history_seq(&tx)?;
        ops::publish_backstop(&tx, &ctx)?;
        let value = op(&tx, &ctx)?;
        ops::refresh_holds(&tx, &ctx)?;
        db::stamp_history(&tx, before, self.clock.wall_ms(), caller)?;
        tx.commit()?;
        Ok(value)
    }

    /// Keeps a per-job call refused for its token (`token_hash`: the hash of
    /// the token presented).
    pub(crate) fn note_refusal(&self, job_id: &str, token_hash: &str) {
        let caller = crate::audit::current_caller();
        self.refusals.push(crate::audit::Refusal {
            wall_at: crate::clock::ts_from_ms(self.clock.wall_ms()),
            at: crate::clock::ts_from_ms(self.clock.now_ms()),
            call: caller.as_ref().map(|c| c.call.clone()).unwrap_or_default(),
            job_id: job_id.to_owned(),
            claim: crate::audit::claim_tag(token_hash),
            caller: caller.and_then(|c| c.agent),
        });
    }
}
