//! The proxy in front of kube-sim: each fault mode, scoping and bounds,
//! silent and hung requests, connection cuts and restarts, kube-sim's admin
//! client, kube-rs and kubectl through a kubeconfig.

use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tcab_kube_sim::admin::AdminError;
use tcab_kube_sim::{ApiFault, ApiFaultMode, FaultRule, WatchScope};
use tcab_testkit::wait::{settled, until};

fn scoped(mode: ApiFaultMode) -> FaultRule {
    FaultRule::new(mode).token(DISPATCHER)
}

#[tokio::test]
async fn each_answering_mode_answers_exactly_as_kube_sim_and_never_reaches_the_api_server() {
    let r = rig().await;
    let c = client();
    let rules = [
        scoped(ApiFaultMode::Error500),
        scoped(ApiFaultMode::Unavailable).retry_after(2),
        scoped(ApiFaultMode::Unavailable),
        scoped(ApiFaultMode::Throttle).retry_after(3),
        scoped(ApiFaultMode::Throttle),
    ];
    for rule in rules {
        let rule = rule.verbs(["list"]).resources(["jobs"]).times(1);
        r.admin().add_fault(&rule).await.unwrap();
        let via_proxy = answer(c.get(r.jobs()).bearer_auth(DISPATCHER)).await;
        r.sim_admin().add_fault(&rule).await.unwrap();
        let from_sim = answer(c.get(r.sim_jobs()).bearer_auth(DISPATCHER)).await;
        assert_eq!(via_proxy, from_sim, "{rule:?}");
        assert!(via_proxy.status >= 429, "{via_proxy:?}");
    }
    // The five faulted lists never reached kube-sim: it counted only its own
    // five (the ones it faulted itself).
    let sim = r.sim_admin().counters().await.unwrap();
    assert_eq!(sim.requests.get("list jobs"), Some(&5));
    let proxy = r.admin().counters().await.unwrap();
    assert_eq!(proxy.requests.get("list jobs"), Some(&5));
    assert_eq!(proxy.faults.values().sum::<u64>(), 5);
    // and the rules are spent: the next list goes through
    assert_eq!(
        answer(c.get(r.jobs()).bearer_auth(DISPATCHER)).await.status,
        200
    );
}

#[tokio::test]
async fn a_rule_scoped_to_a_token_spares_every_other_client_and_delay_forwards_late() {
    let r = rig().await;
    let c = client();
    let admin_token = r.sim.admin_token().to_string();
    let id = r
        .admin()
        .add_fault(
            &scoped(ApiFaultMode::Delay)
                .delay(Duration::from_millis(400))
                .verbs(["list"])
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    let other = r
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .token("someone-else")
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    for _ in 0..3 {
        let a = answer(c.get(r.jobs()).bearer_auth(&admin_token)).await;
        assert_eq!(a.status, 200);
    }
    assert_eq!(r.admin().fault_affected(id).await.unwrap(), 0);
    let t = Instant::now();
    let a = answer(c.get(r.jobs()).bearer_auth(DISPATCHER)).await;
    assert_eq!(a.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        serde_json::from_str::<Value>(&a.body).unwrap()["kind"],
        "JobList"
    );
    // a create is not a list: not delayed, not counted by the rule
    let a = answer(c.post(r.jobs()).bearer_auth(DISPATCHER).json(&job("j1"))).await;
    assert_eq!(a.status, 201);
    assert_eq!(r.admin().fault_affected(id).await.unwrap(), 1);
    assert_eq!(r.admin().fault_affected(other).await.unwrap(), 0);
    // requests by identity: the named token, another one by its digest
    let counters = r.counters().await;
    let by = &counters["requests_by_identity"];
    assert_eq!(by["dispatcher"]["list jobs"], 1);
    assert_eq!(by["dispatcher"]["create jobs"], 1);
    let others: Vec<&String> = by
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "dispatcher")
        .collect();
    assert_eq!(others.len(), 1, "{by}");
    assert!(others[0].starts_with("token-"), "{by}");
    assert!(!counters.to_string().contains(&admin_token));
    assert!(!counters.to_string().contains(DISPATCHER));
}

