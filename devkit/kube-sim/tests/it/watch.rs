//! Watches with selectors as the API server's watch cache serves them: an
//! object that starts matching is ADDED, one that stops matching is
//! DELETED (its previous content, at the change's resourceVersion), live
//! and in a replay from a resourceVersion; initial events, bookmarks and
//! `timeoutSeconds` with selectors.

use crate::common::*;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn relabel(c: &reqwest::Client, s: &tcab_kube_sim::SimHandle, name: &str, k: &str) -> u64 {
    let r = c
        .patch(format!("{}/{name}", jobs_url(s)))
        .header("content-type", "application/merge-patch+json")
        .body(json!({"metadata": {"labels": {"k": k}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    rv_of(&r.json::<Value>().await.unwrap())
}

/// `TYPE name k=<label> @rv` for each change event.
fn summary(ev: &Value) -> String {
    format!(
        "{} {} k={} @{}",
        ev["type"].as_str().unwrap(),
        ev["object"]["metadata"]["name"].as_str().unwrap(),
        ev["object"]["metadata"]["labels"]["k"]
            .as_str()
            .unwrap_or("-"),
        rv_of(&ev["object"])
    )
}

#[tokio::test]
async fn a_label_selector_watch_sees_objects_enter_and_leave_live_and_in_replay() {
    let s = api_sim().await;
    let c = client();
    let rv0 = rv_of(&get(&c, &jobs_url(&s)).await.1);
    let url = |from: u64| {
        format!(
            "{}?watch=true&labelSelector=k%3Dx&resourceVersion={from}",
            jobs_url(&s)
        )
    };
    let mut live = WatchReader::open(&c, &url(rv0)).await;
    // a is created outside the selector, enters, changes inside, leaves,
    // then is deleted outside; b is created inside and deleted inside.
    let (code, a) = post(&c, &jobs_url(&s), &plain_job("a", json!({"k": "y"}), 1.0)).await;
    assert_eq!(code, 201);
    let rv_a = rv_of(&a);
    let enters = relabel(&c, &s, "a", "x").await;
    let r = c
        .patch(format!("{}/a", jobs_url(&s)))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"metadata":{"annotations":{"note":"still x"}}}"#)
        .send()
        .await
        .unwrap();
    let changes = rv_of(&r.json::<Value>().await.unwrap());
    let leaves = relabel(&c, &s, "a", "z").await;
    // Background: removed at once (a batch/v1 Job's default, Orphan, marks
    // it first), answered with a Status that carries no resourceVersion
    let background = || Some(json!({"propagationPolicy": "Background"}));
    assert_eq!(
        delete(&c, &format!("{}/a", jobs_url(&s)), background())
            .await
            .0,
        200
    );
    let (_, b) = post(&c, &jobs_url(&s), &plain_job("b", json!({"k": "x"}), 1.0)).await;
    let (code, gone) = delete(&c, &format!("{}/b", jobs_url(&s)), background()).await;
    assert_eq!((code, gone["kind"].as_str()), (200, Some("Status")));
    let want = vec![
        format!("ADDED a k=x @{enters}"),
        format!("MODIFIED a k=x @{changes}"),
        // the previous content (k=x) at the change's resourceVersion
        format!("DELETED a k=x @{leaves}"),
        format!("ADDED b k=x @{}", rv_of(&b)),
        "DELETED b k=x".to_string(),
    ];
    // b's removal: at a resourceVersion after its creation
    let strip_b = |got: &mut Vec<String>| {
        let (e, rv) = got[4].rsplit_once(" @").unwrap();
        assert!(rv.parse::<u64>().unwrap() > rv_of(&b), "{}", got[4]);
        got[4] = e.to_string();
    };
    let mut got = Vec::new();
    while got.len() < want.len() {
        got.push(summary(&live.next_change(SECS).await.unwrap()));
    }
    strip_b(&mut got);
    assert_eq!(got, want);
    assert!(rv_a < enters);
    // the same from the history, resumed before anything happened
    let mut replay = WatchReader::open(&c, &url(rv0)).await;
    let mut again = Vec::new();
    while again.len() < want.len() {
        again.push(summary(&replay.next_change(SECS).await.unwrap()));
    }
    strip_b(&mut again);
    assert_eq!(again, want);
    // and from the middle: a resume after the ADDED still sees it leave
    let mut middle = WatchReader::open(&c, &url(changes)).await;
    assert_eq!(
        summary(&middle.next_change(SECS).await.unwrap()),
        format!("DELETED a k=x @{leaves}")
    );
}

#[tokio::test]
async fn a_field_selector_watch_sees_a_pod_start_matching_when_it_runs() {
    let s = api_sim().await;
    let c = client();
    let rv0 = rv_of(&get(&c, &pods_url(&s)).await.1);
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&fieldSelector=status.phase%3DRunning&resourceVersion={rv0}",
            pods_url(&s)
        ),
    )
    .await;
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    let (code, created) = post(&c, &pods_url(&s), &pod).await;
    assert_eq!(code, 201);
    assert_ne!(created["status"]["phase"], "Running");
    // created Pending (not sent), then Running: ADDED at that change
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["status"]["phase"].as_str()
        ),
        (Some("ADDED"), Some("Running"))
    );
    assert!(rv_of(&ev["object"]) > rv_of(&created));
    let (code, _) = delete(
        &c,
        &format!("{}/p", pods_url(&s)),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .await;
    assert_eq!(code, 200);
    // As upstream's registry does, the pod is first written with its
    // deletionTimestamp (MODIFIED, still Running), then removed.
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(ev["type"], "MODIFIED");
    assert!(ev["object"]["metadata"]["deletionTimestamp"].is_string());
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("p"))
    );
}

