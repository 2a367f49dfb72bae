//! Jobs the cluster gives no pod ([`crate::plan::refusals`] decides): at
//! most once per check interval, and only while some live Job has counted
//! no pod for longer than the start grace, one list of the Job
//! controller's `FailedCreate` Events says which of them the API server
//! refuses. Each refused Job (its pods confirmed absent first: the view may
//! be behind) is judged never to start, with the refusal as its cause, and
//! goes the way of a pod that can never start: its death (run) or failed
//! result (publish) reported, then its Job deleted. The others wait, and
//! the log and the `tcab_dispatcher_jobs_without_pod` gauge say so.

use super::reports::{Reporter, out_of_budget};
use crate::cause::{LogTail, StartFailure, StartFailureKind};
use crate::plan::failures::DeathKind;
use crate::plan::refusals::{Podless, Refusal, judge_refusals, podless};
use crate::report::ReportTick;
use std::collections::BTreeSet;
use tcab_shared::error_chain;
use tcab_shared::job_cache::Snapshot;
use tcab_shared::lane::PerLane;
use tokio::time::Instant;

impl Reporter {
    /// Reads why the Jobs past the start grace have no pod, when a check
    /// is due; returns the deaths now due (the refused Jobs, by name).
    pub(super) async fn check_refusals(
        &mut self,
        snapshot: &Snapshot,
        now: Instant,
        deadline: Instant,
        report: &mut ReportTick,
    ) -> Vec<(String, DeathKind)> {
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
            return Vec::new();
        }
        self.last_refusal_check = Some(now);
        let refusals = match self.inspector.refusals().await {
            Ok(refusals) => refusals,
            Err(error) => {
                let plan = judge_refusals(podless(snapshot, &judged, wall_now, grace), &[]);
                let (oldest, waited_s) = named(plan.oldest_waiting);
                tracing::warn!(
                    jobs = plan.waiting, oldest, waited_s,
                    reason = error.reason().as_str(), error = %error_chain(&error),
                    "Jobs have had no pod for longer than the start grace, and the Job controller's FailedCreate Events cannot be read (the Role needs list on events): they wait, and are not failed by the start rule"
                );
                return Vec::new();
            }
        };
        let plan = judge_refusals(podless(snapshot, &judged, wall_now, grace), &refusals);
        if plan.waiting > 0 {
            let (oldest, waited_s) = named(plan.oldest_waiting);
            tracing::warn!(
                jobs = plan.waiting,
                oldest,
                waited_s,
                "Jobs have had no pod for longer than the start grace, and no refusal to create one is recorded (is the Job controller running? is a Job suspended?): they wait for a pod or their deadline, and are not failed by the start rule"
            );
        }
        let refused: Vec<(String, u64, Refusal)> = plan
            .refused
            .into_iter()
            .map(|(job, refusal)| (job.name().to_owned(), job.age.as_secs(), refusal))
            .collect();
        let mut deaths = Vec::new();
        for (name, waited_s, refusal) in refused {
            if out_of_budget(deadline, report) {
                break;
            }
            // The view may be behind the cluster: a pod made since means
            // the refusal has passed.
            match self.inspector.newest_pod(&name).await {
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
            let Ok(at) = snapshot.binary_search_by(|j| j.name().cmp(&name)) else {
                continue;
            };
            let summary = &snapshot[at];
            let failure = StartFailure {
                kind: StartFailureKind::Refused,
                image: None,
                reason: "FailedCreate".into(),
                message: refusal.message,
            };
            tracing::warn!(
                job = %name, job_id = summary.job_id().unwrap_or(""), lane = %summary.lane,
                cause = %failure.summary(), waited_s,
                "judged dead: the cluster refuses to create the Job's pod; its death is reported and its Job deleted"
            );
            let log =
                LogTail::Gone("the cluster refused to create the pod: there is no log".into());
            self.keep(summary, None, log);
            self.judge_dead(&name);
            self.never_started.insert(name.clone(), failure);
            report.judged_dead.push(name.clone());
            deaths.push((name, DeathKind::NeverStarted));
        }
        deaths
    }
}

/// The name of a Job and its wait in seconds ("" and 0 for none).
fn named(job: Option<Podless<'_>>) -> (&str, u64) {
    job.map_or(("", 0), |j| (j.job.name(), j.age.as_secs()))
}
