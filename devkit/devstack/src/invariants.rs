//! The chaos suite's invariants, checked from the cluster's and the
//! backend's own records, never from the dispatcher's logs.
//!
//! The records are kube-sim's audit timeline (`GET /admin/audit`: every
//! change to a Pod or a Job, in commit order, with its wall time and who
//! made it) and backend-sim's history (`GET /admin/history`: every state
//! change with its wall time, the call and caller that made it and the claim
//! tag of the token in effect, plus the per-job calls refused for their
//! token). From them this module derives, as plain data:
//!
//! - when each driver (or publisher) pod was running ([`pod_lives`]);
//! - when each owned Job was live, from its creation to its terminal
//!   condition or its removal ([`job_lives`]);
//! - the dispatcher's lost and death reports that changed a job
//!   ([`reports`]);
//!
//! and checks ([`check`]):
//!
//! 1. no job is reported lost or dead while one of its driver pods runs (by
//!    wall time, the two processes share the machine's clock);
//! 2. no sandbox of a job with a live Job is deleted by the dispatcher (by
//!    the order of the cluster's own timeline);
//! 3. at most one live Job per backend job, except in the documented
//!    in-flight claim race (docs/operations.md), which is accepted only
//!    when the record shows all of it: the older claim's job was requeued
//!    for a lapsed lease before the newer claim was dispatched, the older
//!    claim never had a report accepted, its Job ended, and if its driver
//!    ran, the backend refused that claim's token and the driver stopped;
//! 4. no lane above its cap (the caller reads kube-sim's counters).
//!
//! Every check is a pure function over the two records.

use jiff::Timestamp;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use tcab_kube_sim::audit::{Actor, AuditEntry};

/// How the dispatcher's binaries begin their `User-Agent` (each names
/// itself, followed by the version: `tcab-admitter/0.1.0`; a client built
/// outside a binary sends `tcab-dispatcher/<version>`).
pub const DISPATCHER_AGENTS: [&str; 4] = [
    "tcab-admitter/",
    "tcab-lease-keeper/",
    "tcab-reaper/",
    "tcab-dispatcher/",
];

/// Whether a `User-Agent` is one of the dispatcher's.
pub fn is_dispatcher_agent(agent: &str) -> bool {
    DISPATCHER_AGENTS.iter().any(|p| agent.starts_with(p))
}

/// The backend's own record (`GET /admin/history`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct BackendRecord {
    /// Every state change, oldest first.
    #[serde(default)]
    pub entries: Vec<HistoryEntry>,
    /// Per-job calls refused for their token.
    #[serde(default)]
    pub refused: Vec<Refusal>,
}

/// One state change of a job, as the backend recorded it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HistoryEntry {
    /// Position in the history.
    pub seq: i64,
    /// `run` or `publish`.
    pub lane: String,
    /// The job.
    pub job_id: String,
    /// The state entered.
    pub state: String,
    /// The backend's (test) clock.
    pub at: Timestamp,
    /// The wall clock.
    #[serde(default)]
    pub wall_at: Option<Timestamp>,
    /// The detail of the change.
    #[serde(default)]
    pub detail: Option<String>,
    /// `METHOD /path` of the call that made it.
    #[serde(default)]
    pub call: Option<String>,
    /// That call's `User-Agent`.
    #[serde(default)]
    pub caller: Option<String>,
    /// The claim tag of the job's token then.
    #[serde(default)]
    pub claim: Option<String>,
}

/// A per-job call the backend refused for its token (401).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Refusal {
    /// The wall clock.
    pub wall_at: Timestamp,
    /// `METHOD /path`.
    pub call: String,
    /// The job.
    pub job_id: String,
    /// The claim tag of the token presented.
    pub claim: String,
}

/// The labels that tell the dispatcher's Jobs from sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `app.kubernetes.io/managed-by` of the dispatcher's Jobs and their pods.
    pub managed_by: String,
    /// `app.kubernetes.io/managed-by` the drivers put on sandboxes.
    pub driver_managed_by: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            managed_by: "tcab-dispatcher".into(),
            driver_managed_by: "tcab-driver".into(),
        }
    }
}

const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const JOB_ID: &str = "tcab.dev/job-id";
const CLAIM: &str = "tcab.dev/claim";
const JOB_KIND: &str = "tcab.dev/job-kind";

fn label<'a>(e: &'a AuditEntry, key: &str) -> Option<&'a str> {
    e.labels.get(key).map(String::as_str)
}