#[tokio::test]
async fn a_rule_ends_after_its_count_or_its_seconds_whichever_first() {
    let r = rig().await;
    let c = client();
    let get = || answer(c.get(r.jobs()).bearer_auth(DISPATCHER));
    let id = r
        .admin()
        .add_fault(&scoped(ApiFaultMode::Error500).times(2).for_seconds(60.0))
        .await
        .unwrap();
    assert_eq!(get().await.status, 500);
    assert_eq!(get().await.status, 500);
    assert_eq!(get().await.status, 200);
    let added = Instant::now();
    let timed = r
        .admin()
        .add_fault(&scoped(ApiFaultMode::Throttle).times(1000).for_seconds(0.8))
        .await
        .unwrap();
    assert_eq!(get().await.status, 429);
    until("the throttle's window closes", SECS, || async {
        (get().await.status == 200).then_some(())
    })
    .await;
    assert!(added.elapsed() >= Duration::from_millis(800));
    let listed = r.admin().faults().await.unwrap();
    let by_id = |i: u64| listed.iter().find(|f| f.id == i).unwrap();
    assert_eq!(
        (by_id(id).remaining, by_id(id).affected, by_id(id).live),
        (Some(0), 2, false)
    );
    assert!(!by_id(timed).live && by_id(timed).affected >= 1);
    assert!(by_id(timed).token_scoped && by_id(timed).rule.token.is_none());
}

#[tokio::test]
async fn a_silenced_watch_passes_nothing_until_its_timeout_and_a_resume_gets_what_it_missed() {
    let r = rig().await;
    let c = client();
    let rv0 = r.create_job("a").await;
    let mut w = watch_lines(
        c.get(format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={rv0}",
            r.jobs()
        ))
        .bearer_auth(DISPATCHER),
    )
    .await;
    r.create_job("b").await;
    let (b, _) = until_seen(&mut w, "ADDED b", SECS, |s| is_event(s, "ADDED", "b")).await;
    let (_, _, rv_b) = event(&b).unwrap();
    // kube-sim's own watch of the same Jobs, for comparison
    let mut direct = watch_lines(
        c.get(format!(
            "{}?watch=true&resourceVersion={rv_b}",
            r.sim_jobs()
        ))
        .bearer_auth(r.sim.admin_token()),
    )
    .await;
    let id = r
        .admin()
        .add_fault(
            &scoped(ApiFaultMode::Silence)
                .verbs(["watch"])
                .resources(["jobs"])
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    r.create_job("c").await;
    until_seen(&mut direct, "ADDED c on kube-sim", SECS, |s| {
        is_event(s, "ADDED", "c")
    })
    .await;
    settled("the proxy's watch is silent", SECS, async || {
        let n = r.counters().await;
        (n["silent_watches"] == 1 && n["open_watches"] == 1)
            .then_some(())
            .ok_or(n)
    })
    .await;
    // What the proxy passed on before the silence took hold (bookmarks sent
    // while the steps above ran, many on a busy machine) is already read.
    let mut early = None;
    while let Ok(seen) = w.try_recv() {
        assert!(!is_event(&seen, "ADDED", "c"), "{seen:?}");
        if matches!(seen, Seen::End | Seen::Broken(_)) {
            early = Some(seen);
            break;
        }
    }
    // Nothing more, not even bookmarks (kube-sim sends one every 100 ms),
    // until kube-sim ends the watch at its timeout: a clean end.
    let (end, between) = match early {
        Some(end) => (end, vec![]),
        None => {
            until_seen(&mut w, "the end of the watch", SECS, |s| {
                matches!(s, Seen::End | Seen::Broken(_))
            })
            .await
        }
    };
    assert_eq!(end, Seen::End);
    assert!(
        between.iter().all(|s| !is_event(s, "ADDED", "c")),
        "{between:?}"
    );
    assert!(
        between.len() <= 1,
        "at most the event that met the rule was cut: {between:?}"
    );
    assert_eq!(r.admin().fault_affected(id).await.unwrap(), 1);
    settled("the watch is gone", SECS, async || {
        let n = r.counters().await;
        (n["open_watches"] == 0).then_some(()).ok_or(n)
    })
    .await;

    // A watch silenced on arrival opens and says nothing until its timeout.
    let t = Instant::now();
    let mut w2 = watch_lines(
        c.get(format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1",
            r.jobs()
        ))
        .bearer_auth(DISPATCHER),
    )
    .await;
    let (end, between) = until_seen(&mut w2, "the end", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert_eq!((end, between), (Seen::End, vec![]));
    assert!(t.elapsed() >= Duration::from_millis(900));

    // The rule over, a resume from the last version seen gets what it missed.
    r.admin().clear_faults().await.unwrap();
    let mut w3 = watch_lines(
        c.get(format!(
            "{}?watch=true&timeoutSeconds=5&resourceVersion={rv_b}",
            r.jobs()
        ))
        .bearer_auth(DISPATCHER),
    )
    .await;
    until_seen(&mut w3, "ADDED c on resume", SECS, |s| {
        is_event(s, "ADDED", "c")
    })
    .await;
}

