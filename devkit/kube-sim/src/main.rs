//! `tcab-kube-sim`: runs the simulated cluster until interrupted.

use anyhow::{Context, bail};
use std::io::Write;
use std::path::PathBuf;
use tcab_kube_sim::{Rbac, SimOptions, spawn};

const USAGE: &str = "usage: tcab-kube-sim --listen 127.0.0.1:PORT --kubeconfig-out PATH [--namespace NS] \
[--rbac-role ROLE.yaml --rbac-token TOKEN] [--admin-token TOKEN] [--speed X]";

fn parse_args() -> anyhow::Result<SimOptions> {
    let mut opts = SimOptions::default();
    let (mut role, mut rbac_token) = (None::<PathBuf>, None::<String>);
    let mut args = std::env::args().skip(1);
    let mut kubeconfig = None;
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--listen" => {
                opts.listen = value
                    .parse()
                    .with_context(|| format!("--listen {value:?} is not HOST:PORT"))?
            }
            "--kubeconfig-out" => kubeconfig = Some(PathBuf::from(value)),
            "--namespace" => opts.namespace = value,
            "--rbac-role" => role = Some(PathBuf::from(value)),
            "--rbac-token" => rbac_token = Some(value),
            "--admin-token" => opts.admin_token = value,
            "--speed" => {
                opts.speed = value
                    .parse()
                    .with_context(|| format!("--speed {value:?} is not a number"))?
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    opts.kubeconfig_out =
        Some(kubeconfig.with_context(|| format!("--kubeconfig-out is required\n{USAGE}"))?);
    opts.rbac = match (role, rbac_token) {
        (Some(r), Some(t)) => {
            Some(Rbac::load(&r, &t).with_context(|| format!("loading the Role {}", r.display()))?)
        }
        (None, None) => None,
        _ => bail!("--rbac-role and --rbac-token go together"),
    };
    Ok(opts)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tcab-kube-sim: {e:#}");
            std::process::exit(2);
        }
    };
    let sim = spawn(opts).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", sim.url())?;
    out.flush()?;
    drop(out);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    sim.shutdown();
    Ok(())
}