/// `[from, to)`; `to` is `None` while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Start.
    pub from: Timestamp,
    /// End (exclusive), if it ended.
    pub to: Option<Timestamp>,
}

impl Interval {
    /// Whether `t` falls inside.
    pub fn contains(&self, t: Timestamp) -> bool {
        self.from <= t && self.to.is_none_or(|to| t < to)
    }
}

/// One driver or publisher pod and when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLife {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its `tcab.dev/job-id`.
    pub job_id: String,
    /// The Job that owns it.
    pub owner: Option<String>,
    /// When a container of it was running.
    pub running: Vec<Interval>,
}

/// The dispatcher's pods (not sandboxes) and when each ran.
pub fn pod_lives(cluster: &[AuditEntry], settings: &Settings) -> Vec<PodLife> {
    let mut lives: BTreeMap<String, (PodLife, Option<Timestamp>)> = BTreeMap::new();
    for e in cluster.iter().filter(|e| e.kind == "Pod") {
        if label(e, MANAGED_BY) != Some(settings.managed_by.as_str()) {
            continue;
        }
        let Some(job_id) = label(e, JOB_ID) else {
            continue;
        };
        let (life, open) = lives.entry(e.uid.clone()).or_insert_with(|| {
            (
                PodLife {
                    name: e.name.clone(),
                    uid: e.uid.clone(),
                    job_id: job_id.to_owned(),
                    owner: e.owner.clone(),
                    running: Vec::new(),
                },
                None,
            )
        });
        let running = e.running && e.event != "DELETED";
        match (running, *open) {
            (true, None) => *open = Some(e.at),
            (false, Some(from)) => {
                life.running.push(Interval {
                    from,
                    to: Some(e.at),
                });
                *open = None;
            }
            _ => {}
        }
    }
    lives
        .into_values()
        .map(|(mut life, open)| {
            if let Some(from) = open {
                life.running.push(Interval { from, to: None });
            }
            life
        })
        .collect()
}

/// One owned Job and when it was live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLife {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its `tcab.dev/job-id`.
    pub job_id: String,
    /// Its `tcab.dev/job-kind` (`run` or `publish`).
    pub lane: String,
    /// Its `tcab.dev/claim`.
    pub claim: String,
    /// Timeline position of its creation (or first sight).
    pub from_seq: u64,
    /// Timeline position where it stopped being live: its terminal
    /// condition or its removal.
    pub to_seq: Option<u64>,
    /// How it ended: `Complete`, `Failed` or `deleted`.
    pub ended: Option<String>,
}

impl JobLife {
    /// Whether it was live at timeline position `seq`.
    pub fn live_at(&self, seq: u64) -> bool {
        self.from_seq <= seq && self.to_seq.is_none_or(|to| seq < to)
    }

    /// Whether its life overlaps another's.
    pub fn overlaps(&self, other: &JobLife) -> bool {
        self.from_seq < other.to_seq.unwrap_or(u64::MAX)
            && other.from_seq < self.to_seq.unwrap_or(u64::MAX)
    }
}

/// The dispatcher's Jobs and when each was live.
pub fn job_lives(cluster: &[AuditEntry], settings: &Settings) -> Vec<JobLife> {
    let mut lives: BTreeMap<String, JobLife> = BTreeMap::new();
    for e in cluster.iter().filter(|e| e.kind == "Job") {
        if label(e, MANAGED_BY) != Some(settings.managed_by.as_str()) {
            continue;
        }
        let life = lives.entry(e.uid.clone()).or_insert_with(|| JobLife {
            name: e.name.clone(),
            uid: e.uid.clone(),
            job_id: label(e, JOB_ID).unwrap_or_default().to_owned(),
            lane: label(e, JOB_KIND).unwrap_or_default().to_owned(),
            claim: label(e, CLAIM).unwrap_or_default().to_owned(),
            from_seq: e.seq,
            to_seq: None,
            ended: None,
        });
        if life.to_seq.is_some() {
            continue;
        }
        if let Some(how) = &e.finished {
            life.to_seq = Some(e.seq);
            life.ended = Some(how.clone());
        } else if e.event == "DELETED" {
            life.to_seq = Some(e.seq);
            life.ended = Some("deleted".into());
        }
    }
    let mut lives: Vec<JobLife> = lives.into_values().collect();
    lives.sort_by_key(|l| l.from_seq);
    lives
}

/// Lost or dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// `POST /jobs/{id}/lost` or `POST /publish-jobs/{id}/lost`.
    Lost,
    /// A `failed` status report sent by the dispatcher (the lease-keeper's
    /// death report).
    Dead,
}

