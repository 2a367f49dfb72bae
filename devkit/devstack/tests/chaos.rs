//! Chaos: during a drain, containers are SIGKILLed at random and the
//! cluster and the backend fail around them: Job watch outages (500s on the
//! list and watch of Jobs) and silent watches, hung API calls (a Job create
//! whose answer never comes, pod lists and log reads), 429 storms, an
//! API-server restart that compacts the watch history, backend stalls and
//! 500s on claims, renewals, active lists and reports, one job's status
//! reports refused with 400 (while another job's death must still be
//! reported on time: one job never holds up the others), a backend clock
//! that steps past every lease, drivers OOM-killed mid-run, and driver Jobs
//! deleted by hand (with the usual propagation, and with
//! `--cascade=orphan`). The cluster-side faults are
//! scoped to the dispatcher's token, so the test's own reads stay clean.
//!
//! Nothing is lost: every job ends terminal, each run succeeded (or, if its
//! driver was OOM-killed, failed as infrastructure and its one retry
//! succeeded; if its Job was deleted by hand, its driver handed over and it
//! ended from its record, or its retry succeeded; a Job deleted with
//! `--cascade=orphan` changes nothing: its driver finishes the run), each
//! publish succeeded (or, if its claim was abandoned
//! before it had a Job, was reported lost and its one retry succeeded), no
//! lane exceeded its cap, no sandbox is left; and the invariants hold by the
//! cluster's and the backend's own records (see `tcab_devstack::invariants`):
//! no job reported lost or dead while its driver pod ran, no sandbox of a
//! live Job deleted, never two live Jobs for one job but in the documented
//! in-flight claim race with its stale driver stopped, and a second Job for
//! a job only after the backend requeued a claim under which nothing ran.
//!
//! The schedule is drawn from a seed (printed, with the schedule, on
//! failure); `TCAB_CHAOS_SEED=<n>` replays one. It runs on kube-sim
//! (`::sim`) and on the real control plane (`::real`: the API faults through
//! the fault proxy, the restart a real kube-apiserver restart, the OOM kills
//! the node agent's; half the runs and publishes, as it runs in real time),
//! the invariants checked on the API server's audit log there.

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, run, states, terminal};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;
use tcab_devstack::{Container, wait_for};
use tcab_kube_sim::{ApiFaultMode, FaultRule};

const RUNS: usize = 80;
const PUBLISHES: usize = 20;
/// The reduced scale on the real control plane (real time, one shared
/// control plane on 2 cores): the same schedule over half the drain.
const REAL_RUNS: usize = 40;
const REAL_PUBLISHES: usize = 10;
const RUN_CAP: u32 = 4;
const PUBLISH_CAP: u32 = 3;
/// Every Kubernetes call but the watch gives up after this.
const KUBE_TIMEOUT_S: u64 = 4;
/// The server ends every Job watch after this; a silenced watch is
/// reconnected within it.
const WATCH_TIMEOUT_S: u64 = 5;
const DEFAULT_SEED: u64 = 20261129;

/// Backend paths only the dispatcher calls: claims, renewals, active lists,
/// lost reports.
const DISPATCHER_PATHS: [&str; 8] = [
    "/jobs/next",
    "/publish-jobs/next",
    "/jobs/leases",
    "/publish-jobs/leases",
    "/jobs/active",
    "/publish-jobs/active",
    "/jobs/*/lost",
    "/publish-jobs/*/lost",
];
/// Status reports: the lease-keeper's death reports, and the drivers' own
/// (which retry their terminal report until their report deadline). A
/// publisher's result is never faulted: it gives up after a few tries, and
/// a publish whose result did not land is lost by design.
const REPORT_PATH: &str = "/jobs/*/status";
/// How long the long runs last (every eighth): long enough to be OOM-killed
/// mid-run.
const LONG_RUN_MS: u64 = 2500;

/// How long the backend refuses the one job's status reports: longer than
/// [`limit_of_other_report`] on either cluster, so a report loop that let
/// the refused job hold up the others could not pass.
const REFUSAL_S: std::ops::Range<f64> = 50.0..70.0;

/// How long the death report of another job may take while one job's
/// reports are refused: its driver OOM-killed, its Job failed, its evidence
/// read and the report landed, on a cluster busy with the rest of the chaos.
fn limit_of_other_report(kind: ClusterKind) -> Duration {
    common::pick(kind, Duration::from_secs(30), Duration::from_secs(40))
}

