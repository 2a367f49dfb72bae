//! Why a lane holds, read as an operator reads it: `run()` serving its
//! endpoints on a real port, `/status` and `/metrics` fetched over HTTP while
//! the run lane is full of long runs, while its gate closes for failing
//! renewals (the lane still full), and after a create refused with its job
//! id; the publish lane paused by a cap of 0 all along.

use crate::support::*;
use serde_json::Value;
use std::time::Duration;
use tcab_admitter::{Deps, run};
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_shared::Lane;
use tcab_shared::runtime::CancellationToken;

/// A loopback address nothing listens on now.
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").to_string()
}

async fn get(addr: &str, path: &str) -> Option<String> {
    let answer = reqwest::get(format!("http://{addr}{path}")).await.ok()?;
    if answer.status() != 200 {
        return None;
    }
    answer.text().await.ok()
}

/// The `/status` document once `check` holds for it.
async fn status_when(addr: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    within(what, async {
        loop {
            if let Some(text) = get(addr, "/status").await
                && let Ok(doc) = serde_json::from_str::<Value>(&text)
                && check(&doc)
            {
                return doc;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// The `/metrics` text once it has every line of `lines`.
async fn metrics_with(addr: &str, lines: &[&str]) -> String {
    within("the metrics lines", async {
        loop {
            if let Some(text) = get(addr, "/metrics").await
                && lines.iter().all(|l| text.lines().any(|t| t == *l))
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn status_and_metrics_say_why_each_lane_holds() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 1);
    let addr = free_addr();
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT", "0"),
        ("TCAB_DISPATCHER_METRICS_ADDR", &addr),
    ]);
    let deps = Deps {
        kube: rig.kube.client(),
        namespace: fake_kube::NAMESPACE.into(),
        backend: backend_client(&rig.backend.url),
    };
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(run(config, deps, shutdown.clone()));

    // The run lane admits one long run and is full; the publish lane is
    // paused and claims nothing.
    let full = status_when(&addr, "the run lane held full", |doc| {
        doc["lanes"]["run"]["hold_reason"] == "lane_full"
    })
    .await;
    let run_lane = &full["lanes"]["run"];
    assert_eq!(full["binary"], "tcab-admitter");
    assert_eq!(full["ready"], true);
    assert_eq!(run_lane["state"], "held");
    assert_eq!(run_lane["detail"], "lane full (1/1)");
    assert_eq!(
        (run_lane["in_flight"].clone(), run_lane["cap"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(run_lane["gate"]["open"], true, "{full}");
    assert!(run_lane["gate"]["reason"].is_null());
    assert_eq!(run_lane["last_admitted"]["job_id"], "run-0");
    assert!(run_lane["last_error"].is_null());
    let publish = &full["lanes"]["publish"];
    assert_eq!(publish["hold_reason"], "paused", "{full}");
    assert_eq!(publish["cap"], 0);
    metrics_with(
        &addr,
        &[
            r#"tcab_dispatcher_lane_hold{lane="run",reason="lane_full"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="none"} 0"#,
            r#"tcab_dispatcher_gate_open{lane="run"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="publish",reason="paused"} 1"#,
        ],
    )
    .await;
    assert_eq!(rig.backend.requests(Lane::Publish), 0);

    // Renewals fail while the lane is full: the gate reads closed with the
    // lease-keeper's reason, and the lane still holds for being full.
    rig.gate.set_verdict(
        Lane::Run,
        GateVerdict::closed(
            GateReason::RenewalFailing,
            "the latest run lease renewal failed: POST /jobs/leases answered 500",
        ),
    );
    let closed = status_when(&addr, "the closed gate read while full", |doc| {
        doc["lanes"]["run"]["gate"]["reason"] == "renewal_failing"
    })
    .await;
    let run_lane = &closed["lanes"]["run"];
    assert_eq!(run_lane["hold_reason"], "lane_full");
    assert_eq!(run_lane["gate"]["open"], false);
    assert!(
        run_lane["gate"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("answered 500")),
        "{closed}"
    );
    metrics_with(
        &addr,
        &[
            r#"tcab_dispatcher_gate_open{lane="run"} 0"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="renewal_failing"} 1"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="never_renewed"} 0"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="lane_full"} 1"#,
        ],
    )
    .await;

    // The gate opens, the run ends, and the next create is refused: the
    // last error names the job, the step and the reason, and the lane
    // backs off.
    rig.gate.set_verdict(Lane::Run, GateVerdict::Open);
    rig.kube.refuse(
        Lane::Run,
        Some((403, "Forbidden", "jobs.batch is forbidden: test")),
    );
    let live = rig.kube.live(Lane::Run);
    rig.kube.finish(&live[0]);
    let refused = status_when(&addr, "the refused create as the last error", |doc| {
        doc["lanes"]["run"]["last_error"]["job_id"] == "run-1"
    })
    .await;
    let error = &refused["lanes"]["run"]["last_error"];
    assert_eq!(error["step"], "create", "{refused}");
    assert_eq!(error["reason"], "forbidden");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains("403")),
        "{refused}"
    );
    assert!(error["at"].is_string() && error["seconds_ago"].is_number());
    status_when(&addr, "the lane backing off", |doc| {
        doc["lanes"]["run"]["hold_reason"] == "backing_off"
            && doc["lanes"]["run"]["backoff_remaining_seconds"].is_number()
    })
    .await;

    let text = get(&addr, "/status").await.expect("the status");
    assert!(!text.contains(backend::SERVICE_TOKEN), "{text}");
    shutdown.cancel();
    within("run() returns after shutdown", handle)
        .await
        .expect("task")
        .expect("run() is Ok");
}
