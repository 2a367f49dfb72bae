//! The metrics and probes of the three real containers, scraped over HTTP
//! while the dev stack drains: the values move as the work does, the probes
//! say what the containers are doing, and the devstack command shows the
//! dispatcher's own view from them.

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, run, terminal};
use serde_json::json;
use std::time::Duration;
use tcab_devstack::scrape::Scrape;
use tcab_devstack::stack::SERVICE_TOKEN;
use tcab_devstack::{Container, wait_for};

const RUNS: usize = 16;
const PUBLISHES: usize = 4;
const RUN_CAP: u32 = 4;
const PUBLISH_CAP: u32 = 2;

/// The loops each container times.
fn loops(c: Container) -> &'static [&'static str] {
    match c {
        Container::Admitter => &["admit_run", "admit_publish"],
        Container::LeaseKeeper => &["renew", "report"],
        Container::Reaper => &["reap"],
    }
}

async fn scrape(t: &TestStack, c: Container) -> Scrape {
    t.stack
        .scrape(c)
        .await
        .unwrap_or_else(|e| t.fail(format!("scraping {}: {e:#}", c.binary())))
}

fn lane(s: &Scrape, name: &str, lane: &str) -> Option<f64> {
    s.value(name, &[("lane", lane)])
}

fn created(s: &Scrape, lane: &str) -> f64 {
    s.value(
        "tcab_dispatcher_admissions_total",
        &[("lane", lane), ("outcome", "created")],
    )
    .unwrap_or(0.0)
}

/// Both probes of every container answer 200.
async fn all_probes_pass(t: &TestStack) -> anyhow::Result<Option<()>> {
    for c in Container::ALL {
        for path in ["/healthz", "/readyz"] {
            let (status, body) = t.stack.endpoint(c, path).await?;
            if status != 200 {
                anyhow::bail!("{} {path}: {status} {body}", c.binary());
            }
        }
    }
    Ok(Some(()))
}