/// One thing the chaos does.
#[derive(Debug, Clone, PartialEq)]
enum Chaos {
    /// SIGKILL a container (it stays down until its `Start`).
    Kill(Container),
    /// Start a killed container again.
    Start(Container),
    /// 500s on every list and watch of Jobs by the dispatcher; open watches
    /// are ended so they meet it.
    JobOutage { secs: f64 },
    /// The dispatcher's Job watches go silent (until the watch timeout).
    SilentWatches { secs: f64 },
    /// The dispatcher's next Job create hangs (carried out first when
    /// `applied`: the Job exists, the answer never comes).
    HungCreate { applied: bool },
    /// The dispatcher's next pod lists and log reads hang.
    HungPodReads { count: u32 },
    /// 429 with `Retry-After: 1` on every dispatcher request.
    Throttle { secs: f64 },
    /// The API server restarts: connections cut, history compacted, the port
    /// closed for a while.
    ApiRestart { down_ms: u64 },
    /// The backend holds requests to these paths and applies them late.
    BackendStall { paths: Vec<&'static str>, secs: f64 },
    /// The backend answers 500 to these paths.
    BackendError { paths: Vec<&'static str>, secs: f64 },
    /// OOM-kill a running original driver (the `pick`-th, cyclically).
    OomKill { pick: usize },
    /// Delete the Job of a running original driver by hand (`kubectl delete
    /// job`, with `--cascade=orphan` when `orphan`).
    DeleteJob { pick: usize, orphan: bool },
    /// The backend answers 400 to the status reports of one job for `secs`
    /// (a report it keeps refusing): a running original driver is picked
    /// and OOM-killed, so the lease-keeper's death report of it is refused,
    /// then another driver (one sorted after it, as the report loop orders
    /// them) is OOM-killed, and its death must be reported within
    /// [`limit_of_other_report`], while the first job's reports are still
    /// refused. Carried out when every container runs (just after a start);
    /// the schedule's clock stops while it waits on the cluster.
    RefuseOneReport { secs: f64 },
    /// The backend's clock steps forward by this much (past every lease).
    ClockStep { secs: u64 },
}

impl fmt::Display for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Chaos::Kill(c) => write!(f, "SIGKILL {}", c.binary()),
            Chaos::Start(c) => write!(f, "start {}", c.binary()),
            Chaos::JobOutage { secs } => write!(f, "Job list+watch 500s for {secs:.1}s"),
            Chaos::SilentWatches { secs } => write!(f, "silent Job watches for {secs:.1}s"),
            Chaos::HungCreate { applied } => write!(f, "hung Job create (applied: {applied})"),
            Chaos::HungPodReads { count } => write!(f, "{count} hung pod list/log reads"),
            Chaos::Throttle { secs } => write!(f, "429 storm for {secs:.1}s"),
            Chaos::ApiRestart { down_ms } => write!(f, "API-server restart, down {down_ms} ms"),
            Chaos::BackendStall { paths, secs } => {
                write!(f, "backend stall {paths:?} for {secs:.1}s")
            }
            Chaos::BackendError { paths, secs } => {
                write!(f, "backend 500s {paths:?} for {secs:.1}s")
            }
            Chaos::OomKill { pick } => write!(f, "OOM-kill running driver #{pick}"),
            Chaos::DeleteJob { pick, orphan } => write!(
                f,
                "delete the Job of running driver #{pick}{}",
                if *orphan { " --cascade=orphan" } else { "" }
            ),
            Chaos::RefuseOneReport { secs } => write!(
                f,
                "backend 400s to one job's status reports for {secs:.1}s, another job's death reported meanwhile"
            ),
            Chaos::ClockStep { secs } => write!(f, "backend clock steps {secs}s ahead"),
        }
    }
}

/// One step of the schedule, `at_ms` after the drain starts.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    at_ms: u64,
    chaos: Chaos,
}

fn some_paths(rng: &mut StdRng) -> Vec<&'static str> {
    let mut pool: Vec<&'static str> = DISPATCHER_PATHS.to_vec();
    pool.push(REPORT_PATH);
    pool.shuffle(rng);
    let n = rng.random_range(2..=pool.len().min(5));
    let mut paths = pool[..n].to_vec();
    paths.sort();
    paths
}

/// The schedule a seed draws: 14 container kills one after another (as the
/// original chaos test), and every kind of fault at least once at random
/// times over the same span. Pure, so a seed always means one schedule.
fn schedule(seed: u64) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut t = 0;
    for _ in 0..14 {
        let victim = Container::ALL[rng.random_range(0..3)];
        t += rng.random_range(300..1200);
        steps.push(Step {
            at_ms: t,
            chaos: Chaos::Kill(victim),
        });
        t += rng.random_range(50..700);
        steps.push(Step {
            at_ms: t,
            chaos: Chaos::Start(victim),
        });
    }
    let span = t;
    let mut faults = vec![
        Chaos::JobOutage {
            secs: rng.random_range(1.5..5.0),
        },
        Chaos::SilentWatches {
            secs: rng.random_range(0.5..2.0),
        },
        Chaos::HungCreate {
            applied: rng.random_bool(0.5),
        },
        Chaos::HungPodReads {
            count: rng.random_range(1..5),
        },
        Chaos::Throttle {
            secs: rng.random_range(0.5..2.5),
        },
        Chaos::ApiRestart {
            down_ms: rng.random_range(200..1500),
        },
        Chaos::BackendStall {
            paths: some_paths(&mut rng),
            secs: rng.random_range(0.5..3.0),
        },
        Chaos::BackendError {
            paths: some_paths(&mut rng),
            secs: rng.random_range(0.5..3.0),
        },
    ];
    for _ in 0..4 {
        faults.push(Chaos::OomKill {
            pick: rng.random_range(0..100),
        });
    }
    for orphan in [false, true] {
        faults.push(Chaos::DeleteJob {
            pick: rng.random_range(0..100),
            orphan,
        });
    }
    faults.push(Chaos::ClockStep {
        secs: rng.random_range(125..200),
    });
    for _ in 0..3 {
        let extra = match rng.random_range(0..5) {
            0 => Chaos::JobOutage {
                secs: rng.random_range(1.0..3.0),
            },
            1 => Chaos::HungCreate {
                applied: rng.random_bool(0.5),
            },
            2 => Chaos::Throttle {
                secs: rng.random_range(0.5..2.0),
            },
            3 => Chaos::BackendStall {
                paths: some_paths(&mut rng),
                secs: rng.random_range(0.5..3.0),
            },
            _ => Chaos::BackendError {
                paths: some_paths(&mut rng),
                secs: rng.random_range(0.5..3.0),
            },
        };
        faults.push(extra);
    }
    for chaos in faults {
        steps.push(Step {
            at_ms: rng.random_range(0..span),
            chaos,
        });
    }
    // At the time of a container's start in the first half of the kills
    // (sorted after it), so every container runs when it begins.
    let starts: Vec<u64> = steps
        .iter()
        .filter(|s| matches!(s.chaos, Chaos::Start(_)))
        .map(|s| s.at_ms)
        .collect();
    steps.push(Step {
        at_ms: starts[rng.random_range(0..starts.len() / 2)],
        chaos: Chaos::RefuseOneReport {
            secs: rng.random_range(REFUSAL_S),
        },
    });
    // Stable: a kill and its start keep their order.
    steps.sort_by_key(|s| s.at_ms);
    steps
}

