//! Which driven jobs are lost: pure, over the backend's active list (with the
//! backend's `now`), the cached Jobs, the claims the vault holds and the jobs
//! already reported.
//!
//! A lapse is judged against the backend's clock only, so a skewed pod clock
//! changes no judgement. A job with a live Job of its lane is never lost (its
//! lease is being renewed), unless that Job was judged dead; a publish is
//! never lost while its publisher Job is unfinished at all, judged dead or
//! not (the spec's "never"): the lease-keeper ends a judged-dead publisher
//! Job first (it deletes it), and the publish is lost once the Job is gone.
//! A job whose Job this process ended (deleted after judging that its pod
//! never starts or that it is dead) is lost at once, without waiting for
//! its lease: nothing of it runs, and nobody renews it. A job whose Job
//! the view does not show at all is confirmed against the API before it is
//! reported (see the lease-keeper's report loop).

use super::Answer;
use super::deaths::current_claims;
use super::tokens::HeldClaim;
use jiff::Timestamp;
use std::borrow::Borrow;
use std::collections::BTreeSet;
use tcab_shared::Lane;
use tcab_shared::backend::{ActivePublishes, ActiveRuns, JobId, JobState, PublishState};
use tcab_shared::job_cache::{JobPhase, JobSummary, summaries};

/// What the cluster shows for a lost job; the detail sent with the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LostCause {
    /// No Job of the job's lane exists for it any more.
    JobGone,
    /// Its Job completed, yet the backend still holds the job: the driver or
    /// publisher exited without its report landing.
    ExitedWithoutReport {
        /// The completed Job.
        job_name: String,
    },
    /// Its Job failed: the dead pod's cause is read from the cluster.
    Died {
        /// The failed Job.
        job_name: String,
    },
}

/// One lost job to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LostJob {
    /// The backend job id.
    pub job_id: JobId,
    /// Its lane.
    pub lane: Lane,
    /// What the cluster shows.
    pub cause: LostCause,
}

/// Why a job of the active list is not reported lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LostSkip {
    /// A run still `dispatched`: the backend requeues it itself on a lapse.
    NotPastDispatched(JobState),
    /// A publish not in `dispatched`.
    NotDispatched(PublishState),
    /// A Job of its lane is live.
    JobLive {
        /// The live Job.
        job_name: String,
    },
    /// Its publisher Job was judged dead but is not finished yet: it is
    /// deleted first, and the publish judged once the Job is gone.
    JudgedDeadUnfinished {
        /// The judged-dead publisher Job.
        job_name: String,
    },
    /// The backend gave no lease expiry: a lapse cannot be judged.
    NoLease,
    /// Already reported lost by this process.
    AlreadyReported,
    /// The id appeared more than once in the list; the first entry counts.
    Duplicate,
}

impl LostSkip {
    /// A short phrase for the debug log.
    pub(crate) fn describe(&self) -> String {
        match self {
            LostSkip::NotPastDispatched(s) => format!("run is {}, not past dispatched", s.as_str()),
            LostSkip::NotDispatched(s) => format!("publish is {s:?}, not dispatched"),
            LostSkip::NoLease => "no lease expiry given; cannot judge a lapse".to_owned(),
            LostSkip::JobLive { job_name } => format!("Job {job_name} is live"),
            LostSkip::JudgedDeadUnfinished { job_name } => format!(
                "publisher Job {job_name} was judged dead and is not finished: it is deleted first"
            ),
            LostSkip::AlreadyReported => "already reported lost".into(),
            LostSkip::Duplicate => "listed twice".into(),
        }
    }
}

/// The lost reports of one lane in one tick, and why the rest are left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LostPlan {
    /// To report, sorted by job id.
    pub lost: Vec<LostJob>,
    /// Left alone, sorted by job id, with the reason.
    pub skipped: Vec<(JobId, LostSkip)>,
    /// Listed jobs left alone because their lease runs on (backend clock):
    /// the usual case, counted rather than listed, since a list naming
    /// every driven job took about 9 MB a check at 100,000 of them.
    pub lease_current: usize,
}

