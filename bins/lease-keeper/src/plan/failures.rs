//! What to do about failing Jobs, from the cached Jobs and what the
//! lease-keeper remembers of each: pure.
//!
//! - **Capture at the first sign.** On Kubernetes 1.31+ a Job gets
//!   `FailureTarget` at once and `Failed` only after its pod has terminated,
//!   and an evicted, preempted or taint-deleted pod disappears soon after. So
//!   the pod (its `DisruptionTarget`, container states, reason) and its log
//!   tail are read as soon as the Job shows a sign (`FailureTarget`, a failed
//!   pod, a terminating pod), kept, and reported once the Job is `Failed`.
//! - **Report when settled.** A run Job is reported once it is `Failed` and
//!   none of its pods is still terminating (older clusters set `Failed`
//!   earlier), or once it is judged unable to finish failing.
//! - **Judge the stuck.** A Job that shows failure for longer than its
//!   pods' termination grace plus a margin (a lost node) is judged dead.
//! - **Check pods that never start.** A live Job whose pod is not ready,
//!   remembered for longer than the start grace (from the first tick its
//!   Job counts a pod), has its pod read (at most once per check interval);
//!   [`start_verdict`] decides from that pod. A Job that counts no pod at
//!   all is read for why by [`super::refusals`].
//! - **Publishers take the lost path**, as the spec has it: their deaths are
//!   read and judged here like a driver's, but reported lost (a publisher
//!   whose pod never starts, or that is judged dead, is deleted first, see
//!   the report loop).
//! - **Retry unreadable logs** a bounded number of times.

use crate::cause::{LogTail, StartFailure, StartFailureKind, start_failure};
use k8s_openapi::api::core::v1::Pod;
use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::failing::FailingSince;
use tcab_shared::job_cache::{JobPhase, JobSummary, summaries};
use tokio::time::Instant;

/// The knobs of these decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureSettings {
    /// A pod waiting on an image or a container config error this long never starts.
    pub start_grace: Duration,
    /// A pod unschedulable this long never starts.
    pub unschedulable_grace: Duration,
    /// How long past its termination grace a failing Job may stay unfinished.
    pub terminating_margin: Duration,
    /// How often a Job past the start grace has its pod read again.
    pub start_check_every: Duration,
    /// How many times a log that could not be read is tried in all.
    pub log_attempts: u32,
}

impl FailureSettings {
    /// The shorter of the two start graces: no Job is checked before it.
    pub fn first_start_check(&self) -> Duration {
        self.start_grace.min(self.unschedulable_grace)
    }
}

/// How far the evidence of one Job has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EvidenceState {
    /// Nothing read yet.
    Missing,
    /// The pod was read; its log could not be, and may be tried again
    /// (`attempts` made so far).
    LogPending {
        /// Log reads made so far.
        attempts: u32,
    },
    /// Everything that will ever be read has been.
    Complete,
}

/// What the lease-keeper remembers of each cached Job that needs it, by
/// name. A hash map, not a tree: the Jobs come in name order (a sorted
/// snapshot), and a B-tree filled in order keeps its nodes little over half
/// full, about 195 bytes an entry at 100,000 Jobs against about 140 here
/// (docs/performance.md); nothing reads the entries in order.
pub(crate) type Memories = HashMap<MemoryKey, JobMemory>;

/// The key of a [`JobMemory`]: the cached summary of its Job, shared with
/// the cache, hashed and compared by the Job's name alone. Eight bytes an
/// entry where a copy of the name took 64 (about 49 bytes an entry in all
/// against 105). Look an entry up by the name (`memory.get(name)`); the
/// summary behind a key may be older than the cache's, and only its name is
/// read.
#[derive(Debug, Clone)]
pub(crate) struct MemoryKey(pub Arc<JobSummary>);

impl MemoryKey {
    /// The Job's name.
    pub(crate) fn name(&self) -> &str {
        self.0.name()
    }
}