fn describe(seed: u64, steps: &[Step], done: &[String]) -> String {
    let mut out = format!("chaos seed {seed} (replay with TCAB_CHAOS_SEED={seed})\nschedule:\n");
    for s in steps {
        out.push_str(&format!("  t+{:>5} ms  {}\n", s.at_ms, s.chaos));
    }
    if !done.is_empty() {
        out.push_str("as carried out:\n");
        for d in done {
            out.push_str(&format!("  {d}\n"));
        }
    }
    out
}

#[test]
fn a_seed_draws_one_schedule_with_every_fault() {
    let a = schedule(7);
    assert_eq!(a, schedule(7));
    assert_ne!(a, schedule(8));
    let kinds: BTreeSet<&str> = a
        .iter()
        .map(|s| match s.chaos {
            Chaos::Kill(_) => "kill",
            Chaos::Start(_) => "start",
            Chaos::JobOutage { .. } => "outage",
            Chaos::SilentWatches { .. } => "silence",
            Chaos::HungCreate { .. } => "hung create",
            Chaos::HungPodReads { .. } => "hung reads",
            Chaos::Throttle { .. } => "429",
            Chaos::ApiRestart { .. } => "restart",
            Chaos::BackendStall { .. } => "stall",
            Chaos::BackendError { .. } => "500",
            Chaos::OomKill { .. } => "oom",
            Chaos::DeleteJob { orphan: false, .. } => "delete job",
            Chaos::DeleteJob { orphan: true, .. } => "orphan job",
            Chaos::RefuseOneReport { .. } => "one job's reports refused",
            Chaos::ClockStep { .. } => "clock step",
        })
        .collect();
    assert_eq!(kinds.len(), 15, "{kinds:?}");
    // Each container is started again after each kill, before the next kill;
    // one job's reports are refused while every container runs.
    let mut down: Option<Container> = None;
    for s in &a {
        match s.chaos {
            Chaos::Kill(c) => {
                assert_eq!(down, None);
                down = Some(c);
            }
            Chaos::Start(c) => assert_eq!(down.take(), Some(c)),
            Chaos::RefuseOneReport { secs } => {
                assert_eq!(down, None, "{s:?}");
                assert!(Duration::from_secs_f64(secs) > limit_of_other_report(ClusterKind::Real));
            }
            _ => {}
        }
    }
    assert_eq!(down, None);
}

/// Copies the stack's directory (its logs, the backend's database, and the
/// records dumped at the end) under the target directory when the test
/// fails, and says where.
struct KeepOnFailure {
    from: std::path::PathBuf,
    to: std::path::PathBuf,
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.to);
        let copied = std::fs::create_dir_all(&self.to).and_then(|()| {
            for entry in std::fs::read_dir(&self.from)? {
                let entry = entry?;
                if entry.file_type()?.is_file() {
                    std::fs::copy(entry.path(), self.to.join(entry.file_name()))?;
                }
            }
            Ok(())
        });
        match copied {
            Ok(()) => eprintln!(
                "the stack's logs and records are kept in {}",
                self.to.display()
            ),
            Err(e) => eprintln!(
                "could not keep the stack's logs in {}: {e}",
                self.to.display()
            ),
        }
    }
}

/// Writes the cluster's and the backend's records into the stack's
/// directory (kept with the logs if the test fails).
async fn dump_records(t: &TestStack) {
    let audit = t.audit().await;
    let history = t.stack.backend.history().await;
    let dir = t.dir.path();
    let _ = std::fs::write(
        dir.join("audit.json"),
        serde_json::to_string_pretty(&audit).unwrap_or_default(),
    );
    if let Ok(h) = history {
        let _ = std::fs::write(dir.join("history.txt"), format!("{h:#?}"));
    }
}

/// Retries an admin call while the API server is down (its restart
/// closes the port for a while: kube-sim's, or the fault proxy's while the
/// launcher restarts kube-apiserver).
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    wait_for(what, Duration::from_secs(15), || {
        let attempt = call();
        async move { attempt.await.map(Some) }
    })
    .await
}

