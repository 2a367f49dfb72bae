//! Injected faults through real clients: kube-rs (watcher and typed calls),
//! raw HTTP as clients send it, and kubectl.

use crate::common::*;
use crate::kubectl::kubectl_on_path;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tcab_kube_sim::{ApiFaultMode, FaultRule, SimHandle, WatchScope};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// The code of a watcher error (0 when it is not an API answer).
fn code_of(e: &watcher::Error) -> u16 {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => 0,
    }
}

/// Runs a kube-rs watcher (with its default backoff) on the sim's Jobs and
/// reports `apply NAME`, `delete NAME`, `init done` and `error CODE`.
fn watch_jobs(
    jobs: Api<Job>,
    cfg: watcher::Config,
) -> (UnboundedReceiver<String>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = unbounded_channel();
    let task = tokio::spawn(async move {
        let stream = watcher(jobs, cfg).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let line = match ev {
                Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) => {
                    format!("apply {}", j.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::Delete(j)) => {
                    format!("delete {}", j.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::InitDone) => "init done".into(),
                Ok(watcher::Event::Init) => continue,
                Err(e) => format!("error {}", code_of(&e)),
            };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (rx, task)
}

/// Reads watcher lines until one equals `want`; returns every line read.
async fn until(rx: &mut UnboundedReceiver<String>, want: &str, limit: Duration) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(limit, async {
        while let Some(line) = rx.recv().await {
            let done = line == want;
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "no {want:?} within {limit:?}: {seen:?}");
    seen
}

async fn counters(s: &SimHandle) -> tcab_kube_sim::Counters {
    s.admin().counters().await.unwrap()
}

#[tokio::test]
async fn a_list_and_watch_outage_shows_as_errors_in_a_kube_rs_watcher_which_then_recovers() {
    let s = api_sim().await;
    let c = client();
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    post(&c, &jobs_url(&s), &plain_job("before", json!({}), 1.0)).await;
    let (mut rx, task) = watch_jobs(jobs, watcher::Config::default());
    until(&mut rx, "init done", SECS).await;
    // The fault closes the watches open when it is added: wait for the
    // watcher's watch to be open, or it could start just after the fault
    // was checked and before it was added, and see no error at all.
    eventually("the watcher's watch is open", SECS, || async {
        (counters(&s).await.open_watches == 1).then_some(())
    })
    .await;
    let id = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list", "watch"])
                .resources(["jobs"])
                .for_seconds(2.0)
                .closing_open_watches(),
        )
        .await
        .unwrap();
    // writes are outside the fault's scope
    assert_eq!(
        post(&c, &jobs_url(&s), &plain_job("during", json!({}), 1.0))
            .await
            .0,
        201
    );
    let (code, st) = get(&c, &jobs_url(&s)).await;
    assert_eq!((code, st["reason"].as_str()), (500, Some("InternalError")));
    // the open watch was ended; every re-watch fails until the window
    // closes, then the watcher resumes and gets what it missed
    let seen = until(&mut rx, "apply during", Duration::from_secs(30)).await;
    assert!(seen.iter().any(|l| l == "error 500"), "{seen:?}");
    assert!(s.admin().fault_affected(id).await.unwrap() >= 2);
    task.abort();
}

#[tokio::test]
async fn a_fault_scoped_to_a_token_leaves_other_clients_clean_and_latency_is_added() {
    let s = api_sim().await;
    let c = client();
    let admin = s.admin();
    post(&c, &jobs_url(&s), &plain_job("j", json!({}), 1.0)).await;
    let dispatcher: Api<Job> =
        Api::namespaced(s.kube_client(Some("dispatcher-token")).unwrap(), NS);
    let test_reads: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let id = admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list"])
                .resources(["jobs"])
                .token("dispatcher-token")
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    match dispatcher.list(&ListParams::default()).await {
        Err(kube::Error::Api(st)) => assert_eq!(
            (st.code, st.reason.as_str(), st.message.as_str()),
            (
                500,
                "InternalError",
                "Internal error occurred: injected fault"
            )
        ),
        other => panic!("the dispatcher's list fails: {other:?}"),
    }
    assert_eq!(
        test_reads
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(get(&c, &jobs_url(&s)).await.0, 200);
    assert!(dispatcher.get("j").await.is_ok(), "a get is not a list");
    assert_eq!(admin.fault_affected(id).await.unwrap(), 1);
    // the rule as listed: its token is not echoed
    let listed = admin.faults().await.unwrap();
    let rule = listed.iter().find(|f| f.id == id).unwrap();
    assert!(rule.live && rule.token_scoped && rule.rule.token.is_none());
    assert!(rule.seconds_left.unwrap() > 50.0);
    admin.remove_fault(id).await.unwrap();
    assert!(dispatcher.list(&ListParams::default()).await.is_ok());
    assert!(!admin.faults().await.unwrap()[0].live);

    // added latency, for two creates
    let d = admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Delay)
                .verbs(["create"])
                .delay(Duration::from_millis(300))
                .times(2),
        )
        .await
        .unwrap();
    for n in ["d1", "d2"] {
        let t = Instant::now();
        assert_eq!(
            post(&c, &jobs_url(&s), &plain_job(n, json!({}), 1.0))
                .await
                .0,
            201
        );
        assert!(t.elapsed() >= Duration::from_millis(300), "{n}");
    }
    assert_eq!(
        post(&c, &jobs_url(&s), &plain_job("d3", json!({}), 1.0))
            .await
            .0,
        201
    );
    assert_eq!(admin.fault_affected(d).await.unwrap(), 2);
    // a bad rule is refused with the reason
    let r = c
        .post(format!("{}/admin/faults/api", s.url()))
        .json(&json!({"mode": "error500", "verbs": ["lsit"], "count": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("unknown verb"));
}

#[tokio::test]
async fn a_silenced_watch_says_nothing_until_its_deadline_and_a_resume_gets_what_it_missed() {
    let s = api_sim().await;
    let c = client();
    let rv = rv_of(&get(&c, &jobs_url(&s)).await.1);
    let opened = Instant::now();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=2&resourceVersion={rv}",
            jobs_url(&s)
        ),
    )
    .await;
    // bookmarks flow (every 100 ms in this sim)
    assert_eq!(w.next(SECS).await.unwrap()["type"], "BOOKMARK");
    let id = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Silence)
                .resources(["jobs"])
                .times(1),
        )
        .await
        .unwrap();
    let (_, missed) = post(&c, &jobs_url(&s), &plain_job("missed", json!({}), 1.0)).await;
    eventually("the watch went silent", SECS, || async {
        (counters(&s).await.silent_watches == 1).then_some(())
    })
    .await;
    // nothing more: neither the Job nor a bookmark at or past it; the
    // stream ends at timeoutSeconds, not before
    let mut after = Vec::new();
    while let Some(ev) = w.next(SECS).await {
        after.push(ev);
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < SECS,
        "{took:?}"
    );
    assert!(
        after
            .iter()
            .all(|e| e["type"] == "BOOKMARK" && rv_of(&e["object"]) < rv_of(&missed)),
        "{after:?}"
    );
    assert_eq!(s.admin().fault_affected(id).await.unwrap(), 1);
    assert_eq!(counters(&s).await.open_watches, 0);
    // the resume from the last resourceVersion the client saw gets it
    let mut resumed = WatchReader::open(
        &c,
        &format!("{}?watch=true&resourceVersion={rv}", jobs_url(&s)),
    )
    .await;
    let ev = resumed.next(SECS).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("missed"))
    );
}