impl PartialEq for MemoryKey {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for MemoryKey {}

impl Hash for MemoryKey {
    // As `str` hashes, so a lookup by `&str` (through `Borrow`) finds it.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl Borrow<str> for MemoryKey {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// What the lease-keeper remembers of one cached Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobMemory {
    /// When this process first saw the Job.
    pub first_seen: Instant,
    /// Its evidence so far.
    pub evidence: EvidenceState,
    /// When its pod was last read to see whether it can start.
    pub last_start_check: Option<Instant>,
}

/// Brings the memories up to `jobs` (the cached Jobs and the vanished
/// ones, each with whether it needs a memory): one that needs a memory and
/// has none is remembered, first seen `now`; a memory whose key is an older
/// summary of its Job than the one given is keyed by the given one, needed
/// or not, so no key keeps alive a summary the cache dropped.
pub(crate) fn remember_jobs<'a>(
    memory: &mut Memories,
    jobs: impl IntoIterator<Item = (&'a Arc<JobSummary>, bool)>,
    now: Instant,
) {
    for (job, needs) in jobs {
        match memory.get_key_value(job.name()) {
            Some((key, _)) if Arc::ptr_eq(&key.0, job) => {}
            Some(_) => {
                if let Some(kept) = memory.remove(job.name()) {
                    memory.insert(MemoryKey(Arc::clone(job)), kept);
                }
            }
            None if needs => {
                memory.insert(
                    MemoryKey(Arc::clone(job)),
                    JobMemory {
                        first_seen: now,
                        evidence: EvidenceState::Missing,
                        last_start_check: None,
                    },
                );
            }
            None => {}
        }
    }
}

/// Why a run's death is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeathKind {
    /// Its Job is `Failed` and its pods have stopped.
    Failed,
    /// Its Job was deleted while live (not by the dispatcher) and no pod of
    /// it lives on: whether it died is read from its pod, if one is left.
    Deleted,
    /// It could not finish failing and was judged dead.
    Stuck,
    /// Its pod can never start (or the cluster refuses to create it); the
    /// Job is deleted once this is settled.
    NeverStarted,
}

/// What one report tick does about failing Jobs (Job names, sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FailurePlan {
    /// Read the pod and log tail of these now.
    pub capture: Vec<String>,
    /// Read the log tail of these again.
    pub retry_logs: Vec<String>,
    /// Read the pod of these to see whether it can ever start.
    pub check_start: Vec<String>,
    /// Judged dead now: they cannot finish failing.
    pub newly_stuck: Vec<String>,
    /// Run Jobs whose death is due, once their evidence is complete.
    pub deaths: Vec<(String, DeathKind)>,
    /// Failed Jobs whose report waits, and why (for the debug log).
    pub waiting: Vec<(String, &'static str)>,
}

