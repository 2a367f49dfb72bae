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
        o.extra_env
            .push(("TCAB_DISPATCHER_LOG_FORMAT".into(), "json".into()));
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
                // Longer than the Job controller's 1 s batching of pod
                // events (upstream's and kube-sim's): a shorter run may end
                // before its Job ever shows a ready pod, and then its start
                // is never timed.
                json!({"duration_ms": 1500, "log_lines": 1}),
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
        &[("call", "claim_run"), ("status", "200"), ("outcome", "ok")],
    );
    assert_eq!(
        claims,
        Some(RUNS as f64),
        "one answered claim per run admitted"
    );

    // Every claim said when its job was queued, and became a Job; every
    // Job's end was seen by the watch; the lanes' figures are current and
    // no lane is saturated once the queue is empty.
    for (l, n) in [("run", RUNS), ("publish", PUBLISHES)] {
        for name in [
            "tcab_dispatcher_queue_wait_seconds_count",
            "tcab_dispatcher_claim_to_job_seconds_count",
        ] {
            assert_eq!(lane(&after, name, l), Some(n as f64), "{name} {l}");
        }
        assert_eq!(lane(&after, "tcab_dispatcher_lane_stale", l), Some(0.0));
        assert_eq!(
            lane(&after, "tcab_dispatcher_lane_saturated_seconds", l),
            Some(0.0)
        );
    }
    let ended = wait_for("every Job's end timed", Duration::from_secs(20), || async {
        let s = t.stack.scrape(Container::Admitter).await?;
        let runs = s.value(
            "tcab_dispatcher_job_duration_seconds_count",
            &[("lane", "run"), ("outcome", "succeeded")],
        );
        Ok((runs == Some(RUNS as f64)).then_some(s))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let started = lane(&ended, "tcab_dispatcher_job_start_seconds_count", "run").unwrap_or(0.0);
    assert!(
        started > 0.0 && started <= RUNS as f64,
        "runs seen starting: {started}"
    );
    assert_eq!(
        after
            .value("tcab_dispatcher_gate_max_age_seconds", &[])
            .map(|v| v > 0.0),
        Some(true),
        "the gate's limit is exported"
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
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("contract", tcab_shared::backend::CONTRACT_VERSION),
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

    // The JSON logs: one object per line, lists as JSON arrays, and no line
    // of the Kubernetes client's own.
    for c in Container::ALL {
        let log = t.stack.log(c);
        for line in log.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
                t.fail(format!("{}: not a JSON line ({e}): {line}", c.binary()))
            });
            let target = value["target"].as_str().unwrap_or_default();
            assert!(!target.starts_with("kube_client"), "{}: {line}", c.binary());
        }
    }
    let renewed: Vec<serde_json::Value> = t
        .stack
        .log(Container::LeaseKeeper)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("renewed "))
        })
        .collect();
    let listed = renewed
        .iter()
        .find(|v| v["started"].as_array().is_some_and(|a| !a.is_empty()))
        .unwrap_or_else(|| {
            t.fail(format!(
                "no renewal line lists the ids it started: {renewed:?}"
            ))
        });
    assert!(
        listed["started"]
            .as_array()
            .is_some_and(|ids| ids.iter().all(serde_json::Value::is_string)),
        "{listed}"
    );
    // The line counts every id it started, naming at most the first 20.
    let named = listed["started"].as_array().map_or(0, Vec::len) as u64;
    let counted = listed["started_count"].as_u64().unwrap_or(0);
    assert!(named <= 20 && counted >= named, "{listed}");
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

/// One row of docs/metrics.md's metrics table.
struct Documented {
    name: String,
    kind: String,
    labels: Vec<String>,
    exported_by: String,
}

const METRICS_DOC: &str = include_str!("../../../docs/metrics.md");

/// The metrics table of docs/metrics.md.
fn documented_metrics() -> Vec<Documented> {
    METRICS_DOC
        .lines()
        .filter(|l| l.starts_with("| `tcab_dispatcher_"))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            Documented {
                name: cells[0].trim_matches('`').to_owned(),
                kind: cells[1].to_owned(),
                labels: cells[2]
                    .split(", ")
                    .filter_map(|l| l.strip_prefix('`')?.strip_suffix('`'))
                    .map(str::to_owned)
                    .collect(),
                exported_by: cells[3].to_owned(),
            }
        })
        .collect()
}