#[tokio::test]
async fn a_watch_silenced_on_arrival_ends_at_its_deadline_or_when_the_admin_closes_it() {
    let s = api_sim().await;
    let c = client();
    post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0)).await;
    s.admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Silence)
                .verbs(["watch"])
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    // not even the initial state
    let opened = Instant::now();
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1",
            jobs_url(&s)
        ),
    )
    .await;
    assert!(w.next(SECS).await.is_none());
    assert!(opened.elapsed() >= Duration::from_millis(900));
    // a list is not a watch
    assert_eq!(names(&get(&c, &jobs_url(&s)).await.1), ["a"]);
    // closing it from the admin ends it early, cleanly
    let mut w = WatchReader::open(&c, &format!("{}?watch=true", jobs_url(&s))).await;
    eventually("the watch is open", SECS, || async {
        (counters(&s).await.open_watches == 1).then_some(())
    })
    .await;
    let closed = s
        .admin()
        .close_watches(&WatchScope {
            resources: vec!["jobs".into()],
            token: None,
        })
        .await
        .unwrap();
    assert_eq!(closed, 1);
    assert!(w.next(SECS).await.is_none());
    // a silenced watch whose client goes away leaves nothing behind
    let w = WatchReader::open(&c, &format!("{}?watch=true", jobs_url(&s))).await;
    eventually("the silent watch is open", SECS, || async {
        let n = counters(&s).await;
        (n.open_watches == 1 && n.silent_watches == 1).then_some(())
    })
    .await;
    drop(w);
    eventually("the silent watch is gone with its client", SECS, || async {
        (counters(&s).await.open_watches == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn kube_rs_resumes_after_a_silenced_watch_times_out_without_relisting() {
    let s = api_sim().await;
    let c = client();
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    post(&c, &jobs_url(&s), &plain_job("a", json!({}), 1.0)).await;
    let (mut rx, task) = watch_jobs(jobs, watcher::Config::default().timeout(2));
    until(&mut rx, "init done", SECS).await;
    eventually("the watch is open", SECS, || async {
        (counters(&s).await.open_watches == 1).then_some(())
    })
    .await;
    let lists = counters(&s).await.requests["list jobs"];
    let id = s
        .admin()
        .add_fault(&FaultRule::new(ApiFaultMode::Silence).times(1))
        .await
        .unwrap();
    post(&c, &jobs_url(&s), &plain_job("b", json!({}), 1.0)).await;
    // seen only once the silent watch reached its deadline and kube-rs
    // watched again from its last resourceVersion
    until(&mut rx, "apply b", Duration::from_secs(20)).await;
    let after = counters(&s).await;
    assert_eq!(after.requests["list jobs"], lists, "no relist");
    assert!(after.requests["watch jobs"] >= 2);
    assert_eq!(after.faults[&id.to_string()], 1);
    task.abort();
}

#[tokio::test]
async fn a_hung_request_lasts_until_the_client_gives_up_and_leaves_nothing_behind() {
    let s = api_sim().await;
    let c = client();
    let admin = s.admin();
    let mut cfg = s.kube_config(None).unwrap();
    cfg.read_timeout = Some(Duration::from_secs(1));
    let jobs: Api<Job> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), NS);
    let id = admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["list"])
                .resources(["jobs"])
                .times(1),
        )
        .await
        .unwrap();
    let t = Instant::now();
    let err = jobs.list(&ListParams::default()).await.unwrap_err();
    // no answer at all: the client's own timeout ended it
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    eventually("the hung handler is gone", SECS, || async {
        (counters(&s).await.hung_requests == 0).then_some(())
    })
    .await;
    assert!(jobs.list(&ListParams::default()).await.is_ok());
    assert_eq!(admin.fault_affected(id).await.unwrap(), 1);

    // a create (with a body) whose client goes away
    admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["create"])
                .times(1),
        )
        .await
        .unwrap();
    let (c2, url) = (c.clone(), jobs_url(&s));
    let pending = tokio::spawn(async move {
        c2.post(url)
            .json(&plain_job("h", json!({}), 1.0))
            .send()
            .await
    });
    eventually("the create hangs", SECS, || async {
        (counters(&s).await.hung_requests == 1).then_some(())
    })
    .await;
    pending.abort();
    eventually("the hung create is gone with its client", SECS, || async {
        (counters(&s).await.hung_requests == 0).then_some(())
    })
    .await;
    assert_eq!(
        get(&c, &format!("{}/h", jobs_url(&s))).await.0,
        404,
        "never carried out"
    );

    // "applied": the create is done, its answer is lost (the ambiguous create)
    admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["create"])
                .times(1)
                .after_applying(),
        )
        .await
        .unwrap();
    let err = c
        .post(jobs_url(&s))
        .timeout(Duration::from_millis(500))
        .json(&plain_job("ambiguous", json!({}), 1.0))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(get(&c, &format!("{}/ambiguous", jobs_url(&s))).await.0, 200);
    let (code, st) = post(&c, &jobs_url(&s), &plain_job("ambiguous", json!({}), 1.0)).await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")));
    admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .verbs(["create"])
                .times(1)
                .after_applying(),
        )
        .await
        .unwrap();
    assert_eq!(
        post(&c, &jobs_url(&s), &plain_job("written", json!({}), 1.0))
            .await
            .0,
        500
    );
    assert_eq!(get(&c, &format!("{}/written", jobs_url(&s))).await.0, 200);
    eventually("no hung handler left", SECS, || async {
        (counters(&s).await.hung_requests == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_429_storm_answers_as_priority_and_fairness_and_clients_honour_retry_after() {
    let s = api_sim().await;
    let c = client();
    post(&c, &jobs_url(&s), &plain_job("j", json!({}), 1.0)).await;
    let id = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Throttle)
                .verbs(["list"])
                .resources(["jobs"])
                .retry_after(1)
                .for_seconds(4.0),
        )
        .await
        .unwrap();
    let r = c.get(jobs_url(&s)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert!(
        r.headers()
            .contains_key("x-kubernetes-pf-prioritylevel-uid")
    );
    assert_eq!(
        r.text().await.unwrap(),
        "Too many requests, please try again later.\n"
    );
    // kube-rs without its retry layer sees the 429 (not a Status: the text)
    let mut cfg = s.kube_config(None).unwrap();
    cfg.default_retry = false;
    let no_retry: Api<Job> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), NS);
    match no_retry.list(&ListParams::default()).await {
        Err(kube::Error::Api(st)) => assert_eq!(
            (st.code, st.message.as_str()),
            (429, "Too many requests, please try again later.")
        ),
        other => panic!("{other:?}"),
    }
    // kube-rs's default client waits Retry-After and retries until the storm ends
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let list = jobs.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let affected = s.admin().fault_affected(id).await.unwrap();
    assert!(affected >= 4, "retried through the storm: {affected}");
    // 503 with Retry-After: retried too
    let u = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Unavailable)
                .verbs(["get"])
                .retry_after(1)
                .times(2),
        )
        .await
        .unwrap();
    assert!(jobs.get("j").await.is_ok());
    assert_eq!(s.admin().fault_affected(u).await.unwrap(), 2);
}

