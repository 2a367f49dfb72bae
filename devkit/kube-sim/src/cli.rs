//! Command-line flags of the `tcab-kube-sim` binary, declared with clap.
//!
//! Parsing is pure (plain strings in, [`Args`] out); reading the RBAC Role
//! file happens in [`Args::into_options`].

use crate::SimOptions;
use crate::rbac::{Rbac, RbacError};
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The parsed flags of a run. A flag given twice keeps its last value.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(
    name = "tcab-kube-sim",
    version,
    about = "A simulated Kubernetes API server and control plane, for kubectl, kube-rs and the dev stack",
    after_help = "The first line on stdout is `listening on http://ADDR`. RUST_LOG sets the log filter (stderr).",
    args_override_self = true
)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value_t = SimOptions::default().listen,
        value_parser = listen,
    )]
    pub listen: SocketAddr,
    /// Where to write the kubeconfig for kubectl and kube-rs (parent directories are created)
    #[arg(long, value_name = "PATH", value_parser = kubeconfig_out)]
    pub kubeconfig_out: PathBuf,
    /// The kubeconfig's namespace (every namespace exists)
    #[arg(
        long,
        value_name = "NS",
        default_value_t = SimOptions::default().namespace,
        value_parser = namespace,
    )]
    pub namespace: String,
    /// RBAC mode: a Role manifest (YAML) whose rules bind the token of --rbac-token
    #[arg(long, value_name = "ROLE.yaml", requires = "rbac_token")]
    pub rbac_role: Option<PathBuf>,
    /// RBAC mode: the bearer token the Role applies to (other tokens are not restricted)
    #[arg(long, value_name = "TOKEN", requires = "rbac_role", value_parser = redacted)]
    pub rbac_token: Option<Redacted>,
    /// The kubeconfig's bearer token (not restricted)
    #[arg(long, value_name = "TOKEN", default_value_t = SimOptions::default().admin_token)]
    pub admin_token: String,
    /// How many times faster than real time the cluster's clock runs
    #[arg(
        long,
        value_name = "X",
        default_value_t = SimOptions::default().speed,
        value_parser = speed,
    )]
    pub speed: f64,
    /// Number of nodes, 1 to 250 [default: 2]
    #[arg(long, value_name = "N", value_parser = nodes)]
    pub nodes: Option<usize>,
    /// Each node's allocatable cpu, memory and pods [default: 3920m/15Gi/110]
    #[arg(long, value_name = "CPU/MEMORY/PODS", value_parser = node_size)]
    pub node_size: Option<NodeSize>,
}

/// A token that `Debug` does not print.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `--node-size`: cpu and memory quantities and a pod count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSize {
    /// Allocatable cpu, e.g. `3920m`.
    pub cpu: String,
    /// Allocatable memory, e.g. `15Gi`.
    pub memory: String,
    /// Allocatable pods.
    pub pods: u32,
}

fn listen(v: &str) -> Result<SocketAddr, String> {
    v.parse().map_err(|_| "is not HOST:PORT".to_string())
}

fn kubeconfig_out(v: &str) -> Result<PathBuf, String> {
    if v.is_empty() {
        return Err("is an empty path".into());
    }
    Ok(PathBuf::from(v))
}

fn namespace(v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err("is an empty namespace".into());
    }
    Ok(v.to_string())
}

fn redacted(v: &str) -> Result<Redacted, String> {
    Ok(Redacted(v.to_string()))
}

fn speed(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| "is not a positive number".to_string())
}

fn nodes(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|n| (1..=250).contains(n))
        .ok_or_else(|| "is not a node count from 1 to 250".to_string())
}

/// `CPU/MEMORY/PODS`, each a valid quantity (pods a whole number).
fn node_size(v: &str) -> Result<NodeSize, String> {
    let parse = || {
        let mut parts = v.split('/');
        let (cpu, memory, pods) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        crate::quantity::cpu_millis(cpu).filter(|c| *c > 0)?;
        crate::quantity::bytes(memory).filter(|m| *m > 0)?;
        let pods: u32 = pods.parse().ok().filter(|p| *p > 0)?;
        Some(NodeSize {
            cpu: cpu.to_string(),
            memory: memory.to_string(),
            pods,
        })
    };
    parse().ok_or_else(|| "is not CPU/MEMORY/PODS, e.g. 3920m/15Gi/110".to_string())
}

