//! kube-rs (typed) against the sim's write checks: dry runs of create, patch
//! and delete, strict field validation, strategic merge patches, delete
//! preconditions, and the Status errors kube-rs hands back.

use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, ValidationDirective,
};
use serde_json::json;

fn api_status(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(st) => st,
        other => panic!("expected a Status error, got {other:?}"),
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [
        {"name": "c", "image": "img:1", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "side", "image": "side:1"}]}}))
    .unwrap()
}

#[tokio::test]
async fn kube_rs_dry_runs_validation_and_preconditions() {
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);

    // create: dry run answers without storing
    let job: Job = serde_json::from_value(plain_job("kw", json!({"a": "b"}), 300.0)).unwrap();
    let dry = jobs
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &job,
        )
        .await
        .unwrap();
    assert!(dry.metadata.uid.is_some() && dry.metadata.resource_version.is_none());
    assert_eq!(api_status(jobs.get("kw").await.unwrap_err()).code, 404);

    // an invalid Job: 422 with causes
    let mut bad = job.clone();
    if let Some(spec) = bad.spec.as_mut() {
        spec.backoff_limit = Some(-1);
    }
    let st = api_status(jobs.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    let causes = st.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.backoffLimit");
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    // a resourceVersion on create: refused by storage (500)
    let mut stale = job.clone();
    stale.metadata.resource_version = Some("5".into());
    let st = api_status(
        jobs.create(&PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(st.code, 500);

    jobs.create(&PostParams::default(), &job).await.unwrap();
    // patch: dry run, then strict field validation
    let dry = jobs
        .patch(
            "kw",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"metadata": {"labels": {"dry": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(dry.metadata.labels.unwrap()["dry"], "1");
    assert!(
        !jobs
            .get("kw")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap()
            .contains_key("dry")
    );
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let st = api_status(
        jobs.patch(
            "kw",
            &strict,
            &Patch::Merge(json!({"spec": {"bogus": true}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    assert!(
        st.message
            .ends_with("strict decoding error: unknown field \"spec.bogus\""),
        "{}",
        st.message
    );

    // a strategic merge patch merges containers by name
    let p = pods
        .create(&PostParams::default(), &pod("kp"))
        .await
        .unwrap();
    let patched = pods
        .patch(
            "kp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "image": "img:2"}]}})),
        )
        .await
        .unwrap();
    let cs = patched.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("img:2"));
    assert!(
        cs[0].resources.as_ref().unwrap().requests.is_some(),
        "the rest of the container is kept"
    );
    // any other change to a pod's spec is forbidden
    let st = api_status(
        pods.patch(
            "kp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"restartPolicy": "Never"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (st.code, st.details.unwrap().causes[0].reason.as_str()),
        (422, "FieldValueForbidden")
    );

    // delete: preconditions and dry run
    let uid = p.metadata.uid.clone();
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let st = api_status(pods.delete("kp", &wrong).await.unwrap_err());
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
    assert!(pods.get("kp").await.is_ok());
    let dry = pods
        .delete(
            "kp",
            &DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    let answered = dry.left().expect("a graceful delete answers the pod");
    assert!(answered.metadata.deletion_timestamp.is_some());
    assert!(
        pods.get("kp")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("kp", &right).await.unwrap();
    assert_eq!(api_status(pods.get("kp").await.unwrap_err()).code, 404);
}

/// What the admitter's start-up dry run relies on: a dry-run create of a Job
/// is validated like a real one, so a limit below its request, a service
/// account name that is no DNS subdomain and a malformed quantity are
/// refused, as upstream's ValidateResourceRequirements, ValidatePodSpec and
/// the Quantity decoder refuse them.
#[tokio::test]
async fn a_dry_run_create_refuses_what_a_create_would() {
    let s = sim().await;
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let job = |container: serde_json::Value, extra: serde_json::Value| {
        let mut spec = json!({"restartPolicy": "Never", "containers": [container]});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value::<Job>(json!({"metadata": {"name": "dry"},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}}}))
        .unwrap()
    };
    let c = |resources: serde_json::Value| json!({"name": "driver", "image": "d:1", "resources": resources});

    let fine = job(
        c(
            json!({"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
        ),
        json!({"serviceAccountName": "tcab-driver"}),
    );
    jobs.create(&dry, &fine).await.expect("a valid Job passes");

    let below = job(
        c(json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})),
        json!({}),
    );
    let st = api_status(jobs.create(&dry, &below).await.unwrap_err());
    assert_eq!(
        (st.code, st.reason.as_str()),
        (422, "Invalid"),
        "{}",
        st.message
    );
    assert!(
        st.message
            .contains("spec.template.spec.containers[0].resources.requests")
            && st
                .message
                .contains("must be less than or equal to memory limit of 1Gi"),
        "{}",
        st.message
    );

    let bad_sa = job(c(json!({})), json!({"serviceAccountName": "tcab..driver"}));
    let st = api_status(jobs.create(&dry, &bad_sa).await.unwrap_err());
    assert_eq!(st.code, 422, "{}", st.message);
    assert!(
        st.message.contains("spec.template.spec.serviceAccountName"),
        "{}",
        st.message
    );

    let bad_quantity = job(c(json!({"requests": {"memory": "1e3Mi"}})), json!({}));
    let st = api_status(jobs.create(&dry, &bad_quantity).await.unwrap_err());
    assert!(matches!(st.code, 400 | 422), "{} {}", st.code, st.message);
    assert!(
        st.message.contains("quantities must match"),
        "{}",
        st.message
    );
    // Nothing was stored by any of them.
    assert_eq!(api_status(jobs.get("dry").await.unwrap_err()).code, 404);
}
