//! The documents generated from the variable declarations are up to date:
//! README.md's configuration table (between its markers) and the JSON
//! description the chart check reads (charts/settings.json).
//!
//! To regenerate both after changing a declaration:
//!
//!     UPDATE_GENERATED=1 cargo test -p tcab-shared --test it settings_docs

use std::path::{Path, PathBuf};
use tcab_shared::config::{markdown_table, settings_json};

const START: &str = "<!-- settings-table:start (generated from shared/src/config/vars.rs) -->\n";
const END: &str = "<!-- settings-table:end -->\n";
const REGENERATE: &str = "UPDATE_GENERATED=1 cargo test -p tcab-shared --test it settings_docs";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn updating() -> bool {
    std::env::var("UPDATE_GENERATED").is_ok_and(|v| v == "1")
}

/// Splits `text` around the marked table: (before and START, table, END and after).
fn around_table(text: &str) -> (&str, &str, &str) {
    let start = text
        .find(START)
        .expect("README.md lacks the settings-table start marker")
        + START.len();
    let end = start
        + text[start..]
            .find(END)
            .expect("README.md lacks the settings-table end marker");
    (&text[..start], &text[start..end], &text[end..])
}

#[test]
fn readme_table_is_rendered_from_the_declarations() {
    let path = repo("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let (before, table, after) = around_table(&readme);
    let want = markdown_table();
    if table == want {
        return;
    }
    if updating() {
        std::fs::write(&path, format!("{before}{want}{after}")).expect("README.md written");
        return;
    }
    panic!(
        "README.md's configuration table differs from the declarations; regenerate it with\n  {REGENERATE}\nExpected:\n{want}"
    );
}

#[test]
fn settings_json_is_rendered_from_the_declarations() {
    let path = repo("charts/settings.json");
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    let want = settings_json();
    if stored == want {
        return;
    }
    if updating() {
        std::fs::write(&path, want).expect("charts/settings.json written");
        return;
    }
    panic!(
        "charts/settings.json differs from the declarations; regenerate it with\n  {REGENERATE}"
    );
}

#[test]
fn settings_json_is_json_naming_every_variable() {
    let value: serde_json::Value = serde_json::from_str(&settings_json()).expect("valid JSON");
    let names: Vec<&str> = value["variables"]
        .as_array()
        .expect("a list of variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let declared: Vec<&str> = tcab_shared::config::SETTINGS
        .iter()
        .map(|v| v.name())
        .collect();
    assert_eq!(names, declared);
}
