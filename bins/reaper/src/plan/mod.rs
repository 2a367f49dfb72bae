//! The reaper's decision: which sandbox pods to delete, and why each other
//! pod is kept.
//!
//! [`plan_with`] is a pure function over the verdicts of a current view's
//! job ids ([`tick_verdicts`]: from the owned Jobs and the Jobs judged dead
//! because they cannot finish failing) and one [`Snapshot`]: the pods one
//! LIST returned, `now`, and (on a sweep tick) the job ids the backend
//! still drives. It sorts what it is given, so the same
//! snapshot in any order gives the same plan. What the reaper remembers
//! between ticks (which reaps are complete, when the sweep last ran) lives
//! in [`crate::memory`]; it decides when to list, never what to delete.
//!
//! A sandbox is deleted for one of two reasons ([`ReapKind`]):
//! - **driver failed**: a driver Job with its job id failed terminally (or
//!   is judged dead, see [`tcab_shared::failing`]), its pods are not still
//!   terminating, and no Job with that id is live;
//! - **orphan**: the orphan sweep is on and due, no owned Job carries its
//!   job id, the backend does not list that job as driven, and the pod is
//!   older than the grace; or, by the same gates, the only Jobs with its job
//!   id are driver Jobs that succeeded (a **leftover**: the driver finished
//!   but its own cleanup did not land, say while the API server was down).
//!
//! This module holds the snapshot, the plan, [`plan_with`] and the decision
//! for one pod (`decide`). Beside it: `verdicts` judges a job id from its
//! Jobs (and `confirm`s the fresh read before the deletes), `listing` says
//! what a reap lists and what the LIST showed, `pods` reads a pod,
//! `reasons` says why a pod goes or stays, and `events` says which Event a
//! reap leaves.

pub(crate) mod events;
mod listing;
mod pods;
mod reasons;
mod verdicts;

pub(crate) use listing::{listed_all_of, mismatches, reap_selector};
pub(crate) use pods::PodSummary;
pub use reasons::{DeleteReason, KeepReason, ReapKind};
#[cfg(test)]
pub(crate) use verdicts::judge_ids;
pub(crate) use verdicts::{IdVerdict, confirm, tick_verdicts};

use jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tcab_shared::backend::client::is_job_id;

/// The reaper's settings, from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSettings {
    /// The managed-by value the driver puts on its sandbox pods
    /// (`TCAB_DRIVER_MANAGED_BY`). A pod without it is never deleted.
    pub driver_managed_by: String,
    /// The dispatcher's own managed-by value (on its Jobs and their pods).
    /// A pod carrying it is a driver's own pod and is never deleted.
    pub dispatcher_managed_by: String,
    /// Whether to sweep orphaned sandboxes.
    pub orphan_sweep: bool,
    /// How old an orphan must be before the sweep deletes it.
    pub orphan_grace: Duration,
    /// How often the orphan sweep lists the sandbox pods.
    pub orphan_sweep_interval: Duration,
    /// How long past its pods' termination grace a failing driver Job may
    /// stay unfinished before it is judged dead.
    pub terminating_margin: Duration,
}

/// What the backend said about the jobs it drives, for the orphan sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driven<'a> {
    /// The sweep is not due this tick: the backend was not asked, and no
    /// orphan is swept.
    NotAsked,
    /// The backend's active list could not be read: no orphan is swept.
    Unknown,
    /// The job ids the backend lists as driven (`GET /jobs/active`).
    Known(&'a BTreeSet<String>),
}

/// What the plan decides over, beside the verdicts of the owned Jobs'
/// job ids ([`tick_verdicts`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot<'a> {
    /// What the sandbox LIST returned (selected on the driver's managed-by
    /// value, but the plan checks every rule itself).
    pub pods: &'a [PodSummary],
    /// The time pod ages are measured against.
    pub now: Timestamp,
    /// What the backend drives (orphan sweep).
    pub driven: Driven<'a>,
}

/// One pod to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDelete {
    /// The pod.
    pub pod: PodSummary,
    /// Its job id.
    pub job_id: String,
    /// Why.
    pub reason: DeleteReason,
}

/// One pod kept, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodKept {
    /// The pod.
    pub pod: PodSummary,
    /// Why it stays.
    pub reason: KeepReason,
}

/// What one tick does: the pods to delete, and every other pod with its reason.
/// Both lists are sorted by namespace, then name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapPlan {
    /// Pods to delete.
    pub delete: Vec<PodDelete>,
    /// Pods kept.
    pub keep: Vec<PodKept>,
}

