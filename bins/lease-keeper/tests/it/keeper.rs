//! The keeper's ticks against a mock backend and a fake Kubernetes API. The
//! Job cache is fed directly, so each test controls exactly what it shows.

use crate::support::*;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_lease_keeper::Keeper;
use tcab_lease_keeper::gate::Gate;
use tcab_lease_keeper::tokens::{TokenKey, TokenStore};
use tcab_shared::Lane;
use tcab_shared::backend::JobState;
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::names::{claim_tag, job_name};
use tcab_testkit::wait::settled;

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
        Rig::with(publishing, |_| {}).await
    }

    async fn with(
        publishing: bool,
        tune: impl FnOnce(&mut tcab_lease_keeper::LeaseKeeperConfig),
    ) -> Rig {
        let backend = MockBackend::start().await;
        let kube = FakeKube::start().await;
        let cache = OwnedJobs::listed([]);
        let mut cfg = config(publishing, Duration::from_millis(50));
        tune(&mut cfg);
        let store = TokenStore::new();
        let keeper = Keeper::new(
            &cfg,
            backend.client(),
            kube.client(),
            NS,
            cache.clone(),
            store.clone(),
        )
        .with_clock(test_clock());
        let gate = keeper.gate.clone();
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

    /// Ticks until `done` holds for a report (a bounded number of times).
    async fn tick_until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&tcab_lease_keeper::TickReport) -> bool,
    ) -> tcab_lease_keeper::TickReport {
        settled(what, Duration::from_secs(10), async || {
            let report = self.keeper.tick().await;
            if done(&report) {
                Ok(report)
            } else {
                Err(format!("{report:?}"))
            }
        })
        .await
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
    assert!(rig.gate.lane(Lane::Run).healthy() && rig.gate.lane(Lane::Publish).healthy());
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
    assert!(report.reported_dead().is_empty());
    assert!(
        !report.reports.judged_runs,
        "nothing is judged on a tick whose renewal failed"
    );
    let runs = rig.gate.lane(Lane::Run);
    let failing = runs.failing.clone().unwrap_or_default();
    assert!(
        !runs.healthy() && failing.contains("/jobs/leases"),
        "{failing}"
    );
    rig.backend.advance(600);
    assert_eq!(rig.backend.lock().active_reads, 1);

    rig.backend.set_down(false);
    let report = rig.keeper.tick().await;
    assert_eq!(
        report.renewed_runs.as_deref(),
        Some(&["alive".to_string()][..])
    );
    assert!(report.reports.judged_runs);
    // The Job deleted while live is reported dead (its token is held),
    // saying it was deleted; nothing is reported lost.
    let mut dead = report.reported_dead();
    dead.sort();
    assert_eq!(dead, ["died", "gone"]);
    assert!(report.reports.lost_runs.is_empty());
    let s = rig.backend.lock();
    assert!(s.lost_reports.is_empty());
    assert_eq!(
        s.status_reports.len(),
        2,
        "no death report was attempted while the backend was down"
    );
    let deleted = s
        .status_reports
        .iter()
        .find(|(id, ..)| id == "gone")
        .expect("the deleted Job's report");
    assert!(
        deleted.2["detail"]
            .as_str()
            .is_some_and(|d| d.contains("was deleted by someone other than the dispatcher")),
        "{}",
        deleted.2
    );
    assert_eq!(job_state(&s.rows["alive"].state), JobState::Running);
    assert!(
        s.rows["alive"].lease.unwrap() > s.now.unwrap(),
        "the live driver's lease was renewed first"
    );
}

