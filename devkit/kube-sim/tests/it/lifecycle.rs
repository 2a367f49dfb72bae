//! A Job's whole life with the fake driver and publisher, and each fault.

use crate::backend::FakeBackend;
use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_kube_sim::{SimHandle, Timing};

async fn job(s: &SimHandle, name: &str) -> Option<Value> {
    let (code, j) = get(&client(), &format!("{}/{name}", jobs_url(s))).await;
    (code == 200).then_some(j)
}

async fn wait_condition(s: &SimHandle, name: &str, kind: &str) -> Value {
    eventually(&format!("{name} {kind}"), SECS, || async {
        job(s, name).await.filter(|j| condition(j, kind).is_some())
    })
    .await
}

async fn pods(s: &SimHandle, ns: &str, selector: &str) -> Vec<Value> {
    let url = format!(
        "{}/api/v1/namespaces/{ns}/pods?labelSelector={selector}",
        s.url()
    );
    get(&client(), &url).await.1["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn driver_pod(s: &SimHandle, id: &str) -> Value {
    let sel = format!("job-name%3D{}", driver_name(id));
    eventually("driver pod", SECS, || async {
        pods(s, NS, &sel).await.into_iter().next()
    })
    .await
}

async fn sandboxes(s: &SimHandle, id: &str) -> Vec<Value> {
    pods(
        s,
        "sandboxes",
        &format!("tcab.dev/job-id%3D{id},app.kubernetes.io/managed-by%3Dtcab-driver"),
    )
    .await
}

async fn wait_reported(b: &FakeBackend, what: &str) {
    eventually(what, SECS, || async {
        b.summary().iter().any(|c| c == what).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_driver_job_lives_its_whole_life() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    let c = client();
    let script = json!({"duration_ms": 400, "log_lines": 2});
    // The TTL is long while the finished pod is read, then shortened below:
    // a short TTL from the start could delete the pod before it is read.
    let j = driver_job("j1", &url, script, 30, json!({}));
    assert_eq!(post(&c, &jobs_url(&s), &j).await.0, 201);
    let pod = driver_pod(&s, "j1").await;
    assert_eq!(pod["metadata"]["labels"]["tcab.dev/job-id"], "j1");
    assert_eq!(
        pod["metadata"]["finalizers"],
        json!(["batch.kubernetes.io/job-tracking"]),
        "the Job controller creates its pods with the tracking finalizer"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
        "false"
    );
    // while it runs: a sandbox in the sandbox namespace, no owner
    let sb = eventually("sandbox", SECS, || async {
        sandboxes(&s, "j1").await.into_iter().next()
    })
    .await;
    assert!(sb["metadata"]["ownerReferences"].is_null());
    assert_eq!(
        sb["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
        "false"
    );
    let running = wait_condition(&s, &driver_name("j1"), "Complete").await;
    assert_eq!(running["status"]["succeeded"], 1);
    assert!(
        running["status"]["completionTime"].is_string()
            && running["status"]["startTime"].is_string()
    );
    assert!(condition(&running, "SuccessCriteriaMet").is_some());
    assert_eq!(
        b.summary(),
        vec![
            "/jobs/j1/status starting",
            "/jobs/j1/status running",
            "/jobs/j1/status validating",
            "/jobs/j1/record",
            "/jobs/j1/status storing",
            "/jobs/j1/status succeeded"
        ]
    );
    assert!(b.calls().iter().all(|c| c.token == "tok-j1"));
    // The driver deleted its sandbox before it reported; the sandbox's
    // kubelet stops it and confirms the deletion.
    eventually("the driver's sandbox is gone", SECS, || async {
        sandboxes(&s, "j1").await.is_empty().then_some(())
    })
    .await;
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let (_, p) = get(&c, &format!("{}/{pod_name}", pods_url(&s))).await;
    assert_eq!(p["status"]["phase"], "Succeeded");
    assert!(
        p["metadata"]["finalizers"].is_null(),
        "counted: the finalizer is gone"
    );
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let log = c
        .get(format!("{}/{pod_name}/log?container=driver", pods_url(&s)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        log.contains("running: step 2/2") && log.contains("created sandbox pod"),
        "{log}"
    );
    // ttlSecondsAfterFinished: the Job and its pod go
    let r = c
        .patch(format!("{}/{}", jobs_url(&s), driver_name("j1")))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"spec":{"ttlSecondsAfterFinished":0}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    eventually("ttl deletes the job", SECS, || async {
        job(&s, &driver_name("j1")).await.is_none().then_some(())
    })
    .await;
    eventually("ttl deletes the pod", SECS, || async {
        (get(&c, &format!("{}/{pod_name}", pods_url(&s))).await.0 == 404).then_some(())
    })
    .await;
    // As the TTL controller deletes (Foreground): the Job is marked first,
    // its pod goes, and only then the Job.
    let timeline = s.sim().store.audit_page(0, 200_000).entries;
    let at = |kind: &str, name: &str, what: &dyn Fn(&tcab_kube_sim::audit::AuditEntry) -> bool| {
        timeline
            .iter()
            .position(|e| e.kind == kind && e.name == name && what(e))
            .unwrap_or_else(|| panic!("no such {kind} {name} entry: {timeline:#?}"))
    };
    let job_name = driver_name("j1");
    let marked = at("Job", &job_name, &|e| e.event == "MODIFIED" && e.deleting);
    let pod_gone = at("Pod", &pod_name, &|e| e.event == "DELETED");
    let job_gone = at("Job", &job_name, &|e| e.event == "DELETED");
    assert!(
        marked < pod_gone && pod_gone < job_gone,
        "marked {marked}, pod deleted {pod_gone}, Job deleted {job_gone}"
    );
    let counters = s.admin().counters().await.unwrap();
    assert_eq!(counters.max_live_jobs.get("run"), Some(&1));
    assert_eq!(counters.live_jobs.get("run"), Some(&0));
}

#[tokio::test]
async fn scripted_failure_and_crash() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    let c = client();
    post(
        &c,
        &jobs_url(&s),
        &driver_job(
            "f1",
            &url,
            json!({"duration_ms": 40, "outcome": "failed"}),
            30,
            json!({}),
        ),
    )
    .await;
    post(
        &c,
        &jobs_url(&s),
        &driver_job(
            "c1",
            &url,
            json!({"duration_ms": 40, "crash_at": "running"}),
            30,
            json!({}),
        ),
    )
    .await;
    wait_condition(&s, &driver_name("f1"), "Complete").await;
    let f = b
        .calls()
        .into_iter()
        .find(|c| c.path == "/jobs/f1/status" && c.body["state"] == "failed")
        .unwrap();
    assert_eq!(f.body["failure_kind"], "agent");
    let failed = wait_condition(&s, &driver_name("c1"), "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap()["reason"],
        "BackoffLimitExceeded"
    );
    assert_eq!(failed["status"]["failed"], 1);
    let pod = driver_pod(&s, "c1").await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
    assert_eq!(
        sandboxes(&s, "c1").await.len(),
        1,
        "a crash leaves the sandbox behind"
    );
    assert!(
        !b.summary()
            .iter()
            .any(|c| c.starts_with("/jobs/c1/status validating"))
    );
}

#[tokio::test]
async fn a_refused_report_makes_the_driver_delete_its_sandbox_and_exit() {
    let (b, url) = FakeBackend::start().await;
    b.behaviour.lock().unwrap().refuse_from = Some("running".into());
    let s = sim().await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job("r1", &url, json!({"duration_ms": 100}), 30, json!({})),
    )
    .await;
    wait_condition(&s, &driver_name("r1"), "Failed").await;
    eventually("the sandbox is gone", SECS, || async {
        sandboxes(&s, "r1").await.is_empty().then_some(())
    })
    .await;
    assert_eq!(
        b.summary(),
        vec!["/jobs/r1/status starting", "/jobs/r1/status running"]
    );
    let log_pod = driver_pod(&s, "r1").await;
    assert_eq!(
        log_pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
}

#[tokio::test]
async fn backend_errors_are_retried() {
    let (b, url) = FakeBackend::start().await;
    b.behaviour.lock().unwrap().fail_next = 2;
    let s = sim().await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job(
            "e1",
            &url,
            json!({"duration_ms": 40, "record": false}),
            30,
            json!({}),
        ),
    )
    .await;
    wait_condition(&s, &driver_name("e1"), "Complete").await;
    let starts = b
        .summary()
        .iter()
        .filter(|c| *c == "/jobs/e1/status starting")
        .count();
    assert_eq!(starts, 3, "{:?}", b.summary());
    wait_reported(&b, "/jobs/e1/status succeeded").await;
}

/// The next event of a watch whose object passes `check`.
async fn next_where(w: &mut WatchReader, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    loop {
        let ev = w
            .next_change(SECS)
            .await
            .unwrap_or_else(|| panic!("the watch ended before {what}"));
        if check(&ev) {
            return ev;
        }
    }
}

fn rv_of_event(ev: &Value) -> u64 {
    rv_of(&ev["object"])
}

#[tokio::test]
async fn eviction_sends_sigterm_and_the_job_fails_once_the_pod_is_gone() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job("v1", &url, json!({"hang": true}), 30, json!({})),
    )
    .await;
    wait_reported(&b, "/jobs/v1/status running").await;
    eventually("sandbox", SECS, || async {
        sandboxes(&s, "v1").await.into_iter().next()
    })
    .await;
    let pod = driver_pod(&s, "v1").await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    // Watch the pod and its Job from now on: every step is in the streams.
    let c = client();
    let rv = rv_of(&pod);
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3D{name}",
            pods_url(&s)
        ),
    )
    .await;
    let mut jw = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3D{}",
            jobs_url(&s),
            driver_name("v1")
        ),
    )
    .await;
    s.admin().evict(NS, &name).await.unwrap();
    // The Eviction API: DisruptionTarget first, then the graceful deletion.
    let ev = w.next_change(SECS).await.unwrap();
    let dt = condition(&ev["object"], "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(dt["reason"], "EvictionByEvictionAPI");
    assert_eq!(dt["message"], "Eviction API: evicting");
    let marked = next_where(&mut w, "the deletionTimestamp", |e| {
        e["object"]["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    assert_eq!(
        marked["object"]["metadata"]["deletionGracePeriodSeconds"],
        30
    );
    // The Job counts the terminating pod as failed, but is Failed only
    // when no pod of it terminates any more.
    let target = next_where(&mut jw, "FailureTarget", |e| {
        condition(&e["object"], "FailureTarget").is_some()
    })
    .await;
    assert!(condition(&target["object"], "Failed").is_none());
    // (Whether a status counts the pod failed while it still terminates
    // depends on timing: pod events reach the Job controller a batch period,
    // 1 s, late, so the pod may have stopped by the sync that counts it, as
    // on a real cluster.)
    // The pod: terminated by the driver's SIGTERM exit (143), then deleted.
    let terminated = next_where(&mut w, "the terminated status", |e| {
        e["object"]["status"]["phase"] == "Failed"
    })
    .await;
    let t = &terminated["object"]["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(143), Some("Error"))
    );
    let deleted = next_where(&mut w, "DELETED", |e| e["type"] == "DELETED").await;
    let failed = next_where(&mut jw, "Failed", |e| {
        condition(&e["object"], "Failed").is_some()
    })
    .await;
    assert!(
        rv_of_event(&failed) > rv_of_event(&deleted),
        "Failed comes after the pod is gone"
    );
    assert_eq!(failed["object"]["status"]["failed"], 1);
    assert_eq!(failed["object"]["status"]["terminating"], 0);
    assert_eq!(
        condition(&failed["object"], "Failed").unwrap()["reason"],
        "BackoffLimitExceeded"
    );
    let calls = b.summary();
    let tail: Vec<&String> = calls.iter().rev().take(2).collect();
    assert_eq!(tail, vec!["/jobs/v1/status failed", "/jobs/v1/record"]);
    let f = b
        .calls()
        .into_iter()
        .find(|c| c.body["state"] == "failed")
        .unwrap();
    assert_eq!(f.body["failure_kind"], "infrastructure");
    eventually("the sandbox is deleted after SIGTERM", SECS, || async {
        sandboxes(&s, "v1").await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn oom_kill_is_sigkill_with_no_cleanup() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job("o1", &url, json!({"hang": true}), 30, json!({})),
    )
    .await;
    wait_reported(&b, "/jobs/o1/status running").await;
    eventually("sandbox", SECS, || async {
        sandboxes(&s, "o1").await.into_iter().next()
    })
    .await;
    let pod = driver_pod(&s, "o1").await;
    s.admin()
        .oom_kill(NS, pod["metadata"]["name"].as_str().unwrap())
        .await
        .unwrap();
    let failed = wait_condition(&s, &driver_name("o1"), "Failed").await;
    assert_eq!(failed["status"]["failed"], 1);
    let pod = driver_pod(&s, "o1").await;
    let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["reason"].as_str(), t["exitCode"].as_i64()),
        (Some("OOMKilled"), Some(137))
    );
    assert!(
        t.get("signal").is_none(),
        "the kubelet never sets signal: {t}"
    );
    assert_eq!(pod["status"]["phase"], "Failed");
    assert!(
        pod["metadata"]["deletionTimestamp"].is_null(),
        "an OOM-killed pod is kept, not deleted"
    );
    // The kubelet writes the terminated status only once the killed driver
    // has stopped for good, so nothing it could still do is missed below.
    assert_eq!(
        sandboxes(&s, "o1").await.len(),
        1,
        "the sandbox is orphaned"
    );
    assert!(
        !b.summary()
            .iter()
            .any(|c| c.contains("failed") || c.contains("record"))
    );
}

#[tokio::test]
async fn the_grace_period_is_honoured_then_sigkill() {
    let (b, url) = FakeBackend::start().await;
    b.behaviour.lock().unwrap().slow_failed = Some(Duration::from_secs(30));
    let s = sim().await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job(
            "g1",
            &url,
            json!({"hang": true, "record": false}),
            1,
            json!({}),
        ),
    )
    .await;
    wait_reported(&b, "/jobs/g1/status running").await;
    let pod = driver_pod(&s, "g1").await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let c = client();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&resourceVersion={}&fieldSelector=metadata.name%3D{name}",
            pods_url(&s),
            rv_of(&pod)
        ),
    )
    .await;
    s.admin().delete_pod(NS, &name, None).await.unwrap();
    let mut exit = None;
    loop {
        let ev = w.next_change(SECS).await.unwrap();
        if let Some(t) =
            ev["object"]["status"]["containerStatuses"][0]["state"]["terminated"].as_object()
        {
            exit = Some((
                t["exitCode"].as_i64(),
                t["reason"].clone(),
                t.get("signal").cloned(),
            ));
        }
        if ev["type"] == "DELETED" {
            break;
        }
    }
    let took = started.elapsed();
    assert_eq!(
        exit,
        Some((Some(137), json!("Error"), None)),
        "SIGKILL after the grace period: Error, 137, no signal field"
    );
    // Not before the runtime's 2 s minimum grace (the pod asks for 1 s); the
    // upper bound only catches a hang (a loaded CI machine can be slow).
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(30),
        "{took:?}"
    );
    let failed = wait_condition(&s, &driver_name("g1"), "Failed").await;
    assert_eq!(
        failed["status"]["failed"], 1,
        "a pod deleted under a running Job counts failed"
    );
}