/// Decides which pods to delete, given the verdicts of the view's job ids
/// ([`tick_verdicts`], covering at least every listed pod's id), so a tick
/// judges its view once.
///
/// A pod is deleted only when it carries the driver's managed-by value, is
/// no Job's own pod, carries a valid job id, is not already terminating,
/// and either its id's verdict ([`judge_ids`](verdicts::judge_ids)) is to reap, or (orphan
/// sweep) no owned Job carries its id (or only succeeded driver Jobs do),
/// the backend's driven list was read and lacks it, and it is at least the
/// grace old.
pub(crate) fn plan_with(
    snapshot: &Snapshot<'_>,
    verdicts: &BTreeMap<String, IdVerdict>,
    settings: &SweepSettings,
) -> ReapPlan {
    let grace = SignedDuration::try_from(settings.orphan_grace).unwrap_or(SignedDuration::MAX);

    let mut pods: Vec<&PodSummary> = snapshot.pods.iter().collect();
    pods.sort();
    pods.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name);

    let mut out = ReapPlan::default();
    for pod in pods {
        match decide(pod, verdicts, snapshot, grace, settings) {
            Ok((job_id, reason)) => out.delete.push(PodDelete {
                pod: pod.clone(),
                job_id,
                reason,
            }),
            Err(reason) => out.keep.push(PodKept {
                pod: pod.clone(),
                reason,
            }),
        }
    }
    out
}

