//! `cargo run -p tcab-devstack`: the whole system on this machine. See `--help`.

use clap::Parser;
use std::time::Duration;
use tcab_devstack::demo::{self, Args};
use tcab_devstack::{Stack, StackOptions};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Bad flags: clap's message and exit status 2; --help and --version: exit 0.
    let args = Args::parse();
    let dir = demo::prepare_dir(&args.dir).unwrap_or_else(|e| exit_2(&e));
    println!("starting the dev stack in {} ...", dir.display());
    let mut stack = Stack::start(StackOptions::new(&dir)).await?;
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
