//! What the owned Jobs say about the sandboxes of one job id: reap them
//! (a driver Job that failed or is judged dead) or hold them, and why; and
//! whether a fresh read of those Jobs, made just before the deletes, still
//! allows them ([`confirm`]).

use super::{DeleteReason, KeepReason};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use tcab_shared::Lane;
use tcab_shared::backend::client::is_job_id;
use tcab_shared::job_cache::{JobPhase, JobSummary, summaries};

/// What the owned Jobs say about the sandboxes of one job id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdVerdict {
    /// Reap them.
    Reap {
        /// Why (a driver Job that failed, or one judged dead).
        reason: DeleteReason,
        /// Keys of every dead driver Job with the id: the reap completes
        /// all of them at once, since sandboxes carry the job id, not the claim.
        jobs: BTreeSet<String>,
    },
    /// Keep them.
    Hold(KeepReason),
}

/// Where one owned Job stands, for the reap of its job id's sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Live (and not judged dead): holds the reap.
    Live,
    /// A failed driver Job whose pods are still terminating: holds the reap.
    Terminating(i32),
    /// A driver Job that failed with its pods finished.
    Failed,
    /// A driver Job judged dead without finishing.
    Stuck,
    /// A driver Job that succeeded: its sandboxes are leftovers, if any.
    Succeeded,
    /// Anything else (a succeeded or failed publisher): reaps nothing.
    Other(JobPhase),
}

fn standing(job: &JobSummary, dead: &BTreeSet<String>) -> Standing {
    let driver = job.lane == Lane::Run;
    // Judged dead only while it still shows what it was judged on.
    let judged_dead = driver
        && dead.contains(job.key())
        && (job.phase == JobPhase::Failed || job.shows_failure());
    match job.phase {
        JobPhase::Live if judged_dead => Standing::Stuck,
        JobPhase::Live => Standing::Live,
        JobPhase::Failed if driver => {
            if job.terminating_pods == 0 {
                Standing::Failed
            } else if judged_dead {
                Standing::Stuck
            } else {
                Standing::Terminating(job.terminating_pods.into())
            }
        }
        JobPhase::Succeeded if driver => Standing::Succeeded,
        phase => Standing::Other(phase),
    }
}

