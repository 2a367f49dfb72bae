//! Deletions and disruptions as Kubernetes 1.31+ records them, through
//! kube-rs typed objects: finalizers hold deleted pods, a Job counts a
//! deleted pod at once but is Failed only when it is gone, and each kind of
//! disruption leaves its DisruptionTarget condition.

use crate::backend::FakeBackend;
use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn gone(r: &Result<Pod, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(e)) if e.code == 404)
}

fn terminated(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()
}

#[tokio::test]
async fn a_deleted_job_pod_stays_readable_until_counted_and_terminated() {
    let (b, url) = FakeBackend::start().await;
    // The driver's failed report hangs: it cannot exit before SIGKILL.
    b.behaviour.lock().unwrap().slow_failed = Some(Duration::from_secs(60));
    let s = sim_with(|o| o.speed = 10.0).await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let job = driver_name("d1");
    jobs.create(
        &PostParams::default(),
        &typed_job(driver_job(
            "d1",
            &url,
            json!({"hang": true, "sandbox": false}),
            30,
            json!({}),
        )),
    )
    .await
    .unwrap();
    let pod = wait_until(
        "the driver runs",
        SECS,
        || pod_of(&pods, &job),
        |p| phase(p) == "Running",
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    // Readable, with its deletionTimestamp and grace.
    let p = pods.get(&name).await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    // The Job counts it failed at once (isPodFailed) and lets go of it...
    let j = wait_until(
        "FailureTarget",
        SECS,
        || async { jobs.get(&job).await.ok() },
        |j| job_cond(j, "FailureTarget").is_some() && j.status.as_ref().unwrap().failed == Some(1),
    )
    .await;
    assert_eq!(j.status.as_ref().unwrap().terminating, Some(1));
    assert!(job_cond(&j, "Failed").is_none());
    let p = wait_until(
        "the finalizer removed",
        SECS,
        || async { pods.get(&name).await.ok() },
        |p| p.metadata.finalizers.as_ref().is_none_or(Vec::is_empty),
    )
    .await;
    assert_eq!(phase(&p), "Running", "still terminating on its node");
    // ... and is Failed once the kubelet has killed it and deleted it.
    let j = wait_until(
        "Failed",
        Duration::from_secs(20),
        || async { jobs.get(&job).await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert!(gone(&pods.get(&name).await));
    let st = j.status.unwrap();
    assert_eq!(
        (st.failed, st.terminating, st.active),
        (Some(1), Some(0), None)
    );
}

#[tokio::test]
async fn the_deadline_sets_failure_target_and_failed_waits_for_the_pod() {
    let (b, url) = FakeBackend::start().await;
    b.behaviour.lock().unwrap().slow_failed = Some(Duration::from_secs(60));
    let s = sim_with(|o| o.speed = 10.0).await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let job = driver_name("a1");
    let spec = json!({"activeDeadlineSeconds": 5});
    jobs.create(
        &PostParams::default(),
        &typed_job(driver_job(
            "a1",
            &url,
            json!({"hang": true, "sandbox": false}),
            30,
            spec,
        )),
    )
    .await
    .unwrap();
    let j = wait_until(
        "FailureTarget",
        SECS,
        || async { jobs.get(&job).await.ok() },
        |j| job_cond(j, "FailureTarget").is_some(),
    )
    .await;
    assert_eq!(
        job_cond(&j, "FailureTarget").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    assert!(job_cond(&j, "Failed").is_none());
    let p = pod_of(&pods, &job).await.expect("the pod is still there");
    assert!(p.metadata.deletion_timestamp.is_some());
    let j = wait_until(
        "Failed",
        Duration::from_secs(20),
        || async { jobs.get(&job).await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(
        job_cond(&j, "Failed").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    assert!(
        pod_of(&pods, &job).await.is_none(),
        "Failed only once the pod is gone"
    );
    assert_eq!(j.status.unwrap().failed, Some(1));
}

#[tokio::test]
async fn preemption_and_the_eviction_subresource_mark_the_pod_then_delete_it() {
    let s = sim_with(|o| o.speed = 10.0).await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client, NS);
    for name in ["p1", "e1"] {
        jobs.create(
            &PostParams::default(),
            &typed_job(plain_job(name, json!({}), 100_000.0)),
        )
        .await
        .unwrap();
    }
    for (job, reason, message) in [
        (
            "p1",
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        ),
        ("e1", "EvictionByEvictionAPI", "Eviction API: evicting"),
    ] {
        let p = wait_until(
            "the pod runs",
            SECS,
            || pod_of(&pods, job),
            |p| phase(p) == "Running",
        )
        .await;
        let name = p.metadata.name.clone().unwrap();
        let c = crate::common::client();
        let mut w = WatchReader::open(
            &c,
            &format!(
                "{}?watch=true&resourceVersion={}&fieldSelector=metadata.name%3D{name}",
                pods_url(&s),
                p.metadata.resource_version.clone().unwrap()
            ),
        )
        .await;
        if job == "p1" {
            s.admin().preempt(NS, &name).await.unwrap();
        } else {
            pods.evict(&name, &EvictParams::default()).await.unwrap();
        }
        let first: Pod =
            serde_json::from_value(w.next_change(SECS).await.unwrap()["object"].clone()).unwrap();
        let dt = pod_cond(&first, "DisruptionTarget").expect("the condition comes first");
        assert_eq!(
            (dt.reason.as_deref(), dt.message.as_deref()),
            (Some(reason), Some(message))
        );
        assert!(first.metadata.deletion_timestamp.is_none());
        let last: Pod = loop {
            let ev = w.next_change(SECS).await.unwrap();
            if ev["type"] == "DELETED" {
                break serde_json::from_value(ev["object"].clone()).unwrap();
            }
        };
        // Gracefully terminated (the plain container exits 143 on SIGTERM).
        assert_eq!(terminated(&last).map(|t| t.exit_code), Some(143));
        assert!(last.metadata.deletion_timestamp.is_some());
        if job == "p1" {
            let evs = events_about(&events, "Pod", &name).await;
            assert!(has_event(&evs, "Preempted", "Preempted by pod"), "{evs:?}");
            assert!(
                has_event(&evs, "Killing", "Stopping container main"),
                "{evs:?}"
            );
        }
        let j = wait_until(
            "Failed",
            SECS,
            || async { jobs.get(job).await.ok() },
            |j| job_cond(j, "Failed").is_some(),
        )
        .await;
        assert_eq!(j.status.unwrap().failed, Some(1));
    }
}

#[tokio::test]
async fn kubelet_eviction_keeps_the_pod_failed_and_evicted() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client, NS);
    let job = driver_name("k1");
    let mut j = driver_job("k1", &url, json!({"hang": true}), 30, json!({}));
    j["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "250m", "memory": "1Gi"}});
    jobs.create(&PostParams::default(), &typed_job(j))
        .await
        .unwrap();
    eventually("running reported", SECS, || async {
        b.summary()
            .iter()
            .any(|c| c == "/jobs/k1/status running")
            .then_some(())
    })
    .await;
    let p = pod_of(&pods, &job).await.unwrap();
    let name = p.metadata.name.clone().unwrap();
    s.admin().kubelet_evict(NS, &name, "memory").await.unwrap();
    let j = wait_until(
        "Failed",
        SECS,
        || async { jobs.get(&job).await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(j.status.unwrap().failed, Some(1));
    let p = pods
        .get(&name)
        .await
        .expect("a kubelet-evicted pod is kept");
    let st = p.status.as_ref().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    let msg = st.message.clone().unwrap();
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && msg.contains("Container driver was using 1536Mi, request is 1Gi, has larger consumption of memory."),
        "{msg}"
    );
    let dt = pod_cond(&p, "DisruptionTarget").unwrap();
    assert_eq!(
        (dt.reason.as_deref(), dt.message.as_deref()),
        (Some("TerminationByKubelet"), Some(msg.as_str()))
    );
    assert!(p.metadata.deletion_timestamp.is_none());
    // The driver got SIGTERM and handed over within the 1 s (2 s) grace.
    assert_eq!(terminated(&p).map(|t| t.exit_code), Some(143));
    assert!(b.summary().iter().any(|c| c == "/jobs/k1/status failed"));
    let evs = events_about(&events, "Pod", &name).await;
    assert!(
        has_event(&evs, "Evicted", "The node was low on resource: memory."),
        "{evs:?}"
    );
}

#[tokio::test]
async fn finalizers_hold_any_deleted_pod_until_they_are_removed() {
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let held = |name: &str, memory: &str| -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "c", "image": "busybox:1",
                "resources": {"requests": {"memory": memory}}}]}}),
        )
        .unwrap()
    };
    // A running pod: terminated by its kubelet, then held by the finalizer.
    pods.create(&PostParams::default(), &held("run", "1Mi"))
        .await
        .unwrap();
    wait_until(
        "it runs",
        SECS,
        || async { pods.get("run").await.ok() },
        |p| phase(p) == "Running",
    )
    .await;
    pods.delete("run", &DeleteParams::default()).await.unwrap();
    let p = wait_until(
        "terminated and confirmed",
        SECS,
        || async { pods.get("run").await.ok() },
        |p| phase(p) == "Failed" && p.metadata.deletion_grace_period_seconds == Some(0),
    )
    .await;
    assert!(p.metadata.deletion_timestamp.is_some());
    // An unscheduled pod goes at once, but not past its finalizer.
    pods.create(&PostParams::default(), &held("big", "1Ti"))
        .await
        .unwrap();
    wait_until(
        "Unschedulable",
        SECS,
        || async { pods.get("big").await.ok() },
        |p| pod_cond(p, "PodScheduled").is_some_and(|c| c.status == "False"),
    )
    .await;
    pods.delete("big", &DeleteParams::default()).await.unwrap();
    let p = pods.get("big").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    // Removing the finalizer lets them go.
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for name in ["run", "big"] {
        pods.patch(name, &PatchParams::default(), &patch)
            .await
            .unwrap();
        eventually("the pod is gone", SECS, || async {
            gone(&pods.get(name).await).then_some(())
        })
        .await;
    }
}

