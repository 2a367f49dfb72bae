//! The fake driver in a real Job: env from a Secret through the API, the
//! backend (backend-sim, in-process), a sandbox pod made with the pod's own
//! ServiceAccount token, completion by the real Job controller, and its log
//! through `pods/log`; then the fake publisher in a publisher Job.

use crate::require_control_plane;
use crate::support::{NS, Rig, is_true, state};
use serde_json::{Value, json};
use std::time::Duration;

const SERVICE_TOKEN: &str = "svc-token";

/// A backend with one run enqueued and claimed: (backend, job id, token,
/// launch request).
async fn claimed_run(sim: Value) -> (tcab_backend_sim::SimHandle, String, String, Value) {
    let backend = tcab_backend_sim::spawn(tcab_backend_sim::SimOptions::in_memory(SERVICE_TOKEN))
        .await
        .expect("backend-sim starts");
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/jobs", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .json(
            &json!({"harness": "h", "model": "m", "case": "c", "jam": null,
            "launch_request": {"case": "c", "sim": sim}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "enqueue");
    let claim: Value = http
        .post(format!("{}/jobs/next", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = &claim["job"];
    (
        backend,
        job["id"].as_str().unwrap().to_string(),
        job["token"].as_str().unwrap().to_string(),
        job["launch_request"].clone(),
    )
}

async fn backend_state(backend: &tcab_backend_sim::SimHandle, id: &str) -> String {
    let v: Value = reqwest::Client::new()
        .get(format!("{}/jobs/{id}", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["state"].as_str().unwrap_or("").to_string()
}

/// Lets the namespace's default ServiceAccount create and delete pods (the
/// driver's sandboxes).
async fn grant_sandboxes(rig: &Rig) {
    rig.post(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
        &json!({"metadata": {"name": "sandboxes"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get"]}]}),
    )
    .await;
    rig.post(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
        &json!({"metadata": {"name": "sandboxes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sandboxes"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}]}),
    )
    .await;
}

fn driver_job(name: &str, backend: &str, id: &str, launch: &Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"tcab.dev/job-kind": "run"}},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"tcab.dev/job-kind": "run", "tcab.dev/job-id": id}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "driver", "image": "tcab/driver:dev",
                    "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                    "env": [
                        {"name": "TCAB_BACKEND_URL", "value": backend},
                        {"name": "TCAB_JOB_ID", "value": id},
                        {"name": "TCAB_JOB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "job-token", "key": "token"}}},
                        {"name": "TCAB_LAUNCH_REQUEST", "value": launch.to_string()},
                        {"name": "TCAB_DRIVER_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    ]}]}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_job_runs_against_the_backend_and_its_log_reads_through_the_api_and_a_publisher_posts()
 {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    let (backend, id, token, launch) =
        claimed_run(json!({"duration_ms": 3000, "log_lines": 3, "sandbox": true})).await;
    rig.post(
        &format!("/api/v1/namespaces/{NS}/secrets"),
        &json!({"metadata": {"name": "job-token"}, "stringData": {"token": token}}),
    )
    .await;
    grant_sandboxes(&rig).await;
    rig.create_job(&driver_job("tcab-driver-1", &backend.url(), &id, &launch))
        .await;
    // Follow the log through the API server from the start: the stream
    // ends when the container stops.
    let running = rig
        .job_pod_where("tcab-driver-1", "the driver Running", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(rig.client.clone(), NS);
    let follow = {
        let pods = pods.clone();
        let name = running["metadata"]["name"].as_str().unwrap().to_string();
        tokio::spawn(async move {
            use futures::AsyncBufReadExt;
            let params = kube::api::LogParams {
                follow: true,
                ..Default::default()
            };
            let stream = pods.log_stream(&name, &params).await.expect("a log stream");
            let mut lines = stream.lines();
            let mut seen = Vec::new();
            while let Some(Ok(l)) = futures::StreamExt::next(&mut lines).await {
                seen.push(l);
            }
            seen
        })
    };

    let job = rig
        .until("the Job Complete", Duration::from_secs(60), || async {
            let j = rig.job("tcab-driver-1").await?;
            is_true(&j["status"], "Complete").then_some(j)
        })
        .await;
    assert_eq!(job["status"]["succeeded"], 1);
    assert_eq!(backend_state(&backend, &id).await, "succeeded");
    let followed = tokio::time::timeout(Duration::from_secs(10), follow)
        .await
        .expect("the follow ends with the container")
        .unwrap();
    let starting = format!("fake driver for job {id} starting");
    assert_eq!(followed.first(), Some(&starting), "{followed:?}");
    assert_eq!(
        followed.last().map(String::as_str),
        Some("reported succeeded; exiting")
    );

    let pod = rig.job_pods("tcab-driver-1").await.remove(0);
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let s = &pod["status"];
    assert_eq!(s["phase"], "Succeeded");
    let t = &state(&pod)["terminated"];
    assert_eq!(
        (t["reason"].as_str(), t["exitCode"].as_i64()),
        (Some("Completed"), Some(0))
    );
    assert!(t["startedAt"].is_string() && t["finishedAt"].is_string());
    assert_eq!(s["hostIP"], "127.0.0.1");
    assert!(s["podIP"].as_str().unwrap().starts_with("10.244."));
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert!(crate::support::cond(s, kind).is_some(), "{kind} in {s}");
    }
    assert_eq!(
        crate::support::cond(s, "Ready").unwrap()["reason"],
        "PodCompleted"
    );

    // The whole log through the API server and the kubelet's TLS endpoint.
    let full = rig
        .get_text(&format!(
            "/api/v1/namespaces/{NS}/pods/{name}/log?container=driver"
        ))
        .await;
    assert!(
        full.contains(&format!("fake driver for job {id} starting")),
        "{full}"
    );
    assert!(
        full.contains("created sandbox pod"),
        "the sandbox is made with the pod's token: {full}"
    );
    assert!(full.contains("deleted sandbox pod"), "{full}");
    // tailLines, through kube-rs.
    let tail = pods
        .logs(
            &name,
            &kube::api::LogParams {
                container: Some("driver".into()),
                tail_lines: Some(2),
                ..Default::default()
            },
        )
        .await
        .expect("kube-rs logs");
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2, "{tail}");
    assert_eq!(lines[1], "reported succeeded; exiting");
    // limitBytes.
    let head = rig
        .get_text(&format!(
            "/api/v1/namespaces/{NS}/pods/{name}/log?limitBytes=10"
        ))
        .await;
    assert_eq!(head.len(), 10);
    // kubectl logs --tail, when the build has kubectl.
    let kubectl = bin.join("kubectl");
    if kubectl.is_file() {
        let cfg = rig.cp.write_admin_kubeconfig();
        let out = std::process::Command::new(&kubectl)
            .args([
                "--kubeconfig",
                cfg.to_str().unwrap(),
                "-n",
                NS,
                "logs",
                &name,
                "--tail=1",
            ])
            .output()
            .expect("kubectl runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "reported succeeded; exiting\n",
            "{out:?}"
        );
    }
    // The sandbox the driver made and deleted is gone.
    rig.until("the sandbox gone", Duration::from_secs(30), || async {
        let l = rig
            .get(&format!(
                "/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtcab-driver"
            ))
            .await?;
        l["items"].as_array()?.is_empty().then_some(())
    })
    .await;

    // The fake publisher, in a publisher Job, posts its result.
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/publish-jobs", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .json(&json!({"request": {"release": "r1", "sim": {"duration_ms": 300}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "enqueue a publish");
    let claim: Value = http
        .post(format!("{}/publish-jobs/next", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let publish = &claim["publish_job"];
    let pid = publish["id"].as_str().unwrap();
    rig.create_job(&json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "tcab-publisher-1"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"tcab.dev/job-kind": "publish"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "publisher", "image": "tcab/publisher:dev",
                "env": [
                    {"name": "TCAB_BACKEND_URL", "value": backend.url()},
                    {"name": "TCAB_PUBLISH_JOB_ID", "value": pid},
                    {"name": "TCAB_JOB_TOKEN", "value": publish["token"]},
                    {"name": "TCAB_PUBLISH_REQUEST", "value": publish["request"].to_string()},
                ]}]}}}
    }))
    .await;
    rig.until(
        "the publisher Job Complete",
        Duration::from_secs(60),
        || async {
            let j = rig.job("tcab-publisher-1").await?;
            is_true(&j["status"], "Complete").then_some(())
        },
    )
    .await;
    let view: Value = http
        .get(format!("{}/publish-jobs/{pid}", backend.url()))
        .bearer_auth(SERVICE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "succeeded", "{view}");
}
