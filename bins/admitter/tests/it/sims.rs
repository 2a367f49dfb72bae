//! Loop tests against the two simulators: the reference backend
//! (backend-sim) and kube-sim (a real API server with watches, a Job
//! controller and fake drivers). The gate is the rig's fake lease-keeper.

use crate::support::*;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::{Deps, run};
use tcab_shared::names;
use tcab_shared::runtime::CancellationToken;
use tcab_testkit::wait::settled;
use tokio::task::JoinHandle;

const NS: &str = "tcab";

struct Sims {
    backend: tcab_backend_sim::SimHandle,
    cluster: tcab_kube_sim::SimHandle,
    gate: gate::FakeGate,
    http: reqwest::Client,
}

impl Sims {
    async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let backend = tcab_backend_sim::spawn(tcab_backend_sim::SimOptions::in_memory(
            backend::SERVICE_TOKEN,
        ))
        .await
        .unwrap();
        let cluster = tcab_kube_sim::spawn(tcab_kube_sim::SimOptions {
            namespace: NS.into(),
            speed: 10.0,
            ..Default::default()
        })
        .await
        .unwrap();
        Sims {
            backend,
            cluster,
            gate: gate::FakeGate::start().await,
            http: reqwest::Client::new(),
        }
    }

    fn kube(&self) -> kube::Client {
        tcab_shared::kube_api::client_from(self.cluster.kube_config(None).unwrap()).unwrap()
    }

    fn config(&self, extra: &[(&str, &str)]) -> AdmitterConfig {
        let mut vars = vec![
            ("POD_NAMESPACE", NS),
            ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "0.02"),
        ];
        vars.extend_from_slice(extra);
        config(&self.backend.url(), self.gate.addr, &vars)
    }

    fn start_admitter(
        &self,
        config: AdmitterConfig,
    ) -> (CancellationToken, JoinHandle<anyhow::Result<()>>) {
        let deps = Deps {
            kube: self.kube(),
            namespace: NS.into(),
            backend: backend_client(&self.backend.url()),
        };
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        (trigger, tokio::spawn(run(config, deps, shutdown)))
    }

    async fn post(&self, path: &str, body: Value) {
        let answer = self
            .http
            .post(format!("{}{path}", self.backend.url()))
            .bearer_auth(backend::SERVICE_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
    }

    /// Enqueues runs whose fake drivers follow `script`.
    async fn enqueue_runs(&self, n: usize, script: Value) {
        let runs: Vec<Value> = (0..n)
            .map(|i| {
                json!({"harness": "h", "model": "m", "case": format!("c{i}"), "jam": null,
                            "launch_request": {"case": format!("c{i}"), "sim": script}})
            })
            .collect();
        self.post("/jobs/batch", json!({"runs": runs})).await;
    }

    /// How many jobs of a kind (`jobs`, `publish-jobs`) are in `state`.
    async fn count(&self, kind: &str, state: &str) -> usize {
        let body: Value = self
            .http
            .get(format!("{}/{kind}?state={state}", self.backend.url()))
            .bearer_auth(backend::SERVICE_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = if kind == "jobs" {
            "jobs"
        } else {
            "publish_jobs"
        };
        body[key].as_array().map_or(0, Vec::len)
    }

    async fn live(&self, kind: &str) -> i64 {
        let counters = self.cluster.admin().counters().await.unwrap();
        counters.live_jobs.get(kind).copied().unwrap_or(0)
    }

    async fn max_live(&self, kind: &str) -> i64 {
        let counters = self.cluster.admin().counters().await.unwrap();
        counters.max_live_jobs.get(kind).copied().unwrap_or(0)
    }

    async fn wait_for(&self, what: &str, kind: &str, state: &str, n: usize) {
        settled(what, Duration::from_secs(20), async || {
            let got = self.count(kind, state).await;
            if got == n {
                Ok(())
            } else {
                Err(format!("{got} {kind} {state}, wanted {n}"))
            }
        })
        .await
    }
}

async fn stop(trigger: CancellationToken, handle: JoinHandle<anyhow::Result<()>>) {
    trigger.cancel();
    within("run() returns", handle).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_admitter_counts_the_jobs_already_there() {
    let sims = Sims::start().await;
    sims.enqueue_runs(6, json!({"hang": true, "sandbox": false, "log_lines": 0}))
        .await;
    let config = sims.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "3")]);

    let (trigger, first) = sims.start_admitter(config.clone());
    sims.wait_for("first admitter fills its lane", "jobs", "queued", 3)
        .await;
    stop(trigger, first).await;
    assert_eq!(sims.live("run").await, 3, "three hanging driver Jobs stay");

    // A publish lets the test see the second admitter at work.
    sims.post(
        "/publish-jobs",
        json!({"request": {"sim": {"duration_ms": 50}}}),
    )
    .await;
    let (trigger, second) = sims.start_admitter(config);
    sims.wait_for("the publish admitted", "publish-jobs", "queued", 0)
        .await;
    assert_eq!(
        sims.count("jobs", "queued").await,
        3,
        "the run lane was full from the start"
    );

    // Free one slot: the second admitter admits exactly one more run.
    let jobs: Api<Job> = Api::namespaced(sims.kube(), NS);
    let drivers = jobs
        .list(&ListParams::default().labels(&names::selector(names::JOB_KIND, "run")))
        .await
        .unwrap();
    assert_eq!(drivers.items.len(), 3);
    jobs.delete(&drivers.items[0].name_any(), &DeleteParams::background())
        .await
        .unwrap();
    sims.wait_for("one run admitted into the freed slot", "jobs", "queued", 2)
        .await;
    stop(trigger, second).await;
    assert_eq!(
        sims.max_live("run").await,
        3,
        "the cap held across the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_500_three_times_is_settled_at_once_and_never_holds_the_lane() {
    let sims = Sims::start().await;
    // One slot: had the failed create held it, the second run would wait
    // for the lane (formerly 15 minutes) and the first for its lease to lapse.
    let config = sims.config(&[
        ("TCAB_PUBLISHER_IMAGE", ""),
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
    ]);
    let (trigger, handle) = sims.start_admitter(config);
    // The start-up dry run is a create too: the faults are for the runs' Jobs.
    tcab_testkit::wait::until("the start-up dry run", PATIENCE, || async {
        let counters = sims.cluster.admin().counters().await.ok()?;
        (counters.requests.get("create jobs").copied() == Some(1)).then_some(())
    })
    .await;
    sims.cluster
        .admin()
        .api_fault(&tcab_kube_sim::ApiFault {
            mode: tcab_kube_sim::ApiFaultMode::Error500,
            count: 3,
            retry_after_seconds: None,
            delay_ms: None,
            resource: Some("jobs".into()),
            verb: Some("create".into()),
        })
        .await
        .unwrap();
    sims.enqueue_runs(
        2,
        json!({"duration_ms": 100, "sandbox": false, "log_lines": 0}),
    )
    .await;
    // Without the backend's clock moving: no lease lapses, no requeue.
    sims.wait_for("both runs finished", "jobs", "succeeded", 2)
        .await;
    let jobs: Api<Job> = Api::namespaced(sims.kube(), NS);
    let items = jobs.list(&ListParams::default()).await.unwrap().items;
    let mut ids: Vec<String> = items
        .iter()
        .filter_map(|j| j.labels().get(names::JOB_ID).cloned())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        (items.len(), ids.len()),
        (2, 2),
        "one Job for each run, made under its first claim"
    );
    let requests = sims.cluster.admin().counters().await.unwrap().requests;
    assert_eq!(
        requests.get("create jobs").copied(),
        Some(6),
        "the start-up dry run, three failed creates, each read back and sent again, then one for the second run: {requests:?}"
    );
    assert_eq!(
        requests.get("get jobs").copied(),
        Some(3),
        "each unclear create read back once: {requests:?}"
    );
    assert_eq!(sims.gate.forgets(), [], "no claim was given up");
    stop(trigger, handle).await;
}