#[tokio::test]
async fn a_restart_cuts_every_connection_refuses_new_ones_and_forces_a_relist() {
    let s = api_sim().await;
    let c = client();
    let admin = s.admin();
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let (_, first) = post(&c, &jobs_url(&s), &plain_job("before", json!({}), 1.0)).await;
    let (mut rx, task) = watch_jobs(jobs, watcher::Config::default());
    until(&mut rx, "apply before", SECS).await;
    // a raw watch and a hung request, both open across the restart
    let mut raw = c
        .get(format!(
            "{}?watch=true&resourceVersion={}",
            jobs_url(&s),
            rv_of(&first)
        ))
        .send()
        .await
        .unwrap();
    admin
        .add_fault(&FaultRule::new(ApiFaultMode::Hang).verbs(["get"]).times(1))
        .await
        .unwrap();
    let (c2, url) = (c.clone(), format!("{}/before", jobs_url(&s)));
    let hung = tokio::spawn(async move { c2.get(url).send().await });
    eventually("the watches are open and the get hangs", SECS, || async {
        let n = counters(&s).await;
        (n.open_watches == 2 && n.hung_requests == 1).then_some(())
    })
    .await;
    let lists = counters(&s).await.requests["list jobs"];

    let report = admin.restart(3.0).await.unwrap();
    assert!(report.connections_cut >= 3, "{report:?}");
    assert_eq!(report.watches_closed, 2);
    // the open watch breaks, the hung request gets no answer
    let broken = tokio::time::timeout(SECS, async {
        loop {
            match raw.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
    })
    .await
    .unwrap();
    assert!(broken, "the watch stream is cut, not ended");
    let answer = tokio::time::timeout(SECS, hung).await.unwrap().unwrap();
    assert!(answer.is_err(), "{answer:?}");
    // while down, connections are refused
    eventually("a connection is refused", SECS, || async {
        match reqwest::Client::new().get(jobs_url(&s)).send().await {
            Err(e) if e.is_connect() => Some(()),
            _ => None,
        }
    })
    .await;
    // the cluster goes on meanwhile
    let job: Value = plain_job("while-down", json!({}), 1.0);
    s.sim().create_job(NS, job).unwrap();
    // back up: the watcher's resume gets 410, it relists and sees the Job
    let seen = until(&mut rx, "apply while-down", Duration::from_secs(40)).await;
    assert!(seen.iter().any(|l| l == "error 410"), "{seen:?}");
    let after = counters(&s).await;
    assert!(after.requests["list jobs"] > lists, "relisted");
    assert_eq!((after.restarts, after.hung_requests), (1, 0));
    // an old resourceVersion is gone
    let mut old = WatchReader::open(
        &c,
        &format!(
            "{}?watch=true&resourceVersion={}",
            jobs_url(&s),
            rv_of(&first)
        ),
    )
    .await;
    let ev = old.next(SECS).await.unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410))
    );
    task.abort();
}

