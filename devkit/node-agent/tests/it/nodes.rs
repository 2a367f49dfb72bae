//! Registration, heartbeats and the loss of a node.

use crate::require_control_plane;
use crate::support::{Rig, cond};
use std::time::Duration;

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
