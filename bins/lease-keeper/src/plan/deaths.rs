//! Which driver Jobs to report as deaths: pure, over the cached Jobs, the
//! deaths due (see [`super::failures`]), the claims the vault holds and the
//! claims already handled. (A publisher's death takes the lost path.)
//!
//! Only the Job of a job's current claim is reported: the claim whose token
//! the vault holds (the most recent Put when it holds several). A failed Job
//! of an older claim is stale; its driver exits at its first refused report.
//! With no token at all, the job is left to lost-driver detection.

use super::Answer;
use super::failures::DeathKind;
use super::tokens::{HeldClaim, TokenKey};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use tcab_shared::Lane;
use tcab_shared::job_cache::{JobSummary, summaries};

/// A failed driver Job whose death is to be reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeathCandidate {
    /// The backend job id and the claim whose token will be presented.
    pub key: TokenKey,
    /// The failed Job's name.
    pub job_name: String,
    /// Why it is due.
    pub kind: DeathKind,
}

/// Why a failed driver Job is not reported this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeathSkip {
    /// The Job has no `tcab.dev/job-id` label.
    NoJobId,
    /// The Job has no `tcab.dev/claim` label, so it cannot be matched to a token.
    NoClaim,
    /// This claim's death was already reported or otherwise settled.
    AlreadyHandled,
    /// The vault holds no token for the job: left to lost-driver detection.
    NoToken,
    /// The vault's current claim for the job is another one: this Job is stale.
    StaleClaim {
        /// The current claim tag.
        current: String,
    },
    /// Another failed Job of the same claim is reported instead.
    Duplicate,
}

impl DeathSkip {
    /// A short phrase for the debug log.
    pub(crate) fn describe(&self) -> String {
        match self {
            DeathSkip::NoJobId => "no job-id label".into(),
            DeathSkip::NoClaim => "no claim label".into(),
            DeathSkip::AlreadyHandled => "already reported".into(),
            DeathSkip::NoToken => "no token held; left to lost-driver detection".into(),
            DeathSkip::StaleClaim { current } => {
                format!("stale claim; the current claim is {current}")
            }
            DeathSkip::Duplicate => "another Job of the same claim is reported".into(),
        }
    }
}

/// The death reports of one tick, and why each other failed driver Job is left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeathPlan {
    /// To report, sorted by job id.
    pub report: Vec<DeathCandidate>,
    /// Left alone, by Job name (sorted), with the reason.
    pub skipped: Vec<(String, DeathSkip)>,
}

/// The current claim per job id: the held claim with the latest Put.
pub(crate) fn current_claims(held: &[HeldClaim]) -> BTreeMap<&str, &HeldClaim> {
    let mut current: BTreeMap<&str, &HeldClaim> = BTreeMap::new();
    for h in held {
        let slot = current.entry(h.key.job_id.as_str()).or_insert(h);
        if (h.seq, &h.key.claim) > (slot.seq, &slot.key.claim) {
            *slot = h;
        }
    }
    current
}

/// Plans the death reports from the cached Jobs, the claims the vault holds,
/// and the claims already handled.
pub(crate) fn plan_deaths(
    jobs: &[impl Borrow<JobSummary>],
    due: &BTreeMap<String, DeathKind>,
    held: &[HeldClaim],
    handled: &BTreeSet<TokenKey>,
) -> DeathPlan {
    let current = current_claims(held);
    let mut failed: Vec<(&JobSummary, DeathKind)> = summaries(jobs)
        .filter(|j| j.lane == Lane::Run)
        .filter_map(|j| due.get(j.name()).map(|kind| (j, *kind)))
        .collect();
    failed.sort_by(|a, b| a.0.name().cmp(b.0.name()));

    let mut plan = DeathPlan::default();
    let mut chosen: BTreeSet<TokenKey> = BTreeSet::new();
    for (job, kind) in failed {
        let verdict = match (job.job_id(), job.claim()) {
            (None, _) => Err(DeathSkip::NoJobId),
            (Some(_), None) => Err(DeathSkip::NoClaim),
            (Some(id), Some(claim)) => {
                let key = TokenKey::new(id, claim);
                if handled.contains(&key) {
                    Err(DeathSkip::AlreadyHandled)
                } else {
                    match current.get(id) {
                        None => Err(DeathSkip::NoToken),
                        Some(h) if h.key.claim != *claim => Err(DeathSkip::StaleClaim {
                            current: h.key.claim.clone(),
                        }),
                        Some(_) if chosen.contains(&key) => Err(DeathSkip::Duplicate),
                        Some(_) => Ok(key),
                    }
                }
            }
        };
        match verdict {
            Ok(key) => {
                chosen.insert(key.clone());
                plan.report.push(DeathCandidate {
                    key,
                    job_name: job.name().to_string(),
                    kind,
                });
            }
            Err(skip) => plan.skipped.push((job.name().to_string(), skip)),
        }
    }
    plan.report
        .sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.job_name.cmp(&b.job_name)));
    plan
}