fn kubectl(s: &SimHandle, home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(s.kubeconfig_path())
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn kubectl_shows_an_injected_error_and_waits_out_a_throttle() {
    if !kubectl_on_path() {
        println!(
            "SKIP kubectl_shows_an_injected_error_and_waits_out_a_throttle: kubectl is not on PATH"
        );
        return;
    }
    let s = api_sim().await;
    post(&client(), &jobs_url(&s), &plain_job("j", json!({}), 1.0)).await;
    let home = tempfile::tempdir().unwrap();
    let id = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list"])
                .resources(["jobs"])
                .times(1),
        )
        .await
        .unwrap();
    let s = std::sync::Arc::new(s);
    let (s2, h) = (s.clone(), home.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || kubectl(&s2, &h, &["get", "jobs"]))
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("Error from server (InternalError): Internal error occurred: injected fault"),
        "{err}"
    );
    assert_eq!(s.admin().fault_affected(id).await.unwrap(), 1);
    // client-go waits Retry-After on a 429 and tries again
    let id = s
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Throttle)
                .verbs(["list"])
                .resources(["jobs"])
                .retry_after(1)
                .times(2),
        )
        .await
        .unwrap();
    let (s2, h) = (s.clone(), home.path().to_path_buf());
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || kubectl(&s2, &h, &["get", "jobs"]))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains('j'));
    assert!(
        t.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(s.admin().fault_affected(id).await.unwrap(), 2);
}

#[tokio::test]
async fn requests_are_counted_per_user_agent_and_reset() {
    let s = api_sim().await;
    let url = jobs_url(&s);
    for agent in ["tcab-admitter/1", "tcab-reaper/1", "tcab-reaper/1"] {
        let answer = client()
            .get(&url)
            .header("user-agent", agent)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
    }
    client().get(&url).send().await.unwrap();
    let c = counters(&s).await;
    assert_eq!(c.requests["list jobs"], 4, "{c:?}");
    assert_eq!(c.requests_by_agent["tcab-admitter/1"]["list jobs"], 1);
    assert_eq!(c.requests_by_agent["tcab-reaper/1"]["list jobs"], 2);
    // A client without a User-Agent is counted under "".
    assert_eq!(c.requests_by_agent[""]["list jobs"], 1, "{c:?}");
    s.admin().reset_counters().await.unwrap();
    assert!(counters(&s).await.requests_by_agent.is_empty());
}