#[tokio::test]
async fn the_admin_closes_open_watches_cleanly_and_a_rule_can_close_those_in_its_scope() {
    let r = rig().await;
    let c = client();
    let open = |token: &'static str| {
        watch_lines(
            c.get(format!("{}?watch=true&timeoutSeconds=60", r.jobs()))
                .bearer_auth(token),
        )
    };
    let mut mine = open(DISPATCHER).await;
    let mut theirs = open("other-token").await;
    settled("two open watches", SECS, async || {
        let n = r.counters().await;
        (n["open_watches"] == 2).then_some(()).ok_or(n)
    })
    .await;
    let closed = r
        .admin()
        .close_watches(&WatchScope {
            resources: vec!["jobs".into()],
            token: Some(DISPATCHER.into()),
        })
        .await
        .unwrap();
    assert_eq!(closed, 1);
    let (end, _) = until_seen(&mut mine, "the end", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert_eq!(end, Seen::End);
    // an outage rule that closes the watches in its scope: the re-watch
    // meets it
    r.admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list", "watch"])
                .resources(["jobs"])
                .token("other-token")
                .for_seconds(60.0)
                .closing_open_watches(),
        )
        .await
        .unwrap();
    let (end, _) = until_seen(&mut theirs, "the end", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert_eq!(end, Seen::End);
    let again = answer(
        c.get(format!("{}?watch=true", r.jobs()))
            .bearer_auth("other-token"),
    )
    .await;
    assert_eq!(again.status, 500);
}