/// A backend that stops answering fails every report alike: after the first
/// timed-out death report the tick stops reporting (so it stays within its
/// liveness bound instead of paying the timeout once per dead Job), the job
/// whose report hung backs off alone (it cannot hold the others up), and
/// the deaths left are all reported, once each, when the backend answers
/// again.
#[tokio::test]
async fn a_hung_death_report_defers_the_rest_to_the_next_tick_and_loses_none() {
    let mut rig = Rig::new(false).await;
    for id in ["d1", "d2", "d3"] {
        let name = rig.claimed_run(id, JobState::Running, failed_status(1));
        rig.kube
            .put_pod(pod_json(&name, oom_pod_status()), "killed");
    }
    // Longer than the client's 5 s timeout: the first report times out.
    rig.backend.lock().status_delay = Duration::from_secs(6);
    let stalled = rig.keeper.tick().await;
    assert!(stalled.reported_dead().is_empty());
    assert_eq!(
        rig.backend.lock().status_received,
        1,
        "one report tried while the backend hangs, not one per dead Job"
    );

    rig.backend.lock().status_delay = Duration::ZERO;
    // The job whose report hung backs off alone; the others go on at once.
    let resumed = rig.keeper.tick().await;
    let mut dead = resumed.reported_dead();
    dead.sort();
    assert_eq!(dead, ["d2", "d3"], "the hung job waits its own back-off");
    // After its back-off (5 s), it is reported too.
    let mut late = Vec::new();
    tcab_testkit::wait::settled(
        "d1 reported after its back-off",
        Duration::from_secs(15),
        async || {
            late.extend(
                rig.keeper
                    .tick()
                    .await
                    .reported_dead()
                    .into_iter()
                    .map(str::to_owned),
            );
            if late.is_empty() {
                Err("nothing reported yet")
            } else {
                Ok(())
            }
        },
    )
    .await;
    assert_eq!(late, ["d1"]);
    let s = rig.backend.lock();
    let mut answered: Vec<&str> = s
        .status_reports
        .iter()
        .map(|(id, ..)| id.as_str())
        .collect();
    answered.sort();
    assert_eq!(answered, ["d1", "d2", "d3"], "each reported exactly once");
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
    let mut dead = report.reported_dead();
    dead.sort();
    assert_eq!(dead, ["deleted", "evicted", "oom"]);
    let mut kinds: Vec<&str> = report
        .reports
        .reported_dead
        .iter()
        .map(|(_, k)| k.as_str())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["evicted", "oom_killed", "pod_deleted"]);
    for _ in 0..3 {
        let again = rig.keeper.tick().await;
        assert!(again.reported_dead().is_empty());
    }

    // Each death leaves one Event on its Job: the cause in one line, never
    // the log tail the backend got.
    for (id, cause) in [
        ("oom", "OOMKilled"),
        ("evicted", "evicted"),
        ("deleted", "pod ran and was deleted"),
    ] {
        let name = job_name(Lane::Run, id, &claim_tag(&format!("token-of-{id}")));
        let events = events_about(&rig, &name, 1).await;
        let [event] = events.as_slice() else {
            panic!("one Event about {name}: {events:?}")
        };
        assert_eq!(event["reason"], "ReportedDead");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["action"], "ReportDeath");
        assert_eq!(event["reportingController"], "tcab.dev/lease-keeper");
        assert_eq!(event["regarding"]["kind"], "Job");
        assert_eq!(event["regarding"]["namespace"], NS);
        let note = event["note"].as_str().unwrap_or_default();
        assert!(
            note.contains(&format!("job {id} reported dead")) && note.contains(cause),
            "{note}"
        );
        assert!(
            !note.contains("allocating 9GiB") && !note.contains("SIGTERM received"),
            "no log line: {note}"
        );
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
    assert!(
        d.contains("logs unreadable: the Job had no pod left to read"),
        "{d}"
    );
    for id in ["oom", "evicted", "deleted"] {
        assert_eq!(job_state(&s.rows[id].state), JobState::Failed);
    }
    drop(s);
    assert!(rig.store.is_empty(), "settled deaths drop their tokens");
}

/// The Events recorded about the Job `name`, once there are at least `n`.
async fn events_about(rig: &Rig, name: &str, n: usize) -> Vec<Value> {
    tcab_testkit::wait::until(
        &format!("{n} Events about {name}"),
        Duration::from_secs(10),
        || async move {
            let about: Vec<Value> = rig
                .kube
                .recorded_events()
                .into_iter()
                .filter(|e| e["regarding"]["name"] == name)
                .collect();
            (about.len() >= n).then_some(about)
        },
    )
    .await
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
    assert!(
        report.reported_dead().is_empty(),
        "no token, no death report"
    );
    assert!(
        report.reports.lost_runs.is_empty(),
        "the lease is still current"
    );

    rig.backend.advance(121);
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.lost_runs, ["j1"]);
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
    assert_eq!(report.reports.lost_runs, ["late"]);
    assert!(
        rig.backend.lock().lost_reports[0]
            .1
            .contains("exited without its report landing")
    );

    // The driver's terminal report lands late and supersedes the lost outcome.
    rig.backend.lock().rows.get_mut("late").unwrap().state = JobState::Succeeded.as_str().into();
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
        assert!(report.reports.judged_runs);
        assert!(report.reports.lost_runs.is_empty() && report.reported_dead().is_empty());
    }
    let s = rig.backend.lock();
    assert_eq!(s.lost_reports.len(), 1);
    assert_eq!(job_state(&s.rows["late"].state), JobState::Succeeded);
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
    assert!(report.reported_dead().is_empty());
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

    // The publish renewal fails (the backend answers 204, not the contract's
    // 200 body): nothing of the publish lane is judged on that tick.
    rig.backend.lock().publish_renewal_no_content = true;
    let report = rig.keeper.tick().await;
    assert!(report.renewed_runs.is_some() && report.renewed_publishes.is_none());
    assert!(report.reports.judged_runs && !report.reports.judged_publishes);
    assert!(rig.backend.lock().publish_lost_reports.is_empty());
    let publishes = rig.gate.lane(Lane::Publish);
    assert!(!publishes.healthy() && publishes.failing.unwrap().contains("204"));

    rig.backend.lock().publish_renewal_no_content = false;
    let report = rig.keeper.tick().await;
    assert!(report.reports.judged_publishes);
    assert_eq!(report.reports.lost_publishes, ["p-gone"]);
    let s = rig.backend.lock();
    assert_eq!(s.publish_lost_reports.len(), 1);
    assert!(
        s.publish_lost_reports[0]
            .1
            .contains("publisher Job no longer exists")
    );
}