/// The dispatcher-scoped rule of a fault step (kube-sim's, or the fault
/// proxy's in front of the real API server), `token` the dispatcher's.
fn rule_of(chaos: &Chaos, token: &str) -> Option<FaultRule> {
    let scoped = |mode| FaultRule::new(mode).token(token);
    Some(match chaos {
        Chaos::JobOutage { secs } => scoped(ApiFaultMode::Error500)
            .verbs(["list", "watch"])
            .resources(["jobs"])
            .for_seconds(*secs)
            .closing_open_watches(),
        Chaos::SilentWatches { secs } => scoped(ApiFaultMode::Silence)
            .verbs(["watch"])
            .resources(["jobs"])
            .for_seconds(*secs),
        Chaos::HungCreate { applied } => {
            let rule = scoped(ApiFaultMode::Hang)
                .verbs(["create"])
                .resources(["jobs"])
                .times(1);
            if *applied {
                rule.after_applying()
            } else {
                rule
            }
        }
        Chaos::HungPodReads { count } => scoped(ApiFaultMode::Hang)
            .verbs(["list", "get"])
            .resources(["pods", "pods/log"])
            .times(*count),
        Chaos::Throttle { secs } => scoped(ApiFaultMode::Throttle)
            .retry_after(1)
            .for_seconds(*secs),
        _ => return None,
    })
}

