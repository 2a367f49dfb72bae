//! HTTP tests of every API behaviour.

use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tcab_kube_sim::{ApiFault, ApiFaultMode, Rbac};

#[tokio::test]
async fn create_fills_server_fields_and_errors_are_statuses() {
    let s = api_sim().await;
    let c = client();
    let mut job = plain_job("", json!({"a": "1"}), 1.0);
    job["metadata"] = json!({"generateName": "gen-", "labels": {"a": "1"}});
    let (code, created) = post(&c, &jobs_url(&s), &job).await;
    assert_eq!(code, 201, "{created}");
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert!(rv_of(&created) > 0);
    assert_eq!(
        created["spec"]["template"]["metadata"]["labels"]["job-name"],
        name
    );

    let (code, _) = post(&c, &jobs_url(&s), &plain_job("fixed", json!({}), 1.0)).await;
    assert_eq!(code, 201);
    let (code, st) = post(&c, &jobs_url(&s), &plain_job("fixed", json!({}), 1.0)).await;
    assert_eq!(
        (code, st["kind"].as_str(), st["reason"].as_str()),
        (409, Some("Status"), Some("AlreadyExists"))
    );
    assert_eq!(st["details"]["name"], "fixed");

    let mut bad = plain_job("bad", json!({}), 1.0);
    bad["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let (code, st) = post(&c, &jobs_url(&s), &bad).await;
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        st["details"]["causes"][0]["field"],
        "spec.template.spec.containers[0].image"
    );
    let mut bad = plain_job("bad", json!({}), 1.0);
    bad["spec"]["template"]["spec"]["containers"] = json!([]);
    assert_eq!(post(&c, &jobs_url(&s), &bad).await.0, 422);
    assert_eq!(
        post(&c, &jobs_url(&s), &json!({"metadata": {"name": "x"}}))
            .await
            .0,
        422
    );
    let (code, st) = post(
        &c,
        &pods_url(&s),
        &json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
    )
    .await;
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")));

    let (code, st) = get(&c, &format!("{}/missing", jobs_url(&s))).await;
    assert_eq!(
        (code, st["reason"].as_str(), st["code"].as_u64()),
        (404, Some("NotFound"), Some(404))
    );
    assert_eq!(st["message"], "jobs.batch \"missing\" not found");
    let (code, _) = get(
        &c,
        &format!("{}/apis/apps/v1/namespaces/{NS}/deployments", s.url()),
    )
    .await;
    assert_eq!(code, 404);
    let (code, got) = get(&c, &format!("{}/fixed", jobs_url(&s))).await;
    assert_eq!(
        (code, got["metadata"]["name"].as_str()),
        (200, Some("fixed"))
    );
    let r = c.post(jobs_url(&s)).body("{not json").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test]
