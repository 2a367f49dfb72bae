//! Command-line flags of the `tcab-backend-sim` binary, declared with clap.

use crate::{DEFAULT_LEASE, DEFAULT_PUBLISH_BACKSTOP, SimOptions};
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The command line. A flag given twice is an error. No `Debug`: it holds
/// the service token ([`SimOptions`]'s `Debug` redacts it).
#[derive(Clone, Parser)]
#[command(
    name = "tcab-backend-sim",
    version,
    about = "The reference backend: the HTTP contract of docs/backend-contract.md, state in SQLite",
    after_help = "The first line on stdout is `listening on http://ADDR`. RUST_LOG sets the log filter (stderr)."
)]
pub struct Args {
    /// Address to listen on, e.g. 127.0.0.1:0 (0 picks a free port)
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub listen: SocketAddr,
    /// SQLite file holding the state (created when absent)
    #[arg(long, value_name = "PATH", value_parser = db)]
    pub db: PathBuf,
    /// The token service calls must present
    #[arg(long, value_name = "TOKEN", value_parser = service_token)]
    pub service_token: String,
    /// Lease set by a claim or renewal, in seconds
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LEASE.as_secs(), value_parser = seconds)]
    pub lease_seconds: u64,
    /// A publish dispatched this many seconds with no result fails
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_PUBLISH_BACKSTOP.as_secs(),
        value_parser = seconds,
    )]
    pub publish_backstop_seconds: u64,
    /// Serve POST /admin/clock/advance {"seconds": N} and POST /admin/faults
    /// (stalls and errors; docs/backend-contract.md)
    #[arg(long)]
    pub enable_test_clock: bool,
}

fn listen(v: &str) -> Result<SocketAddr, String> {
    v.parse()
        .map_err(|_| "is not an address like 127.0.0.1:8080".to_string())
}

fn db(v: &str) -> Result<PathBuf, String> {
    if v.is_empty() {
        return Err("empty path".into());
    }
    Ok(PathBuf::from(v))
}

fn service_token(v: &str) -> Result<String, String> {
    if v.trim().is_empty() {
        return Err("the token must not be empty".into());
    }
    Ok(v.to_string())
}

fn seconds(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| (1..=1_000_000_000).contains(n))
        .ok_or_else(|| "is not a whole number of seconds between 1 and 1e9".to_string())
}

impl Args {
    /// The backend's options.
    pub fn into_options(self) -> SimOptions {
        let mut opts = SimOptions::new(self.db, self.service_token);
        opts.listen = self.listen;
        opts.lease_length = Duration::from_secs(self.lease_seconds);
        opts.publish_backstop = Duration::from_secs(self.publish_backstop_seconds);
        opts.enable_test_clock = self.enable_test_clock;
        opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    fn parse(s: &str) -> Result<SimOptions, clap::Error> {
        Args::try_parse_from(std::iter::once("tcab-backend-sim").chain(s.split_whitespace()))
            .map(Args::into_options)
    }

    #[test]
    fn clap_accepts_the_declaration() {
        Args::command().debug_assert();
    }

    #[test]
    fn full_command_line() {
        let o = parse(
            "--listen 127.0.0.1:0 --db /tmp/x.db --service-token=s3cret --lease-seconds 30 \
             --publish-backstop-seconds=60 --enable-test-clock",
        )
        .unwrap();
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
        let o = parse("--listen 127.0.0.1:9 --db d --service-token t").unwrap();
        assert_eq!(o.lease_length, crate::DEFAULT_LEASE);
        assert_eq!(o.publish_backstop, crate::DEFAULT_PUBLISH_BACKSTOP);
        assert!(!o.enable_test_clock);
        let err = |s: &str| parse(s).err().unwrap_or_else(|| panic!("{s} parses"));
        let e = err("--db d --service-token t");
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("--listen"), "{e}");
        assert_eq!(err("--listen").kind(), ErrorKind::InvalidValue);
        for line in [
            "--listen nope --db d --service-token t",
            "--listen 127.0.0.1:0 --db d --service-token t --lease-seconds 0",
            "--listen 127.0.0.1:0 --db d --service-token t --publish-backstop-seconds x",
            "--listen 127.0.0.1:0 --db= --service-token t",
            "--listen 127.0.0.1:0 --db d --service-token=",
        ] {
            assert_eq!(err(line).kind(), ErrorKind::ValueValidation, "{line}");
        }
        let e = err("--listen 127.0.0.1:0 --db d --service-token t --enable-test-clock=yes");
        assert_eq!(e.kind(), ErrorKind::TooManyValues, "{e}");
        let e = err("--frobnicate");
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--frobnicate"), "{e}");
        assert_eq!(err("--db a --db b").kind(), ErrorKind::ArgumentConflict);
        assert_eq!(err("--help").kind(), ErrorKind::DisplayHelp);
        assert_eq!(err("-V").kind(), ErrorKind::DisplayVersion);
    }
}
