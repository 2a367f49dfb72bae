//! `tcab-kube-sim`: runs the simulated cluster until interrupted. See `--help`.

use tcab_kube_sim::cli::{self, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    cli::init_logging();
    let opts = match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            println!("{}", cli::USAGE);
            return Ok(());
        }
        Ok(Command::Run(args)) => args.into_options(),
        Err(e) => Err(e),
    };
    let opts = opts.unwrap_or_else(|e| {
        eprintln!("tcab-kube-sim: {}\n{}", cli::explain(&e), cli::USAGE);
        std::process::exit(2)
    });
    let sim = tcab_kube_sim::spawn(opts).await?;
    // stdout is line-buffered: the line is out before the first request.
    println!("listening on {}", sim.url());
    cli::interrupted().await?;
    sim.shutdown();
    Ok(())
}