/// The first Job by name of each standing, for one job id.
#[derive(Debug, Default)]
struct JobsForId<'a> {
    live: Option<&'a JobSummary>,
    terminating: Option<(&'a JobSummary, i32)>,
    dead: Option<(&'a JobSummary, bool)>,
    dead_keys: BTreeSet<String>,
    succeeded: Option<(&'a JobSummary, ())>,
    other: Option<(&'a JobSummary, JobPhase)>,
}

fn first<'a, T>(slot: &mut Option<(&'a JobSummary, T)>, job: &'a JobSummary, extra: T) {
    if slot
        .as_ref()
        .is_none_or(|(current, _)| job.name() < current.name())
    {
        *slot = Some((job, extra));
    }
}

/// Judges every job id the owned Jobs carry. A live Job (not judged dead)
/// holds the id's sandboxes; then a failed driver Job whose pods still
/// terminate; then a dead driver Job reaps them; any other Job keeps them,
/// and when all of them are succeeded drivers the verdict says so (their
/// sandboxes are leftovers for the sweep).
/// Jobs whose job id is not a valid backend id are left out.
pub(crate) fn judge_ids(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
) -> BTreeMap<String, IdVerdict> {
    judge_ids_where(jobs, dead, |_| true)
}

/// The verdicts a tick needs, judged once from its view: those of every
/// job id with a driver Job that failed or was judged dead (the only ids a
/// verdict can reap), and of the ids `also` names (the listed sandboxes'
/// ids, the ids warned about). Each verdict is [`judge_ids`]'s; the other
/// ids, most of them at scale, are not judged at all.
pub(crate) fn tick_verdicts(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
    also: &BTreeSet<&str>,
) -> BTreeMap<String, IdVerdict> {
    let reapable: BTreeSet<&str> = summaries(jobs)
        .filter(|job| matches!(standing(job, dead), Standing::Failed | Standing::Stuck))
        .filter_map(|job| job.job_id())
        .collect();
    judge_ids_where(jobs, dead, |id| reapable.contains(id) || also.contains(id))
}

/// [`judge_ids`] for the ids `wanted` accepts only.
fn judge_ids_where(
    jobs: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
    wanted: impl Fn(&str) -> bool,
) -> BTreeMap<String, IdVerdict> {
    let mut index: BTreeMap<&str, JobsForId> = BTreeMap::new();
    for job in summaries(jobs) {
        let Some(id) = job.job_id().filter(|id| is_job_id(id) && wanted(id)) else {
            continue;
        };
        let entry = index.entry(id).or_default();
        match standing(job, dead) {
            Standing::Live => {
                if entry.live.is_none_or(|current| job.name() < current.name()) {
                    entry.live = Some(job);
                }
            }
            Standing::Terminating(n) => first(&mut entry.terminating, job, n),
            Standing::Failed => {
                entry.dead_keys.insert(job.key().to_owned());
                first(&mut entry.dead, job, false);
            }
            Standing::Stuck => {
                entry.dead_keys.insert(job.key().to_owned());
                first(&mut entry.dead, job, true);
            }
            Standing::Succeeded => first(&mut entry.succeeded, job, ()),
            Standing::Other(phase) => first(&mut entry.other, job, phase),
        }
    }
    index
        .into_iter()
        .map(|(id, e)| {
            let verdict = if let Some(job) = e.live {
                IdVerdict::Hold(KeepReason::LiveJob {
                    job: job.name().to_string(),
                })
            } else if let Some((job, terminating)) = e.terminating {
                IdVerdict::Hold(KeepReason::PodsTerminating {
                    job: job.name().to_string(),
                    terminating,
                })
            } else if let Some((job, stuck)) = e.dead {
                let job = job.name().to_string();
                IdVerdict::Reap {
                    reason: if stuck {
                        DeleteReason::DriverJobStuck { job }
                    } else {
                        DeleteReason::DriverJobFailed { job }
                    },
                    jobs: e.dead_keys,
                }
            } else {
                match (e.other, e.succeeded) {
                    (Some((job, phase)), _) => IdVerdict::Hold(KeepReason::NoFailedDriverJob {
                        job: job.name().to_string(),
                        phase,
                    }),
                    (None, Some((job, ()))) => IdVerdict::Hold(KeepReason::DriverSucceeded {
                        job: job.name().to_string(),
                    }),
                    // An entry always holds a Job; were it ever empty, keep.
                    (None, None) => IdVerdict::Hold(KeepReason::NoJobId),
                }
            };
            (id.to_owned(), verdict)
        })
        .collect()
}

/// Whether a fresh read of the owned Jobs carrying `job_id` (made after
/// the plan, just before the deletes) still allows deleting that id's
/// sandboxes for `reason`. An orphan needs no Job with the id at all; a
/// leftover needs every fresh Job with the id to be a succeeded driver (or
/// none left); a driver reap needs the fresh Jobs to judge the id a reap
/// too (or no Job with the id to be left). Anything else is a doubt: keep,
/// and let the next tick plan again.
pub(crate) fn confirm(
    job_id: &str,
    reason: &DeleteReason,
    fresh: &[impl Borrow<JobSummary>],
    dead: &BTreeSet<String>,
) -> Result<(), KeepReason> {
    let mut same_id: Vec<&JobSummary> = summaries(fresh)
        .filter(|j| j.job_id() == Some(job_id))
        .collect();
    same_id.sort_by(|a, b| a.name().cmp(b.name()));
    let Some(first_job) = same_id.first() else {
        return Ok(());
    };
    if matches!(reason, DeleteReason::Orphan { .. }) {
        return Err(KeepReason::JobFound {
            job: first_job.name().to_string(),
        });
    }
    let leftover = matches!(reason, DeleteReason::Leftover { .. });
    let first_name = first_job.name().to_string();
    match judge_ids(&same_id, dead).remove(job_id) {
        Some(IdVerdict::Reap { .. }) if !leftover => Ok(()),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { .. })) if leftover => Ok(()),
        Some(IdVerdict::Reap { .. }) => Err(KeepReason::JobFound { job: first_name }),
        Some(IdVerdict::Hold(keep)) => Err(keep),
        // Only a malformed id lands here; the plan never deletes for one.
        None => Err(KeepReason::NoJobId),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{dead_of, failed_terminating, failing, job, no_dead};
    use jiff::SignedDuration;

    #[test]
    fn verdicts_name_every_dead_driver_job_of_an_id() {
        let stuck = failing("tcab-driver-a-2", "a");
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            stuck.clone(),
            job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Succeeded),
            JobSummary {
                names: tcab_shared::job_cache::JobNames::new("", Some(""), None),
                ..job("tcab-driver-x-1", "x", Lane::Run, JobPhase::Failed)
            },
        ];
        let verdicts = judge_ids(&jobs, &dead_of(&[&stuck]));
        assert_eq!(
            verdicts.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "a malformed id is left out"
        );
        assert_eq!(
            verdicts["a"],
            IdVerdict::Reap {
                reason: DeleteReason::DriverJobFailed {
                    job: "tcab-driver-a-1".into()
                },
                jobs: [
                    "uid-tcab-driver-a-1".to_owned(),
                    "uid-tcab-driver-a-2".to_owned()
                ]
                .into(),
            }
        );
        assert_eq!(
            verdicts["b"],
            IdVerdict::Hold(KeepReason::DriverSucceeded {
                job: "tcab-driver-b-1".into()
            })
        );
    }

    #[test]
    fn a_fresh_read_confirms_or_stops_a_delete() {
        let failed = job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed);
        let driver_reason = DeleteReason::DriverJobFailed {
            job: failed.name().to_string(),
        };
        let orphan = DeleteReason::Orphan {
            age: SignedDuration::from_secs(700),
        };
        let none = no_dead();
        // The read agrees with the plan.
        assert_eq!(
            confirm("a", &driver_reason, std::slice::from_ref(&failed), &none),
            Ok(())
        );
        // The failed Job is gone meanwhile, and nothing else carries the id.
        assert_eq!(
            confirm("a", &driver_reason, &[] as &[JobSummary], &none),
            Ok(())
        );
        // A live Job of the same id the view had not shown yet.
        let live = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), live.clone()], &none),
            Err(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            })
        );
        // Its pods terminate again (a fresher status than the view's).
        let terminating = failed_terminating("tcab-driver-a-1", "a");
        assert!(matches!(
            confirm("a", &driver_reason, &[terminating], &none),
            Err(KeepReason::PodsTerminating { .. })
        ));
        // A stuck Job judged dead confirms while it still shows failure.
        let stuck = failing("tcab-driver-a-1", "a");
        let dead = dead_of(&[&stuck]);
        let stuck_reason = DeleteReason::DriverJobStuck {
            job: stuck.name().to_string(),
        };
        assert_eq!(
            confirm("a", &stuck_reason, std::slice::from_ref(&stuck), &dead),
            Ok(())
        );
        // Jobs of other ids in the answer are ignored.
        let other = job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &driver_reason, &[failed.clone(), other.clone()], &none),
            Ok(())
        );
        // An orphan needs no Job with its id at all.
        assert_eq!(confirm("gone", &orphan, &[other], &none), Ok(()));
        assert_eq!(
            confirm("a", &orphan, &[failed], &none),
            Err(KeepReason::JobFound {
                job: "tcab-driver-a-1".into()
            })
        );
    }
}
