//! The known divergences: the table in `devkit/kube-sim/README.md` under
//! the heading `## Known divergences from upstream`, one row per outcome
//! line that may differ: `| probe | line | upstream | kube-sim | why |`,
//! the probe and the line in backticks (a line ending in `*` covers every
//! line that starts with the rest, e.g. `create.*`). kube-sim's README is where a reader
//! of kube-sim looks for what it does not follow; the probes read the very
//! same table, so it cannot drift from what they accept.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;

/// The heading the table follows.
pub const HEADING: &str = "## Known divergences from upstream";
/// The heading of the node agent's table (`devkit/node-agent/README.md`):
/// `| scenario | line | kubelet | node agent | why |`, read into the same
/// rows (`upstream` the kubelet, `kube_sim` the node agent).
pub const NODE_HEADING: &str = "## Known divergences from the real kubelet";

/// One row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub probe: String,
    pub line: String,
    pub upstream: String,
    pub kube_sim: String,
    pub why: String,
    /// Upstream's answer varies between runs (the line cell says
    /// `(varies)`): the row may differ or agree, and is never stale.
    pub varies: bool,
}

/// kube-sim's README.
pub fn readme_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kube-sim/README.md")
}

/// The node agent's README.
pub fn node_readme_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../node-agent/README.md")
}

/// The rows of kube-sim's README.
pub fn load() -> Result<Vec<Divergence>> {
    load_from(&readme_path(), HEADING)
}

/// The rows of the table under `heading` in the file at `path`.
pub fn load_from(path: &std::path::Path, heading: &str) -> Result<Vec<Divergence>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_under(&text, heading).with_context(|| format!("the table of {}", path.display()))
}

/// The rows of the table under [`HEADING`] (none without the heading).
pub fn parse(text: &str) -> Result<Vec<Divergence>> {
    parse_under(text, HEADING)
}

/// The rows of the table under `heading` (none without the heading).
pub fn parse_under(text: &str, heading: &str) -> Result<Vec<Divergence>> {
    let mut rows = Vec::new();
    let mut lines = text.lines().skip_while(|l| !l.starts_with(heading));
    if lines.next().is_none() {
        return Ok(rows);
    }
    let mut in_table = false;
    for line in lines {
        let l = line.trim();
        if l.starts_with("## ") {
            break;
        }
        if !l.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
        if !in_table {
            in_table = true; // the header
            continue;
        }
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        if cells.len() != 5 {
            bail!("a row without 5 cells: {l}");
        }
        let code = |c: &str| c.trim_matches('`').to_string();
        let (line, varies) = match cells[1].strip_suffix("(varies)") {
            Some(l) => (l.trim(), true),
            None => (cells[1], false),
        };
        let row = Divergence {
            probe: code(cells[0]),
            line: code(line),
            varies,
            upstream: cells[2].to_string(),
            kube_sim: cells[3].to_string(),
            why: cells[4].to_string(),
        };
        if row.probe.is_empty() || row.line.is_empty() || row.why.is_empty() {
            bail!("a row without a probe, a line or a reason: {l}");
        }
        rows.push(row);
    }
    Ok(rows)
}

impl Divergence {
    /// Whether the row covers the outcome line `key`: the same line, or,
    /// for a row whose line ends in `*`, every line that starts with what
    /// comes before it (`*` alone: the whole outcome).
    pub fn covers(&self, key: &str) -> bool {
        match self.line.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => self.line == key,
        }
    }
}

/// The rows of one probe.
pub fn of_probe<'a>(rows: &'a [Divergence], probe: &str) -> Vec<&'a Divergence> {
    rows.iter().filter(|r| r.probe == probe).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_table_under_its_heading() {
        let text = "# x\n| a | b |\n|---|---|\n| not | this |\n\n## Known divergences from upstream\n\nWhy.\n\n| probe | line | upstream | kube-sim | why |\n|---|---|---|---|---|\n| `v::p` | `create` | 422 | 201 | stricter on purpose |\n| `v::q` | `x.y` | a | b | c |\n| `v::r` | `x.r` (varies) | a | b | c |\n\nAfter.\n| `z` | `z` | z | z | z |\n";
        let rows = parse(text).unwrap();
        assert_eq!(rows.len(), 3);
        assert!(!rows[0].varies);
        assert_eq!((rows[2].line.as_str(), rows[2].varies), ("x.r", true));
        assert_eq!(rows[0].probe, "v::p");
        assert_eq!(rows[0].line, "create");
        assert_eq!(rows[0].why, "stricter on purpose");
        assert_eq!(of_probe(&rows, "v::q").len(), 1);
        assert!(rows[1].covers("x.y") && !rows[1].covers("x.yz"));
        let mut wild = rows[1].clone();
        wild.line = "x.*".into();
        assert!(wild.covers("x.y") && wild.covers("x.z") && !wild.covers("y"));
        assert!(parse("## Known divergences from upstream\n| p | l | u | k | w |\n|-|-|-|-|-|\n| `p` | `l` | u | k | |\n").is_err());
        assert!(parse("nothing").unwrap().is_empty());
    }

    #[test]
    fn kube_sims_readme_parses() {
        load().unwrap();
    }

    #[test]
    fn the_node_agents_readme_parses() {
        load_from(&node_readme_path(), NODE_HEADING).unwrap();
    }
}