/// A lost or death report that changed a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The job.
    pub job_id: String,
    /// Lost or dead.
    pub kind: ReportKind,
    /// When it took effect (wall clock).
    pub wall_at: Timestamp,
    /// The first line of its detail.
    pub detail: String,
}

/// The dispatcher's lost and death reports that changed a job (an ignored
/// or refused report changes nothing and leaves no history entry).
pub fn reports(backend: &BackendRecord) -> Vec<Report> {
    let mut out = Vec::new();
    for e in &backend.entries {
        let (Some(call), Some(wall_at)) = (&e.call, e.wall_at) else {
            continue;
        };
        let lost = *call == format!("POST /jobs/{}/lost", e.job_id)
            || *call == format!("POST /publish-jobs/{}/lost", e.job_id);
        let dead = *call == format!("POST /jobs/{}/status", e.job_id)
            && e.state == "failed"
            && e.caller.as_deref().is_some_and(is_dispatcher_agent);
        let kind = match (lost, dead) {
            (true, _) => ReportKind::Lost,
            (_, true) => ReportKind::Dead,
            _ => continue,
        };
        out.push(Report {
            job_id: e.job_id.clone(),
            kind,
            wall_at,
            detail: e
                .detail
                .as_deref()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        });
    }
    out
}

/// A pair of live Jobs of one run that the record shows to be the
/// documented in-flight claim race, with its stale driver stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Race {
    /// The backend job.
    pub job_id: String,
    /// The stale claim's Job.
    pub stale_job: String,
    /// The stale claim tag.
    pub stale_claim: String,
    /// The newer claim's Job.
    pub new_job: String,
    /// Whether the stale driver ran (and was refused).
    pub stale_driver_ran: bool,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Every invariant broken, one line each.
    pub violations: Vec<String>,
    /// The in-flight races the record shows, each with its stale driver
    /// stopped.
    pub races: Vec<Race>,
    /// Second Jobs of a job made after the first had ended and the backend
    /// requeued the job for a lapsed lease (its first driver never had a
    /// report accepted: nothing ran).
    pub requeues: Vec<Race>,
    /// The dispatcher's lost and death reports.
    pub reports: Vec<Report>,
    /// Owned Jobs seen.
    pub jobs: usize,
    /// Sandbox deletes by the dispatcher.
    pub sandbox_deletes: usize,
}

/// Checks invariants 1 to 3 (see the module docs) over the two records.
pub fn check(cluster: &[AuditEntry], backend: &BackendRecord, settings: &Settings) -> Verdict {
    let pods = pod_lives(cluster, settings);
    let lives = job_lives(cluster, settings);
    let reports = reports(backend);
    let mut verdict = Verdict {
        jobs: lives.len(),
        ..Verdict::default()
    };
    no_report_while_running(&reports, &pods, &mut verdict);
    verdict.sandbox_deletes = no_live_sandbox_deleted(cluster, settings, &mut verdict);
    one_live_job_per_job(&lives, &pods, backend, &mut verdict);
    verdict.reports = reports;
    verdict
}

fn no_report_while_running(reports: &[Report], pods: &[PodLife], verdict: &mut Verdict) {
    for r in reports {
        for pod in pods.iter().filter(|p| p.job_id == r.job_id) {
            if let Some(i) = pod.running.iter().find(|i| i.contains(r.wall_at)) {
                verdict.violations.push(format!(
                    "job {} was reported {:?} at {} while its pod {} was running (since {}, until {:?}): {}",
                    r.job_id, r.kind, r.wall_at, pod.name, i.from, i.to, r.detail
                ));
            }
        }
    }
}

