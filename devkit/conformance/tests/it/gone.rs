//! 410 Gone: a list or a watch from a resourceVersion the cluster no longer
//! has. With upstream's watch cache a watch older than the cache's history
//! gets an `ERROR` event carrying a 410 `Expired` Status ("too old resource
//! version", `storage/cacher/watch_cache.go`); without it (a control plane
//! of the probe's own, `--watch-cache=false`, compacting every 2 s) lists
//! and watches reach etcd and meet its compaction. kube-sim has one answer
//! for both, the watch cache's; its history is forgotten with
//! `/admin/watch/compact`.

use crate::common::{bound_nowhere, pod_path};
use anyhow::Result;
use regex::Regex;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::Side;
use tcab_conformance::run::differential_on;
use tcab_conformance::{Cluster, Outcome, differential};
use tcab_real_cluster::{Settings, Timings};

/// The numbers of a message masked (they are resourceVersions here).
fn masked(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(m) = s["message"].as_str() {
        let digits = Regex::new(r"\d+").unwrap();
        s["message"] = json!(digits.replace_all(m, "N").into_owned());
    }
    s
}

/// kube-sim forgets its history; the real cluster compacted on its own.
async fn compact(c: &Cluster) -> Result<()> {
    if let Some(h) = c.sim_handle() {
        h.admin().compact().await?;
    }
    Ok(())
}

/// The first event of a watch from `rv`.
async fn watch_from(c: &Cluster, o: &mut Outcome, rv: &str) -> Result<()> {
    let mut w = c
        .watch(&format!("{}?resourceVersion={rv}", c.pods()))
        .await?;
    o.put("watch.code", w.code);
    let first = w.next(Duration::from_secs(10)).await?;
    let first = first.unwrap_or(Value::Null);
    o.put("watch.first event", first["type"].clone());
    o.answer(
        "watch.first event",
        first["object"]["code"].as_u64().unwrap_or(0) as u16,
        &masked(&first["object"]),
    );
    let next = w.next(Duration::from_secs(2)).await?;
    o.put(
        "watch.then",
        if next.is_none() {
            "ended"
        } else {
            "more events"
        },
    );
    Ok(())
}

/// A watch from a resourceVersion older than the history: on the real side
/// the first resourceVersion there is ("1" is older than any watch cache's
/// start), on kube-sim one whose history was compacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_older_than_the_cache() {
    differential(
        "gone::watch_older_than_the_cache",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &bound_nowhere("p", json!({}))).await?;
            compact(c).await?;
            watch_from(c, o, "1").await
        },
    )
    .await
}

/// The settings of the probe's own control plane: no watch cache, etcd
/// compacted every 2 s, no nodes.
fn uncached() -> Settings {
    Settings {
        watch_cache: false,
        timings: Timings {
            etcd_compaction_interval: Duration::from_secs(2),
            ..Timings::default()
        },
        audit: false,
        ..Settings::default()
    }
}

/// A list at an exact compacted resourceVersion, then a watch from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_watch_from_compacted() {
    differential_on(
        "gone::list_and_watch_from_compacted",
        async |ns: String| Cluster::real_own(&ns, uncached()).await,
        async |c: &Cluster, o: &mut Outcome| {
            let made = c.create(&c.pods(), &bound_nowhere("p", json!({}))).await?;
            let rv1 = made["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            for i in 0..3 {
                c.merge_patch(
                    &pod_path(c, "p"),
                    &json!({"metadata": {"annotations": {"n": i.to_string()}}}),
                )
                .await?;
            }
            compact(c).await?;
            let url = format!(
                "{}?resourceVersion={rv1}&resourceVersionMatch=Exact",
                c.pods()
            );
            let limit = if c.side == Side::Sim {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(60)
            };
            let a = c
                .wait_for(limit, async || {
                    let a = c.get(&url).await?;
                    Ok((a.code == 410).then_some(a))
                })
                .await?;
            match a {
                Some(a) => o.answer("list", a.code, &masked(&a.body)),
                None => {
                    let a = c.get(&url).await?;
                    o.answer("list", a.code, &masked(&a.body));
                }
            }
            watch_from(c, o, &rv1).await
        },
    )
    .await
}
