//! Nodes and node loss through kube-rs typed objects: scheduling onto
//! nodes, a machine that dies (NotReady after the grace period, the taint
//! manager after the toleration, pods Terminating until the node goes or is
//! out of service, then pod GC), a machine that boots again, and a kubelet
//! that reports `Ready=False` (the not-ready taints, then the taint
//! manager).

use crate::backend::FakeBackend;
use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Taint};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tcab_kube_sim::NodeSpec;

fn node_ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn taint_keys(n: &Node) -> Vec<(String, String)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A plain Job whose pod asks for `cpu` and runs (practically) forever.
fn busy_job(name: &str, cpu: &str) -> Job {
    let mut j = plain_job(name, json!({}), 100_000.0);
    j["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": cpu, "memory": "1Gi"}});
    typed_job(j)
}

#[tokio::test]
async fn nodes_are_served_and_pods_are_scheduled_onto_them() {
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = list
        .items
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["sim-node-1", "sim-node-2"]);
    let n = &list.items[0];
    let alloc = n.status.as_ref().unwrap().allocatable.as_ref().unwrap();
    assert_eq!(
        (
            alloc["cpu"].0.as_str(),
            alloc["memory"].0.as_str(),
            alloc["pods"].0.as_str()
        ),
        ("3920m", "15Gi", "110")
    );
    assert_eq!(node_ready(n).as_deref(), Some("True"));
    assert!(n.metadata.namespace.is_none(), "nodes are cluster-scoped");

    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for name in ["a", "b"] {
        jobs.create(&PostParams::default(), &busy_job(name, "1"))
            .await
            .unwrap();
    }
    let mut placed = Vec::new();
    for name in ["a", "b"] {
        let p = wait_until(
            "the pod runs",
            SECS,
            || pod_of(&pods, name),
            |p| phase(p) == "Running",
        )
        .await;
        let spec = p.spec.as_ref().unwrap();
        let node = spec.node_name.clone().unwrap();
        let status = p.status.as_ref().unwrap();
        let node_ip = nodes
            .get(&node)
            .await
            .unwrap()
            .status
            .unwrap()
            .addresses
            .unwrap()[0]
            .address
            .clone();
        assert_eq!(status.host_ip.as_deref(), Some(node_ip.as_str()));
        assert_eq!(
            pod_cond(&p, "PodScheduled").map(|c| c.status.as_str()),
            Some("True")
        );
        // admission: the default ServiceAccount and upstream's default tolerations
        assert_eq!(spec.service_account_name.as_deref(), Some("default"));
        let tolerations = spec.tolerations.as_ref().unwrap();
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let t = tolerations
                .iter()
                .find(|t| t.key.as_deref() == Some(key))
                .unwrap_or_else(|| panic!("no toleration for {key}"));
            assert_eq!(
                (
                    t.operator.as_deref(),
                    t.effect.as_deref(),
                    t.toleration_seconds
                ),
                (Some("Exists"), Some("NoExecute"), Some(300))
            );
        }
        placed.push(node);
    }
    assert_ne!(placed[0], placed[1], "the emptiest node takes the next pod");
    let events: Api<Event> = Api::namespaced(client, NS);
    let pod = pod_of(&pods, "a").await.unwrap();
    let evs = events_about(&events, "Pod", pod.metadata.name.as_deref().unwrap()).await;
    assert!(
        has_event(&evs, "Scheduled", &format!("to {}", placed[0])),
        "{evs:?}"
    );
    assert!(has_event(&evs, "Started", "Started container main"));
}

/// One node at 100x: grace 50 s = 0.5 s, toleration 300 s = 3 s, pod GC
/// every 0.2 s with a 0.4 s quarantine.
async fn solo() -> tcab_kube_sim::SimHandle {
    sim_with(|o| {
        o.speed = 100.0;
        o.nodes = vec![NodeSpec::standard("solo")];
    })
    .await
}

