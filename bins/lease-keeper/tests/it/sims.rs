//! The lease-keeper's run() against both simulators: kube-sim (Job
//! controller, kubelet, fake driver that reports to the backend) and the
//! reference backend (backend-sim, on a manual clock). The test plays the
//! admitter: it claims, Puts the token over gRPC, and creates the Job with
//! the admitter's builder (`tcab_admitter::job_builder`).

use crate::support::{SERVICE_TOKEN, config};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder::{JobSettings, driver_job};
use tcab_backend_sim::{ManualClock, SimHandle, SimOptions, spawn};
use tcab_lease_keeper::grpc as vault;
use tcab_lease_keeper::{Deps, run};
use tcab_proto::vault::{
    ClaimKey, Lane as PbLane, PutRequest, token_vault_client::TokenVaultClient,
};
use tcab_shared::Secret;
use tcab_shared::backend::{BackendClient, ClaimedRun};
use tcab_shared::config::{BinaryConfig, Env};
use tcab_shared::names::{self, claim_tag};
use tcab_shared::runtime::CancellationToken;
use tcab_testkit::wait::until;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const NS: &str = "tcab";

struct World {
    backend: SimHandle,
    client: BackendClient,
    http: reqwest::Client,
    cluster: tcab_kube_sim::SimHandle,
    kube: kube::Client,
    settings: JobSettings,
}

/// A running lease-keeper and the admitter's view of its vault.
struct RunningKeeper {
    url: String,
    /// How many `POST /jobs/leases` calls it has made (one per round).
    renewals: watch::Receiver<usize>,
    trigger: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

/// A pass-through in front of backend-sim for one lease-keeper, counting its
/// run renewals: every round starts with one `POST /jobs/leases`.
#[derive(Clone)]
struct RenewalCounter {
    target: String,
    http: reqwest::Client,
    renewals: Arc<watch::Sender<usize>>,
}

impl RenewalCounter {
    /// Serves on 127.0.0.1:0; returns its base URL and the renewal count.
    async fn start(target: String) -> (String, watch::Receiver<usize>) {
        let (renewals, count) = watch::channel(0);
        let proxy = RenewalCounter {
            target,
            http: reqwest::Client::new(),
            renewals: Arc::new(renewals),
        };
        let app = axum::Router::new()
            .fallback(RenewalCounter::forward)
            .with_state(proxy);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, count)
    }

    async fn forward(
        axum::extract::State(proxy): axum::extract::State<RenewalCounter>,
        request: axum::extract::Request,
    ) -> axum::response::Response {
        let (parts, body) = request.into_parts();
        if parts.method == http::Method::POST && parts.uri.path() == "/jobs/leases" {
            proxy.renewals.send_modify(|n| *n += 1);
        }
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let mut headers = parts.headers;
        headers.remove(http::header::HOST);
        let answer = proxy
            .http
            .request(parts.method, format!("{}{path}", proxy.target))
            .headers(headers)
            .body(body)
            .send()
            .await
            .unwrap();
        let mut response = axum::response::Response::builder().status(answer.status());
        if let Some(kind) = answer.headers().get(http::header::CONTENT_TYPE) {
            response = response.header(http::header::CONTENT_TYPE, kind);
        }
        response
            .body(axum::body::Body::from(answer.bytes().await.unwrap()))
            .unwrap()
    }
}

async fn deadline<T>(what: &str, secs: u64, f: impl Future<Output = T>) -> T {
    tcab_testkit::wait::within(what, Duration::from_secs(secs), f).await
}

impl World {
    async fn new() -> World {
        World::with_cluster_speed(1.0).await
    }

    /// A world whose simulated cluster runs `speed` times faster than real
    /// time (its grace periods, tolerations and pod GC).
    async fn with_cluster_speed(speed: f64) -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut opts = SimOptions::in_memory(SERVICE_TOKEN);
        opts.clock = Arc::new(ManualClock::new("2026-11-29T17:00:00Z".parse().unwrap()));
        let backend = spawn(opts).await.unwrap();
        let client = BackendClient::new(
            &backend.url(),
            Secret::new(SERVICE_TOKEN),
            Duration::from_secs(5),
        )
        .unwrap();
        let cluster = tcab_kube_sim::spawn(tcab_kube_sim::SimOptions {
            namespace: NS.into(),
            speed,
            ..Default::default()
        })
        .await
        .unwrap();
        let kube = tcab_shared::kube_api::client_from(cluster.kube_config(None).unwrap()).unwrap();
        let vars: Vec<(String, String)> = [
            ("TCAB_BACKEND_URL", backend.url()),
            ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN.into()),
            ("TCAB_DRIVER_IMAGE", "driver:test".into()),
            ("POD_NAMESPACE", NS.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let settings = AdmitterConfig::from_env(&Env::from_vars(vars).unwrap())
            .unwrap()
            .jobs;
        World {
            backend,
            client,
            http: reqwest::Client::new(),
            cluster,
            kube,
            settings,
        }
    }