async fn list_with_label_and_field_selectors_and_pages() {
    let s = api_sim().await;
    let c = client();
    for (n, labels) in [
        (
            "r1",
            json!({"tcab.dev/job-kind": "run", "app.kubernetes.io/managed-by": "tcab"}),
        ),
        (
            "r2",
            json!({"tcab.dev/job-kind": "run", "app.kubernetes.io/managed-by": "other"}),
        ),
        (
            "p1",
            json!({"tcab.dev/job-kind": "publish", "app.kubernetes.io/managed-by": "tcab"}),
        ),
        ("n1", json!({})),
    ] {
        assert_eq!(
            post(&c, &jobs_url(&s), &plain_job(n, labels, 1.0)).await.0,
            201
        );
    }
    let q = |sel: &str| format!("{}?labelSelector={}", jobs_url(&s), urlencode(sel));
    let cases: [(&str, &[&str]); 9] = [
        ("tcab.dev/job-kind=run", &["r1", "r2"]),
        ("tcab.dev/job-kind==run", &["r1", "r2"]),
        ("tcab.dev/job-kind!=run", &["n1", "p1"]),
        ("tcab.dev/job-kind in (run,publish)", &["p1", "r1", "r2"]),
        ("tcab.dev/job-kind notin (run)", &["n1", "p1"]),
        ("tcab.dev/job-kind", &["p1", "r1", "r2"]),
        ("!tcab.dev/job-kind", &["n1"]),
        (
            "app.kubernetes.io/managed-by=tcab,tcab.dev/job-kind=run",
            &["r1"],
        ),
        ("", &["n1", "p1", "r1", "r2"]),
    ];
    for (sel, want) in cases {
        let (code, list) = get(&c, &q(sel)).await;
        assert_eq!(code, 200);
        assert_eq!(names(&list), want.to_vec(), "selector {sel:?}");
        assert_eq!(list["kind"], "JobList");
    }
    let (code, st) = get(&c, &q("a in (b")).await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));
    let (_, list) = get(
        &c,
        &format!("{}?fieldSelector=metadata.name%3Dp1", jobs_url(&s)),
    )
    .await;
    assert_eq!(names(&list), vec!["p1"]);
    let (_, list) = get(
        &c,
        &format!("{}?fieldSelector=metadata.name!%3Dp1", jobs_url(&s)),
    )
    .await;
    assert_eq!(names(&list).len(), 3);
    let (code, _) = get(&c, &format!("{}?fieldSelector=spec.foo%3D1", jobs_url(&s))).await;
    assert_eq!(code, 400);
    // the list's resourceVersion covers every item
    let (_, list) = get(&c, &jobs_url(&s)).await;
    let list_rv = rv_of(&list);
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| rv_of(i) <= list_rv)
    );
    // all-namespaces list
    let (_, all) = get(&c, &format!("{}/apis/batch/v1/jobs", s.url())).await;
    assert_eq!(names(&all).len(), 4);
    // pages of 3, then the rest, at the first page's resourceVersion
    let (_, p1) = get(&c, &format!("{}?limit=3", jobs_url(&s))).await;
    assert_eq!(p1["items"].as_array().unwrap().len(), 3);
    assert_eq!(p1["metadata"]["remainingItemCount"], 1);
    let cont = p1["metadata"]["continue"].as_str().unwrap();
    let (_, p2) = get(&c, &format!("{}?limit=3&continue={cont}", jobs_url(&s))).await;
    assert_eq!(p2["items"].as_array().unwrap().len(), 1);
    assert!(p2["metadata"]["continue"].is_null());
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    // a selected list pages through what it selects, one at a time, and
    // (as the API server) says nothing of how many remain
    let selected = format!("{}?labelSelector=tcab.dev%2Fjob-kind&limit=1", jobs_url(&s));
    let mut seen = vec![];
    let mut next = selected.clone();
    loop {
        let (code, page) = get(&c, &next).await;
        assert_eq!(code, 200);
        assert!(page["metadata"]["remainingItemCount"].is_null(), "{page}");
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(token) => next = format!("{selected}&continue={token}"),
            None => break,
        }
    }
    assert_eq!(seen, ["p1", "r1", "r2"]);
    // an expired continue token is 410 Gone
    s.admin().compact().await.unwrap();
    post(&c, &jobs_url(&s), &plain_job("late", json!({}), 1.0)).await;
    s.admin().compact().await.unwrap();
    let (code, st) = get(&c, &format!("{}?limit=3&continue={cont}", jobs_url(&s))).await;
    assert_eq!((code, st["reason"].as_str()), (410, Some("Expired")));
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_and_expired_is_410() {
    let s = api_sim().await;
    let c = client();
    let (_, list) = get(&c, &jobs_url(&s)).await;
    let rv0 = rv_of(&list);
    post(&c, &jobs_url(&s), &plain_job("a", json!({"k": "x"}), 1.0)).await;
    post(&c, &jobs_url(&s), &plain_job("b", json!({"k": "y"}), 1.0)).await;

    let mut w = WatchReader::open(
        &c,
        &format!("{}?watch=true&resourceVersion={rv0}", jobs_url(&s)),
    )
    .await;
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );
    let rv_a = rv_of(&ev["object"]);
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "b");
    // live changes: patch then delete
    let r = c
        .patch(format!("{}/a", jobs_url(&s)))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"extra":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["labels"]["extra"].as_str()
        ),
        (Some("MODIFIED"), Some("1"))
    );
    delete(
        &c,
        &format!("{}/b", jobs_url(&s)),
        Some(json!({"propagationPolicy": "Background"})),
    )
    .await;
    let ev = w.next_change(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("b"))
    );

    // resume after a: sees b's ADDED and everything after, nothing before
    let mut w2 = WatchReader::open(
        &c,
        &format!("{}?watch=1&resourceVersion={rv_a}", jobs_url(&s)),
    )
    .await;
    let types: Vec<String> = [
        w2.next_change(SECS).await.unwrap(),
        w2.next_change(SECS).await.unwrap(),
        w2.next_change(SECS).await.unwrap(),
    ]
    .iter()
    .map(|e| {
        format!(
            "{} {}",
            e["type"].as_str().unwrap(),
            e["object"]["metadata"]["name"].as_str().unwrap()
        )
    })
    .collect();
    assert_eq!(types, vec!["ADDED b", "MODIFIED a", "DELETED b"]);

    // a label-filtered watch from now on only sees matches
    let mut wf = WatchReader::open(
        &c,
        &format!("{}?watch=true&labelSelector=k%3Dz", jobs_url(&s)),
    )
    .await;
    post(
        &c,
        &jobs_url(&s),
        &plain_job("c", json!({"k": "other"}), 1.0),
    )
    .await;
    post(&c, &jobs_url(&s), &plain_job("d", json!({"k": "z"}), 1.0)).await;
    let ev = wf.next_change(SECS).await.unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "d");

    // the history is gone: 410 Expired as an ERROR event, then the stream ends
    s.admin().compact().await.unwrap();
    let mut w3 = WatchReader::open(
        &c,
        &format!("{}?watch=true&resourceVersion={rv0}", jobs_url(&s)),
    )
    .await;
    let ev = w3.next(SECS).await.unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(
        (
            ev["object"]["code"].as_u64(),
            ev["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
    assert!(w3.next(SECS).await.is_none());
}

#[tokio::test]
async fn watch_initial_events_bookmarks_and_timeout() {
    let s = api_sim().await;
    let c = client();
    post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0)).await;
    // no resourceVersion: the current state as ADDED first
    let mut w = WatchReader::open(&c, &format!("{}?watch=true", jobs_url(&s))).await;
    let ev = w.next(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );
    drop(w);
    // bookmarks carry a resourceVersion; timeoutSeconds ends the stream
    let rv_now = rv_of(&get(&c, &jobs_url(&s)).await.1);
    let started = Instant::now();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&resourceVersion={rv_now}&allowWatchBookmarks=true&timeoutSeconds=1",
            jobs_url(&s)
        ),
    )
    .await;
    let ev = w.next(SECS).await.unwrap();
    assert_eq!(ev["type"], "BOOKMARK");
    assert_eq!(ev["object"]["kind"], "Job");
    assert_eq!(rv_of(&ev["object"]), rv_now);
    while w.next(SECS).await.is_some() {}
    let took = started.elapsed();
    // The stream ends because of timeoutSeconds=1: not before it, and (with
    // nothing else ending it) well before the generous hang bound.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(30),
        "{took:?}"
    );
    // streaming list: initial ADDED, then a bookmark marking their end
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            jobs_url(&s)
        ),
    )
    .await;
    assert_eq!(w.next(SECS).await.unwrap()["type"], "ADDED");
    let ev = w.next(SECS).await.unwrap();
    assert_eq!(ev["type"], "BOOKMARK");
    assert_eq!(
        ev["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn update_conflicts_and_patch_types() {
    let s = api_sim().await;
    let c = client();
    let (_, job) = post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0)).await;
    let mut stale = job.clone();
    stale["metadata"]["labels"] = json!({"v": "1"});
    let r = c
        .put(format!("{}/a", jobs_url(&s)))
        .json(&stale)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = c
        .put(format!("{}/a", jobs_url(&s)))
        .json(&stale)
        .send()
        .await
        .unwrap();
    let st: Value = r.json().await.unwrap();
    assert_eq!(
        (st["code"].as_u64(), st["reason"].as_str()),
        (Some(409), Some("Conflict"))
    );
    let r = c
        .patch(format!("{}/a", jobs_url(&s)))
        .header("content-type", "application/json-patch+json")
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
}

