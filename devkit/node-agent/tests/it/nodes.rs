//! Registration, heartbeats and the loss of a node.

use crate::require_control_plane;
use crate::support::control_plane::{ControlPlane, Timings};
use crate::support::{NS, Rig, cond, plain_pod};
use std::time::{Duration, Instant};
use tcab_node_agent::{AdminClient, api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_registers_turns_ready_and_heartbeats() {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    let node = rig.wait_node_ready("n1").await;
    let s = &node["status"];
    assert_eq!(
        s["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        rig.agent.port("n1").unwrap()
    );
    assert_eq!(s["addresses"][0]["address"], "127.0.0.1");
    assert_eq!(s["nodeInfo"]["kubeletVersion"], "v1.36.3");
    assert_eq!(s["capacity"]["pods"], "110");
    for (kind, reason) in [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
        ("Ready", "KubeletReady"),
    ] {
        assert_eq!(cond(s, kind).unwrap()["reason"], reason, "{kind}");
    }
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";
    let lease = rig.get(lease_path).await.expect("the node's lease");
    assert_eq!(lease["spec"]["holderIdentity"], "n1");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 4);
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );
    let first = lease["spec"]["renewTime"].clone();
    rig.until("a lease renewal", Duration::from_secs(5), || async {
        let l = rig.get(lease_path).await?;
        (l["spec"]["renewTime"] != first).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_goes_unknown_its_pods_get_the_taint_managers_disruption_target_and_it_comes_back()
 {
    let bin = require_control_plane!();
    // Two nodes: a lone unreachable node is never evicted (its zone would be
    // in full disruption).
    let rig = Rig::start(&bin, &["n1", "n2"]).await;
    rig.create_pod(&plain_pod("on-n1", "n1")).await;
    rig.until("the pod Running", Duration::from_secs(30), || async {
        let p = rig.pod("on-n1").await?;
        (p["status"]["phase"] == "Running").then_some(())
    })
    .await;
    let admin = AdminClient::new(&rig.agent.admin_url().unwrap());
    let lost_at = Instant::now();
    admin.lose_node("n1").await.unwrap();
    let nodes = admin.nodes().await.unwrap();
    assert_eq!(nodes[0]["up"], false, "{nodes}");
    // The API server can no longer reach the kubelet for logs.
    assert!(
        api::get(
            &rig.client,
            &format!("/api/v1/namespaces/{NS}/pods/on-n1/log")
        )
        .await
        .is_err(),
        "no logs from a lost node"
    );
    let node = rig
        .until("n1 Ready Unknown", Duration::from_secs(30), || async {
            let n = rig.get("/api/v1/nodes/n1").await?;
            (cond(&n["status"], "Ready")?["status"] == "Unknown").then_some(n)
        })
        .await;
    let unknown_after = lost_at.elapsed();
    assert_eq!(
        cond(&node["status"], "Ready").unwrap()["reason"],
        "NodeStatusUnknown"
    );
    // The taint manager writes the condition first and deletes the pod in
    // a second call (upstream's addConditionAndDeletePod): a read between
    // the two sees the condition without the deletion, so both are awaited.
    let pod = rig
        .until(
            "the taint manager's DisruptionTarget and its delete",
            Duration::from_secs(40),
            || async {
                let p = rig.pod("on-n1").await?;
                let dt = cond(&p["status"], "DisruptionTarget")?;
                (dt["reason"] == "DeletionByTaintManager"
                    && p["metadata"]["deletionTimestamp"].is_string())
                .then_some(p)
            },
        )
        .await;
    let evicted_after = lost_at.elapsed();
    eprintln!("n1 Unknown after {unknown_after:?}, its pod evicted after {evicted_after:?}");
    assert_eq!(
        cond(&pod["status"], "DisruptionTarget").unwrap()["reason"],
        "DeletionByTaintManager"
    );
    // Nobody finishes it: it stays Terminating and Running.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = rig.pod("on-n1").await.expect("stays Terminating");
    assert_eq!(p["status"]["phase"], "Running");
    let n2 = rig.get("/api/v1/nodes/n2").await.unwrap();
    assert_eq!(cond(&n2["status"], "Ready").unwrap()["status"], "True");

    // Back: the kubelet restarts, finds its container gone, ends the pod
    // and deletes it.
    admin.restore_node("n1").await.unwrap();
    rig.wait_node_ready("n1").await;
    rig.until("the pod gone", Duration::from_secs(30), || async {
        rig.pod("on-n1").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_plays_the_nodes_of_the_api_servers_token_file_until_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let bin = require_control_plane!();
    let cp = ControlPlane::start(&bin, &["b1"], Timings::default())
        .await
        .unwrap_or_else(|e| panic!("the control plane did not start: {e:#}"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tcab-node-agent"))
        .args([
            "--api-url",
            &cp.api_url,
            "--lease-seconds",
            "4",
            "--node",
            "b1,cpu=4,label.pool=cli",
        ])
        .arg("--ca-file")
        .arg(&cp.ca_pem)
        .arg("--tokens")
        .arg(cp.tokens_file())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a ready line within 30 s")
        .unwrap()
        .unwrap_or_default();
    assert!(
        first.starts_with("node agent ready: admin http://127.0.0.1:"),
        "{first}"
    );
    assert!(first.contains("b1 (kubelet port "), "{first}");
    let admin_url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches(';');
    let nodes = AdminClient::new(admin_url).nodes().await.unwrap();
    assert_eq!(
        (nodes[0]["name"].as_str(), nodes[0]["up"].as_bool()),
        (Some("b1"), Some(true))
    );
    let client = cp.admin();
    let deadline = Instant::now() + Duration::from_secs(30);
    let node = loop {
        let n = api::get(&client, "/api/v1/nodes/b1").await.unwrap();
        if let Some(n) =
            n.filter(|n| cond(&n["status"], "Ready").is_some_and(|c| c["status"] == "True"))
        {
            break n;
        }
        assert!(Instant::now() < deadline, "b1 never Ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(node["metadata"]["labels"]["pool"], "cli");
    assert_eq!(node["status"]["capacity"]["cpu"], "4");
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("it stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restarted_or_stopped_goes_on_with_its_running_programs() {
    let bin = require_control_plane!();
    let rig = Rig::start(&bin, &["n1"]).await;
    let mut pod = plain_pod("survivor", "n1");
    pod["metadata"]["annotations"] = serde_json::json!({"kube-sim.tcab.dev/log-lines": "2"});
    rig.create_pod(&pod).await;
    let log = format!("/api/v1/namespaces/{NS}/pods/survivor/log");
    let started = rig
        .until("the pod Running", Duration::from_secs(30), || async {
            let p = rig.pod("survivor").await?;
            (p["status"]["phase"] == "Running").then_some(p)
        })
        .await;
    let started_at =
        started["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();

    // A restart: the same container goes on, its log still served.
    rig.agent.restart_kubelet("n1").await.unwrap();
    rig.wait_node_ready("n1").await;
    assert_eq!(rig.get_text(&log).await, "line 1\nline 2\n");
    let p = rig.pod("survivor").await.unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
        started_at
    );

    // Stopped, the kubelet misses a delete; started again, it stops the
    // container it still runs (SIGTERM: 143) and the pod goes.
    rig.agent.stop_kubelet("n1").unwrap();
    api::delete(
        &rig.client,
        &format!("/api/v1/namespaces/{NS}/pods/survivor"),
        &serde_json::json!({"gracePeriodSeconds": 5}),
    )
    .await
    .expect("delete");
    let p = rig.pod("survivor").await.expect("nobody finishes it yet");
    assert_eq!(p["status"]["phase"], "Running");
    rig.agent.restore_node("n1").await.unwrap();
    rig.until("the pod gone", Duration::from_secs(30), || async {
        rig.pod("survivor").await.is_none().then_some(())
    })
    .await;
}