#[tokio::test]
async fn deleting_a_pod_under_a_running_job_fails_the_job() {
    let s = sim().await;
    post(&client(), &jobs_url(&s), &plain_job("d1", json!({}), 300.0)).await;
    let pod = eventually("pod", SECS, || async {
        pods(&s, NS, "job-name%3Dd1").await.into_iter().next()
    })
    .await;
    s.admin()
        .delete_pod(NS, pod["metadata"]["name"].as_str().unwrap(), Some(0))
        .await
        .unwrap();
    let failed = wait_condition(&s, "d1", "Failed").await;
    assert_eq!(failed["status"]["failed"], 1);
    assert!(failed["status"]["active"].is_null());
    assert!(
        pods(&s, NS, "job-name%3Dd1").await.is_empty(),
        "backoffLimit 0: no second pod"
    );
}

#[tokio::test]
async fn a_job_that_never_gets_a_pod_hits_its_deadline() {
    let s = sim_with(|o| o.speed = 20.0).await;
    s.admin().never_pod_next(1).await.unwrap();
    let mut j = plain_job("n1", json!({}), 1.0);
    j["spec"]["activeDeadlineSeconds"] = json!(10);
    post(&client(), &jobs_url(&s), &j).await;
    s.admin().never_pod_named("n2").await.unwrap();
    post(&client(), &jobs_url(&s), &plain_job("n2", json!({}), 1.0)).await;
    post(&client(), &jobs_url(&s), &plain_job("ok", json!({}), 1.0)).await;
    wait_condition(&s, "ok", "Complete").await;
    assert!(pods(&s, NS, "job-name%3Dn1").await.is_empty());
    assert!(pods(&s, NS, "job-name%3Dn2").await.is_empty());
    let failed = wait_condition(&s, "n1", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    assert!(failed["status"]["failed"].is_null(), "no pod ever failed");
}

#[tokio::test]
async fn active_deadline_terminates_a_running_driver() {
    let (b, url) = FakeBackend::start().await;
    let s = sim_with(|o| o.speed = 10.0).await;
    post(
        &client(),
        &jobs_url(&s),
        &driver_job(
            "a1",
            &url,
            json!({"hang": true}),
            30,
            json!({"activeDeadlineSeconds": 5}),
        ),
    )
    .await;
    let failed = wait_condition(&s, &driver_name("a1"), "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    assert!(condition(&failed, "FailureTarget").is_some());
    assert_eq!(failed["status"]["failed"], 1);
    wait_reported(&b, "/jobs/a1/status failed").await;
    assert!(sandboxes(&s, "a1").await.is_empty());
}

#[tokio::test]
async fn a_publisher_posts_its_result() {
    let (b, url) = FakeBackend::start().await;
    let s = sim().await;
    let labels = json!({"tcab.dev/job-kind": "publish", "tcab.dev/job-id": "p1"});
    let job = json!({
        "metadata": {"name": "tcab-publisher-p1-abcd1234", "labels": labels},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never",
            "containers": [{"name": "publisher", "image": "pub:1", "env": [
                {"name": "TCAB_BACKEND_URL", "value": url},
                {"name": "TCAB_PUBLISH_JOB_ID", "value": "p1"},
                {"name": "TCAB_JOB_TOKEN", "value": "ptok"},
                {"name": "TCAB_PUBLISH_REQUEST", "value": r#"{"sim":{"duration_ms":50,"outcome":"failed"}}"#}]}]}}}
    });
    post(&client(), &jobs_url(&s), &job).await;
    wait_condition(&s, "tcab-publisher-p1-abcd1234", "Complete").await;
    let calls = b.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].path.as_str(), calls[0].token.as_str()),
        ("/publish-jobs/p1/result", "ptok")
    );
    assert_eq!(calls[0].body["outcome"], "failed");
    assert_eq!(
        s.admin()
            .counters()
            .await
            .unwrap()
            .max_live_jobs
            .get("publish"),
        Some(&1)
    );
}

#[tokio::test]
async fn max_live_jobs_are_counted_per_lane() {
    let s = sim_with(|o| {
        o.timing = Timing {
            default_job_pod_run: Duration::from_secs(300),
            ..Timing::default()
        }
    })
    .await;
    let c = client();
    for n in ["r1", "r2", "r3"] {
        post(
            &c,
            &jobs_url(&s),
            &plain_job(n, json!({"tcab.dev/job-kind": "other"}), 0.2),
        )
        .await;
    }
    for n in ["r1", "r2", "r3"] {
        wait_condition(&s, n, "Complete").await;
    }
    post(
        &c,
        &jobs_url(&s),
        &plain_job("r4", json!({"tcab.dev/job-kind": "other"}), 0.2),
    )
    .await;
    let counters = s.admin().counters().await.unwrap();
    assert_eq!(counters.max_live_jobs.get("other"), Some(&3));
    assert_eq!(counters.live_jobs.get("other"), Some(&1));
}

#[tokio::test]
async fn the_terminal_report_is_retried_until_the_report_deadline() {
    let (b, url) = FakeBackend::start().await;
    // the backend is down for the terminal report: more than 4 attempts land
    b.behaviour.lock().unwrap().fail_state = Some(("succeeded".into(), 8));
    let s = sim_with(|o| o.speed = 10.0).await;
    let mut j = driver_job(
        "t1",
        &url,
        json!({"duration_ms": 400, "record": false, "sandbox": false}),
        30,
        json!({}),
    );
    j["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "TCAB_DRIVER_REPORT_DEADLINE_SECONDS", "value": "30"}));
    post(&client(), &jobs_url(&s), &j).await;
    wait_condition(&s, &driver_name("t1"), "Complete").await;
    let attempts = b
        .summary()
        .iter()
        .filter(|c| *c == "/jobs/t1/status succeeded")
        .count();
    assert_eq!(attempts, 9, "{:?}", b.summary());
}
