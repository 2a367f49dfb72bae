//! Against the reference backend (devkit/backend-sim, with its test clock)
//! and a fake Kubernetes API read through the real Job watch.

use crate::support::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tcab_backend_sim::{ManualClock, SimHandle, SimOptions, spawn};
use tcab_lease_keeper::Keeper;
use tcab_lease_keeper::tokens::{TokenKey, TokenStore};
use tcab_shared::Lane;
use tcab_shared::Secret;
use tcab_shared::backend::{BackendClient, ClaimedRun};
use tcab_shared::job_cache::{OwnedJobs, WatchSettings};
use tcab_shared::names::{claim_tag, job_name};

struct World {
    sim: SimHandle,
    client: BackendClient,
    http: reqwest::Client,
    kube: FakeKube,
}

impl World {
    async fn new() -> World {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("warn,tcab_lease_keeper=debug")
            .try_init();
        let mut opts = SimOptions::in_memory(SERVICE_TOKEN);
        opts.clock = Arc::new(ManualClock::new("2026-11-29T17:00:00Z".parse().unwrap()));
        let sim = spawn(opts).await.unwrap();
        let client = BackendClient::new(
            &sim.url(),
            Secret::new(SERVICE_TOKEN),
            Duration::from_secs(5),
        )
        .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        World {
            sim,
            client,
            http,
            kube: FakeKube::start().await,
        }
    }