#[tokio::test]
async fn a_lost_publish_names_the_publisher_pods_reason() {
    let mut rig = Rig::new(true).await;
    rig.backend.add_publish("p-dead", "t1");
    let name = job_name(Lane::Publish, "p-dead", "c2c2c2c2");
    rig.job(job_json(
        &name,
        "p-dead",
        "c2c2c2c2",
        "publish",
        failed_status(1),
    ));
    let mut pod = pod_json(&name, oom_pod_status());
    pod["spec"]["containers"][0]["name"] = "publisher".into();
    pod["status"]["containerStatuses"][0]["name"] = "publisher".into();
    rig.kube.put_pod(pod, "uploading release\nkilled");
    rig.backend.advance(200);
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.lost_publishes, ["p-dead"]);
    let detail = rig.backend.lock().publish_lost_reports[0].1.clone();
    assert!(
        detail.contains(&name)
            && detail.contains("container publisher OOMKilled")
            && detail.contains("uploading release"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_job_view_that_is_not_current_closes_the_gate_and_judges_nothing() {
    let mut rig = Rig::new(false).await;
    rig.claimed_run("alive", JobState::Running, live_status());
    rig.keeper.tick().await;
    // The watch errs: a Job created since may be missing from this view, so
    // "no Job" cannot be told from "not seen yet".
    rig.cache
        .mark_failed("500 Internal Server Error from the Job watch");
    rig.backend.advance(600);
    let report = rig.keeper.tick().await;
    assert!(
        report.renewed_runs.is_some(),
        "what is known is still renewed"
    );
    assert!(!report.reports.view_current);
    assert!(
        !report.reports.judged_runs,
        "nothing is judged from a stale view"
    );
    match rig.gate.verdict(
        Lane::Run,
        tokio::time::Instant::now(),
        Duration::from_secs(60),
    ) {
        tcab_proto::gate::GateVerdict::Closed(c) => {
            assert_eq!(
                c.reason,
                tcab_proto::gate::GateReason::ViewNotCurrent,
                "admissions are held"
            );
            assert!(c.detail.contains("500"), "{}", c.detail);
        }
        open => panic!("admissions are held, not {open:?}"),
    }
    assert!(rig.backend.lock().lost_reports.is_empty());
    // An event does not make it current again; only a completed relist does.
    rig.claimed_run("new", JobState::Running, live_status());
    assert!(!rig.keeper.tick().await.reports.view_current);
    rig.cache.apply(Event::Init);
    for job in rig.kube.lock().jobs.values() {
        rig.cache.apply(Event::InitApply(
            serde_json::from_value::<Job>(job.clone()).unwrap(),
        ));
    }
    rig.cache.apply(Event::InitDone);
    assert!(rig.keeper.tick().await.reports.view_current);
}

/// The defect: one live Job with an empty job id made every renewal call
/// fail before it was sent, which closed the gate for good.
#[tokio::test]
async fn a_malformed_job_is_skipped_and_the_rest_renewed() {
    let mut rig = Rig::new(false).await;
    rig.claimed_run("good", JobState::Running, live_status());
    rig.job(job_json(
        "tcab-driver-bad",
        "",
        "c3c3c3c3",
        "run",
        live_status(),
    ));
    let report = rig.keeper.tick().await;
    assert_eq!(
        report.renewed_runs.as_deref(),
        Some(&["good".to_string()][..])
    );
    assert_eq!(rig.backend.lock().run_renewals, vec![vec!["good"]]);
    assert!(rig.gate.lane(Lane::Run).healthy(), "the gate stays open");
}

/// The first failed renewal call closes its lane's gate at once, whatever
/// the other lane does; a success reopens it.
#[tokio::test]
async fn a_failed_renewal_call_closes_its_lane_at_once() {
    let mut rig = Rig::new(true).await;
    rig.claimed_run("r", JobState::Running, live_status());
    rig.keeper.tick().await;
    assert!(rig.gate.lane(Lane::Run).healthy());
    rig.backend.lock().run_renewal_no_content = true;
    let report = rig.keeper.renewer.round().await;
    assert!(report.runs.is_none(), "a 204 is not a renewal");
    assert!(report.publishes.is_some());
    assert!(!rig.gate.lane(Lane::Run).healthy());
    assert!(rig.gate.lane(Lane::Publish).healthy());
    rig.backend.lock().run_renewal_no_content = false;
    rig.keeper.renewer.round().await;
    assert!(rig.gate.lane(Lane::Run).healthy());
}

/// Evidence is read at the first sign (FailureTarget, the pod terminating),
/// kept while the pod disappears, and reported once the Job is Failed.
#[tokio::test]
async fn an_evicted_pods_evidence_is_captured_before_it_disappears() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("ev", JobState::Running, live_status());
    let mut running = pod_json(
        &name,
        json!({"phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}],
        "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-11-29T16:59:02Z"}}}]}),
    );
    running["metadata"]["deletionTimestamp"] = json!("2026-11-29T17:01:00Z");
    rig.kube
        .put_pod(running, "step 3/5\nSIGTERM received, handing over");
    rig.keeper.tick().await;
    // FailureTarget, the pod terminating: the first sign.
    rig.job(job_json(
        &name,
        "ev",
        &claim_tag("token-of-ev"),
        "run",
        failure_target_status(),
    ));
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.captured, std::slice::from_ref(&name));
    assert!(report.reported_dead().is_empty(), "not Failed yet");
    // The pod is gone (its finalizer removed, the kubelet done), then Failed.
    rig.kube.lock().pods.clear();
    rig.job(job_json(
        &name,
        "ev",
        &claim_tag("token-of-ev"),
        "run",
        failed_status(1),
    ));
    let report = rig.keeper.tick().await;
    assert_eq!(report.reported_dead(), ["ev"]);
    let s = rig.backend.lock();
    let detail = s.status_reports[0].2["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.starts_with("pod evicted (DisruptionTarget: EvictionByEvictionAPI")
            && detail.contains("SIGTERM received, handing over"),
        "{detail}"
    );
}

