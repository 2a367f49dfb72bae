//! Remembering what an admission came to in the lane's memory and logging
//! it once; logging a hold when it changes; and what a tick settles besides
//! its own admission: the stale Jobs it deleted, and the creations earlier
//! ticks left unsettled.

use super::LaneAdmitter;
use crate::admit::{self, Admission, CreateFailure, LaneOutcome, PoisonReport, StaleDeletion};
use crate::plan::{Decision, HoldReason};
use tcab_shared::error_chain;
use tokio::time::Instant;

impl LaneAdmitter {
    pub(super) fn log_decision(&mut self, decision: &Decision) {
        let lane = self.lane;
        let hold = match decision {
            Decision::Hold(reason) => Some(reason),
            Decision::Admit { .. } => None,
        };
        let was = self.state.last_hold().cloned();
        let changed = self.state.note_hold(hold);
        match hold {
            None => match was {
                Some(HoldReason::GateClosed(_)) => {
                    tracing::info!(%lane, "admission gate open again: lease renewals are current");
                }
                Some(HoldReason::ViewNotCurrent { .. }) => {
                    tracing::info!(%lane, "admissions resume: the Job view is current");
                }
                _ => {}
            },
            Some(HoldReason::Paused) if changed => {
                tracing::info!(
                    %lane,
                    "lane paused: its cap is 0, so it claims nothing (the lease-keeper's renewals and reports go on)"
                );
            }
            Some(HoldReason::GateClosed(closed)) if changed => {
                tracing::info!(
                    %lane, reason = closed.reason.name(), why = %closed,
                    "admissions held: admission gate closed"
                );
            }
            Some(HoldReason::ViewNotCurrent { why }) if changed => {
                tracing::info!(%lane, why = %why, "admissions held: the Job view is not current");
            }
            Some(HoldReason::LaneFull { in_flight, cap }) => {
                tracing::debug!(%lane, in_flight, cap, "lane full");
            }
            Some(HoldReason::BackingOff { until }) => {
                let wait = until.saturating_duration_since(Instant::now());
                tracing::debug!(%lane, wait_ms = wait.as_millis() as u64, "lane backing off");
            }
            Some(reason) => tracing::debug!(%lane, %reason, "lane held"),
        }
    }

    /// Remembers an admission (or, `again`, a later settle of one) and logs
    /// its outcome once.
    pub(super) fn record(&mut self, admission: Admission, again: bool) -> LaneOutcome {
        let lane = self.lane;
        let now = Instant::now();
        let retry = self.edges.settings.poll_interval;
        let Admission {
            outcome, unsettled, ..
        } = admission;
        if let Some(notice) = crate::events::failed_fast(&self.edges.namespace, &outcome) {
            self.edges.events.send(notice);
        }
        let state = &mut self.state;
        match &outcome {
            LaneOutcome::Admitted {
                job_id,
                job_name,
                settled: None,
            } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "admitted");
            }
            LaneOutcome::Admitted {
                job_id,
                job_name,
                settled: Some(settled),
            } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(
                    %lane, job_id = %job_id, job = %job_name, after = %settled.after,
                    by = ?settled.by, calls = settled.calls,
                    "admitted: an unclear create settled, the Job exists"
                );
            }
            LaneOutcome::AlreadyExists { job_id, job_name } => {
                state.record_created(job_name, job_id, now);
                tracing::info!(%lane, job_id = %job_id, job = %job_name, "lost race: the Job already exists");
            }
            LaneOutcome::Empty => {
                state.record_empty(now + retry);
                tracing::debug!(%lane, "claim empty: nothing queued");
            }
            LaneOutcome::ClaimFailed(error) => {
                state.record_claim_failure(now, retry);
                tracing::error!(
                    %lane,
                    call = error.call().unwrap_or("claim"),
                    reason = error.kind().reason().as_str(),
                    error = %error_chain(error),
                    retry_in_ms = retry.as_millis() as u64,
                    "claim failed; the lane claims again after the back-off"
                );
            }
            LaneOutcome::CreateFailed {
                job_id,
                job_name,
                reason,
            } => {
                let delay = state.record_create_failure(now);
                let failures = state.failures();
                let lapsed = matches!(reason, CreateFailure::Lapsed { .. });
                let reason = error_chain(reason);
                let backoff_ms = delay.as_millis() as u64;
                if lapsed {
                    tracing::warn!(
                        %lane, job_id = %job_id, job = %job_name, %reason, failures, backoff_ms,
                        "claim given up without a Job; its token is forgotten and the backend requeues the job"
                    );
                } else {
                    tracing::error!(
                        %lane, job_id = %job_id, job = %job_name, %reason, failures, backoff_ms,
                        "Job not created; its token is forgotten, the claim lapses and the backend requeues the job"
                    );
                }
            }
            LaneOutcome::Poisoned {
                job_id,
                reason,
                detail,
                report,
                ..
            } => {
                let job_id = job_id.as_deref().unwrap_or("(none)");
                let reason = reason.as_str();
                match report {
                    PoisonReport::Reported => tracing::error!(
                        %lane, %job_id, %reason, %detail,
                        "poisoned claim: it cannot become a Job; reported it failed, once"
                    ),
                    PoisonReport::Failed(error) => tracing::error!(
                        %lane, %job_id, %reason, %detail, %error,
                        "poisoned claim: it cannot become a Job, and reporting it failed did not land; not trying again (the claim lapses and the backend requeues the job)"
                    ),
                    PoisonReport::Impossible { shape } => tracing::error!(
                        %lane, %job_id, %reason, %detail, %shape,
                        "poisoned claim: it cannot become a Job and its answer carries no usable id and token to report it with; the claim lapses and the backend requeues the job"
                    ),
                }
            }
            LaneOutcome::Unsettled {
                job_id,
                job_name,
                error,
            } => {
                if let Some(creation) = unsettled {
                    state.hold_unsettled(creation);
                    if !again {
                        let delay = state.record_create_failure(now);
                        tracing::warn!(
                            %lane, job_id = %job_id, job = %job_name, %error,
                            backoff_ms = delay.as_millis() as u64,
                            "cannot tell whether the Job was created; holding its slot and checking again on the next ticks"
                        );
                    } else {
                        tracing::debug!(
                            %lane, job_id = %job_id, job = %job_name, %error,
                            "still cannot tell whether the Job was created"
                        );
                    }
                }
            }
        }
        outcome
    }

    /// Logs each stale Job's delete; one deleted (or gone) no longer counts,
    /// and an unsettled creation of it is never created: its token is
    /// forgotten.
    pub(super) async fn settle_stale(&mut self, stale: &[StaleDeletion]) {
        let lane = self.lane;
        for deletion in stale {
            if let Some(notice) = crate::events::deleted_stale(&self.edges.namespace, deletion) {
                self.edges.events.send(notice);
            }
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
