//! `events.k8s.io/v1` Events, as the dispatcher writes them: a valid create
//! (the answer, and the Event as the core v1 API lists it by its
//! `involvedObject`, as `kubectl describe` finds it), and creates missing
//! what upstream requires or over its limits (the 422's causes), compared
//! field by field (`ValidateEventCreate` in
//! `pkg/apis/core/validation/events.go`, the conversion in
//! `pkg/apis/events/v1`).

use anyhow::Result;
use serde_json::{Value, json};
use tcab_conformance::{Cluster, Outcome, differential};

fn events_v1(c: &Cluster) -> String {
    c.pods()
        .replace("/api/v1/", "/apis/events.k8s.io/v1/")
        .replace("/pods", "/events")
}

fn core_events(c: &Cluster) -> String {
    c.pods().replace("/pods", "/events")
}

/// An Event about the Job `job` in `c`'s namespace, as the dispatcher's
/// lease-keeper writes one.
fn event(c: &Cluster, name: &str, job: &str) -> Value {
    let ns = c.pods().split('/').nth(4).unwrap_or_default().to_owned();
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-12-07T10:00:00.123456Z",
        "action": "ReportDeath", "reason": "ReportedDead", "type": "Warning",
        "note": "driver of job 7 reported dead to the backend: container driver OOMKilled",
        "reportingController": "tcab.dev/lease-keeper", "reportingInstance": "tcab-dispatcher-abc",
        "regarding": {"apiVersion": "batch/v1", "kind": "Job", "namespace": ns, "name": job,
            "uid": "0b7c1f2e-1111-4222-8333-944455556666"},
    })
}

/// The fields of an Event a reader sees (the core names), one line each.
fn record_event(o: &mut Outcome, prefix: &str, e: &Value) {
    for key in [
        "reason",
        "type",
        "action",
        "message",
        "reportingComponent",
        "reportingInstance",
        "count",
    ] {
        o.put(format!("{prefix}.{key}"), e[key].clone());
    }
    let about = &e["involvedObject"];
    o.put(
        format!("{prefix}.involvedObject"),
        json!([about["apiVersion"], about["kind"], about["name"]]),
    );
    o.put(format!("{prefix}.source"), e["source"].clone());
    o.put(format!("{prefix}.eventTime set"), !e["eventTime"].is_null());
    o.put(
        format!("{prefix}.firstTimestamp set"),
        !e["firstTimestamp"].is_null(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_created_is_listed_by_its_involved_object() {
    differential(
        "events::created_and_listed",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let a = c
                .post(
                    &events_v1(c),
                    &event(c, "tcab-driver-7-a.1", "tcab-driver-7-a"),
                )
                .await?;
            o.put("create.code", a.code);
            for key in ["reason", "note", "reportingController", "type"] {
                o.put(format!("create.{key}"), a.body[key].clone());
            }
            let listed = c
                .get(&format!(
                    "{}?fieldSelector=involvedObject.name%3Dtcab-driver-7-a",
                    core_events(c)
                ))
                .await?;
            let items = listed.body["items"].as_array().cloned().unwrap_or_default();
            o.put("core list.count", items.len());
            if let Some(e) = items.first() {
                record_event(o, "core", e);
            }
            let v1 = c
                .get(&format!("{}/tcab-driver-7-a.1", events_v1(c)))
                .await?;
            o.put("v1 get.code", v1.code);
            o.put("v1 get.note", v1.body["note"].clone());
            o.put(
                "v1 get.regarding.name",
                v1.body["regarding"]["name"].clone(),
            );
            Ok(())
        },
    )
    .await
}

async fn bad_event(probe: &str, change: impl Fn(&mut Value)) {
    let probe = format!("events::{probe}");
    differential(&probe, async |c: &Cluster, o: &mut Outcome| -> Result<()> {
        let mut e = event(c, "bad.1", "tcab-driver-7-b");
        change(&mut e);
        let a = c.post(&events_v1(c), &e).await?;
        o.answer("create", a.code, &a.body);
        let stored = c.get(&format!("{}/bad.1", core_events(c))).await?;
        o.put("stored", stored.code == 200);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_missing_what_upstream_requires() {
    bad_event("missing_required", |e| {
        let m = e.as_object_mut().expect("an object");
        for key in [
            "action",
            "reason",
            "reportingController",
            "reportingInstance",
        ] {
            m.remove(key);
        }
        m.insert("type".into(), json!("Info"));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_without_an_event_time() {
    bad_event("no_event_time", |e| {
        e.as_object_mut().expect("an object").remove("eventTime");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_limits() {
    bad_event("over_the_limits", |e| {
        e["reason"] = json!("R".repeat(129));
        e["note"] = json!("n".repeat(1025));
        e["reportingInstance"] = json!("i".repeat(129));
        e["deprecatedCount"] = json!(2);
    })
    .await
}
