//! The keeper's ticks against a mock backend and a fake Kubernetes API. The
//! Job cache is fed directly, so each test controls exactly what it shows.

mod support;

use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::Event;
use serde_json::Value;
use std::time::Duration;
use support::*;
use tcab_lease_keeper::Keeper;
use tcab_lease_keeper::gate::Gate;
use tcab_lease_keeper::vault::{TokenKey, TokenStore};
use tcab_shared::backend::JobState;
use tcab_shared::cluster::OwnedJobs;
use tcab_shared::labels::{Lane, claim_tag, job_name};

struct Rig {
    backend: MockBackend,
    kube: FakeKube,
    cache: OwnedJobs,
    store: TokenStore,
    gate: Gate,
    keeper: Keeper,
}

impl Rig {
    async fn new(publishing: bool) -> Rig {
        let backend = MockBackend::start().await;
        let kube = FakeKube::start().await;
        let cache = OwnedJobs::new();
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        let store = TokenStore::new();
        let gate = Gate::new();
        let cfg = config(publishing, Duration::from_millis(50));
        let keeper = Keeper::new(
            &cfg,
            backend.client(),
            kube.client(),
            NS,
            cache.clone(),
            store.clone(),
            gate.clone(),
        );
        Rig {
            backend,
            kube,
            cache,
            store,
            gate,
            keeper,
        }
    }

    /// A claimed run at the backend, its token in the vault, and its driver Job.
    fn claimed_run(&self, id: &str, state: JobState, job_status: Value) -> String {
        let token = format!("token-of-{id}");
        let claim = claim_tag(&token);
        self.backend.add_run(id, state, &token);
        self.store.put(
            TokenKey::new(id, &claim),
            token.clone().into(),
            Lane::Run,
            tokio::time::Instant::now(),
        );
        let name = job_name(Lane::Run, id, &claim);
        self.job(job_json(&name, id, &claim, "run", job_status));
        name
    }

    fn job(&self, job: Value) {
        self.kube.put_job(job.clone());
        self.cache
            .apply(Event::Apply(serde_json::from_value::<Job>(job).unwrap()));
    }

    fn delete_job(&self, name: &str) {
        let job = self.kube.lock().jobs.remove(name).unwrap();
        self.cache
            .apply(Event::Delete(serde_json::from_value::<Job>(job).unwrap()));
    }
}

#[tokio::test]
async fn renewals_are_batched_one_call_per_lane() {
    let mut rig = Rig::new(true).await;
    for id in ["r3", "r1", "r2"] {
        rig.claimed_run(id, JobState::Running, live_status());
    }
    rig.claimed_run("r9", JobState::Running, complete_status());
    rig.backend.add_publish("p1", "pt");
    rig.job(job_json(
        &job_name(Lane::Publish, "p1", "aaaa1111"),
        "p1",
        "aaaa1111",
        "publish",
        live_status(),
    ));

    let report = rig.keeper.tick().await;
    assert_eq!(
        report.renewed_runs.as_deref(),
        Some(&["r1".to_string(), "r2".into(), "r3".into()][..])
    );
    assert_eq!(
        report.renewed_publishes.as_deref(),
        Some(&["p1".to_string()][..])
    );
    {
        let s = rig.backend.lock();
        assert_eq!(
            s.run_renewals,
            vec![vec!["r1", "r2", "r3"]],
            "one call with every live driver's id"
        );
        assert_eq!(s.publish_renewals, vec![vec!["p1"]]);
    }
    let gate = rig.gate.last().unwrap();
    assert!(gate.runs_renewed && gate.publishes_renewed);
    // A finished driver's token is dropped, the live ones kept.
    assert_eq!(rig.store.len(), 3);
}

