//! Configuration: environment variables only, one typed struct per binary.
//!
//! Each variable is declared once, in [`vars`]: name, kind (type, parser,
//! minimum), typed default, the binaries that read it, and its meaning. From
//! those declarations come the readers ([`Setting::get`]), each binary's
//! `--help` ([`help_text`]), the README's table ([`markdown_table`]) and the
//! JSON description the chart check reads ([`settings_json`]).
//!
//! The files, by concern:
//! - [`kinds`]: the kinds of value and their parsers;
//! - `setting.rs`: the declaration type, reading one variable, and the
//!   check that documented defaults are the parsed ones;
//! - [`vars`]: every declaration;
//! - `env.rs`: the environment the readers read;
//! - `common.rs`: the settings several binaries share ([`CommonConfig`],
//!   [`BackendConfig`]) and cross-checks between variables;
//! - `docs.rs`: `--help`, the README table, the JSON description;
//! - `startup.rs`: `--help`/`--version`/run, and exit 2 on a bad variable.
//!
//! Each binary's own configuration struct lives in its crate
//! (`bins/*/src/config.rs`) and implements [`BinaryConfig`]. A missing or
//! malformed variable is a [`ConfigError`] that names the variable and what
//! was expected; [`load`] prints it on one stderr line and exits with code 2
//! before the binary does anything.

mod common;
mod docs;
mod env;
pub mod kinds;
mod setting;
mod startup;
pub mod vars;

pub use common::{
    BackendConfig, CommonConfig, LogFormat, at_most_half_lease, distinct_managed_by,
    limit_at_least_request, renewals_fit_in_lease,
};
pub use docs::{help_text, markdown_table, settings_json};
pub use env::{Env, Unknown, unknown_variables, warn_unknown_variables};
pub use setting::{Declared, DefaultsCheck, Fallback, Setting};
pub use startup::{BinaryConfig, Startup, load, startup};
pub use vars::{PASSTHROUGH_PREFIXES, SETTINGS};

use std::borrow::Cow;
use std::fmt;

/// Which binary reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `tcab-admitter`
    Admitter,
    /// `tcab-lease-keeper`
    LeaseKeeper,
    /// `tcab-reaper`
    Reaper,
}

impl Binary {
    /// The binary's name.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Admitter => "tcab-admitter",
            Binary::LeaseKeeper => "tcab-lease-keeper",
            Binary::Reaper => "tcab-reaper",
        }
    }

    /// The `User-Agent` of the binary's Kubernetes and backend calls
    /// (`tcab-admitter/0.1.0`): the API server's audit log and the
    /// simulators' request counters tell the three containers apart by it.
    pub fn user_agent(self) -> String {
        format!("{}/{}", self.name(), env!("CARGO_PKG_VERSION"))
    }

    /// The arguments `--help` shows: `tcab-admitter check` checks an
    /// install (`bins/admitter/src/check.rs`); the others take none but
    /// `--help` and `--version`.
    pub fn usage(self) -> &'static str {
        match self {
            Binary::Admitter => "[--help | --version | check]",
            Binary::LeaseKeeper | Binary::Reaper => "[--help | --version]",
        }
    }

    /// The name without the `tcab-` prefix (the README's "read by" column).
    pub fn short_name(self) -> &'static str {
        match self {
            Binary::Admitter => "admitter",
            Binary::LeaseKeeper => "lease-keeper",
            Binary::Reaper => "reaper",
        }
    }
}

/// What a binary was built from. Each binary crate's build script bakes the
/// git revision in (bins/revision.rs), so a new commit recompiles only the
/// three binary crates; `main` passes the values here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    /// The workspace version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The git commit id the binary was built from, the `TCAB_GIT_REVISION`
    /// it was built with, or `unknown`.
    pub revision: &'static str,
}

/// The [`BuildInfo`] of the binary crate it is written in: that crate's
/// `CARGO_PKG_VERSION` and the `TCAB_REVISION` its build script baked in
/// (`env!` is read where the macro is expanded, not here).
#[macro_export]
macro_rules! build_info {
    () => {
        $crate::config::BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: env!("TCAB_REVISION"),
        }
    };
}

impl fmt::Display for BuildInfo {
    /// `0.1.0 (revision 4eefe8c...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (revision {})", self.version, self.revision)
    }
}

/// A variable that is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("{var}: required, expected {expected}")]
    Missing {
        var: &'static str,
        expected: Cow<'static, str>,
    },
    /// A variable's value does not parse.
    #[error("{var}: expected {expected}, got {got:?}")]
    Invalid {
        var: &'static str,
        expected: Cow<'static, str>,
        got: String,
    },
    /// A structured value (a JSON object) refused for a reason that says
    /// where in it: malformed JSON, a field of the wrong type, a field its
    /// type does not have, or one another variable owns.
    #[error("{var}: expected {expected}; {reason}")]
    Refused {
        var: &'static str,
        expected: Cow<'static, str>,
        reason: String,
    },
    /// The environment itself could not be read (a value that is not UTF-8).
    #[error("environment: {0}")]
    Environment(String),
}
