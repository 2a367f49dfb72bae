//! Starting a binary: `--help`, `--version`, or its configuration read from
//! the environment; a configuration error is one stderr line and exit 2.

use super::docs::help_text;
use super::{Binary, BuildInfo, CommonConfig, ConfigError, Env};

/// A binary's configuration type (each binary crate defines its own).
pub trait BinaryConfig: Sized {
    /// The binary that reads it.
    const BINARY: Binary;
    /// Validates the configuration from an environment.
    fn from_env(env: &Env) -> Result<Self, ConfigError>;

    /// The settings every binary reads (what the runtime starts from).
    fn common(&self) -> &CommonConfig;

    /// Validates the configuration from a list of variables (tests).
    fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_vars(vars)?)
    }
}

/// What [`load`] decided from the command line and environment.
#[derive(Debug)]
pub enum Startup<C> {
    /// Run with this configuration.
    Run(C),
    /// Print this to stdout and exit 0 (`--help`, `--version`).
    Print(String),
    /// Print this to stderr and exit 2.
    Fail(String),
}

/// Decides what a binary does from its arguments and environment (pure, for tests).
pub fn startup<C: BinaryConfig>(
    args: &[String],
    about: &str,
    build: &BuildInfo,
    env: Result<Env, ConfigError>,
) -> Startup<C> {
    match args.first().map(String::as_str) {
        Some("--help" | "-h") => return Startup::Print(help_text(C::BINARY, about, build)),
        Some("--version" | "-V") => {
            return Startup::Print(format!("{} {build}\n", C::BINARY.name()));
        }
        Some(other) => {
            return Startup::Fail(format!(
                "{}: unexpected argument {other:?}; configuration is environment variables only (see --help)",
                C::BINARY.name()
            ));
        }
        None => {}
    }
    match env.and_then(|env| C::from_env(&env)) {
        Ok(config) => Startup::Run(config),
        Err(error) => Startup::Fail(format!(
            "{}: configuration error: {error}",
            C::BINARY.name()
        )),
    }
}

/// Reads the binary's configuration from its arguments and the process
/// environment. `--help` and `--version` (which names the version and the git
/// revision of `build`) print and exit 0; any other argument or a bad variable
/// prints one line to stderr and exits 2.
pub fn load<C: BinaryConfig>(about: &str, build: &BuildInfo) -> C {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match startup::<C>(&args, about, build, Env::from_process()) {
        Startup::Run(config) => config,
        Startup::Print(text) => {
            print!("{text}");
            std::process::exit(0)
        }
        Startup::Fail(line) => {
            eprintln!("{line}");
            std::process::exit(2)
        }
    }
}
