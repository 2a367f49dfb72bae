//! The binary as an operator starts it: configuration comes from the
//! environment only, a bad one exits 2 with one stderr line naming the
//! variable (and never echoing a token), `--help` and `--version` exit 0.

use std::process::Command;
use tcab_testkit::cli::{Ran, run};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-admitter");
const SERVICE_TOKEN: &str = "svc-token-7Qx2-never-printed";

/// Runs the binary with exactly `env` (nothing inherited) and `args`.
fn start(args: &[&str], env: &[(&str, &str)]) -> Ran {
    run(BINARY, args, env)
}

/// The three variables the admitter cannot start without.
fn required() -> Vec<(&'static str, &'static str)> {
    vec![
        ("TCAB_BACKEND_URL", "http://backend.invalid:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN),
        ("TCAB_DRIVER_IMAGE", "driver:test"),
    ]
}

/// Asserts exit code 2, nothing on stdout, and exactly one stderr line
/// without the token, which it returns.
fn config_error(output: &Ran) -> String {
    output.config_error(SERVICE_TOKEN).to_owned()
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
    assert_eq!(output.code, Some(0));
    let help = &output.stdout;
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
fn version_exits_0_with_name_version_and_revision() {
    let output = start(&["--version"], &[]);
    assert_eq!(output.code, Some(0));
    let version = &output.stdout;
    assert_eq!(
        version.trim(),
        format!(
            "tcab-admitter {} (revision {})",
            env!("CARGO_PKG_VERSION"),
            env!("TCAB_REVISION")
        )
    );
}

/// The revision build.rs baked in is HEAD of this checkout (so the build
/// script reran when HEAD moved), the value given in `TCAB_GIT_REVISION`, or
/// `unknown` outside git.
#[test]
fn the_baked_revision_is_head_or_the_given_one_or_unknown() {
    let baked = env!("TCAB_REVISION");
    if let Some(given) = option_env!("TCAB_GIT_REVISION").map(str::trim)
        && !given.is_empty()
    {
        assert_eq!(baked, given);
        return;
    }
    let head = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--verify",
            "--quiet",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(
            baked, head,
            "the binary names another commit than HEAD: build.rs did not rerun when HEAD moved"
        ),
        None => assert_eq!(baked, "unknown", "no git here, so no revision"),
    }
}

/// The first log line, before anything can fail, names the binary, its
/// version, its revision and the backend contract it speaks (here the binary
/// then stops: there is no cluster).
#[test]
fn the_first_log_line_names_version_revision_and_contract() {
    let mut env = required();
    env.push(("TCAB_DISPATCHER_LOG_FORMAT", "json"));
    env.push(("KUBECONFIG", "/nonexistent/tcab-test-kubeconfig"));
    let output = start(&[], &env);
    let stderr = &output.stderr;
    assert_eq!(output.code, Some(1), "no cluster: {stderr}");
    let first = output.starting_line(
        "tcab-admitter",
        env!("CARGO_PKG_VERSION"),
        env!("TCAB_REVISION"),
        tcab_shared::backend::CONTRACT_VERSION,
    );
    assert_eq!(first["level"], "INFO", "{first}");
    assert!(!stderr.contains(SERVICE_TOKEN), "a token leaked: {stderr}");
}

#[test]
fn a_malformed_metrics_address_exits_2_naming_it() {
    let mut env = required();
    env.push(("TCAB_DISPATCHER_METRICS_ADDR", "metrics:9090"));
    let stderr = config_error(&start(&[], &env));
    assert!(stderr.contains("TCAB_DISPATCHER_METRICS_ADDR"), "{stderr}");
    assert!(stderr.contains("metrics:9090"), "{stderr}");
}

/// A securityContext with a misspelt field would silently lose it in every
/// Job; the binary stops instead, naming the variable and the field.
#[test]
fn a_misspelt_security_context_field_exits_2_naming_it() {
    let mut env = required();
    env.push((
        "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
        r#"{"allowPrivilegeEscalaton": false}"#,
    ));
    let stderr = config_error(&start(&[], &env));
    assert!(
        stderr.contains("TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT")
            && stderr.contains("unknown field allowPrivilegeEscalaton"),
        "{stderr}"
    );
}

/// A poll interval that would let a lease lapse between renewals stops the
/// binary before it does anything, on one line naming the variables to change.
#[test]
fn a_poll_interval_too_long_for_the_lease_exits_2_naming_the_variables() {
    let mut env = required();
    env.push(("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "120"));
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
fn a_stray_argument_exits_2() {
    let stderr = config_error(&start(&["--max-inflight=3"], &required()));
    assert!(stderr.contains("--max-inflight=3"), "{stderr}");
}
