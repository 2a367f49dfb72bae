//! The binary as an operator starts it: a bad environment exits 2 with one
//! stderr line naming the variable, and never echoes a token.

use tcab_testkit::cli::{Ran, run};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-lease-keeper");
const SERVICE_TOKEN: &str = "svc-token-7Qx2-never-printed";

/// Runs the binary with exactly `env` (nothing inherited) and `args`.
fn start(args: &[&str], env: &[(&str, &str)]) -> Ran {
    run(BINARY, args, env)
}

/// Asserts exit code 2, nothing on stdout, and exactly one stderr line,
/// which it returns.
fn config_error(output: &Ran) -> String {
    output.config_error(SERVICE_TOKEN).to_owned()
}

#[test]
fn an_empty_environment_exits_2_naming_the_backend_url() {
    let stderr = config_error(&start(&[], &[]));
    assert!(stderr.contains("TCAB_BACKEND_URL"), "{stderr}");
}

#[test]
fn a_malformed_poll_interval_exits_2_naming_it_without_the_token() {
    let env = [
        ("TCAB_BACKEND_URL", "http://backend.invalid:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "often"),
    ];
    let stderr = config_error(&start(&[], &env));
    assert!(
        stderr.contains("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS"),
        "{stderr}"
    );
}

/// A poll interval that would let a lease lapse between renewals stops the
/// binary before it does anything, on one line naming the variables to change.
#[test]
fn a_poll_interval_too_long_for_the_lease_exits_2_naming_the_variables() {
    let env = [
        ("TCAB_BACKEND_URL", "http://backend.invalid:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "120"),
    ];
    let stderr = config_error(&start(&[], &env));
    for var in [
        "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
        "TCAB_DISPATCHER_LEASE_SECONDS",
        "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS",
    ] {
        assert!(stderr.contains(var), "{var}: {stderr}");
    }
}

#[test]
fn help_and_version_exit_0() {
    let help = start(&["--help"], &[]);
    assert_eq!(help.code, Some(0));
    assert!(help.stdout.contains("TCAB_BACKEND_URL"));
    let version = start(&["--version"], &[]);
    assert_eq!(version.code, Some(0));
    assert_eq!(
        version.stdout,
        format!(
            "tcab-lease-keeper {} (revision {})\n",
            env!("CARGO_PKG_VERSION"),
            env!("TCAB_REVISION")
        )
    );
}

/// The first log line, before anything can fail, names the binary, its
/// version, its revision and the backend contract it speaks (here the binary
/// then stops: there is no cluster).
#[test]
fn the_first_log_line_names_version_revision_and_contract() {
    let env = [
        ("TCAB_BACKEND_URL", "http://backend.invalid:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ("TCAB_DISPATCHER_LOG_FORMAT", "json"),
        ("KUBECONFIG", "/nonexistent/tcab-test-kubeconfig"),
    ];
    let output = start(&[], &env);
    let stderr = &output.stderr;
    assert_eq!(output.code, Some(1), "no cluster: {stderr}");
    output.starting_line(
        "tcab-lease-keeper",
        env!("CARGO_PKG_VERSION"),
        env!("TCAB_REVISION"),
        tcab_shared::backend::CONTRACT_VERSION,
    );
    assert!(!stderr.contains(SERVICE_TOKEN), "a token leaked: {stderr}");
}