#[tokio::test]
async fn kube_rs_watcher_with_a_selector_deletes_an_object_that_stops_matching() {
    let s = api_sim().await;
    let c = client();
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = jobs.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(w, watcher::Config::default().labels("k=x"));
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let line = match ev {
                Ok(watcher::Event::Apply(j)) => format!("apply {}", j.metadata.name.unwrap()),
                Ok(watcher::Event::Delete(j)) => format!(
                    "delete {} k={}",
                    j.metadata.name.unwrap(),
                    j.metadata.labels.unwrap_or_default()["k"]
                ),
                Ok(watcher::Event::InitDone) => "init done".into(),
                Ok(_) => continue,
                Err(e) => format!("error {e}"),
            };
            let _ = tx.send(line);
        }
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(SECS, rx.recv())
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(next(&mut rx).await, "init done");
    post(&c, &jobs_url(&s), &plain_job("a", json!({"k": "y"}), 1.0)).await;
    relabel(&c, &s, "a", "x").await;
    assert_eq!(next(&mut rx).await, "apply a");
    jobs.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"k": "gone"}}})),
    )
    .await
    .unwrap();
    // kube-rs drops it from its view: the object it gets is the last one
    // that matched
    assert_eq!(next(&mut rx).await, "delete a k=x");
    task.abort();
}

#[tokio::test]
async fn initial_events_and_bookmarks_with_a_selector_and_timeout_seconds_bounds_every_watch() {
    let s = api_sim().await;
    let c = client();
    post(&c, &jobs_url(&s), &plain_job("in", json!({"k": "x"}), 1.0)).await;
    post(&c, &jobs_url(&s), &plain_job("out", json!({"k": "y"}), 1.0)).await;
    // streaming list: only the matching object, then the end bookmark
    let started = Instant::now();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&labelSelector=k%3Dx&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
            jobs_url(&s)
        ),
    )
    .await;
    let ev = w.next(SECS).await.unwrap();
    assert_eq!(summary(&ev)[..14], *"ADDED in k=x @");
    let ev = w.next(SECS).await.unwrap();
    assert_eq!(ev["type"], "BOOKMARK");
    assert_eq!(
        ev["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // bookmarks go on, then timeoutSeconds ends the stream
    let mut rest = Vec::new();
    while let Some(ev) = w.next(SECS).await {
        rest.push(ev["type"].as_str().unwrap().to_string());
    }
    assert!(
        !rest.is_empty() && rest.iter().all(|t| t == "BOOKMARK"),
        "{rest:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < SECS,
        "{took:?}"
    );
    // a replay from the start ends at its deadline too
    let started = Instant::now();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&labelSelector=k%3Dx&resourceVersion=1&timeoutSeconds=1",
            jobs_url(&s)
        ),
    )
    .await;
    assert_eq!(w.next(SECS).await.unwrap()["type"], "ADDED");
    assert!(w.next(SECS).await.is_none());
    assert!(started.elapsed() >= Duration::from_millis(900));
    // timeoutSeconds=0 means the default (the stream stays open), and a
    // timeout that is not a number is refused
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&timeoutSeconds=0&resourceVersion={}",
            jobs_url(&s),
            rv_of(&get(&c, &jobs_url(&s)).await.1)
        ),
    )
    .await;
    post(&c, &jobs_url(&s), &plain_job("later", json!({}), 1.0)).await;
    assert_eq!(
        w.next_change(SECS).await.unwrap()["object"]["metadata"]["name"],
        "later"
    );
    let (code, st) = get(
        &c,
        &format!("{}?watch=true&timeoutSeconds=soon", jobs_url(&s)),
    )
    .await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));
}