#[tokio::test]
async fn delete_propagation_deletecollection_and_logs() {
    let s = sim().await;
    let c = client();
    for n in ["bg", "orphan", "fg"] {
        post(&c, &jobs_url(&s), &plain_job(n, json!({"grp": n}), 300.0)).await;
    }
    let pod_of = |job: &'static str| {
        let (c, url) = (c.clone(), pods_url(&s));
        async move {
            let (_, list) = get(&c, &format!("{url}?labelSelector=job-name%3D{job}")).await;
            list["items"].as_array().unwrap().first().cloned()
        }
    };
    for n in ["bg", "orphan", "fg"] {
        eventually("the Job's pod runs", SECS, || async {
            pod_of(n)
                .await
                .filter(|p| p["status"]["phase"] == "Running")
        })
        .await;
    }
    let bg_pod = pod_of("bg").await.unwrap();
    assert_eq!(bg_pod["metadata"]["ownerReferences"][0]["kind"], "Job");
    assert_eq!(bg_pod["metadata"]["labels"]["grp"], "bg");
    assert!(bg_pod["metadata"]["labels"]["controller-uid"].is_string());

    // Background: the Job goes, then its pod
    let (code, _) = delete(
        &c,
        &format!("{}/bg", jobs_url(&s)),
        Some(json!({"propagationPolicy": "Background"})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(get(&c, &format!("{}/bg", jobs_url(&s))).await.0, 404);
    eventually("bg pod gone", SECS, || async {
        pod_of("bg").await.is_none().then_some(())
    })
    .await;

    // No policy on a batch/v1 Job orphans its pod
    delete(&c, &format!("{}/orphan", jobs_url(&s)), None).await;
    assert_eq!(get(&c, &format!("{}/orphan", jobs_url(&s))).await.0, 404);
    let p = pod_of("orphan").await.expect("orphaned pod stays");
    assert!(p["metadata"]["ownerReferences"].is_null());

    // Foreground: the Job waits (deletionTimestamp) for its pod
    let (_, j) = delete(
        &c,
        &format!("{}/fg", jobs_url(&s)),
        Some(json!({"propagationPolicy": "Foreground"})),
    )
    .await;
    assert!(j["metadata"]["deletionTimestamp"].is_string());
    eventually("fg job gone", SECS, || async {
        (get(&c, &format!("{}/fg", jobs_url(&s))).await.0 == 404).then_some(())
    })
    .await;
    assert!(pod_of("fg").await.is_none());
    // The Foreground deletion above went through the same propagation and a
    // pod's graceful stop after the orphaning: the orphan is still there.
    let p = pod_of("orphan").await.expect("orphaned pod stays");
    assert_eq!(p["status"]["phase"], "Running");

    // deletecollection of pods by label
    for n in ["x1", "x2", "y1"] {
        let pod = json!({"metadata": {"name": n, "labels": {"set": &n[..1]}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}, {"name": "side", "image": "i:1"}]}});
        assert_eq!(post(&c, &pods_url(&s), &pod).await.0, 201);
    }
    // logs: unknown container, container required, tailLines
    eventually("x1 runs", SECS, || async {
        (get(&c, &format!("{}/x1", pods_url(&s))).await.1["status"]["phase"] == "Running")
            .then_some(())
    })
    .await;
    for i in 0..5 {
        s.sim()
            .store
            .append_log(NS, "x1", "c", &format!("line {i}"));
    }
    s.sim().store.append_log(NS, "x1", "side", "side line");
    let log = |q: &str| {
        let url = format!("{}/x1/log?{q}", pods_url(&s));
        let c = c.clone();
        async move {
            let r = c.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    assert_eq!(
        log("container=c&tailLines=2").await,
        (200, "line 3\nline 4\n".to_string())
    );
    assert_eq!(
        log("container=side").await,
        (200, "side line\n".to_string())
    );
    assert_eq!(log("container=nope").await.0, 400);
    assert_eq!(log("").await.0, 400);
    let (code, _) = get(&c, &format!("{}/nope/log", pods_url(&s))).await;
    assert_eq!(code, 404);

    let (code, gone) = delete(&c, &format!("{}?labelSelector=set%3Dx", pods_url(&s)), None).await;
    assert_eq!(code, 200);
    assert_eq!(names(&gone), vec!["x1", "x2"]);
    eventually("x pods gone", SECS, || async {
        let (_, l) = get(&c, &pods_url(&s)).await;
        let n = names(&l);
        (!n.contains(&"x1".to_string())
            && !n.contains(&"x2".to_string())
            && n.contains(&"y1".to_string()))
        .then_some(())
    })
    .await;
    // gracePeriodSeconds=0 removes at once
    let (code, _) = delete(
        &c,
        &format!("{}/y1", pods_url(&s)),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(get(&c, &format!("{}/y1", pods_url(&s))).await.0, 404);
}

const ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tcab-dispatcher}
rules:
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["create", "get", "list", "watch", "delete"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "delete"]
  - apiGroups: [""]
    resources: ["pods/log"]
    verbs: ["get"]
"#;

#[tokio::test]
async fn rbac_token_gets_403_outside_its_role() {
    let s = sim_with(|o| o.rbac = Some(Rbac::parse(ROLE, "dispatcher-token").unwrap())).await;
    let c = client();
    let as_role = |rb: reqwest::RequestBuilder| rb.bearer_auth("dispatcher-token");
    let r = as_role(c.post(jobs_url(&s)).json(&plain_job("j", json!({}), 0.1)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let r = as_role(c.get(format!("{}?labelSelector=job-name%3Dj", pods_url(&s))))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    let r = as_role(c.post(pods_url(&s)).json(&pod))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let st: Value = r.json().await.unwrap();
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("Forbidden"))
    );
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("cannot create resource \"pods\""),
        "{st}"
    );
    for (verb_req, what) in [
        (
            as_role(c.get(format!("{}?watch=true", pods_url(&s)))),
            "watch pods",
        ),
        (as_role(c.delete(pods_url(&s))), "deletecollection pods"),
        (
            as_role(c.put(format!("{}/j", jobs_url(&s))).json(&json!({}))),
            "update jobs",
        ),
        (
            as_role(c.get(format!("{}/j/status", jobs_url(&s)))),
            "get jobs/status",
        ),
        (
            as_role(c.post(format!("{}/admin/nodes/sim-node-1/crash", s.url()))),
            "admin",
        ),
    ] {
        assert_eq!(
            verb_req.send().await.unwrap().status().as_u16(),
            403,
            "{what}"
        );
    }
    // logs are granted
    let r = as_role(c.get(format!("{}/nope/log", pods_url(&s))))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // the admin (kubeconfig) token and no token are unrestricted
    let r = c
        .post(pods_url(&s))
        .bearer_auth(s.admin_token())
        .json(&pod)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
}