/// A log that cannot be read is tried a bounded number of times; the report
/// then says so instead of leaving it out.
#[tokio::test]
async fn an_unreadable_log_is_retried_then_named_in_the_report() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("nolog", JobState::Running, failed_status(1));
    rig.kube
        .put_pod(pod_json(&name, oom_pod_status()), "never read");
    rig.kube.lock().logs_fail = true;
    let mut reported = Vec::new();
    for _ in 0..4 {
        let report = rig.keeper.tick().await;
        reported.extend(report.reported_dead().into_iter().map(str::to_owned));
    }
    assert_eq!(reported, ["nolog"]);
    // capture + 2 retries + the re-read at report time
    assert!(
        rig.kube.lock().log_reads >= 3,
        "{}",
        rig.kube.lock().log_reads
    );
    let s = rig.backend.lock();
    let detail = s.status_reports[0].2["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("OOMKilled")
            && detail.contains("logs unreadable: ")
            && detail.contains("i/o timeout"),
        "{detail}"
    );
}

/// The view shows no Job for a lapsed job, but the API does: the report is
/// not made (a view can miss a Job; a report cannot be taken back).
#[tokio::test]
async fn a_job_gone_from_the_view_is_confirmed_against_the_api_before_it_is_lost() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("hidden", JobState::Running, live_status());
    // The view loses the Job (as a quiet watch might), the API still has it.
    let job = rig.kube.lock().jobs[&name].clone();
    rig.cache
        .apply(Event::Delete(serde_json::from_value::<Job>(job).unwrap()));
    rig.backend.advance(200);
    let report = rig.keeper.tick().await;
    assert!(report.reports.judged_runs);
    assert!(report.reports.lost_runs.is_empty());
    assert!(rig.backend.lock().lost_reports.is_empty());
    assert_eq!(rig.kube.lock().job_lists.len(), 1, "one confirming read");
    // Once the API agrees it is gone, it is reported.
    rig.kube.lock().jobs.clear();
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.lost_runs, ["hidden"]);
}

/// A Job that shows failure and cannot finish failing (its pod stuck
/// terminating on a lost node) is judged dead after its pods' grace plus
/// the margin: no longer renewed, its death reported naming the node.
#[tokio::test]
async fn a_job_that_cannot_finish_failing_is_judged_dead() {
    let margin = Duration::from_millis(300);
    let mut rig = Rig::with(false, |c| c.terminating_margin = margin).await;
    let name = rig.claimed_run("lostnode", JobState::Running, live_status());
    let mut job = job_json(
        &name,
        "lostnode",
        &claim_tag("token-of-lostnode"),
        "run",
        failure_target_status(),
    );
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(0);
    let mut pod = pod_json(
        &name,
        json!({"phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager", "message": "Taint manager: deleting due to NoExecute taint"}],
        "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-11-29T16:59:02Z"}}}]}),
    );
    pod["spec"]["nodeName"] = json!("node-b");
    pod["metadata"]["deletionTimestamp"] = json!("2026-11-29T17:05:00Z");
    rig.kube.put_pod(pod, "working on step 4");
    let first_sign = tokio::time::Instant::now();
    rig.job(job);
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.captured, std::slice::from_ref(&name));
    assert!(report.reports.judged_dead.is_empty());
    assert_eq!(
        rig.backend.lock().run_renewals.last().unwrap(),
        &vec!["lostnode".to_string()]
    );
    let report = rig
        .tick_until("the stuck Job judged dead", |r| {
            !r.reports.judged_dead.is_empty()
        })
        .await;
    assert!(
        first_sign.elapsed() >= margin,
        "not before grace (0 s) plus margin"
    );
    assert_eq!(report.reports.judged_dead, std::slice::from_ref(&name));
    assert_eq!(report.reported_dead(), ["lostnode"]);
    assert_eq!(report.reports.reported_dead[0].1.as_str(), "node_lost");
    let detail = rig.backend.lock().status_reports[0].2["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.starts_with("node node-b lost")
            && detail.contains("DeletionByTaintManager")
            && detail.contains("working on step 4"),
        "{detail}"
    );
    rig.keeper.tick().await;
    assert_eq!(
        rig.backend.lock().run_renewals.last().unwrap(),
        &Vec::<String>::new(),
        "its lease is no longer renewed"
    );
}

/// A pod that can never start (its image cannot be pulled) holds its lane
/// and a renewed lease until the deadline, unless failed fast: after the
/// start grace its death is reported with a cause a person can act on, and
/// its Job deleted.
#[tokio::test]
async fn a_pod_that_never_starts_is_failed_fast() {
    let grace = Duration::from_millis(400);
    let mut rig = Rig::with(false, |c| c.start_grace = grace).await;
    let seen = tokio::time::Instant::now();
    let name = rig.claimed_run(
        "badimage",
        JobState::Dispatched,
        json!({"active": 1, "ready": 0}),
    );
    rig.kube.put_pod(
        pod_json(&name, json!({"phase": "Pending", "containerStatuses": [{"name": "driver",
            "image": "registry.example/driver:nope", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"registry.example/driver:nope\""}}}]})),
        "",
    );
    let report = rig
        .tick_until("the pod judged never to start", |r| {
            !r.reports.judged_dead.is_empty()
        })
        .await;
    assert!(seen.elapsed() >= grace, "not within the grace");
    assert_eq!(report.reports.judged_dead, std::slice::from_ref(&name));
    assert_eq!(report.reported_dead(), ["badimage"]);
    assert_eq!(report.reports.reported_dead[0].1.as_str(), "image_pull");
    assert_eq!(
        report.reports.deleted,
        std::slice::from_ref(&name),
        "deleted once reported"
    );
    assert_eq!(rig.kube.lock().deleted_jobs, std::slice::from_ref(&name));
    let detail = rig.backend.lock().status_reports[0].2["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.starts_with("pod never started: image pull failed for registry.example/driver:nope: ImagePullBackOff"),
        "{detail}"
    );
}

