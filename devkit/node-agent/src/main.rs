//! `tcab-node-agent`: plays kubelets for N nodes against an API server.
//!
//! ```sh
//! tcab-node-agent --api-url https://127.0.0.1:6443 --ca-file certs/apiserver.crt \
//!   --tokens tokens.csv --node node-1 --node node-2,cpu=4,memory=16Gi,label.pool=a
//! ```
//!
//! `--tokens` is the API server's `--token-auth-file` (CSV `token,user,uid[,groups]`):
//! each node uses the row of user `system:node:<name>`. The first line on
//! stdout is `node agent ready: admin http://127.0.0.1:PORT`; SIGTERM or
//! Ctrl-C stops it.

use anyhow::Context;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tcab_node_agent::{AgentOptions, Cluster, LocalImage, NodeSpec, Timing, start};

/// Plays kubelets for N nodes against a Kubernetes API server.
#[derive(Parser, Debug)]
#[command(name = "tcab-node-agent", version)]
struct Args {
    /// The API server's URL.
    #[arg(long)]
    api_url: String,
    /// PEM file with the API server's CA (or its self-signed serving certificate).
    #[arg(long)]
    ca_file: PathBuf,
    /// The API server's token file (CSV token,user,uid[,groups]).
    #[arg(long)]
    tokens: PathBuf,
    /// A node: NAME[,cpu=N,memory=Q,pods=N,port=N,label.KEY=VALUE,...] (repeat for more).
    #[arg(long = "node", required = true)]
    nodes: Vec<String>,
    /// Where the admin API listens (loopback only).
    #[arg(long, default_value = "127.0.0.1:0")]
    admin_listen: SocketAddr,
    /// Duration of each node's Lease (renewed every quarter of it).
    #[arg(long, default_value_t = 40)]
    lease_seconds: u64,
    /// How often each node's status is recomputed.
    #[arg(long, default_value_t = 10.0)]
    status_update_seconds: f64,
    /// First image pull back-off (doubling up to --image-back-off-max-seconds).
    #[arg(long, default_value_t = 10.0)]
    image_back_off_seconds: f64,
    /// Longest image pull back-off.
    #[arg(long, default_value_t = 300.0)]
    image_back_off_max_seconds: f64,
    /// REPOSITORY=DIR: containers of this image run DIR/<command> as child
    /// processes (the dispatcher's own pod); repeat for more.
    #[arg(long = "local-image")]
    local_images: Vec<String>,
}

fn local_image(arg: &str) -> anyhow::Result<LocalImage> {
    let (repository, dir) = arg
        .split_once('=')
        .with_context(|| format!("--local-image {arg:?} is not REPOSITORY=DIR"))?;
    anyhow::ensure!(
        !repository.is_empty(),
        "--local-image {arg:?}: no repository"
    );
    Ok(LocalImage {
        repository: repository.to_owned(),
        bin_dir: PathBuf::from(dir),
    })
}

/// The token of `system:node:<name>` in an API server token file.
fn node_token(csv: &str, name: &str) -> Option<String> {
    let user = format!("system:node:{name}");
    csv.lines().find_map(|line| {
        let mut fields = line.splitn(3, ',');
        let token = fields.next()?.trim();
        (fields.next()?.trim().trim_matches('"') == user).then(|| token.to_string())
    })
}

fn node_spec(arg: &str, tokens: &str) -> anyhow::Result<NodeSpec> {
    let mut parts = arg.split(',');
    let name = parts.next().unwrap_or("").trim();
    anyhow::ensure!(!name.is_empty(), "--node {arg:?}: no name");
    let token = node_token(tokens, name)
        .with_context(|| format!("no token of user system:node:{name} in the token file"))?;
    let mut spec = NodeSpec::new(name, token);
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .with_context(|| format!("--node {arg:?}: {p:?} is not KEY=VALUE"))?;
        if let Some(label) = k.strip_prefix("label.") {
            spec = spec.label(label, v);
        } else if k == "port" {
            spec.port = v
                .parse()
                .with_context(|| format!("--node {arg:?}: port {v:?}"))?;
        } else {
            spec = spec.capacity(k, v);
        }
    }
    Ok(spec)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let tokens = std::fs::read_to_string(&args.tokens)
        .with_context(|| format!("reading {}", args.tokens.display()))?;
    let nodes = args
        .nodes
        .iter()
        .map(|n| node_spec(n, &tokens))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.001));
    let opts = AgentOptions {
        cluster: Cluster {
            api_url: args.api_url,
            ca_pem: args.ca_file,
        },
        nodes,
        timing: Timing {
            lease_duration: Duration::from_secs(args.lease_seconds.max(1)),
            status_update: secs(args.status_update_seconds),
            image_back_off: secs(args.image_back_off_seconds),
            image_back_off_max: secs(args.image_back_off_max_seconds),
            ..Timing::default()
        },
        admin: Some(args.admin_listen),
        local_images: args
            .local_images
            .iter()
            .map(|a| local_image(a))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    let agent = start(opts).await?;
    let ports: Vec<String> = agent
        .nodes()
        .iter()
        .map(|n| format!("{n} (kubelet port {})", agent.port(n).unwrap_or(0)))
        .collect();
    println!(
        "node agent ready: admin {}; nodes: {}",
        agent.admin_url().unwrap_or_default(),
        ports.join(", ")
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    agent.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_arguments_and_tokens() {
        let csv = "a1,admin,admin,\"system:masters\"\nt-n1,system:node:n1,system:node:n1,\"system:nodes\"\n";
        let s = node_spec("n1,cpu=4,label.pool=x,port=10250", csv).unwrap();
        assert_eq!(
            (s.name.as_str(), s.token.as_str(), s.port),
            ("n1", "t-n1", 10250)
        );
        assert_eq!(s.capacity["cpu"], "4");
        assert_eq!(s.labels["pool"], "x");
        assert!(node_spec("n2", csv).is_err());
    }
}