/// Carries out one step; returns what was done.
/// Whether every job the backend holds as `dispatched` under a claim made
/// since `since` has a Job for that claim.
async fn claims_have_jobs(t: &TestStack, since: jiff::Timestamp) -> anyhow::Result<Option<()>> {
    let record = t.stack.backend.history().await?;
    let mut last: BTreeMap<(&str, &str), &tcab_devstack::invariants::HistoryEntry> =
        BTreeMap::new();
    for e in &record.entries {
        last.insert((e.lane.as_str(), e.job_id.as_str()), e);
    }
    let names: BTreeSet<String> = t
        .stack
        .cluster
        .jobs(None)
        .await?
        .iter()
        .filter_map(|j| j["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    for ((lane, id), e) in last {
        if e.state != "dispatched" || e.wall_at.is_none_or(|at| at < since) {
            continue;
        }
        let kind = if lane == "run" { "driver" } else { "publisher" };
        let claim = e.claim.as_deref().unwrap_or_default();
        if !names.contains(&format!("tcab-{kind}-{id}-{claim}")) {
            return Ok(None);
        }
    }
    Ok(Some(()))
}

/// The runs the chaos struck, by how.
#[derive(Debug, Default)]
struct Victims {
    /// Their driver was OOM-killed.
    oom: BTreeSet<String>,
    /// Their Job was deleted by hand (background propagation).
    deleted: BTreeSet<String>,
    /// Their Job was deleted with `--cascade=orphan`.
    orphaned: BTreeSet<String>,
}

impl Victims {
    fn contains(&self, id: &str) -> bool {
        self.oom.contains(id) || self.deleted.contains(id) || self.orphaned.contains(id)
    }
}

/// The `pick`-th (cyclically) running, undeleted driver of an original run
/// not struck yet: its job id, pod and Job name.
async fn pick_running(
    t: &TestStack,
    pick: usize,
    originals: &BTreeSet<String>,
    victims: &Victims,
) -> Option<(String, String, String)> {
    let cluster = t.stack.cluster.clone();
    let ns = t.ns();
    let pods = retrying("listing the drivers", || {
        cluster.pods(
            &ns,
            Some("app.kubernetes.io/managed-by=tcab-dispatcher,tcab.dev/job-kind=run"),
        )
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let running: Vec<(String, String, String)> = pods
        .iter()
        .filter(|p| {
            p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                && p["metadata"]["deletionTimestamp"].is_null()
                && !p["metadata"]["ownerReferences"].is_null()
        })
        .filter_map(|p| {
            let labels = &p["metadata"]["labels"];
            let id = labels["tcab.dev/job-id"].as_str()?;
            let job = labels["job-name"].as_str()?;
            (originals.contains(id) && !victims.contains(id)).then(|| {
                (
                    id.to_owned(),
                    p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    job.to_owned(),
                )
            })
        })
        .collect();
    (!running.is_empty()).then(|| running[pick % running.len()].clone())
}

/// The running original drivers not struck yet whose tokens the running
/// lease-keeper holds (their claim made since it started: a restart forgets
/// every token), as (job id, pod, Job name), sorted by Job name as the
/// lease-keeper's report loop orders deaths.
async fn drivers_with_tokens(
    t: &TestStack,
    originals: &BTreeSet<String>,
    victims: &Victims,
    keeper_since: jiff::Timestamp,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let pods = t
        .stack
        .cluster
        .pods(
            &t.ns(),
            Some("app.kubernetes.io/managed-by=tcab-dispatcher,tcab.dev/job-kind=run"),
        )
        .await?;
    let history = t.stack.backend.history().await?;
    let claimed_since = |id: &str, claim: &str| {
        history.entries.iter().any(|e| {
            e.job_id == id
                && e.state == "dispatched"
                && e.claim.as_deref() == Some(claim)
                && e.wall_at.is_some_and(|at| at > keeper_since)
        })
    };
    let mut drivers: Vec<(String, String, String)> = pods
        .iter()
        .filter(|p| {
            p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                && p["metadata"]["deletionTimestamp"].is_null()
                && !p["metadata"]["ownerReferences"].is_null()
        })
        .filter_map(|p| {
            let labels = &p["metadata"]["labels"];
            let id = labels["tcab.dev/job-id"].as_str()?;
            let claim = labels["tcab.dev/claim"].as_str()?;
            let job = labels["job-name"].as_str()?;
            (originals.contains(id) && !victims.contains(id) && claimed_since(id, claim)).then(
                || {
                    (
                        id.to_owned(),
                        p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                        job.to_owned(),
                    )
                },
            )
        })
        .collect();
    drivers.sort_by(|a, b| a.2.cmp(&b.2));
    Ok(drivers)
}

/// The lease-keeper's count of death reports the backend refused with a 4xx
/// of no other meaning (the 400 of [`Chaos::RefuseOneReport`]).
async fn refused_death_reports(t: &TestStack) -> f64 {
    t.stack
        .scrape(Container::LeaseKeeper)
        .await
        .map(|s| {
            s.sum(
                "tcab_dispatcher_report_failures_total",
                &[("report", "death"), ("reason", "http_4xx")],
            )
        })
        .unwrap_or(0.0)
}

/// [`Chaos::RefuseOneReport`]: one job's status reports refused, its driver
/// killed so its death report is refused; then the death of a driver the
/// report loop orders after it must be reported within
/// [`limit_of_other_report`] while the first job's reports are still
/// refused. A report loop in which the refused job held up the others fails
/// the test here.
async fn refuse_one_report(
    t: &TestStack,
    secs: f64,
    originals: &BTreeSet<String>,
    victims: &mut Victims,
    keeper_since: jiff::Timestamp,
) -> String {
    let chaos = Chaos::RefuseOneReport { secs };
    let admin = t.admin();
    let ns = t.ns();
    let limit = limit_of_other_report(t.kind());
    // The refused job is a long run (a short one could end by itself before
    // its kill lands), with another running driver beside it.
    let found = wait_for(
        "two running drivers whose tokens the lease-keeper holds, one a long run",
        Duration::from_secs(30),
        || async {
            let drivers = drivers_with_tokens(t, originals, victims, keeper_since).await?;
            if drivers.len() < 2 {
                return Ok(None);
            }
            for d in &drivers {
                let job = t.stack.backend.job(&d.0).await?;
                let ms = job["launch_request"]["sim"]["duration_ms"].as_u64();
                if ms.is_some_and(|ms| ms >= LONG_RUN_MS) {
                    return Ok(Some(d.clone()));
                }
            }
            Ok(None)
        },
    )
    .await;
    let (refused_id, refused_pod, refused_job) = match found {
        Ok(d) => d,
        Err(e) => return format!("{chaos}: skipped, {e}"),
    };
    let before = refused_death_reports(t).await;
    t.stack
        .backend
        .add_fault_rule(json!({"paths": [format!("/jobs/{refused_id}/status")],
            "mode": "status", "status": 400, "seconds": secs}))
        .await
        .unwrap_or_else(|e| t.fail(e));
    let refusal_ends = tokio::time::Instant::now() + Duration::from_secs_f64(secs);
    if let Err(e) = admin.oom_kill(&ns, &refused_pod).await {
        return format!("{chaos}: skipped, pod {refused_pod} could not be killed ({e})");
    }
    victims.oom.insert(refused_id.clone());
    wait_for(
        "the lease-keeper's death report of the refused job refused",
        limit,
        || async { Ok((refused_death_reports(t).await > before).then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(format!("{chaos}: job {refused_id}: {e}")));

    // Another driver, one the report loop meets after the refused one,
    // killed while there is time to see its report before the refusal ends.
    loop {
        let left = refusal_ends
            .saturating_duration_since(tokio::time::Instant::now())
            .saturating_sub(limit);
        let next = wait_for("another driver to kill", left, || async {
            let drivers = drivers_with_tokens(t, originals, victims, keeper_since).await?;
            Ok(drivers.into_iter().find(|d| d.2 > refused_job))
        })
        .await;
        let Ok((id, pod, _)) = next else {
            break;
        };
        let struck = tokio::time::Instant::now();
        if admin.oom_kill(&ns, &pod).await.is_err() {
            continue;
        }
        victims.oom.insert(id.clone());
        let ended = wait_for("the other job's end", limit, || async {
            let history = t.stack.backend.history().await?;
            Ok(history
                .entries
                .into_iter()
                .find(|e| e.job_id == id && terminal(&json!(e.state))))
        })
        .await
        .unwrap_or_else(|e| {
            t.fail(format!(
                "{chaos}: the death of job {id} was not reported within {limit:?} while job {refused_id}'s reports were refused: one job's refused report held up another's ({e})"
            ))
        });
        let by_keeper = ended
            .caller
            .as_deref()
            .is_some_and(|c| c.starts_with("tcab-lease-keeper/"));
        if !by_keeper {
            // Its driver's own report landed before the kill: try another.
            continue;
        }
        let refused = t
            .stack
            .backend
            .job(&refused_id)
            .await
            .unwrap_or_else(|e| t.fail(e));
        if terminal(&refused["state"]) {
            t.fail(format!(
                "{chaos}: job {refused_id} ended while its reports were refused: {refused}"
            ));
        }
        return format!(
            "{chaos}: job {refused_id}'s death report refused; job {id}'s reported {:.1}s after its kill",
            struck.elapsed().as_secs_f64()
        );
    }
    format!(
        "{chaos}: skipped the other death: job {refused_id} refused, but no other driver could be killed in the window"
    )
}

async fn carry_out(
    t: &mut TestStack,
    chaos: &Chaos,
    originals: &BTreeSet<String>,
    victims: &mut Victims,
    keeper_since: &mut jiff::Timestamp,
) -> String {
    let admin = t.admin();
    let backend = t.stack.backend.clone();
    if let Some(rule) = rule_of(chaos, &t.dispatcher_token()) {
        let id = retrying("adding a fault", || async {
            Ok(admin.add_fault(&rule).await?)
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
        let whose = match t.kind() {
            ClusterKind::Sim => "kube-sim",
            ClusterKind::Real => "fault proxy",
        };
        return format!("{chaos} ({whose} rule {id})");
    }
    match chaos {
        Chaos::Kill(c) => t.stack.kill_container(*c).await,
        Chaos::Start(c) => {
            if *c == Container::LeaseKeeper {
                *keeper_since = jiff::Timestamp::now();
            }
            t.stack.start_container(*c).await.expect("restart")
        }
        Chaos::RefuseOneReport { secs } => {
            return refuse_one_report(t, *secs, originals, victims, *keeper_since).await;
        }
        Chaos::ApiRestart { down_ms } => {
            let report = retrying("restarting the API server", || async {
                Ok(admin.restart(*down_ms as f64 / 1000.0).await?)
            })
            .await
            .unwrap_or_else(|e| t.fail(e));
            return format!(
                "{chaos}: {} connections cut, {} watches",
                report.connections_cut, report.watches_closed
            );
        }
        Chaos::BackendStall { paths, secs } => backend
            .add_fault(paths, "stall", *secs)
            .await
            .unwrap_or_else(|e| t.fail(e)),
        Chaos::BackendError { paths, secs } => backend
            .add_fault(paths, "error", *secs)
            .await
            .unwrap_or_else(|e| t.fail(e)),
        Chaos::ClockStep { secs } => backend
            .advance_clock(*secs)
            .await
            .unwrap_or_else(|e| t.fail(e)),
        Chaos::OomKill { pick } => {
            let ns = t.ns();
            let Some((id, pod, _)) = pick_running(t, *pick, originals, victims).await else {
                return format!("{chaos}: skipped, no original driver running");
            };
            return match retrying("OOM-killing", || async {
                Ok(admin.oom_kill(&ns, &pod).await?)
            })
            .await
            {
                Ok(()) => {
                    victims.oom.insert(id.clone());
                    format!("{chaos}: pod {pod} of job {id}")
                }
                Err(e) => format!("{chaos}: pod {pod} could not be killed ({e})"),
            };
        }
        Chaos::DeleteJob { pick, orphan } => {
            let Some((id, _, job)) = pick_running(t, *pick, originals, victims).await else {
                return format!("{chaos}: skipped, no original driver running");
            };
            let propagation = if *orphan { "Orphan" } else { "Background" };
            let cluster = t.stack.cluster.clone();
            return match retrying("deleting a Job", || cluster.delete_job(&job, propagation)).await
            {
                Ok(_) => {
                    if *orphan {
                        victims.orphaned.insert(id.clone());
                    } else {
                        victims.deleted.insert(id.clone());
                    }
                    format!("{chaos}: Job {job} of job {id}")
                }
                Err(e) => format!("{chaos}: Job {job} could not be deleted ({e})"),
            };
        }
        _ => {}
    }
    chaos.to_string()
}

async fn random_container_kills_during_a_drain_lose_nothing(kind: ClusterKind) {
    let seed = std::env::var("TCAB_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let steps = schedule(seed);
    // Shown by the test runner when the test fails.
    eprintln!("{}", describe(seed, &steps, &[]));

    let (runs_n, publishes_n) = common::pick(kind, (RUNS, PUBLISHES), (REAL_RUNS, REAL_PUBLISHES));
    // Claims made since the lease-keeper started are in its vault.
    let mut keeper_since = jiff::Timestamp::now();
    let mut t = TestStack::start(kind, |o| {
        o.max_inflight = RUN_CAP;
        o.max_publish_inflight = PUBLISH_CAP;
        // The orphan sweep runs every 2 s with a 3 s grace, under stale views.
        o.orphan_grace_seconds = 3;
        for (k, v) in [
            ("TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS", KUBE_TIMEOUT_S),
            ("TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS", WATCH_TIMEOUT_S),
            ("TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", 2),
        ] {
            o.extra_env.push((k.into(), v.to_string()));
        }
    })
    .await;
    let _keep = KeepOnFailure {
        from: t.dir.path().to_owned(),
        to: std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-seed-{seed}")),
    };
    // Some runs last long enough to be OOM-killed mid-run.
    let runs: Vec<_> = (0..runs_n)
        .map(|i| {
            let ms = if i % 8 == 0 { LONG_RUN_MS } else { 300 };
            run(
                &format!("case-{i}"),
                json!({"duration_ms": ms, "log_lines": 1}),
            )
        })
        .collect();
    let originals: BTreeSet<String> = t
        .stack
        .backend
        .enqueue_batch(runs)
        .await
        .expect("enqueue runs")
        .into_iter()
        .collect();
    for i in 0..publishes_n {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 200}}))
            .await
            .expect("enqueue publish");
    }

    // The schedule, paced in real time (pacing the chaos, not waiting for a
    // result).
    let mut started = tokio::time::Instant::now();
    let mut done = Vec::new();
    let mut victims = Victims::default();
    for step in &steps {
        tokio::time::sleep_until(started + Duration::from_millis(step.at_ms)).await;
        let begun = tokio::time::Instant::now();
        let what = carry_out(
            &mut t,
            &step.chaos,
            &originals,
            &mut victims,
            &mut keeper_since,
        )
        .await;
        done.push(format!("t+{:>5} ms  {what}", started.elapsed().as_millis()));
        // The refusal step waits on the cluster for seconds: the schedule's
        // clock stops meanwhile, so the steps after it keep their spacing
        // (a fault window meant to outlast a container's restart still does).
        if matches!(step.chaos, Chaos::RefuseOneReport { .. }) {
            started += begun.elapsed();
        }
    }
    // One last SIGKILL of the admitter: every claim it had not made a Job
    // for is abandoned for good (a killed admitter creates nothing later).
    t.stack.kill_container(Container::Admitter).await;
    let admitter_since = jiff::Timestamp::now();
    t.stack
        .start_container(Container::Admitter)
        .await
        .expect("restart");
    done.push(format!(
        "t+{:>5} ms  SIGKILL and start tcab-admitter (end of the schedule)",
        started.elapsed().as_millis()
    ));
    for d in done
        .iter()
        .filter(|d| d.contains("one job's status reports"))
    {
        eprintln!("{d}");
    }
    let context = describe(seed, &steps, &done);
    // The refusal step met another death to report (a report held up by the
    // refused one fails the test in the step itself).
    assert!(
        done.iter()
            .any(|d| d.contains("death report refused; job") && d.contains("reported")),
        "no other job's death was reported while one job's reports were refused\n{context}"
    );
    // Count-bound rules that met no request would stay armed: end them.
    let admin = t.admin();
    retrying("clearing the API faults", || async {
        Ok(admin.clear_faults().await?)
    })
    .await
    .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));
    t.stack
        .backend
        .clear_faults()
        .await
        .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));

    // Claims abandoned by a killed admitter (or given up during the faults)
    // lapse after the lease (2 min of backend time); let that time pass in
    // steps the lease-keeper renews within. The backend's clock then runs
    // ahead of the dispatcher's, so before each step every claim of the
    // running admitter must have its Job: its guard against creating a Job
    // for a claim that may have lapsed counts real time.
    let backend = t.stack.backend.clone();
    let all_done = || async {
        // An unreadable backend is not a drained one.
        let (Ok(runs), Ok(pubs)) = (backend.jobs().await, backend.publish_jobs().await) else {
            return false;
        };
        runs.iter()
            .chain(pubs.iter())
            .all(|j| terminal(&j["state"]))
    };
    // Steps go on until every job is terminal, up to three leases' worth of
    // backend time: a claim whose Job still looked live part-way through is
    // renewed until its Job ends, so its lease lapses up to a lease after
    // that, not after the first 120 s of steps (the drain below waits in
    // real time, too short for a whole lease plus its requeue).
    for _ in 0..36 {
        if all_done().await {
            break;
        }
        wait_for(
            "every claim of the running admitter with its Job",
            Duration::from_secs(30),
            || async { claims_have_jobs(&t, admitter_since).await },
        )
        .await
        .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));
        backend.advance_clock(10).await.expect("advance clock");
        // Before the next step, the lease-keeper must have renewed at the new
        // backend time: every live Job's lease reaches 100 s past `now`.
        wait_for(
            "leases renewed at the new time",
            Duration::from_secs(30),
            || async { Ok(t.leases_renewed(100).await?.then_some(())) },
        )
        .await
        .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));
    }

    let (runs, pubs) = t
        .drained(Duration::from_secs(120), common::RunBy::Processes)
        .await;
    dump_records(&t).await;
    let audit = t.audit().await;
    let had_job: BTreeSet<&str> = audit
        .iter()
        .filter(|e| e.kind == "Job")
        .filter_map(|e| e.labels.get("tcab.dev/job-id").map(String::as_str))
        .collect();
    check_outcomes(
        &runs,
        &pubs,
        publishes_n,
        &originals,
        &victims,
        &had_job,
        &context,
    );

    let counters = admin.counters().await.expect("counters");
    let max = |lane: &str| counters.max_live_jobs.get(lane).copied().unwrap_or(0);
    assert!(
        max("run") <= i64::from(RUN_CAP) && max("publish") <= i64::from(PUBLISH_CAP),
        "a cap was exceeded: {:?}\n{context}",
        counters.max_live_jobs
    );
    assert!(
        counters.restarts >= 1,
        "the API server restarted\n{context}"
    );
    assert!(
        counters.faults.values().sum::<u64>() > 0,
        "the faults met the dispatcher's requests: {:?}\n{context}",
        counters.faults
    );
    let backend_faults = backend.faults().await.expect("backend faults");
    assert!(
        backend_faults["stalled"].as_u64().unwrap_or(0)
            + backend_faults["errored"].as_u64().unwrap_or(0)
            > 0,
        "the backend faults met the dispatcher's calls: {backend_faults}\n{context}"
    );

    let verdict = t.verdict().await;
    assert!(
        verdict.violations.is_empty(),
        "invariants broken: {:#?}\n{context}{}",
        verdict,
        t.logs()
    );
    // A second Job for a backend job only as the verdict explained it: the
    // documented race with its stale driver stopped, or a requeue of a claim
    // whose driver died before any report landed (nothing ran).
    let by_id = t.jobs_by_id().await;
    let explained: BTreeSet<&str> = verdict
        .races
        .iter()
        .chain(verdict.requeues.iter())
        .map(|r| r.job_id.as_str())
        .collect();
    let doubled: Vec<_> = by_id
        .iter()
        .filter(|(id, names)| names.len() > 1 && !explained.contains(id.as_str()))
        .collect();
    assert!(
        doubled.is_empty(),
        "a backend job got two Jobs unexplained: {doubled:?}\n{context}"
    );
    // Every job ever got a Job (by the cluster's own record: a Job deleted
    // by hand is gone now), but a publish abandoned before it had one.
    let unclaimed_publishes = pubs
        .iter()
        .filter(|p| !had_job.contains(p["id"].as_str().unwrap_or("")))
        .count();
    assert_eq!(
        had_job.len(),
        runs.len() + pubs.len() - unclaimed_publishes,
        "every job but an abandoned publish got its Job\n{context}"
    );
    eprintln!(
        "records: {} Jobs, {} lost/death reports, {} sandbox deletes by the dispatcher, races: {:?}, requeued after a silent death: {:?}",
        verdict.jobs,
        verdict.reports.len(),
        verdict.sandbox_deletes,
        verdict.races,
        verdict.requeues
    );

    wait_for("no sandbox left", Duration::from_secs(15), || async {
        Ok(t.sandboxes().await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));
    t.stack
        .check_alive()
        .unwrap_or_else(|e| t.fail(format!("{e}\n{context}")));
}

