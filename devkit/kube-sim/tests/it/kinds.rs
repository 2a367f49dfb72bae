//! Secrets, ServiceAccounts and Events through kube-rs typed objects:
//! create, get, list, watch, delete, and the fieldSelector `kubectl
//! describe` uses for Events.

use crate::common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::collections::BTreeMap;

#[tokio::test]
async fn secrets_and_service_accounts_are_served() {
    let s = api_sim().await;
    let client = s.kube_client(None).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut watch = secrets
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("harness-key".into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(
            "API_KEY".to_string(),
            "s3cr3t".to_string(),
        )])),
        ..Secret::default()
    };
    let created = secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(
        created.string_data.is_none(),
        "stringData is folded into data"
    );
    assert_eq!(created.data.unwrap()["API_KEY"].0, b"s3cr3t");
    match watch.next().await.unwrap().unwrap() {
        WatchEvent::Added(s) => assert_eq!(s.metadata.name.as_deref(), Some("harness-key")),
        other => panic!("{other:?}"),
    }
    let listed = secrets.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let (code, st) = post(
        &crate::common::client(),
        &format!("{}/api/v1/namespaces/{NS}/secrets", s.url()),
        &json!({"metadata": {"name": "bad"}, "data": {"k": "not base64!"}}),
    )
    .await;
    // As upstream's decoder: bytes that are not base64 cannot be decoded.
    assert_eq!(
        (code, st["reason"].as_str()),
        (400, Some("BadRequest")),
        "{st}"
    );
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Secret in version \"v1\" cannot be handled as a Secret"),
        "{st}"
    );
    secrets
        .delete("harness-key", &DeleteParams::default())
        .await
        .unwrap();
    match secrets.get("harness-key").await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 404),
        other => panic!("{other:?}"),
    }

    // Every namespace has a `default` ServiceAccount, even after it is deleted.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    assert!(sas.get("default").await.is_ok());
    sas.delete("default", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        sas.get("default").await.is_ok(),
        "the controller recreates it"
    );
    let elsewhere: Api<ServiceAccount> = Api::namespaced(client.clone(), "other-ns");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("runner".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    elsewhere.create(&PostParams::default(), &sa).await.unwrap();
    let names: Vec<String> = elsewhere
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(names, ["default", "runner"]);
}

#[tokio::test]
async fn events_are_listed_by_the_object_they_are_about() {
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let c = crate::common::client();
    post(&c, &jobs_url(&s), &plain_job("ev", json!({}), 0.2)).await;
    wait_condition_http(&s, "ev", "Complete").await;
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let evs = events_about(&events, "Job", "ev").await;
    let reasons: Vec<&str> = evs.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert!(
        reasons.contains(&"SuccessfulCreate") && reasons.contains(&"Completed"),
        "{reasons:?}"
    );
    let created = evs
        .iter()
        .find(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
        .unwrap();
    assert_eq!(created.type_.as_deref(), Some("Normal"));
    assert_eq!(
        created.source.as_ref().unwrap().component.as_deref(),
        Some("job-controller")
    );
    let pod_name = created
        .message
        .as_deref()
        .unwrap()
        .trim_start_matches("Created pod: ")
        .to_string();
    // As kubectl describe asks: by name, namespace, kind and uid.
    let pod = get(&c, &format!("{}/{pod_name}", pods_url(&s))).await.1;
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let fs = format!(
        "involvedObject.name={pod_name},involvedObject.namespace={NS},involvedObject.kind=Pod,involvedObject.uid={uid}"
    );
    let evs = events
        .list(&ListParams::default().fields(&fs))
        .await
        .unwrap()
        .items;
    let reasons: Vec<&str> = evs.iter().filter_map(|e| e.reason.as_deref()).collect();
    for r in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.contains(&r), "{r}: {reasons:?}");
    }
    assert!(
        evs.iter()
            .all(|e| e.involved_object.uid.as_deref() == Some(uid))
    );
    let kubelet = evs
        .iter()
        .find(|e| e.reason.as_deref() == Some("Started"))
        .unwrap();
    assert_eq!(
        kubelet.source.as_ref().unwrap().component.as_deref(),
        Some("kubelet")
    );
    assert!(kubelet.source.as_ref().unwrap().host.is_some());
}

async fn wait_condition_http(s: &tcab_kube_sim::SimHandle, name: &str, kind: &str) {
    let c = crate::common::client();
    eventually(&format!("{name} {kind}"), SECS, || async {
        let (code, j) = get(&c, &format!("{}/{name}", jobs_url(s))).await;
        (code == 200 && condition(&j, kind).is_some()).then_some(())
    })
    .await
}
