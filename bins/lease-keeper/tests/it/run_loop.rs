//! `run()` end to end: the Job watch, the vault over real gRPC, the gate and
//! the tick loop, against a mock backend and a fake Kubernetes API.

use crate::support::*;
use std::time::Duration;
use tcab_lease_keeper::grpc as vault;
use tcab_lease_keeper::{Deps, run};
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_proto::vault::{
    ClaimKey, Lane as PbLane, PutRequest, VerdictRequest,
    admission_gate_client::AdmissionGateClient, token_vault_client::TokenVaultClient,
};
use tcab_shared::Lane;
use tcab_shared::backend::JobState;
use tcab_shared::names::{claim_tag, job_name};
use tcab_shared::runtime::CancellationToken;

/// Polls `cond` until it holds, failing after 15 s.
async fn eventually(what: &str, cond: impl FnMut() -> bool) {
    tcab_testkit::wait::eventually(what, Duration::from_secs(15), cond).await
}

#[tokio::test]
async fn waits_for_the_first_list_then_reports_a_death_with_the_vaulted_token() {
    let backend = MockBackend::start().await;
    let kube = FakeKube::start().await;
    kube.lock().list_ready = false;

    let token = "per-job-token-1";
    let claim = claim_tag(token);
    let name = job_name(Lane::Run, "j1", &claim);
    backend.add_run("j1", JobState::Running, token);
    kube.put_job(job_json(&name, "j1", &claim, "run", failed_status(1)));
    kube.put_pod(
        pod_json(&name, oom_pod_status()),
        "step 1\nstep 2\nstep 3\nstep 4",
    );
    backend.add_run("j2", JobState::Running, "t2");
    kube.put_job(job_json(
        &job_name(Lane::Run, "j2", "c2c2c2c2"),
        "j2",
        "c2c2c2c2",
        "run",
        live_status(),
    ));

    let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let deps = Deps {
        kube: kube.client(),
        namespace: NS.into(),
        backend: backend.client(),
        vault_listener: listener,
        clock: test_clock(),
    };
    let task = tokio::spawn(run(
        config(false, Duration::from_millis(50)),
        deps,
        shutdown,
    ));

    // The admitter's side: Put the token, read the gate.
    let mut tv = TokenVaultClient::connect(url.clone()).await.unwrap();
    tv.put(PutRequest {
        key: Some(ClaimKey {
            job_id: "j1".into(),
            claim: claim.clone(),
        }),
        token: token.into(),
        lane: PbLane::Run as i32,
    })
    .await
    .unwrap();
    let mut gate = AdmissionGateClient::connect(url).await.unwrap();
    let mut ask = async |lane: PbLane| {
        let request = VerdictRequest {
            lane: lane as i32,
            max_age_ms: 60_000,
        };
        GateVerdict::from_wire(gate.verdict(request).await.unwrap().into_inner())
    };
    match ask(PbLane::Run).await {
        GateVerdict::Closed(c) => assert_eq!(
            c.reason,
            GateReason::ViewNotCurrent,
            "no round before the view has listed"
        ),
        GateVerdict::Open => panic!("open before the view has listed"),
    }
    eventually("the Job list to be asked for (and held)", || {
        kube.lock().held_lists >= 1
    })
    .await;
    assert!(
        backend.lock().run_renewals.is_empty(),
        "never renews from a cache that has not listed"
    );

    kube.lock().list_ready = true;
    eventually("the death report", || {
        !backend.lock().status_reports.is_empty()
    })
    .await;
    eventually("a few more ticks", || {
        backend.lock().run_renewals.len() >= 3
    })
    .await;
    assert_eq!(ask(PbLane::Run).await, GateVerdict::Open);
    // This keeper does not renew publishes, so the publish lane stays closed.
    match ask(PbLane::Publish).await {
        GateVerdict::Closed(c) => {
            assert_eq!(c.reason, GateReason::LaneNotRenewed);
            assert!(c.detail.contains("publishing is off"), "{}", c.detail);
        }
        GateVerdict::Open => panic!("the publish lane is not renewed"),
    }

    {
        let s = backend.lock();
        assert_eq!(s.run_renewals[0], vec!["j2"]);
        assert_eq!(s.status_reports.len(), 1, "reported once");
        let (id, presented, body) = &s.status_reports[0];
        assert_eq!((id.as_str(), presented.as_str()), ("j1", token));
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains("OOMKilled") && detail.contains("step 4") && !detail.contains("step 1"),
            "{detail}"
        );
    }

    trigger.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
}

#[tokio::test]
async fn a_non_loopback_vault_listener_is_refused() {
    let backend = MockBackend::start().await;
    let kube = FakeKube::start().await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let deps = Deps {
        kube: kube.client(),
        namespace: NS.into(),
        backend: backend.client(),
        vault_listener: listener,
        clock: test_clock(),
    };
    let err = run(
        config(false, Duration::from_millis(50)),
        deps,
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("non-loopback"), "{err}");
}

/// SIGTERM lets the tick in flight finish: a death report that is on its
/// way to a slow backend is answered, then `run()` returns.
#[tokio::test]
async fn shutdown_lets_a_death_report_in_flight_finish() {
    let backend = MockBackend::start().await;
    let kube = FakeKube::start().await;
    let token = "per-job-token-2";
    let claim = claim_tag(token);
    let name = job_name(Lane::Run, "slow", &claim);
    backend.add_run("slow", JobState::Running, token);
    backend.lock().status_delay = Duration::from_millis(800);
    kube.put_job(job_json(&name, "slow", &claim, "run", failed_status(1)));
    kube.put_pod(pod_json(&name, oom_pod_status()), "the end");

    let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let deps = Deps {
        kube: kube.client(),
        namespace: NS.into(),
        backend: backend.client(),
        vault_listener: listener,
        clock: test_clock(),
    };
    let task = tokio::spawn(run(
        config(false, Duration::from_millis(50)),
        deps,
        shutdown,
    ));
    let mut tv = TokenVaultClient::connect(url).await.unwrap();
    tv.put(PutRequest {
        key: Some(ClaimKey {
            job_id: "slow".into(),
            claim: claim.clone(),
        }),
        token: token.into(),
        lane: PbLane::Run as i32,
    })
    .await
    .unwrap();
    eventually("the death report to be sent", || {
        backend.lock().status_received > 0
    })
    .await;
    assert_eq!(backend.lock().status_answered, 0, "still in flight");
    trigger.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(
        backend.lock().status_answered,
        1,
        "the report in flight was answered before run() returned"
    );
    assert_eq!(backend.state_of("slow"), JobState::Failed);
}
