//! Pods that cannot start, through kube-rs typed objects: they stay Pending
//! with upstream's reasons and Events until what they lack appears, or
//! until their Job's activeDeadlineSeconds fails the Job.

use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, Event, Pod, Secret, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// At 10x: the kubelet's 10 s retry is 1 s.
async fn fast() -> tcab_kube_sim::SimHandle {
    sim_with(|o| o.speed = 10.0).await
}

fn job_with(name: &str, spec: Value, deadline: Option<i64>) -> Job {
    let mut j = plain_job(name, json!({}), 100_000.0);
    if let Value::Object(m) = spec {
        for (k, v) in m {
            j["spec"]["template"]["spec"]["containers"][0][k] = v;
        }
    }
    if let Some(d) = deadline {
        j["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    typed_job(j)
}

fn waiting(p: &Pod) -> Option<ContainerStateWaiting> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .clone()
}

struct Apis {
    jobs: Api<Job>,
    pods: Api<Pod>,
    events: Api<Event>,
    secrets: Api<Secret>,
}

fn apis(s: &tcab_kube_sim::SimHandle) -> Apis {
    let c = s.kube_client(None).unwrap();
    Apis {
        jobs: Api::namespaced(c.clone(), NS),
        pods: Api::namespaced(c.clone(), NS),
        events: Api::namespaced(c.clone(), NS),
        secrets: Api::namespaced(c, NS),
    }
}

async fn waiting_with(a: &Apis, job: &str, reason: &str) -> Pod {
    wait_until(
        &format!("the pod waits with {reason}"),
        SECS,
        || pod_of(&a.pods, job),
        |p| waiting(p).and_then(|w| w.reason).as_deref() == Some(reason),
    )
    .await
}

/// The Job fails at its deadline: FailureTarget, the pod deleted, then
/// Failed once it is gone.
async fn fails_at_the_deadline(a: &Apis, job: &str, pod: &str) {
    let j = wait_until(
        "FailureTarget",
        SECS,
        || async { a.jobs.get(job).await.ok() },
        |j| job_cond(j, "FailureTarget").is_some(),
    )
    .await;
    assert_eq!(
        job_cond(&j, "FailureTarget").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    let j = wait_until(
        "Failed",
        SECS,
        || async { a.jobs.get(job).await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(
        job_cond(&j, "Failed").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    assert_eq!(j.status.as_ref().unwrap().failed, Some(1));
    assert!(
        matches!(a.pods.get(pod).await, Err(kube::Error::Api(e)) if e.code == 404),
        "Failed comes after the pod is gone"
    );
}

fn secret(name: &str, key: &str, value: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..Secret::default()
    }
}

#[tokio::test]
async fn a_missing_env_secret_is_create_container_config_error_until_the_deadline() {
    let s = fast().await;
    let a = apis(&s);
    let spec = json!({"envFrom": [{"secretRef": {"name": "harness-key"}}]});
    a.jobs
        .create(&PostParams::default(), &job_with("e1", spec, Some(30)))
        .await
        .unwrap();
    let p = waiting_with(&a, "e1", "CreateContainerConfigError").await;
    assert_eq!(
        waiting(&p).unwrap().message.as_deref(),
        Some("secret \"harness-key\" not found")
    );
    assert_eq!(phase(&p), "Pending");
    let name = p.metadata.name.clone().unwrap();
    let evs = events_about(&a.events, "Pod", &name).await;
    assert!(
        has_event(&evs, "Failed", "Error: secret \"harness-key\" not found"),
        "{evs:?}"
    );
    let j = a.jobs.get("e1").await.unwrap();
    assert_eq!(j.status.as_ref().unwrap().active, Some(1));
    match a.pods.logs(&name, &Default::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                format!("container \"main\" in pod \"{name}\" is waiting to start: CreateContainerConfigError").as_str()
            )
        ),
        other => panic!("{other:?}"),
    }
    fails_at_the_deadline(&a, "e1", &name).await;
}

#[tokio::test]
async fn a_secret_created_later_lets_the_pod_start() {
    let s = fast().await;
    let a = apis(&s);
    let spec = json!({"env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "late", "key": "k"}}}]});
    a.jobs
        .create(&PostParams::default(), &job_with("l1", spec, None))
        .await
        .unwrap();
    waiting_with(&a, "l1", "CreateContainerConfigError").await;
    a.secrets
        .create(&PostParams::default(), &secret("late", "k", "v"))
        .await
        .unwrap();
    wait_until(
        "the pod runs",
        SECS,
        || pod_of(&a.pods, "l1"),
        |p| phase(p) == "Running",
    )
    .await;
}

#[tokio::test]
async fn a_missing_secret_volume_is_container_creating_with_failed_mount() {
    let s = fast().await;
    let a = apis(&s);
    let volume = |name: &str, optional: bool| {
        let mut j = plain_job(name, json!({}), 100_000.0);
        let tpl = &mut j["spec"]["template"]["spec"];
        tpl["volumes"] = json!([{"name": "subscription", "secret": {"secretName": "sub", "optional": optional}}]);
        tpl["containers"][0]["volumeMounts"] =
            json!([{"name": "subscription", "mountPath": "/var/run/sub"}]);
        typed_job(j)
    };
    a.jobs
        .create(&PostParams::default(), &volume("v1", false))
        .await
        .unwrap();
    a.jobs
        .create(&PostParams::default(), &volume("v2", true))
        .await
        .unwrap();
    let p = waiting_with(&a, "v1", "ContainerCreating").await;
    let name = p.metadata.name.clone().unwrap();
    let evs = wait_until(
        "FailedMount",
        SECS,
        || async { Some(events_about(&a.events, "Pod", &name).await) },
        |evs| has_event(evs, "FailedMount", ""),
    )
    .await;
    assert!(
        has_event(
            &evs,
            "FailedMount",
            "MountVolume.SetUp failed for volume \"subscription\" : secret \"sub\" not found"
        ),
        "{evs:?}"
    );
    let p = a.pods.get(&name).await.unwrap();
    assert_eq!(
        pod_cond(&p, "PodReadyToStartContainers").map(|c| c.status.as_str()),
        Some("False")
    );
    // An optional volume of the same missing Secret does not hold its pod.
    wait_until(
        "the optional one runs",
        SECS,
        || pod_of(&a.pods, "v2"),
        |p| phase(p) == "Running",
    )
    .await;
    a.secrets
        .create(&PostParams::default(), &secret("sub", "token", "t"))
        .await
        .unwrap();
    wait_until(
        "the pod runs",
        SECS,
        || pod_of(&a.pods, "v1"),
        |p| phase(p) == "Running",
    )
    .await;
}

#[tokio::test]
async fn an_unpullable_image_backs_off_and_a_malformed_one_is_invalid() {
    let s = fast().await;
    let a = apis(&s);
    s.admin().set_unpullable("ghost:1", true).await.unwrap();
    a.jobs
        .create(
            &PostParams::default(),
            &job_with("i1", json!({"image": "ghost:1"}), None),
        )
        .await
        .unwrap();
    a.jobs
        .create(
            &PostParams::default(),
            &job_with("i2", json!({"image": "Driver:1"}), None),
        )
        .await
        .unwrap();
    let p = waiting_with(&a, "i1", "ErrImagePull").await;
    let name = p.metadata.name.clone().unwrap();
    assert!(
        waiting(&p)
            .unwrap()
            .message
            .unwrap()
            .contains("failed to pull and unpack image \"ghost:1\"")
    );
    let p = waiting_with(&a, "i1", "ImagePullBackOff").await;
    assert_eq!(
        waiting(&p).unwrap().message.as_deref(),
        Some(tcab_workloads::images::back_off_message("ghost:1").as_str())
    );
    let evs = events_about(&a.events, "Pod", &name).await;
    for (reason, text) in [
        ("Pulling", "Pulling image \"ghost:1\""),
        ("Failed", "Failed to pull image \"ghost:1\""),
        ("Failed", "Error: ErrImagePull"),
        ("BackOff", "Back-off pulling image \"ghost:1\""),
        ("Failed", "Error: ImagePullBackOff"),
    ] {
        assert!(has_event(&evs, reason, text), "{reason} {text}: {evs:?}");
    }
    let p = waiting_with(&a, "i2", "InvalidImageName").await;
    assert_eq!(
        waiting(&p).unwrap().message.as_deref(),
        Some(
            "Failed to apply default image tag \"Driver:1\": couldn't parse image name \"Driver:1\": invalid reference format: repository name must be lowercase"
        )
    );
    // Pullable again: the next try after the back-off starts it.
    s.admin().set_unpullable("ghost:1", false).await.unwrap();
    wait_until(
        "the pod runs",
        Duration::from_secs(40),
        || pod_of(&a.pods, "i1"),
        |p| phase(p) == "Running",
    )
    .await;
}

#[tokio::test]
async fn requests_larger_than_any_node_are_unschedulable_until_the_deadline() {
    let s = fast().await;
    let a = apis(&s);
    let spec = json!({"resources": {"requests": {"cpu": "250m", "memory": "64Gi"}}});
    a.jobs
        .create(&PostParams::default(), &job_with("u1", spec, Some(30)))
        .await
        .unwrap();
    let message = "0/2 nodes are available: 2 Insufficient memory. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod..";
    let p = wait_until(
        "Unschedulable",
        SECS,
        || pod_of(&a.pods, "u1"),
        |p| pod_cond(p, "PodScheduled").is_some_and(|c| c.status == "False"),
    )
    .await;
    let c = pod_cond(&p, "PodScheduled").unwrap();
    assert_eq!(
        (c.reason.as_deref(), c.message.as_deref()),
        (Some("Unschedulable"), Some(message))
    );
    assert!(p.spec.as_ref().unwrap().node_name.is_none());
    assert_eq!(phase(&p), "Pending");
    let name = p.metadata.name.clone().unwrap();
    let evs = events_about(&a.events, "Pod", &name).await;
    assert!(has_event(&evs, "FailedScheduling", message), "{evs:?}");
    fails_at_the_deadline(&a, "u1", &name).await;
}

#[tokio::test]
async fn a_missing_service_account_refuses_the_pod_create() {
    let s = fast().await;
    let a = apis(&s);
    let client = s.kube_client(None).unwrap();
    let mut j = plain_job("s1", json!({}), 100_000.0);
    j["spec"]["template"]["spec"]["serviceAccountName"] = json!("runner");
    a.jobs
        .create(&PostParams::default(), &typed_job(j))
        .await
        .unwrap();
    let want = "Error creating: pods \"s1-\" is forbidden: error looking up service account tcab/runner: serviceaccount \"runner\" not found";
    let evs = wait_until(
        "FailedCreate",
        SECS,
        || async { Some(events_about(&a.events, "Job", "s1").await) },
        |evs| has_event(evs, "FailedCreate", ""),
    )
    .await;
    assert!(has_event(&evs, "FailedCreate", want), "{evs:?}");
    assert!(
        pod_of(&a.pods, "s1").await.is_none(),
        "the Job shows no pod"
    );
    assert!(
        a.jobs
            .get("s1")
            .await
            .unwrap()
            .status
            .unwrap()
            .active
            .is_none()
    );
    // A direct create is refused the same way, as 403 Forbidden.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "direct"},
        "spec": {"serviceAccountName": "runner", "containers": [{"name": "c", "image": "busybox:1"}]}}))
    .unwrap();
    match a.pods.create(&PostParams::default(), &pod).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                e.message,
                "pods \"direct\" is forbidden: error looking up service account tcab/runner: serviceaccount \"runner\" not found"
            );
        }
        other => panic!("expected 403: {other:?}"),
    }
    // The ServiceAccount appears: the controller's retry creates the pod.
    let sas: Api<ServiceAccount> = Api::namespaced(client, NS);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("runner".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let p = wait_until(
        "the pod runs",
        Duration::from_secs(30),
        || pod_of(&a.pods, "s1"),
        |p| phase(p) == "Running",
    )
    .await;
    assert_eq!(
        p.spec.unwrap().service_account_name.as_deref(),
        Some("runner")
    );
}