/// Every original run succeeded, except an OOM-killed one, which failed as
/// infrastructure and whose single retry succeeded, and one whose Job was
/// deleted by hand: its driver handed over on SIGTERM, so it ended from its
/// record (failed as infrastructure with no retry, or succeeded), or it was
/// reported dead and its single retry succeeded. A run whose Job was deleted
/// with `--cascade=orphan` succeeded: its driver went on. Every original
/// publish succeeded, except one whose claim was abandoned before any Job
/// existed (a publish lease is not requeued: it is reported lost), whose
/// single retry succeeded.
fn check_outcomes(
    runs: &[Value],
    pubs: &[Value],
    publishes_n: usize,
    originals: &BTreeSet<String>,
    victims: &Victims,
    had_job: &BTreeSet<&str>,
    context: &str,
) {
    let not_succeeded: Vec<String> = runs
        .iter()
        .chain(pubs.iter())
        .filter(|j| j["state"] != "succeeded")
        .map(|j| {
            format!(
                "{} {} {}: {}",
                j["id"], j["state"], j["retry_id"], j["detail"]
            )
        })
        .collect();
    let context = format!("{context}\nnot succeeded: {not_succeeded:#?}");
    let pubs_by_id: BTreeMap<&str, &Value> = pubs
        .iter()
        .map(|j| (j["id"].as_str().unwrap_or(""), j))
        .collect();
    let mut publish_retries = 0;
    for p in pubs.iter().filter(|p| p["retry_of"].is_null()) {
        if p["state"] == "succeeded" {
            continue;
        }
        let id = p["id"].as_str().unwrap_or("");
        assert!(
            !had_job.contains(id)
                && p["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("reported lost: publisher Job no longer exists")),
            "publish {id} failed although a Job was made for it: {p}\n{context}"
        );
        let retry = p["retry_id"].as_str().expect("a retry");
        assert_eq!(
            pubs_by_id[retry]["state"], "succeeded",
            "the retry of {id} succeeded\n{context}"
        );
        publish_retries += 1;
    }
    assert_eq!(
        pubs.len(),
        publishes_n + publish_retries,
        "only abandoned publishes were retried: {}\n{context}",
        states(pubs)
    );
    let by_id: BTreeMap<&str, &Value> = runs
        .iter()
        .map(|j| (j["id"].as_str().unwrap_or(""), j))
        .collect();
    let mut retries = 0;
    for id in originals {
        let job = by_id[id.as_str()];
        if job["state"] == "succeeded" {
            continue;
        }
        assert!(
            victims.oom.contains(id) || victims.deleted.contains(id),
            "run {id} ended {} without being OOM-killed or its Job deleted: {job}\n{context}",
            job["state"]
        );
        assert_eq!(job["failure_kind"], "infrastructure", "{job}\n{context}");
        let Some(retry) = job["retry_id"].as_str() else {
            assert!(
                victims.deleted.contains(id) && job["finished_from_record"] == true,
                "run {id} failed with no retry: {job}\n{context}"
            );
            continue;
        };
        assert_eq!(
            by_id[retry]["state"], "succeeded",
            "the retry of {id} succeeded\n{context}"
        );
        retries += 1;
    }
    assert_eq!(
        runs.len(),
        originals.len() + retries,
        "only OOM-killed runs and runs whose Job was deleted were retried: {}\n{context}",
        states(runs)
    );
}

on_both_clusters!(random_container_kills_during_a_drain_lose_nothing);
