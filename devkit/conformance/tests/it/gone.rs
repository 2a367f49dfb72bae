//! 410 Gone: a list or a watch from a resourceVersion the cluster no longer
//! has. The real side is a control plane of the probe's own without the
//! watch cache (`--watch-cache=false`), etcd compacting every 2 s, so lists
//! and watches reach etcd and meet its compaction. kube-sim forgets its
//! history with `/admin/watch/compact`.
//!
//! A watch older than the watch cache's history (the ERROR event with
//! "too old resource version: X (Y)", `storage/cacher/watch_cache.go`) has
//! no probe: a fresh control plane's watch cache starts from the first
//! revision and keeps every event of a small cluster, so no resourceVersion
//! is older than it; kube-sim's wording of it is checked by its own tests.

use crate::common::{bound_nowhere, pod_path};
use anyhow::Result;
use regex::Regex;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::Side;
use tcab_conformance::run::differential_on;
use tcab_conformance::{Cluster, Outcome};
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