/// Plans one report tick. `vanished` are the entries that left the view
/// while live (their Job deleted, and no pod of it left running).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_failures<J: Borrow<JobSummary>>(
    jobs: &[J],
    vanished: &[J],
    memory: &Memories,
    failing: &FailingSince,
    judged_dead: &BTreeSet<String>,
    never_started: &BTreeSet<String>,
    now: Instant,
    settings: &FailureSettings,
) -> FailurePlan {
    let mut plan = FailurePlan::default();
    for job in summaries(jobs) {
        if never_started.contains(job.name()) {
            if job.lane == Lane::Run {
                plan.deaths
                    .push((job.name().to_string(), DeathKind::NeverStarted));
            }
            continue;
        }
        let mem = memory.get(job.name());
        let evidence = mem.map_or(EvidenceState::Missing, |m| m.evidence);
        let stuck = judged_dead.contains(job.name())
            || failing.is_stuck(job, now, settings.terminating_margin);
        if stuck && !judged_dead.contains(job.name()) {
            plan.newly_stuck.push(job.name().to_string());
        }
        let failed = job.phase == JobPhase::Failed;
        // A Job deleted under its pod is evidence to read at once: the pod
        // may be gone within its grace.
        let shows = (job.is_live() && (job.shows_failure() || job.gone)) || failed;
        if shows {
            match evidence {
                EvidenceState::Missing => plan.capture.push(job.name().to_string()),
                EvidenceState::LogPending { attempts } if attempts < settings.log_attempts => {
                    plan.retry_logs.push(job.name().to_string())
                }
                _ => {}
            }
        }
        if job.lane == Lane::Run {
            if stuck {
                plan.deaths.push((job.name().to_string(), DeathKind::Stuck));
            } else if failed && job.terminating_pods > 0 {
                plan.waiting
                    .push((job.name().to_string(), "its pods are still terminating"));
            } else if failed {
                plan.deaths
                    .push((job.name().to_string(), DeathKind::Failed));
            }
        }
        let may_start_late = job.is_live()
            && !stuck
            && !job.deleting
            && !job.gone
            && !job.shows_failure()
            && job.ready_pods == 0;
        if may_start_late && let Some(mem) = mem {
            let seen_for = now.saturating_duration_since(mem.first_seen);
            let due = mem
                .last_start_check
                .is_none_or(|at| now.saturating_duration_since(at) >= settings.start_check_every);
            if seen_for > settings.first_start_check() && due {
                plan.check_start.push(job.name().to_string());
            }
        }
    }
    for job in summaries(vanished) {
        let evidence = memory
            .get(job.name())
            .map_or(EvidenceState::Missing, |m| m.evidence);
        if evidence == EvidenceState::Missing {
            plan.capture.push(job.name().to_string());
        }
        if job.lane == Lane::Run && !never_started.contains(job.name()) {
            plan.deaths
                .push((job.name().to_string(), DeathKind::Deleted));
        }
    }
    plan.capture.sort();
    plan
}

/// Whether a death due now can be reported: its evidence is complete, or
/// it has done all the reading it will (logs tried `log_attempts` times).
pub(crate) fn evidence_settled(evidence: EvidenceState, settings: &FailureSettings) -> bool {
    match evidence {
        EvidenceState::Missing => false,
        EvidenceState::LogPending { attempts } => attempts >= settings.log_attempts,
        EvidenceState::Complete => true,
    }
}

/// The evidence held after a log read (`attempts` made so far): complete
/// when the log was read, when there was no pod to read it from, or when the
/// pod (or its node) was gone, since no later read can do better; otherwise
/// the log may be tried again.
pub(crate) fn evidence_after_log(log: &LogTail, pod_read: bool, attempts: u32) -> EvidenceState {
    match log {
        LogTail::Unreadable(_) if pod_read => EvidenceState::LogPending { attempts },
        LogTail::Read(_) | LogTail::Unreadable(_) | LogTail::Gone(_) => EvidenceState::Complete,
    }
}

/// What a pod read says about a Job that has not become ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartVerdict {
    /// It is starting, running, or waiting for a reason that can resolve.
    Fine,
    /// It shows a reason it cannot start, but not for long enough yet.
    Waiting(StartFailure),
    /// It can never start: fail it fast.
    NeverStarts(StartFailure),
}