#[tokio::test]
async fn a_hung_request_is_never_forwarded_unless_applied_and_lasts_until_its_client_leaves() {
    let r = rig().await;
    let c = client();
    let exists = |name: &'static str| {
        let url = format!("{}/{name}", r.sim_jobs());
        let token = r.sim.admin_token().to_string();
        let c = c.clone();
        async move { c.get(url).bearer_auth(token).send().await.unwrap().status() == 200 }
    };
    let hung = async || r.counters().await["hung_requests"].as_u64().unwrap();
    // plain hang: read, never forwarded, never answered
    r.admin()
        .add_fault(&scoped(ApiFaultMode::Hang).verbs(["create"]).times(1))
        .await
        .unwrap();
    let err = c
        .post(r.jobs())
        .bearer_auth(DISPATCHER)
        .timeout(Duration::from_millis(600))
        .json(&job("never"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(!exists("never").await, "a hung create is never carried out");
    settled("nothing hangs once the client left", SECS, async || {
        let n = hung().await;
        (n == 0).then_some(()).ok_or(n)
    })
    .await;
    // hang after applying: the Job is made, the answer never comes
    r.admin()
        .add_fault(
            &scoped(ApiFaultMode::Hang)
                .verbs(["create"])
                .times(1)
                .after_applying(),
        )
        .await
        .unwrap();
    let (c2, url) = (c.clone(), r.jobs());
    let pending = tokio::spawn(async move {
        c2.post(url)
            .bearer_auth(DISPATCHER)
            .json(&job("ambiguous"))
            .send()
            .await
    });
    settled("the applied create hangs", SECS, async || {
        let n = hung().await;
        (n == 1).then_some(()).ok_or(n)
    })
    .await;
    assert!(exists("ambiguous").await, "carried out before the hang");
    pending.abort();
    settled(
        "the hung create is gone with its client",
        SECS,
        async || {
            let n = hung().await;
            (n == 0).then_some(()).ok_or(n)
        },
    )
    .await;
    let again = answer(
        c.post(r.jobs())
            .bearer_auth(DISPATCHER)
            .json(&job("ambiguous")),
    )
    .await;
    assert_eq!(again.status, 409);
    // 500 and 503 after applying: written, then the answer replaced
    for (mode, name, code) in [
        (ApiFaultMode::Error500, "written-500", 500),
        (ApiFaultMode::Unavailable, "written-503", 503),
    ] {
        r.admin()
            .add_fault(&scoped(mode).verbs(["create"]).times(1).after_applying())
            .await
            .unwrap();
        let a = answer(c.post(r.jobs()).bearer_auth(DISPATCHER).json(&job(name))).await;
        assert_eq!(a.status, code);
        assert!(exists(name).await, "{name}");
    }
    // a hung watch sends no headers either
    r.admin()
        .add_fault(&scoped(ApiFaultMode::Hang).verbs(["watch"]).times(1))
        .await
        .unwrap();
    let err = c
        .get(format!("{}?watch=true", r.jobs()))
        .bearer_auth(DISPATCHER)
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
}

#[tokio::test]
async fn a_cut_breaks_every_connection_and_a_restart_also_refuses_new_ones_while_down() {
    let r = rig().await;
    let c = client();
    let mut w = watch_lines(
        c.get(format!("{}?watch=true&timeoutSeconds=60", r.jobs()))
            .bearer_auth(DISPATCHER),
    )
    .await;
    let cut: Value = client()
        .post(format!("{}/admin/connections/cut", r.proxy.admin_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(cut["connections_cut"].as_u64().unwrap() >= 1, "{cut}");
    let (end, _) = until_seen(&mut w, "the watch breaks", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert!(matches!(end, Seen::Broken(_)), "{end:?}");
    assert_eq!(answer(c.get(r.jobs())).await.status, 200, "still serving");

    // a restart: a watch and a hung request cut, the port closed for 1 s
    let mut w = watch_lines(
        c.get(format!("{}?watch=true&timeoutSeconds=60", r.jobs()))
            .bearer_auth(DISPATCHER),
    )
    .await;
    r.admin()
        .add_fault(&scoped(ApiFaultMode::Hang).verbs(["get"]).times(1))
        .await
        .unwrap();
    let hung = tokio::spawn({
        let (c, url) = (c.clone(), format!("{}/x", r.jobs()));
        async move { c.get(url).bearer_auth(DISPATCHER).send().await }
    });
    settled("the get hangs", SECS, async || {
        let n = r.counters().await;
        (n["hung_requests"] == 1).then_some(()).ok_or(n)
    })
    .await;
    let t = Instant::now();
    let report = r.admin().restart(1.0).await.unwrap();
    assert!(report.connections_cut >= 2, "{report:?}");
    assert_eq!(report.watches_closed, 1);
    assert_eq!(report.resource_version, "");
    let (end, _) = until_seen(&mut w, "the watch breaks", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert!(matches!(end, Seen::Broken(_)), "{end:?}");
    let got = hung.await.unwrap();
    assert!(got.is_err(), "the hung get got no answer: {got:?}");
    assert!(
        tokio::net::TcpStream::connect(r.proxy.addr())
            .await
            .is_err(),
        "refused while down"
    );
    until("the port reopens", SECS, || async {
        tokio::net::TcpStream::connect(r.proxy.addr())
            .await
            .ok()
            .map(drop)
    })
    .await;
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    let counters = r.admin().counters().await.unwrap();
    assert_eq!((counters.restarts, counters.hung_requests), (1, 0));
}

#[tokio::test]
async fn a_restart_with_a_hook_keeps_the_port_closed_until_the_hook_is_done() {
    let calls = Arc::new(AtomicU32::new(0));
    let hook_calls = calls.clone();
    let hook: tcab_api_proxy::RestartHook = Arc::new(move || {
        let n = hook_calls.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            // the "API server" takes a while to come back; the second
            // restart's fails
            tokio::time::sleep(Duration::from_millis(700)).await;
            anyhow::ensure!(n == 1, "the API server did not come back");
            Ok(())
        })
    });
    let r = rig_with(|o| o.restart_hook(hook)).await;
    let c = client();
    let t = Instant::now();
    let report = r.admin().restart(0.0).await.unwrap();
    assert_eq!(report.watches_closed, 0);
    assert!(
        tokio::net::TcpStream::connect(r.proxy.addr())
            .await
            .is_err(),
        "refused while the hook runs"
    );
    until("the port reopens", SECS, || async {
        tokio::net::TcpStream::connect(r.proxy.addr())
            .await
            .ok()
            .map(drop)
    })
    .await;
    assert!(
        t.elapsed() >= Duration::from_millis(650),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(answer(c.get(r.jobs())).await.status, 200);
    // a failing hook is counted and named; the port reopens all the same
    r.admin().restart(0.0).await.unwrap();
    let n = until("the failed hook is counted", SECS, || async {
        let n: Value = client()
            .get(format!("{}/admin/counters", r.proxy.admin_url()))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (n["restart_failures"] == 1).then_some(n)
    })
    .await;
    assert!(
        n["last_restart_error"]
            .as_str()
            .unwrap()
            .contains("did not come back"),
        "{n}"
    );
    assert_eq!(n["restarts"], 2);
    assert_eq!(answer(c.get(r.jobs())).await.status, 200);
}

#[tokio::test]
async fn kube_sims_admin_client_drives_the_proxy_and_learns_who_offers_the_rest() {
    let r = rig().await;
    let admin = r.admin();
    assert!(admin.counters().await.unwrap().requests.is_empty());
    // the older count-bound form
    admin
        .api_fault(&ApiFault {
            mode: ApiFaultMode::Throttle,
            count: 1,
            retry_after_seconds: Some(5),
            delay_ms: None,
            resource: Some("jobs".into()),
            verb: Some("list".into()),
        })
        .await
        .unwrap();
    let a = answer(client().get(r.jobs())).await;
    assert_eq!((a.status, a.retry_after.as_deref()), (429, Some("5")));
    let id = admin
        .add_fault(&scoped(ApiFaultMode::Error500).for_seconds(60.0))
        .await
        .unwrap();
    assert_eq!(id, 2);
    let listed = admin.faults().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed[1].live && listed[1].token_scoped && listed[1].seconds_left.unwrap() > 50.0);
    admin.remove_fault(id).await.unwrap();
    assert!(!admin.faults().await.unwrap()[1].live);
    let missing = admin.remove_fault(99).await.unwrap_err();
    assert!(
        matches!(missing, AdminError::Status { status: 404, .. }),
        "{missing}"
    );
    admin
        .add_fault(&scoped(ApiFaultMode::Error500).times(3))
        .await
        .unwrap();
    admin.clear_faults().await.unwrap();
    assert!(admin.faults().await.unwrap().iter().all(|f| !f.live));
    assert_eq!(
        answer(client().get(r.jobs()).bearer_auth(DISPATCHER))
            .await
            .status,
        200
    );
    let counters = admin.counters().await.unwrap();
    assert_eq!(counters.requests.get("list jobs"), Some(&2));
    assert_eq!(counters.faults.get("1"), Some(&1));
    assert!(counters.max_live_jobs.is_empty());
    admin.reset_counters().await.unwrap();
    let counters = admin.counters().await.unwrap();
    assert!(counters.requests.is_empty() && counters.faults.is_empty());
    // a bad rule is refused as kube-sim refuses it
    let bad = client()
        .post(format!("{}/admin/faults/api", r.proxy.admin_url()))
        .json(&serde_json::json!({"mode": "error500"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("a bound"));
    // a bearer token other than the admin's is refused
    let refused = client()
        .get(format!("{}/admin/counters", r.proxy.admin_url()))
        .bearer_auth(DISPATCHER)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    // what the node agent or the API itself offers on a real cluster
    let not_here = |e: AdminError| match e {
        AdminError::Status {
            status: 404, body, ..
        } => body,
        other => panic!("{other}"),
    };
    let body = not_here(admin.oom_kill(NS, "p").await.unwrap_err());
    assert!(body.contains("node agent"), "{body}");
    let body = not_here(admin.crash_node("n").await.unwrap_err());
    assert!(body.contains("node agent"), "{body}");
    let body = not_here(admin.evict(NS, "p").await.unwrap_err());
    assert!(body.contains("eviction"), "{body}");
    let body = not_here(admin.compact().await.unwrap_err());
    assert!(body.contains("compaction"), "{body}");
    let body = not_here(admin.never_pod_next(1).await.unwrap_err());
    assert!(body.contains("kube-sim alone"), "{body}");
    let body = not_here(admin.audit(0).await.unwrap_err());
    assert!(body.contains("audit log"), "{body}");
    let body = not_here(admin.set_unpullable("x:1", true).await.unwrap_err());
    assert!(body.contains("node agent"), "{body}");
}

#[tokio::test]
async fn kube_rs_and_kubectl_use_the_proxy_through_a_kubeconfig() {
    let r = rig().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    r.proxy.write_kubeconfig(&path, DISPATCHER, NS).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    assert_eq!(cfg.default_namespace, NS);
    let mut no_retry = cfg.clone();
    no_retry.default_retry = false;
    let client = kube::Client::try_from(cfg).unwrap();
    let jobs: Api<Job> = Api::default_namespaced(client);
    let j: Job = serde_json::from_value(job("via-kube-rs")).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    assert_eq!(
        jobs.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    // kube-rs retries a 429 by default, after its Retry-After
    let id = r
        .admin()
        .add_fault(
            &scoped(ApiFaultMode::Throttle)
                .verbs(["list"])
                .retry_after(1)
                .times(1),
        )
        .await
        .unwrap();
    let t = Instant::now();
    assert_eq!(
        jobs.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.admin().fault_affected(id).await.unwrap(), 1);
    assert_eq!(
        r.counters().await["requests_by_identity"]["dispatcher"]["list jobs"],
        3,
        "the list, its 429, the retry"
    );
    // without its retries the 429 reaches the caller
    let jobs: Api<Job> = Api::default_namespaced(kube::Client::try_from(no_retry).unwrap());
    r.admin()
        .add_fault(&scoped(ApiFaultMode::Throttle).verbs(["list"]).times(1))
        .await
        .unwrap();
    match jobs.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429),
        other => panic!("{other:?}"),
    }

    let Some(kubectl) = kubectl() else {
        println!("SKIP: kubectl through the proxy: no kubectl on PATH or in target/control-plane");
        return;
    };
    // Over plain HTTP kubectl works but sends no credentials (client-go
    // applies a kubeconfig user only to an https server): it is anonymous.
    let out = run_kubectl(&kubectl, &path, dir.path(), &["get", "jobs", "-o", "name"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "job.batch/via-kube-rs"
    );
    assert_eq!(
        r.counters().await["requests_by_identity"]["anonymous"]["list jobs"],
        1
    );
}

#[tokio::test]
async fn over_https_kubectl_presents_its_token_and_meets_the_rules_scoped_to_it() {
    let Some(kubectl) = kubectl() else {
        println!(
            "SKIP: kubectl through the HTTPS proxy: no kubectl on PATH or in target/control-plane"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((cert, key)) = self_signed(dir.path()) else {
        println!("SKIP: kubectl through the HTTPS proxy: no openssl on PATH to make a certificate");
        return;
    };
    let r = rig_with(|o| o.serve_tls(cert, key)).await;
    assert!(r.proxy.url().starts_with("https://127.0.0.1:"));
    let path = dir.path().join("kubeconfig");
    r.proxy.write_kubeconfig(&path, DISPATCHER, NS).unwrap();
    // kube-rs, from the same kubeconfig (the certificate in it)
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(kube::Client::try_from(cfg).unwrap());
    let j: Job = serde_json::from_value(job("over-tls")).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    // and the handle's own client
    let jobs: Api<Job> = Api::default_namespaced(r.proxy.kube_client(DISPATCHER, NS).unwrap());
    assert_eq!(
        jobs.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let out = run_kubectl(&kubectl, &path, dir.path(), &["get", "jobs", "-o", "name"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "job.batch/over-tls"
    );
    let by = r.counters().await["requests_by_identity"].clone();
    assert_eq!(by["dispatcher"]["list jobs"], 2, "{by}");
    assert!(by.get("anonymous").is_none(), "{by}");
    r.admin()
        .add_fault(
            &scoped(ApiFaultMode::Error500)
                .verbs(["list"])
                .resources(["jobs"])
                .times(1),
        )
        .await
        .unwrap();
    let out = run_kubectl(&kubectl, &path, dir.path(), &["get", "jobs"]).await;
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Error from server (InternalError): Internal error occurred: injected fault"),
        "{err}"
    );
}

/// kubectl with `kubeconfig`, `HOME` in `home` (its cache), on tokio's
/// Command (the proxy and kube-sim serve on the test's thread).
async fn run_kubectl(
    kubectl: &std::path::Path,
    kubeconfig: &std::path::Path,
    home: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", home)
        .output()
        .await
        .unwrap()
}

/// A serving certificate for 127.0.0.1 followed by its self-signed CA, and
/// its key (PEM), as kube-apiserver makes its own; made with openssl, `None`
/// without it.
fn self_signed(dir: &std::path::Path) -> Option<(Vec<u8>, Vec<u8>)> {
    std::process::Command::new("openssl")
        .arg("version")
        .output()
        .ok()?;
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    for args in [
        "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout ca.key -out ca.crt",
        "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout proxy.key -out proxy.csr",
        "x509 -req -in proxy.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext.cnf -out proxy.crt",
    ] {
        let out = std::process::Command::new("openssl")
            .args(args.split(' '))
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args}: {out:?}");
    }
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let mut chain = read("proxy.crt");
    chain.extend(read("ca.crt"));
    Some((chain, read("proxy.key")))
}

/// kubectl on PATH, else the one the control-plane build made.
pub fn kubectl() -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("kubectl"))
            .find(|k| k.is_file())
    });
    on_path.or_else(|| {
        crate::cluster::control_plane_bin()
            .map(|d| d.join("kubectl"))
            .filter(|k| k.is_file())
    })
}
