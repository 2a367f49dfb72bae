//! The vault and the gate over real gRPC on 127.0.0.1:0.

use kube::runtime::watcher::Event;
use std::time::Duration;
use tcab_lease_keeper::gate::Gate;
use tcab_lease_keeper::grpc as vault;
use tcab_lease_keeper::tokens::{TokenKey, TokenStore};
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_proto::tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tcab_proto::vault::{
    ClaimKey, ForgetRequest, Lane, PutRequest, VerdictRequest,
    admission_gate_client::AdmissionGateClient, token_vault_client::TokenVaultClient,
};
use tcab_shared::job_cache::OwnedJobs;
use tcab_shared::runtime::CancellationToken;

fn key(id: &str, claim: &str) -> Option<ClaimKey> {
    Some(ClaimKey {
        job_id: id.into(),
        claim: claim.into(),
    })
}

#[tokio::test]
async fn put_forget_gate_and_health_over_grpc() {
    let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let store = TokenStore::new();
    let view = OwnedJobs::new();
    let gate = Gate::new(true, view.clone());
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let server = tokio::spawn(vault::serve(
        listener,
        store.clone(),
        gate.clone(),
        shutdown,
    ));
    let url = format!("http://{addr}");

    let mut tv = TokenVaultClient::connect(url.clone()).await.unwrap();
    tv.put(PutRequest {
        key: key("job-1", "c1"),
        token: "tok-1".into(),
        lane: Lane::Run as i32,
    })
    .await
    .unwrap();
    assert_eq!(
        store.get(&TokenKey::new("job-1", "c1")).unwrap().expose(),
        "tok-1"
    );

    // Bad input is refused with a clear status and stores nothing.
    let err = tv
        .put(PutRequest {
            key: key("job-2", "c1"),
            token: "t".into(),
            lane: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("lane"));
    let err = tv
        .put(PutRequest {
            key: None,
            token: "t".into(),
            lane: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = tv
        .put(PutRequest {
            key: key("job-2", "c1"),
            token: String::new(),
            lane: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(store.len(), 1);

    tv.forget(ForgetRequest {
        key: key("job-1", "c1"),
    })
    .await
    .unwrap();
    tv.forget(ForgetRequest {
        key: key("job-1", "c1"),
    })
    .await
    .unwrap();
    assert!(store.get(&TokenKey::new("job-1", "c1")).is_none());

    // The gate: nothing renewed and the view not listed, then per lane.
    let mut ag = AdmissionGateClient::connect(url.clone()).await.unwrap();
    let ask = |lane: Lane| VerdictRequest {
        lane: lane as i32,
        max_age_ms: 60_000,
    };
    let verdict = |gate: tcab_proto::vault::LaneGate| GateVerdict::from_wire(gate);
    let reason = |v: GateVerdict| match v {
        GateVerdict::Closed(c) => Some((c.reason, c.detail)),
        GateVerdict::Open => None,
    };
    let s = ag.verdict(ask(Lane::Run)).await.unwrap().into_inner();
    let (why, detail) = reason(verdict(s)).expect("closed before the view listed");
    assert_eq!(why, GateReason::ViewNotCurrent);
    assert!(detail.contains("not listed"), "{detail}");
    view.apply(Event::Init);
    view.apply(Event::InitDone);
    gate.succeeded(tcab_shared::Lane::Run, tokio::time::Instant::now());
    gate.failed(tcab_shared::Lane::Publish, "503".into());
    let runs = ag.verdict(ask(Lane::Run)).await.unwrap().into_inner();
    assert_eq!(verdict(runs), GateVerdict::Open);
    let publishes = ag.verdict(ask(Lane::Publish)).await.unwrap().into_inner();
    let (why, detail) = reason(verdict(publishes)).expect("the failing lane is closed");
    assert_eq!(why, GateReason::RenewalFailing);
    assert!(detail.contains("503"), "{detail}");
    // The age limit is the asker's.
    let strict = VerdictRequest {
        lane: Lane::Run as i32,
        max_age_ms: 0,
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let runs = ag.verdict(strict).await.unwrap().into_inner();
    assert_eq!(reason(verdict(runs)).unwrap().0, GateReason::RenewalStale);
    // A lane is required.
    let err = ag
        .verdict(VerdictRequest {
            lane: 0,
            max_age_ms: 60_000,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // Health: overall and per service.
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in [
        "",
        "tcab.vault.v1.TokenVault",
        "tcab.vault.v1.AdmissionGate",
    ] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            ServingStatus::Serving as i32,
            "service {service:?}"
        );
    }

    trigger.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok());
}

#[tokio::test]
async fn non_loopback_is_refused_unless_allowed() {
    let err = vault::bind("0.0.0.0:0".parse().unwrap(), false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, vault::VaultError::NonLoopback { .. }),
        "{err}"
    );
    // Allowed explicitly, it binds.
    let listener = vault::bind("0.0.0.0:0".parse().unwrap(), true)
        .await
        .unwrap();
    assert!(listener.local_addr().unwrap().ip().is_unspecified());
}
