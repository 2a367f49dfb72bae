//! Evidence of a failing Job: its pod and the tail of its log, read at the
//! first sign of failure (the pod may be gone soon after), kept by Job name,
//! and read again once, when its death report is prepared (the final state
//! is more complete than the first sign). A prepared report is kept until it
//! lands, so a report the backend keeps refusing costs no further read.

use super::reports::Reporter;
use crate::cause::{DeathCause, LogTail, death_cause, death_detail, job_for_cause};
use crate::plan::failures::{DeathKind, EvidenceState, evidence_after_log};
use k8s_openapi::api::core::v1::Pod;
use tcab_shared::error_chain;
use tcab_shared::job_cache::JobSummary;
use tokio::time::Instant;

/// What was read of a failing Job's pod.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The pod as read (`None`: the Job had no pod left).
    pub pod: Option<Pod>,
    /// Its log tail, or why it could not be read.
    pub log: LogTail,
    /// How many times the log was tried.
    pub log_attempts: u32,
    /// When the Job first showed the sign of failure this was read at (for
    /// the death-to-report metric).
    pub first_sign: Instant,
}

/// Whether a pod ended well (`Succeeded`): a driver that exited 0.
fn succeeded(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

impl Reporter {
    /// Reads a failing Job's pod and log tail; true when evidence is now held.
    pub(super) async fn capture(&mut self, job: &JobSummary) -> bool {
        match self.inspector.newest_pod(&job.name).await {
            Ok(Some(pod)) => {
                let log = self.inspector.log_tail(&pod, job.lane).await;
                self.keep(job, Some(pod), log);
                true
            }
            Ok(None) => {
                let log = LogTail::Gone("the Job had no pod left to read".into());
                self.keep(job, None, log);
                true
            }
            Err(error) => {
                tracing::warn!(job = %job.name, job_id = job.job_id.as_deref().unwrap_or(""), error = %error_chain(&error), "cannot read the failing Job's pod; retrying");
                false
            }
        }
    }

    pub(super) fn keep(&mut self, job: &JobSummary, pod: Option<Pod>, log: LogTail) {
        let state = evidence_after_log(&log, pod.is_some(), 1);
        tracing::debug!(job = %job.name, has_pod = pod.is_some(), log_read = matches!(log, LogTail::Read(_)), "evidence captured");
        if let Some(mem) = self.memory.get_mut(job.name.as_str()) {
            mem.evidence = state;
        }
        if job.gone
            && let Some(id) = &job.job_id
            && !self.stale_claim(job)
        {
            // Said in a lost report if no death report lands (no token).
            let cause = DeathCause::Deleted {
                job: job.name.to_string(),
                evidence: pod
                    .as_ref()
                    .map(|p| Box::new(death_cause(&job_for_cause(job), Some(p)))),
            };
            self.note(id, &death_detail(&cause, &log), Instant::now());
        }
        self.evidence.insert(
            job.name.to_string(),
            Evidence {
                pod,
                log,
                log_attempts: 1,
                first_sign: self.failing.since(job).unwrap_or_else(Instant::now),
            },
        );
    }

    /// Whether the vault holds a newer claim of the job than the entry's
    /// (the admitter deleted this Job as stale: nobody else did).
    fn stale_claim(&self, job: &JobSummary) -> bool {
        let held = self.store.held();
        let current = crate::plan::deaths::current_claims(&held);
        match (job.job_id.as_deref(), job.claim.as_deref()) {
            (Some(id), Some(claim)) => current.get(id).is_some_and(|h| h.key.claim != claim),
            _ => false,
        }
    }

    /// Tries a log that could not be read once more.
    pub(super) async fn retry_log(&mut self, job: &JobSummary) {
        let Some(evidence) = self.evidence.get_mut(job.name.as_str()) else {
            return;
        };
        let Some(pod) = evidence.pod.clone() else {
            return;
        };
        let log = self.inspector.log_tail(&pod, job.lane).await;
        evidence.log_attempts += 1;
        let attempts = evidence.log_attempts;
        let state = evidence_after_log(&log, true, attempts);
        evidence.log = log;
        if let Some(mem) = self.memory.get_mut(job.name.as_str()) {
            mem.evidence = state;
        }
    }

    /// Reads the pod once more, if it is still there, keeping a log already
    /// read over one that cannot be read now. Returns whether the pod ended
    /// well (a driver that exited 0 died of nothing).
    async fn refresh(&mut self, job: &JobSummary) -> bool {
        let Ok(Some(pod)) = self.inspector.newest_pod(&job.name).await else {
            return false;
        };
        if succeeded(&pod) {
            return true;
        }
        let log = self.inspector.log_tail(&pod, job.lane).await;
        let keep_old_log = !matches!(log, LogTail::Read(_))
            && self
                .evidence
                .get(job.name.as_str())
                .is_some_and(|e| matches!(e.log, LogTail::Read(_)));
        let first_sign = self.failing.since(job).unwrap_or_else(Instant::now);
        let entry = self
            .evidence
            .entry(job.name.to_string())
            .or_insert(Evidence {
                pod: None,
                log: log.clone(),
                log_attempts: 0,
                first_sign,
            });
        entry.pod = Some(pod);
        if !keep_old_log {
            entry.log = log;
        }
        false
    }

    /// The death cause and detail of a Job, from its summary and evidence
    /// (the pod read once more when still there); `None` when its pod ended
    /// well after its Job was deleted (the driver exited 0: not a death).
    pub(super) async fn explain(
        &mut self,
        job: &JobSummary,
        kind: DeathKind,
        now: Instant,
    ) -> Option<(DeathCause, String)> {
        if kind != DeathKind::NeverStarted && self.refresh(job).await && kind == DeathKind::Deleted
        {
            return None;
        }
        let evidence = self.evidence.get(job.name.as_str());
        let pod = evidence.and_then(|e| e.pod.as_ref());
        let log = evidence
            .map(|e| e.log.clone())
            .unwrap_or_else(|| LogTail::Gone("no evidence was captured".into()));
        let base = death_cause(&job_for_cause(job), pod);
        let cause = match kind {
            DeathKind::Failed => base,
            DeathKind::Deleted => DeathCause::Deleted {
                job: job.name.to_string(),
                evidence: pod.map(|_| Box::new(base)),
            },
            DeathKind::Stuck => DeathCause::Stuck {
                node: pod
                    .and_then(|p| p.spec.as_ref())
                    .and_then(|s| s.node_name.clone()),
                waited: self
                    .failing
                    .since(job)
                    .map(|at| now.saturating_duration_since(at))
                    .unwrap_or_default(),
                evidence: Box::new(base),
            },
            DeathKind::NeverStarted => match self.never_started.get(job.name.as_str()) {
                Some(failure) => DeathCause::NeverStarted(failure.clone()),
                None => base,
            },
        };
        let detail = death_detail(&cause, &log);
        Some((cause, detail))
    }

    /// Marks a Job's evidence complete (nothing more will be read).
    pub(super) fn evidence_complete(&mut self, name: &str) {
        if let Some(mem) = self.memory.get_mut(name) {
            mem.evidence = EvidenceState::Complete;
        }
    }
}
