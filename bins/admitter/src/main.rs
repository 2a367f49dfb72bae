//! tcab-admitter: claims queued runs and publishes and creates their Jobs.

use tcab_admitter::{AdmitterConfig, Deps, Refused, check, run};
use tcab_shared::config::BuildInfo;
use tcab_shared::runtime;

const ABOUT: &str = "Claims queued runs and publishes from the backend and creates their Jobs.

`tcab-admitter check`, with the same environment, checks an install instead: the backend
answers with the service token (a read, no claim), the API server accepts a dry run of each
Job the settings make, and the Role lets the dispatcher list its Jobs and pods. One line per
check; exit 0 when none failed, 1 when one did, 2 on a configuration error.";

/// The version, and the git revision baked in by build.rs.
const BUILD: BuildInfo = tcab_shared::build_info!();

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some((first, rest)) = args.split_first()
        && first == check::COMMAND
    {
        std::process::exit(check::main(rest, ABOUT, &BUILD));
    }
    runtime::main(
        ABOUT,
        &BUILD,
        |config: AdmitterConfig, started| async move {
            let deps = Deps {
                backend: started.backend(&config.backend)?,
                kube: started.kube,
                namespace: started.namespace,
            };
            let result = run(config, deps, started.shutdown).await;
            // The API server refuses a Job built from the settings: a
            // configuration error found at start, so the same exit as a bad
            // variable.
            if let Err(error) = &result
                && let Some(refused) = error.downcast_ref::<Refused>()
            {
                tracing::error!(error = %refused, "the API server refuses the Jobs these settings make");
                eprintln!("tcab-admitter: configuration error: {refused}");
                std::process::exit(2);
            }
            result
        },
    )
}
