//! Each dispatcher container's memory on a real kubelet node, as the
//! kubelet's cgroup reports it (`/stats/summary`: working set, RSS, usage),
//! beside the resident memory of the container's processes (`VmRSS`, what
//! the footprint bench reads) under the same load: the chart installed on
//! `--node kubelet`'s cluster, the demo's runs and publishes drained, then
//! `SETTLE` of steady state (prints figures; asserts nothing).
//!
//!     cargo build -p tcab-workloads --bins
//!     scripts/bench-compare -- cargo run --release -p tcab-devstack --example kubelet_memory
//!
//! The footprint bench's "1 Job" size is the same idle load on kube-sim's
//! processes (`--example footprint -- 1`).

use clap::Parser;
use serde_json::Value;
use std::time::Duration;
use tcab_devstack::demo::Args;
use tcab_devstack::{NodeKind, Stack, StackOptions};

/// Steady state after the drain, before reading.
const SETTLE: Duration = Duration::from_secs(15);

fn figure(name: &str, value: f64, unit: &str) {
    println!("figure\tkubelet_memory\t{name}\t{value:.1}\t{unit}");
}

fn vm_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if tcab_real_cluster::node::ready_or_skip().is_none() {
        anyhow::bail!("real nodes cannot run here");
    }
    let args = Args::parse_from([
        "kubelet_memory",
        "--cluster",
        "real",
        "--node",
        "kubelet",
        "--install",
        "chart",
        "--exit-when-drained",
    ]);
    let dir = tempfile::tempdir()?;
    let mut options = StackOptions::new(dir.path());
    options.cluster = args.cluster;
    options.nodes = NodeKind::Kubelet;
    options.shared_control_plane = false;
    options.start_containers = false;
    let mut stack = Stack::start(options).await?;
    let values = stack.chart_values();
    stack
        .install_chart(
            tcab_devstack::stack::CHART_RELEASE,
            &values,
            Duration::from_secs(180),
        )
        .await?;
    let drained = tcab_devstack::stack::run_demo(&mut stack, &args, Duration::from_secs(2)).await?;
    println!("demo drained: {drained}; settling {SETTLE:?}");
    tokio::time::sleep(SETTLE).await;
    let client = stack
        .real
        .as_ref()
        .expect("a real cluster")
        .access
        .admin_client()
        .await?;
    let ns = stack.namespace().to_owned();
    let pods: Value = client
        .request(http::Request::get(format!("/api/v1/namespaces/{ns}/pods")).body(vec![])?)
        .await?;
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            p["spec"]["containers"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "admitter"))
        })
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no dispatcher pod in {ns}"))?;
    let (name, node) = (
        pod["metadata"]["name"].as_str().unwrap_or(""),
        pod["spec"]["nodeName"].as_str().unwrap_or(""),
    );
    let summary: Value = client
        .request(
            http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary")).body(vec![])?,
        )
        .await?;
    let stats = summary["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["podRef"]["name"] == name)
        .ok_or_else(|| anyhow::anyhow!("pod {name} not in {node}'s summary"))?;
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>12}",
        "container", "working set", "cgroup rss", "usage", "VmRSS"
    );
    for c in stats["containers"].as_array().into_iter().flatten() {
        let cname = c["name"].as_str().unwrap_or("");
        let mib = |k: &str| c["memory"][k].as_f64().unwrap_or(0.0) / 1048576.0;
        let id = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == cname)
            .and_then(|s| s["containerID"].as_str())
            .and_then(|s| s.strip_prefix("containerd://"))
            .unwrap_or("");
        let rss = tcab_real_cluster::node::container_pids(id)
            .into_iter()
            .map(vm_rss_kib)
            .sum::<u64>() as f64
            / 1024.0;
        println!(
            "{cname:<14} {:>9.1} MiB {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB",
            mib("workingSetBytes"),
            mib("rssBytes"),
            mib("usageBytes"),
            rss
        );
        figure(
            &format!("{cname} working set (cgroup)"),
            mib("workingSetBytes"),
            "MiB",
        );
        figure(&format!("{cname} rss (cgroup)"), mib("rssBytes"), "MiB");
        figure(&format!("{cname} VmRSS (processes)"), rss, "MiB");
    }
    stack.shutdown().await;
    Ok(())
}
