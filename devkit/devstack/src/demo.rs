//! The `tcab-devstack` command: its arguments, its run directory, the demo
//! workload it enqueues and the status it prints. `main.rs` only wires these.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `--help`.
pub const HELP: &str = "tcab-devstack: the dispatcher, the simulated cluster and the reference backend on this machine

Usage: tcab-devstack [--dir PATH] [--runs N] [--publishes N] [--exit-when-drained]

  --dir PATH            where logs, kubeconfigs and the backend's database go (default .devstack);
                        a directory this command made before is cleared, any other non-empty one is refused
  --runs N              demo runs to enqueue at start (default 12)
  --publishes N         demo publishes to enqueue at start (default 3)
  --exit-when-drained   stop once every demo job is terminal (exit 1 if any did not end as scripted)
";

/// Marks a directory as the dev stack's own, so `--dir` never clears anything else.
pub const MARKER: &str = ".tcab-devstack";

/// The command's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub dir: PathBuf,
    pub runs: usize,
    pub publishes: usize,
    pub exit_when_drained: bool,
}

/// What the arguments ask for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Args),
    Help,
}

/// Parses the arguments (without the program name).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Command, String> {
    let mut out = Args {
        dir: PathBuf::from(".devstack"),
        runs: 12,
        publishes: 3,
        exit_when_drained: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let number = |name: &str, v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{name}: expected a whole number, got {v:?}"))
        };
        match arg.as_str() {
            "--dir" => out.dir = PathBuf::from(value("--dir")?),
            "--runs" => out.runs = number("--runs", value("--runs")?)?,
            "--publishes" => out.publishes = number("--publishes", value("--publishes")?)?,
            "--exit-when-drained" => out.exit_when_drained = true,
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unexpected argument {other:?} (see --help)")),
        }
    }
    Ok(Command::Run(out))
}

/// Prepares the run directory: creates it, or clears it when an earlier run of
/// this command made it (it holds [`MARKER`]). Refuses a non-empty directory
/// that is not the dev stack's own, so a mistyped `--dir` deletes nothing.
pub fn prepare_dir(dir: &Path) -> Result<PathBuf, String> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            if !dir.join(MARKER).is_file() {
                return Err(format!(
                    "{} is not empty and was not made by tcab-devstack; choose another --dir",
                    dir.display()
                ));
            }
            std::fs::remove_dir_all(dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        "made by tcab-devstack; cleared by its next run\n",
    )
    .map_err(|e| format!("marking {}: {e}", dir.display()))?;
    std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Whether demo run `i` is scripted to fail (an agent failure, not retried).
pub fn scripted_to_fail(i: usize) -> bool {
    i % 6 == 4
}

/// Demo run `i`: mostly runs that succeed, every sixth an agent failure.
pub fn demo_run(i: usize) -> serde_json::Value {
    let sim = if scripted_to_fail(i) {
        serde_json::json!({"duration_ms": 1500, "outcome": "failed", "log_lines": 3})
    } else {
        serde_json::json!({"duration_ms": 1000 + 250 * (i % 4) as u64, "log_lines": 3})
    };
    serde_json::json!({
        "harness": if i.is_multiple_of(2) { "claude-code" } else { "codex" },
        "model": format!("model-{}", i % 3),
        "case": format!("case-{i:03}"),
        "jam": null,
        "launch_request": {"case": format!("case-{i:03}"), "sim": sim},
    })
}

/// Demo publish `i`.
pub fn demo_publish(i: usize) -> serde_json::Value {
    serde_json::json!({"release": format!("demo-{i}"), "sim": {"duration_ms": 800}})
}

/// "state count, ..." of a list of jobs, states in a stable order.
pub fn count_states(jobs: &[serde_json::Value]) -> String {
    let mut m: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs {
        *m.entry(j["state"].as_str().unwrap_or("?")).or_default() += 1;
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a state is terminal.
pub fn terminal(state: &serde_json::Value) -> bool {
    matches!(state.as_str(), Some("succeeded" | "failed" | "cancelled"))
}

/// Whether every job ended as the demo scripted it: scripted failures
/// failed, every other run and every publish succeeded.
pub fn ended_as_scripted(runs: &[serde_json::Value], publishes: &[serde_json::Value]) -> bool {
    let run_ok = |j: &serde_json::Value| {
        let index = j["case"]
            .as_str()
            .and_then(|c| c.strip_prefix("case-"))
            .and_then(|n| n.parse::<usize>().ok());
        match (j["state"].as_str(), index) {
            (Some("succeeded"), Some(i)) => !scripted_to_fail(i),
            (Some("failed"), Some(i)) => scripted_to_fail(i),
            _ => false,
        }
    };
    runs.iter().all(run_ok) && publishes.iter().all(|j| j["state"] == "succeeded")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(list: &[&str]) -> Result<Command, String> {
        parse_args(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let Ok(Command::Run(a)) = args(&["--runs", "3", "--dir", "x", "--exit-when-drained"])
        else {
            panic!("parses")
        };
        assert_eq!((a.runs, a.publishes, a.exit_when_drained), (3, 3, true));
        assert_eq!(a.dir, PathBuf::from("x"));
        assert_eq!(args(&["--help"]), Ok(Command::Help));
        assert!(args(&["--runs"]).unwrap_err().contains("needs a value"));
        assert!(
            args(&["--runs", "many"])
                .unwrap_err()
                .contains("expected a whole number")
        );
        assert!(
            args(&["--bogus"])
                .unwrap_err()
                .contains("unexpected argument")
        );
    }

    #[test]
    fn a_foreign_directory_is_never_cleared() {
        let root = tempfile::tempdir().expect("temp dir");
        let foreign = root.path().join("precious");
        std::fs::create_dir(&foreign).expect("mkdir");
        std::fs::write(foreign.join("data.txt"), "keep me").expect("write");
        assert!(
            prepare_dir(&foreign)
                .unwrap_err()
                .contains("not made by tcab-devstack")
        );
        assert!(foreign.join("data.txt").is_file(), "untouched");

        let ours = root.path().join("stack");
        prepare_dir(&ours).expect("fresh dir");
        std::fs::write(ours.join("old.log"), "from the last run").expect("write");
        prepare_dir(&ours).expect("our own dir is cleared");
        assert!(!ours.join("old.log").exists());
        assert!(ours.join(MARKER).is_file());
    }

    #[test]
    fn scripted_outcomes() {
        let run = |case: &str, state: &str| json!({"case": case, "state": state});
        let ok = [
            run("case-000", "succeeded"),
            run("case-004", "failed"),
            run("case-010", "failed"),
        ];
        assert!(ended_as_scripted(&ok, &[json!({"state": "succeeded"})]));
        assert!(!ended_as_scripted(&[run("case-001", "failed")], &[]));
        assert!(!ended_as_scripted(&[run("case-004", "succeeded")], &[]));
        assert!(!ended_as_scripted(&[], &[json!({"state": "failed"})]));
        assert_eq!(count_states(&ok), "failed 2, succeeded 1");
        assert_eq!(demo_run(4)["launch_request"]["sim"]["outcome"], "failed");
    }
}