/// One lane's active list (`GET /jobs/active` or `GET /publish-jobs/active`),
/// lane-neutral: each entry's id, whether its state makes it eligible (else
/// why not), and its lease, with the backend's `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveList {
    /// The lane the list is of.
    pub lane: Lane,
    /// The backend's clock when it answered.
    pub now: Timestamp,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: JobId,
    /// The state's position, a tie-break among duplicate ids.
    rank: u8,
    eligible: Result<(), Ineligible>,
    lease: Option<Timestamp>,
}

/// Why an entry's state keeps it from being judged: two bytes in an
/// entry where a whole [`LostSkip`] took 24, so an [`Entry`] is no larger
/// than a parsed answer's entry and the list is built in that answer's
/// place (no second buffer of 100,000 entries; a unit test holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ineligible {
    /// A run not past dispatched.
    Run(JobState),
    /// A publish not dispatched.
    Publish(PublishState),
}

impl From<Ineligible> for LostSkip {
    fn from(why: Ineligible) -> Self {
        match why {
            Ineligible::Run(state) => LostSkip::NotPastDispatched(state),
            Ineligible::Publish(state) => LostSkip::NotDispatched(state),
        }
    }
}

impl ActiveList {
    /// Whether the backend lists `id` as driven.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.entries.iter().any(|e| e.id == id)
    }
}

impl From<ActiveRuns> for ActiveList {
    /// A run is eligible once past dispatched (its driver reports from then).
    /// The answer's ids move into the list: no second copy of each.
    fn from(active: ActiveRuns) -> Self {
        let entries = active.jobs.into_iter().map(|r| Entry {
            id: r.id,
            rank: r.state as u8,
            eligible: if r.state.is_past_dispatched() {
                Ok(())
            } else {
                Err(Ineligible::Run(r.state))
            },
            lease: r.lease_expires_at,
        });
        ActiveList {
            lane: Lane::Run,
            now: active.now,
            entries: entries.collect(),
        }
    }
}

impl From<ActivePublishes> for ActiveList {
    /// A publish is eligible while dispatched.
    fn from(active: ActivePublishes) -> Self {
        let entries = active.publish_jobs.into_iter().map(|p| Entry {
            id: p.id,
            rank: p.state as u8,
            eligible: if p.state == PublishState::Dispatched {
                Ok(())
            } else {
                Err(Ineligible::Publish(p.state))
            },
            lease: p.lease_expires_at,
        });
        ActiveList {
            lane: Lane::Publish,
            now: active.now,
            entries: entries.collect(),
        }
    }
}

/// What the lease-keeper knows beside a lane's active list.
#[derive(Debug)]
pub(crate) struct Known<'a, J = JobSummary> {
    /// The cached Jobs (every lane; the plan reads its own).
    pub jobs: &'a [J],
    /// The claims the vault holds.
    pub held: &'a [HeldClaim],
    /// The lane's jobs already reported lost.
    pub reported: &'a BTreeSet<JobId>,
    /// Jobs judged dead (their Jobs no longer count as live).
    pub judged_dead: &'a BTreeSet<String>,
    /// The lane's jobs whose Job this process ended (deleted): lost
    /// without waiting for their lease once no Job of them is left.
    pub ended: &'a BTreeSet<JobId>,
}