#[tokio::test]
async fn injected_api_faults_and_request_counters() {
    let s = api_sim().await;
    let c = client();
    let admin = s.admin();
    admin
        .api_fault(&ApiFault {
            mode: ApiFaultMode::Error500,
            count: 2,
            retry_after_seconds: None,
            delay_ms: None,
            resource: None,
            verb: None,
        })
        .await
        .unwrap();
    assert_eq!(get(&c, &jobs_url(&s)).await.0, 500);
    let (code, st) = get(&c, &jobs_url(&s)).await;
    assert_eq!((code, st["reason"].as_str()), (500, Some("InternalError")));
    assert_eq!(get(&c, &jobs_url(&s)).await.0, 200);
    admin
        .api_fault(&ApiFault {
            mode: ApiFaultMode::Throttle,
            count: 1,
            retry_after_seconds: Some(2),
            delay_ms: None,
            resource: Some("jobs".into()),
            verb: Some("create".into()),
        })
        .await
        .unwrap();
    assert_eq!(
        get(&c, &jobs_url(&s)).await.0,
        200,
        "a list is not a create"
    );
    let r = c
        .post(jobs_url(&s))
        .json(&plain_job("a", json!({}), 1.0))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers().get("retry-after").unwrap(), "2");
    admin
        .api_fault(&ApiFault {
            mode: ApiFaultMode::Delay,
            count: 1,
            retry_after_seconds: None,
            delay_ms: Some(300),
            resource: None,
            verb: None,
        })
        .await
        .unwrap();
    let t = Instant::now();
    assert_eq!(
        post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0))
            .await
            .0,
        201
    );
    assert!(t.elapsed() >= Duration::from_millis(300));
    let counters = admin.counters().await.unwrap();
    assert_eq!(counters.requests.get("list jobs"), Some(&4));
    assert_eq!(counters.requests.get("create jobs"), Some(&2));
    admin.reset_counters().await.unwrap();
    assert!(admin.counters().await.unwrap().requests.is_empty());
}

