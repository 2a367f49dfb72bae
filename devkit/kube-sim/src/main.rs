//! `tcab-kube-sim`: runs the simulated cluster until interrupted. See `--help`.

use clap::{CommandFactory, Parser, error::ErrorKind};
use tcab_kube_sim::cli::{self, Args};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Bad flags: clap's message and exit status 2; --help and --version: exit 0.
    let args = Args::parse();
    cli::init_logging();
    let opts = args.into_options().unwrap_or_else(|e| {
        Args::command()
            .error(ErrorKind::ValueValidation, cli::explain(&e))
            .exit()
    });
    let sim = tcab_kube_sim::spawn(opts).await?;
    // stdout is line-buffered: the line is out before the first request.
    println!("listening on {}", sim.url());
    cli::interrupted().await?;
    sim.shutdown();
    Ok(())
}
