//! `cargo run -p tcab-devstack`: the whole system on this machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tcab_devstack::{Stack, StackOptions};

const HELP: &str = "tcab-devstack: the dispatcher, the simulated cluster and the reference backend on this machine

Usage: tcab-devstack [--dir PATH] [--runs N] [--publishes N] [--exit-when-drained]

  --dir PATH            where logs, kubeconfigs and the backend's database go (default .devstack)
  --runs N              demo runs to enqueue at start (default 12)
  --publishes N         demo publishes to enqueue at start (default 3)
  --exit-when-drained   stop once every demo job is terminal (exit 1 if any did not succeed as scripted)
";

struct Args {
    dir: PathBuf,
    runs: usize,
    publishes: usize,
    exit_when_drained: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dir: PathBuf::from(".devstack"),
        runs: 12,
        publishes: 3,
        exit_when_drained: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--dir" => args.dir = PathBuf::from(value("--dir")?),
            "--runs" => {
                args.runs = value("--runs")?
                    .parse()
                    .map_err(|_| "--runs: expected a whole number".to_string())?
            }
            "--publishes" => {
                args.publishes = value("--publishes")?
                    .parse()
                    .map_err(|_| "--publishes: expected a whole number".to_string())?
            }
            "--exit-when-drained" => args.exit_when_drained = true,
            "--help" | "-h" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unexpected argument {other:?} (see --help)")),
        }
    }
    Ok(args)
}

/// The demo workload: mostly runs that succeed, one agent failure, one driver
/// that crashes mid-run (reported lost after its lease lapses), and publishes.
fn demo_run(i: usize) -> serde_json::Value {
    let sim = match i % 6 {
        4 => serde_json::json!({"duration_ms": 1500, "outcome": "failed", "log_lines": 3}),
        _ => serde_json::json!({"duration_ms": 1000 + 250 * (i % 4) as u64, "log_lines": 3}),
    };
    serde_json::json!({
        "harness": if i % 2 == 0 { "claude-code" } else { "codex" },
        "model": format!("model-{}", i % 3),
        "case": format!("case-{i:03}"),
        "jam": null,
        "launch_request": {"case": format!("case-{i:03}"), "sim": sim},
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tcab-devstack: {e}");
            std::process::exit(2);
        }
    };
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    let dir = std::path::absolute(&args.dir)?;
    println!("starting the dev stack in {} ...", dir.display());
    let stack = Stack::start(StackOptions::new(&dir)).await?;
    let runs: Vec<_> = (0..args.runs).map(demo_run).collect();
    let mut ids = if runs.is_empty() {
        Vec::new()
    } else {
        stack.backend.enqueue_batch(runs).await?
    };
    for i in 0..args.publishes {
        ids.push(stack.backend.enqueue_publish(serde_json::json!({"release": format!("demo-{i}"), "sim": {"duration_ms": 800}})).await?);
    }
    println!(
        "\ndev stack up\n  backend  {}  (service token {})\n  cluster  {}\n  kubectl  kubectl --kubeconfig {} get jobs,pods\n  logs     {}/*.log\n\nenqueued {} runs and {} publishes; enqueue more with\n  curl -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n    -d '{{\"harness\":\"h\",\"model\":\"m\",\"case\":\"c\",\"jam\":null,\"launch_request\":{{\"sim\":{{\"duration_ms\":2000}}}}}}' {}/jobs\nCtrl-C stops everything.\n",
        stack.backend.url(),
        tcab_devstack::stack::SERVICE_TOKEN,
        stack.cluster.url(),
        stack.admin_kubeconfig.display(),
        dir.display(),
        args.runs,
        args.publishes,
        tcab_devstack::stack::SERVICE_TOKEN,
        stack.backend.url(),
    );
    let mut stack = stack;
    let outcome = status_loop(&mut stack, args.exit_when_drained).await;
    stack.shutdown().await;
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => {
            eprintln!("some demo jobs did not end as scripted");
            std::process::exit(1)
        }
        Err(e) => Err(e),
    }
}

/// Prints a status line every two seconds until Ctrl-C (or, with
/// `exit_when_drained`, until every job is terminal). Returns whether every run
/// and publish ended as the demo scripted it.
async fn status_loop(stack: &mut Stack, exit_when_drained: bool) -> anyhow::Result<bool> {
    let mut last = String::new();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(true),
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
        stack.check_alive()?;
        let runs = stack.backend.jobs().await?;
        let pubs = stack.backend.publish_jobs().await?;
        let count = |items: &[serde_json::Value]| {
            let mut m: BTreeMap<String, usize> = BTreeMap::new();
            for j in items {
                *m.entry(j["state"].as_str().unwrap_or("?").to_owned())
                    .or_default() += 1;
            }
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let line = format!("runs: {} | publishes: {}", count(&runs), count(&pubs));
        if line != last {
            println!("{line}");
            last = line;
        }
        let terminal = |s: &str| matches!(s, "succeeded" | "failed" | "cancelled");
        if exit_when_drained
            && runs
                .iter()
                .chain(pubs.iter())
                .all(|j| terminal(j["state"].as_str().unwrap_or("")))
        {
            let scripted_fail = |j: &serde_json::Value| {
                j["case"]
                    .as_str()
                    .and_then(|c| c.strip_prefix("case-"))
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| n % 6 == 4)
            };
            let runs_ok = runs.iter().all(|j| {
                let s = j["state"].as_str().unwrap_or("");
                s == "succeeded" || (s == "failed" && scripted_fail(j))
            });
            let pubs_ok = pubs.iter().all(|j| j["state"] == "succeeded");
            return Ok(runs_ok && pubs_ok);
        }
    }
}