/// The values of `cell` (`` `v`: meaning; `w`: meaning ``), each with its
/// meaning.
fn values_of(cell: &str) -> Vec<(String, String)> {
    cell.split("; ")
        .filter_map(|part| {
            let rest = part.strip_prefix('`')?;
            let (value, meaning) = rest.split_once("`: ")?;
            value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
                .then(|| (value.to_owned(), meaning.to_owned()))
        })
        .collect()
}

/// The documented values of `label` on `metric` (its name without the
/// `tcab_dispatcher_` prefix, as the label table names it), each with its
/// meaning: every row of the label table for that label on that metric
/// (or on "every metric" with it); the death causes from their own table.
fn documented_values(metric: &str, label: &str) -> Vec<(String, String)> {
    let short = metric.trim_start_matches("tcab_dispatcher_");
    let mut out = Vec::new();
    for row in METRICS_DOC
        .lines()
        .filter(|l| l.starts_with(&format!("| `{label}` | ")))
    {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let on = cells[1];
        if !(on.contains(&format!("`{short}`")) || on.starts_with("every metric")) {
            continue;
        }
        if label == "cause" {
            let causes = METRICS_DOC
                .split("<!-- cause-table:start")
                .nth(1)
                .expect("the cause table");
            out.extend(
                causes
                    .lines()
                    .take_while(|l| !l.starts_with("<!-- cause-table:end"))
                    .filter_map(|l| l.strip_prefix("| `"))
                    .filter_map(|l| l.split_once('`'))
                    .map(|(v, m)| (v.to_owned(), m.to_owned())),
            );
        } else {
            out.extend(values_of(cells[2]));
        }
    }
    out
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Before any work (its first list of Jobs held by an API server that never
/// answers, so no loop has ticked), each container exports every counter
/// docs/metrics.md lists for it, with every value of each of its labels,
/// all at 0; and the lane and report histograms, empty. This is what lets
/// `increase()` see the first death, lost report and reap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_containers_metrics_show_every_documented_counter_at_0() {
    let t = TestStack::start(ClusterKind::Sim, |_| {}).await;
    // An API server that accepts connections and never answers.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a listener");
    let hole_url = format!("http://{}", hole.local_addr().expect("an address"));
    let _holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hole.accept().await {
            held.push(socket);
        }
    });
    let bins = tcab_devstack::binaries::bin_dir().expect("bin dir");
    let documented = documented_metrics();
    assert!(documented.len() > 25, "the metrics table");
    for c in Container::ALL {
        let short = c.binary().trim_start_matches("tcab-");
        let mut env = t.stack.container_env(c);
        let kubeconfig = t.dir.path().join(format!("hole-{short}.kubeconfig"));
        for (k, v) in &mut env {
            match k.as_str() {
                "KUBECONFIG" => {
                    let text = std::fs::read_to_string(&*v).expect("the stack's kubeconfig");
                    let text: String = text
                        .lines()
                        .map(|l| match l.split_once("server:") {
                            Some((indent, _)) => format!("{indent}server: {hole_url}\n"),
                            None => format!("{l}\n"),
                        })
                        .collect();
                    std::fs::write(&kubeconfig, text).expect("kubeconfig written");
                    *v = kubeconfig.display().to_string();
                }
                "TCAB_DISPATCHER_METRICS_ADDR" => *v = format!("127.0.0.1:{}", free_port()),
                "TCAB_DISPATCHER_VAULT_ADDR" => *v = format!("127.0.0.1:{}", free_port()),
                _ => {}
            }
        }
        // The admitter's dry run at start is bounded by this: no timeout
        // (and no error counted) before the scrape.
        env.push(("TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS".into(), "60".into()));
        let addr = env
            .iter()
            .find(|(k, _)| k == "TCAB_DISPATCHER_METRICS_ADDR")
            .map(|(_, v)| v.clone())
            .expect("a metrics address");
        let _child = tokio::process::Command::new(tcab_devstack::binaries::path(&bins, c.binary()))
            .env_clear()
            .envs(env)
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the container starts");
        let url = format!("http://{addr}/metrics");
        let text = wait_for(
            "the fresh container's /metrics",
            Duration::from_secs(30),
            || {
                let url = url.clone();
                async move {
                    Ok(match reqwest::get(&url).await {
                        Ok(answer) if answer.status() == 200 => Some(answer.text().await?),
                        _ => None,
                    })
                }
            },
        )
        .await
        .unwrap_or_else(|e| t.fail(e));
        let scrape = Scrape::parse(&text).expect("the text format");
        let mut checked = 0;
        for metric in &documented {
            let exported = metric.exported_by == "all" || metric.exported_by.contains(short);
            let series = match metric.kind.as_str() {
                "counter" => metric.name.clone(),
                // The lane and report histograms are created at start; those
                // by call, status or loop appear at their first observation.
                "histogram"
                    if !metric
                        .labels
                        .iter()
                        .any(|l| ["call", "status", "loop"].contains(&l.as_str())) =>
                {
                    format!("{}_count", metric.name)
                }
                _ => continue,
            };
            if !exported {
                continue;
            }
            let samples: Vec<_> = scrape.matching(&series, &[]).collect();
            assert!(
                !samples.is_empty(),
                "{}: no {series} in a fresh scrape:\n{text}",
                c.binary()
            );
            for s in &samples {
                assert_eq!(
                    s.value,
                    0.0,
                    "{}: {series} {:?} is not 0",
                    c.binary(),
                    s.labels
                );
            }
            for label in &metric.labels {
                let seen: std::collections::BTreeSet<&str> = samples
                    .iter()
                    .filter_map(|s| s.labels.get(label))
                    .map(String::as_str)
                    .collect();
                let want: std::collections::BTreeSet<String> =
                    documented_values(&metric.name, label)
                        .into_iter()
                        // A backend call is there in the containers that make it.
                        .filter(|(_, meaning)| label != "call" || meaning.contains(short))
                        .map(|(v, _)| v)
                        .collect();
                assert!(
                    !want.is_empty(),
                    "{}: no documented values of {label}",
                    metric.name
                );
                let want: std::collections::BTreeSet<&str> =
                    want.iter().map(String::as_str).collect();
                assert_eq!(seen, want, "{}: {series} by {label}", c.binary());
            }
            checked += 1;
        }
        assert!(checked >= 3, "{}: {checked} metrics checked", c.binary());
    }
}