#[tokio::test]
async fn backend_down_then_back_renews_live_jobs_and_judges_only_the_rest() {
    let mut rig = Rig::new(false).await;
    rig.claimed_run("alive", JobState::Running, live_status());
    let gone = rig.claimed_run("gone", JobState::Running, live_status());
    rig.keeper.tick().await;

    // The backend goes down; meanwhile one driver's Job vanishes and every lease lapses.
    rig.backend.set_down(true);
    rig.delete_job(&gone);
    // A driver dies while the backend is down: reported once it is back.
    rig.claimed_run("died", JobState::Running, failed_status(1));
    let report = rig.keeper.tick().await;
    assert_eq!(report.renewed_runs, None);
    assert!(report.reported_dead.is_empty());
    assert!(
        !report.judged_runs,
        "nothing is judged on a tick whose renewal failed"
    );
    let gate = rig.gate.last().unwrap();
    assert!(!gate.runs_renewed && gate.detail.contains("run renewal failed"));
    rig.backend.advance(600);
    assert_eq!(rig.backend.lock().active_reads, 1);

    rig.backend.set_down(false);
    let report = rig.keeper.tick().await;
    assert_eq!(
        report.renewed_runs.as_deref(),
        Some(&["alive".to_string()][..])
    );
    assert!(report.judged_runs);
    assert_eq!(report.lost_runs, ["gone"]);
    let s = rig.backend.lock();
    assert_eq!(s.lost_reports.len(), 1);
    assert_eq!(s.lost_reports[0].0, "gone");
    assert_eq!(
        s.status_reports.len(),
        1,
        "no death report was attempted while the backend was down"
    );
    assert!(
        s.lost_reports[0].1.contains("Job no longer exists"),
        "{}",
        s.lost_reports[0].1
    );
    assert_eq!(s.rows["alive"].state, JobState::Running);
    assert!(
        s.rows["alive"].lease.unwrap() > s.now.unwrap(),
        "the live driver's lease was renewed first"
    );
}

#[tokio::test]
async fn a_death_reaches_the_backend_once_with_cause_and_log_tail() {
    let mut rig = Rig::new(false).await;
    let oom = rig.claimed_run("oom", JobState::Running, failed_status(1));
    rig.kube.put_pod(
        pod_json(&oom, oom_pod_status()),
        "line 1\nline 2\nallocating 9GiB\nkilled",
    );
    let evicted = rig.claimed_run("evicted", JobState::Running, failed_status(1));
    rig.kube.put_pod(
        pod_json(&evicted, evicted_pod_status()),
        "draining node\nSIGTERM received",
    );
    // The pod ran and was deleted: only the Job's status.failed remains.
    rig.claimed_run("deleted", JobState::Storing, failed_status(1));

    let report = rig.keeper.tick().await;
    let mut dead = report.reported_dead.clone();
    dead.sort();
    assert_eq!(dead, ["deleted", "evicted", "oom"]);
    for _ in 0..3 {
        let again = rig.keeper.tick().await;
        assert!(again.reported_dead.is_empty());
    }

    let s = rig.backend.lock();
    assert_eq!(
        s.status_reports.len(),
        3,
        "each death is reported exactly once"
    );
    let detail_of = |id: &str| {
        let (_, token, body) = s.status_reports.iter().find(|(i, ..)| i == id).unwrap();
        assert_eq!(
            token,
            &format!("token-of-{id}"),
            "the retained per-job token is presented"
        );
        assert_eq!(body["state"], "failed");
        assert_eq!(body["failure_kind"], "infrastructure");
        body["detail"].as_str().unwrap().to_owned()
    };
    let d = detail_of("oom");
    assert!(
        d.contains("OOMKilled") && d.contains("allocating 9GiB\nkilled"),
        "{d}"
    );
    assert!(
        !d.contains("line 1"),
        "only the last log_tail_lines lines: {d}"
    );
    let d = detail_of("evicted");
    assert!(
        d.contains("evicted")
            && d.contains("EvictionByEvictionAPI")
            && d.contains("SIGTERM received"),
        "{d}"
    );
    let d = detail_of("deleted");
    assert!(d.contains("pod ran and was deleted"), "{d}");
    for id in ["oom", "evicted", "deleted"] {
        assert_eq!(s.rows[id].state, JobState::Failed);
    }
    drop(s);
    assert!(rig.store.is_empty(), "settled deaths drop their tokens");
}