/// The start grace runs from the first sight of a pod, not of the Job: a
/// Job whose pod is not made for longer than the grace (a quota, a slow
/// controller) still gives its pod the whole grace once it appears. Until
/// then the Job is not remembered at all (at 100,000 pod-less Jobs that
/// memory was 6 MB).
#[tokio::test]
async fn the_start_grace_runs_from_the_first_pod_not_the_job() {
    let grace = Duration::from_millis(300);
    let mut rig = Rig::with(false, |c| c.start_grace = grace).await;
    let seen = tokio::time::Instant::now();
    let name = rig.claimed_run("slowpod", JobState::Dispatched, json!({"active": 0}));
    rig.tick_until("the grace passed with no pod", |r| {
        assert!(r.reports.judged_dead.is_empty(), "judged without a pod");
        seen.elapsed() > grace * 2
    })
    .await;

    let claim = name.rsplit('-').next().unwrap().to_owned();
    rig.job(job_json(
        &name,
        "slowpod",
        &claim,
        "run",
        json!({"active": 1, "ready": 0}),
    ));
    let pod_seen = tokio::time::Instant::now();
    rig.kube.put_pod(
        pod_json(&name, json!({"phase": "Pending", "containerStatuses": [{"name": "driver",
            "image": "registry.example/driver:nope", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]})),
        "",
    );
    let report = rig
        .tick_until("the pod judged never to start", |r| {
            !r.reports.judged_dead.is_empty()
        })
        .await;
    assert!(
        pod_seen.elapsed() >= grace,
        "judged {:?} after its pod appeared, within the grace",
        pod_seen.elapsed()
    );
    assert_eq!(report.reports.judged_dead, std::slice::from_ref(&name));
}

/// A backend that keeps refusing one job's death report (400) holds up no
/// other death: the rest are reported in the same tick, the refused one is
/// tried again only after its own back-off (not every tick), counted by
/// reason, and its evidence is not read again while it waits.
#[tokio::test]
async fn a_death_report_refused_for_one_job_holds_up_no_other() {
    let mut rig = Rig::new(false).await;
    for id in ["a-poisoned", "b-dead", "c-dead"] {
        let name = rig.claimed_run(id, JobState::Running, failed_status(1));
        rig.kube
            .put_pod(pod_json(&name, oom_pod_status()), "line\nkilled");
    }
    rig.backend
        .lock()
        .refuse_reports
        .insert("a-poisoned".into(), 400);

    let first = rig.keeper.tick().await;
    let mut dead = first.reported_dead();
    dead.sort();
    assert_eq!(
        dead,
        ["b-dead", "c-dead"],
        "sorted after the refused job, reported anyway"
    );
    assert_eq!(first.reports.failed_reports.len(), 1);
    assert_eq!(first.reports.failed_reports[0].1.as_str(), "rejected");
    let log_reads = rig.kube.lock().log_reads;

    // Ticks right after: the refused job is backing off, nothing is tried or read.
    for _ in 0..5 {
        let again = rig.keeper.tick().await;
        assert!(again.reports.failed_reports.is_empty(), "{again:?}");
    }
    let attempts = |rig: &Rig| {
        rig.backend
            .lock()
            .status_reports
            .iter()
            .filter(|(id, ..)| id == "a-poisoned")
            .count()
    };
    assert_eq!(attempts(&rig), 1, "not retried every tick");
    assert_eq!(
        rig.kube.lock().log_reads,
        log_reads,
        "its evidence is kept, not read again"
    );

    // The backend takes it once it stops refusing (after the 5 s back-off).
    rig.backend.lock().refuse_reports.clear();
    rig.tick_until("the refused death to land", |r| {
        r.reported_dead() == ["a-poisoned"]
    })
    .await;
    assert_eq!(attempts(&rig), 2);
    assert_eq!(
        rig.kube.lock().log_reads,
        log_reads,
        "the prepared report was reused"
    );
}

/// The same for lost reports: one job whose lost report is refused does not
/// stop the lane's other lost jobs.
#[tokio::test]
async fn a_lost_report_refused_for_one_job_holds_up_no_other() {
    let mut rig = Rig::new(false).await;
    for id in ["a-poisoned", "b-lost"] {
        rig.backend
            .add_run(id, JobState::Running, &format!("token-of-{id}"));
    }
    rig.backend.advance(600);
    rig.backend
        .lock()
        .refuse_reports
        .insert("a-poisoned".into(), 422);
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.lost_runs, ["b-lost"]);
    assert_eq!(report.reports.failed_reports.len(), 1);
    let again = rig.keeper.tick().await;
    assert!(
        again.reports.failed_reports.is_empty(),
        "backing off: {again:?}"
    );
    assert_eq!(
        rig.backend
            .lock()
            .lost_reports
            .iter()
            .filter(|(id, _)| id == "a-poisoned")
            .count(),
        1
    );
}

/// An entry of the active list in a state this dispatcher does not know is
/// skipped (with a warning); the other lapsed jobs are still judged.
#[tokio::test]
async fn an_unknown_state_in_the_active_list_skips_only_that_entry() {
    let mut rig = Rig::new(false).await;
    rig.backend.add_run("lapsed", JobState::Running, "t");
    rig.backend.advance(600);
    rig.backend.lock().active_extra.push(json!({
        "id": "strange", "state": "teleporting", "lease_expires_at": "2020-01-01T00:00:00Z"
    }));
    let report = rig.keeper.tick().await;
    assert!(report.reports.judged_runs);
    assert_eq!(report.reports.lost_runs, ["lapsed"]);
}