#[tokio::test]
async fn a_lost_node_keeps_its_pods_terminating_until_the_node_object_goes() {
    let (b, url) = FakeBackend::start().await;
    let s = solo().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let job_name = driver_name("k1");
    jobs.create(
        &PostParams::default(),
        &typed_job(driver_job("k1", &url, json!({"hang": true}), 30, json!({}))),
    )
    .await
    .unwrap();
    eventually("the driver reports running", SECS, || async {
        b.summary()
            .iter()
            .any(|c| c == "/jobs/k1/status running")
            .then_some(())
    })
    .await;
    let pod = pod_of(&pods, &job_name).await.unwrap();
    let name = pod.metadata.name.clone().unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("solo")
    );
    let calls = b.calls().len();

    assert!(s.admin().crash_node("solo").await.unwrap() >= 1);
    eventually("the programs died with the machine", SECS, || async {
        (s.sim().programs_running() == 0).then_some(())
    })
    .await;
    // Nothing about the pod changed: no kubelet reports any more.
    let p = pods.get(&name).await.unwrap();
    assert_eq!(phase(&p), "Running");
    assert!(p.metadata.deletion_timestamp.is_none());
    // Its logs live on the dead machine: the API server cannot reach them.
    let (code, st) = get(
        &crate::common::client(),
        &format!("{}/{name}/log", pods_url(&s)),
    )
    .await;
    assert_eq!(code, 500, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains("no route to host"),
        "{st}"
    );

    // After the node-monitor grace period: NotReady, tainted, pods not ready.
    let n = wait_until(
        "the node NotReady",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| node_ready(n).as_deref() == Some("Unknown"),
    )
    .await;
    let ready = n.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert!(ready.iter().all(|c| c.status == "Unknown"
        && c.reason.as_deref() == Some("NodeStatusUnknown")
        && c.message.as_deref() == Some("Kubelet stopped posting node status.")));
    let taints = taint_keys(&n);
    for effect in ["NoSchedule", "NoExecute"] {
        assert!(
            taints.contains(&("node.kubernetes.io/unreachable".into(), effect.into())),
            "{taints:?}"
        );
    }
    let tainted_at = n
        .spec
        .as_ref()
        .unwrap()
        .taints
        .as_ref()
        .unwrap()
        .iter()
        .find(|t| t.effect == "NoExecute")
        .and_then(|t| t.time_added.clone())
        .expect("timeAdded")
        .0;
    let p = wait_until(
        "the pod not ready",
        SECS,
        || async { pods.get(&name).await.ok() },
        |p| pod_cond(p, "Ready").is_some_and(|c| c.status == "False"),
    )
    .await;
    assert_eq!(
        phase(&p),
        "Running",
        "still Running: nobody can say otherwise"
    );
    assert!(has_event(
        &events_about(&events, "Pod", &name).await,
        "NodeNotReady",
        "Node is not ready"
    ));

    // After the 300 s toleration: the taint manager deletes the pod.
    let p = wait_until(
        "the taint manager's deletion",
        SECS,
        || async { pods.get(&name).await.ok() },
        |p| p.metadata.deletion_timestamp.is_some(),
    )
    .await;
    let dt = pod_cond(&p, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(
        (dt.reason.as_deref(), dt.message.as_deref()),
        (
            Some("DeletionByTaintManager"),
            Some("Taint manager: deleting due to NoExecute taint")
        )
    );
    let deleted_at =
        p.metadata.deletion_timestamp.clone().unwrap().0 - jiff::SignedDuration::from_secs(30);
    assert!(
        deleted_at >= tainted_at + jiff::SignedDuration::from_secs(299),
        "tolerated for 300 s: tainted {tainted_at}, deleted {deleted_at}"
    );
    assert!(has_event(
        &events_about(&events, "Pod", &name).await,
        "TaintManagerEviction",
        &format!("Marking for deletion Pod {NS}/{name}")
    ));
    let j = wait_until(
        "the Job's FailureTarget",
        SECS,
        || async { jobs.get(&job_name).await.ok() },
        |j| job_cond(j, "FailureTarget").is_some(),
    )
    .await;
    let st = j.status.as_ref().unwrap();
    assert_eq!((st.failed, st.terminating), (Some(1), Some(1)));
    assert!(job_cond(&j, "Failed").is_none());

    // No kubelet finishes it: it stays Terminating, the Job not Failed,
    // however long (here: ten pod-GC periods).
    sim_time_passes(&s, s.sim().clock.now(), 200).await;
    let p = pods.get(&name).await.expect("still there");
    assert_eq!(phase(&p), "Running");
    assert!(job_cond(&jobs.get(&job_name).await.unwrap(), "Failed").is_none());

    // The node object goes (as a cloud controller deletes it): after the
    // quarantine pod GC marks the pod Failed and force-deletes it.
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
    nodes
        .delete("solo", &DeleteParams::default())
        .await
        .unwrap();
    let gone = loop {
        let ev = w.next_change(SECS).await.expect("the pod's events");
        if ev["type"] == "DELETED" {
            break ev["object"].clone();
        }
    };
    let gone: Pod = serde_json::from_value(gone).unwrap();
    assert_eq!(phase(&gone), "Failed");
    let dt = pod_cond(&gone, "DisruptionTarget").unwrap();
    assert_eq!(
        (dt.reason.as_deref(), dt.message.as_deref()),
        (
            Some("DeletionByPodGC"),
            Some("PodGC: node no longer exists")
        )
    );
    let j = wait_until(
        "the Job Failed",
        SECS,
        || async { jobs.get(&job_name).await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    let st = j.status.as_ref().unwrap();
    assert_eq!((st.failed, st.terminating), (Some(1), Some(0)));
    assert_eq!(
        job_cond(&j, "Failed").unwrap().reason.as_deref(),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(b.calls().len(), calls, "nothing reported after the crash");
}

#[tokio::test]
async fn the_out_of_service_taint_lets_pod_gc_finish_the_terminating_pods() {
    let s = solo().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    jobs.create(&PostParams::default(), &busy_job("o1", "100m"))
        .await
        .unwrap();
    let pod = wait_until(
        "the pod runs",
        SECS,
        || pod_of(&pods, "o1"),
        |p| phase(p) == "Running",
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    s.admin().crash_node("solo").await.unwrap();
    let mut n = wait_until(
        "the node NotReady",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| node_ready(n).as_deref() == Some("Unknown"),
    )
    .await;
    // The operator marks the node out of service through the API (a PUT
    // of the Node with one more taint, as `kubectl taint` would).
    n.spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default()
        .push(Taint {
            key: "node.kubernetes.io/out-of-service".into(),
            value: Some("nodeshutdown".into()),
            effect: "NoExecute".into(),
            time_added: None,
        });
    nodes
        .replace("solo", &PostParams::default(), &n)
        .await
        .unwrap();
    // Not tolerated: the taint manager deletes at once; pod GC then
    // force-deletes the terminating pod of a NotReady out-of-service node.
    eventually("the pod is gone", SECS, || async {
        matches!(pods.get(&name).await, Err(kube::Error::Api(e)) if e.code == 404).then_some(())
    })
    .await;
    let j = wait_until(
        "the Job Failed",
        SECS,
        || async { jobs.get("o1").await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(j.status.unwrap().failed, Some(1));
}

#[tokio::test]
async fn a_machine_that_boots_again_reports_its_lost_containers() {
    let s = solo().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    jobs.create(&PostParams::default(), &busy_job("r1", "100m"))
        .await
        .unwrap();
    let pod = wait_until(
        "the pod runs",
        SECS,
        || pod_of(&pods, "r1"),
        |p| phase(p) == "Running",
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    s.admin().crash_node("solo").await.unwrap();
    wait_until(
        "the node NotReady",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| node_ready(n).as_deref() == Some("Unknown"),
    )
    .await;
    s.admin().restart_node("solo").await.unwrap();
    let p = wait_until(
        "the lost container reported",
        SECS,
        || async { pods.get(&name).await.ok() },
        |p| phase(p) == "Failed",
    )
    .await;
    let t = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(
        (t.reason.as_deref(), t.exit_code, t.message.as_deref()),
        (
            Some("ContainerStatusUnknown"),
            137,
            Some("The container could not be located when the pod was terminated")
        )
    );
    assert!(t.signal.is_none());
    let j = wait_until(
        "the Job Failed",
        SECS,
        || async { jobs.get("r1").await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(j.status.unwrap().failed, Some(1));
    assert!(pods.get(&name).await.is_ok(), "a failed pod is kept");
    let n = wait_until(
        "the node Ready again",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| node_ready(n).as_deref() == Some("True"),
    )
    .await;
    assert!(taint_keys(&n).is_empty(), "{:?}", taint_keys(&n));
}

#[tokio::test]
async fn a_kubelet_that_reports_not_ready_gets_its_node_tainted_and_its_pods_evicted() {
    let s = solo().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    jobs.create(&PostParams::default(), &busy_job("nr", "100m"))
        .await
        .unwrap();
    let pod = wait_until(
        "the pod runs",
        SECS,
        || pod_of(&pods, "nr"),
        |p| phase(p) == "Running",
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    s.admin().set_node_ready("solo", false).await.unwrap();
    let n = wait_until(
        "the not-ready taints",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| taint_keys(n).len() == 2,
    )
    .await;
    let ready = n
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("KubeletNotReady")),
        "the kubelet's own condition"
    );
    let mut taints = taint_keys(&n);
    taints.sort();
    assert_eq!(
        taints,
        [
            ("node.kubernetes.io/not-ready".into(), "NoExecute".into()),
            ("node.kubernetes.io/not-ready".into(), "NoSchedule".into())
        ]
    );
    // The controller leaves the pods' Ready alone: it found no silent kubelet.
    let p = pods.get(&name).await.unwrap();
    assert_eq!(
        pod_cond(&p, "Ready").map(|c| c.status.as_str()),
        Some("True")
    );
    // After the not-ready toleration the taint manager evicts it, and the
    // kubelet, still running, stops it: the Job counts a failed pod.
    let j = wait_until(
        "the Job Failed",
        SECS,
        || async { jobs.get("nr").await.ok() },
        |j| job_cond(j, "Failed").is_some(),
    )
    .await;
    assert_eq!(j.status.unwrap().failed, Some(1));
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let evs = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        has_event(
            &evs,
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {NS}/{name}")
        ),
        "{evs:?}"
    );
    assert!(
        !evs.iter()
            .any(|e| e.reason.as_deref() == Some("NodeNotReady")
                && e.involved_object.kind.as_deref() == Some("Pod")),
        "no pod was marked not ready: {evs:?}"
    );
    s.admin().set_node_ready("solo", true).await.unwrap();
    let n = wait_until(
        "the node Ready again, untainted",
        SECS,
        || async { nodes.get("solo").await.ok() },
        |n| node_ready(n).as_deref() == Some("True") && taint_keys(n).is_empty(),
    )
    .await;
    assert!(taint_keys(&n).is_empty());
}