    async fn keeper(&self) -> RunningKeeper {
        self.keeper_with(|_| {}).await
    }

    /// A keeper whose configuration `tune` changes first.
    async fn keeper_with(
        &self,
        tune: impl FnOnce(&mut tcab_lease_keeper::LeaseKeeperConfig),
    ) -> RunningKeeper {
        let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (backend_url, renewals) = RenewalCounter::start(self.backend.url()).await;
        let mut cfg = config(false, Duration::from_millis(50));
        cfg.common.namespace = Some(NS.into());
        tune(&mut cfg);
        cfg.log_tail_lines = 5;
        let deps = Deps {
            namespace: NS.into(),
            backend: BackendClient::new(
                &backend_url,
                Secret::new(SERVICE_TOKEN),
                Duration::from_secs(5),
            )
            .unwrap(),
            kube: self.kube.clone(),
            vault_listener: listener,
            clock: tcab_shared::WallClock::system(),
        };
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        let task = tokio::spawn(run(cfg, deps, shutdown));
        RunningKeeper {
            url,
            renewals,
            trigger,
            task,
        }
    }

    /// Enqueues a run scripted to hang in `running`, claims it, Puts its
    /// token into the keeper's vault, and creates its driver Job.
    async fn admit_hanging_run(&self, keeper: &RunningKeeper) -> (ClaimedRun, String) {
        self.admit_hanging_run_with(keeper, &self.settings).await
    }

    /// [`World::admit_hanging_run`] with its Job built from `settings`.
    async fn admit_hanging_run_with(
        &self,
        keeper: &RunningKeeper,
        settings: &JobSettings,
    ) -> (ClaimedRun, String) {
        let body = json!({"harness": "h", "model": "m", "case": "c", "jam": null,
                          "launch_request": {"sim": {"hang": true, "log_lines": 2, "sandbox": false}}});
        let r = self
            .http
            .post(format!("{}/jobs", self.backend.url()))
            .bearer_auth(SERVICE_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let run = self.client.claim_run().await.unwrap().expect("claimable");
        let claim = claim_tag(run.token.expose());
        let mut tv = TokenVaultClient::connect(keeper.url.clone()).await.unwrap();
        tv.put(PutRequest {
            key: Some(ClaimKey {
                job_id: run.id.clone(),
                claim,
            }),
            token: run.token.expose().to_owned(),
            lane: PbLane::Run as i32,
        })
        .await
        .unwrap();
        let job = driver_job(settings, &run);
        let name = job.name_any();
        Api::<Job>::namespaced(self.kube.clone(), NS)
            .create(&PostParams::default(), &job)
            .await
            .unwrap();
        (run, name)
    }

    async fn view(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/jobs/{id}", self.backend.url()))
            .bearer_auth(SERVICE_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn wait_state(&self, id: &str, state: &str) -> Value {
        let what = format!("job {id} {state}");
        until(&what, Duration::from_secs(20), || async {
            let v = self.view(id).await;
            (v["state"] == state).then_some(v)
        })
        .await
    }

    async fn pod_of(&self, job_name: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), NS);
        let lp = ListParams::default().labels(&names::selector(names::JOB_NAME, job_name));
        pods.list(&lp).await.unwrap().items[0].name_any()
    }
}

impl RunningKeeper {
    /// Waits until the keeper has finished `n` more whole renewal rounds.
    /// Renewal rounds run one after another in the renewal loop, so once the
    /// renewal count passes `now + n`, the `n` rounds that started after now
    /// have all finished. (Judgements run beside them in the report loop.)
    async fn rounds(&self, n: usize) {
        let mut renewals = self.renewals.clone();
        let target = *renewals.borrow_and_update() + n + 1;
        deadline("renewal rounds", 20, renewals.wait_for(|&c| c >= target))
            .await
            .expect("the renewal counter is alive");
    }