#[tokio::test]
async fn discovery_documents() {
    let s = api_sim().await;
    let c = client();
    let (_, v) = get(&c, &format!("{}/version", s.url())).await;
    assert_eq!(v["major"], "1");
    let (_, v) = get(&c, &format!("{}/api", s.url())).await;
    assert_eq!(v["versions"][0], "v1");
    let (_, v) = get(&c, &format!("{}/apis", s.url())).await;
    assert_eq!(v["groups"][0]["name"], "batch");
    let (_, v) = get(&c, &format!("{}/apis/batch/v1", s.url())).await;
    assert!(
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "jobs" && r["namespaced"] == true)
    );
    let (_, v) = get(&c, &format!("{}/api/v1", s.url())).await;
    assert!(
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/log")
    );
    let core: Vec<(String, bool)> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["namespaced"] == true,
            )
        })
        .collect();
    for (name, namespaced) in [
        ("nodes", false),
        ("secrets", true),
        ("serviceaccounts", true),
        ("events", true),
        ("pods/eviction", true),
    ] {
        assert!(
            core.contains(&(name.to_string(), namespaced)),
            "{name}: {core:?}"
        );
    }
    // Tables for kubectl
    post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0)).await;
    let r = c
        .get(jobs_url(&s))
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    assert_eq!(t["rows"][0]["cells"][0], "a");
}