/// Returns how many sandbox deletes by the dispatcher the timeline shows.
fn no_live_sandbox_deleted(
    cluster: &[AuditEntry],
    settings: &Settings,
    verdict: &mut Verdict,
) -> usize {
    // Per job id, what keeps its run live: its live Jobs and its running
    // driver pods (a pod whose Job was deleted with --cascade=orphan runs on).
    let mut live: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    for e in cluster {
        let managed = label(e, MANAGED_BY);
        let job_id = label(e, JOB_ID).unwrap_or_default().to_owned();
        if e.kind == "Job" && managed == Some(settings.managed_by.as_str()) {
            let is_live = e.finished.is_none() && e.event != "DELETED";
            let set = live.entry(job_id).or_default();
            if is_live && !ended.contains(&e.uid) {
                set.insert(e.name.clone());
            } else {
                set.remove(&e.name);
                ended.insert(e.uid.clone());
            }
        } else if e.kind == "Pod" && managed == Some(settings.managed_by.as_str()) {
            let set = live.entry(job_id).or_default();
            let key = format!("pod {}", e.name);
            if e.running && e.event != "DELETED" {
                set.insert(key);
            } else {
                set.remove(&key);
            }
        } else if e.kind == "Pod"
            && managed == Some(settings.driver_managed_by.as_str())
            && e.actor == Actor::Rbac
            && (e.deleting || e.event == "DELETED")
            && deleted.insert(e.uid.clone())
            && let Some(jobs) = live.get(&job_id).filter(|s| !s.is_empty())
        {
            verdict.violations.push(format!(
                "sandbox {} of job {job_id} was deleted by the dispatcher at {} (timeline #{}) while its run was live: {jobs:?}",
                e.name, e.at, e.seq
            ));
        }
    }
    deleted.len()
}

fn one_live_job_per_job(
    lives: &[JobLife],
    pods: &[PodLife],
    backend: &BackendRecord,
    verdict: &mut Verdict,
) {
    let mut by_id: BTreeMap<&str, Vec<&JobLife>> = BTreeMap::new();
    for l in lives {
        by_id.entry(l.job_id.as_str()).or_default().push(l);
    }
    for (job_id, jobs) in by_id {
        for (i, a) in jobs.iter().enumerate() {
            for b in &jobs[i + 1..] {
                let overlapped = a.overlaps(b);
                match judge_second_job(job_id, a, b, pods, backend, overlapped) {
                    Ok(race) if overlapped => verdict.races.push(race),
                    Ok(requeue) => verdict.requeues.push(requeue),
                    Err(why) if overlapped => verdict.violations.push(format!(
                        "job {job_id} had two live Jobs, {} (claim {}) and {} (claim {}), and it is not the in-flight claim race: {why}",
                        a.name, a.claim, b.name, b.claim
                    )),
                    Err(why) => verdict.violations.push(format!(
                        "job {job_id} got a second Job, {} (claim {}) after {} (claim {}), without a requeue that explains it: {why}",
                        b.name, b.claim, a.name, a.claim
                    )),
                }
            }
        }
    }
}

