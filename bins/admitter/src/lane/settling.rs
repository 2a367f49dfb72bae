//! What a tick settles besides its own admission: the stale Jobs it
//! deleted, and the creations earlier ticks left unsettled.

use super::LaneAdmitter;
use crate::admit::{self, LaneOutcome, StaleDeletion};
use tcab_shared::error_chain;
use tokio::time::Instant;

impl LaneAdmitter {
    /// Logs each stale Job's delete; one deleted (or gone) no longer counts,
    /// and an unsettled creation of it is never created: its token is
    /// forgotten.
    pub(super) async fn settle_stale(&mut self, stale: &[StaleDeletion]) {
        let lane = self.lane;
        for deletion in stale {
            let claim = deletion.stale.claim.as_deref().unwrap_or("(none)");
            match &deletion.result {
                Ok(()) => {
                    tracing::warn!(
                        %lane, job_id = %deletion.job_id, stale_job = %deletion.stale.name, %claim,
                        "deleted a stale Job: a live Job of this job id under an older claim (its token no longer works; the backend handed the job out again)"
                    );
                    if let Some(creation) = self.state.drop_stale(&deletion.stale.name)
                        && let Err(error) = self
                            .edges
                            .vault
                            .forget(&creation.job_id, &creation.claim)
                            .await
                    {
                        tracing::warn!(
                            %lane, job_id = %creation.job_id, claim = %creation.claim,
                            error = %error_chain(&error),
                            "could not forget the token of a stale claim; the lease-keeper drops it after a lease"
                        );
                    }
                }
                Err(error) => tracing::warn!(
                    %lane, job_id = %deletion.job_id, stale_job = %deletion.stale.name, %claim,
                    %error,
                    "could not delete a stale Job of this job id (an older claim); admitting the new claim anyway, the stale one is tried again at the next claim of this id or left to the lease-keeper"
                ),
            }
        }
    }

    /// Forgets what the cache shows, then settles again each creation left
    /// unsettled by an earlier tick.
    pub(super) async fn settle_leftovers(
        &mut self,
        claim_to_job: &mut Vec<std::time::Duration>,
    ) -> Vec<LaneOutcome> {
        let lane = self.lane;
        let now = Instant::now();
        let cache = &self.edges.cache;
        let seen = self.state.forget_seen(
            |name| cache.contains(name),
            now,
            self.edges.settings.unseen_ttl(),
        );
        for creation in &seen.settled_by_watch {
            tracing::info!(
                %lane, job_id = %creation.job_id, job = %creation.job_name,
                "admitted: the Job watch shows the Job whose create was unsettled"
            );
        }
        for creation in &seen.expired {
            tracing::warn!(
                %lane, job_id = %creation.job_id, job = %creation.job_name,
                "gave up settling a create after a whole lease; freeing its slot (the claim has lapsed, or the Job exists and the watch counts it)"
            );
        }
        for name in &seen.unseen_expired {
            tracing::warn!(
                %lane, job = %name,
                "a created Job was not seen by the watch within a lease; no longer counting it"
            );
        }
        let mut outcomes = vec![];
        for creation in self.state.take_unsettled() {
            let admission = admit::resettle(creation, self.deps()).await;
            claim_to_job.extend(admission.created_after);
            outcomes.push(self.record(admission, true));
        }
        outcomes
    }
}
