//! Evidence of a failing Job: its pod and the tail of its log, read at the
//! first sign of failure (the pod may be gone soon after), kept by Job name,
//! and read again once, when its death report is prepared (the final state
//! is more complete than the first sign). A prepared report is kept until it
//! lands, so a report the backend keeps refusing costs no further read.

use super::reports::Reporter;
use crate::cause::{DeathCause, LogTail, death_cause, death_detail, job_for_cause};
use crate::inspect::Inspector;
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

/// What a dying Job's pod shows when its death report is prepared.
#[derive(Debug)]
pub(super) enum FinalRead {
    /// The pod ended well (`Succeeded`): a driver that exited 0.
    Succeeded,
    /// The pod as it is now (boxed: a pod is large), and its log tail.
    Pod(Box<Pod>, LogTail),
    /// No pod could be read (it is gone, or the read failed): the evidence
    /// held stands.
    Nothing,
}

/// Reads a dying Job's pod once more, and its log unless it ended well.
/// Only reads: the reporter keeps what it finds ([`Reporter::explain_with`]),
/// so the reads of several deaths can run at once.
pub(super) async fn read_final(inspector: &Inspector, job: &JobSummary) -> FinalRead {
    let Ok(Some(pod)) = inspector.newest_pod(job.name()).await else {
        return FinalRead::Nothing;
    };
    if succeeded(&pod) {
        return FinalRead::Succeeded;
    }
    let log = inspector.log_tail(&pod, job.lane).await;
    FinalRead::Pod(Box::new(pod), log)
}

/// What the first read of a failing Job found: its newest pod and log
/// tail, or no pod. Only reads, so several run at once.
pub(super) async fn read_first(
    inspector: &Inspector,
    job: &JobSummary,
) -> Result<Option<(Pod, LogTail)>, tcab_shared::kube_api::CallError> {
    let Some(pod) = inspector.newest_pod(job.name()).await? else {
        return Ok(None);
    };
    let log = inspector.log_tail(&pod, job.lane).await;
    Ok(Some((pod, log)))
}

/// How many Jobs' pods (and logs) one report tick reads at once: a burst of
/// deaths is read side by side, not one after another.
pub const READS_AT_ONCE: usize = 8;

/// Runs `read` for each of `jobs`, at most [`READS_AT_ONCE`] at a time,
/// until `deadline`: the results in the order of `jobs`; the ones not done
/// by the deadline are left out (the tick's budget is spent).
pub(super) async fn read_at_once<'a, T, F, Fut>(
    jobs: &[&'a JobSummary],
    deadline: Instant,
    read: F,
) -> Vec<(&'a JobSummary, T)>
where
    F: Fn(&'a JobSummary) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    use futures::StreamExt;
    // The futures are made first, so the stream holds no closure over a
    // borrowed Job (the loop's future must stay `Send`).
    let mut readings = Vec::with_capacity(jobs.len());
    for &job in jobs {
        let reading = read(job);
        readings.push(async move { (job, reading.await) });
    }
    futures::stream::iter(readings)
        .buffered(READS_AT_ONCE)
        .take_until(tokio::time::sleep_until(deadline))
        .collect()
        .await
}

/// Whether a pod ended well (`Succeeded`): a driver that exited 0.
fn succeeded(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

impl Reporter {
    /// Keeps what the first read of a failing Job found ([`read_first`]);
    /// true when evidence is now held.
    pub(super) fn capture(
        &mut self,
        job: &JobSummary,
        read: Result<Option<(Pod, LogTail)>, tcab_shared::kube_api::CallError>,
    ) -> bool {
        match read {
            Ok(Some((pod, log))) => {
                self.keep(job, Some(pod), log);
                true
            }
            Ok(None) => {
                let log = LogTail::Gone("the Job had no pod left to read".into());
                self.keep(job, None, log);
                true
            }
            Err(error) => {
                tracing::warn!(job = %job.name(), job_id = job.job_id().unwrap_or(""), error = %error_chain(&error), "cannot read the failing Job's pod; retrying");
                false
            }
        }
    }

    pub(super) fn keep(&mut self, job: &JobSummary, pod: Option<Pod>, log: LogTail) {
        let state = evidence_after_log(&log, pod.is_some(), 1);
        tracing::debug!(job = %job.name(), has_pod = pod.is_some(), log_read = matches!(log, LogTail::Read(_)), "evidence captured");
        if let Some(mem) = self.memory.get_mut(job.name()) {
            mem.evidence = state;
        }
        if job.gone
            && let Some(id) = &job.job_id()
            && !self.stale_claim(job)
        {
            // Said in a lost report if no death report lands (no token).
            let cause = DeathCause::Deleted {
                job: job.name().to_string(),
                evidence: pod
                    .as_ref()
                    .map(|p| Box::new(death_cause(&job_for_cause(job), Some(p)))),
            };
            self.note(id, &death_detail(&cause, &log), Instant::now());
        }
        self.evidence.insert(
            job.name().to_string(),
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
        match (job.job_id(), job.claim()) {
            (Some(id), Some(claim)) => current.get(id).is_some_and(|h| h.key.claim != claim),
            _ => false,
        }
    }

    /// Tries a log that could not be read once more.
    pub(super) async fn retry_log(&mut self, job: &JobSummary) {
        let Some(evidence) = self.evidence.get_mut(job.name()) else {
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
        if let Some(mem) = self.memory.get_mut(job.name()) {
            mem.evidence = state;
        }
    }

    /// Keeps what a final read found, keeping a log already read over one
    /// that cannot be read now. Returns whether the pod ended well (a driver
    /// that exited 0 died of nothing).
    fn apply_final(&mut self, job: &JobSummary, read: FinalRead) -> bool {
        let (pod, log) = match read {
            FinalRead::Succeeded => return true,
            FinalRead::Nothing => return false,
            FinalRead::Pod(pod, log) => (pod, log),
        };
        let keep_old_log = !matches!(log, LogTail::Read(_))
            && self
                .evidence
                .get(job.name())
                .is_some_and(|e| matches!(e.log, LogTail::Read(_)));
        let first_sign = self.failing.since(job).unwrap_or_else(Instant::now);
        let entry = self
            .evidence
            .entry(job.name().to_string())
            .or_insert(Evidence {
                pod: None,
                log: log.clone(),
                log_attempts: 0,
                first_sign,
            });
        entry.pod = Some(*pod);
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
        let read = match kind {
            DeathKind::NeverStarted => None,
            _ => Some(read_final(&self.inspector, job).await),
        };
        self.explain_with(job, kind, read, now)
    }

    /// [`Reporter::explain`] with the final read already made (`None` for a
    /// pod that never started: there is nothing more to read).
    pub(super) fn explain_with(
        &mut self,
        job: &JobSummary,
        kind: DeathKind,
        read: Option<FinalRead>,
        now: Instant,
    ) -> Option<(DeathCause, String)> {
        if let Some(read) = read
            && self.apply_final(job, read)
            && kind == DeathKind::Deleted
        {
            return None;
        }
        let evidence = self.evidence.get(job.name());
        let pod = evidence.and_then(|e| e.pod.as_ref());
        let log = evidence
            .map(|e| e.log.clone())
            .unwrap_or_else(|| LogTail::Gone("no evidence was captured".into()));
        let base = death_cause(&job_for_cause(job), pod);
        let cause = match kind {
            DeathKind::Failed => base,
            DeathKind::Deleted => DeathCause::Deleted {
                job: job.name().to_string(),
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
            DeathKind::NeverStarted => match self.never_started.get(job.name()) {
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
