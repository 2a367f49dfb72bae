//! The binary as an operator starts it: configuration comes from the
//! environment only, a bad one exits 2 with one stderr line naming the
//! variable (and never echoing a token), `--help` and `--version` exit 0.

use std::process::{Command, Output};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-admitter");
const SERVICE_TOKEN: &str = "svc-token-7Qx2-never-printed";

/// Runs the binary with exactly `env` (nothing inherited) and `args`.
fn start(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BINARY)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("the binary starts")
}

/// The three variables the admitter cannot start without.
fn required() -> Vec<(&'static str, &'static str)> {
    vec![
        ("TCAB_BACKEND_URL", "http://backend.invalid:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ("TCAB_DRIVER_IMAGE", "driver:test"),
    ]
}

/// Asserts exit code 2, nothing on stdout, and exactly one stderr line,
/// which it returns.
fn config_error(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "stdout: {:?}", output.stdout);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains(SERVICE_TOKEN), "a token leaked: {stderr}");
    stderr
}

#[test]
fn an_empty_environment_exits_2_naming_the_backend_url() {
    let stderr = config_error(&start(&[], &[]));
    assert!(stderr.contains("TCAB_BACKEND_URL"), "{stderr}");
}

#[test]
fn a_malformed_cap_exits_2_naming_it_and_its_value() {
    let mut env = required();
    env.push(("TCAB_DISPATCHER_MAX_INFLIGHT", "eight"));
    let stderr = config_error(&start(&[], &env));
    assert!(stderr.contains("TCAB_DISPATCHER_MAX_INFLIGHT"), "{stderr}");
    assert!(stderr.contains("eight"), "{stderr}");
}

#[test]
fn help_exits_0_and_lists_the_variables() {
    let output = start(&["--help"], &[]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    for var in [
        "TCAB_BACKEND_URL",
        "TCAB_BACKEND_SERVICE_TOKEN",
        "TCAB_DRIVER_IMAGE",
        "TCAB_DISPATCHER_MAX_INFLIGHT",
    ] {
        assert!(help.contains(var), "--help lists {var}: {help}");
    }
}

#[test]
fn version_exits_0_with_name_and_version() {
    let output = start(&["--version"], &[]);
    assert_eq!(output.status.code(), Some(0));
    let version = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        version.trim(),
        format!("tcab-admitter {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_stray_argument_exits_2() {
    let stderr = config_error(&start(&["--max-inflight=3"], &required()));
    assert!(stderr.contains("--max-inflight=3"), "{stderr}");
}