    async fn stop(self) {
        self.trigger.cancel();
        deadline("keeper stops", 10, self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_driver_is_reported_with_oomkilled_and_its_log_tail() {
    let w = World::new().await;
    let keeper = w.keeper().await;
    let (run, job_name) = w.admit_hanging_run(&keeper).await;
    w.wait_state(&run.id, "running").await;
    let pod = w.pod_of(&job_name).await;
    w.cluster.admin().oom_kill(NS, &pod).await.unwrap();

    let view = w.wait_state(&run.id, "failed").await;
    let detail = view["detail"].as_str().unwrap();
    assert!(detail.contains("OOMKilled"), "{detail}");
    assert!(
        detail.contains("hanging") && detail.contains("running: step 2/2"),
        "the log tail: {detail}"
    );
    assert_eq!(view["failure_kind"], "infrastructure");
    assert_eq!(view["lost"], false, "a death report, not a lost report");

    keeper.rounds(3).await;
    let history = w.view(&run.id).await["history"].as_array().unwrap().clone();
    assert_eq!(
        history.iter().filter(|h| h["state"] == "failed").count(),
        1,
        "reported once"
    );
    keeper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_whose_pod_vanished_while_the_keeper_was_down_is_lost_within_one_lease_of_its_return()
 {
    // 100x: pod GC's 20 s period and 40 s quarantine take well under a second.
    let w = World::with_cluster_speed(100.0).await;
    let first = w.keeper().await;
    let (run, job_name) = w.admit_hanging_run(&first).await;
    w.wait_state(&run.id, "running").await;
    first.rounds(2).await;
    first.stop().await;

    // While the keeper is down, the driver's node dies and its Node object
    // is deleted: once the node has been gone for pod GC's quarantine, the
    // pod is force-deleted.
    let pods: Api<Pod> = Api::namespaced(w.kube.clone(), NS);
    let pod = pods.get(&w.pod_of(&job_name).await).await.unwrap();
    let node = pod.spec.unwrap().node_name.unwrap();
    assert!(w.cluster.admin().crash_node(&node).await.unwrap() >= 1);
    w.cluster.admin().delete_node(&node).await.unwrap();
    let lp = ListParams::default().labels(&names::selector(names::JOB_NAME, &job_name));
    until(
        "pod GC removes the pod",
        Duration::from_secs(20),
        || async { pods.list(&lp).await.unwrap().items.is_empty().then_some(()) },
    )
    .await;

    // The keeper returns with an empty vault; the backend's clock has not
    // moved, so the lease its predecessor set still runs.
    let second = w.keeper().await;
    second.rounds(3).await;
    assert_eq!(
        w.view(&run.id).await["state"],
        "running",
        "not judged before the lease lapses"
    );

    w.backend.advance_clock(Duration::from_secs(120));
    let view = w.wait_state(&run.id, "failed").await;
    assert_eq!(view["lost"], true, "{view}");
    let detail = view["detail"].as_str().unwrap();
    assert!(
        detail.contains("driver Job") && detail.contains("pod ran and was deleted"),
        "names what the cluster shows: {detail}"
    );
    assert!(
        view["retry_id"].is_string(),
        "retried as an infrastructure failure"
    );
    second.stop().await;
}

/// How many times the cluster has answered a list of Events.
async fn event_lists(w: &World) -> u64 {
    let counters = w.cluster.admin().counters().await.unwrap();
    counters.requests.get("list events").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_job_whose_pod_the_api_server_refuses_is_reported_with_the_refusal_after_the_grace()
 {
    let w = World::new().await;
    let keeper = w
        .keeper_with(|c| c.start_grace = Duration::from_secs(2))
        .await;
    // The ServiceAccount admission plugin refuses every pod of the Job: the
    // Job controller records FailedCreate Events and the Job counts no pod.
    let mut settings = w.settings.clone();
    settings.driver_service_account = Some("missing-sa".into());
    let started = std::time::Instant::now();
    let (run, job_name) = w.admit_hanging_run_with(&keeper, &settings).await;
    let view = w.wait_state(&run.id, "failed").await;
    let waited = started.elapsed();
    let detail = view["detail"].as_str().unwrap();
    assert!(
        detail.contains("refused to create the Job's pod")
            && detail.contains("serviceaccount \"missing-sa\" not found"),
        "the API server's refusal, quoted: {detail}"
    );
    assert_eq!(view["failure_kind"], "infrastructure");
    assert_eq!(view["lost"], false, "a death report, not a lost report");
    // (A creation time is whole seconds: a Job may read up to 1 s older.)
    assert!(
        waited >= Duration::from_secs(1),
        "not before the grace: {waited:?}"
    );
    // Then the Job is deleted: its slot is free.
    let jobs: Api<Job> = Api::namespaced(w.kube.clone(), NS);
    until(
        "the refused Job deleted",
        Duration::from_secs(20),
        || async {
            jobs.get_opt(&job_name)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    keeper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_job_without_a_pod_and_without_a_refusal_waits_past_the_grace() {
    let w = World::new().await;
    let keeper = w
        .keeper_with(|c| c.start_grace = Duration::from_secs(1))
        .await;
    // The Job controller makes no pod and records nothing (as when it is
    // down): no refusal can be seen.
    w.cluster.admin().never_pod_next(1).await.unwrap();
    let (run, job_name) = w.admit_hanging_run(&keeper).await;
    // Past the grace the keeper looks for a refusal, twice.
    until(
        "two reads of the refusals",
        Duration::from_secs(20),
        || async { (event_lists(&w).await >= 2).then_some(()) },
    )
    .await;
    keeper.rounds(2).await;
    assert_eq!(w.view(&run.id).await["state"], "dispatched", "not failed");
    let jobs: Api<Job> = Api::namespaced(w.kube.clone(), NS);
    assert!(
        jobs.get_opt(&job_name).await.unwrap().is_some(),
        "not deleted"
    );
    keeper.stop().await;
}
