//! Configuration: defaults, every kind of error naming its variable, secrets
//! kept out of Debug, passthrough, and the --help/--version startup paths,
//! across the three binaries (whose configuration structs live in their
//! crates, hence the dev-dependencies on them).

use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_reaper::ReaperConfig;
use tcab_shared::config::*;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const MINIMAL: &[(&str, &str)] = &[
    ("TCAB_BACKEND_URL", "http://backend.tcab:8080/"),
    ("TCAB_BACKEND_SERVICE_TOKEN", "svc-token-s3cr3t"),
    ("TCAB_DRIVER_IMAGE", "registry.example/driver:abc123"),
];

fn with(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v = vars(MINIMAL);
    for (k, val) in extra {
        v.retain(|(key, _)| key != k);
        v.push((k.to_string(), val.to_string()));
    }
    v
}

fn admitter_err(extra: &[(&str, &str)]) -> String {
    AdmitterConfig::from_vars(with(extra))
        .expect_err("should be rejected")
        .to_string()
}

#[test]
fn admitter_defaults_follow_the_spec() {
    let c = AdmitterConfig::from_vars(vars(MINIMAL)).expect("valid");
    assert_eq!(c.max_inflight, 8);
    assert_eq!(c.max_publish_inflight, 8);
    assert_eq!(
        c.backend.url, "http://backend.tcab:8080",
        "trailing slash dropped"
    );
    assert_eq!(c.backend.timeout, Duration::from_secs(10));
    assert_eq!(c.common.poll_interval, Duration::from_secs(5));
    assert_eq!(c.common.managed_by, "tcab-dispatcher");
    assert_eq!(c.common.namespace, None);
    assert_eq!(c.common.log_format, LogFormat::Text);
    assert_eq!(c.common.vault_addr.to_string(), "127.0.0.1:50051");
    assert_eq!(c.common.metrics_addr, None, "nothing listens by default");
    assert_eq!(c.gate_max_age, Duration::from_secs(60));
    let j = &c.jobs;
    assert_eq!(j.termination_grace_seconds, 120);
    assert_eq!(j.publisher_active_deadline_seconds, 45 * 60);
    assert_eq!(j.publisher_image, None);
    assert_eq!(j.memory_limit, None, "no memory limit by default");
    assert_eq!(j.cpu_limit.as_deref(), Some("2"));
    assert_eq!(j.artifacts_url, "http://backend.tcab:8080/artifacts");
    assert_eq!(j.repos_url, "http://backend.tcab:8080/repos");
    assert_eq!(j.driver_managed_by, "tcab-driver");
    assert_eq!(j.managed_by, "tcab-dispatcher");
    assert!(j.driver_secrets.is_empty());
}

#[test]
fn admitter_reads_every_setting() {
    let c = AdmitterConfig::from_vars(with(&[
        ("TCAB_PUBLISHER_IMAGE", "registry.example/publisher:abc"),
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "3"),
        ("TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT", "2"),
        ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "0.25"),
        ("TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT", "4Gi"),
        ("TCAB_DISPATCHER_DRIVER_CPU_LIMIT", ""),
        ("TCAB_DRIVER_SECRETS", "harness-keys, other-keys"),
        ("TCAB_DRIVER_SUBSCRIPTION_SECRET", "sub"),
        ("TCAB_DRIVER_SERVICE_ACCOUNT", "tcab-driver"),
        ("TCAB_K8S_NAMESPACE", "sandboxes"),
        ("TCAB_CONTAINER_IMAGE_PYTHON", "registry.example/py:1"),
        ("TCAB_UNRELATED", "x"),
        ("POD_NAMESPACE", "tcab"),
        ("TCAB_DISPATCHER_LOG_FORMAT", "JSON"),
    ]))
    .expect("valid");
    assert_eq!((c.max_inflight, c.max_publish_inflight), (3, 2));
    assert_eq!(c.common.poll_interval, Duration::from_millis(250));
    assert_eq!(c.common.namespace.as_deref(), Some("tcab"));
    assert_eq!(c.common.log_format, LogFormat::Json);
    assert_eq!(c.jobs.memory_limit.as_deref(), Some("4Gi"));
    assert_eq!(c.jobs.cpu_limit, None, "an empty CPU limit sets none");
    assert_eq!(c.jobs.driver_secrets, ["harness-keys", "other-keys"]);
    assert_eq!(c.jobs.subscription_secret.as_deref(), Some("sub"));
    assert_eq!(
        c.jobs.driver_service_account.as_deref(),
        Some("tcab-driver")
    );
    assert_eq!(
        c.jobs.passthrough_env,
        vec![
            (
                "TCAB_CONTAINER_IMAGE_PYTHON".to_string(),
                "registry.example/py:1".to_string()
            ),
            ("TCAB_K8S_NAMESPACE".to_string(), "sandboxes".to_string()),
        ],
        "only TCAB_K8S_* and TCAB_CONTAINER_*, sorted"
    );
}

