//! The reaper's configuration: its own variables and their errors, the
//! --version startup path, and, read from an environment holding only the
//! required variables, every field equal to the documented default of the
//! variable it comes from, with no variable the reaper reads left out.

use std::time::Duration;
use tcab_reaper::ReaperConfig;
use tcab_shared::config::{
    Binary, BinaryConfig, BuildInfo, DefaultsCheck, Env, Startup, startup, vars,
};
use tcab_testkit::env::vars as owned;

const MINIMAL: &[(&str, &str)] = &[
    ("TCAB_BACKEND_URL", "http://backend.tcab:8080/"),
    ("TCAB_BACKEND_SERVICE_TOKEN", "svc-token-s3cr3t"),
    ("TCAB_DRIVER_IMAGE", "registry.example/driver:abc123"),
];

#[test]
fn every_documented_default_is_the_parsed_default() {
    // The orphan sweep is on by default, and it needs the backend.
    let c = ReaperConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
    ])
    .expect("the backend is enough");
    let backend = c.backend.as_ref().expect("the sweep's backend");
    DefaultsCheck::new(Binary::Reaper)
        // required while the sweep is on: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::DRIVER_MANAGED_BY, &c.driver_managed_by)
        .value(&vars::TERMINATING_MARGIN_SECONDS, &c.terminating_margin)
        .optional(&vars::K8S_NAMESPACE, &c.sandbox_namespace)
        .value(&vars::ORPHAN_SWEEP, &c.orphan_sweep)
        .value(
            &vars::ORPHAN_SWEEP_INTERVAL_SECONDS,
            &c.orphan_sweep_interval,
        )
        .value(&vars::ORPHAN_GRACE_SECONDS, &c.orphan_grace)
        .finish();
}

#[test]
fn lease_keeper_and_reaper_read_their_own_variables() {
    // The orphan sweep asks the backend what it still drives: with the sweep
    // on (the default) the reaper needs the backend; with it off, nothing.
    let e = ReaperConfig::from_vars(Vec::new())
        .expect_err("the sweep needs the backend")
        .to_string();
    assert!(e.starts_with("TCAB_BACKEND_URL: required"), "{e}");
    let r = ReaperConfig::from_vars(owned(&MINIMAL[..2])).expect("reaper runs on defaults");
    assert!(r.orphan_sweep);
    assert_eq!(
        r.backend.as_ref().map(|b| b.url.as_str()),
        Some("http://backend.tcab:8080")
    );
    assert_eq!(r.orphan_grace, Duration::from_secs(600));
    assert_eq!(r.orphan_sweep_interval, Duration::from_secs(300));
    assert_eq!(r.terminating_margin, Duration::from_secs(60));
    assert_eq!(r.driver_managed_by, "tcab-driver");
    assert_eq!(r.sandbox_namespace, None);
    let r = ReaperConfig::from_vars(owned(&[
        ("TCAB_K8S_NAMESPACE", "sandboxes"),
        ("TCAB_DISPATCHER_ORPHAN_SWEEP", "off"),
    ]))
    .expect("valid");
    assert_eq!(r.sandbox_namespace.as_deref(), Some("sandboxes"));
    assert!(!r.orphan_sweep && r.backend.is_none());
    let e = ReaperConfig::from_vars(owned(&[
        ("TCAB_DISPATCHER_MANAGED_BY", "same"),
        ("TCAB_DRIVER_MANAGED_BY", "same"),
    ]))
    .expect_err("the reaper could not tell sandboxes from driver pods")
    .to_string();
    assert!(
        e.starts_with("TCAB_DRIVER_MANAGED_BY: expected a value different"),
        "{e}"
    );
}

#[test]
fn every_binary_reads_the_metrics_address() {
    let metrics = [("TCAB_DISPATCHER_METRICS_ADDR", " 0.0.0.0:9091 ")];
    let want = Some("0.0.0.0:9091".parse().expect("an address"));
    let reaper = |pairs: &[(&str, &str)]| {
        let mut v = owned(&[("TCAB_DISPATCHER_ORPHAN_SWEEP", "false")]);
        v.extend(owned(pairs));
        ReaperConfig::from_vars(v)
    };
    let r = reaper(&metrics).expect("valid");
    assert_eq!(r.common.metrics_addr, want);
    let r =
        reaper(&[("TCAB_DISPATCHER_METRICS_ADDR", "[::]:9092")]).expect("IPv6 is an address too");
    assert_eq!(r.common.metrics_addr.map(|a| a.port()), Some(9092));
    let r = reaper(&[("TCAB_DISPATCHER_METRICS_ADDR", "")]).expect("empty is unset");
    assert_eq!(r.common.metrics_addr, None);
    for bad in ["localhost:9090", "0.0.0.0", "0.0.0.0:port"] {
        let e = reaper(&[("TCAB_DISPATCHER_METRICS_ADDR", bad)])
            .expect_err("malformed")
            .to_string();
        assert!(
            e.starts_with("TCAB_DISPATCHER_METRICS_ADDR: expected"),
            "{bad}: {e}"
        );
    }
}

const BUILD: BuildInfo = BuildInfo {
    version: "9.8.7",
    revision: "0123abcd",
};

#[test]
fn startup_handles_help_version_and_stray_arguments() {
    let env = || Env::from_vars(owned(MINIMAL));
    assert!(matches!(
        startup::<ReaperConfig>(&["--version".into()], "", &BUILD, env()),
        Startup::Print(v) if v == "tcab-reaper 9.8.7 (revision 0123abcd)\n"
    ));
    assert!(matches!(
        startup::<ReaperConfig>(&["--verbose".into()], "", &BUILD, env()),
        Startup::Fail(l) if l.contains("unexpected argument")
    ));
}
