//! What is rendered from the declarations for people and tools: each
//! binary's `--help`, the README's configuration table, and the JSON
//! description the chart check reads (`charts/settings.json`).

use super::kinds::Minimum;
use super::setting::Declared;
use super::vars::{PASSTHROUGH_PREFIXES, SETTINGS};
use super::{Binary, BuildInfo};
use serde::Serialize;

/// The binaries, in the order the documentation names them.
const BINARIES: [Binary; 3] = [Binary::Admitter, Binary::LeaseKeeper, Binary::Reaper];

/// The binary that passes the `TCAB_K8S_*` and `TCAB_CONTAINER_*`
/// variables through to driver pods.
const PASSES_THROUGH: Binary = Binary::Admitter;

/// The `--help` text of a binary: what it is and the variables it reads.
pub fn help_text(binary: Binary, about: &str, build: &BuildInfo) -> String {
    let mut out = format!(
        "{} {build}\n{about}\n\nUsage: {} {}\n\nConfiguration is environment variables only:\n\n",
        binary.name(),
        binary.name(),
        binary.usage()
    );
    for v in SETTINGS.iter().filter(|v| v.read_by().contains(&binary)) {
        let default = match (v.required(), v.default_text()) {
            (true, _) => "required".to_owned(),
            (false, Some(d)) => format!("default {d}"),
            (false, None) => "optional".to_owned(),
        };
        out.push_str(&format!("  {}  ({default})\n      {}\n", v.name(), v.doc()));
    }
    if binary == PASSES_THROUGH {
        out.push_str(&format!(
            "  {}\n      Passed through unchanged to every driver pod.\n",
            PASSTHROUGH_PREFIXES.map(|p| format!("{p}*")).join(", ")
        ));
    }
    out.push_str(
        "\nExit codes: 0 after SIGTERM, 1 on a fatal error, 2 on a configuration error.\n",
    );
    out
}

/// The README's configuration table (the text between its markers).
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | read by | default | meaning |\n|---|---|---|---|\n");
    for v in SETTINGS {
        let by: Vec<&str> = v.read_by().iter().map(|b| b.short_name()).collect();
        let default = match (v.required(), v.default_text()) {
            (true, _) => "**required**".to_owned(),
            (false, Some(d)) => format!("`{d}`"),
            (false, None) => "unset".to_owned(),
        };
        out.push_str(&format!(
            "| `{}` | {} | {default} | {} |\n",
            v.name(),
            by.join(", "),
            v.doc()
        ));
    }
    out
}

/// The JSON description of every variable, for tools (the chart check).
#[derive(Debug, Serialize)]
struct Description {
    /// How the file is made.
    generated: &'static str,
    /// Every binary, by name.
    binaries: Vec<&'static str>,
    /// Variables passed through to driver pods, by prefix.
    passthrough: Passthrough,
    /// Every declared variable.
    variables: Vec<Variable>,
}

#[derive(Debug, Serialize)]
struct Passthrough {
    prefixes: [&'static str; 2],
    read_by: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
struct Variable {
    name: &'static str,
    read_by: Vec<&'static str>,
    #[serde(rename = "type")]
    json_type: &'static str,
    required: bool,
    /// The default as environment text; `null` when there is none.
    default: Option<String>,
    /// Whether blank text means none rather than the default.
    blank_means_none: bool,
    minimum: Option<Minimum>,
    doc: &'static str,
}

fn variable(v: &dyn Declared) -> Variable {
    Variable {
        name: v.name(),
        read_by: v.read_by().iter().map(|b| b.name()).collect(),
        json_type: v.json_type(),
        required: v.required(),
        default: v.default_text(),
        blank_means_none: v.blank_means_none(),
        minimum: v.minimum(),
        doc: v.doc(),
    }
}

/// The JSON description of every variable (`charts/settings.json`), ending
/// in a newline.
pub fn settings_json() -> String {
    let description = Description {
        generated: "from shared/src/config/vars.rs; do not edit: UPDATE_GENERATED=1 cargo test -p tcab-shared --test it settings_docs",
        binaries: BINARIES.iter().map(|b| b.name()).collect(),
        passthrough: Passthrough {
            prefixes: PASSTHROUGH_PREFIXES,
            read_by: vec![PASSES_THROUGH.name()],
        },
        variables: SETTINGS.iter().map(|v| variable(*v)).collect(),
    };
    let mut out = serde_json::to_string_pretty(&description).unwrap_or_default();
    out.push('\n');
    out
}