async fn the_containers_metrics_and_probes_follow_a_drain(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |o| {
        o.max_inflight = RUN_CAP;
        o.max_publish_inflight = PUBLISH_CAP;
    })
    .await;
    // Ready once each view is current and each loop has ticked; alive.
    wait_for("every probe to pass", Duration::from_secs(30), || {
        all_probes_pass(&t)
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    let before = scrape(&t, Container::Admitter).await;
    assert_eq!(created(&before, "run") + created(&before, "publish"), 0.0);
    assert_eq!(
        lane(&before, "tcab_dispatcher_lane_in_flight", "run"),
        Some(0.0)
    );
    assert_eq!(
        lane(&before, "tcab_dispatcher_lane_cap", "run"),
        Some(f64::from(RUN_CAP))
    );
    assert_eq!(
        lane(&before, "tcab_dispatcher_lane_cap", "publish"),
        Some(f64::from(PUBLISH_CAP))
    );

    let runs: Vec<_> = (0..RUNS)
        .map(|i| {
            run(
                &format!("case-{i}"),
                json!({"duration_ms": 400, "log_lines": 1}),
            )
        })
        .collect();
    t.stack
        .backend
        .enqueue_batch(runs)
        .await
        .expect("enqueue runs");
    for i in 0..PUBLISHES {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 300}}))
            .await
            .expect("enqueue publish");
    }

    // Scrape the admitter while the stack drains: its run lane fills up
    // (never past its cap) and its admissions count up.
    let mut most_in_flight = 0.0_f64;
    let mut created_seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let s = scrape(&t, Container::Admitter).await;
        let in_flight = lane(&s, "tcab_dispatcher_lane_in_flight", "run").unwrap_or(0.0);
        assert!(
            in_flight <= f64::from(RUN_CAP),
            "run lane at {in_flight} over its cap"
        );
        most_in_flight = most_in_flight.max(in_flight);
        created_seen.push(created(&s, "run"));
        let runs = t.stack.backend.jobs().await.expect("runs");
        let pubs = t.stack.backend.publish_jobs().await.expect("publishes");
        if runs
            .iter()
            .chain(pubs.iter())
            .all(|j| terminal(&j["state"]))
        {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            t.fail("the stack did not drain in time");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
    assert!(
        most_in_flight >= 1.0,
        "the run lane's in-flight count never moved"
    );
    assert!(
        created_seen.windows(2).all(|w| w[0] <= w[1]),
        "admissions only count up: {created_seen:?}"
    );

    // Drained: each lane's in-flight count returns to 0, and every job
    // enqueued was admitted exactly once.
    let after = wait_for(
        "both lanes back to 0 in flight",
        Duration::from_secs(20),
        || async {
            let s = t.stack.scrape(Container::Admitter).await?;
            let idle = ["run", "publish"]
                .iter()
                .all(|l| lane(&s, "tcab_dispatcher_lane_in_flight", l) == Some(0.0));
            Ok(idle.then_some(s))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_eq!(created(&after, "run"), RUNS as f64, "run admissions");
    assert_eq!(
        created(&after, "publish"),
        PUBLISHES as f64,
        "publish admissions"
    );
    assert_eq!(
        lane(&after, "tcab_dispatcher_gate_open", "run"),
        Some(1.0),
        "the gate was open for every admission"
    );
    let claims = after.value(
        "tcab_dispatcher_backend_request_duration_seconds_count",
        &[("call", "claim_run"), ("status", "200")],
    );
    assert_eq!(
        claims,
        Some(RUNS as f64),
        "one answered claim per run admitted"
    );

    let keeper = scrape(&t, Container::LeaseKeeper).await;
    assert!(
        keeper
            .value(
                "tcab_dispatcher_lease_renewals_total",
                &[("lane", "run"), ("result", "ok")]
            )
            .unwrap_or(0.0)
            >= 1.0,
        "renewals counted"
    );
    let age = lane(&keeper, "tcab_dispatcher_last_renewal_age_seconds", "run")
        .unwrap_or_else(|| t.fail("no renewal age"));
    assert!(
        (0.0..10.0).contains(&age),
        "the run lane was renewed recently: {age}"
    );
    assert_eq!(
        keeper.sum("tcab_dispatcher_death_reports_total", &[]),
        0.0,
        "no driver died"
    );

    for c in Container::ALL {
        let s = scrape(&t, c).await;
        assert_eq!(
            s.value(
                "tcab_dispatcher_build_info",
                &[
                    ("binary", c.binary()),
                    ("version", env!("CARGO_PKG_VERSION"))
                ]
            ),
            Some(1.0),
            "{} build info",
            c.binary()
        );
        assert_eq!(
            s.value("tcab_dispatcher_view_current", &[]),
            Some(1.0),
            "{} view",
            c.binary()
        );
        for name in loops(c) {
            let ticks = s
                .value(
                    "tcab_dispatcher_tick_duration_seconds_count",
                    &[("loop", name)],
                )
                .unwrap_or(0.0);
            assert!(
                ticks >= 1.0,
                "{} loop {name} ticked {ticks} times",
                c.binary()
            );
        }
        let (_, text) = t.stack.endpoint(c, "/metrics").await.expect("metrics");
        assert!(
            !text.contains(SERVICE_TOKEN),
            "{} exposes the service token",
            c.binary()
        );
    }
    all_probes_pass(&t).await.unwrap_or_else(|e| t.fail(e));
}

/// A container whose metrics address is taken stops at once, naming it.
async fn a_taken_metrics_address_stops_the_container_naming_it(kind: ClusterKind) {
    let t = TestStack::start(kind, |_| {}).await;
    wait_for("every probe to pass", Duration::from_secs(30), || {
        all_probes_pass(&t)
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let bins = tcab_devstack::binaries::bin_dir().expect("bin dir");
    for c in [Container::Admitter, Container::Reaper] {
        // A second copy of a running container: same environment, same port.
        let env = t.stack.container_env(c);
        let addr = env
            .iter()
            .find(|(k, _)| k == "TCAB_DISPATCHER_METRICS_ADDR")
            .map(|(_, v)| v.clone())
            .expect("the stack sets a metrics address");
        let out = tokio::process::Command::new(tcab_devstack::binaries::path(&bins, c.binary()))
            .env_clear()
            .envs(env)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("it stops at once")
            .expect("it runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{} exit: {:?}",
            c.binary(),
            out.status
        );
        assert!(
            stderr.contains(&addr) && stderr.contains("TCAB_DISPATCHER_METRICS_ADDR"),
            "{}: {stderr}",
            c.binary()
        );
    }
    all_probes_pass(&t).await.unwrap_or_else(|e| t.fail(e));
}

/// `tcab-devstack` prints the three metrics URLs and a status line with the
/// dispatcher's own view beside the backend's job states.
async fn the_devstack_command_shows_the_dispatchers_view(kind: ClusterKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tcab-devstack"))
        .args([
            "--cluster",
            kind.name(),
            "--runs",
            "3",
            "--publishes",
            "1",
            "--exit-when-drained",
            "--dir",
        ])
        .arg(dir.path().join("stack"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(common::pick(kind, 120, 240)), out)
        .await
        .expect("the demo drains in time")
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {:?}\n{stdout}", out.status);
    for c in ["admitter", "lease-keeper", "reaper"] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().contains(&format!("{c} http://127.0.0.1:")))
            .unwrap_or_else(|| panic!("no metrics URL of the {c}:\n{stdout}"));
        assert!(line.trim_end().ends_with("/metrics"), "{line}");
    }
    let status: Vec<&str> = stdout.lines().filter(|l| l.starts_with("runs: ")).collect();
    assert!(
        status
            .iter()
            .any(|l| l.contains("| dispatcher: run ") && l.contains("/8 (gate ")),
        "no status line with the lanes:\n{stdout}"
    );
    let last = status.last().expect("a status line");
    assert!(
        last.contains("deaths 0") && last.contains("lost 0") && last.contains("reaped 0"),
        "{last}"
    );
}

on_both_clusters!(
    the_containers_metrics_and_probes_follow_a_drain,
    a_taken_metrics_address_stops_the_container_naming_it,
    the_devstack_command_shows_the_dispatchers_view,
);
