//! Paginated lists, as the dispatcher's Job watch lists (`limit`, then
//! `continue` until none; kube-rs's watcher then watches from the last
//! page's resourceVersion): every page of one list is read at the first
//! page's resourceVersion, a consistent snapshot, whatever is written
//! between the pages; `remainingItemCount` only without a selector
//! (`staging/.../storage/continue.go` `PrepareContinueToken`,
//! `storage/etcd3/store.go` `GetList`, `storage/cacher` serving continued
//! lists from its snapshots).

use crate::common::{pod, pod_path};
use anyhow::Result;
use serde_json::{Value, json};
use tcab_conformance::{Cluster, Outcome, differential};

/// One page in short: the items (`name:label`), whether a continue token
/// came, `remainingItemCount`, and whether the list's resourceVersion is
/// the first page's.
fn page(o: &mut Outcome, key: &str, body: &Value, first_rv: &str) -> Option<String> {
    let items: Vec<String> = body["items"]
        .as_array()
        .map(|is| {
            is.iter()
                .map(|i| {
                    format!(
                        "{}:{}",
                        i["metadata"]["name"].as_str().unwrap_or(""),
                        i["metadata"]["labels"]["set"].as_str().unwrap_or("-")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let md = &body["metadata"];
    let token = md["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    o.put(
        key,
        json!({
            "items": items,
            "continue": token.is_some(),
            "remainingItemCount": md["remainingItemCount"],
            "same resourceVersion": first_rv.is_empty() || md["resourceVersion"] == first_rv,
        }),
    );
    token
}

/// A pod no node takes (its scheduler status aside, nothing writes it).
fn pending(name: &str) -> Value {
    let mut p = pod(name, None, 600);
    p["metadata"]["labels"] = json!({"set": "a"});
    p
}

/// Five pods listed two at a time; between the first page and the rest a
/// pod is created after the cursor and one before it, one not yet listed is
/// deleted and one relabelled. Then the same list with a label selector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages() {
    differential(
        "lists::pages",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            for n in ["p1", "p2", "p3", "p4", "p5"] {
                c.create(&c.pods(), &pending(n)).await?;
            }
            let first = c.get(&format!("{}?limit=2", c.pods())).await?;
            o.put("page 1.code", first.code);
            let rv = first.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut token = page(o, "page 1", &first.body, "");
            // between the pages
            c.create(&c.pods(), &pending("p0")).await?;
            c.create(&c.pods(), &pending("p9")).await?;
            let a = c
                .delete(&pod_path(c, "p3"), Some(&json!({"gracePeriodSeconds": 0})))
                .await?;
            o.put("delete p3", a.code);
            let a = c
                .merge_patch(
                    &pod_path(c, "p4"),
                    &json!({"metadata": {"labels": {"set": "b"}}}),
                )
                .await?;
            o.put("relabel p4", a.code);
            let mut n = 2;
            while let Some(t) = token.take() {
                let a = c.get(&format!("{}?limit=2&continue={t}", c.pods())).await?;
                o.put(format!("page {n}.code"), a.code);
                token = page(o, &format!("page {n}"), &a.body, &rv);
                n += 1;
                if n > 6 {
                    break;
                }
            }
            // a fresh list sees the present
            let now = c.get(&c.pods()).await?;
            page(o, "fresh list", &now.body, "");
            // with a selector: no remainingItemCount
            let mut token = None;
            let mut n = 1;
            loop {
                let cont = token
                    .as_ref()
                    .map(|t| format!("&continue={t}"))
                    .unwrap_or_default();
                let a = c
                    .get(&format!("{}?limit=2&labelSelector=set%3Da{cont}", c.pods()))
                    .await?;
                o.put(format!("selected page {n}.code"), a.code);
                token = page(o, &format!("selected page {n}"), &a.body, "");
                n += 1;
                if token.is_none() || n > 6 {
                    break;
                }
            }
            Ok(())
        },
    )
    .await
}
