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