/// A Job deleted by hand while its driver ran is reported as what it was:
/// deleted by someone other than the dispatcher, with the pod's log tail
/// read at once (the pod is gone by the time it is reported).
#[tokio::test]
async fn a_job_deleted_by_hand_is_reported_with_the_tail_read_at_once() {
    let mut rig = Rig::new(false).await;
    let name = rig.claimed_run("deleted", JobState::Running, live_status());
    rig.kube.put_pod(
        pod_json(&name, json!({"phase": "Running"})),
        "step 1\nstep 2\nuploading",
    );
    rig.keeper.tick().await;
    // Deleted (the view of a tracked cache keeps a stand-in while the pod
    // terminates; this one is untracked, so the Job is simply gone): its
    // pod is read at once, and then it is gone too.
    rig.delete_job(&name);
    let first = rig.keeper.tick().await;
    assert_eq!(first.reported_dead(), ["deleted"]);
    let s = rig.backend.lock();
    let (_, _, body) = s
        .status_reports
        .iter()
        .find(|(id, ..)| id == "deleted")
        .expect("a death report");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("was deleted by someone other than the dispatcher"),
        "{detail}"
    );
    assert!(
        detail.contains("uploading"),
        "the tail read at once: {detail}"
    );
}

/// The rig's report loop alone, with its tick's time budget set to `budget`
/// (the run lane only, a 50 ms poll).
fn reporter_with_budget(rig: &Rig, budget: Duration) -> tcab_lease_keeper::run::reports::Reporter {
    use tcab_lease_keeper::inspect::Inspector;
    use tcab_lease_keeper::run::reports::{Reporter, ReporterParts};
    let cfg = config(false, Duration::from_millis(50));
    Reporter::new(ReporterParts {
        backend: rig.backend.client(),
        inspector: Inspector::new(
            rig.kube.client(),
            NS,
            "tcab-dispatcher",
            3,
            cfg.common.kube_timeout,
        ),
        jobs: rig.cache.clone(),
        store: rig.store.clone(),
        gate: rig.gate.clone(),
        judged_dead: Default::default(),
        publishing: false,
        lease_length: cfg.lease_length,
        poll: cfg.common.poll_interval,
        budget,
        settings: tcab_lease_keeper::run::failure_settings(&cfg),
        clock: test_clock(),
        namespace: NS.into(),
        events: tcab_shared::events::EventSender::off(),
    })
}

/// A burst of deaths is read side by side: eight failed drivers whose log
/// reads take 300 ms each are all read (first sign, then once more for the
/// report) and reported within one tick of a 1.5 s budget, which reads one
/// after another (4.8 s) could not fit.
#[tokio::test]
async fn a_burst_of_deaths_is_read_at_once_and_reported_in_one_tick() {
    let rig = Rig::new(false).await;
    let ids: Vec<String> = (0..8).map(|i| format!("d{i}")).collect();
    for id in &ids {
        let name = rig.claimed_run(id, JobState::Running, failed_status(1));
        rig.kube
            .put_pod(pod_json(&name, oom_pod_status()), "killed");
    }
    rig.kube.lock().log_delay = Duration::from_millis(300);
    let mut reporter = reporter_with_budget(&rig, Duration::from_millis(1500));
    let tick = reporter.tick_at(Some(false)).await;
    assert!(!tick.deferred, "{tick:?}");
    let mut dead: Vec<&str> = tick
        .reported_dead
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    dead.sort();
    assert_eq!(dead, ids, "every death of the burst reported in one tick");
}

/// A report tick reads the pods of a burst of failing Jobs side by side
/// (eight at once), and stops once its budget is spent, so many slow reads
/// cannot hold it past its liveness bound; what is left is read on the next
/// tick.
#[tokio::test]
async fn a_tick_reads_a_burst_at_once_stops_at_its_budget_and_the_next_one_goes_on() {
    use tcab_lease_keeper::run::READS_AT_ONCE;
    let rig = Rig::new(false).await;
    let burst = READS_AT_ONCE + 2;
    for i in 0..burst {
        let name = rig.claimed_run(&format!("j{i}"), JobState::Running, failure_target_status());
        rig.kube
            .put_pod(pod_json(&name, oom_pod_status()), "killed");
    }
    // Each log read takes 400 ms: one after another, eight would take 3.2 s.
    rig.kube.lock().log_delay = Duration::from_millis(400);
    let mut reporter = reporter_with_budget(&rig, Duration::from_millis(650));
    let first = reporter.tick_at(Some(false)).await;
    assert!(first.deferred, "{first:?}");
    assert_eq!(
        first.captured.len(),
        READS_AT_ONCE,
        "the first eight are read side by side within the budget; the rest are cut at it"
    );
    let second = reporter.tick_at(Some(false)).await;
    assert_eq!(
        second.captured.len(),
        burst - READS_AT_ONCE,
        "the ones left are read next tick"
    );
    assert!(!second.deferred);
}

impl Rig {
    /// A claimed publish at the backend, its token in the vault, and its
    /// publisher Job (with a uid, as the API server gives one).
    fn claimed_publish(&self, id: &str, job_status: Value) -> String {
        let token = format!("token-of-{id}");
        let claim = claim_tag(&token);
        self.backend.add_publish(id, &token);
        self.store.put(
            TokenKey::new(id, &claim),
            token.clone().into(),
            Lane::Publish,
            tokio::time::Instant::now(),
        );
        let name = job_name(Lane::Publish, id, &claim);
        let mut job = job_json(&name, id, &claim, "publish", job_status);
        job["metadata"]["uid"] = json!(format!("uid-{name}"));
        self.job(job);
        name
    }

