//! The lease-keeper's configuration: its own variables and their errors,
//! and, read from an environment holding only the required variables, every
//! field equal to the documented default of the variable it comes from, with
//! no variable the lease-keeper reads left out.

use std::time::Duration;
use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_shared::config::{Binary, BinaryConfig, DefaultsCheck, vars};
use tcab_testkit::env::{overlay, vars as owned};

const MINIMAL: &[(&str, &str)] = &[
    ("TCAB_BACKEND_URL", "http://backend.tcab:8080/"),
    ("TCAB_BACKEND_SERVICE_TOKEN", "svc-token-s3cr3t"),
    ("TCAB_DRIVER_IMAGE", "registry.example/driver:abc123"),
];

fn with(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    overlay(MINIMAL, extra)
}

#[test]
fn every_documented_default_is_the_parsed_default() {
    let c = LeaseKeeperConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
    ])
    .expect("the required variables are enough");
    DefaultsCheck::new(Binary::LeaseKeeper)
        // required: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        // only whether it is set matters here
        .optional(&vars::PUBLISHER_IMAGE, &c.publishing.then(String::new))
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .value(&vars::VAULT_ADDR, &c.common.vault_addr)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &c.backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::LEASE_SECONDS, &c.lease_length)
        .value(&vars::START_GRACE_SECONDS, &c.start_grace)
        .value(&vars::UNSCHEDULABLE_GRACE_SECONDS, &c.unschedulable_grace)
        .value(&vars::TERMINATING_MARGIN_SECONDS, &c.terminating_margin)
        .value(&vars::LOG_TAIL_LINES, &c.log_tail_lines)
        .value(&vars::VAULT_ALLOW_NON_LOOPBACK, &c.vault_allow_non_loopback)
        .finish();
}

#[test]
fn lease_keeper_and_reaper_read_their_own_variables() {
    let lk = LeaseKeeperConfig::from_vars(with(&[
        ("TCAB_PUBLISHER_IMAGE", "p:1"),
        ("TCAB_DISPATCHER_LOG_TAIL_LINES", "20"),
    ]))
    .expect("valid");
    assert!(lk.publishing);
    assert_eq!(lk.log_tail_lines, 20);
    assert_eq!(lk.lease_length, Duration::from_secs(120));
    assert_eq!(lk.start_grace, Duration::from_secs(300));
    assert_eq!(lk.unschedulable_grace, Duration::from_secs(1800));
    assert_eq!(lk.terminating_margin, Duration::from_secs(60));
    assert_eq!(lk.common.kube_timeout, Duration::from_secs(15));
    assert_eq!(lk.common.watch_timeout, Duration::from_secs(60));
    assert!(!lk.vault_allow_non_loopback);
    let lk = LeaseKeeperConfig::from_vars(owned(&MINIMAL[..2])).expect("no driver image needed");
    assert!(!lk.publishing);
    let e = LeaseKeeperConfig::from_vars(with(&[(
        "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK",
        "maybe",
    )]))
    .expect_err("bad bool")
    .to_string();
    assert!(
        e.starts_with("TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK: expected true or false"),
        "{e}"
    );
}

/// Timeouts that a lease must outlast are checked against it at start.
#[test]
fn what_must_fit_in_the_lease_is_checked_against_it() {
    let e = LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_LEASE_SECONDS", "100")]))
        .expect_err("watch timeout 60 > 100 / 2")
        .to_string();
    assert!(
        e.starts_with("TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS: expected at most half"),
        "{e}"
    );
    let e = LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS", "1.5")]))
        .expect_err("whole seconds")
        .to_string();
    assert!(
        e.starts_with("TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS: expected a whole number"),
        "{e}"
    );
}

/// A poll interval that would let a lease lapse between renewals is refused
/// at start: renewal rounds begin at most the poll interval plus the backend
/// timeout apart, and that sum must be at most half the lease, so a lease
/// sees two rounds begin and one of them may fail.
#[test]
fn a_poll_interval_that_lets_a_lease_lapse_between_renewals_is_refused() {
    // The lease's 120 s: half of it is 60 s, the backend timeout 10 s.
    let c = LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "50")]))
        .expect("50 + 10 <= 120 / 2");
    assert_eq!(c.common.poll_interval, Duration::from_secs(50));
    let e =
        LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "50.5")]))
            .expect_err("50.5 + 10 > 120 / 2")
            .to_string();
    assert_eq!(
        e,
        "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS: expected at most half of \
         TCAB_DISPATCHER_LEASE_SECONDS minus TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS, so that \
         two lease renewals begin within every lease, got \"50.5 (backend timeout 10, lease 120)\""
    );
    // The backend timeout is part of the cadence: a long one refuses the
    // default poll interval (5 + 56 > 60) ...
    let e =
        LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "56")]))
            .expect_err("5 + 56 > 120 / 2")
            .to_string();
    assert!(
        e.contains("got \"5 (backend timeout 56, lease 120)\""),
        "{e}"
    );
    // ... and a shorter lease needs a shorter cadence.
    let short = |poll: &str, timeout: &str| {
        LeaseKeeperConfig::from_vars(with(&[
            ("TCAB_DISPATCHER_LEASE_SECONDS", "20"),
            ("TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS", "10"),
            ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", poll),
            ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", timeout),
        ]))
    };
    short("5", "5").expect("5 + 5 <= 20 / 2");
    let e = short("5", "10").expect_err("the defaults do not fit a 20 s lease");
    assert!(
        e.to_string()
            .starts_with("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS: expected at most half"),
        "{e}"
    );
}

/// Everything that used to fail later with exit 1 is a configuration error
/// (the admitter's URL with a query: its own tests).
#[test]
fn a_url_with_a_query_and_a_non_loopback_vault_are_configuration_errors() {
    let e = LeaseKeeperConfig::from_vars(with(&[("TCAB_DISPATCHER_VAULT_ADDR", "0.0.0.0:50051")]))
        .expect_err("non-loopback vault")
        .to_string();
    assert!(
        e.starts_with("TCAB_DISPATCHER_VAULT_ADDR: expected a loopback address"),
        "{e}"
    );
    LeaseKeeperConfig::from_vars(with(&[
        ("TCAB_DISPATCHER_VAULT_ADDR", "0.0.0.0:50051"),
        ("TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK", "true"),
    ]))
    .expect("allowed explicitly");
}

#[test]
fn every_binary_reads_the_metrics_address() {
    let metrics = [("TCAB_DISPATCHER_METRICS_ADDR", " 0.0.0.0:9091 ")];
    let want = Some("0.0.0.0:9091".parse().expect("an address"));
    let l = LeaseKeeperConfig::from_vars(with(&metrics)).expect("valid");
    assert_eq!(l.common.metrics_addr, want);
}
