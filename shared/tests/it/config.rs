//! Configuration declarations: each variable is declared once, documented,
//! and its documented default is what its reader applies. Each binary's own
//! configuration struct is tested in that binary's tests (tests/it/config.rs),
//! so tcab-shared needs none of them.

use tcab_shared::config::*;

/// The metrics address is read by all three binaries (each binary's tests
/// check that it parses it).
#[test]
fn every_binary_reads_the_metrics_address() {
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

/// Quantities are read with Kubernetes' own grammar: every form the API
/// server accepts, none it refuses (an exponent with a suffix, no digit,
/// two points, an unknown suffix).
#[test]
fn quantities_follow_kubernetes_grammar() {
    use tcab_shared::config::kinds::parse_quantity;
    for ok in [
        "250m", "2", "1.5", ".5", "5.", "1Gi", "512Mi", "1e3", "1E3", "1e-3", "+2", "2k", "1G",
        "100000u", "3n",
    ] {
        assert!(parse_quantity(ok).is_some(), "{ok} is a quantity");
    }
    for bad in [
        "1e3Mi", "Mi", "", "1.5.0", "4GB", "1 Gi", "lots", "1mm", "inf", "NaN", "0x10",
    ] {
        assert!(parse_quantity(bad).is_none(), "{bad:?} is not a quantity");
    }
}

/// A limit below its request is refused naming both variables, whatever
/// the suffixes; equal values and an unset limit are fine.
#[test]
fn a_limit_must_be_at_least_its_request() {
    let check = |limit: Option<&str>, request: &str| {
        limit_at_least_request(("LIMIT", limit), ("REQUEST", request))
    };
    assert!(check(Some("1Gi"), "1073741824").is_ok());
    assert!(check(Some("1024Mi"), "1Gi").is_ok());
    assert!(check(Some("2"), "2000m").is_ok());
    assert!(check(None, "8Gi").is_ok());
    let err = check(Some("1G"), "1Gi").unwrap_err().to_string();
    assert_eq!(
        err,
        "LIMIT: expected a limit at least REQUEST (1Gi), got \"1G\""
    );
    assert!(check(Some("999m"), "1").is_err());
}

/// A Kubernetes object kind reads a JSON object of its type and nothing
/// else: a field the type does not have, at any depth, is refused by its
/// path, a null field counts as left out, and the error names the variable.
#[test]
fn a_kubernetes_object_is_read_strictly() {
    use k8s_openapi::api::core::v1::PodSecurityContext;
    use tcab_shared::config::kinds::{Kind, KubeObject};
    let kind = KubeObject::<PodSecurityContext>::new("core/v1 PodSecurityContext");
    let read = kind
        .parse(
            r#"{"runAsUser": 1000, "runAsGroup": null, "sysctls": [{"name": "a", "value": "1"}]}"#,
        )
        .expect("known fields");
    assert_eq!(read.run_as_user, Some(1000));
    assert_eq!(read.run_as_group, None);
    assert_eq!(
        kind.show(&read),
        r#"{"runAsUser":1000,"sysctls":[{"name":"a","value":"1"}]}"#
    );
    assert_eq!(kind.parse("{}"), Ok(PodSecurityContext::default()));
    for (text, why) in [
        (
            r#"{"sysctls": [{"name": "a", "value": "1"}, {"name": "b", "valu": "2"}]}"#,
            "unknown field sysctls[1].valu (a core/v1 PodSecurityContext has no such field)",
        ),
        (
            r#"{"seLinuxOptions": {"level": "s0", "lvel": "s1"}}"#,
            "unknown field seLinuxOptions.lvel (a core/v1 PodSecurityContext has no such field)",
        ),
        ("true", "got a boolean, not an object"),
        ("null", "got null, not an object"),
    ] {
        assert_eq!(kind.parse(text), Err(why.to_owned()), "{text}");
    }
    // Through a declaration, the refusal names the variable.
    let name = vars::DRIVER_SECURITY_CONTEXT.name;
    let env = Env::from_vars([(
        name.to_owned(),
        r#"{"capabilities": {"drop": ["ALL"], "ad": []}}"#.to_owned(),
    )])
    .expect("an environment");
    assert_eq!(
        vars::DRIVER_SECURITY_CONTEXT
            .read(&env)
            .expect_err("refused")
            .to_string(),
        format!(
            "{name}: expected a JSON object of Kubernetes core/v1 SecurityContext fields; unknown field capabilities.ad (a core/v1 SecurityContext has no such field)"
        )
    );
}
