//! Selector watches: an object entering and leaving a label or field
//! selector. Upstream's watch cache (`storage/cacher/cache_watcher.go`
//! `convertToWatchEvent`) sends ADDED when it starts matching, MODIFIED while
//! it matches, and DELETED with its *previous* content at the change's
//! resourceVersion when it stops; the same live and in a replay from an
//! older resourceVersion.

use crate::common::{bound_nowhere, pod_path};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::{Cluster, Outcome, Watch, differential};

/// The writes of a probe, by the resourceVersion each answered, so an
/// event can be placed: `at <step>` when it carries that step's version,
/// else `before <step>` (the first step with a later one) or `after all`.
#[derive(Default)]
struct Steps(Vec<(String, u64)>);

impl Steps {
    fn note(&mut self, step: &str, rv: &str) {
        self.0.push((step.to_string(), rv.parse().unwrap_or(0)));
    }

    fn place(&self, rv: &str) -> String {
        let rv: u64 = rv.parse().unwrap_or(0);
        if let Some((s, _)) = self.0.iter().find(|(_, r)| *r == rv) {
            return format!("at {s}");
        }
        match self.0.iter().find(|(_, r)| *r > rv) {
            Some((s, _)) => format!("before {s}"),
            None => "after all".into(),
        }
    }
}

/// `TYPE <what the selector reads> <where>` for each event.
fn events(evs: &[Value], steps: &Steps, shown: impl Fn(&Value) -> String) -> Vec<String> {
    evs.iter()
        .map(|e| {
            let o = &e["object"];
            let deleting = if o["metadata"]["deletionTimestamp"].is_string() {
                " deleting"
            } else {
                ""
            };
            format!(
                "{} {}{deleting} {}",
                e["type"].as_str().unwrap_or(""),
                shown(o),
                steps.place(o["metadata"]["resourceVersion"].as_str().unwrap_or(""))
            )
        })
        .collect()
}

async fn list_rv(c: &Cluster) -> Result<String> {
    let a = c.get(&c.pods()).await?;
    Ok(a.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string())
}

/// Every event until the stream has been quiet for 2 s (real time).
async fn collect(w: &mut Watch) -> Result<Vec<Value>> {
    w.drain(Duration::from_secs(2)).await
}

fn label(o: &Value) -> String {
    format!(
        "app={}",
        o["metadata"]["labels"]["app"].as_str().unwrap_or("-")
    )
}

fn phase(o: &Value) -> String {
    format!("phase={}", o["status"]["phase"].as_str().unwrap_or("-"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_transitions() {
    differential(
        "watches::label_selector_transitions",
        async |c: &Cluster, o: &mut Outcome| {
            let rv0 = list_rv(c).await?;
            let sel = "labelSelector=app%3Din";
            let mut live = c
                .watch(&format!("{}?{sel}&resourceVersion={rv0}", c.pods()))
                .await?;
            let path = pod_path(c, "w");
            let mut steps = Steps::default();
            let made = c
                .create(&c.pods(), &bound_nowhere("w", json!({"app": "out"})))
                .await?;
            steps.note(
                "create(out)",
                made["metadata"]["resourceVersion"].as_str().unwrap_or(""),
            );
            for (step, patch) in [
                ("label(in)", json!({"metadata": {"labels": {"app": "in"}}})),
                (
                    "annotate",
                    json!({"metadata": {"annotations": {"note": "x"}}}),
                ),
                (
                    "label(out)",
                    json!({"metadata": {"labels": {"app": "out"}}}),
                ),
                (
                    "annotate(out)",
                    json!({"metadata": {"annotations": {"note": "y"}}}),
                ),
                (
                    "label(in) again",
                    json!({"metadata": {"labels": {"app": "in"}}}),
                ),
            ] {
                let a = c.merge_patch(&path, &patch).await?;
                steps.note(step, &a.rv());
            }
            let a = c
                .delete(&path, Some(&json!({"gracePeriodSeconds": 0})))
                .await?;
            steps.note("delete", &a.rv());
            let seen = collect(&mut live).await?;
            o.put("live", events(&seen, &steps, label));
            let mut replay = c
                .watch(&format!("{}?{sel}&resourceVersion={rv0}", c.pods()))
                .await?;
            let again = collect(&mut replay).await?;
            o.put("replay", events(&again, &steps, label));
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selector_transitions() {
    differential(
        "watches::field_selector_transitions",
        async |c: &Cluster, o: &mut Outcome| {
            let rv0 = list_rv(c).await?;
            let sel = "fieldSelector=status.phase%3DRunning";
            let mut live = c
                .watch(&format!("{}?{sel}&resourceVersion={rv0}", c.pods()))
                .await?;
            let path = pod_path(c, "w");
            let mut steps = Steps::default();
            let made = c.create(&c.pods(), &bound_nowhere("w", json!({}))).await?;
            steps.note(
                "create",
                made["metadata"]["resourceVersion"].as_str().unwrap_or(""),
            );
            for (step, patch) in [
                ("Running", json!({"status": {"phase": "Running"}})),
                (
                    "annotate",
                    json!({"metadata": {"annotations": {"note": "x"}}}),
                ),
                ("Succeeded", json!({"status": {"phase": "Succeeded"}})),
            ] {
                let sub = if patch.get("status").is_some() {
                    "/status"
                } else {
                    ""
                };
                let a = c.merge_patch(&format!("{path}{sub}"), &patch).await?;
                if a.code != 200 {
                    o.answer(step, a.code, &a.body);
                }
                steps.note(step, &a.rv());
            }
            let a = c
                .delete(&path, Some(&json!({"gracePeriodSeconds": 0})))
                .await?;
            steps.note("delete", &a.rv());
            let seen = collect(&mut live).await?;
            o.put("live", events(&seen, &steps, phase));
            let mut replay = c
                .watch(&format!("{}?{sel}&resourceVersion={rv0}", c.pods()))
                .await?;
            let again = collect(&mut replay).await?;
            o.put("replay", events(&again, &steps, phase));
            Ok(())
        },
    )
    .await
}
