//! The binary as an operator starts it: a bad environment exits 2 with one
//! stderr line naming the variable.

use tcab_testkit::cli::{Ran, run};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-reaper");
const SERVICE_TOKEN: &str = "svc-token-7Qx2-never-printed";

/// Runs the binary with exactly `env` (nothing inherited) and `args`.
fn start(args: &[&str], env: &[(&str, &str)]) -> Ran {
    run(BINARY, args, env)
}

#[test]
fn a_malformed_orphan_grace_exits_2_naming_it() {
    // The orphan sweep asks the backend, so the token is in the reaper's
    // environment too; it must never be echoed.
    let output = start(
        &[],
        &[
            ("TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS", "soon"),
            ("TCAB_BACKEND_URL", "http://tcab-backend.tcab.svc:8080"),
            ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ],
    );
    let stderr = output.config_error(SERVICE_TOKEN);
    assert!(
        stderr.contains("TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS"),
        "{stderr}"
    );
    assert!(stderr.contains("soon"), "{stderr}");
}

#[test]
fn the_sweep_without_a_backend_url_exits_2_naming_it() {
    let output = start(&[], &[("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN)]);
    let stderr = output.config_error(SERVICE_TOKEN);
    assert!(stderr.contains("TCAB_BACKEND_URL"), "{stderr}");
}

#[test]
fn help_and_version_exit_0() {
    let help = start(&["--help"], &[]);
    assert_eq!(help.code, Some(0));
    assert!(help.stdout.contains("TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS"));
    let version = start(&["--version"], &[]);
    assert_eq!(version.code, Some(0));
    assert_eq!(
        version.stdout,
        format!(
            "tcab-reaper {} (revision {})\n",
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
        ("TCAB_DISPATCHER_LOG_FORMAT", "json"),
        ("TCAB_DISPATCHER_ORPHAN_SWEEP", "false"),
        ("KUBECONFIG", "/nonexistent/tcab-test-kubeconfig"),
    ];
    let output = start(&[], &env);
    let stderr = &output.stderr;
    assert_eq!(output.code, Some(1), "no cluster: {stderr}");
    output.starting_line(
        "tcab-reaper",
        env!("CARGO_PKG_VERSION"),
        env!("TCAB_REVISION"),
        tcab_shared::backend::CONTRACT_VERSION,
    );
}
