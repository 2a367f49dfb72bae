//! Jobs the cluster gives no pod ([`crate::plan::refusals`] decides): at
//! most once per check interval, and only while some live Job has counted
//! no pod for longer than the start grace, one list of the Job
//! controller's `FailedCreate` Events says which of them the API server
//! refuses. Each refused Job (its pods confirmed absent first: the view may
//! be behind) is judged never to start, with the refusal as its cause, and
//! goes the way of a pod that can never start from the next tick on: a
//! run's death reported, then its Job deleted; a publisher's Job deleted,
//! then its publish reported lost with that cause. The others wait, and the
//! log and the `tcab_dispatcher_jobs_without_pod` gauge say so.
//!
//! It runs after the tick's death reports, so a slow Events list delays
//! none of them.

use super::evidence::read_at_once;
use super::reports::{Reporter, out_of_budget};
use crate::cause::{LogTail, StartFailure, StartFailureKind};
use crate::plan::refusals::{Podless, judge_refusals, podless};
use crate::report::ReportTick;
use std::collections::BTreeSet;
use tcab_shared::error_chain;
use tcab_shared::job_cache::{JobSummary, Snapshot};
use tcab_shared::lane::PerLane;
use tokio::time::Instant;

impl Reporter {
    /// Counts the Jobs past the start grace without a pod and, when a check
    /// is due, reads why; the refused ones are judged never to start.
    pub(super) async fn check_refusals(
        &mut self,
        snapshot: &Snapshot,
        now: Instant,
        deadline: Instant,
        report: &mut ReportTick,
    ) {
        let judged: BTreeSet<String> = self
            .never_started
            .keys()
            .cloned()
            .chain(self.judged_dead())
            .collect();
        let wall_now = self.clock.now();
        let grace = self.settings.start_grace;
        // Counted every tick (nothing allocated); read for why only when due.
        let mut counts = PerLane::<usize>::default();
        for job in podless(snapshot, &judged, wall_now, grace) {
            counts[job.job.lane] += 1;
        }
        report.podless = counts;
        let due = self
            .last_refusal_check
            .is_none_or(|at| now.saturating_duration_since(at) >= self.settings.start_check_every);
        if counts.iter().all(|(_, n)| *n == 0) || !due || out_of_budget(deadline, report) {
            return;
        }
        self.last_refusal_check = Some(now);
        let refusals = match self.inspector.refusals().await {
            Ok(refusals) => refusals,
            Err(error) => {
                let plan =
                    judge_refusals(podless(snapshot, &judged, wall_now, grace), &[], wall_now);
                let (oldest, waited_s) = named(plan.oldest_waiting);
                let hint = if error.code() == Some(403) {
                    " (the Role needs list on events)"
                } else {
                    ""
                };
                tracing::warn!(
                    jobs = plan.waiting, oldest, waited_s,
                    reason = error.reason().as_str(), error = %error_chain(&error),
                    "Jobs have had no pod for longer than the start grace, and the Job controller's FailedCreate Events cannot be read{hint}: they wait, and are not failed by the start rule"
                );
                return;
            }
        };
        let plan = judge_refusals(
            podless(snapshot, &judged, wall_now, grace),
            &refusals,
            wall_now,
        );
        if plan.waiting > 0 {
            let (oldest, waited_s) = named(plan.oldest_waiting);
            tracing::warn!(
                jobs = plan.waiting,
                oldest,
                waited_s,
                "Jobs have had no pod for longer than the start grace, and no refusal to create one is recorded (is the Job controller running? is a Job suspended?): they wait for a pod or their deadline, and are not failed by the start rule"
            );
        }
        // The view may be behind the cluster: a refused Job's pods are read
        // (side by side) before it is judged; one made since means the
        // refusal has passed.
        let refused: Vec<&JobSummary> = plan.refused.iter().map(|(job, _)| job.job).collect();
        let inspector = &self.inspector;
        let reads = read_at_once(&refused, deadline, |job| inspector.newest_pod(job.name())).await;
        if reads.len() < refused.len() {
            out_of_budget(deadline, report);
        }
        for ((job, refusal), (_, read)) in plan.refused.iter().zip(reads) {
            let name = job.name();
            match read {
                Ok(None) => {}
                Ok(Some(_)) => {
                    tracing::debug!(job = %name, "a refused Job has a pod after all; not judged");
                    continue;
                }
                Err(error) => {
                    tracing::debug!(job = %name, error = %error_chain(&error), "cannot read the pods of a refused Job; judged at the next check");
                    continue;
                }
            }
            let failure = StartFailure {
                kind: StartFailureKind::Refused,
                image: None,
                reason: "FailedCreate".into(),
                message: refusal.message.clone(),
            };
            tracing::warn!(
                job = %name, job_id = job.job.job_id().unwrap_or(""), lane = %job.job.lane,
                cause = %failure.summary(), waited_s = job.age.as_secs(),
                "judged dead: the cluster refuses to create the Job's pod; it is failed with that cause and its Job deleted"
            );
            let log =
                LogTail::Gone("the cluster refused to create the pod: there is no log".into());
            self.keep(job.job, None, log);
            self.judge_dead(name);
            self.never_started.insert(name.to_owned(), failure);
            report.judged_dead.push(name.to_owned());
        }
    }
}

/// The name of a Job and its wait in seconds ("" and 0 for none).
fn named(job: Option<Podless<'_>>) -> (&str, u64) {
    job.map_or(("", 0), |j| (j.job.name(), j.age.as_secs()))
}
