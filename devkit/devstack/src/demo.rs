//! The `tcab-devstack` command: its arguments, its run directory, the demo
//! workload it enqueues and the status it prints. `main.rs` only wires these.

use clap::Parser;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Marks a directory as the dev stack's own, so `--dir` never clears anything else.
pub const MARKER: &str = ".tcab-devstack";

/// The command's arguments. A flag given twice keeps its last value.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(
    name = "tcab-devstack",
    version,
    about = "The dispatcher, a Kubernetes cluster (simulated, or the real control plane) and the reference backend on this machine",
    args_override_self = true
)]
pub struct Args {
    /// The cluster: `sim` (kube-sim, embedded and fast) or `real` (the
    /// upstream control plane built from Go modules, with the node agent
    /// playing two nodes; the first run builds it)
    #[arg(long, value_enum, value_name = "KIND", default_value_t = crate::ClusterKind::Sim)]
    pub cluster: crate::ClusterKind,
    /// Where logs, kubeconfigs and the backend's database go; a directory this
    /// command made before is cleared, any other non-empty one is refused
    #[arg(long, value_name = "PATH", default_value = ".devstack")]
    pub dir: PathBuf,
    /// Demo runs to enqueue at start
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub runs: usize,
    /// Demo publishes to enqueue at start
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub publishes: usize,
    /// Stop once every demo job is terminal (exit 1 if any did not end as scripted)
    #[arg(long)]
    pub exit_when_drained: bool,
    /// How the dispatcher runs: `processes` (the three binaries started by
    /// the stack) or `chart` (the Helm chart installed as `helm install`
    /// does, its pod run by the node agent as the same binaries; needs
    /// `--cluster real`)
    #[arg(long, value_enum, value_name = "HOW", default_value_t = Install::Processes)]
    pub install: Install,
    /// What plays the real control plane's nodes: `agent` (the node agent,
    /// pods as local processes) or `kubelet` (the upstream kubelet on
    /// containerd and runc, running images built here; needs `--cluster
    /// real --install chart`, root, containerd, runc, the CNI plugins and
    /// cgroup v1)
    #[arg(long, value_enum, value_name = "KIND", default_value_t = crate::NodeKind::Agent)]
    pub node: crate::NodeKind,
}

impl Args {
    /// Why these arguments cannot run together (exit status 2), if they
    /// cannot.
    pub fn conflict(&self) -> Option<&'static str> {
        let chart = self.install == Install::Chart;
        let kubelet = self.node == crate::NodeKind::Kubelet;
        if kubelet && !self.cluster.is_real() {
            return Some(
                "--node kubelet needs --cluster real (real kubelets join the upstream control plane; kube-sim plays its own nodes)",
            );
        }
        if kubelet && !chart {
            return Some(
                "--node kubelet needs --install chart (the dispatcher runs as the chart's pod on a real node: its processes on this host could not share one backend URL with drivers inside the node network)",
            );
        }
        if chart && !self.cluster.is_real() {
            return Some(
                "--install chart needs --cluster real (the node agent or real kubelets run the chart's pod)",
            );
        }
        None
    }
}

/// How the dev stack runs the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Install {
    /// The three binaries as processes of the stack.
    Processes,
    /// The Helm chart on the real control plane.
    Chart,
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

    fn args(list: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("tcab-devstack").chain(list.iter().copied()))
    }

    #[test]
    fn arguments() {
        use clap::CommandFactory;
        use clap::error::ErrorKind;
        Args::command().debug_assert();
        let a = args(&["--runs", "3", "--dir", "x", "--exit-when-drained"]).unwrap();
        assert_eq!((a.runs, a.publishes, a.exit_when_drained), (3, 3, true));
        assert_eq!(a.dir, PathBuf::from("x"));
        let d = args(&[]).unwrap();
        assert_eq!(
            (d.dir.clone(), d.runs, d.publishes, d.exit_when_drained),
            (PathBuf::from(".devstack"), 12, 3, false)
        );
        assert_eq!(d.cluster, crate::ClusterKind::Sim, "kube-sim by default");
        assert_eq!(
            args(&["--cluster", "real"]).unwrap().cluster,
            crate::ClusterKind::Real
        );
        let e = args(&["--cluster", "kind"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(e.to_string().contains("'kind'"), "{e}");
        assert_eq!(args(&["--runs", "1", "--runs", "2"]).unwrap().runs, 2);
        assert_eq!(d.node, crate::NodeKind::Agent, "the node agent by default");
        assert_eq!(d.conflict(), None);
        let kubelet = args(&[
            "--cluster",
            "real",
            "--node",
            "kubelet",
            "--install",
            "chart",
        ]);
        let kubelet = kubelet.unwrap();
        assert_eq!(kubelet.node, crate::NodeKind::Kubelet);
        assert_eq!(kubelet.conflict(), None);
        let on_sim = args(&["--node", "kubelet", "--install", "chart"]).unwrap();
        assert!(
            on_sim
                .conflict()
                .unwrap()
                .contains("--node kubelet needs --cluster real")
        );
        let processes = args(&["--cluster", "real", "--node", "kubelet"]).unwrap();
        assert!(
            processes
                .conflict()
                .unwrap()
                .contains("needs --install chart")
        );
        let chart_on_sim = args(&["--install", "chart"]).unwrap();
        assert!(
            chart_on_sim
                .conflict()
                .unwrap()
                .contains("--install chart needs --cluster real")
        );
        let e = args(&["--node", "kind"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert_eq!(
            args(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
        let e = args(&["--runs"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(e.to_string().contains("a value is required"), "{e}");
        let e = args(&["--runs", "many"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("'many'"), "{e}");
        let e = args(&["--bogus"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--bogus"), "{e}");
        assert_eq!(e.exit_code(), 2);
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
