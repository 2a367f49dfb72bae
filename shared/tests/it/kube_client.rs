//! The binaries' Kubernetes client against kube-sim: a throttled or
//! unavailable API server is reported on the first answer, not retried
//! inside the call until the call's bound runs out.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use std::time::Duration;
use tcab_kube_sim::{ApiFaultMode, FaultRule, SimOptions, spawn};
use tcab_shared::kube_api::{CallError, bounded, client_from};

const NS: &str = "tcab";

#[tokio::test]
async fn api_errors_are_answered_once_not_retried() {
    let sim = spawn(SimOptions {
        namespace: NS.into(),
        ..SimOptions::default()
    })
    .await
    .expect("kube-sim starts");
    let jobs: Api<Job> = Api::namespaced(client_from(sim.kube_config(None).unwrap()).unwrap(), NS);
    let admin = sim.admin();
    let limit = Duration::from_secs(30);

    for (mode, code) in [
        (ApiFaultMode::Unavailable, 503),
        (ApiFaultMode::Throttle, 429),
    ] {
        // kube-rs's default client would wait Retry-After and try again
        // until the fault ran out; ours gives the caller the answer.
        let rule = admin
            .add_fault(&FaultRule::new(mode).verbs(["get"]).retry_after(1).times(3))
            .await
            .unwrap();
        let error = bounded(limit, jobs.get("absent")).await.unwrap_err();
        assert!(matches!(error, CallError::Kube(_)), "{error:?}");
        assert_eq!(error.code(), Some(code), "{error:?}");
        assert!(error.is_ambiguous());
        assert_eq!(admin.fault_affected(rule).await.unwrap(), 1, "one request");
        admin.clear_faults().await.unwrap();
    }

    // With the faults gone the same client answers normally.
    let error = bounded(limit, jobs.get("absent")).await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
}
