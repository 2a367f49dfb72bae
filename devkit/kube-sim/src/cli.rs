//! Command-line flags of the `tcab-kube-sim` binary.
//!
//! [`parse`] is pure (plain strings in, [`Command`] out); reading the RBAC
//! Role file happens in [`Args::into_options`].

use crate::SimOptions;
use crate::rbac::{Rbac, RbacError};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The usage text (`--help`).
pub const USAGE: &str = "usage: tcab-kube-sim --listen 127.0.0.1:PORT --kubeconfig-out PATH [--namespace NS] \
[--rbac-role ROLE.yaml --rbac-token TOKEN] [--admin-token TOKEN] [--speed X] \
[--nodes N] [--node-size CPU/MEMORY/PODS]";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run the sim with these arguments.
    Run(Box<Args>),
    /// Print [`USAGE`] and exit 0.
    Help,
}

/// The parsed flags of a run. A flag given twice keeps its last value.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// `--listen` (default `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// `--kubeconfig-out` (required).
    pub kubeconfig_out: PathBuf,
    /// `--namespace` (default: [`SimOptions::default`]'s).
    pub namespace: Option<String>,
    /// `--admin-token` (default: [`SimOptions::default`]'s).
    pub admin_token: Option<String>,
    /// `--speed` (default 1).
    pub speed: Option<f64>,
    /// `--rbac-role` and `--rbac-token`, which go together.
    pub rbac: Option<RbacFlags>,
    /// `--nodes` (default 2).
    pub nodes: Option<usize>,
    /// `--node-size` as (cpu, memory, pods) (default 3920m/15Gi/110).
    pub node_size: Option<(String, String, u32)>,
}

/// The RBAC mode flags: the Role manifest's path and the token it binds.
#[derive(Clone, PartialEq)]
pub struct RbacFlags {
    /// `--rbac-role`.
    pub role: PathBuf,
    /// `--rbac-token`.
    pub token: String,
}

impl std::fmt::Debug for RbacFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbacFlags")
            .field("role", &self.role)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A command line that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag was last, with no value after it.
    #[error("{0} needs a value")]
    NoValue(String),
    /// A flag's value does not parse.
    #[error("{flag} {value:?} {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What was given.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Not a flag of this program.
    #[error("unknown flag {0}")]
    Unknown(String),
    /// A required flag is absent.
    #[error("{0} is required")]
    Missing(&'static str),
    /// Only one of `--rbac-role` and `--rbac-token` was given.
    #[error("--rbac-role and --rbac-token go together")]
    RbacHalf,
    /// The Role file cannot be used.
    #[error("loading the Role {path}")]
    Role {
        /// The `--rbac-role` path.
        path: String,
        /// Why.
        #[source]
        source: RbacError,
    },
}

fn invalid(flag: &'static str, value: String, reason: &'static str) -> CliError {
    CliError::Invalid {
        flag,
        value,
        reason,
    }
}

/// Parses the arguments (without the program name); each flag takes its
/// value as the next argument.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, CliError> {
    let mut listen = SimOptions::default().listen;
    let mut kubeconfig_out = None;
    let (mut namespace, mut admin_token, mut speed) = (None, None, None);
    let (mut role, mut rbac_token) = (None, None);
    let (mut nodes, mut node_size) = (None, None);
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let flag = match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--listen" => "--listen",
            "--kubeconfig-out" => "--kubeconfig-out",
            "--namespace" => "--namespace",
            "--rbac-role" => "--rbac-role",
            "--rbac-token" => "--rbac-token",
            "--admin-token" => "--admin-token",
            "--speed" => "--speed",
            "--nodes" => "--nodes",
            "--node-size" => "--node-size",
            _ => return Err(CliError::Unknown(flag)),
        };
        let value = args.next().ok_or_else(|| CliError::NoValue(flag.into()))?;
        match flag {
            "--listen" => {
                listen = value
                    .parse()
                    .map_err(|_| invalid(flag, value, "is not HOST:PORT"))?
            }
            "--kubeconfig-out" if value.is_empty() => {
                return Err(invalid(flag, value, "is an empty path"));
            }
            "--kubeconfig-out" => kubeconfig_out = Some(PathBuf::from(value)),
            "--namespace" if value.is_empty() => {
                return Err(invalid(flag, value, "is an empty namespace"));
            }
            "--namespace" => namespace = Some(value),
            "--rbac-role" => role = Some(PathBuf::from(value)),
            "--rbac-token" => rbac_token = Some(value),
            "--admin-token" => admin_token = Some(value),
            "--nodes" => {
                nodes = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=250).contains(n))
                        .ok_or_else(|| invalid(flag, value, "is not a node count from 1 to 250"))?,
                )
            }
            "--node-size" => {
                node_size = Some(parse_node_size(&value).ok_or_else(|| {
                    invalid(flag, value, "is not CPU/MEMORY/PODS, e.g. 3920m/15Gi/110")
                })?)
            }
            _ => {
                speed = Some(
                    value
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| invalid(flag, value, "is not a positive number"))?,
                )
            }
        }
    }
    let rbac = match (role, rbac_token) {
        (Some(role), Some(token)) => Some(RbacFlags { role, token }),
        (None, None) => None,
        _ => return Err(CliError::RbacHalf),
    };
    Ok(Command::Run(Box::new(Args {
        listen,
        kubeconfig_out: kubeconfig_out.ok_or(CliError::Missing("--kubeconfig-out"))?,
        namespace,
        admin_token,
        speed,
        rbac,
        nodes,
        node_size,
    })))
}