/// A container's `/status` document, read over its port.
async fn status(t: &TestStack, c: Container) -> anyhow::Result<serde_json::Value> {
    let (code, body) = t.stack.endpoint(c, "/status").await?;
    anyhow::ensure!(code == 200, "{} /status: {code} {body}", c.binary());
    anyhow::ensure!(
        !body.contains(SERVICE_TOKEN),
        "{} /status shows the service token",
        c.binary()
    );
    Ok(serde_json::from_str(&body)?)
}

/// The value of one series of the admitter's lane gauges, by lane and reason.
fn by_reason(s: &Scrape, name: &str, lane: &str, reason: &str) -> Option<f64> {
    s.value(name, &[("lane", lane), ("reason", reason)])
}

/// Why a lane holds, in one look, with the real binaries: the run lane full
/// of a run that never ends, the publish lane paused (a cap of 0). The hold
/// gauge, the gate and the `/status` documents say so; after an admitter
/// restart the full lane's gate reads open from its first tick (never 0,
/// which paged `TcabDispatcherGateClosed` while renewals were healthy); and
/// while the backend refuses renewals the gate reads closed with its
/// reason, the lane still held for being full, the lease-keeper's document
/// naming the failing call.
async fn a_lane_says_why_it_holds_in_its_metrics_and_status(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |o| {
        o.max_inflight = 1;
        o.max_publish_inflight = 0;
    })
    .await;
    let ids = t
        .stack
        .backend
        .enqueue_batch(vec![
            run("long", json!({"hang": true})),
            run("waiting", json!({"duration_ms": 100})),
        ])
        .await
        .expect("enqueue");
    t.running_driver(
        &ids[0],
        t.pick(Duration::from_secs(30), Duration::from_secs(60)),
    )
    .await;
    let full = wait_for(
        "the run lane held full",
        Duration::from_secs(20),
        || async {
            let s = t.stack.scrape(Container::Admitter).await?;
            let full = by_reason(&s, "tcab_dispatcher_lane_hold", "run", "lane_full") == Some(1.0);
            Ok(full.then_some(s))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_eq!(lane(&full, "tcab_dispatcher_gate_open", "run"), Some(1.0));
    assert_eq!(
        by_reason(&full, "tcab_dispatcher_lane_hold", "run", "none"),
        Some(0.0)
    );
    assert_eq!(
        by_reason(&full, "tcab_dispatcher_lane_hold", "publish", "paused"),
        Some(1.0)
    );
    assert_eq!(
        full.sum("tcab_dispatcher_gate_closed_reason", &[("lane", "run")]),
        0.0,
        "no closed reason while the gate is open"
    );
    let doc = status(&t, Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let run_lane = &doc["lanes"]["run"];
    assert_eq!(run_lane["hold_reason"], "lane_full", "{doc}");
    assert_eq!(
        (run_lane["in_flight"].as_u64(), run_lane["cap"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(run_lane["gate"]["open"], true, "{doc}");
    assert_eq!(
        run_lane["last_admitted"]["job_id"],
        ids[0].as_str(),
        "{doc}"
    );
    assert_eq!(doc["lanes"]["publish"]["hold_reason"], "paused", "{doc}");
    let keeper = status(&t, Container::LeaseKeeper)
        .await
        .unwrap_or_else(|e| t.fail(e));
    assert_eq!(keeper["renewals"]["run"]["healthy"], true, "{keeper}");
    assert_eq!(keeper["renewals"]["publish"]["enabled"], true, "{keeper}");
    let reaper = status(&t, Container::Reaper)
        .await
        .unwrap_or_else(|e| t.fail(e));
    assert_eq!(reaper["view_current"], true, "{reaper}");
    assert!(reaper["last_tick"]["seconds_ago"].is_number(), "{reaper}");

    // The admitter restarts with its lane full and renewals healthy: from
    // its first answer on, the gate never reads closed.
    t.stack.stop_container(Container::Admitter).await;
    t.stack
        .start_container(Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(e));
    // `wait_for` retries on an error, so a closed reading is noted and
    // checked after the wait.
    let read_closed = std::cell::Cell::new(false);
    wait_for(
        "the restarted admitter reading its full lane's gate open",
        Duration::from_secs(30),
        || async {
            let Ok(s) = t.stack.scrape(Container::Admitter).await else {
                return Ok(None);
            };
            let gate = lane(&s, "tcab_dispatcher_gate_open", "run");
            if gate == Some(0.0) {
                read_closed.set(true);
            }
            let full = by_reason(&s, "tcab_dispatcher_lane_hold", "run", "lane_full") == Some(1.0);
            Ok((full && gate == Some(1.0)).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert!(
        !read_closed.get(),
        "the restarted admitter read the gate closed with its lane full and renewals healthy"
    );

    // The backend refuses renewals: the gate closes for the run lane with
    // its reason, and the lane still holds for being full.
    t.stack
        .backend
        .add_fault(&["/jobs/leases"], "error", 60.0)
        .await
        .expect("fail renewals");
    let closed = wait_for(
        "the full lane's gate read closed, renewals failing",
        Duration::from_secs(20),
        || async {
            let s = t.stack.scrape(Container::Admitter).await?;
            let failing = by_reason(
                &s,
                "tcab_dispatcher_gate_closed_reason",
                "run",
                "renewal_failing",
            ) == Some(1.0);
            Ok(failing.then_some(s))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_eq!(lane(&closed, "tcab_dispatcher_gate_open", "run"), Some(0.0));
    assert_eq!(
        by_reason(&closed, "tcab_dispatcher_lane_hold", "run", "lane_full"),
        Some(1.0)
    );
    assert_eq!(
        closed.sum("tcab_dispatcher_gate_closed_reason", &[("lane", "run")]),
        1.0,
        "one reason at a time"
    );
    let doc = status(&t, Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(e));
    assert_eq!(
        doc["lanes"]["run"]["gate"]["reason"], "renewal_failing",
        "{doc}"
    );
    assert_eq!(doc["lanes"]["run"]["hold_reason"], "lane_full", "{doc}");
    let keeper = status(&t, Container::LeaseKeeper)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let renewals = &keeper["renewals"]["run"];
    assert_eq!(renewals["healthy"], false, "{keeper}");
    assert!(renewals["failing"].is_string(), "{keeper}");
    assert!(
        renewals["failed_rounds_in_a_row"].as_u64() >= Some(1),
        "{keeper}"
    );

    // Renewals succeed again: the gate opens.
    t.stack.backend.clear_faults().await.expect("clear faults");
    wait_for("the gate open again", Duration::from_secs(20), || async {
        let s = t.stack.scrape(Container::Admitter).await?;
        Ok((lane(&s, "tcab_dispatcher_gate_open", "run") == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}

on_both_clusters!(
    the_containers_metrics_and_probes_follow_a_drain,
    a_taken_metrics_address_stops_the_container_naming_it,
    the_devstack_command_shows_the_dispatchers_view,
    a_lane_says_why_it_holds_in_its_metrics_and_status,
);