/// The Role file of `--rbac-role` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("loading the Role {path}")]
pub struct RoleError {
    /// The `--rbac-role` path.
    pub path: String,
    /// Why.
    #[source]
    pub source: RbacError,
}

impl Args {
    /// The sim's options; reads and parses the Role file in RBAC mode.
    pub fn into_options(self) -> Result<SimOptions, RoleError> {
        let mut opts = SimOptions {
            listen: self.listen,
            kubeconfig_out: Some(self.kubeconfig_out),
            namespace: self.namespace,
            admin_token: self.admin_token,
            speed: self.speed,
            ..SimOptions::default()
        };
        if self.nodes.is_some() || self.node_size.is_some() {
            let mut nodes = crate::nodes::NodeSpec::cluster(self.nodes.unwrap_or(2));
            if let Some(size) = &self.node_size {
                for n in &mut nodes {
                    n.cpu = size.cpu.clone();
                    n.memory = size.memory.clone();
                    n.pods = size.pods;
                }
            }
            opts.nodes = nodes;
        }
        // clap lets --rbac-role and --rbac-token through only together.
        if let (Some(role), Some(Redacted(token))) = (self.rbac_role, self.rbac_token) {
            opts.rbac = Some(Rbac::load(&role, &token).map_err(|source| RoleError {
                path: role.display().to_string(),
                source,
            })?);
        }
        Ok(opts)
    }
}

/// The error with its causes, `a: b: c` (what the binary prints).
pub fn explain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// Logs to stderr; `RUST_LOG` sets the filter (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env();
    tracing_subscriber::fmt()
        .with_env_filter(filter.unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
}