/// Plans one lane's lost reports from its active list and what is known.
pub(crate) fn plan_lost<J: Borrow<JobSummary>>(
    active: &ActiveList,
    known: &Known<'_, J>,
) -> LostPlan {
    let &Known {
        jobs,
        held,
        reported,
        judged_dead,
        ended,
    } = known;
    let lane = active.lane;
    let now = active.now;
    let mut entries: Vec<&Entry> = active.entries.iter().collect();
    // Sort so a reordered list gives the same plan; of duplicate ids the
    // one with the latest lease counts (the most protective reading).
    entries.sort_by(|a, b| {
        a.id.cmp(&b.id)
            .then(b.lease.cmp(&a.lease))
            .then(a.rank.cmp(&b.rank))
    });
    // The lane's labelled Jobs sorted by job id (then name): one pointer a
    // Job, and each listed id's Jobs are a slice found by binary search. At
    // 100,000 listed ids a tree of per-id vectors cost about 17 MB a tick.
    let mut labelled: Vec<&JobSummary> = summaries(jobs)
        .filter(|j| j.lane == lane && j.job_id().is_some())
        .collect();
    labelled.sort_by(|a, b| (a.job_id(), a.name()).cmp(&(b.job_id(), b.name())));
    let of_id = |id: &str| {
        let start = labelled.partition_point(|j| j.job_id() < Some(id));
        let end = start + labelled[start..].partition_point(|j| j.job_id() == Some(id));
        &labelled[start..end]
    };
    let current = current_claims(held);

    let mut out = LostPlan::default();
    let mut previous: Option<&str> = None;
    for e in entries {
        let id = e.id.as_str();
        // Sorted by id: a duplicate follows the entry it repeats.
        if previous.replace(id) == Some(id) {
            out.skipped.push((id.to_owned(), LostSkip::Duplicate));
            continue;
        }
        let own_jobs = of_id(id);
        let verdict = e.eligible.map_err(LostSkip::from).and_then(|()| {
            if reported.contains(id) {
                return Err(LostSkip::AlreadyReported);
            }
            match e.lease {
                _ if ended.contains(id) => {}
                None => return Err(LostSkip::NoLease),
                Some(lease) if lease > now => return Ok(None),
                Some(_) => {}
            }
            let first = |keep: &dyn Fn(&JobSummary) -> bool| {
                own_jobs
                    .iter()
                    .filter(|j| j.is_live() && keep(j))
                    .min_by(|a, b| a.name().cmp(b.name()))
            };
            if let Some(live) = first(&|j| !judged_dead.contains(j.name())) {
                return Err(LostSkip::JobLive {
                    job_name: live.name().to_string(),
                });
            }
            // A judged-dead publisher Job that still exists is unfinished;
            // one that is gone (its pod outlives it on a lost node) is not.
            if lane == Lane::Publish
                && let Some(dead) = first(&|j| judged_dead.contains(j.name()) && !j.gone)
            {
                return Err(LostSkip::JudgedDeadUnfinished {
                    job_name: dead.name().to_string(),
                });
            }
            let claim = current.get(id).map(|h| h.key.claim.as_str());
            Ok(Some(cause_of(own_jobs, claim)))
        });
        match verdict {
            Ok(Some(cause)) => out.lost.push(LostJob {
                job_id: id.to_owned(),
                lane,
                cause,
            }),
            Ok(None) => out.lease_current += 1,
            Err(skip) => out.skipped.push((id.to_owned(), skip)),
        }
    }
    out
}

/// The cause shown by a job's finished Jobs: the current claim's Job when
/// the vault knows it, else the newest (by creation, then name).
fn cause_of(jobs: &[&JobSummary], current_claim: Option<&str>) -> LostCause {
    let of_current = current_claim.and_then(|claim| {
        jobs.iter()
            .filter(|j| j.claim() == Some(claim))
            .min_by(|a, b| a.name().cmp(b.name()))
    });
    let newest = || {
        jobs.iter().max_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| b.name().cmp(a.name()))
        })
    };
    match of_current.or_else(newest) {
        None => LostCause::JobGone,
        Some(j) => match j.phase {
            JobPhase::Succeeded => LostCause::ExitedWithoutReport {
                job_name: j.name().to_string(),
            },
            // A live Job was ruled out before; treat it as failed defensively.
            JobPhase::Failed | JobPhase::Live => LostCause::Died {
                job_name: j.name().to_string(),
            },
        },
    }
}

/// What a lost report's answer settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostSettle {
    /// The report landed (the backend may still have ignored it: see its
    /// outcome).
    Reported,
    /// Refused because the job is no longer driven (404 or 409): nothing
    /// more to report.
    NoLongerDriven,
    /// Anything else: try again on the next tick.
    Retry,
}

