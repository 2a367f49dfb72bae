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
    if chart && !args.cluster.is_real() {
        exit_2("--install chart needs --cluster real (the node agent runs the chart's pod)");
    }
    let dir = demo::prepare_dir(&args.dir).unwrap_or_else(|e| exit_2(&e));
    if args.cluster.is_real()
        && let Err(e) = tcab_devstack::real::ensure_built()
    {
        eprintln!("tcab-devstack: {e:#}");
        std::process::exit(1);
    }
    println!(
        "starting the dev stack ({} cluster) in {} ...",
        args.cluster,
        dir.display()
    );
    let mut options = StackOptions::new(&dir);
    options.cluster = args.cluster;
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