/// Decides from a Job's newest pod (if any) and how long the Job has been
/// without a ready pod. A Job with no pod at all is not judged here but by
/// the refusal check ([`super::refusals`]).
pub(crate) fn start_verdict(
    lane: Lane,
    pod: Option<&Pod>,
    not_ready_for: Duration,
    settings: &FailureSettings,
) -> StartVerdict {
    let Some(failure) = pod.and_then(|p| start_failure(lane, p)) else {
        return StartVerdict::Fine;
    };
    let grace = match failure.kind {
        StartFailureKind::Unschedulable => settings.unschedulable_grace,
        _ => settings.start_grace,
    };
    if not_ready_for > grace {
        StartVerdict::NeverStarts(failure)
    } else {
        StartVerdict::Waiting(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tcab_shared::job_cache::JobCondition;

    /// The plan with nothing judged dead or never started, on the test settings.
    fn plan_at(
        jobs: &[JobSummary],
        mem: &Memories,
        failing: &FailingSince,
        now: Instant,
    ) -> FailurePlan {
        plan_failures(
            jobs,
            &[],
            mem,
            failing,
            &BTreeSet::new(),
            &BTreeSet::new(),
            now,
            &SETTINGS,
        )
    }

    const SETTINGS: FailureSettings = FailureSettings {
        start_grace: Duration::from_secs(300),
        unschedulable_grace: Duration::from_secs(1800),
        terminating_margin: Duration::from_secs(60),
        start_check_every: Duration::from_secs(30),
        log_attempts: 3,
    };

    fn job(name: &str, lane: Lane) -> JobSummary {
        JobSummary {
            names: tcab_shared::job_cache::JobNames::new(name, Some(name), Some("c")),
            uid: format!("uid-{name}").into(),
            lane,
            active_pods: 1,
            ready_pods: 1,
            termination_grace_seconds: Some(120),
            ..JobSummary::default()
        }
    }

    fn failure_target(mut j: JobSummary) -> JobSummary {
        j.set_rare(|r| {
            r.failure_target = Some(JobCondition {
                reason: "BackoffLimitExceeded".into(),
                message: String::new(),
            });
        });
        j.failed_pods = 1;
        j.terminating_pods = 1;
        j.active_pods = 0;
        j.ready_pods = 0;
        j
    }

    fn failed(mut j: JobSummary) -> JobSummary {
        j = failure_target(j);
        j.terminating_pods = 0;
        j.phase = JobPhase::Failed;
        j
    }

    fn memory(entries: &[(&JobSummary, Instant, EvidenceState)]) -> Memories {
        entries
            .iter()
            .map(|(j, first_seen, evidence)| {
                (
                    MemoryKey(Arc::new((*j).clone())),
                    JobMemory {
                        first_seen: *first_seen,
                        evidence: *evidence,
                        last_start_check: None,
                    },
                )
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_sign_captures_and_failed_reports() {
        let t0 = Instant::now();
        let healthy = job("a", Lane::Run);
        let signalled = failure_target(job("b", Lane::Run));
        let dead = failed(job("c", Lane::Run));
        let publisher = failure_target(job("p", Lane::Publish));
        let jobs = vec![
            healthy.clone(),
            signalled.clone(),
            dead.clone(),
            publisher.clone(),
        ];
        let mut failing = FailingSince::new();
        failing.observe(&jobs, t0);
        let mem = memory(&[
            (&healthy, t0, EvidenceState::Missing),
            (&signalled, t0, EvidenceState::Missing),
            (&dead, t0, EvidenceState::Missing),
            (&publisher, t0, EvidenceState::Missing),
        ]);
        let plan = plan_at(&jobs, &mem, &failing, t0);
        assert_eq!(
            plan.capture,
            ["b", "c", "p"],
            "a sign, not only Failed, captures"
        );
        assert_eq!(
            plan.deaths,
            vec![("c".to_string(), DeathKind::Failed)],
            "only the Failed run Job is due; publishers take the lost path"
        );
        assert!(plan.newly_stuck.is_empty() && plan.check_start.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn failed_with_terminating_pods_waits_until_they_finish_or_it_is_stuck() {
        let t0 = Instant::now();
        let mut old_cluster = failed(job("d", Lane::Run));
        old_cluster.terminating_pods = 1; // a pre-1.31 cluster: Failed while terminating
        let jobs = vec![old_cluster.clone()];
        let mut failing = FailingSince::new();
        failing.observe(&jobs, t0);
        let mem = memory(&[(&old_cluster, t0, EvidenceState::Complete)]);
        let plan = plan_at(&jobs, &mem, &failing, t0);
        assert!(plan.deaths.is_empty());
        assert_eq!(
            plan.waiting,
            vec![("d".to_string(), "its pods are still terminating")]
        );
        // Its pods finish: reported as failed.
        let mut settled = old_cluster.clone();
        settled.terminating_pods = 0;
        let plan = plan_at(std::slice::from_ref(&settled), &mem, &failing, t0);
        assert_eq!(plan.deaths, vec![("d".to_string(), DeathKind::Failed)]);
        // Or they never do (a lost node): judged dead after grace and margin.
        let later = t0 + Duration::from_secs(181);
        let plan = plan_at(&jobs, &mem, &failing, later);
        assert_eq!(plan.newly_stuck, ["d"]);
        assert_eq!(plan.deaths, vec![("d".to_string(), DeathKind::Stuck)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_cannot_finish_failing_is_judged_dead_after_grace_and_margin() {
        let t0 = Instant::now();
        let lost = failure_target(job("n", Lane::Run));
        let jobs = vec![lost.clone()];
        let mut failing = FailingSince::new();
        failing.observe(&jobs, t0);
        let mem = memory(&[(&lost, t0, EvidenceState::Complete)]);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let plan = plan_at(&jobs, &mem, &failing, at(180));
        assert!(plan.newly_stuck.is_empty() && plan.deaths.is_empty());
        let plan = plan_at(&jobs, &mem, &failing, at(181));
        assert_eq!(plan.newly_stuck, ["n"]);
        assert_eq!(plan.deaths, vec![("n".to_string(), DeathKind::Stuck)]);
        let judged = BTreeSet::from(["n".to_owned()]);
        let plan = plan_failures(
            &jobs,
            &[],
            &mem,
            &failing,
            &judged,
            &BTreeSet::new(),
            at(200),
            &SETTINGS,
        );
        assert!(plan.newly_stuck.is_empty(), "judged once");
        assert_eq!(plan.deaths, vec![("n".to_string(), DeathKind::Stuck)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_never_started_run_is_due_and_nothing_else_is_planned_for_it() {
        let t0 = Instant::now();
        let mut waiting = job("w", Lane::Run);
        waiting.ready_pods = 0;
        let mut publisher = job("p", Lane::Publish);
        publisher.ready_pods = 0;
        let jobs = vec![waiting.clone(), publisher.clone()];
        let mem = memory(&[
            (&waiting, t0, EvidenceState::Complete),
            (&publisher, t0, EvidenceState::Complete),
        ]);
        let never = BTreeSet::from(["w".to_owned(), "p".to_owned()]);
        let later = t0 + Duration::from_secs(3600);
        let plan = plan_failures(
            &jobs,
            &[],
            &mem,
            &FailingSince::new(),
            &never,
            &never,
            later,
            &SETTINGS,
        );
        assert_eq!(
            plan.deaths,
            vec![("w".to_string(), DeathKind::NeverStarted)]
        );
        assert!(plan.check_start.is_empty() && plan.capture.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn unreadable_logs_are_retried_a_bounded_number_of_times() {
        let t0 = Instant::now();
        let dead = failed(job("c", Lane::Run));
        let jobs = vec![dead.clone()];
        let failing = FailingSince::new();
        for (attempts, retried) in [(1, true), (2, true), (3, false)] {
            let mem = memory(&[(&dead, t0, EvidenceState::LogPending { attempts })]);
            let plan = plan_at(&jobs, &mem, &failing, t0);
            assert_eq!(
                plan.retry_logs.len(),
                usize::from(retried),
                "after {attempts}"
            );
            assert_eq!(
                evidence_settled(EvidenceState::LogPending { attempts }, &SETTINGS),
                !retried
            );
        }
        assert!(!evidence_settled(EvidenceState::Missing, &SETTINGS));
        assert!(evidence_settled(EvidenceState::Complete, &SETTINGS));
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_without_a_ready_pod_are_checked_after_the_grace_and_then_every_interval() {
        let t0 = Instant::now();
        let mut pending = job("w", Lane::Run);
        pending.ready_pods = 0;
        let ready = job("r", Lane::Run);
        let jobs = vec![pending.clone(), ready.clone()];
        let failing = FailingSince::new();
        let mut mem = memory(&[
            (&pending, t0, EvidenceState::Missing),
            (&ready, t0, EvidenceState::Missing),
        ]);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let plan = plan_at(&jobs, &mem, &failing, at(300));
        assert!(plan.check_start.is_empty(), "not before the grace");
        let plan = plan_at(&jobs, &mem, &failing, at(301));
        assert_eq!(plan.check_start, ["w"]);
        mem.get_mut("w").unwrap().last_start_check = Some(at(301));
        let plan = plan_at(&jobs, &mem, &failing, at(330));
        assert!(plan.check_start.is_empty(), "checked 29 s ago");
        let plan = plan_at(&jobs, &mem, &failing, at(331));
        assert_eq!(plan.check_start, ["w"]);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "driver", "image": "registry/driver:tag"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn start_verdicts_follow_the_reason_and_its_grace() {
        let pulling = pod(json!({"phase": "Pending", "containerStatuses": [{
            "name": "driver", "image": "registry/driver:tag", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry/driver:tag\""}}}]}));
        let unschedulable = pod(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/2 nodes are available: 2 Insufficient memory."}]}));
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [{
            "name": "driver", "image": "registry/driver:tag", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        let five_min = Duration::from_secs(301);
        match start_verdict(Lane::Run, Some(&pulling), five_min, &SETTINGS) {
            StartVerdict::NeverStarts(f) => {
                assert_eq!(f.kind, StartFailureKind::ImagePull);
                assert_eq!(f.image.as_deref(), Some("registry/driver:tag"));
                assert!(
                    f.summary()
                        .starts_with("image pull failed for registry/driver:tag: ImagePullBackOff")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            start_verdict(Lane::Run, Some(&unschedulable), five_min, &SETTINGS),
            StartVerdict::Waiting(f) if f.kind == StartFailureKind::Unschedulable
        ));
        assert!(matches!(
            start_verdict(
                Lane::Run,
                Some(&unschedulable),
                Duration::from_secs(1801),
                &SETTINGS
            ),
            StartVerdict::NeverStarts(_)
        ));
        assert_eq!(
            start_verdict(
                Lane::Run,
                Some(&creating),
                Duration::from_secs(9999),
                &SETTINGS
            ),
            StartVerdict::Fine,
            "a routine wait is left to the deadline"
        );
        assert_eq!(
            start_verdict(Lane::Run, None, Duration::from_secs(9999), &SETTINGS),
            StartVerdict::Fine
        );
    }

    #[test]
    fn a_log_is_tried_again_only_while_its_pod_may_still_give_it() {
        let read = LogTail::Read("last lines".into());
        let refused = LogTail::Unreadable("the API server answered 500".into());
        let gone = LogTail::Gone("pod p or its node was gone before its log could be read".into());
        assert_eq!(evidence_after_log(&read, true, 1), EvidenceState::Complete);
        assert_eq!(
            evidence_after_log(&refused, true, 2),
            EvidenceState::LogPending { attempts: 2 }
        );
        assert_eq!(evidence_after_log(&gone, true, 1), EvidenceState::Complete);
        assert_eq!(
            evidence_after_log(&refused, false, 1),
            EvidenceState::Complete
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_deleted_under_its_pod_is_read_at_once_and_judged_when_it_vanishes() {
        let t0 = Instant::now();
        // Deleted, its pod still running: it stands as a live entry.
        let mut gone = job("g", Lane::Run);
        gone.gone = true;
        let orphan_publisher = JobSummary {
            gone: true,
            ..job("p", Lane::Publish)
        };
        let jobs = vec![gone.clone(), orphan_publisher.clone()];
        let mut failing = FailingSince::new();
        failing.observe(&jobs, t0);
        let mem = memory(&[
            (&gone, t0, EvidenceState::Missing),
            (&orphan_publisher, t0, EvidenceState::Missing),
        ]);
        let plan = plan_at(&jobs, &mem, &failing, t0);
        assert_eq!(
            plan.capture,
            ["g", "p"],
            "read at once, while the pod is there"
        );
        assert!(plan.deaths.is_empty(), "a live pod is no death");
        let later = t0 + Duration::from_secs(3600);
        failing.observe(&jobs, later);
        assert!(
            plan_at(&jobs, &mem, &failing, later).newly_stuck.is_empty(),
            "a running orphan is never judged stuck"
        );
        assert!(
            plan_at(&jobs, &mem, &failing, later).check_start.is_empty(),
            "nor checked for a start"
        );

        // It left the view (its pod finished or is gone): a run's death is due.
        let vanished = vec![gone.clone(), orphan_publisher.clone()];
        let mem = memory(&[
            (&gone, t0, EvidenceState::Complete),
            (&orphan_publisher, t0, EvidenceState::Complete),
        ]);
        let plan = plan_failures(
            &[],
            &vanished,
            &mem,
            &failing,
            &BTreeSet::new(),
            &BTreeSet::new(),
            later,
            &SETTINGS,
        );
        assert_eq!(
            plan.deaths,
            [("g".to_owned(), DeathKind::Deleted)],
            "publishers take the lost path"
        );
        assert!(plan.capture.is_empty(), "read already");

        // One never read before is read now.
        let plan = plan_failures(
            &[],
            &vanished[..1],
            &Memories::new(),
            &failing,
            &BTreeSet::new(),
            &BTreeSet::new(),
            later,
            &SETTINGS,
        );
        assert_eq!(plan.capture, ["g"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_whose_own_deletion_began_shows_a_sign() {
        let t0 = Instant::now();
        let mut deleting = job("d", Lane::Run);
        deleting.deleting = true;
        let jobs = vec![deleting.clone()];
        let mut failing = FailingSince::new();
        failing.observe(&jobs, t0);
        let mem = memory(&[(&deleting, t0, EvidenceState::Missing)]);
        assert_eq!(plan_at(&jobs, &mem, &failing, t0).capture, ["d"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_memory_is_kept_across_new_summaries_and_holds_only_the_newest() {
        let t0 = Instant::now();
        let first = Arc::new(job("a", Lane::Run));
        let mut mem = Memories::new();
        remember_jobs(&mut mem, [(&first, true)], t0);
        mem.get_mut("a").expect("remembered").evidence = EvidenceState::Complete;
        assert_eq!(Arc::strong_count(&first), 2, "the key shares the summary");

        // The cache replaced the summary (the Job changed): same memory, new key.
        let later = t0 + Duration::from_secs(5);
        let changed = Arc::new(failure_target(job("a", Lane::Run)));
        remember_jobs(&mut mem, [(&changed, true)], later);
        assert_eq!(Arc::strong_count(&first), 1, "the old summary is let go");
        assert_eq!(Arc::strong_count(&changed), 2);
        let (key, kept) = mem.get_key_value("a").expect("still remembered");
        assert!(Arc::ptr_eq(&key.0, &changed));
        assert_eq!(kept.first_seen, t0, "first seen when first seen, not now");
        assert_eq!(kept.evidence, EvidenceState::Complete);
        assert_eq!(mem.len(), 1);

        // A new Job is remembered from now if it needs a memory; a name is
        // found by `&str`.
        let other = Arc::new(job("b", Lane::Publish));
        let calm = Arc::new(job("c", Lane::Run));
        remember_jobs(
            &mut mem,
            [(&changed, true), (&other, true), (&calm, false)],
            later,
        );
        assert_eq!(mem.get("b").map(|m| m.first_seen), Some(later));
        assert!(mem.contains_key("a") && !mem.contains_key("c"));

        // A memory kept for its evidence though its Job needs none now is
        // re-keyed all the same: no old summary stays pinned.
        let calm_again = Arc::new(job("a", Lane::Run));
        remember_jobs(&mut mem, [(&calm_again, false)], later);
        assert_eq!(Arc::strong_count(&changed), 1);
        assert!(Arc::ptr_eq(
            &mem.get_key_value("a").expect("kept").0.0,
            &calm_again
        ));
    }
}