/// `CPU/MEMORY/PODS`, each a valid quantity (pods a whole number).
fn parse_node_size(v: &str) -> Option<(String, String, u32)> {
    let mut parts = v.split('/');
    let (cpu, memory, pods) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    crate::quantity::cpu_millis(cpu).filter(|c| *c > 0)?;
    crate::quantity::bytes(memory).filter(|m| *m > 0)?;
    let pods: u32 = pods.parse().ok().filter(|p| *p > 0)?;
    Some((cpu.to_string(), memory.to_string(), pods))
}

impl Args {
    /// The sim's options; reads and parses the Role file in RBAC mode.
    pub fn into_options(self) -> Result<SimOptions, CliError> {
        let mut opts = SimOptions {
            listen: self.listen,
            kubeconfig_out: Some(self.kubeconfig_out),
            ..SimOptions::default()
        };
        if let Some(ns) = self.namespace {
            opts.namespace = ns;
        }
        if let Some(t) = self.admin_token {
            opts.admin_token = t;
        }
        if let Some(x) = self.speed {
            opts.speed = x;
        }
        if self.nodes.is_some() || self.node_size.is_some() {
            let mut nodes = crate::nodes::NodeSpec::cluster(self.nodes.unwrap_or(2));
            if let Some((cpu, memory, pods)) = &self.node_size {
                for n in &mut nodes {
                    n.cpu = cpu.clone();
                    n.memory = memory.clone();
                    n.pods = *pods;
                }
            }
            opts.nodes = nodes;
        }
        if let Some(r) = self.rbac {
            opts.rbac = Some(
                Rbac::load(&r.role, &r.token).map_err(|source| CliError::Role {
                    path: r.role.display().to_string(),
                    source,
                })?,
            );
        }
        Ok(opts)
    }
}

/// The error with its causes, `a: b: c` (what the binary prints).
pub fn explain(e: &CliError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
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

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn run(s: &str) -> Args {
        match parse(args(s)).unwrap() {
            Command::Run(a) => *a,
            Command::Help => panic!("expected a run: {s}"),
        }
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
                namespace: Some("dev".into()),
                admin_token: Some("at".into()),
                speed: Some(2.5),
                rbac: Some(RbacFlags {
                    role: "role.yaml".into(),
                    token: "rt".into()
                }),
                nodes: Some(3),
                node_size: Some(("8".into(), "32Gi".into(), 200)),
            }
        );
        assert!(!format!("{a:?}").contains("rt\""), "{a:?}");
        let o = a.clone().into_options();
        assert!(o.is_err(), "the role file does not exist");
        let mut no_rbac = a;
        no_rbac.rbac = None;
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
    fn help_wins_wherever_it_is() {
        assert_eq!(parse(args("--help")).unwrap(), Command::Help);
        assert_eq!(parse(args("--namespace x -h")).unwrap(), Command::Help);
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let cases = [
            (
                "--listen nope --kubeconfig-out x",
                "--listen \"nope\" is not HOST:PORT",
            ),
            (
                "--kubeconfig-out x --speed 0",
                "--speed \"0\" is not a positive number",
            ),
            (
                "--kubeconfig-out x --speed NaN",
                "--speed \"NaN\" is not a positive number",
            ),
            (
                "--kubeconfig-out x --speed fast",
                "--speed \"fast\" is not a positive number",
            ),
            (
                "--kubeconfig-out x --nodes 0",
                "--nodes \"0\" is not a node count from 1 to 250",
            ),
            (
                "--kubeconfig-out x --node-size 4/16Gi",
                "--node-size \"4/16Gi\" is not CPU/MEMORY/PODS, e.g. 3920m/15Gi/110",
            ),
            (
                "--kubeconfig-out x --node-size 4/lots/110",
                "--node-size \"4/lots/110\" is not CPU/MEMORY/PODS, e.g. 3920m/15Gi/110",
            ),
            ("--kubeconfig-out", "--kubeconfig-out needs a value"),
            ("--frob 1", "unknown flag --frob"),
            ("--namespace dev", "--kubeconfig-out is required"),
            (
                "--rbac-token t --kubeconfig-out x",
                "--rbac-role and --rbac-token go together",
            ),
            (
                "--rbac-role r --kubeconfig-out x",
                "--rbac-role and --rbac-token go together",
            ),
        ];
        for (line, want) in cases {
            let err = parse(args(line)).unwrap_err();
            assert_eq!(err.to_string(), want, "{line}");
        }
        let err = parse(vec!["--namespace".into(), String::new()]).unwrap_err();
        assert!(
            matches!(
                err,
                CliError::Invalid {
                    flag: "--namespace",
                    ..
                }
            ),
            "{err}"
        );
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
            matches!(&err, CliError::Role { path, source: RbacError::Read { .. } } if path == "/nonexistent/role.yaml"),
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
