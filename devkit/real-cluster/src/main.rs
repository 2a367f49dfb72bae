//! `tcab-control-plane`: runs the real control plane in the foreground for
//! people (`scripts/control-plane up`): prints how to reach it, stops on
//! Ctrl-C (or SIGTERM), and exits 1 if a component dies under it.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tcab_real_cluster::{ControlPlane, Identity, Settings, Timings};

/// Run etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
/// loopback (built by `scripts/control-plane build`) until Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "tcab-control-plane", version)]
struct Args {
    /// Node names to give a static token (`system:node:<name>`), comma-separated;
    /// a node agent plays them.
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    /// Namespaces to create (each waits for its `default` ServiceAccount).
    #[arg(long = "namespace", value_name = "NAME")]
    namespaces: Vec<String>,
    /// Extra static-token users, as NAME or NAME:GROUP1+GROUP2, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_identity)]
    identities: Vec<Identity>,
    /// The work dir (keys, kubeconfigs, logs, etcd's data), kept afterwards.
    /// [default: a temporary directory, removed on a clean stop]
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Where the binaries are. [default: $TCAB_CONTROL_PLANE_BIN, else
    /// `scripts/control-plane path`]
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// How long the start may take (e.g. 90s, 2m).
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    ready_timeout: Duration,
    /// --node-monitor-period of the controller-manager.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    /// --node-monitor-grace-period: a Node without heartbeats this long is Unknown.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    /// --node-startup-grace-period.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
    /// --node-eviction-rate (nodes per second).
    #[arg(long, default_value_t = 1.0)]
    node_eviction_rate: f32,
    /// --default-not-ready-toleration-seconds, as a duration.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    not_ready_toleration: Duration,
    /// --default-unreachable-toleration-seconds, as a duration.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    unreachable_toleration: Duration,
    /// --etcd-compaction-interval of the API server.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    etcd_compaction_interval: Duration,
    /// --terminated-pod-gc-threshold of the controller-manager.
    #[arg(long, default_value_t = 12500)]
    terminated_pod_gc_threshold: u32,
    /// Run this node agent (e.g. target/debug/tcab-node-agent) for --nodes once
    /// the control plane is ready, with `--api-url --ca-file --tokens --node ...`,
    /// and wait until every node is Ready.
    #[arg(long, value_name = "PROGRAM", requires = "nodes")]
    node_agent: Option<PathBuf>,
    /// Run the API server without its watch cache (--watch-cache=false).
    #[arg(long)]
    no_watch_cache: bool,
    /// Internal: be the owner of a shared control plane for tests
    /// (`tcab_real_cluster::shared_with`), in this directory.
    #[arg(long, hide = true, value_name = "DIR")]
    serve_shared: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as 10s, 500ms or 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("`{s}`: the unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

fn parse_identity(s: &str) -> Result<Identity, String> {
    let (name, groups) = s.split_once(':').unwrap_or((s, ""));
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!("`{name}`: a name of letters, digits, - _ ."));
    }
    let groups: Vec<&str> = groups.split('+').filter(|g| !g.is_empty()).collect();
    Ok(Identity::new(name, &groups))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.serve_shared {
        std::process::exit(tcab_real_cluster::serve_shared(dir).await);
    }
    let settings = Settings {
        bin_dir: args.bin_dir,
        work_dir: args.work_dir,
        nodes: args.nodes,
        identities: args.identities,
        namespaces: args.namespaces,
        ready_timeout: args.ready_timeout,
        timings: Timings {
            node_monitor_period: args.node_monitor_period,
            node_monitor_grace_period: args.node_monitor_grace_period,
            node_startup_grace_period: args.node_startup_grace_period,
            node_eviction_rate: args.node_eviction_rate,
            not_ready_toleration: args.not_ready_toleration,
            unreachable_toleration: args.unreachable_toleration,
            etcd_compaction_interval: args.etcd_compaction_interval,
            terminated_pod_gc_threshold: args.terminated_pod_gc_threshold,
        },
        watch_cache: !args.no_watch_cache,
        node_agent: args.node_agent.map(tcab_real_cluster::NodeAgent::new),
        ..Settings::default()
    };
    let bin_dir = match &settings.bin_dir {
        Some(d) => d.clone(),
        None => tcab_real_cluster::default_bin_dir().map_err(anyhow::Error::msg)?,
    };
    eprintln!("starting the control plane from {} ...", bin_dir.display());
    let mut cp = ControlPlane::start(settings).await?;
    let times = cp.start_times();
    let kubectl = if bin_dir.join("kubectl").is_file() {
        bin_dir.join("kubectl").display().to_string()
    } else {
        "kubectl".into()
    };
    println!(
        "\ncontrol plane up in {:.1} s (etcd {:.1} s, API {:.1} s, controllers {:.1} s)",
        times.default_service_accounts.as_secs_f64(),
        times.etcd_ready.as_secs_f64(),
        times.apiserver_ready.as_secs_f64(),
        times.controllers_ready.as_secs_f64()
    );
    println!("  API          {}", cp.api_url);
    println!("  CA           {}", cp.ca_cert.display());
    println!("  kubeconfig   {}", cp.admin.kubeconfig.display());
    println!(
        "  kubectl      {kubectl} --kubeconfig {} get namespaces",
        cp.admin.kubeconfig.display()
    );
    for (name, c) in &cp.nodes {
        println!(
            "  node {name:<8} token {}  kubeconfig {}",
            c.token,
            c.kubeconfig.display()
        );
    }
    if let Some(t) = times.nodes_ready {
        println!(
            "  nodes        Ready {:.1} s after the start; agent: {}",
            t.as_secs_f64(),
            cp.node_agent_ready.as_deref().unwrap_or("")
        );
    }
    for (name, c) in &cp.identities {
        println!(
            "  user {name:<8} token {}  kubeconfig {}",
            c.token,
            c.kubeconfig.display()
        );
    }
    println!(
        "  logs         {}",
        cp.logs()
            .apiserver
            .parent()
            .map_or_else(String::new, |p| p.display().to_string())
    );
    let pids: Vec<String> = cp.pids().iter().map(|(n, p)| format!("{n} {p}")).collect();
    println!("  pids         {}", pids.join(", "));
    println!("Ctrl-C stops it.");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut died = None;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if let Some(exit) = cp.exited() {
                    died = Some(exit);
                    break;
                }
            }
        }
    }
    if let Some((name, status)) = &died {
        let logs = cp.keep_work_dir().join("logs");
        eprintln!(
            "{name} exited ({status}); stopping the rest. Logs: {}",
            logs.display()
        );
    }
    eprintln!("stopping ...");
    let work_dir = cp.work_dir.clone();
    let report = cp.stop().await;
    for (name, how) in &report.0 {
        eprintln!("  {name}: {how}");
    }
    if died.is_some() {
        eprintln!("work dir: {}", work_dir.display());
        std::process::exit(1);
    }
    Ok(())
}
