//! `tcab-api-proxy`: the fault proxy in front of an API server, until
//! interrupted. See `--help`.

use anyhow::Context;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tcab_api_proxy::{ProxyOptions, RestartHook, UpstreamOptions};

/// The parsed flags. A flag given twice keeps its last value (but
/// `--identity`, which adds).
#[derive(Debug, Parser)]
#[command(
    name = "tcab-api-proxy",
    version,
    about = "A proxy in front of a kube-apiserver that injects kube-sim's API faults (same admin API)",
    after_help = "The first line on stdout is `listening on URL` (https with --serve-cert; plain http works on \
                  the same port too); the admin API is under /admin/ there. RUST_LOG sets the log filter (stderr).",
    args_override_self = true
)]
struct Args {
    /// The API server's URL (scheme, host and port), e.g. https://127.0.0.1:6443
    #[arg(long, value_name = "URL")]
    upstream: String,
    /// PEM file of the CA the API server's serving certificate chains to (needed for https),
    /// e.g. the kube-apiserver's <cert-dir>/apiserver.crt
    #[arg(long, value_name = "PATH")]
    upstream_ca: Option<PathBuf>,
    /// Serve HTTPS (beside plain HTTP, on the same port) with this certificate chain (PEM),
    /// e.g. the kube-apiserver's own <cert-dir>/apiserver.crt; kubectl needs HTTPS to send its token
    #[arg(long, value_name = "PATH", requires = "serve_key")]
    serve_cert: Option<PathBuf>,
    /// The private key of --serve-cert (PEM), e.g. <cert-dir>/apiserver.key
    #[arg(long, value_name = "PATH", requires = "serve_cert")]
    serve_key: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig pointing at the proxy, with the token of --token (parent directories are created)
    #[arg(long, value_name = "PATH", requires = "token")]
    kubeconfig_out: Option<PathBuf>,
    /// The kubeconfig's bearer token (passed on to the API server as it is)
    #[arg(long, value_name = "TOKEN", requires = "kubeconfig_out")]
    token: Option<String>,
    /// The kubeconfig's namespace
    #[arg(long, value_name = "NS", default_value = "default")]
    namespace: String,
    /// Count requests with TOKEN under NAME in the per-identity counters (repeatable)
    #[arg(long, value_name = "NAME=TOKEN", value_parser = identity, action = clap::ArgAction::Append)]
    identity: Vec<(String, String)>,
    /// A shell command that restarts the API server, run by POST /admin/restart while the
    /// proxy's port is closed (exit 0 = restarted); without it a restart only cuts and
    /// refuses connections
    #[arg(long, value_name = "COMMAND")]
    restart_command: Option<String>,
}

fn identity(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, token)) if !name.is_empty() && !token.is_empty() => {
            Ok((name.to_string(), token.to_string()))
        }
        _ => Err("expected NAME=TOKEN".into()),
    }
}

/// A restart hook that runs `command` with `sh -c`.
fn command_hook(command: String) -> RestartHook {
    Arc::new(move || {
        let command = command.clone();
        Box::pin(async move {
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(&command)
                .status()
                .await
                .with_context(|| format!("running the restart command {command:?}"))?;
            anyhow::ensure!(
                status.success(),
                "the restart command {command:?} exited with {status}"
            );
            Ok(())
        })
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let ca_pem = match &args.upstream_ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let mut opts = ProxyOptions::new(UpstreamOptions {
        url: args.upstream.clone(),
        ca_pem,
    });
    opts.listen = args.listen;
    if let (Some(cert), Some(key)) = (&args.serve_cert, &args.serve_key) {
        let read =
            |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        opts = opts.serve_tls(read(cert)?, read(key)?);
    }
    for (name, token) in args.identity {
        opts = opts.identity(token, name);
    }
    if let Some(c) = args.restart_command {
        opts = opts.restart_hook(command_hook(c));
    }
    let proxy = tcab_api_proxy::spawn(opts).await?;
    if let (Some(path), Some(token)) = (&args.kubeconfig_out, &args.token) {
        proxy.write_kubeconfig(path, token, &args.namespace)?;
    }
    // stdout is line-buffered: the line is out before the first request.
    println!("listening on {}", proxy.url());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    proxy.shutdown();
    Ok(())
}