/// The decision for one pod: delete it (and why) or keep it (and why).
fn decide(
    pod: &PodSummary,
    verdicts: &BTreeMap<String, IdVerdict>,
    snapshot: &Snapshot<'_>,
    grace: SignedDuration,
    settings: &SweepSettings,
) -> Result<(String, DeleteReason), KeepReason> {
    if pod.managed_by.as_deref() != Some(settings.driver_managed_by.as_str()) {
        let dispatchers =
            pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str());
        let dead_drivers_id = pod
            .job_id
            .as_deref()
            .is_some_and(|id| matches!(verdicts.get(id), Some(IdVerdict::Reap { .. })));
        if dead_drivers_id && !pod.job_owned && !dispatchers {
            return Err(KeepReason::ManagedByMismatch {
                managed_by: pod.managed_by.clone(),
            });
        }
        return Err(KeepReason::NotDriverManaged);
    }
    if pod.job_owned || pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str()) {
        return Err(KeepReason::JobPod);
    }
    let Some(job_id) = pod.job_id.as_deref().filter(|id| is_job_id(id)) else {
        return Err(KeepReason::NoJobId);
    };
    if pod.terminating {
        return Err(KeepReason::Terminating);
    }
    let succeeded = match verdicts.get(job_id) {
        Some(IdVerdict::Reap { reason, .. }) => return Ok((job_id.to_owned(), reason.clone())),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { job })) => Some(job),
        Some(IdVerdict::Hold(reason)) => return Err(reason.clone()),
        None => None,
    };
    // The orphan sweep's gates, for an orphan and a leftover alike.
    let held = || match succeeded {
        Some(job) => KeepReason::DriverSucceeded { job: job.clone() },
        None => KeepReason::SweepDisabled,
    };
    if !settings.orphan_sweep {
        return Err(held());
    }
    match snapshot.driven {
        Driven::NotAsked if succeeded.is_some() => return Err(held()),
        Driven::NotAsked => return Err(KeepReason::SweepNotDue),
        Driven::Unknown => return Err(KeepReason::DrivenUnknown),
        Driven::Known(ids) if ids.contains(job_id) => {
            return Err(KeepReason::DrivenByBackend);
        }
        Driven::Known(_) => {}
    }
    let Some(created) = pod.created_at else {
        return Err(KeepReason::AgeUnknown);
    };
    let age = snapshot.now.duration_since(created);
    if age < grace {
        return Err(KeepReason::TooYoung { age });
    }
    let reason = match succeeded {
        Some(job) => DeleteReason::Leftover {
            job: job.clone(),
            age,
        },
        None => DeleteReason::Orphan { age },
    };
    Ok((job_id.to_owned(), reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use tcab_shared::Lane;
    use tcab_shared::job_cache::{JobCondition, JobPhase, JobSummary, Rare};

    pub(super) const DRIVER: &str = "tcab-driver";
    pub(super) const DISPATCHER: &str = "tcab-dispatcher";

    /// The plan of a tick that judges `jobs` (with `dead`) for the listed
    /// pods' ids only, as [`plan_with`] is given them.
    fn plan(
        jobs: &[JobSummary],
        dead: &BTreeSet<String>,
        snapshot: &Snapshot<'_>,
        settings: &SweepSettings,
    ) -> ReapPlan {
        let ids: BTreeSet<&str> = snapshot
            .pods
            .iter()
            .filter_map(|p| p.job_id.as_deref())
            .collect();
        super::plan_with(snapshot, &tick_verdicts(jobs, dead, &ids), settings)
    }

    fn settings() -> SweepSettings {
        SweepSettings {
            driver_managed_by: DRIVER.into(),
            dispatcher_managed_by: DISPATCHER.into(),
            orphan_sweep: true,
            orphan_grace: Duration::from_secs(600),
            orphan_sweep_interval: Duration::from_secs(300),
            terminating_margin: Duration::from_secs(60),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    fn condition(reason: &str) -> JobCondition {
        JobCondition {
            reason: reason.into(),
            message: String::new(),
        }
    }

    pub(super) fn job(name: &str, id: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        let failed = phase == JobPhase::Failed;
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(name, Some(id), Some("c")),
            uid: format!("uid-{name}").into(),
            lane,
            phase,
            failed_pods: u16::from(failed),
            active_pods: u16::from(phase == JobPhase::Live),
            ready_pods: 0,
            terminating_pods: 0,
            succeeded_pods: 0,
            rare: Rare {
                failure_target: failed.then(|| condition("PodFailurePolicy")),
                failed: failed.then(|| condition("PodFailurePolicy")),
                orphan_pod: None,
            }
            .boxed(),
            termination_grace_seconds: Some(120),
            created_at: Some(now() - SignedDuration::from_secs(3600)),
            deleting: false,
            gone: false,
        }
    }

    /// A live driver Job bound to fail whose pod cannot finish terminating.
    pub(super) fn failing(name: &str, id: &str) -> JobSummary {
        JobSummary {
            active_pods: 0,
            terminating_pods: 1,
            rare: Rare {
                failure_target: Some(condition("PodFailurePolicy")),
                ..Rare::default()
            }
            .boxed(),
            ..job(name, id, Lane::Run, JobPhase::Live)
        }
    }

    /// A driver Job marked Failed while its pod still terminates (before 1.31).
    pub(super) fn failed_terminating(name: &str, id: &str) -> JobSummary {
        JobSummary {
            terminating_pods: 1,
            ..job(name, id, Lane::Run, JobPhase::Failed)
        }
    }

    fn sandbox(name: &str, id: &str, age_secs: i64) -> PodSummary {
        PodSummary {
            namespace: "sandboxes".into(),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            managed_by: Some(DRIVER.into()),
            job_id: Some(id.into()),
            created_at: Some(now() - SignedDuration::from_secs(age_secs)),
            terminating: false,
            job_owned: false,
        }
    }

    fn driver_pod(name: &str, id: &str) -> PodSummary {
        PodSummary {
            managed_by: Some(DISPATCHER.into()),
            job_owned: true,
            ..sandbox(name, id, 3600)
        }
    }

    pub(super) fn no_dead() -> BTreeSet<String> {
        BTreeSet::new()
    }

    pub(super) fn dead_of(jobs: &[&JobSummary]) -> BTreeSet<String> {
        jobs.iter().map(|j| j.key().to_owned()).collect()
    }

    /// A plan with the backend's driven list read and `driven` in it.
    fn plan_with(
        jobs: &[JobSummary],
        pods: &[PodSummary],
        dead: &BTreeSet<String>,
        driven: &BTreeSet<String>,
        settings: &SweepSettings,
    ) -> ReapPlan {
        plan(
            jobs,
            dead,
            &Snapshot {
                pods,
                now: now(),
                driven: Driven::Known(driven),
            },
            settings,
        )
    }

    fn simple(jobs: &[JobSummary], pods: &[PodSummary]) -> ReapPlan {
        plan_with(jobs, pods, &no_dead(), &BTreeSet::new(), &settings())
    }

    fn deleted(plan: &ReapPlan) -> Vec<&str> {
        plan.delete.iter().map(|d| d.pod.name.as_str()).collect()
    }

    fn kept_reason<'a>(plan: &'a ReapPlan, name: &str) -> &'a KeepReason {
        &plan
            .keep
            .iter()
            .find(|k| k.pod.name == name)
            .expect("pod kept")
            .reason
    }

    #[test]
    fn failed_driver_job_reaps_its_sandboxes_only() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            job("tcab-driver-b-1", "b", Lane::Run, JobPhase::Live),
        ];
        let pods = [
            sandbox("sb-a", "a", 5),
            sandbox("sb-a-2", "a", 5),
            sandbox("sb-b", "b", 5000),
            driver_pod("tcab-driver-a-1-xyz", "a"),
        ];
        let p = simple(&jobs, &pods);
        assert_eq!(deleted(&p), ["sb-a", "sb-a-2"]);
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::DriverJobFailed {
                job: "tcab-driver-a-1".into()
            }
        );
        assert_eq!(p.delete[0].reason.kind().as_str(), "driver_failed");
        assert_eq!(p.delete[0].job_id, "a");
        assert_eq!(
            kept_reason(&p, "sb-b"),
            &KeepReason::LiveJob {
                job: "tcab-driver-b-1".into()
            }
        );
        assert_eq!(
            kept_reason(&p, "tcab-driver-a-1-xyz"),
            &KeepReason::NotDriverManaged
        );
    }

    #[test]
    fn a_live_newer_claim_holds_the_reap() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live),
        ];
        let p = simple(&jobs, &[sandbox("sb-a", "a", 5)]);
        assert!(p.delete.is_empty());
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            }
        );
    }

    #[test]
    fn a_failed_publisher_reaps_nothing_and_a_succeeded_driver_leaves_only_to_the_sweep() {
        let jobs = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Succeeded),
            job("tcab-publisher-p-1", "p", Lane::Publish, JobPhase::Failed),
            job("tcab-driver-m-1", "m", Lane::Run, JobPhase::Succeeded),
            job(
                "tcab-publisher-m-1",
                "m",
                Lane::Publish,
                JobPhase::Succeeded,
            ),
        ];
        let pods = [
            sandbox("sb-a", "a", 5000),
            sandbox("sb-a-young", "a", 5),
            sandbox("sb-p", "p", 5000),
            sandbox("sb-m", "m", 5000),
        ];
        // The sweep is due and the backend drives none of them: the old
        // sandbox a succeeded driver left is swept, the young one waits.
        let p = simple(&jobs, &pods);
        assert_eq!(deleted(&p), ["sb-a"]);
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::Leftover {
                job: "tcab-driver-a-1".into(),
                age: SignedDuration::from_secs(5000)
            }
        );
        assert_eq!(p.delete[0].reason.kind().as_str(), "orphan");
        assert!(matches!(
            kept_reason(&p, "sb-a-young"),
            KeepReason::TooYoung { .. }
        ));
        assert!(matches!(
            kept_reason(&p, "sb-p"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Failed,
                ..
            }
        ));
        // Not every Job of the id is a succeeded driver: kept.
        assert!(matches!(
            kept_reason(&p, "sb-m"),
            KeepReason::NoFailedDriverJob {
                phase: JobPhase::Succeeded,
                ..
            }
        ));

        let held = KeepReason::DriverSucceeded {
            job: "tcab-driver-a-1".into(),
        };
        // Outside a sweep, with the sweep off, or while the backend drives it: kept.
        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        let p = plan_with(&jobs, &pods, &no_dead(), &BTreeSet::new(), &off);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "sb-a"), &held);
        let not_due = plan(
            &jobs,
            &no_dead(),
            &Snapshot {
                pods: &pods,
                now: now(),
                driven: Driven::NotAsked,
            },
            &settings(),
        );
        assert!(not_due.delete.is_empty());
        assert_eq!(kept_reason(&not_due, "sb-a"), &held);
        let driven: BTreeSet<String> = ["a".to_owned()].into();
        let p = plan_with(&jobs, &pods, &no_dead(), &driven, &settings());
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "sb-a"), &KeepReason::DrivenByBackend);
    }

    #[test]
    fn a_leftover_is_confirmed_only_while_every_job_of_its_id_is_a_succeeded_driver() {
        let done = job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Succeeded);
        let leftover = DeleteReason::Leftover {
            job: done.name().to_string(),
            age: SignedDuration::from_secs(700),
        };
        let none = no_dead();
        assert_eq!(
            confirm("a", &leftover, std::slice::from_ref(&done), &none),
            Ok(())
        );
        assert_eq!(confirm("a", &leftover, &[] as &[JobSummary], &none), Ok(()));
        // A newer claim of the same job went live meanwhile.
        let newer = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live);
        assert_eq!(
            confirm("a", &leftover, &[done.clone(), newer], &none),
            Err(KeepReason::LiveJob {
                job: "tcab-driver-a-2".into()
            })
        );
        // A driver of the id failed meanwhile: its own reap comes next tick.
        let failed = job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Failed);
        assert_eq!(
            confirm("a", &leftover, &[done, failed], &none),
            Err(KeepReason::JobFound {
                job: "tcab-driver-a-1".into()
            })
        );
    }

    #[test]
    fn a_failed_driver_whose_pods_still_terminate_holds_until_they_finish_or_it_is_judged_dead() {
        let held = [failed_terminating("tcab-driver-a-1", "a")];
        let pods = [sandbox("sb-a", "a", 5000)];
        let p = simple(&held, &pods);
        assert!(p.delete.is_empty());
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::PodsTerminating {
                job: "tcab-driver-a-1".into(),
                terminating: 1
            }
        );
        // Its pods finished: an ordinary failed driver.
        let finished = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        assert_eq!(deleted(&simple(&finished, &pods)), ["sb-a"]);
        // Still terminating, but judged dead (a lost node): reaped as stuck.
        let dead = dead_of(&[&held[0]]);
        let p = plan_with(&held, &pods, &dead, &BTreeSet::new(), &settings());
        assert_eq!(
            p.delete[0].reason,
            DeleteReason::DriverJobStuck {
                job: "tcab-driver-a-1".into()
            }
        );
        // An older failed claim does not override a newer one still terminating.
        let both = [
            job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed),
            failed_terminating("tcab-driver-a-2", "a"),
        ];
        assert!(simple(&both, &pods).delete.is_empty());
    }

    #[test]
    fn a_driver_job_judged_stuck_failing_is_reaped_like_a_failed_one() {
        let stuck = failing("tcab-driver-a-1", "a");
        let jobs = [stuck.clone()];
        let pods = [sandbox("sb-a", "a", 5)];
        // Not judged yet: its own live Job holds the sandbox.
        let p = simple(&jobs, &pods);
        assert_eq!(
            kept_reason(&p, "sb-a"),
            &KeepReason::LiveJob {
                job: "tcab-driver-a-1".into()
            }
        );
        let dead = dead_of(&[&stuck]);
        let p = plan_with(&jobs, &pods, &dead, &BTreeSet::new(), &settings());
        assert_eq!(deleted(&p), ["sb-a"]);
        assert_eq!(p.delete[0].reason.kind(), ReapKind::DriverFailed);
        // Another live claim of the same id still holds it.
        let with_live = [
            stuck.clone(),
            job("tcab-driver-a-2", "a", Lane::Run, JobPhase::Live),
        ];
        let p = plan_with(&with_live, &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
        // A key in the dead set whose Job no longer shows failure is not dead.
        let healthy = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Live)];
        let p = plan_with(&healthy, &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
        // A publisher is never judged into a reap.
        let publisher = JobSummary {
            lane: Lane::Publish,
            ..failing("tcab-publisher-a-1", "a")
        };
        let dead = dead_of(&[&publisher]);
        let p = plan_with(&[publisher], &pods, &dead, &BTreeSet::new(), &settings());
        assert!(p.delete.is_empty());
    }

    #[test]
    fn orphans_need_no_job_no_backend_drive_and_the_grace() {
        let pods = [
            sandbox("old", "gone", 601),
            sandbox("edge", "gone", 600),
            sandbox("young", "gone", 599),
            sandbox("driven", "live-elsewhere", 5000),
            PodSummary {
                created_at: None,
                ..sandbox("ageless", "gone", 0)
            },
        ];
        let driven: BTreeSet<String> = ["live-elsewhere".to_owned()].into();
        let p = plan_with(&[], &pods, &no_dead(), &driven, &settings());
        assert_eq!(deleted(&p), ["edge", "old"]);
        assert_eq!(
            p.delete[1].reason,
            DeleteReason::Orphan {
                age: SignedDuration::from_secs(601)
            }
        );
        assert_eq!(p.delete[1].reason.kind().as_str(), "orphan");
        assert!(matches!(
            kept_reason(&p, "young"),
            KeepReason::TooYoung { .. }
        ));
        assert_eq!(kept_reason(&p, "ageless"), &KeepReason::AgeUnknown);
        assert_eq!(kept_reason(&p, "driven"), &KeepReason::DrivenByBackend);

        let off = SweepSettings {
            orphan_sweep: false,
            ..settings()
        };
        let p = plan_with(&[], &pods, &no_dead(), &driven, &off);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "old"), &KeepReason::SweepDisabled);

        for (driven, reason) in [
            (Driven::NotAsked, KeepReason::SweepNotDue),
            (Driven::Unknown, KeepReason::DrivenUnknown),
        ] {
            let p = plan(
                &[] as &[JobSummary],
                &no_dead(),
                &Snapshot {
                    pods: &pods,
                    now: now(),
                    driven,
                },
                &settings(),
            );
            assert!(p.delete.is_empty(), "{driven:?}");
            assert_eq!(kept_reason(&p, "old"), &reason);
        }
    }

    #[test]
    fn a_grace_of_zero_still_spares_what_the_backend_drives() {
        let zero = SweepSettings {
            orphan_grace: Duration::ZERO,
            ..settings()
        };
        let pods = [sandbox("new", "just-claimed", 0)];
        let driven: BTreeSet<String> = ["just-claimed".to_owned()].into();
        let p = plan_with(&[], &pods, &no_dead(), &driven, &zero);
        assert_eq!(kept_reason(&p, "new"), &KeepReason::DrivenByBackend);
        let p = plan_with(&[], &pods, &no_dead(), &BTreeSet::new(), &zero);
        assert_eq!(deleted(&p), ["new"]);
    }

    #[test]
    fn pods_that_are_not_sandboxes_are_never_touched() {
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pods = [
            PodSummary {
                managed_by: None,
                ..sandbox("unlabelled", "a", 5000)
            },
            PodSummary {
                managed_by: Some("someone-else".into()),
                ..sandbox("foreign", "a", 5000)
            },
            PodSummary {
                job_id: None,
                ..sandbox("no-id", "a", 5000)
            },
            sandbox("bad-id", "not a label value", 5000),
            sandbox("empty-id", "", 5000),
            PodSummary {
                job_owned: true,
                ..sandbox("job-owned", "a", 5000)
            },
            PodSummary {
                terminating: true,
                ..sandbox("terminating", "a", 5000)
            },
        ];
        let p = simple(&jobs, &pods);
        assert!(p.delete.is_empty(), "{p:?}");
        // A dead driver's job id on a pod of another (or no) managed-by value:
        // kept, and told apart so the reaper can warn about it.
        assert_eq!(
            kept_reason(&p, "unlabelled"),
            &KeepReason::ManagedByMismatch { managed_by: None }
        );
        assert_eq!(
            kept_reason(&p, "foreign"),
            &KeepReason::ManagedByMismatch {
                managed_by: Some("someone-else".into())
            }
        );
        assert_eq!(kept_reason(&p, "no-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "bad-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "empty-id"), &KeepReason::NoJobId);
        assert_eq!(kept_reason(&p, "job-owned"), &KeepReason::JobPod);
        assert_eq!(kept_reason(&p, "terminating"), &KeepReason::Terminating);
    }

    #[test]
    fn same_managed_by_for_driver_and_dispatcher_still_spares_the_driver_pod() {
        let same = SweepSettings {
            driver_managed_by: DISPATCHER.into(),
            ..settings()
        };
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pods = [PodSummary {
            job_owned: false,
            ..driver_pod("tcab-driver-a-1-xyz", "a")
        }];
        let p = plan_with(&jobs, &pods, &no_dead(), &BTreeSet::new(), &same);
        assert!(p.delete.is_empty());
        assert_eq!(kept_reason(&p, "tcab-driver-a-1-xyz"), &KeepReason::JobPod);
    }

    // ---- properties ----

    const IDS: [&str; 4] = ["a", "b", "c", "d"];

    /// A Job and whether it is in the dead set.
    fn arb_job() -> impl Strategy<Value = (JobSummary, bool)> {
        (
            0usize..IDS.len(),
            0u8..4,
            prop::sample::select(vec![JobPhase::Live, JobPhase::Succeeded, JobPhase::Failed]),
            any::<bool>(),
            0u16..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(id, claim, phase, publish, terminating, target, dead)| {
                let lane = if publish { Lane::Publish } else { Lane::Run };
                let name = format!("{}{}-{claim}", lane.name_prefix(), IDS[id]);
                let mut j = job(&name, IDS[id], lane, phase);
                j.terminating_pods = terminating;
                if phase == JobPhase::Live {
                    j.set_rare(|r| {
                        r.failure_target = target.then(|| condition("PodFailurePolicy"))
                    });
                }
                (j, dead)
            })
    }

    /// Jobs with distinct names, as a view holds them.
    fn arb_jobs() -> impl Strategy<Value = Vec<(JobSummary, bool)>> {
        prop::collection::vec(arb_job(), 0..8).prop_map(|jobs| {
            let mut names = BTreeSet::new();
            jobs.into_iter()
                .filter(|(j, _)| names.insert(j.name().to_owned()))
                .collect()
        })
    }

    fn arb_pod() -> impl Strategy<Value = PodSummary> {
        (
            0usize..8,
            prop::option::of(prop::sample::select(vec![DRIVER, DISPATCHER, "other"])),
            prop::option::of(prop::sample::select(vec!["a", "b", "c", "d", "e", "f", ""])),
            prop::option::of(0i64..1200),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(n, managed_by, id, age, terminating, job_owned)| PodSummary {
                    namespace: "sandboxes".into(),
                    name: format!("pod-{n}"),
                    uid: Some(format!("uid-{n}")),
                    managed_by: managed_by.map(String::from),
                    job_id: id.map(String::from),
                    created_at: age.map(|a| now() - SignedDuration::from_secs(a)),
                    terminating,
                    job_owned,
                },
            )
    }

    /// A driver's own pod, as the Job controller makes it: the dispatcher's
    /// managed-by value, the job id, a Job owner.
    fn arb_driver_pod() -> impl Strategy<Value = PodSummary> {
        (0usize..IDS.len(), any::<bool>()).prop_map(|(id, labelled_only)| PodSummary {
            namespace: "sandboxes".into(),
            name: format!("tcab-driver-{}-pod", IDS[id]),
            uid: None,
            managed_by: Some(DISPATCHER.into()),
            job_id: Some(IDS[id].into()),
            created_at: Some(now() - SignedDuration::from_secs(5000)),
            terminating: false,
            job_owned: !labelled_only,
        })
    }

    fn arb_settings() -> impl Strategy<Value = SweepSettings> {
        (any::<bool>(), 0u64..1200).prop_map(|(orphan_sweep, grace)| SweepSettings {
            orphan_sweep,
            orphan_grace: Duration::from_secs(grace),
            ..settings()
        })
    }

    /// None = not asked, Some(None) = unknown, Some(Some(ids)) = known.
    fn arb_driven() -> impl Strategy<Value = Option<Option<BTreeSet<String>>>> {
        prop::option::of(prop::option::of(prop::collection::btree_set(
            prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]).prop_map(String::from),
            0..4,
        )))
    }

    fn split(jobs: Vec<(JobSummary, bool)>) -> (Vec<JobSummary>, BTreeSet<String>) {
        let dead = jobs
            .iter()
            .filter(|(_, d)| *d)
            .map(|(j, _)| j.key().to_owned())
            .collect();
        (jobs.into_iter().map(|(j, _)| j).collect(), dead)
    }

    fn driven_of(d: &Option<Option<BTreeSet<String>>>) -> Driven<'_> {
        match d {
            None => Driven::NotAsked,
            Some(None) => Driven::Unknown,
            Some(Some(ids)) => Driven::Known(ids),
        }
    }

    /// Judged dead as the plan must read it: in the set, a driver, and
    /// still showing failure (or Failed).
    fn really_dead(j: &JobSummary, dead: &BTreeSet<String>) -> bool {
        j.lane == Lane::Run
            && dead.contains(j.key())
            && (j.phase == JobPhase::Failed || j.shows_failure())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x5eed_7ea9),
            ..ProptestConfig::default()
        })]

        #[test]
        fn never_deletes_what_it_must_not(
            jobs in arb_jobs(),
            mut pods in prop::collection::vec(arb_pod(), 0..10),
            driver_pods in prop::collection::vec(arb_driver_pod(), 0..3),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            pods.extend(driver_pods);
            let (jobs, dead) = split(jobs);
            let snapshot = Snapshot { pods: &pods, now: now(), driven: driven_of(&driven) };
            let p = plan(&jobs, &dead, &snapshot, &settings);
            for d in &p.delete {
                // Only pods carrying the driver's managed-by value.
                prop_assert_eq!(d.pod.managed_by.as_deref(), Some(DRIVER));
                // Never a Job's own pod, never the driver's own pod.
                prop_assert!(!d.pod.job_owned && !d.pod.terminating);
                prop_assert!(d.pod.managed_by.as_deref() != Some(DISPATCHER));
                let id = d.pod.job_id.as_deref();
                prop_assert_eq!(id, Some(d.job_id.as_str()));
                let same_id: Vec<&JobSummary> = jobs.iter().filter(|j| j.job_id() == id).collect();
                // Never a pod whose job id has a live Job not judged dead.
                prop_assert!(!same_id.iter().any(|j| j.is_live() && !really_dead(j, &dead)));
                // Never while a failed driver's pods still terminate, unless judged dead.
                prop_assert!(!same_id.iter().any(|j| j.lane == Lane::Run && j.phase == JobPhase::Failed
                    && j.terminating_pods > 0 && !really_dead(j, &dead)));
                match &d.reason {
                    DeleteReason::DriverJobFailed { job } => prop_assert!(same_id.iter().any(|j|
                        j.name() == job && j.phase == JobPhase::Failed && j.lane == Lane::Run
                        && j.terminating_pods == 0)),
                    DeleteReason::DriverJobStuck { job } => prop_assert!(same_id.iter().any(|j|
                        j.name() == job && really_dead(j, &dead))),
                    DeleteReason::Orphan { age } | DeleteReason::Leftover { age, .. } => {
                        prop_assert!(settings.orphan_sweep);
                        if let DeleteReason::Leftover { job, .. } = &d.reason {
                            // Every Job of the id is a driver that succeeded.
                            prop_assert!(same_id.iter().any(|j| j.name() == job));
                            prop_assert!(same_id.iter().all(|j| j.lane == Lane::Run
                                && j.phase == JobPhase::Succeeded));
                        } else {
                            prop_assert!(same_id.is_empty());
                        }
                        match snapshot.driven {
                            Driven::Known(ids) => prop_assert!(!ids.contains(&d.job_id)),
                            other => prop_assert!(false, "swept with {:?}", other),
                        }
                        prop_assert!(age.as_secs() >= settings.orphan_grace.as_secs() as i64);
                    }
                }
                // The confirming read of an unchanged cluster never stops a planned delete.
                prop_assert_eq!(confirm(&d.job_id, &d.reason, &jobs, &dead), Ok(()));
            }
            // Every distinct pod is accounted for exactly once.
            let mut keys: Vec<(String, String)> = pods.iter().map(|p| (p.namespace.clone(), p.name.clone())).collect();
            keys.sort();
            keys.dedup();
            prop_assert_eq!(p.delete.len() + p.keep.len(), keys.len());
        }

        #[test]
        fn deterministic_under_reordering(
            (jobs, pods, jobs2, pods2) in (
                arb_jobs(),
                prop::collection::vec(arb_pod(), 0..10),
            ).prop_flat_map(|(jobs, pods)| (
                Just(jobs.clone()),
                Just(pods.clone()),
                Just(jobs).prop_shuffle(),
                Just(pods).prop_shuffle(),
            )),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            let (jobs, dead) = split(jobs);
            let (jobs2, dead2) = split(jobs2);
            let snapshot = Snapshot { pods: &pods, now: now(), driven: driven_of(&driven) };
            let base = plan(&jobs, &dead, &snapshot, &settings);
            let snapshot = Snapshot { pods: &pods2, now: now(), driven: driven_of(&driven) };
            let shuffled = plan(&jobs2, &dead2, &snapshot, &settings);
            prop_assert_eq!(base, shuffled);
        }

        /// The verdicts a tick judges are `judge_ids`' own: every reap,
        /// and every id asked for that any Job carries; nothing else. A
        /// plan with them is the plan with every id judged.
        #[test]
        fn a_ticks_verdicts_are_judge_ids_own_for_the_ids_it_needs(
            jobs in arb_jobs(),
            pods in prop::collection::vec(arb_pod(), 0..10),
            settings in arb_settings(),
            driven in arb_driven(),
        ) {
            let (jobs, dead) = split(jobs);
            let all = judge_ids(&jobs, &dead);
            let asked: BTreeSet<&str> = pods.iter().filter_map(|p| p.job_id.as_deref()).collect();
            let some = tick_verdicts(&jobs, &dead, &asked);
            for (id, verdict) in &some {
                prop_assert_eq!(all.get(id), Some(verdict));
            }
            for (id, verdict) in &all {
                if matches!(verdict, IdVerdict::Reap { .. }) || asked.contains(id.as_str()) {
                    prop_assert_eq!(some.get(id), Some(verdict));
                }
            }
            let snapshot = Snapshot { pods: &pods, now: now(), driven: driven_of(&driven) };
            prop_assert_eq!(plan(&jobs, &dead, &snapshot, &settings), super::plan_with(&snapshot, &all, &settings));
        }
    }

    #[test]
    fn a_dead_drivers_pods_of_another_managed_by_are_kept_as_a_mismatch() {
        let jobs = [job("tcab-driver-a-1", "a", Lane::Run, JobPhase::Failed)];
        let pod = |name: &str, id: &str, managed_by: Option<&str>, job_owned: bool| PodSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: None,
            managed_by: managed_by.map(str::to_owned),
            job_id: Some(id.into()),
            created_at: Some(now()),
            terminating: false,
            job_owned,
        };
        let pods = [
            pod("ours", "a", Some(DRIVER), false),
            pod("fixed", "a", Some("some-driver"), false),
            pod("bare", "a", None, false),
            pod("driver-pod", "a", Some(DISPATCHER), true),
            pod("other-id", "b", Some("some-driver"), false),
        ];
        let dead = BTreeSet::new();
        let out = plan(
            &jobs,
            &dead,
            &Snapshot {
                pods: &pods,
                now: now(),
                driven: Driven::NotAsked,
            },
            &settings(),
        );
        assert_eq!(out.delete.len(), 1);
        assert_eq!(out.delete[0].pod.name, "ours");
        let reason = |name: &str| {
            out.keep
                .iter()
                .find(|k| k.pod.name == name)
                .map(|k| k.reason.clone())
                .unwrap()
        };
        assert_eq!(
            reason("fixed"),
            KeepReason::ManagedByMismatch {
                managed_by: Some("some-driver".into())
            }
        );
        assert_eq!(
            reason("bare"),
            KeepReason::ManagedByMismatch { managed_by: None }
        );
        assert_eq!(
            reason("driver-pod"),
            KeepReason::NotDriverManaged,
            "the driver's own pod"
        );
        assert_eq!(
            reason("other-id"),
            KeepReason::NotDriverManaged,
            "no dead driver of b"
        );
        assert_eq!(
            mismatches(&out),
            BTreeMap::from([(
                "a".to_owned(),
                vec!["ns/bare".to_owned(), "ns/fixed".to_owned()]
            )])
        );
    }
}