    /// Answers every list of Events with `answer` (status, body).
    fn events_answer(&self, status: u16, body: Value) {
        self.kube.intercept(move |seen| {
            (seen.method == "GET"
                && seen
                    .uri
                    .starts_with(&format!("/api/v1/namespaces/{NS}/events")))
            .then(|| tcab_testkit::fake_kube::Answer::Json(status, body.clone()))
        });
    }
}

/// The Job controller's FailedCreate Event about the Job `name`.
fn refusal_event(name: &str, message: &str) -> Value {
    json!({
        "metadata": {"name": format!("{name}.1"), "namespace": NS},
        "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "name": name,
            "namespace": NS, "uid": format!("uid-{name}")},
        "reason": "FailedCreate", "type": "Warning",
        "message": format!("Error creating: {message}"),
        "firstTimestamp": "2026-11-29T16:59:01Z", "lastTimestamp": "2026-11-29T16:59:40Z",
        "count": 6,
    })
}

fn event_list(items: Vec<Value>) -> Value {
    json!({"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// How many times the keeper has listed Events.
fn event_lists(rig: &Rig) -> usize {
    rig.kube
        .requests()
        .iter()
        .filter(|r| r.starts_with(&format!("GET /api/v1/namespaces/{NS}/events")))
        .count()
}

/// Applies the deletion of a Job to the view, as its watch would.
fn view_deletes(rig: &Rig, job: Value) {
    rig.cache
        .apply(Event::Delete(serde_json::from_value::<Job>(job).unwrap()));
}

/// A run Job whose pod the API server refuses: past the start grace,
/// counted from its creation, it is judged never to start with the
/// refusal, its death reported with it the tick after, then its Job deleted.
#[tokio::test]
async fn a_run_whose_pod_is_refused_is_reported_dead_with_the_refusal_and_deleted() {
    // The Jobs were made a minute before the rig's clock: past a 30 s grace.
    let mut rig = Rig::with(false, |c| c.start_grace = Duration::from_secs(30)).await;
    let name = rig.claimed_run("refused", JobState::Dispatched, json!({}));
    let mut job = rig.kube.lock().jobs[&name].clone();
    job["metadata"]["uid"] = json!(format!("uid-{name}"));
    rig.job(job);
    let refusal = "pods \"tcab-driver-refused-x-\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1";
    rig.events_answer(200, event_list(vec![refusal_event(&name, refusal)]));
    let first = rig.keeper.tick().await;
    assert_eq!(first.reports.judged_dead, std::slice::from_ref(&name));
    assert_eq!(event_lists(&rig), 1);
    let report = rig
        .tick_until("the death reported", |r| !r.reported_dead().is_empty())
        .await;
    assert_eq!(report.reported_dead(), ["refused"]);
    assert_eq!(report.reports.reported_dead[0].1.as_str(), "refused");
    assert_eq!(report.reports.deleted, std::slice::from_ref(&name));
    let detail = rig.backend.lock().status_reports[0].2["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.starts_with("pod never started: the API server refused to create the Job's pod")
            && detail.contains(refusal),
        "{detail}"
    );
    assert_eq!(rig.kube.lock().deleted_jobs, std::slice::from_ref(&name));
    // Reported dead, then deleted: both Events on the Job, by its uid, with
    // the API server's refusal.
    let events = events_about(&rig, &name, 2).await;
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, ["ReportedDead", "DeletedRefused"]);
    for event in &events {
        assert_eq!(event["regarding"]["uid"], format!("uid-{name}"));
        let note = event["note"].as_str().unwrap_or_default();
        assert!(note.contains("exceeded quota: q"), "the refusal: {note}");
    }
}

/// A publisher Job whose pod the API server refuses (the namespace enforces
/// PodSecurity): past the start grace it is deleted, and its publish is
/// reported lost with the refusal once the Job is gone, without waiting
/// for its lease (the backend retries a lost publish).
#[tokio::test]
async fn a_publisher_whose_pod_is_refused_is_deleted_and_reported_lost_with_the_refusal_at_once() {
    let mut rig = Rig::with(true, |c| c.start_grace = Duration::from_secs(30)).await;
    let name = rig.claimed_publish("pub1", json!({}));
    let job = rig.kube.lock().jobs[&name].clone();
    let refusal = "pods \"tcab-publisher-pub1-x-\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true";
    rig.events_answer(200, event_list(vec![refusal_event(&name, refusal)]));
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.judged_dead, std::slice::from_ref(&name));
    assert_eq!(report.reports.deleted, std::slice::from_ref(&name));
    assert_eq!(rig.kube.lock().deleted_jobs, std::slice::from_ref(&name));
    assert!(
        rig.backend.lock().publish_results.is_empty(),
        "no result of its own"
    );
    assert!(
        report.reports.lost_publishes.is_empty(),
        "not while the view still shows its Job"
    );
    // The watch shows the Job gone; its lease still runs.
    view_deletes(&rig, job);
    let report = rig.keeper.tick().await;
    assert_eq!(report.reports.lost_publishes, ["pub1"]);
    let (id, detail) = rig.backend.lock().publish_lost_reports[0].clone();
    assert_eq!(id, "pub1");
    assert!(
        detail.contains(&format!("publisher Job {name} was deleted because its pod never started: the API server refused to create the Job's pod"))
            && detail.contains(refusal),
        "{detail}"
    );
    // Reported once.
    let again = rig.keeper.tick().await;
    assert!(again.reports.lost_publishes.is_empty());
    assert_eq!(rig.backend.lock().publish_lost_reports.len(), 1);
}

/// A Job with no pod and no refusal to be seen (a Job controller that is
/// down), or whose refusals cannot be read, is not failed: it waits, and
/// the report counts it.
#[tokio::test]
async fn a_job_without_a_pod_and_without_a_refusal_waits_and_is_counted() {
    // A refusal about another Job (another uid) does not count; nor does an
    // Events list the Role does not allow.
    let refusal_elsewhere = (
        200,
        event_list(vec![refusal_event("someone-else", "quota")]),
    );
    let forbidden = (
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden", "message": "events is forbidden"}),
    );
    for (status, answer) in [refusal_elsewhere, forbidden] {
        let mut rig = Rig::with(false, |c| c.start_grace = Duration::from_secs(30)).await;
        let name = rig.claimed_run("nopod", JobState::Dispatched, json!({}));
        rig.events_answer(status, answer);
        let report = rig.keeper.tick().await;
        assert_eq!(event_lists(&rig), 1, "the check ran ({status})");
        assert_eq!(report.reports.podless[Lane::Run], 1, "{status}");
        assert!(report.reports.judged_dead.is_empty() && report.reported_dead().is_empty());
        assert_eq!(
            report.renewed_runs.as_deref(),
            Some(&["nopod".to_string()][..]),
            "its lease renewed"
        );
        assert!(rig.kube.lock().deleted_jobs.is_empty());
        // Its pod comes: no longer counted.
        let mut job = rig.kube.lock().jobs[&name].clone();
        job["status"] = json!({"active": 1});
        rig.job(job);
        let report = rig.keeper.tick().await;
        assert_eq!(report.reports.podless[Lane::Run], 0);
    }
}

/// A Job the view shows without a pod, while the API already has one (the
/// view is behind), is not judged refused on an old refusal.
#[tokio::test]
async fn a_refused_job_whose_pod_exists_after_all_is_not_judged() {
    let mut rig = Rig::with(false, |c| c.start_grace = Duration::from_secs(30)).await;
    let name = rig.claimed_run("late", JobState::Dispatched, json!({}));
    let mut job = rig.kube.lock().jobs[&name].clone();
    job["metadata"]["uid"] = json!(format!("uid-{name}"));
    rig.job(job);
    rig.kube
        .put_pod(pod_json(&name, json!({"phase": "Pending"})), "");
    rig.events_answer(
        200,
        event_list(vec![refusal_event(&name, "exceeded quota")]),
    );
    let report = rig.keeper.tick().await;
    assert_eq!(event_lists(&rig), 1);
    assert!(report.reports.judged_dead.is_empty(), "{report:?}");
    assert!(report.reported_dead().is_empty());
    assert!(rig.kube.lock().deleted_jobs.is_empty());
}

/// A publisher Job judged dead (it cannot finish failing: a lost node) is
/// deleted; its publish is never reported lost while the Job exists (a
/// delete that fails keeps it), and is reported lost, with what its pod
/// showed, once the Job is gone, without waiting for its lease.
#[tokio::test]
async fn a_publisher_judged_dead_is_deleted_and_lost_only_once_its_job_is_gone() {
    let margin = Duration::from_millis(300);
    let mut rig = Rig::with(true, |c| c.terminating_margin = margin).await;
    let name = rig.claimed_publish("pubstuck", live_status());
    let mut job = rig.kube.lock().jobs[&name].clone();
    job["status"] = failure_target_status();
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(0);
    let mut pod = pod_json(
        &name,
        json!({"phase": "Running", "containerStatuses": [{"name": "publisher", "image": "publisher",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-11-29T16:59:02Z"}}}]}),
    );
    pod["spec"]["nodeName"] = json!("node-b");
    pod["metadata"]["deletionTimestamp"] = json!("2026-11-29T17:05:00Z");
    rig.kube.put_pod(pod, "publishing");
    // The delete does not go through at first: the Job stays, unfinished.
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let gate = refuse.clone();
    rig.kube.intercept(move |seen| {
        (seen.method == "DELETE" && gate.load(std::sync::atomic::Ordering::SeqCst)).then(|| {
            tcab_testkit::fake_kube::Answer::Json(
                500,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                    "reason": "InternalError", "message": "etcd is away"}),
            )
        })
    });
    rig.job(job.clone());
    rig.tick_until("the stuck publisher judged dead", |r| {
        !r.reports.judged_dead.is_empty()
    })
    .await;
    // Its lease lapses; the Job is still there, unfinished: not lost.
    rig.backend.advance(200);
    let report = rig.keeper.tick().await;
    assert!(report.reports.judged_publishes);
    assert!(report.reports.lost_publishes.is_empty(), "{report:?}");
    assert!(rig.backend.lock().publish_lost_reports.is_empty());
    assert!(rig.backend.lock().publish_results.is_empty());
    // The delete goes through: the Job is gone, and the publish is lost.
    refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    let report = rig
        .tick_until("the Job deleted", |r| !r.reports.deleted.is_empty())
        .await;
    assert_eq!(report.reports.deleted, std::slice::from_ref(&name));
    assert!(!rig.kube.lock().jobs.contains_key(&name), "deleted");
    view_deletes(&rig, job);
    let report = rig
        .tick_until("the publish reported lost", |r| {
            !r.reports.lost_publishes.is_empty()
        })
        .await;
    assert_eq!(report.reports.lost_publishes, ["pubstuck"]);
    let detail = rig.backend.lock().publish_lost_reports[0].1.clone();
    assert!(
        detail.contains(&format!(
            "publisher Job {name} was deleted because it was judged dead: node node-b lost"
        )),
        "{detail}"
    );
}