/// Reads a lost report's answer. A refused service token is a failure to
/// try again, not a verdict on the job.
pub(crate) fn settle_lost_report(answer: Answer) -> LostSettle {
    match answer {
        Answer::Ok => LostSettle::Reported,
        Answer::NotFound | Answer::Conflict => LostSettle::NoLongerDriven,
        Answer::Refused | Answer::Failed => LostSettle::Retry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tokens::TokenKey;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use tcab_shared::backend::{ActivePublish, ActiveRun};

    /// The plan of one lane, over the backend's own answer for it.
    fn plan_from<A: Clone>(
        active: &A,
        jobs: &[JobSummary],
        held: &[HeldClaim],
        reported: &BTreeSet<JobId>,
        judged_dead: &BTreeSet<String>,
    ) -> LostPlan
    where
        ActiveList: From<A>,
    {
        let ended = BTreeSet::new();
        let known = Known {
            jobs,
            held,
            reported,
            judged_dead,
            ended: &ended,
        };
        plan_lost(&ActiveList::from(active.clone()), &known)
    }

    #[test]
    fn an_active_list_fits_in_the_parsed_answer() {
        use std::mem::{align_of, size_of};
        // `Vec::into_iter().map().collect()` reuses the source buffer only
        // when the new item is no larger and aligned alike.
        for (answer, align) in [
            (size_of::<ActiveRun>(), align_of::<ActiveRun>()),
            (size_of::<ActivePublish>(), align_of::<ActivePublish>()),
        ] {
            assert!(
                size_of::<Entry>() <= answer,
                "{} > {answer}",
                size_of::<Entry>()
            );
            assert_eq!(align_of::<Entry>(), align);
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn job(lane: Lane, id: &str, claim: &str, phase: JobPhase, created: &str) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(
                &tcab_shared::names::job_name(lane, id, claim),
                Some(id),
                Some(claim),
            ),
            lane,
            phase,
            created_at: Some(ts(created)),
            ..JobSummary::default()
        }
    }

    fn run(id: &str, state: JobState, lease: &str) -> ActiveRun {
        ActiveRun {
            id: id.into(),
            state,
            lease_expires_at: Some(ts(lease)),
        }
    }

    #[test]
    fn lapsed_runs_past_dispatched_without_a_live_job_are_lost() {
        let active = ActiveRuns {
            skipped: vec![],
            now: ts("2026-11-29T17:05:00Z"),
            jobs: vec![
                run("gone", JobState::Running, "2026-11-29T17:04:00Z"),
                run("ok", JobState::Running, "2026-11-29T17:06:00Z"),
                run("disp", JobState::Dispatched, "2026-11-29T17:00:00Z"),
                run("live", JobState::Storing, "2026-11-29T17:00:00Z"),
                run("exited", JobState::Validating, "2026-11-29T17:05:00Z"),
                run("died", JobState::Starting, "2026-11-29T17:01:00Z"),
                run("old", JobState::Running, "2026-11-29T17:01:00Z"),
            ],
        };
        let t = "2026-11-29T16:00:00Z";
        let jobs = vec![
            job(Lane::Run, "live", "c1", JobPhase::Live, t),
            job(Lane::Run, "live", "c0", JobPhase::Failed, t),
            job(Lane::Run, "exited", "c1", JobPhase::Succeeded, t),
            job(Lane::Run, "died", "c1", JobPhase::Failed, t),
            // A publisher Job of the same id does not count for the run lane.
            job(Lane::Publish, "gone", "c1", JobPhase::Live, t),
            job(
                Lane::Run,
                "old",
                "c1",
                JobPhase::Failed,
                "2026-11-29T16:00:00Z",
            ),
            job(
                Lane::Run,
                "old",
                "c2",
                JobPhase::Succeeded,
                "2026-11-29T16:30:00Z",
            ),
        ];
        let plan = plan_from(&active, &jobs, &[], &BTreeSet::new(), &BTreeSet::new());
        let lost: Vec<_> = plan
            .lost
            .iter()
            .map(|l| (l.job_id.as_str(), l.cause.clone()))
            .collect();
        let name = |id: &str, c: &str| tcab_shared::names::job_name(Lane::Run, id, c);
        assert_eq!(
            lost,
            [
                (
                    "died",
                    LostCause::Died {
                        job_name: name("died", "c1")
                    }
                ),
                (
                    "exited",
                    LostCause::ExitedWithoutReport {
                        job_name: name("exited", "c1")
                    }
                ),
                ("gone", LostCause::JobGone),
                (
                    "old",
                    LostCause::ExitedWithoutReport {
                        job_name: name("old", "c2")
                    }
                ),
            ]
        );
        let skipped: std::collections::BTreeMap<_, _> = plan.skipped.into_iter().collect();
        assert_eq!(
            skipped["disp"],
            LostSkip::NotPastDispatched(JobState::Dispatched)
        );
        assert_eq!(
            skipped["live"],
            LostSkip::JobLive {
                job_name: name("live", "c1")
            }
        );
        assert!(
            !skipped.contains_key("ok"),
            "a current lease is counted, not listed"
        );
        assert_eq!(plan.lease_current, 1);

        // A job reported once is not reported again.
        let plan = plan_from(
            &active,
            &jobs,
            &[],
            &BTreeSet::from(["gone".to_string()]),
            &BTreeSet::new(),
        );
        assert!(plan.lost.iter().all(|l| l.job_id != "gone"));
        assert!(
            plan.skipped
                .contains(&("gone".into(), LostSkip::AlreadyReported))
        );

        // With the vault naming the current claim, its Job describes the loss.
        let held = [HeldClaim {
            key: TokenKey::new("old", "c1"),
            lane: Lane::Run,
            seq: 1,
        }];
        let plan = plan_from(&active, &jobs, &held, &BTreeSet::new(), &BTreeSet::new());
        let old = plan.lost.iter().find(|l| l.job_id == "old").unwrap();
        assert_eq!(
            old.cause,
            LostCause::Died {
                job_name: name("old", "c1")
            }
        );
    }

    #[test]
    fn a_publish_whose_job_this_process_ended_is_lost_without_waiting_for_its_lease() {
        let lease_runs = ts("2026-11-29T17:05:00Z");
        let active = ActivePublishes {
            skipped: vec![],
            now: ts("2026-11-29T17:00:00Z"),
            publish_jobs: ["ended", "ended-unfinished", "other"]
                .into_iter()
                .map(|id| ActivePublish {
                    id: id.into(),
                    state: PublishState::Dispatched,
                    lease_expires_at: Some(lease_runs),
                })
                .collect(),
        };
        // The one whose Job is still in the view (being deleted, judged
        // dead) waits for it to go.
        let unfinished = job(
            Lane::Publish,
            "ended-unfinished",
            "c",
            JobPhase::Live,
            "2026-11-29T16:00:00Z",
        );
        let judged = BTreeSet::from([unfinished.name().to_owned()]);
        let ended: BTreeSet<JobId> = ["ended".into(), "ended-unfinished".into()].into();
        let jobs = [unfinished.clone()];
        let known = Known {
            jobs: &jobs[..],
            held: &[],
            reported: &BTreeSet::new(),
            judged_dead: &judged,
            ended: &ended,
        };
        let plan = plan_lost(&ActiveList::from(active), &known);
        let lost: Vec<&str> = plan.lost.iter().map(|l| l.job_id.as_str()).collect();
        assert_eq!(lost, ["ended"], "the others' leases run on");
        assert_eq!(plan.lost[0].cause, LostCause::JobGone);
        assert_eq!(plan.lease_current, 1);
        assert!(plan.skipped.iter().any(|(id, why)| id == "ended-unfinished"
            && matches!(why, LostSkip::JudgedDeadUnfinished { .. })));
    }

    #[test]
    fn publishes_dispatched_and_lapsed_without_an_active_publisher() {
        let active = ActivePublishes {
            skipped: vec![],
            now: ts("2026-11-29T17:05:00Z"),
            publish_jobs: vec![
                ActivePublish {
                    id: "p1".into(),
                    state: PublishState::Dispatched,
                    lease_expires_at: Some(ts("2026-11-29T17:00:00Z")),
                },
                ActivePublish {
                    id: "p2".into(),
                    state: PublishState::Dispatched,
                    lease_expires_at: Some(ts("2026-11-29T17:00:00Z")),
                },
                ActivePublish {
                    id: "p3".into(),
                    state: PublishState::Dispatched,
                    lease_expires_at: None,
                },
                ActivePublish {
                    id: "p4".into(),
                    state: PublishState::Succeeded,
                    lease_expires_at: None,
                },
            ],
        };
        let jobs = vec![
            job(
                Lane::Publish,
                "p2",
                "c",
                JobPhase::Live,
                "2026-11-29T16:00:00Z",
            ),
            job(
                Lane::Publish,
                "p1",
                "c",
                JobPhase::Failed,
                "2026-11-29T16:00:00Z",
            ),
        ];
        let plan = plan_from(&active, &jobs, &[], &BTreeSet::new(), &BTreeSet::new());
        let ids: Vec<_> = plan
            .lost
            .iter()
            .map(|l| (l.job_id.as_str(), l.lane))
            .collect();
        assert_eq!(ids, [("p1", Lane::Publish)]);
        assert!(matches!(plan.lost[0].cause, LostCause::Died { .. }));
        // No lease expiry: a lapse cannot be judged, so nothing is reported.
        assert!(
            plan.skipped
                .iter()
                .any(|(id, why)| id == "p3" && *why == LostSkip::NoLease),
            "{:?}",
            plan.skipped
        );
    }

    // ---- property tests over random snapshots ----

    const STATES: [JobState; 6] = [
        JobState::Dispatched,
        JobState::Starting,
        JobState::Running,
        JobState::Validating,
        JobState::Storing,
        JobState::Queued,
    ];

    fn base() -> Timestamp {
        ts("2026-11-29T17:00:00Z")
    }

    fn arb_active() -> impl Strategy<Value = ActiveRuns> {
        let entry =
            (0..8u8, 0..6usize, -300i64..300, any::<bool>()).prop_map(|(id, s, off, has)| {
                ActiveRun {
                    id: format!("j{id}"),
                    state: STATES[s],
                    lease_expires_at: has.then(|| base() + jiff::SignedDuration::from_secs(off)),
                }
            });
        (proptest::collection::vec(entry, 0..10), -300i64..300).prop_map(|(jobs, now)| ActiveRuns {
            skipped: vec![],
            now: base() + jiff::SignedDuration::from_secs(now),
            jobs,
        })
    }

    fn arb_jobs() -> impl Strategy<Value = Vec<JobSummary>> {
        let j = (0..8u8, 0..3u8, 0..3usize, any::<bool>(), -3600i64..0).prop_map(
            |(id, c, p, publ, age)| {
                let phase = [JobPhase::Live, JobPhase::Succeeded, JobPhase::Failed][p];
                let lane = if publ { Lane::Publish } else { Lane::Run };
                let mut s = job(
                    lane,
                    &format!("j{id}"),
                    &format!("c{c}"),
                    phase,
                    "2026-11-29T17:00:00Z",
                );
                s.created_at = Some(base() + jiff::SignedDuration::from_secs(age));
                s
            },
        );
        // Job names are unique in the cache (it is keyed by name).
        proptest::collection::vec(j, 0..12).prop_map(|mut v| {
            v.sort_by(|a, b| a.name().cmp(b.name()));
            v.dedup_by(|a, b| a.name() == b.name());
            v
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: RngSeed::Fixed(11), ..ProptestConfig::default() })]
        #[test]
        fn lost_runs_are_safe_deterministic_and_skew_free(
            active in arb_active(),
            jobs in arb_jobs(),
            held_raw in proptest::collection::vec((0..8u8, 0..3u8, 0..20u64), 0..6),
            reported_raw in proptest::collection::vec(0..8u8, 0..3),
            skew in prop_oneof![Just(-300i64), Just(300i64), -300i64..300],
        ) {
            let held: Vec<HeldClaim> = held_raw.iter().map(|(i, c, s)| HeldClaim {
                key: TokenKey::new(format!("j{i}"), format!("c{c}")), lane: Lane::Run, seq: *s }).collect();
            let reported: BTreeSet<JobId> = reported_raw.iter().map(|i| format!("j{i}")).collect();
            let plan = plan_from(&active, &jobs, &held, &reported, &BTreeSet::new());

            let mut ids = BTreeSet::new();
            for l in &plan.lost {
                // At most once, never twice across ticks.
                prop_assert!(ids.insert(l.job_id.clone()));
                prop_assert!(!reported.contains(&l.job_id));
                // Never a job with a live driver Job.
                prop_assert!(!jobs.iter().any(|j| j.lane == Lane::Run && j.is_live()
                    && j.job_id() == Some(l.job_id.as_str())));
                // Only past dispatched, and only when the counted lease lapsed.
                let first = active.jobs.iter().filter(|e| e.id == l.job_id)
                    .min_by_key(|e| (std::cmp::Reverse(e.lease_expires_at), e.state as u8)).unwrap();
                prop_assert!(first.state.is_past_dispatched());
                prop_assert!(first.lease_expires_at.is_none_or(|t| t <= active.now));
            }

            // Deterministic under reordering.
            let mut shuffled = active.clone();
            shuffled.jobs.reverse();
            let mut jobs_rev = jobs.clone();
            jobs_rev.reverse();
            let mut held_rev = held.clone();
            held_rev.reverse();
            prop_assert_eq!(&plan_from(&shuffled, &jobs_rev, &held_rev, &reported, &BTreeSet::new()), &plan);

            // The pod's clock plays no part: shifting every cluster timestamp
            // by up to five minutes changes nothing.
            let skewed: Vec<JobSummary> = jobs.iter().cloned().map(|mut j| {
                j.created_at = j.created_at.map(|t| t + jiff::SignedDuration::from_secs(skew));
                j
            }).collect();
            prop_assert_eq!(&plan_from(&active, &skewed, &held, &reported, &BTreeSet::new()), &plan);

            // Reporting everything planned leaves nothing for the next tick.
            let mut after = reported.clone();
            after.extend(plan.lost.iter().map(|l| l.job_id.clone()));
            prop_assert!(plan_from(&active, &jobs, &held, &after, &BTreeSet::new()).lost.is_empty());
        }

        #[test]
        fn lost_publishes_never_touch_a_live_publisher(
            raw in proptest::collection::vec((0..6u8, any::<bool>(), -300i64..300), 0..8),
            jobs in arb_jobs(),
            judged_mask in any::<u16>(),
            gone_mask in any::<u16>(),
        ) {
            let active = ActivePublishes { skipped: vec![], now: base(), publish_jobs: raw.iter().map(|(i, d, off)| ActivePublish {
                id: format!("j{i}"),
                state: if *d { PublishState::Dispatched } else { PublishState::Queued },
                lease_expires_at: Some(base() + jiff::SignedDuration::from_secs(*off)),
            }).collect() };
            // Some Jobs judged dead, some gone (a stand-in for a pod that
            // outlives its deleted Job).
            let jobs: Vec<JobSummary> = jobs.into_iter().enumerate().map(|(i, mut j)| {
                j.gone = gone_mask & (1 << i) != 0;
                j
            }).collect();
            let judged: BTreeSet<String> = jobs.iter().enumerate()
                .filter(|(i, _)| judged_mask & (1 << i) != 0)
                .map(|(_, j)| j.name().to_owned()).collect();
            let plan = plan_from(&active, &jobs, &[], &BTreeSet::new(), &judged);
            for l in &plan.lost {
                prop_assert_eq!(l.lane, Lane::Publish);
                // No publish is lost while a publisher Job of it is live and
                // exists, judged dead or not; only one that is gone and
                // judged dead no longer holds it.
                prop_assert!(!jobs.iter().any(|j| j.lane == Lane::Publish && j.is_live()
                    && j.job_id() == Some(l.job_id.as_str())
                    && (!j.gone || !judged.contains(j.name()))));
                let e = active.publish_jobs.iter().filter(|e| e.id == l.job_id)
                    .min_by_key(|e| (std::cmp::Reverse(e.lease_expires_at), e.state as u8)).unwrap();
                prop_assert_eq!(e.state, PublishState::Dispatched);
                prop_assert!(e.lease_expires_at.is_none_or(|t| t <= active.now));
            }
        }
    }

    #[test]
    fn a_lost_report_is_settled_only_by_a_clear_answer() {
        assert_eq!(settle_lost_report(Answer::Ok), LostSettle::Reported);
        assert_eq!(
            settle_lost_report(Answer::NotFound),
            LostSettle::NoLongerDriven
        );
        assert_eq!(
            settle_lost_report(Answer::Conflict),
            LostSettle::NoLongerDriven
        );
        // A refused service token says nothing about the job.
        assert_eq!(settle_lost_report(Answer::Refused), LostSettle::Retry);
        assert_eq!(settle_lost_report(Answer::Failed), LostSettle::Retry);
    }
}
