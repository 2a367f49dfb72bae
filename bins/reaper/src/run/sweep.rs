//! The orphan sweep's one backend call: which job ids the backend still
//! drives (`GET /jobs/active`).

use super::Reaper;
use std::collections::BTreeSet;
use tcab_shared::error_chain;

impl Reaper {
    /// The job ids the backend lists as driven (`GET /jobs/active`).
    pub(super) async fn driven(&self) -> Result<BTreeSet<String>, String> {
        let Some(backend) = &self.backend else {
            return Err("no backend client".into());
        };
        match backend.active_runs().await {
            // An entry the client could not read is still a job the backend
            // drives: its id counts as driven, and when even its id is
            // unreadable no orphan can be told apart this round.
            Ok(active) if active.skipped.iter().any(|e| e.id.is_none()) => {
                tracing::warn!(
                    skipped = active.skipped.len(),
                    "the backend's active list has an entry without a readable id; no orphan is swept this round"
                );
                Err("an entry of the active list has no readable id".into())
            }
            Ok(active) => Ok(active
                .jobs
                .into_iter()
                .map(|run| run.id)
                .chain(active.skipped.into_iter().filter_map(|e| e.id))
                .collect()),
            Err(error) => {
                tracing::warn!(
                    call = error.call().unwrap_or("GET /jobs/active"),
                    reason = error.kind().reason().as_str(),
                    error = %error_chain(&error),
                    next_sweep_in_seconds = self.settings.orphan_sweep_interval.as_secs(),
                    "cannot read the jobs the backend drives; no orphan is swept this round"
                );
                Err(error_chain(&error))
            }
        }
    }
}
