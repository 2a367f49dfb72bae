//! The admitter's configuration: defaults, every kind of error naming its
//! variable, secrets kept out of Debug, passthrough, the --help/--version
//! startup paths, and, read from an environment holding only the required
//! variables, every field equal to the documented default of the variable it
//! comes from, with no variable the admitter reads left out.

use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_shared::config::{
    Binary, BinaryConfig, BuildInfo, DefaultsCheck, Env, LogFormat, Startup, startup, vars,
};
use tcab_testkit::env::{overlay, vars as owned};

const MINIMAL: &[(&str, &str)] = &[
    ("TCAB_BACKEND_URL", "http://backend.tcab:8080/"),
    ("TCAB_BACKEND_SERVICE_TOKEN", "svc-token-s3cr3t"),
    ("TCAB_DRIVER_IMAGE", "registry.example/driver:abc123"),
];

fn with(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    overlay(MINIMAL, extra)
}

fn admitter_err(extra: &[(&str, &str)]) -> String {
    AdmitterConfig::from_vars(with(extra))
        .expect_err("should be rejected")
        .to_string()
}

#[test]
fn every_documented_default_is_the_parsed_default() {
    let c = AdmitterConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
        (vars::DRIVER_IMAGE.name.into(), "driver:1".into()),
    ])
    .expect("the required variables are enough");
    let j = &c.jobs;
    DefaultsCheck::new(Binary::Admitter)
        // required: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        .skip(&vars::DRIVER_IMAGE)
        // derived from TCAB_BACKEND_URL when unset (admitter_defaults_follow_the_spec)
        .skip(&vars::DRIVER_ARTIFACTS_URL)
        .skip(&vars::DRIVER_REPOS_URL)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        .optional(&vars::PUBLISHER_IMAGE, &j.publisher_image)
        .value(&vars::MAX_INFLIGHT, &c.max_inflight)
        .value(&vars::MAX_PUBLISH_INFLIGHT, &c.max_publish_inflight)
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .value(&vars::MANAGED_BY, &j.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .value(&vars::VAULT_ADDR, &c.common.vault_addr)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &c.backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::GATE_MAX_AGE_SECONDS, &c.gate_max_age)
        .value(
            &vars::DRIVER_TERMINATION_GRACE_SECONDS,
            &j.termination_grace_seconds,
        )
        .value(&vars::DRIVER_CPU_REQUEST, &j.cpu_request)
        .value(&vars::DRIVER_MEMORY_REQUEST, &j.memory_request)
        .optional(&vars::DRIVER_CPU_LIMIT, &j.cpu_limit)
        .optional(&vars::DRIVER_MEMORY_LIMIT, &j.memory_limit)
        .value(
            &vars::PUBLISHER_CPU_REQUEST,
            &j.publisher_resources.cpu_request,
        )
        .value(
            &vars::PUBLISHER_MEMORY_REQUEST,
            &j.publisher_resources.memory_request,
        )
        .optional(&vars::PUBLISHER_CPU_LIMIT, &j.publisher_resources.cpu_limit)
        .optional(
            &vars::PUBLISHER_MEMORY_LIMIT,
            &j.publisher_resources.memory_limit,
        )
        .value(&vars::JOB_TTL_SECONDS, &j.ttl_seconds_after_finished)
        .value(
            &vars::DRIVER_ACTIVE_DEADLINE_SECONDS,
            &j.driver_active_deadline_seconds,
        )
        .value(
            &vars::PUBLISHER_ACTIVE_DEADLINE_SECONDS,
            &j.publisher_active_deadline_seconds,
        )
        .value(
            &vars::DRIVER_FINISH_DEADLINE_SECONDS,
            &j.finish_deadline_seconds,
        )
        .value(
            &vars::DRIVER_REPORT_DEADLINE_SECONDS,
            &j.report_deadline_seconds,
        )
        .value(&vars::DRIVER_MANAGED_BY, &j.driver_managed_by)
        .optional(
            &vars::DRIVER_SECRETS,
            &Some(j.driver_secrets.clone()).filter(|s| !s.is_empty()),
        )
        .optional(&vars::DRIVER_SUBSCRIPTION_SECRET, &j.subscription_secret)
        .value(&vars::DRIVER_SUBSCRIPTION_DIR, &j.subscription_dir)
        .value(&vars::DRIVER_FS_GROUP, &j.fs_group)
        .value(&vars::DRIVER_POD_SECURITY_CONTEXT, &j.driver_security.pod)
        .value(&vars::DRIVER_SECURITY_CONTEXT, &j.driver_security.container)
        .value(
            &vars::PUBLISHER_POD_SECURITY_CONTEXT,
            &j.publisher_security.pod,
        )
        .value(
            &vars::PUBLISHER_SECURITY_CONTEXT,
            &j.publisher_security.container,
        )
        .optional(&vars::DRIVER_SERVICE_ACCOUNT, &j.driver_service_account)
        .value(&vars::LEASE_SECONDS, &c.lease_length)
        // validated, then passed to the drivers through the passthrough
        .optional(
            &vars::K8S_NAMESPACE,
            &j.passthrough_env
                .iter()
                .find(|(k, _)| k == vars::K8S_NAMESPACE.name)
                .map(|(_, v)| v.clone()),
        )
        .finish();
}