/// What to do with a claim's death report after a backend answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeathSettle {
    /// Send the report (the job is still live).
    Report,
    /// The report landed: the claim is settled.
    Reported,
    /// No report is needed: the job is already terminal.
    AlreadyTerminal,
    /// No report is needed: the backend does not know the job.
    Unknown,
    /// No report can land: the token was refused (the job was requeued and
    /// a newer claim drives it).
    Requeued,
    /// The answer said nothing: try again on the next tick.
    Retry,
}

impl DeathSettle {
    /// Whether the claim's death needs nothing more (its token is dropped).
    pub(crate) fn settled(self) -> bool {
        !matches!(self, DeathSettle::Report | DeathSettle::Retry)
    }
}

/// Before a death report: what the backend's read of the job (`GET
/// /jobs/{id}`, its state when it answered) says. Only a live job is
/// reported; a failed read is tried again rather than guessed at.
pub(crate) fn settle_death_check(answer: Answer, live: Option<bool>) -> DeathSettle {
    match (answer, live) {
        (Answer::Ok, Some(true)) => DeathSettle::Report,
        (Answer::Ok, _) => DeathSettle::AlreadyTerminal,
        (Answer::NotFound, _) => DeathSettle::Unknown,
        _ => DeathSettle::Retry,
    }
}

/// After a death report: whether it landed, needs nothing more, or is tried
/// again next tick.
pub(crate) fn settle_death_report(answer: Answer) -> DeathSettle {
    match answer {
        Answer::Ok => DeathSettle::Reported,
        Answer::Refused => DeathSettle::Requeued,
        Answer::Conflict => DeathSettle::AlreadyTerminal,
        Answer::NotFound => DeathSettle::Unknown,
        Answer::Failed => DeathSettle::Retry,
    }
}