/// Whether a second Job of one job is explained: the backend requeued the
/// older claim for a lapsed lease before it dispatched the newer one, and
/// never accepted a report of the older claim (so nothing ran under it).
/// When the two were live at once (the in-flight race), the older Job must
/// also have ended and, if its driver ran, have been refused. If not
/// explained, why not.
fn judge_second_job(
    job_id: &str,
    a: &JobLife,
    b: &JobLife,
    pods: &[PodLife],
    backend: &BackendRecord,
    overlapped: bool,
) -> Result<Race, String> {
    if a.lane != "run" || b.lane != "run" {
        return Err("only runs are requeued by a claim".into());
    }
    let history: Vec<&HistoryEntry> = backend
        .entries
        .iter()
        .filter(|e| e.job_id == job_id)
        .collect();
    let dispatched = |claim: &str| {
        history
            .iter()
            .find(|e| e.state == "dispatched" && e.claim.as_deref() == Some(claim))
            .map(|e| e.seq)
    };
    let (Some(da), Some(db)) = (dispatched(&a.claim), dispatched(&b.claim)) else {
        return Err("the backend never dispatched one of the two claims".into());
    };
    let (stale, new, from, to) = if da < db {
        (a, b, da, db)
    } else {
        (b, a, db, da)
    };
    if !history.iter().any(|e| {
        e.seq > from
            && e.seq < to
            && e.state == "queued"
            && e.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("lease lapsed"))
    }) {
        return Err(format!(
            "the backend did not requeue claim {} for a lapsed lease before dispatching claim {}",
            stale.claim, new.claim
        ));
    }
    if let Some(e) = history
        .iter()
        .find(|e| e.claim.as_deref() == Some(&stale.claim) && e.state != "dispatched")
    {
        return Err(format!(
            "the stale claim {} had a report accepted: {} at {} ({:?})",
            stale.claim, e.state, e.at, e.call
        ));
    }
    let stale_pods: Vec<&PodLife> = pods
        .iter()
        .filter(|p| p.owner.as_deref() == Some(stale.name.as_str()))
        .collect();
    let ran = stale_pods.iter().any(|p| !p.running.is_empty());
    let requeue = Race {
        job_id: job_id.to_owned(),
        stale_job: stale.name.clone(),
        stale_claim: stale.claim.clone(),
        new_job: new.name.clone(),
        stale_driver_ran: ran,
    };
    if !overlapped {
        return Ok(requeue);
    }
    if stale.to_seq.is_none() {
        return Err(format!("the stale Job {} never ended", stale.name));
    }
    if ran {
        if !backend
            .refused
            .iter()
            .any(|r| r.job_id == job_id && r.claim == stale.claim)
        {
            return Err(format!(
                "the stale driver of {} ran but the backend never refused its token",
                stale.name
            ));
        }
        if stale_pods
            .iter()
            .any(|p| p.running.iter().any(|i| i.to.is_none()))
        {
            return Err(format!("the stale driver of {} never stopped", stale.name));
        }
    }
    Ok(requeue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A little timeline builder: entries get consecutive positions.
    #[derive(Default)]
    struct Timeline(Vec<AuditEntry>);

    impl Timeline {
        fn push(
            &mut self,
            at: i64,
            event: &str,
            kind: &str,
            name: &str,
            f: impl FnOnce(&mut AuditEntry),
        ) {
            let mut e = AuditEntry {
                seq: self.0.len() as u64 + 1,
                at: t(at),
                rv: self.0.len() as u64 + 10,
                event: event.into(),
                kind: kind.into(),
                namespace: "tcab".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                actor: Actor::Cluster,
                labels: BTreeMap::new(),
                phase: None,
                running: false,
                deleting: false,
                finished: None,
                owner: None,
            };
            f(&mut e);
            self.0.push(e);
        }

        fn job(
            &mut self,
            at: i64,
            event: &str,
            name: &str,
            id: &str,
            claim: &str,
            finished: Option<&str>,
        ) {
            self.push(at, event, "Job", name, |e| {
                e.labels = BTreeMap::from([
                    (MANAGED_BY.into(), "tcab-dispatcher".into()),
                    (JOB_ID.into(), id.into()),
                    (JOB_KIND.into(), "run".into()),
                    (CLAIM.into(), claim.into()),
                ]);
                e.finished = finished.map(str::to_owned);
                if event == "ADDED" {
                    e.actor = Actor::Rbac;
                }
            });
        }

        fn driver(&mut self, at: i64, event: &str, name: &str, id: &str, job: &str, running: bool) {
            self.push(at, event, "Pod", name, |e| {
                e.labels = BTreeMap::from([
                    (MANAGED_BY.into(), "tcab-dispatcher".into()),
                    (JOB_ID.into(), id.into()),
                ]);
                e.owner = Some(job.into());
                e.running = running;
            });
        }

        fn sandbox(
            &mut self,
            at: i64,
            event: &str,
            name: &str,
            id: &str,
            actor: Actor,
            deleting: bool,
        ) {
            self.push(at, event, "Pod", name, |e| {
                e.labels = BTreeMap::from([
                    (MANAGED_BY.into(), "tcab-driver".into()),
                    (JOB_ID.into(), id.into()),
                ]);
                e.actor = actor;
                e.deleting = deleting;
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn entry(
        seq: i64,
        id: &str,
        state: &str,
        wall: i64,
        call: &str,
        caller: Option<&str>,
        claim: Option<&str>,
        detail: Option<&str>,
    ) -> HistoryEntry {
        HistoryEntry {
            seq,
            lane: "run".into(),
            job_id: id.into(),
            state: state.into(),
            at: t(wall + 1000),
            wall_at: Some(t(wall)),
            detail: detail.map(str::to_owned),
            call: Some(call.replace("{id}", id)),
            caller: caller.map(str::to_owned),
            claim: claim.map(str::to_owned),
        }
    }

    const LK: Option<&str> = Some("tcab-dispatcher/0.1.0");

    #[test]
    fn pods_run_between_their_running_and_their_stop_or_removal() {
        let mut tl = Timeline::default();
        tl.driver(1, "ADDED", "p1", "j", "job-a", false);
        tl.driver(2, "MODIFIED", "p1", "j", "job-a", true);
        tl.driver(3, "MODIFIED", "p1", "j", "job-a", true);
        tl.driver(5, "MODIFIED", "p1", "j", "job-a", false);
        tl.driver(6, "ADDED", "p2", "j", "job-b", true);
        tl.driver(8, "DELETED", "p2", "j", "job-b", true);
        tl.driver(9, "ADDED", "p3", "k", "job-c", true);
        tl.sandbox(9, "ADDED", "s1", "j", Actor::Cluster, false);
        let lives = pod_lives(&tl.0, &Settings::default());
        assert_eq!(lives.len(), 3, "sandboxes are not drivers");
        let p1 = &lives.iter().find(|l| l.name == "p1").unwrap().running;
        assert_eq!(
            p1,
            &[Interval {
                from: t(2),
                to: Some(t(5))
            }]
        );
        assert!(p1[0].contains(t(2)) && p1[0].contains(t(4)) && !p1[0].contains(t(5)));
        let p2 = &lives.iter().find(|l| l.name == "p2").unwrap().running;
        assert_eq!(
            p2,
            &[Interval {
                from: t(6),
                to: Some(t(8))
            }]
        );
        let p3 = &lives.iter().find(|l| l.name == "p3").unwrap();
        assert_eq!(
            p3.running,
            [Interval {
                from: t(9),
                to: None
            }]
        );
        assert_eq!(p3.owner.as_deref(), Some("job-c"));
    }

    #[test]
    fn a_job_lives_until_its_terminal_condition_or_removal() {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.job(2, "MODIFIED", "a", "j", "c1", None);
        tl.job(3, "MODIFIED", "a", "j", "c1", Some("Complete"));
        tl.job(4, "DELETED", "a", "j", "c1", Some("Complete"));
        tl.job(5, "ADDED", "b", "k", "c2", None);
        tl.job(6, "DELETED", "b", "k", "c2", None);
        tl.job(7, "ADDED", "c", "k", "c3", None);
        let lives = job_lives(&tl.0, &Settings::default());
        let ends: Vec<_> = lives
            .iter()
            .map(|l| (l.name.as_str(), l.from_seq, l.to_seq, l.ended.as_deref()))
            .collect();
        assert_eq!(
            ends,
            [
                ("a", 1, Some(3), Some("Complete")),
                ("b", 5, Some(6), Some("deleted")),
                ("c", 7, None, None)
            ]
        );
        assert!(lives[0].live_at(2) && !lives[0].live_at(3));
        assert!(!lives[1].overlaps(&lives[2]));
    }

    #[test]
    fn only_the_dispatchers_lost_and_death_reports_count() {
        let backend = BackendRecord {
            entries: vec![
                entry(
                    1,
                    "j",
                    "failed",
                    10,
                    "POST /jobs/{id}/lost",
                    LK,
                    Some("c1"),
                    Some("reported lost: Job gone\nmore"),
                ),
                entry(2, "r", "queued", 10, "POST /jobs/j/lost", LK, None, None),
                entry(
                    3,
                    "k",
                    "failed",
                    11,
                    "POST /jobs/{id}/status",
                    LK,
                    Some("c1"),
                    Some("OOMKilled"),
                ),
                entry(
                    4,
                    "m",
                    "failed",
                    12,
                    "POST /jobs/{id}/status",
                    None,
                    Some("c1"),
                    Some("driver terminated (SIGTERM)"),
                ),
                entry(
                    5,
                    "n",
                    "running",
                    12,
                    "POST /jobs/{id}/status",
                    LK,
                    Some("c1"),
                    None,
                ),
                entry(
                    6,
                    "p",
                    "failed",
                    13,
                    "POST /publish-jobs/{id}/lost",
                    LK,
                    Some("c1"),
                    None,
                ),
            ],
            refused: vec![],
        };
        let r = reports(&backend);
        let got: Vec<_> = r.iter().map(|r| (r.job_id.as_str(), r.kind)).collect();
        assert_eq!(
            got,
            [
                ("j", ReportKind::Lost),
                ("k", ReportKind::Dead),
                ("p", ReportKind::Lost)
            ],
            "the retry's entry, the driver's own failure and other states are not reports"
        );
        assert_eq!(r[0].detail, "reported lost: Job gone");
        assert_eq!(r[0].wall_at, t(10));
    }

    #[test]
    fn a_report_while_a_driver_pod_runs_is_a_violation_and_after_it_stopped_is_not() {
        let mut tl = Timeline::default();
        tl.driver(1, "ADDED", "p1", "j", "job-a", true);
        tl.driver(5, "MODIFIED", "p1", "j", "job-a", false);
        let early = BackendRecord {
            entries: vec![entry(
                1,
                "j",
                "failed",
                4,
                "POST /jobs/{id}/lost",
                LK,
                None,
                None,
            )],
            refused: vec![],
        };
        let v = check(&tl.0, &early, &Settings::default());
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(v.violations[0].contains("while its pod p1 was running"));
        let late = BackendRecord {
            entries: vec![entry(
                1,
                "j",
                "failed",
                5,
                "POST /jobs/{id}/status",
                LK,
                Some("c"),
                None,
            )],
            refused: vec![],
        };
        let v = check(&tl.0, &late, &Settings::default());
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.reports.len(), 1);
    }

    #[test]
    fn a_sandbox_deleted_by_the_dispatcher_while_its_job_lives_is_a_violation() {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.sandbox(2, "ADDED", "s1", "j", Actor::Cluster, false);
        tl.sandbox(3, "MODIFIED", "s1", "j", Actor::Rbac, true);
        tl.sandbox(4, "DELETED", "s1", "j", Actor::Cluster, true);
        // Deleted by its own driver (the cluster) while live: fine.
        tl.sandbox(5, "ADDED", "s2", "j", Actor::Cluster, false);
        tl.sandbox(6, "DELETED", "s2", "j", Actor::Cluster, true);
        tl.job(7, "MODIFIED", "a", "j", "c1", Some("Failed"));
        // Deleted by the dispatcher once no Job of the id lives: fine.
        tl.sandbox(8, "ADDED", "s3", "j", Actor::Cluster, false);
        tl.sandbox(9, "MODIFIED", "s3", "j", Actor::Rbac, true);
        tl.sandbox(10, "DELETED", "s3", "j", Actor::Rbac, true);
        let v = check(&tl.0, &BackendRecord::default(), &Settings::default());
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(v.violations[0].contains("sandbox s1 of job j"));
        assert_eq!(v.sandbox_deletes, 2);
    }

    #[test]
    fn a_sandbox_deleted_while_a_driver_pod_runs_without_its_job_is_a_violation() {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.driver(2, "MODIFIED", "pa", "j", "a", true);
        tl.sandbox(3, "ADDED", "s1", "j", Actor::Cluster, false);
        // The Job is deleted with --cascade=orphan: its driver runs on.
        tl.job(4, "DELETED", "a", "j", "c1", None);
        tl.sandbox(5, "MODIFIED", "s1", "j", Actor::Rbac, true);
        // Once the driver has stopped, a sweep may delete what is left.
        tl.driver(6, "MODIFIED", "pa", "j", "a", false);
        tl.sandbox(7, "ADDED", "s2", "j", Actor::Cluster, false);
        tl.sandbox(8, "MODIFIED", "s2", "j", Actor::Rbac, true);
        let v = check(&tl.0, &BackendRecord::default(), &Settings::default());
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(
            v.violations[0].contains("sandbox s1 of job j"),
            "{:?}",
            v.violations
        );
    }

    /// Job a (claim c1) lives; the backend requeued c1's lapsed lease and
    /// dispatched c2; Job b (claim c2) is created while a still lives.
    fn race(
        stale_ran: bool,
        refused: bool,
        stale_report_accepted: bool,
        requeued: bool,
    ) -> Verdict {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.driver(2, "ADDED", "pa", "j", "a", false);
        tl.job(3, "ADDED", "b", "j", "c2", None);
        tl.driver(4, "ADDED", "pb", "j", "b", true);
        if stale_ran {
            tl.driver(5, "MODIFIED", "pa", "j", "a", true);
            tl.driver(6, "MODIFIED", "pa", "j", "a", false);
        }
        tl.job(7, "MODIFIED", "a", "j", "c1", Some("Failed"));
        tl.driver(8, "MODIFIED", "pb", "j", "b", false);
        tl.job(9, "MODIFIED", "b", "j", "c2", Some("Complete"));
        let mut entries = vec![
            entry(1, "j", "queued", 0, "POST /jobs", None, None, None),
            entry(
                2,
                "j",
                "dispatched",
                1,
                "POST /jobs/next",
                LK,
                Some("c1"),
                None,
            ),
        ];
        if requeued {
            entries.push(entry(
                3,
                "j",
                "queued",
                2,
                "POST /jobs/next",
                LK,
                None,
                Some("lease lapsed at ..."),
            ));
        }
        entries.push(entry(
            4,
            "j",
            "dispatched",
            2,
            "POST /jobs/next",
            LK,
            Some("c2"),
            None,
        ));
        if stale_report_accepted {
            entries.push(entry(
                5,
                "j",
                "starting",
                5,
                "POST /jobs/{id}/status",
                None,
                Some("c1"),
                None,
            ));
        }
        entries.push(entry(
            6,
            "j",
            "succeeded",
            9,
            "POST /jobs/{id}/status",
            None,
            Some("c2"),
            None,
        ));
        let backend = BackendRecord {
            entries,
            refused: if refused {
                vec![Refusal {
                    wall_at: t(5),
                    call: "POST /jobs/j/status".into(),
                    job_id: "j".into(),
                    claim: "c1".into(),
                }]
            } else {
                vec![]
            },
        };
        check(&tl.0, &backend, &Settings::default())
    }

    #[test]
    fn two_live_jobs_pass_only_as_the_race_with_its_stale_driver_stopped() {
        let v = race(true, true, false, true);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(
            v.races,
            [Race {
                job_id: "j".into(),
                stale_job: "a".into(),
                stale_claim: "c1".into(),
                new_job: "b".into(),
                stale_driver_ran: true,
            }]
        );
        // A stale driver that never ran needs no refusal.
        let v = race(false, false, false, true);
        assert!(
            v.violations.is_empty() && v.races.len() == 1,
            "{:?}",
            v.violations
        );

        for (verdict, why) in [
            (race(true, false, false, true), "never refused its token"),
            (race(true, true, true, true), "had a report accepted"),
            (race(true, true, false, false), "did not requeue"),
        ] {
            assert!(verdict.races.is_empty());
            assert_eq!(verdict.violations.len(), 1, "{:?}", verdict.violations);
            assert!(
                verdict.violations[0].contains(why),
                "{why}: {:?}",
                verdict.violations
            );
        }
    }

    #[test]
    fn a_second_job_after_the_first_ended_needs_a_requeue_of_an_unreported_claim() {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.job(2, "MODIFIED", "a", "j", "c1", Some("Failed"));
        tl.job(3, "ADDED", "b", "j", "c2", None);
        tl.job(4, "MODIFIED", "b", "j", "c2", Some("Complete"));
        let record = |requeued: bool, stale_report: bool| {
            let mut entries = vec![entry(
                1,
                "j",
                "dispatched",
                1,
                "POST /jobs/next",
                LK,
                Some("c1"),
                None,
            )];
            if stale_report {
                entries.push(entry(
                    2,
                    "j",
                    "starting",
                    1,
                    "POST /jobs/{id}/status",
                    None,
                    Some("c1"),
                    None,
                ));
            }
            if requeued {
                entries.push(entry(
                    3,
                    "j",
                    "queued",
                    2,
                    "POST /jobs/next",
                    LK,
                    None,
                    Some("lease lapsed at x"),
                ));
            }
            entries.push(entry(
                4,
                "j",
                "dispatched",
                3,
                "POST /jobs/next",
                LK,
                Some("c2"),
                None,
            ));
            BackendRecord {
                entries,
                refused: vec![],
            }
        };
        let v = check(&tl.0, &record(true, false), &Settings::default());
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert!(v.races.is_empty());
        assert_eq!(v.requeues.len(), 1);
        assert_eq!(v.requeues[0].stale_claim, "c1");
        let v = check(&tl.0, &record(false, false), &Settings::default());
        assert!(
            v.violations[0].contains("got a second Job"),
            "{:?}",
            v.violations
        );
        let v = check(&tl.0, &record(true, true), &Settings::default());
        assert!(
            v.violations[0].contains("had a report accepted"),
            "{:?}",
            v.violations
        );
    }

    #[test]
    fn a_stale_job_that_never_ends_or_a_publish_overlap_is_a_violation() {
        let mut tl = Timeline::default();
        tl.job(1, "ADDED", "a", "j", "c1", None);
        tl.job(2, "ADDED", "b", "j", "c2", None);
        let backend = BackendRecord {
            entries: vec![
                entry(
                    1,
                    "j",
                    "dispatched",
                    1,
                    "POST /jobs/next",
                    LK,
                    Some("c1"),
                    None,
                ),
                entry(
                    2,
                    "j",
                    "queued",
                    2,
                    "POST /jobs/next",
                    LK,
                    None,
                    Some("lease lapsed at x"),
                ),
                entry(
                    3,
                    "j",
                    "dispatched",
                    2,
                    "POST /jobs/next",
                    LK,
                    Some("c2"),
                    None,
                ),
            ],
            refused: vec![],
        };
        let v = check(&tl.0, &backend, &Settings::default());
        assert!(
            v.violations[0].contains("never ended"),
            "{:?}",
            v.violations
        );
        let mut publishes = tl.0.clone();
        for e in &mut publishes {
            e.labels.insert(JOB_KIND.into(), "publish".into());
        }
        let v = check(&publishes, &backend, &Settings::default());
        assert!(v.violations[0].contains("only runs"), "{:?}", v.violations);
    }
}
