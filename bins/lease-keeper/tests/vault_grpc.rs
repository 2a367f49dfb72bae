//! The vault and the gate over real gRPC on 127.0.0.1:0.

use std::time::Duration;
use tcab_lease_keeper::gate::{Gate, RenewalRound};
use tcab_lease_keeper::vault::{self, TokenKey, TokenStore};
use tcab_proto::tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tcab_proto::vault::{
    ClaimKey, ForgetRequest, GetRequest, Lane, LastRenewalRequest, PutRequest,
    admission_gate_client::AdmissionGateClient, token_vault_client::TokenVaultClient,
};
use tcab_shared::tick::Shutdown;

fn key(id: &str, claim: &str) -> Option<ClaimKey> {
    Some(ClaimKey {
        job_id: id.into(),
        claim: claim.into(),
    })
}

#[tokio::test]
async fn put_get_forget_gate_and_health_over_grpc() {
    let listener = vault::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let store = TokenStore::new();
    let gate = Gate::new();
    let (trigger, shutdown) = Shutdown::channel();
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
    let got = tv
        .get(GetRequest {
            key: key("job-1", "c1"),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(got.found);
    assert_eq!(got.token, "tok-1");
    assert_eq!(
        store.get(&TokenKey::new("job-1", "c1")).unwrap().expose(),
        "tok-1"
    );
    let other = tv
        .get(GetRequest {
            key: key("job-1", "c2"),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!other.found && other.token.is_empty());

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
    assert!(
        !tv.get(GetRequest {
            key: key("job-1", "c1")
        })
        .await
        .unwrap()
        .into_inner()
        .found
    );

    // The gate: unobserved, then the recorded round.
    let mut ag = AdmissionGateClient::connect(url.clone()).await.unwrap();
    let s = ag
        .last_renewal(LastRenewalRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!s.observed);
    gate.record(RenewalRound {
        finished_at: tokio::time::Instant::now(),
        runs_renewed: true,
        publishes_renewed: false,
        detail: "publish renewal failed".into(),
    });
    let s = ag
        .last_renewal(LastRenewalRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(s.observed && s.runs_renewed && !s.publishes_renewed);
    assert!(s.age_ms < 60_000);
    assert_eq!(s.detail, "publish renewal failed");

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

    trigger.trigger();
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