/// Resolves on SIGINT or SIGTERM (how the binary is stopped).
pub async fn interrupted() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    fn parse(s: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("tcab-kube-sim").chain(s.split_whitespace()))
    }

    fn run(s: &str) -> Args {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn clap_accepts_the_declaration() {
        Args::command().debug_assert();
    }

    #[test]
    fn every_flag() {
        let a = run(
            "--listen 127.0.0.1:7000 --kubeconfig-out /tmp/kc --namespace dev \
             --rbac-role role.yaml --rbac-token rt --admin-token at --speed 2.5 \
             --nodes 3 --node-size 8/32Gi/200",
        );
        assert_eq!(
            a,
            Args {
                listen: "127.0.0.1:7000".parse().unwrap(),
                kubeconfig_out: "/tmp/kc".into(),
                namespace: "dev".into(),
                admin_token: "at".into(),
                speed: 2.5,
                rbac_role: Some("role.yaml".into()),
                rbac_token: Some(Redacted("rt".into())),
                nodes: Some(3),
                node_size: Some(NodeSize {
                    cpu: "8".into(),
                    memory: "32Gi".into(),
                    pods: 200
                }),
            }
        );
        assert!(!format!("{a:?}").contains("rt\""), "{a:?}");
        let o = a.clone().into_options();
        assert!(o.is_err(), "the role file does not exist");
        let mut no_rbac = a;
        (no_rbac.rbac_role, no_rbac.rbac_token) = (None, None);
        let o = no_rbac.into_options().unwrap();
        assert_eq!(o.nodes.len(), 3);
        assert_eq!(
            (
                o.nodes[2].name.as_str(),
                o.nodes[2].cpu.as_str(),
                o.nodes[2].memory.as_str(),
                o.nodes[2].pods
            ),
            ("sim-node-3", "8", "32Gi", 200)
        );
        assert_eq!(run("--kubeconfig-out=kc --speed=3").speed, 3.0);
    }

    #[test]
    fn defaults_come_from_sim_options() {
        let a = run("--kubeconfig-out kc");
        assert_eq!(a.listen, SimOptions::default().listen);
        let o = a.into_options().unwrap();
        let d = SimOptions::default();
        assert_eq!(
            (o.namespace, o.admin_token, o.speed, o.rbac.is_none()),
            (d.namespace, d.admin_token, d.speed, true)
        );
        assert_eq!(o.nodes, d.nodes);
        assert_eq!(o.kubeconfig_out, Some(PathBuf::from("kc")));
        assert_eq!(
            run("--kubeconfig-out a --kubeconfig-out b").kubeconfig_out,
            PathBuf::from("b")
        );
    }

    #[test]
    fn help_and_version_are_not_errors() {
        for line in ["--help", "--namespace x -h", "--version"] {
            let e = parse(line).unwrap_err();
            assert!(
                matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion),
                "{line}: {e}"
            );
            assert_eq!(e.exit_code(), 0, "{line}");
        }
        let help = Args::command().render_long_help().to_string();
        for flag in [
            "--listen",
            "--kubeconfig-out",
            "--namespace",
            "--rbac-role",
            "--rbac-token",
            "--admin-token",
            "--speed",
            "--nodes",
            "--node-size",
        ] {
            assert!(help.contains(flag), "{flag} in\n{help}");
        }
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let cases: [(&str, &[&str]); 12] = [
            (
                "--listen nope --kubeconfig-out x",
                &["'nope'", "--listen", "is not HOST:PORT"],
            ),
            (
                "--kubeconfig-out x --speed 0",
                &["'0'", "--speed", "is not a positive number"],
            ),
            (
                "--kubeconfig-out x --speed NaN",
                &["'NaN'", "--speed", "is not a positive number"],
            ),
            (
                "--kubeconfig-out x --speed fast",
                &["'fast'", "--speed", "is not a positive number"],
            ),
            (
                "--kubeconfig-out x --nodes 0",
                &["'0'", "--nodes", "is not a node count from 1 to 250"],
            ),
            (
                "--kubeconfig-out x --node-size 4/16Gi",
                &[
                    "'4/16Gi'",
                    "--node-size",
                    "is not CPU/MEMORY/PODS, e.g. 3920m/15Gi/110",
                ],
            ),
            (
                "--kubeconfig-out x --node-size 4/lots/110",
                &["'4/lots/110'", "--node-size", "is not CPU/MEMORY/PODS"],
            ),
            (
                "--kubeconfig-out",
                &["--kubeconfig-out", "a value is required"],
            ),
            ("--frob 1", &["unexpected argument '--frob'"]),
            ("--namespace dev", &["required", "--kubeconfig-out"]),
            (
                "--rbac-token t --kubeconfig-out x",
                &["required", "--rbac-role"],
            ),
            (
                "--rbac-role r --kubeconfig-out x",
                &["required", "--rbac-token"],
            ),
        ];
        for (line, wants) in cases {
            let err = parse(line).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{line}");
            let text = err.to_string();
            for want in wants {
                assert!(text.contains(want), "{line}: {want:?} not in {text}");
            }
        }
        for flag in ["--namespace", "--kubeconfig-out"] {
            let err = Args::try_parse_from(["tcab-kube-sim", "--kubeconfig-out", "x", flag, ""])
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{flag}: {err}");
            assert!(err.to_string().contains("is an empty"), "{err}");
        }
    }

    #[test]
    fn the_role_file_is_loaded_or_named_in_the_error() {
        let missing = run("--kubeconfig-out x --rbac-role /nonexistent/role.yaml --rbac-token t");
        let err = missing.into_options().unwrap_err();
        assert!(
            explain(&err).starts_with(
                "loading the Role /nonexistent/role.yaml: reading /nonexistent/role.yaml: "
            ),
            "{}",
            explain(&err)
        );
        assert!(
            matches!(&err, RoleError { path, source: RbacError::Read { .. } } if path == "/nonexistent/role.yaml"),
            "{err:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let role = dir.path().join("role.yaml");
        std::fs::write(
            &role,
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\nrules:\n\
             - apiGroups: [batch]\n  resources: [jobs]\n  verbs: [get]\n",
        )
        .unwrap();
        let a = run(&format!(
            "--kubeconfig-out x --rbac-role {} --rbac-token t",
            role.display()
        ));
        assert!(a.into_options().unwrap().rbac.is_some());
    }
}
