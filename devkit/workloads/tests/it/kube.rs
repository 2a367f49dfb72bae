//! The container host's Kubernetes calls, against a plain-HTTP fake API
//! (`TCAB_KUBERNETES_URL`) and a ServiceAccount directory of the test's
//! (`TCAB_SERVICEACCOUNT_DIR`).

use crate::support::FakeApi;
use axum::http::Method;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use tcab_workloads::Host;
use tcab_workloads::container::ContainerHost;

fn host(serviceaccount: &Path, env: &[(&str, &str)]) -> ContainerHost {
    let mut env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.insert(
        "TCAB_SERVICEACCOUNT_DIR".into(),
        serviceaccount.to_str().unwrap().into(),
    );
    let (_, sigterm) = tokio::sync::watch::channel(false);
    ContainerHost::new(env, sigterm).expect("a host")
}

#[tokio::test]
async fn a_sandbox_pod_is_created_and_deleted_with_the_tokens_current_content() {
    let api = FakeApi::start().await;
    let sa = tempfile::tempdir().unwrap();
    std::fs::write(sa.path().join("token"), "tok-1").unwrap();
    let host = host(sa.path(), &[("TCAB_KUBERNETES_URL", &api.url)]);
    let pod = json!({"metadata": {"generateName": "tcab-sandbox-", "labels": {"tcab.dev/job-id": "run-1"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "sandbox", "image": "i"}]}});

    let name = host.create_pod("work", pod.clone()).await;
    assert_eq!(name.as_deref(), Ok("tcab-sandbox-x1"));
    // The kubelet rotates the token: the next call reads the file again.
    std::fs::write(sa.path().join("token"), "tok-2").unwrap();
    assert_eq!(host.delete_pod("work", "tcab-sandbox-x1").await, Ok(()));

    let seen = api.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (
            &seen[0].method,
            seen[0].path.as_str(),
            seen[0].authorization.as_str()
        ),
        (
            &Method::POST,
            "/api/v1/namespaces/work/pods",
            "Bearer tok-1"
        )
    );
    let mut sent = pod;
    sent["apiVersion"] = json!("v1");
    sent["kind"] = json!("Pod");
    assert_eq!(seen[0].body, sent);
    assert_eq!(
        (
            &seen[1].method,
            seen[1].path.as_str(),
            seen[1].authorization.as_str()
        ),
        (
            &Method::DELETE,
            "/api/v1/namespaces/work/pods/tcab-sandbox-x1",
            "Bearer tok-2"
        )
    );
}

#[tokio::test]
async fn a_refused_call_returns_the_apis_message() {
    let api = FakeApi::start().await;
    let sa = tempfile::tempdir().unwrap();
    std::fs::write(sa.path().join("token"), "tok").unwrap();
    let host = host(sa.path(), &[("TCAB_KUBERNETES_URL", &api.url)]);
    assert_eq!(
        host.create_pod("refused", json!({"metadata": {"generateName": "s-"}}))
            .await,
        Err(
            "pods is forbidden: User \"system:serviceaccount:refused:default\" cannot create resource \"pods\""
                .to_string()
        )
    );
    assert_eq!(
        host.delete_pod("work", "gone").await,
        Err("pods \"gone\" not found".to_string())
    );
}

#[tokio::test]
async fn without_a_token_or_an_api_address_no_call_is_made() {
    let api = FakeApi::start().await;
    let sa = tempfile::tempdir().unwrap();
    let no_token = host(sa.path(), &[("TCAB_KUBERNETES_URL", &api.url)]);
    let err = no_token.delete_pod("work", "p").await.unwrap_err();
    assert!(err.contains("token"), "{err}");
    std::fs::write(sa.path().join("token"), "tok").unwrap();
    let no_api = host(sa.path(), &[]);
    let err = no_api.delete_pod("work", "p").await.unwrap_err();
    assert!(err.contains("KUBERNETES_SERVICE_HOST"), "{err}");
    assert!(api.seen().is_empty());
}

#[tokio::test]
async fn the_namespace_is_the_serviceaccounts_then_pod_namespace_then_default() {
    let sa = tempfile::tempdir().unwrap();
    assert_eq!(host(sa.path(), &[]).namespace(), "default");
    assert_eq!(
        host(sa.path(), &[("POD_NAMESPACE", "from-env")]).namespace(),
        "from-env"
    );
    std::fs::write(sa.path().join("namespace"), "from-file").unwrap();
    assert_eq!(
        host(sa.path(), &[("POD_NAMESPACE", "from-env")]).namespace(),
        "from-file"
    );
}