#[test]
fn missing_required_variables_are_named() {
    let e = AdmitterConfig::from_vars(Vec::new())
        .expect_err("empty env")
        .to_string();
    assert!(e.starts_with("TCAB_BACKEND_URL: required"), "{e}");
    let e = admitter_err(&[("TCAB_BACKEND_SERVICE_TOKEN", "  ")]);
    assert!(e.starts_with("TCAB_BACKEND_SERVICE_TOKEN: required"), "{e}");
    let e = admitter_err(&[("TCAB_DRIVER_IMAGE", "")]);
    assert!(e.starts_with("TCAB_DRIVER_IMAGE: required"), "{e}");
}

#[test]
fn malformed_values_are_named_with_what_was_expected() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "TCAB_DISPATCHER_MAX_INFLIGHT",
            "eight",
            "TCAB_DISPATCHER_MAX_INFLIGHT: expected a whole number >= 1, got \"eight\"",
        ),
        (
            "TCAB_DISPATCHER_MAX_INFLIGHT",
            "0",
            "TCAB_DISPATCHER_MAX_INFLIGHT: expected a whole number >= 1, got \"0\"",
        ),
        (
            "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT",
            "-1",
            "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT: expected",
        ),
        (
            "TCAB_BACKEND_URL",
            "backend:8080",
            "TCAB_BACKEND_URL: expected an http:// or https:// URL",
        ),
        (
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
            "5s",
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS: expected a number of seconds > 0",
        ),
        (
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS",
            "0",
            "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS: expected",
        ),
        (
            "TCAB_DISPATCHER_LOG_FORMAT",
            "xml",
            "TCAB_DISPATCHER_LOG_FORMAT: expected text or json",
        ),
        (
            "TCAB_DISPATCHER_VAULT_ADDR",
            "localhost",
            "TCAB_DISPATCHER_VAULT_ADDR: expected an IP:port",
        ),
        (
            "TCAB_DISPATCHER_METRICS_ADDR",
            "9090",
            "TCAB_DISPATCHER_METRICS_ADDR: expected an IP:port address such as 0.0.0.0:9090, got \"9090\"",
        ),
        (
            "TCAB_DISPATCHER_METRICS_ADDR",
            "metrics:9090",
            "TCAB_DISPATCHER_METRICS_ADDR: expected an IP:port",
        ),
        (
            "TCAB_DISPATCHER_DRIVER_CPU_REQUEST",
            "lots",
            "TCAB_DISPATCHER_DRIVER_CPU_REQUEST: expected a Kubernetes quantity",
        ),
        (
            "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT",
            "4GB",
            "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT: expected a Kubernetes quantity",
        ),
        (
            "TCAB_DRIVER_SECRETS",
            "good,Bad_Name",
            "TCAB_DRIVER_SECRETS: expected a lowercase DNS name",
        ),
        (
            "TCAB_DISPATCHER_MANAGED_BY",
            "not a label",
            "TCAB_DISPATCHER_MANAGED_BY: expected a label value",
        ),
        (
            "TCAB_DRIVER_SUBSCRIPTION_DIR",
            "relative/dir",
            "TCAB_DRIVER_SUBSCRIPTION_DIR: expected an absolute path",
        ),
        (
            "POD_NAMESPACE",
            "Upper",
            "POD_NAMESPACE: expected a lowercase DNS name",
        ),
        (
            "TCAB_DRIVER_IMAGE",
            "has space",
            "TCAB_DRIVER_IMAGE: expected an image reference without spaces",
        ),
    ];
    for (var, value, want) in cases {
        let got = admitter_err(&[(var, value)]);
        assert!(
            got.starts_with(want),
            "{var}={value:?}: got {got:?}, want prefix {want:?}"
        );
    }
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
    let lk = LeaseKeeperConfig::from_vars(vars(&MINIMAL[..2])).expect("no driver image needed");
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

    // The orphan sweep asks the backend what it still drives: with the sweep
    // on (the default) the reaper needs the backend; with it off, nothing.
    let e = ReaperConfig::from_vars(Vec::new())
        .expect_err("the sweep needs the backend")
        .to_string();
    assert!(e.starts_with("TCAB_BACKEND_URL: required"), "{e}");
    let r = ReaperConfig::from_vars(vars(&MINIMAL[..2])).expect("reaper runs on defaults");
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
    let r = ReaperConfig::from_vars(vars(&[
        ("TCAB_K8S_NAMESPACE", "sandboxes"),
        ("TCAB_DISPATCHER_ORPHAN_SWEEP", "off"),
    ]))
    .expect("valid");
    assert_eq!(r.sandbox_namespace.as_deref(), Some("sandboxes"));
    assert!(!r.orphan_sweep && r.backend.is_none());
    let e = ReaperConfig::from_vars(vars(&[
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

/// Ages and timeouts that a lease must outlast are checked against it at
/// start: a gate older than half the lease let a stall requeue a live run.
#[test]
fn what_must_fit_in_the_lease_is_checked_against_it() {
    let a = AdmitterConfig::from_vars(vars(MINIMAL)).expect("defaults fit");
    assert_eq!(
        (a.gate_max_age, a.lease_length),
        (Duration::from_secs(60), Duration::from_secs(120))
    );
    let e = AdmitterConfig::from_vars(with(&[("TCAB_DISPATCHER_LEASE_SECONDS", "10")]))
        .expect_err("gate age 60 > lease 10 / 2")
        .to_string();
    assert!(
        e.starts_with("TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS: expected at most half of TCAB_DISPATCHER_LEASE_SECONDS, got \"60 (lease 10)\""),
        "{e}"
    );
    AdmitterConfig::from_vars(with(&[
        ("TCAB_DISPATCHER_LEASE_SECONDS", "10"),
        ("TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS", "5"),
    ]))
    .expect("5 <= 10 / 2");
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

/// Everything that used to fail later with exit 1 is a configuration error.
#[test]
fn a_url_with_a_query_and_a_non_loopback_vault_are_configuration_errors() {
    let e = AdmitterConfig::from_vars(with(&[(
        "TCAB_BACKEND_URL",
        "http://backend.tcab:8080/?x=1",
    )]))
    .expect_err("a query string")
    .to_string();
    assert!(
        e.starts_with("TCAB_BACKEND_URL: expected an http:// or https:// URL without a query"),
        "{e}"
    );
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
    let a = AdmitterConfig::from_vars(with(&metrics)).expect("valid");
    assert_eq!(a.common.metrics_addr, want);
    let l = LeaseKeeperConfig::from_vars(with(&metrics)).expect("valid");
    assert_eq!(l.common.metrics_addr, want);
    let reaper = |pairs: &[(&str, &str)]| {
        let mut v = vars(&[("TCAB_DISPATCHER_ORPHAN_SWEEP", "false")]);
        v.extend(vars(pairs));
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
    let doc = SETTINGS
        .iter()
        .find(|v| v.name() == "TCAB_DISPATCHER_METRICS_ADDR")
        .expect("declared");
    assert_eq!(
        doc.read_by(),
        [Binary::Admitter, Binary::LeaseKeeper, Binary::Reaper]
    );
    assert!(!doc.required() && doc.default_text().is_none());
}

#[test]
fn the_service_token_never_shows_in_debug() {
    let c = AdmitterConfig::from_vars(vars(MINIMAL)).expect("valid");
    let debug = format!("{c:?}");
    assert!(!debug.contains("svc-token-s3cr3t"), "{debug}");
    assert_eq!(c.backend.service_token.expose(), "svc-token-s3cr3t");
}

const BUILD: BuildInfo = BuildInfo {
    version: "9.8.7",
    revision: "0123abcd",
};

#[test]
fn startup_handles_help_version_and_stray_arguments() {
    let env = || Env::from_vars(vars(MINIMAL));
    match startup::<AdmitterConfig>(&["--help".into()], "about", &BUILD, env()) {
        Startup::Print(text) => {
            assert!(text.starts_with("tcab-admitter 9.8.7 (revision 0123abcd)\n"));
            assert!(text.contains("TCAB_DISPATCHER_MAX_INFLIGHT"));
            assert!(text.contains("TCAB_K8S_*"));
            assert!(
                !text.contains("TCAB_DISPATCHER_ORPHAN_SWEEP"),
                "reaper-only variables are not listed"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        startup::<ReaperConfig>(&["--version".into()], "", &BUILD, env()),
        Startup::Print(v) if v == "tcab-reaper 9.8.7 (revision 0123abcd)\n"
    ));
    assert!(matches!(
        startup::<ReaperConfig>(&["--verbose".into()], "", &BUILD, env()),
        Startup::Fail(l) if l.contains("unexpected argument")
    ));
    assert!(matches!(
        startup::<AdmitterConfig>(&[], "", &BUILD, env()),
        Startup::Run(_)
    ));
    match startup::<AdmitterConfig>(&[], "", &BUILD, Env::from_vars(Vec::new())) {
        Startup::Fail(line) => assert_eq!(
            line,
            "tcab-admitter: configuration error: TCAB_BACKEND_URL: required, expected an http:// or https:// URL without a query or fragment"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_variable_is_documented_once() {
    let mut names: Vec<&str> = SETTINGS.iter().map(|v| v.name()).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "a variable is listed twice");
    for v in SETTINGS {
        assert!(
            !v.doc().is_empty() && !v.read_by().is_empty(),
            "{}",
            v.name()
        );
    }
}

/// Each documented default is what the reader applies: the value read from
/// an environment without the variable equals the value read with the
/// variable set to the documented text, and shows as that text. (Each
/// binary's tests check its parsed configuration against the same defaults.)
#[test]
fn every_documented_default_is_the_parsed_default() {
    let wrong: Vec<String> = SETTINGS
        .iter()
        .filter_map(|v| {
            v.check_default()
                .err()
                .map(|e| format!("{}: {e}", v.name()))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}
