//! The lease-keeper's `/status`, read over HTTP from `run()` as the binary
//! serves it: a death report the backend keeps refusing shows as the last
//! error with its job id and backs off; a backend that answers nothing but
//! 503 shows as failing renewals, counted, with the failing call's words,
//! until it answers again.

use crate::support::*;
use serde_json::Value;
use std::time::Duration;
use tcab_lease_keeper::grpc as vault;
use tcab_lease_keeper::{Deps, run};
use tcab_proto::vault::{
    ClaimKey, Lane as PbLane, PutRequest, token_vault_client::TokenVaultClient,
};
use tcab_shared::Lane;
use tcab_shared::backend::JobState;
use tcab_shared::names::{claim_tag, job_name};
use tcab_shared::runtime::CancellationToken;

/// The `/status` document at `addr` once `check` holds for it (15 s at most).
async fn status_when(addr: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let url = format!("http://{addr}/status");
    tcab_testkit::wait::within(what, Duration::from_secs(15), async {
        loop {
            if let Ok(answer) = reqwest::get(&url).await
                && let Ok(text) = answer.text().await
                && let Ok(doc) = serde_json::from_str::<Value>(&text)
                && check(&doc)
            {
                return doc;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn status_shows_a_refused_report_and_failing_renewals() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let backend = MockBackend::start().await;
    let kube = FakeKube::start().await;
    let token = "per-job-token-1";
    let claim = claim_tag(token);
    let name = job_name(Lane::Run, "j1", &claim);
    backend.add_run("j1", JobState::Running, token);
    backend.lock().refuse_reports.insert("j1".into(), 500);
    kube.put_job(job_json(&name, "j1", &claim, "run", failed_status(1)));
    kube.put_pod(pod_json(&name, oom_pod_status()), "step 1");

    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let addr = metrics.to_string();
    let mut config = config(false, Duration::from_millis(50));
    config.common.metrics_addr = Some(metrics);
    let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let deps = Deps {
        kube: kube.client(),
        namespace: NS.into(),
        backend: backend.client(),
        vault_listener: listener,
        clock: test_clock(),
    };
    let task = tokio::spawn(run(config, deps, shutdown.clone()));
    let mut tv = TokenVaultClient::connect(url).await.unwrap();
    tv.put(PutRequest {
        key: Some(ClaimKey {
            job_id: "j1".into(),
            claim,
        }),
        token: token.into(),
        lane: PbLane::Run as i32,
    })
    .await
    .unwrap();

    let refused = status_when(&addr, "the refused death report", |doc| {
        doc["reports"]["last_error"]["job_id"] == "j1"
    })
    .await;
    assert_eq!(refused["binary"], "tcab-lease-keeper");
    let error = &refused["reports"]["last_error"];
    assert_eq!(error["report"], "death", "{refused}");
    assert_eq!(error["lane"], "run");
    assert_eq!(error["reason"], "http_5xx");
    assert!(error["seconds_ago"].is_number() && error["at"].is_string());
    let healthy = status_when(&addr, "a report backing off, renewals healthy", |doc| {
        doc["reports"]["backing_off"].as_u64() >= Some(1)
            && doc["renewals"]["run"]["healthy"] == true
    })
    .await;
    let run_lane = &healthy["renewals"]["run"];
    assert_eq!(run_lane["failed_rounds_in_a_row"], 0);
    assert!(
        run_lane["last_success"]["seconds_ago"].is_number(),
        "{healthy}"
    );
    assert_eq!(healthy["renewals"]["publish"]["enabled"], false);

    // Every call answers 503: the renewals fail, counted, with their words.
    backend.set_down(true);
    let failing = status_when(&addr, "failing renewals", |doc| {
        doc["renewals"]["run"]["failed_rounds_in_a_row"].as_u64() >= Some(2)
    })
    .await;
    let run_lane = &failing["renewals"]["run"];
    assert_eq!(run_lane["healthy"], false, "{failing}");
    assert!(run_lane["failing"].is_string(), "{failing}");
    backend.set_down(false);
    status_when(&addr, "renewals healthy again", |doc| {
        doc["renewals"]["run"]["healthy"] == true
            && doc["renewals"]["run"]["failed_rounds_in_a_row"] == 0
    })
    .await;

    let text = reqwest::get(format!("http://{addr}/status"))
        .await
        .expect("the status")
        .text()
        .await
        .expect("its text");
    assert!(
        !text.contains(SERVICE_TOKEN) && !text.contains(token),
        "{text}"
    );
    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
}