#[test]
fn admitter_defaults_follow_the_spec() {
    let c = AdmitterConfig::from_vars(owned(MINIMAL)).expect("valid");
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
            "TCAB_DISPATCHER_MAX_INFLIGHT: expected a whole number >= 0, got \"eight\"",
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
        // Kubernetes' grammar: an exponent takes no suffix, a number has a digit.
        (
            "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST",
            "1e3Mi",
            "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST: expected a Kubernetes quantity",
        ),
        (
            "TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST",
            "Mi",
            "TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST: expected a Kubernetes quantity",
        ),
        (
            "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT",
            "1.5.0",
            "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT: expected a Kubernetes quantity",
        ),
        (
            "TCAB_DISPATCHER_DRIVER_CPU_REQUEST",
            "0",
            "TCAB_DISPATCHER_DRIVER_CPU_REQUEST: expected a Kubernetes quantity above 0",
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

/// The four securityContext variables are read strictly: anything but a JSON
/// object whose every field its Kubernetes type has, with a value of its
/// type, stops the start naming the variable and where the value is wrong.
#[test]
fn a_bad_security_context_is_refused_naming_its_variable_and_the_field() {
    let pod_vars = [
        "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT",
        "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT",
    ];
    let container_vars = [
        "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
        "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT",
    ];
    let pod_expected = "expected a JSON object of Kubernetes core/v1 PodSecurityContext fields; ";
    let container_expected =
        "expected a JSON object of Kubernetes core/v1 SecurityContext fields; ";
    // (value, what the line says after the expectation)
    let both: &[(&str, &str)] = &[
        (
            r#"{"runAsNonRoot": tru}"#,
            "not JSON: expected ident at line 1 column 21",
        ),
        (
            r#"{"runAsNonRoot": true"#,
            "not JSON: EOF while parsing an object",
        ),
        ("[]", "got an array, not an object"),
        (r#""restricted""#, "got a string, not an object"),
        ("restricted", "not JSON: expected value at line 1 column 1"),
        (
            r#"{"runAsUser": "1000"}"#,
            "runAsUser: invalid type: string \"1000\", expected i64",
        ),
        (
            r#"{"seccompProfile": "RuntimeDefault"}"#,
            "seccompProfile: invalid type: string \"RuntimeDefault\"",
        ),
        (
            r#"{"runAsNonroot": true}"#,
            "unknown field runAsNonroot (a core/v1 ",
        ),
        (
            r#"{"seccompProfile": {"type": "RuntimeDefault", "profile": "x"}}"#,
            "unknown field seccompProfile.profile",
        ),
    ];
    let pod_only: &[(&str, &str)] = &[(
        r#"{"sysctls": [{"name": "net.ipv4.ping_group_range", "valu": "0 1"}]}"#,
        "unknown field sysctls[0].valu",
    )];
    let container_only: &[(&str, &str)] = &[
        (
            r#"{"capabilities": {"dorp": ["ALL"]}}"#,
            "unknown field capabilities.dorp",
        ),
        (
            r#"{"capabilities": {"drop": "ALL"}}"#,
            "capabilities.drop: invalid type: string \"ALL\", expected a sequence",
        ),
    ];
    let mut checked = 0;
    for (vars, expected, own) in [
        (pod_vars, pod_expected, pod_only),
        (container_vars, container_expected, container_only),
    ] {
        for var in vars {
            for &(value, why) in both.iter().chain(own) {
                let got = admitter_err(&[(var, value)]);
                let want = format!("{var}: {expected}{why}");
                assert!(
                    got.starts_with(&want),
                    "{var}={value}: got {got:?}, want {want:?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(
        checked,
        2 * (2 * both.len() + pod_only.len() + container_only.len())
    );
}

/// A field set to null is a field left out (as the API server reads it), and
/// blank text is the default.
#[test]
fn null_fields_are_left_out_and_blank_is_the_default() {
    let c = AdmitterConfig::from_vars(with(&[
        (
            "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
            r#"{"allowPrivilegeEscalation": false, "privileged": null, "capabilities": {"drop": ["ALL"], "add": null}}"#,
        ),
        ("TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT", "  "),
    ]))
    .expect("valid");
    let defaults = AdmitterConfig::from_vars(owned(MINIMAL)).expect("valid");
    assert_eq!(c.jobs.driver_security, defaults.jobs.driver_security);
    assert_eq!(c.jobs.publisher_security, defaults.jobs.publisher_security);
}

/// The driver pod's fsGroup has one variable, TCAB_DRIVER_FS_GROUP: an
/// fsGroup in the pod's securityContext is refused naming both, whatever
/// its value (the publisher pod has no such variable, so its may).
#[test]
fn an_fs_group_in_the_driver_pod_context_is_refused_naming_both_variables() {
    for fs_group in ["1000", "2000"] {
        let context = format!(r#"{{"runAsNonRoot": true, "fsGroup": {fs_group}}}"#);
        let e = admitter_err(&[("TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT", &context)]);
        assert_eq!(
            e,
            format!(
                "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT: expected a driver pod securityContext without fsGroup; it sets fsGroup {fs_group}, which is TCAB_DRIVER_FS_GROUP's: set that variable instead"
            )
        );
    }
    let c = AdmitterConfig::from_vars(with(&[(
        "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT",
        r#"{"fsGroup": 3000}"#,
    )]))
    .expect("valid");
    assert_eq!(c.jobs.publisher_security.pod.fs_group, Some(3000));
}

/// Kubernetes quantities in every form the API server takes are accepted.
#[test]
fn quantities_in_each_of_kubernetes_forms_are_accepted() {
    for q in [
        "250m", "2", "1.5", "0.5Gi", "512Mi", "1e3", "1E3", "2k", "1G", "+1", "100000u", ".5",
    ] {
        let c = AdmitterConfig::from_vars(with(&[
            ("TCAB_DISPATCHER_DRIVER_CPU_REQUEST", q),
            ("TCAB_DISPATCHER_DRIVER_CPU_LIMIT", ""),
        ]));
        assert!(c.is_ok(), "{q}: {c:?}");
    }
}

/// A limit below its request is refused at start, naming both variables:
/// the API server would refuse every Job built from it.
#[test]
fn a_limit_below_its_request_is_refused_naming_both() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST", "1Gi"),
                ("TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT", "512Mi"),
            ],
            "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT: expected a limit at least TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST (1Gi), got \"512Mi\"",
        ),
        (
            &[("TCAB_DISPATCHER_DRIVER_CPU_REQUEST", "2500m")],
            "TCAB_DISPATCHER_DRIVER_CPU_LIMIT: expected a limit at least TCAB_DISPATCHER_DRIVER_CPU_REQUEST (2500m), got \"2\"",
        ),
        (
            &[("TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT", "200M")],
            "TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT: expected a limit at least TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST (256Mi)",
        ),
        (
            &[("TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST", "1001m")],
            "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT: expected a limit at least TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST (1001m)",
        ),
    ];
    for (extra, want) in cases {
        let got = admitter_err(extra);
        assert!(got.starts_with(want), "{extra:?}: got {got:?}");
    }
    // Equal, or a limit in another unit that is larger, is fine; no limit is fine.
    for extra in [
        &[
            ("TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST", "1Gi"),
            ("TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT", "1073741824"),
        ][..],
        &[
            ("TCAB_DISPATCHER_DRIVER_CPU_REQUEST", "2"),
            ("TCAB_DISPATCHER_DRIVER_CPU_LIMIT", "2000m"),
        ],
        &[
            ("TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST", "2Gi"),
            ("TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT", ""),
        ],
    ] {
        assert!(AdmitterConfig::from_vars(with(extra)).is_ok(), "{extra:?}");
    }
}

/// A cap of 0 is accepted: it pauses the lane.
#[test]
fn a_cap_of_zero_is_a_paused_lane() {
    let c = AdmitterConfig::from_vars(with(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "0"),
        ("TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT", "0"),
    ]))
    .expect("valid");
    assert_eq!((c.max_inflight, c.max_publish_inflight), (0, 0));
}

/// Ages and timeouts that a lease must outlast are checked against it at
/// start: a gate older than half the lease let a stall requeue a live run.
#[test]
fn what_must_fit_in_the_lease_is_checked_against_it() {
    let a = AdmitterConfig::from_vars(owned(MINIMAL)).expect("defaults fit");
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
        // The renewal cadence must fit the short lease too.
        ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "1"),
        ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "4"),
    ]))
    .expect("5 <= 10 / 2");
}

