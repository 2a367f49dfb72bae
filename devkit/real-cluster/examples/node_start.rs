//! How long real nodes take to start: a control plane with two real nodes
//! started `ROUNDS` times (medians printed), step by step, and on each one
//! plain pod created and timed until Running.
//!
//!     cargo build -p tcab-workloads --bins
//!     scripts/bench-compare -- cargo run --release -p tcab-real-cluster --example node_start
//!
//! Prints `figure<TAB>node_start<TAB><name><TAB><value><TAB><unit>` lines
//! (scripts/bench-compare compares them with the last recorded run). Needs
//! root and what `tcab_real_cluster::node::missing` lists.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use std::time::{Duration, Instant};
use tcab_real_cluster::node::{missing, ready_or_skip};
use tcab_real_cluster::{KubeletCluster, KubeletSettings, Settings, error_chain};

const ROUNDS: usize = 3;
const NS: &str = "bench";

fn figure(name: &str, value: f64, unit: &str) {
    println!("figure\tnode_start\t{name}\t{value:.3}\t{unit}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn pod_running(client: &kube::Client, image: &str) -> Duration {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "p-"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": image}]}
    }))
    .unwrap();
    let begun = Instant::now();
    let name = api
        .create(&PostParams::default(), &pod)
        .await
        .expect("create")
        .metadata
        .name
        .unwrap();
    loop {
        let p = api.get(&name).await.expect("get");
        if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
            return begun.elapsed();
        }
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "pod not Running in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() {
    if ready_or_skip().is_none() {
        eprintln!("cannot run: {:?}", missing());
        std::process::exit(1);
    }
    let workload = tcab_oci_image::rig::target_binary("tcab-workload")
        .or_else(|_| {
            // A release example looks beside itself; the debug build also does.
            let p = tcab_real_cluster::workspace_root().join("target/debug/tcab-workload");
            if p.is_file() {
                Ok(p)
            } else {
                Err(anyhow::anyhow!(
                    "build it: cargo build -p tcab-workloads --bins"
                ))
            }
        })
        .expect("the tcab-workload binary");
    let images_dir = tcab_real_cluster::workspace_root().join("target/rig-images");
    let begun = Instant::now();
    let images = tcab_oci_image::rig::workload_archives(&workload, &images_dir).expect("images");
    println!(
        "images ready in {:?} ({} archives)",
        begun.elapsed(),
        images.len()
    );

    let (mut network, mut cp, mut runtimes, mut ready, mut first) =
        (vec![], vec![], vec![], vec![], vec![]);
    for round in 1..=ROUNDS {
        let cluster = KubeletCluster::start(
            Settings {
                namespaces: vec![NS.into()],
                ..Settings::default()
            },
            KubeletSettings::new(vec!["real-1".into(), "real-2".into()], images.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        let t = cluster.node_times();
        let client = cluster.admin_client().await.expect("client");
        let pod = pod_running(&client, "tcab/plain:dev").await;
        println!(
            "round {round}: network {:?}, control plane {:?}, containerd + images {:?} (2 nodes), nodes Ready {:?} after the control plane, first pod Running in {:?}",
            t.network, t.control_plane, t.runtimes, t.nodes_ready, pod
        );
        network.push(t.network.as_secs_f64());
        cp.push(t.control_plane.as_secs_f64());
        runtimes.push(t.runtimes.as_secs_f64() / 2.0);
        ready.push(t.nodes_ready.as_secs_f64());
        first.push(pod.as_secs_f64());
        cluster.stop().await;
    }
    figure("node network setup", median(network), "s");
    figure("control plane start", median(cp), "s");
    figure(
        "containerd start and image import per node",
        median(runtimes),
        "s",
    );
    figure(
        "two real nodes Ready after the control plane",
        median(ready),
        "s",
    );
    figure("first pod Running on a real node", median(first), "s");
}
