//! Command-line flags of the `tcab-backend-sim` binary.

use crate::SimOptions;
use std::net::SocketAddr;
use std::time::Duration;

/// The usage text (`--help`).
pub const USAGE: &str = "\
usage: tcab-backend-sim --listen ADDR --db PATH --service-token TOKEN
                        [--lease-seconds N] [--publish-backstop-seconds N]
                        [--enable-test-clock]

  --listen ADDR                  address to listen on, e.g. 127.0.0.1:0 (0 picks a free port)
  --db PATH                      SQLite file holding the state (created when absent)
  --service-token TOKEN          the token service calls must present
  --lease-seconds N              lease set by a claim or renewal (default 120)
  --publish-backstop-seconds N   a publish dispatched this long with no result fails (default 3600)
  --enable-test-clock            serve POST /admin/clock/advance {\"seconds\": N} and
                                 POST /admin/faults (stalls and errors; docs/backend-contract.md)
  -h, --help                     print this help
  -V, --version                  print the version

The first line on stdout is `listening on http://ADDR`. RUST_LOG sets the log filter (stderr).";

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Serve with these options.
    Run(Box<SimOptions>),
    /// Print the usage.
    Help,
    /// Print the version.
    Version,
}

/// A command line that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CliError {
    #[error("missing required flag {0}")]
    Missing(&'static str),
    #[error("flag {0} needs a value")]
    NoValue(String),
    #[error("flag {0} given twice")]
    Repeated(String),
    #[error("invalid value for {flag}: {reason}")]
    Invalid { flag: String, reason: String },
    #[error("unknown argument {0:?}")]
    Unknown(String),
}

fn seconds(flag: &str, value: &str) -> Result<Duration, CliError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=1_000_000_000).contains(n))
        .map(Duration::from_secs)
        .ok_or_else(|| CliError::Invalid {
            flag: flag.into(),
            reason: format!("{value:?} is not a whole number of seconds between 1 and 1e9"),
        })
}

/// Parses the arguments (without the program name). Flags take their value
/// as the next argument or after `=`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, CliError> {
    let mut listen: Option<SocketAddr> = None;
    let mut db: Option<String> = None;
    let mut token: Option<String> = None;
    let mut lease: Option<Duration> = None;
    let mut backstop: Option<Duration> = None;
    let mut test_clock = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--enable-test-clock" => {
                if inline.is_some() {
                    return Err(CliError::Invalid {
                        flag,
                        reason: "takes no value".into(),
                    });
                }
                test_clock = true;
                continue;
            }
            "--listen"
            | "--db"
            | "--service-token"
            | "--lease-seconds"
            | "--publish-backstop-seconds" => {}
            _ => return Err(CliError::Unknown(arg)),
        }
        let value = match inline {
            Some(v) => v,
            None => args.next().ok_or_else(|| CliError::NoValue(flag.clone()))?,
        };
        let repeated = match flag.as_str() {
            "--listen" => listen
                .replace(value.parse().map_err(|_| CliError::Invalid {
                    flag: flag.clone(),
                    reason: format!("{value:?} is not an address like 127.0.0.1:8080"),
                })?)
                .is_some(),
            "--db" => {
                if value.is_empty() {
                    return Err(CliError::Invalid {
                        flag,
                        reason: "empty path".into(),
                    });
                }
                db.replace(value).is_some()
            }
            "--service-token" => {
                if value.trim().is_empty() {
                    return Err(CliError::Invalid {
                        flag,
                        reason: "the token must not be empty".into(),
                    });
                }
                token.replace(value).is_some()
            }
            "--lease-seconds" => lease.replace(seconds(&flag, &value)?).is_some(),
            _ => backstop.replace(seconds(&flag, &value)?).is_some(),
        };
        if repeated {
            return Err(CliError::Repeated(flag));
        }
    }
    let mut opts = SimOptions::new(
        db.ok_or(CliError::Missing("--db"))?,
        token.ok_or(CliError::Missing("--service-token"))?,
    );
    opts.listen = listen.ok_or(CliError::Missing("--listen"))?;
    opts.lease_length = lease.unwrap_or(crate::DEFAULT_LEASE);
    opts.publish_backstop = backstop.unwrap_or(crate::DEFAULT_PUBLISH_BACKSTOP);
    opts.enable_test_clock = test_clock;
    Ok(Command::Run(Box::new(opts)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn full_command_line() {
        let Command::Run(o) = parse(args(
            "--listen 127.0.0.1:0 --db /tmp/x.db --service-token=s3cret --lease-seconds 30 \
             --publish-backstop-seconds=60 --enable-test-clock",
        ))
        .unwrap() else {
            panic!("expected run")
        };
        assert_eq!(o.listen.port(), 0);
        assert_eq!(o.db.as_deref(), Some(std::path::Path::new("/tmp/x.db")));
        assert_eq!(o.service_token, "s3cret");
        assert_eq!(o.lease_length, Duration::from_secs(30));
        assert_eq!(o.publish_backstop, Duration::from_secs(60));
        assert!(o.enable_test_clock);
        assert!(!format!("{o:?}").contains("s3cret"));
    }

    #[test]
    fn defaults_and_errors() {
        let Command::Run(o) = parse(args("--listen 127.0.0.1:9 --db d --service-token t")).unwrap()
        else {
            panic!("expected run")
        };
        assert_eq!(o.lease_length, crate::DEFAULT_LEASE);
        assert!(!o.enable_test_clock);
        assert_eq!(
            parse(args("--db d --service-token t")).unwrap_err(),
            CliError::Missing("--listen")
        );
        assert_eq!(
            parse(args("--listen")).unwrap_err(),
            CliError::NoValue("--listen".into())
        );
        assert!(matches!(
            parse(args("--listen nope --db d --service-token t")).unwrap_err(),
            CliError::Invalid { .. }
        ));
        assert!(matches!(
            parse(args(
                "--listen 127.0.0.1:0 --db d --service-token t --lease-seconds 0"
            ))
            .unwrap_err(),
            CliError::Invalid { .. }
        ));
        assert_eq!(
            parse(args("--frobnicate")).unwrap_err(),
            CliError::Unknown("--frobnicate".into())
        );
        assert_eq!(
            parse(args("--db a --db b")).unwrap_err(),
            CliError::Repeated("--db".into())
        );
        assert!(matches!(parse(args("--help")).unwrap(), Command::Help));
    }
}
