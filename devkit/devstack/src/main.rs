//! `cargo run -p tcab-devstack`: the whole system on this machine. See `--help`.

use clap::Parser;
use std::time::Duration;
use tcab_devstack::demo::{self, Args};
use tcab_devstack::{Stack, StackOptions};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Bad flags: clap's message and exit status 2; --help and --version: exit 0.
    let args = Args::parse();
    let chart = args.install == demo::Install::Chart;
    if let Some(why) = args.conflict() {
        exit_2(why);
    }
    let kubelets = args.node == tcab_devstack::NodeKind::Kubelet;
    if kubelets {
        // What the machine lacks comes first: the control plane's build
        // cannot make up for it.
        let lacking = tcab_real_cluster::node::missing();
        if !lacking.is_empty() {
            exit_1(&format!(
                "--node kubelet cannot run on this machine: missing {}",
                lacking.join(", ")
            ));
        }
    }
    let dir = demo::prepare_dir(&args.dir).unwrap_or_else(|e| exit_2(&e));
    if args.cluster.is_real()
        && let Err(e) = tcab_devstack::real::ensure_built()
    {
        exit_1(&format!("{e:#}"));
    }
    if kubelets {
        let lacking = tcab_devstack::real::kubelet_nodes_missing();
        if !lacking.is_empty() {
            exit_1(&format!(
                "--node kubelet cannot run on this machine: missing {}",
                lacking.join(", ")
            ));
        }
    }
    let nodes = if args.cluster.is_real() {
        format!(", nodes: {}", args.node)
    } else {
        String::new()
    };
    println!(
        "starting the dev stack ({} cluster{nodes}) in {} ...",
        args.cluster,
        dir.display()
    );
    let mut options = StackOptions::new(&dir);
    options.cluster = args.cluster;
    options.nodes = args.node;
    // A control plane of its own, stopped with the stack.
    options.shared_control_plane = false;
    options.start_containers = !chart;
    let mut stack = Stack::start(options).await?;
    if chart {
        let release = tcab_devstack::stack::CHART_RELEASE;
        println!("installing the chart (release {release}) ...");
        let values = stack.chart_values();
        if let Err(e) = stack
            .install_chart(release, &values, Duration::from_secs(180))
            .await
        {
            eprintln!("tcab-devstack: installing the chart: {e:#}");
            stack.shutdown().await;
            std::process::exit(1);
        }
    }
    let drained = tcab_devstack::stack::run_demo(&mut stack, &args, Duration::from_secs(2)).await;
    stack.shutdown().await;
    if !drained? {
        eprintln!("some demo jobs did not end as scripted");
        std::process::exit(1);
    }
    Ok(())
}

fn exit_2(message: &str) -> ! {
    eprintln!("tcab-devstack: {message}");
    std::process::exit(2)
}

fn exit_1(message: &str) -> ! {
    eprintln!("tcab-devstack: {message}");
    std::process::exit(1)
}