/// Whether a Job the lease-keeper ends must wait before it is deleted: a
/// run's claim whose death is still to be reported (not settled, token
/// held). A publisher never waits: its loss is reported through the lost
/// path, once its Job is gone.
pub(crate) fn death_report_pending(
    job: &JobSummary,
    held: &[HeldClaim],
    handled: &BTreeSet<TokenKey>,
) -> bool {
    let Some(key) = job
        .job_id()
        .zip(job.claim())
        .map(|(id, claim)| TokenKey::new(id, claim))
    else {
        return false;
    };
    job.lane == Lane::Run && !handled.contains(&key) && held.iter().any(|h| h.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use tcab_shared::Lane;

    use tcab_shared::job_cache::JobPhase;

    fn job(id: &str, claim: &str, phase: JobPhase) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(
                &tcab_shared::names::job_name(Lane::Run, id, claim),
                Some(id),
                Some(claim),
            ),
            lane: Lane::Run,
            phase,
            failed_pods: 1,
            ..JobSummary::default()
        }
    }

    /// The deaths due: every Failed Job (as the failure plan says once its
    /// pods stopped).
    fn due(jobs: &[JobSummary]) -> BTreeMap<String, DeathKind> {
        jobs.iter()
            .filter(|j| j.phase == JobPhase::Failed)
            .map(|j| (j.name().to_string(), DeathKind::Failed))
            .collect()
    }

    fn held(id: &str, claim: &str, seq: u64) -> HeldClaim {
        HeldClaim {
            key: TokenKey::new(id, claim),
            lane: Lane::Run,
            seq,
        }
    }

    #[test]
    fn reports_only_the_current_claim_once() {
        let jobs = vec![
            job("a", "c1", JobPhase::Failed),
            job("a", "c2", JobPhase::Failed),
            job("b", "c1", JobPhase::Failed),
            job("c", "c1", JobPhase::Failed),
            job("d", "c1", JobPhase::Live),
            job("e", "c1", JobPhase::Failed),
        ];
        let held = vec![
            held("a", "c1", 1),
            held("a", "c2", 5),
            held("c", "c1", 2),
            held("d", "c1", 3),
            held("e", "c1", 4),
        ];
        let handled = BTreeSet::from([TokenKey::new("e", "c1")]);
        let plan = plan_deaths(&jobs, &due(&jobs), &held, &handled);
        let reported: Vec<_> = plan
            .report
            .iter()
            .map(|c| (&*c.key.job_id, &*c.key.claim))
            .collect();
        assert_eq!(reported, [("a", "c2"), ("c", "c1")]);
        let skip_of = |id: &str, claim: &str| {
            let name = tcab_shared::names::job_name(Lane::Run, id, claim);
            plan.skipped
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.clone())
        };
        assert_eq!(
            skip_of("a", "c1"),
            Some(DeathSkip::StaleClaim {
                current: "c2".into()
            })
        );
        assert_eq!(skip_of("b", "c1"), Some(DeathSkip::NoToken));
        assert_eq!(skip_of("e", "c1"), Some(DeathSkip::AlreadyHandled));
        assert_eq!(
            skip_of("d", "c1"),
            None,
            "live Jobs are not considered at all"
        );
    }

    #[test]
    fn publishers_and_unlabelled_jobs_are_not_reported() {
        let mut publisher = job("p", "c1", JobPhase::Failed);
        publisher.lane = Lane::Publish;
        let mut no_claim = job("n", "c1", JobPhase::Failed);
        no_claim.names =
            tcab_shared::job_cache::JobNames::new(no_claim.name(), no_claim.job_id(), None);
        let jobs = [publisher, no_claim.clone()];
        let plan = plan_deaths(
            &jobs,
            &due(&jobs),
            &[held("p", "c1", 1), held("n", "c1", 2)],
            &BTreeSet::new(),
        );
        assert!(plan.report.is_empty());
        assert_eq!(
            plan.skipped,
            vec![(no_claim.name().to_string(), DeathSkip::NoClaim)]
        );
    }

    fn arb_job() -> impl Strategy<Value = JobSummary> {
        (0..6u8, 0..3u8, 0..3u8, any::<bool>(), any::<bool>()).prop_map(
            |(id, claim, phase, lane, label)| {
                let phase = [JobPhase::Live, JobPhase::Succeeded, JobPhase::Failed][phase as usize];
                let mut j = job(&format!("j{id}"), &format!("c{claim}"), phase);
                if lane {
                    j.lane = Lane::Publish;
                }
                if !label {
                    j.names = tcab_shared::job_cache::JobNames::new(
                        &format!("{}-x", j.name()),
                        j.job_id(),
                        j.claim(),
                    );
                }
                j
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: RngSeed::Fixed(5), ..ProptestConfig::default() })]
        #[test]
        fn deaths_are_safe_and_deterministic(
            jobs in proptest::collection::vec(arb_job(), 0..12).prop_map(|mut v| {
                // Job names are unique in the cache (it is keyed by name).
                v.sort_by(|a, b| a.name().cmp(b.name()));
                v.dedup_by(|a, b| a.name() == b.name());
                v
            }),
            held_raw in proptest::collection::vec((0..6u8, 0..3u8, 0..50u64), 0..8),
            handled_raw in proptest::collection::vec((0..6u8, 0..3u8), 0..4),
            seed in any::<u64>(),
        ) {
            let held: Vec<HeldClaim> = held_raw.iter()
                .map(|(i, c, s)| held(&format!("j{i}"), &format!("c{c}"), *s)).collect();
            let handled: BTreeSet<TokenKey> = handled_raw.iter()
                .map(|(i, c)| TokenKey::new(format!("j{i}"), format!("c{c}"))).collect();
            let plan = plan_deaths(&jobs, &due(&jobs), &held, &handled);

            // Each job id is reported at most once, never for a handled claim,
            // only for a failed driver Job of the current claim.
            let ids: BTreeSet<_> = plan.report.iter().map(|c| c.key.job_id.clone()).collect();
            prop_assert_eq!(ids.len(), plan.report.len());
            let current = current_claims(&held);
            for c in &plan.report {
                prop_assert!(!handled.contains(&c.key));
                prop_assert_eq!(&current[c.key.job_id.as_str()].key.claim, &c.key.claim);
                let j = jobs.iter().find(|j| j.name() == c.job_name).unwrap();
                prop_assert!(j.phase == JobPhase::Failed && j.lane == Lane::Run);
            }

            // Deterministic under reordering of every input.
            let mut shuffled_jobs = jobs.clone();
            let mut shuffled_held = held.clone();
            let n = shuffled_jobs.len().max(1);
            shuffled_jobs.rotate_left((seed as usize) % n);
            shuffled_jobs.reverse();
            shuffled_held.reverse();
            prop_assert_eq!(plan_deaths(&shuffled_jobs, &due(&jobs), &shuffled_held, &handled), plan.clone());

            // Handling every reported claim leaves nothing to report again.
            let mut after = handled.clone();
            after.extend(plan.report.iter().map(|c| c.key.clone()));
            let again = plan_deaths(&jobs, &due(&jobs), &held, &after);
            prop_assert!(again.report.is_empty());
        }
    }

    #[test]
    fn only_a_live_job_is_reported_and_only_a_clear_answer_settles_it() {
        use DeathSettle::*;
        assert_eq!(settle_death_check(Answer::Ok, Some(true)), Report);
        assert_eq!(settle_death_check(Answer::Ok, Some(false)), AlreadyTerminal);
        assert_eq!(settle_death_check(Answer::NotFound, None), Unknown);
        for unclear in [Answer::Failed, Answer::Refused, Answer::Conflict] {
            assert_eq!(settle_death_check(unclear, None), Retry, "{unclear:?}");
        }
        assert_eq!(settle_death_report(Answer::Ok), Reported);
        assert_eq!(settle_death_report(Answer::Refused), Requeued);
        assert_eq!(settle_death_report(Answer::Conflict), AlreadyTerminal);
        assert_eq!(settle_death_report(Answer::NotFound), Unknown);
        assert_eq!(settle_death_report(Answer::Failed), Retry);
        assert!(Reported.settled() && Requeued.settled() && Unknown.settled());
        assert!(!Retry.settled() && !Report.settled());
    }

    #[test]
    fn a_never_started_run_waits_for_its_death_report_and_a_publisher_does_not() {
        let mut run = job("a", "c1", JobPhase::Failed);
        let key = TokenKey::new("a", "c1");
        let claims = vec![held("a", "c1", 1)];
        assert!(death_report_pending(&run, &claims, &BTreeSet::new()));
        assert!(!death_report_pending(&run, &claims, &BTreeSet::from([key])));
        assert!(
            !death_report_pending(&run, &[], &BTreeSet::new()),
            "no token: nothing to report"
        );
        run.names = tcab_shared::job_cache::JobNames::new(run.name(), run.job_id(), None);
        assert!(!death_report_pending(&run, &claims, &BTreeSet::new()));
        let mut publish = job("a", "c1", JobPhase::Failed);
        publish.lane = Lane::Publish;
        assert!(!death_report_pending(&publish, &claims, &BTreeSet::new()));
    }
}