#[tokio::test]
async fn the_charts_role_is_enforced_in_its_namespace_only() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/tcab-dispatcher/tests/role.golden.yaml");
    // The rendered Role is committed with the chart: its absence is a failure.
    let yaml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the chart's rendered Role {}: {e}", path.display()));
    let s = sim_with(|o| o.rbac = Some(Rbac::parse(&yaml, "dispatcher-token").unwrap())).await;
    let c = client();
    let job = plain_job("j", json!({}), 0.1);
    let other_ns = format!("{}/apis/batch/v1/namespaces/elsewhere/jobs", s.url());
    let r = c
        .post(&other_ns)
        .bearer_auth("dispatcher-token")
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403, "the Role is namespaced");
    let all_ns = format!("{}/apis/batch/v1/jobs", s.url());
    assert_eq!(
        c.get(&all_ns)
            .bearer_auth("dispatcher-token")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    let r = c
        .post(jobs_url(&s))
        .bearer_auth("dispatcher-token")
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        201,
        "namespace {NS} is the chart's default"
    );
}

#[tokio::test]
async fn follow_logs_and_the_eviction_subresource() {
    let s = sim().await;
    let c = client();
    let pod =
        json!({"metadata": {"name": "f"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    assert_eq!(post(&c, &pods_url(&s), &pod).await.0, 201);
    let (code, st) = get(&c, &format!("{}/f/log", pods_url(&s))).await;
    if code == 400 {
        assert!(
            st["message"].as_str().unwrap().contains("waiting to start"),
            "{st}"
        );
    }
    eventually("f runs", SECS, || async {
        (get(&c, &format!("{}/f", pods_url(&s))).await.1["status"]["phase"] == "Running")
            .then_some(())
    })
    .await;
    s.sim().store.append_log(NS, "f", "c", "one");
    let mut resp = c
        .get(format!("{}/f/log?follow=true", pods_url(&s)))
        .send()
        .await
        .unwrap();
    let mut got = String::new();
    while !got.contains("one\n") {
        got.push_str(std::str::from_utf8(&resp.chunk().await.unwrap().unwrap()).unwrap());
    }
    s.sim().store.append_log(NS, "f", "c", "two");
    while !got.contains("two\n") {
        let chunk = tokio::time::timeout(SECS, resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // evict through the API: DisruptionTarget, then the pod goes (and the log stream ends)
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "f", "namespace": NS}});
    let (code, _) = post(&c, &format!("{}/f/eviction", pods_url(&s)), &eviction).await;
    assert_eq!(code, 201);
    eventually("evicted pod gone", SECS, || async {
        (get(&c, &format!("{}/f", pods_url(&s))).await.0 == 404).then_some(())
    })
    .await;
    let rest = tokio::time::timeout(SECS, async {
        while let Some(chunk) = resp.chunk().await.unwrap() {
            got.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(rest.is_ok(), "the follow stream ends with the container");
}

#[tokio::test]
async fn logs_answer_as_the_api_server_and_the_kubelet_do() {
    let s = sim().await;
    let c = client();
    let text = |q: String| {
        let c = c.clone();
        async move {
            let r = c.get(q).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // on no node: no log (204 No Content), whatever is asked; no kubelet
    // is asked
    let nowhere = json!({"metadata": {"name": "nowhere"}, "spec": {
        "nodeSelector": {"pool": "none"}, "containers": [{"name": "c", "image": "i:1"}]}});
    assert_eq!(post(&c, &pods_url(&s), &nowhere).await.0, 201);
    for q in ["", "?previous=true", "?tailLines=3"] {
        assert_eq!(
            text(format!("{}/nowhere/log{q}", pods_url(&s))).await,
            (204, String::new()),
            "{q}"
        );
    }
    // the options are checked first
    let (code, st) = get(&c, &format!("{}/nowhere/log?tailLines=-1", pods_url(&s))).await;
    assert_eq!(
        (code, st["reason"].as_str(), st["message"].as_str()),
        (
            422,
            Some("Invalid"),
            Some(
                "PodLogOptions \"nowhere\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
            )
        )
    );
    // a running container has no previous instance
    let pod =
        json!({"metadata": {"name": "r"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    assert_eq!(post(&c, &pods_url(&s), &pod).await.0, 201);
    eventually("r runs", SECS, || async {
        (get(&c, &format!("{}/r", pods_url(&s))).await.1["status"]["phase"] == "Running")
            .then_some(())
    })
    .await;
    let (code, st) = get(&c, &format!("{}/r/log?previous=true", pods_url(&s))).await;
    assert_eq!(
        (code, st["reason"].as_str(), st["message"].as_str()),
        (
            400,
            Some("BadRequest"),
            Some("previous terminated container \"c\" in pod \"r\" not found")
        )
    );
    assert_eq!(
        text(format!("{}/r/log", pods_url(&s))).await,
        (200, String::new())
    );
}

#[tokio::test]
async fn a_name_held_by_an_object_being_deleted_and_a_stale_patch_are_409() {
    let s = api_sim().await;
    let c = client();
    let mut held = plain_job("held", json!({}), 1.0);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(post(&c, &jobs_url(&s), &held).await.0, 201);
    let (code, marked) = delete(
        &c,
        &format!("{}/held", jobs_url(&s)),
        Some(json!({"propagationPolicy": "Background"})),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    for url in [jobs_url(&s), format!("{}?dryRun=All", jobs_url(&s))] {
        let (code, st) = post(&c, &url, &plain_job("held", json!({}), 1.0)).await;
        assert_eq!(
            (code, st["reason"].as_str(), st["message"].as_str()),
            (
                409,
                Some("AlreadyExists"),
                Some("object is being deleted: jobs.batch \"held\" already exists")
            ),
            "{url}"
        );
    }
    // a merge patch naming an old resourceVersion is refused, and changes nothing
    let (_, made) = post(&c, &jobs_url(&s), &plain_job("p", json!({}), 1.0)).await;
    let stale = made["metadata"]["resourceVersion"].clone();
    let merge = |body: Value| {
        let c = c.clone();
        let url = format!("{}/p", jobs_url(&s));
        async move {
            let r = c
                .patch(url)
                .header("content-type", "application/merge-patch+json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(
        merge(json!({"metadata": {"labels": {"v": "1"}}})).await.0,
        200
    );
    let (code, st) =
        merge(json!({"metadata": {"resourceVersion": stale, "labels": {"v": "2"}}})).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    let (_, now) = get(&c, &format!("{}/p", jobs_url(&s))).await;
    assert_eq!(now["metadata"]["labels"]["v"], "1");
}
