//! Which leases to renew: pure, from the cached owned Jobs.

use tcab_shared::Lane;
use tcab_shared::backend::JobId;
use tcab_shared::cluster::JobSummary;

/// The job ids to renew in one lane: the ids of that lane's live Jobs
/// (labelled with a job id), deduplicated and sorted. Two live Jobs of one id
/// (an old claim still running beside a new one) renew it once.
pub fn renewal_ids(jobs: &[JobSummary], lane: Lane) -> Vec<JobId> {
    let mut ids: Vec<JobId> = jobs
        .iter()
        .filter(|j| j.lane == lane && j.is_live())
        .filter_map(|j| j.job_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The renewal calls of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalPlan {
    /// Run ids to renew; the run call is always made, even when empty, so
    /// the gate reflects whether the backend answers.
    pub runs: Vec<JobId>,
    /// Publish ids to renew, or `None` while publishing is off.
    pub publishes: Option<Vec<JobId>>,
}

/// Plans one renewal round.
pub fn plan_renewals(jobs: &[JobSummary], publishing: bool) -> RenewalPlan {
    RenewalPlan {
        runs: renewal_ids(jobs, Lane::Run),
        publishes: publishing.then(|| renewal_ids(jobs, Lane::Publish)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::cluster::JobPhase;

    fn job(name: &str, lane: Lane, id: Option<&str>, phase: JobPhase) -> JobSummary {
        JobSummary {
            name: name.into(),
            lane,
            job_id: id.map(Into::into),
            claim: Some("c".into()),
            phase,
            failed_pods: 0,
            created_at: None,
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
            job("d-x", Lane::Run, None, JobPhase::Live),
            job("p-p-1", Lane::Publish, Some("p"), JobPhase::Live),
        ];
        assert_eq!(renewal_ids(&jobs, Lane::Run), ["a", "b"]);
        let plan = plan_renewals(&jobs, true);
        assert_eq!(plan.publishes.as_deref(), Some(&["p".to_string()][..]));
        assert_eq!(plan_renewals(&jobs, false).publishes, None);
        assert_eq!(plan_renewals(&[], false).runs, Vec::<JobId>::new());
    }
}