/// The runtime stops a container without a pod deletion (the admin `kill`):
/// a driver that ignores SIGTERM is SIGKILLed when its grace runs out,
/// hands nothing over, and its pod is kept `Failed` with reason `Error`,
/// exit code 137 and no `OOMKilled`; with no grace the SIGKILL is at once.
#[tokio::test]
async fn a_stopped_container_that_ignores_sigterm_is_sigkilled_and_its_pod_kept() {
    let (b, url) = FakeBackend::start().await;
    let s = sim_with(|o| o.speed = 10.0).await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    for (id, script) in [
        ("s1", json!({"hang": true, "ignore_sigterm": true})),
        ("s2", json!({"hang": true})),
    ] {
        jobs.create(
            &PostParams::default(),
            &typed_job(driver_job(id, &url, script, 30, json!({}))),
        )
        .await
        .unwrap();
    }
    for id in ["s1", "s2"] {
        eventually("running reported", SECS, || async {
            b.summary()
                .iter()
                .any(|c| c == &format!("/jobs/{id}/status running"))
                .then_some(())
        })
        .await;
    }
    let stubborn = pod_of(&pods, &driver_name("s1")).await.unwrap();
    let stubborn = stubborn.metadata.name.clone().unwrap();
    let plain = pod_of(&pods, &driver_name("s2")).await.unwrap();
    let plain = plain.metadata.name.clone().unwrap();
    s.admin().kill(NS, &stubborn, 3.0).await.unwrap();
    s.admin().kill(NS, &plain, 0.0).await.unwrap();
    for (job, name) in [(driver_name("s1"), &stubborn), (driver_name("s2"), &plain)] {
        wait_until(
            "Failed",
            SECS,
            || async { jobs.get(&job).await.ok() },
            |j| job_cond(j, "Failed").is_some(),
        )
        .await;
        let p = pods.get(name).await.expect("a stopped pod is kept");
        assert_eq!(phase(&p), "Failed");
        assert!(p.metadata.deletion_timestamp.is_none());
        assert!(pod_cond(&p, "DisruptionTarget").is_none());
        let t = terminated(&p).unwrap();
        assert_eq!(
            (t.exit_code, t.reason.as_deref(), t.signal),
            (137, Some("Error"), None)
        );
    }
    let log = pods
        .logs(&stubborn, &kube::api::LogParams::default())
        .await
        .unwrap();
    assert!(log.contains("received SIGTERM; ignoring it"), "{log}");
    assert!(
        !b.summary().iter().any(|c| c.ends_with("/status failed")),
        "neither driver handed over: {:?}",
        b.summary()
    );
    let err = s.admin().kill(NS, &plain, 0.0).await.unwrap_err();
    assert!(err.to_string().contains("no running container"), "{err}");
}