/// A poll interval that would let a lease lapse between renewals is refused
/// at start, as the lease-keeper refuses it (the chart gives the containers
/// one poll interval): the poll interval plus the backend timeout must be at
/// most half the lease.
#[test]
fn a_poll_interval_that_lets_a_lease_lapse_between_renewals_is_refused() {
    let a = AdmitterConfig::from_vars(with(&[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "50")]))
        .expect("50 + 10 <= 120 / 2");
    assert_eq!(a.common.poll_interval, Duration::from_secs(50));
    let e = AdmitterConfig::from_vars(with(&[("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", "51")]))
        .expect_err("51 + 10 > 120 / 2")
        .to_string();
    assert_eq!(
        e,
        "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS: expected at most half of \
         TCAB_DISPATCHER_LEASE_SECONDS minus TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS, so that \
         two lease renewals begin within every lease, got \"51 (backend timeout 10, lease 120)\""
    );
    let e = AdmitterConfig::from_vars(with(&[("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "55.5")]))
        .expect_err("5 + 55.5 > 120 / 2")
        .to_string();
    assert!(
        e.contains("got \"5 (backend timeout 55.5, lease 120)\""),
        "{e}"
    );
    let short = |poll: &str| {
        AdmitterConfig::from_vars(with(&[
            ("TCAB_DISPATCHER_LEASE_SECONDS", "20"),
            ("TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS", "10"),
            ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "5"),
            ("TCAB_DISPATCHER_POLL_INTERVAL_SECONDS", poll),
        ]))
    };
    short("5").expect("5 + 5 <= 20 / 2");
    short("5.5").expect_err("5.5 + 5 > 20 / 2");
}

/// Everything that used to fail later with exit 1 is a configuration error
/// (the lease-keeper's non-loopback vault: its own tests).
#[test]
fn a_url_with_a_query_and_a_non_loopback_vault_are_configuration_errors() {
    let e = AdmitterConfig::from_vars(with(&[(
        "TCAB_BACKEND_URL",
        "http://backend.tcab:8080/?x=1",
    )]))
    .expect_err("a query string")
    .to_string();
    assert!(
        e.starts_with(
            "TCAB_BACKEND_URL: expected an http:// or https:// URL without credentials, a query"
        ),
        "{e}"
    );
}

/// A URL carrying credentials is refused before any client is built, and the
/// error line (which reaches the container's log) does not repeat them.
#[test]
fn a_url_with_credentials_is_refused_without_echoing_them() {
    let e = AdmitterConfig::from_vars(with(&[(
        "TCAB_BACKEND_URL",
        "https://svc:hunter2@backend.tcab:8080/",
    )]))
    .expect_err("credentials")
    .to_string();
    assert!(e.starts_with("TCAB_BACKEND_URL: expected"), "{e}");
    assert!(!e.contains("hunter2") && !e.contains("svc:"), "{e}");
}

#[test]
fn every_binary_reads_the_metrics_address() {
    let metrics = [("TCAB_DISPATCHER_METRICS_ADDR", " 0.0.0.0:9091 ")];
    let want = Some("0.0.0.0:9091".parse().expect("an address"));
    let a = AdmitterConfig::from_vars(with(&metrics)).expect("valid");
    assert_eq!(a.common.metrics_addr, want);
}

#[test]
fn the_service_token_never_shows_in_debug() {
    let c = AdmitterConfig::from_vars(owned(MINIMAL)).expect("valid");
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
    let env = || Env::from_vars(owned(MINIMAL));
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
        startup::<AdmitterConfig>(&[], "", &BUILD, env()),
        Startup::Run(_)
    ));
    match startup::<AdmitterConfig>(&[], "", &BUILD, Env::from_vars(Vec::new())) {
        Startup::Fail(line) => assert_eq!(
            line,
            "tcab-admitter: configuration error: TCAB_BACKEND_URL: required, expected an http:// or https:// URL without credentials, a query or a fragment"
        ),
        other => panic!("{other:?}"),
    }
}