    /// Enqueues and claims one run, and reports it `running` as its driver would.
    async fn running_run(&self) -> ClaimedRun {
        let body =
            json!({"harness": "h", "model": "m", "case": "c", "jam": null, "launch_request": {}});
        let r = self
            .http
            .post(format!("{}/jobs", self.sim.url()))
            .bearer_auth(SERVICE_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let run = self
            .client
            .claim_run()
            .await
            .unwrap()
            .expect("a claimable run");
        for state in ["starting", "running"] {
            self.driver_report(&run, json!({"state": state})).await;
        }
        run
    }

    async fn driver_report(&self, run: &ClaimedRun, body: Value) -> u16 {
        let r = self
            .http
            .post(format!("{}/jobs/{}/status", self.sim.url(), run.id))
            .bearer_auth(run.token.expose())
            .json(&body)
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    }

    async fn view(&self, id: &str) -> Value {
        let r = self
            .http
            .get(format!("{}/jobs/{id}", self.sim.url()))
            .bearer_auth(SERVICE_TOKEN)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    /// A keeper whose cache is the real watch over the fake API, once listed.
    async fn keeper(&self, store: &TokenStore) -> Keeper {
        let (jobs, _task) = OwnedJobs::watch(
            self.kube.client(),
            NS,
            "tcab-dispatcher",
            WatchSettings::default(),
        );
        tokio::time::timeout(Duration::from_secs(10), jobs.wait_current())
            .await
            .expect("the Job list");
        let cfg = config(false, Duration::from_millis(50));
        Keeper::new(
            &cfg,
            self.client.clone(),
            self.kube.client(),
            NS,
            jobs,
            store.clone(),
        )
        .with_clock(test_clock())
    }
}

#[tokio::test]
async fn an_oom_killed_driver_is_reported_with_oomkilled_and_its_log_tail() {
    let w = World::new().await;
    let run = w.running_run().await;
    let claim = claim_tag(run.token.expose());
    let name = job_name(Lane::Run, &run.id, &claim);
    w.kube
        .put_job(job_json(&name, &run.id, &claim, "run", failed_status(1)));
    w.kube.put_pod(
        pod_json(&name, oom_pod_status()),
        "cloning\nbuilding\nrunning tests\nallocating a huge buffer",
    );
    let store = TokenStore::new();
    store.put(
        TokenKey::new(&run.id, &claim),
        run.token.clone(),
        Lane::Run,
        tokio::time::Instant::now(),
    );

    let mut keeper = w.keeper(&store).await;
    let report = keeper.tick().await;
    assert_eq!(report.reported_dead(), std::slice::from_ref(&run.id));
    let view = w.view(&run.id).await;
    assert_eq!(view["state"], "failed");
    assert_eq!(view["failure_kind"], "infrastructure");
    let detail = view["detail"].as_str().unwrap();
    assert!(detail.contains("OOMKilled"), "{detail}");
    assert!(
        detail.contains("allocating a huge buffer") && !detail.contains("cloning"),
        "{detail}"
    );
    assert!(
        view["retry_id"].is_string(),
        "an infrastructure failure is retried"
    );

    // Reported once: further ticks leave it alone.
    assert!(keeper.tick().await.reported_dead().is_empty());
    assert!(store.is_empty());
}

#[tokio::test]
async fn a_driver_whose_pod_vanished_while_the_keeper_was_down_is_lost_within_one_lease() {
    let w = World::new().await;
    let run = w.running_run().await;
    // The previous lease-keeper renewed just before it went down; meanwhile
    // the driver's Job and pod vanished. The new keeper holds no token.
    w.client
        .renew_leases(tcab_shared::Lane::Run, std::slice::from_ref(&run.id))
        .await
        .unwrap();
    let store = TokenStore::new();
    let mut keeper = w.keeper(&store).await;

    let returned_at = w.sim.now();
    let mut reported_at = None;
    for _ in 0..30 {
        let report = keeper.tick().await;
        assert!(report.reports.judged_runs);
        if report.reports.lost_runs.contains(&run.id) {
            reported_at = Some(w.sim.now());
            break;
        }
        w.sim.advance_clock(Duration::from_secs(10));
    }
    let reported_at = reported_at.expect("reported lost");
    let waited = reported_at.duration_since(returned_at);
    assert!(
        waited <= jiff::SignedDuration::from_secs(120),
        "within one lease length: {waited:?}"
    );
    assert!(
        waited >= jiff::SignedDuration::from_secs(110),
        "not before the lease lapsed: {waited:?}"
    );
    let view = w.view(&run.id).await;
    assert_eq!(view["state"], "failed");
    assert_eq!(view["lost"], true);
    assert!(
        view["detail"]
            .as_str()
            .unwrap()
            .contains("driver Job no longer exists"),
        "{view}"
    );
}

#[tokio::test]
async fn a_late_terminal_report_supersedes_the_lost_outcome_and_the_keeper_carries_on() {
    let w = World::new().await;
    let run = w.running_run().await;
    let claim = claim_tag(run.token.expose());
    let name = job_name(Lane::Run, &run.id, &claim);
    // The driver exited; its terminal report has not landed.
    w.kube
        .put_job(job_json(&name, &run.id, &claim, "run", complete_status()));
    let store = TokenStore::new();
    let mut keeper = w.keeper(&store).await;
    w.sim.advance_clock(Duration::from_secs(121));
    let report = keeper.tick().await;
    assert_eq!(report.reports.lost_runs, std::slice::from_ref(&run.id));
    assert!(
        w.view(&run.id).await["detail"]
            .as_str()
            .unwrap()
            .contains("exited without its report landing")
    );

    // The late report lands and supersedes the lost outcome.
    assert_eq!(
        w.driver_report(&run, json!({"state": "succeeded"})).await,
        200
    );
    let view = w.view(&run.id).await;
    assert_eq!(
        (view["state"].as_str(), view["lost_superseded"].as_bool()),
        (Some("succeeded"), Some(true))
    );
    for _ in 0..3 {
        let report = keeper.tick().await;
        assert!(
            report.reports.judged_runs
                && report.reports.lost_runs.is_empty()
                && report.reported_dead().is_empty()
        );
        w.sim.advance_clock(Duration::from_secs(60));
    }
    assert_eq!(w.view(&run.id).await["state"], "succeeded");
}
