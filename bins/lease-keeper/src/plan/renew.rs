//! Which leases to renew: pure, from the cached owned Jobs and the Jobs
//! judged dead.
//!
//! One malformed Job (a managed-by label and an empty or invalid
//! `tcab.dev/job-id`) must not stop every renewal: it is skipped with its
//! reason, and the rest are renewed.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use tcab_shared::Lane;
use tcab_shared::backend::client::is_job_id;
use tcab_shared::job_cache::{JobSummary, summaries};

/// Why a live Job's lease is not renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RenewSkip {
    /// It has no `tcab.dev/job-id` label.
    NoJobId,
    /// Its `tcab.dev/job-id` label is not a backend job id.
    MalformedJobId(String),
    /// It was judged dead (it cannot finish failing, or its pod never started).
    JudgedDead,
}

impl RenewSkip {
    /// A short phrase for the log.
    pub(crate) fn describe(&self) -> String {
        match self {
            RenewSkip::NoJobId => "no tcab.dev/job-id label".into(),
            RenewSkip::MalformedJobId(id) => {
                format!("tcab.dev/job-id {id:?} is not a backend job id")
            }
            RenewSkip::JudgedDead => "judged dead".into(),
        }
    }

    /// Whether the skip means the Job itself is malformed (worth a warning).
    pub(crate) fn is_malformed(&self) -> bool {
        matches!(self, RenewSkip::NoJobId | RenewSkip::MalformedJobId(_))
    }
}

/// The renewal call of one lane, borrowing its ids from the view it was
/// planned from (a round renews every live Job: no id is copied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LaneRenewal<'a> {
    /// Ids to renew, sorted and deduplicated. Two live Jobs of one id (an old
    /// claim still running beside a new one) renew it once.
    pub ids: Vec<&'a str>,
    /// For each id, the position in the planned view of the Job it was
    /// taken from (so the renewer can keep the renewed set as positions in
    /// a view it holds, not as copies of the ids).
    pub at: Vec<u32>,
    /// Live Jobs of the lane not renewed, by name (sorted), with the reason.
    pub skipped: Vec<(String, RenewSkip)>,
}

/// Plans the renewal call of one lane.
pub(crate) fn plan_lane<'a>(
    jobs: &'a [impl Borrow<JobSummary>],
    lane: Lane,
    judged_dead: &BTreeSet<String>,
) -> LaneRenewal<'a> {
    let mut plan = LaneRenewal::default();
    let mut renewed: Vec<(&str, u32)> = Vec::new();
    let lane_jobs = summaries(jobs)
        .zip(0u32..)
        .filter(|(j, _)| j.lane == lane && j.is_live());
    for (job, at) in lane_jobs {
        let verdict = if judged_dead.contains(job.name()) {
            Err(RenewSkip::JudgedDead)
        } else {
            match job.job_id() {
                None => Err(RenewSkip::NoJobId),
                Some(id) if !is_job_id(id) => Err(RenewSkip::MalformedJobId(id.to_owned())),
                Some(id) => Ok(id),
            }
        };
        match verdict {
            Ok(id) => renewed.push((id, at)),
            Err(skip) => plan.skipped.push((job.name().to_string(), skip)),
        }
    }
    renewed.sort_unstable();
    renewed.dedup_by_key(|(id, _)| *id);
    (plan.ids, plan.at) = renewed.into_iter().unzip();
    plan.skipped.sort_by(|a, b| a.0.cmp(&b.0));
    plan
}

/// The renewal calls of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewalPlan<'a> {
    /// The run call; always made, even when empty, so the gate reflects
    /// whether the backend answers.
    pub runs: LaneRenewal<'a>,
    /// The publish call, or `None` while publishing is off.
    pub publishes: Option<LaneRenewal<'a>>,
}

/// Plans one renewal round.
pub(crate) fn plan_renewals<'a>(
    jobs: &'a [impl Borrow<JobSummary>],
    publishing: bool,
    judged_dead: &BTreeSet<String>,
) -> RenewalPlan<'a> {
    RenewalPlan {
        runs: plan_lane(jobs, Lane::Run, judged_dead),
        publishes: publishing.then(|| plan_lane(jobs, Lane::Publish, judged_dead)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::job_cache::JobPhase;

    fn job(name: &str, lane: Lane, id: Option<&str>, phase: JobPhase) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(name, id, Some("c")),
            lane,
            phase,
            ..JobSummary::default()
        }
    }

    #[test]
    fn live_jobs_of_the_lane_deduplicated_and_sorted() {
        let jobs = vec![
            job("d-b-1", Lane::Run, Some("b"), JobPhase::Live),
            job("d-a-1", Lane::Run, Some("a"), JobPhase::Live),
            job("d-a-2", Lane::Run, Some("a"), JobPhase::Live),
            job("d-c-1", Lane::Run, Some("c"), JobPhase::Failed),
            job("d-e-1", Lane::Run, Some("e"), JobPhase::Succeeded),
            job("p-p-1", Lane::Publish, Some("p"), JobPhase::Live),
        ];
        let none = BTreeSet::new();
        let runs = plan_lane(&jobs, Lane::Run, &none);
        assert_eq!(runs.ids, ["a", "b"]);
        assert_eq!(runs.at, [1, 0], "each id's Job in the view (a's first)");
        let plan = plan_renewals(&jobs, true, &none);
        assert_eq!(plan.publishes.map(|p| p.ids), Some(vec!["p"]));
        assert_eq!(plan_renewals(&jobs, false, &none).publishes, None);
        assert!(
            plan_renewals(&[] as &[JobSummary], false, &none)
                .runs
                .ids
                .is_empty()
        );
    }

    /// The defect: a live Job with an empty job id made every renewal call
    /// fail before it was sent, which closed the gate for good.
    #[test]
    fn a_malformed_job_is_skipped_and_the_rest_renewed() {
        let jobs = vec![
            job("d-empty", Lane::Run, Some(""), JobPhase::Live),
            job("d-bad", Lane::Run, Some("not a valid id!"), JobPhase::Live),
            job("d-none", Lane::Run, None, JobPhase::Live),
            job("d-ok", Lane::Run, Some("ok"), JobPhase::Live),
        ];
        let plan = plan_lane(&jobs, Lane::Run, &BTreeSet::new());
        assert_eq!(plan.ids, ["ok"]);
        assert_eq!(
            plan.skipped,
            vec![
                (
                    "d-bad".into(),
                    RenewSkip::MalformedJobId("not a valid id!".into())
                ),
                ("d-empty".into(), RenewSkip::MalformedJobId(String::new())),
                ("d-none".into(), RenewSkip::NoJobId),
            ]
        );
        assert!(plan.skipped.iter().all(|(_, s)| s.is_malformed()));
    }

    #[test]
    fn a_job_judged_dead_is_no_longer_renewed() {
        let jobs = vec![
            job("d-a", Lane::Run, Some("a"), JobPhase::Live),
            job("d-b", Lane::Run, Some("b"), JobPhase::Live),
        ];
        let dead = BTreeSet::from(["d-a".to_owned()]);
        let plan = plan_lane(&jobs, Lane::Run, &dead);
        assert_eq!(plan.ids, ["b"]);
        assert_eq!(plan.skipped, vec![("d-a".into(), RenewSkip::JudgedDead)]);
        assert!(!plan.skipped[0].1.is_malformed());
    }
}
