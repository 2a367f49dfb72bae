//! docs/metrics.md's tables of label values and death causes are rendered
//! from the label declarations (shared/src/metrics/labels.rs), the one
//! place each label's values are declared.
//!
//! To regenerate both after changing a declaration:
//!
//!     UPDATE_GENERATED=1 cargo test -p tcab-shared --test it metrics_docs

use std::path::{Path, PathBuf};
use tcab_shared::metrics::labels::{cause_table, label_table};

const REGENERATE: &str = "UPDATE_GENERATED=1 cargo test -p tcab-shared --test it metrics_docs";

fn doc() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md")
}

fn updating() -> bool {
    std::env::var("UPDATE_GENERATED").is_ok_and(|v| v == "1")
}

/// Checks (or, updating, rewrites) the text between the markers of `name`.
fn check_section(name: &str, want: &str) {
    let start = format!("<!-- {name}:start (generated from shared/src/metrics/labels.rs) -->\n");
    let end = format!("<!-- {name}:end -->\n");
    let path = doc();
    let text = std::fs::read_to_string(&path).expect("docs/metrics.md");
    let from = text
        .find(&start)
        .unwrap_or_else(|| panic!("docs/metrics.md lacks the {name} start marker"))
        + start.len();
    let to = from
        + text[from..]
            .find(&end)
            .unwrap_or_else(|| panic!("docs/metrics.md lacks the {name} end marker"));
    if &text[from..to] == want {
        return;
    }
    if updating() {
        let updated = format!("{}{want}{}", &text[..from], &text[to..]);
        std::fs::write(&path, updated).expect("docs/metrics.md written");
        return;
    }
    panic!(
        "docs/metrics.md's {name} differs from the label declarations; regenerate it with\n  {REGENERATE}\nExpected:\n{want}"
    );
}

#[test]
fn the_label_table_is_rendered_from_the_declarations() {
    check_section("label-table", &label_table());
}

#[test]
fn the_cause_table_is_rendered_from_the_declarations() {
    check_section("cause-table", &cause_table());
}

/// Every label the metrics table names has a row in the label table, and
/// every row's label is one a metric carries.
#[test]
fn every_documented_label_has_its_values() {
    let text = std::fs::read_to_string(doc()).expect("docs/metrics.md");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| `tcab_dispatcher_"))
        .collect();
    assert!(rows.len() > 20, "the metrics table: {rows:?}");
    let mut used = std::collections::BTreeSet::new();
    for row in rows {
        let labels = row.split(" | ").nth(2).expect("a labels column");
        for label in labels.split(", ") {
            if let Some(name) = label.strip_prefix('`').and_then(|l| l.strip_suffix('`')) {
                used.insert(name.to_owned());
            }
        }
    }
    let declared: std::collections::BTreeSet<String> = tcab_shared::metrics::labels::label_rows()
        .iter()
        .map(|r| r.label.to_owned())
        .collect();
    // Free-form labels: the build's own words.
    let free = ["version", "revision"];
    let missing: Vec<&String> = used
        .iter()
        .filter(|l| !declared.contains(*l) && !free.contains(&l.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "labels without declared values: {missing:?}"
    );
    let unused: Vec<&String> = declared.iter().filter(|l| !used.contains(*l)).collect();
    assert!(
        unused.is_empty(),
        "declared labels no metric carries: {unused:?}"
    );
}