#[tokio::test]
async fn a_restart_loses_tokens_and_the_job_takes_the_lost_path() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("j1", JobState::Running, failed_status(1));
    rig.kube
        .put_pod(pod_json(&name, oom_pod_status()), "out of memory");
    // The restart: the vault forgot every token.
    let held = rig.store.held();
    for h in held {
        rig.store.forget(&h.key);
    }

    let report = rig.keeper.tick().await;
    assert!(report.reported_dead.is_empty(), "no token, no death report");
    assert!(report.lost_runs.is_empty(), "the lease is still current");

    rig.backend.advance(121);
    let report = rig.keeper.tick().await;
    assert_eq!(report.lost_runs, ["j1"]);
    let s = rig.backend.lock();
    assert!(s.status_reports.is_empty());
    let detail = &s.lost_reports[0].1;
    assert!(
        detail.contains(&name) && detail.contains("OOMKilled") && detail.contains("out of memory"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_late_driver_report_after_a_lost_report_does_not_confuse_the_keeper() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("late", JobState::Storing, complete_status());
    rig.backend.advance(121);
    let report = rig.keeper.tick().await;
    assert_eq!(report.lost_runs, ["late"]);
    assert!(
        rig.backend.lock().lost_reports[0]
            .1
            .contains("exited without its report landing")
    );

    // The driver's terminal report lands late and supersedes the lost outcome.
    rig.backend.lock().rows.get_mut("late").unwrap().state = JobState::Succeeded;
    // And a stale failed Job of the same id shows up (say, a relist).
    rig.job(job_json(
        &name,
        "late",
        &claim_tag("token-of-late"),
        "run",
        failed_status(1),
    ));
    for _ in 0..3 {
        let report = rig.keeper.tick().await;
        assert!(report.judged_runs);
        assert!(report.lost_runs.is_empty() && report.reported_dead.is_empty());
    }
    let s = rig.backend.lock();
    assert_eq!(s.lost_reports.len(), 1);
    assert_eq!(s.rows["late"].state, JobState::Succeeded);
    assert!(
        s.status_reports.is_empty(),
        "a terminal job gets no death report"
    );
}

#[tokio::test]
async fn a_refused_token_drops_the_death_and_a_stale_claim_is_not_reported() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("requeued", JobState::Running, failed_status(1));
    rig.kube.put_pod(pod_json(&name, oom_pod_status()), "x");
    // The backend requeued and re-claimed it: the old token is refused.
    rig.backend.lock().rows.get_mut("requeued").unwrap().token = "a-new-token".into();

    // "stale": an old claim's Job failed, the vault holds the newer claim.
    let old = job_name(Lane::Run, "stale", "0ld0c1a1");
    rig.store.put(
        TokenKey::new("stale", "0ld0c1a1"),
        "old-token".into(),
        Lane::Run,
        tokio::time::Instant::now(),
    );
    rig.job(job_json(&old, "stale", "0ld0c1a1", "run", failed_status(1)));
    rig.claimed_run("stale", JobState::Running, live_status());

    let report = rig.keeper.tick().await;
    assert!(report.reported_dead.is_empty());
    rig.keeper.tick().await;
    let s = rig.backend.lock();
    let ids: Vec<_> = s
        .status_reports
        .iter()
        .map(|(id, ..)| id.as_str())
        .collect();
    assert_eq!(
        ids,
        ["requeued"],
        "one refused attempt, never retried; the stale Job never reported"
    );
}

#[tokio::test]
async fn lost_publishers_are_reported_only_after_the_publish_renewal() {
    let mut rig = Rig::new(true).await;
    rig.backend.add_publish("p-live", "t1");
    rig.job(job_json(
        &job_name(Lane::Publish, "p-live", "c1c1c1c1"),
        "p-live",
        "c1c1c1c1",
        "publish",
        live_status(),
    ));
    rig.backend.add_publish("p-gone", "t2");
    rig.backend.advance(200);

    let report = rig.keeper.tick().await;
    assert!(report.judged_publishes);
    assert_eq!(report.lost_publishes, ["p-gone"]);
    let s = rig.backend.lock();
    assert_eq!(s.publish_lost_reports.len(), 1);
    assert!(
        s.publish_lost_reports[0]
            .1
            .contains("publisher Job no longer exists")
    );
}

#[tokio::test]
async fn a_degraded_job_watch_closes_the_gate_and_judges_nothing() {
    let mut rig = Rig::new(false).await;
    rig.claimed_run("alive", JobState::Running, live_status());
    rig.keeper.tick().await;
    // The watch errs: a Job created since may be missing from this view, so
    // "no Job" cannot be told from "not seen yet".
    rig.cache.mark_degraded(std::time::Instant::now());
    rig.backend.advance(600);
    let report = rig.keeper.tick().await;
    assert!(
        report.renewed_runs.is_some(),
        "what is known is still renewed"
    );
    assert!(!report.judged_runs, "nothing is judged from a stale view");
    let gate = rig.gate.last().unwrap();
    assert!(!gate.runs_renewed, "admissions are held");
    assert!(gate.detail.contains("watch is degraded"), "{}", gate.detail);
    assert!(rig.backend.lock().lost_reports.is_empty());
}
