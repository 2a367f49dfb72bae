//! The proxy in front of the real kube-apiserver (built by
//! `scripts/control-plane build`; one `SKIP:` line without it): a throttle
//! rule as a kube-rs client meets it, a silenced watch, real 429s from the
//! APF helper (compared with the proxy's own), a real 410 after etcd
//! compaction, and a restart whose hook restarts the API server.
//!
//! One control plane for the whole test (one etcd and API server start),
//! its steps in order; the cluster is stopped by PID when the test ends,
//! passing or failing.

use crate::cluster::{self, Cluster};
use crate::common::{Seen, client, event, is_event, until_seen, watch_lines};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tcab_api_faults::answers::APF_REJECTION_BODY;
use tcab_api_proxy::apf::ThrottleLevel;
use tcab_api_proxy::{ProxyHandle, ProxyOptions, UpstreamOptions};
use tcab_kube_sim::{AdminClient, ApiFaultMode, FaultRule};
use tcab_testkit::wait::{settled, until};

const NS: &str = "default";
const SECS: Duration = Duration::from_secs(15);

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

/// An answer with the headers APF sets.
#[derive(Debug, Clone)]
struct Raw {
    status: u16,
    body: String,
    content_type: String,
    retry_after: Option<u64>,
    priority_level_uid: Option<String>,
}

async fn raw(rb: reqwest::RequestBuilder) -> Raw {
    let r = rb.send().await.unwrap();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (content_type, retry_after, pl) = (
        h("content-type").unwrap_or_default(),
        h("retry-after").and_then(|v| v.parse().ok()),
        h("x-kubernetes-pf-prioritylevel-uid"),
    );
    Raw {
        status: r.status().as_u16(),
        body: r.text().await.unwrap(),
        content_type,
        retry_after,
        priority_level_uid: pl,
    }
}

struct Real {
    cp: Cluster,
    proxy: ProxyHandle,
    admin: AdminClient,
}

impl Real {
    fn configmaps(&self) -> String {
        format!(
            "{}/api/v1/namespaces/{NS}/configmaps",
            self.proxy.admin_url()
        )
    }
    /// ConfigMaps straight on the API server, as its admin.
    async fn direct(&self) -> Api<ConfigMap> {
        Api::namespaced(self.cp.client(&self.cp.tokens.admin).await.unwrap(), NS)
    }
    /// ConfigMaps through the proxy, as the dispatcher.
    fn through(&self) -> Api<ConfigMap> {
        Api::namespaced(
            self.proxy
                .kube_client(&self.cp.tokens.dispatcher, NS)
                .unwrap(),
            NS,
        )
    }
    async fn counters(&self) -> serde_json::Value {
        client()
            .get(format!("{}/admin/counters", self.proxy.admin_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_proxy_in_front_of_the_real_api_server() {
    if let Some(why) = cluster::missing() {
        println!("SKIP: the fault proxy on the real API server: {why}");
        return;
    }
    let t = Instant::now();
    let cp = Cluster::start("2s")
        .await
        .expect("etcd and kube-apiserver start");
    println!("control plane up in {:?}", t.elapsed());
    let (cert, key) = cp.serving_pair();
    let opts = ProxyOptions::new(UpstreamOptions {
        url: cp.url.clone(),
        ca_pem: Some(cp.ca_pem.clone()),
    })
    .identity(cp.tokens.dispatcher.clone(), "dispatcher")
    .serve_tls(cert, key)
    .restart_hook(cp.restart_hook());
    let proxy = tcab_api_proxy::spawn(opts).await.unwrap();
    let r = Real {
        admin: AdminClient::new(&proxy.admin_url()),
        proxy,
        cp,
    };
    let fake = throttle_met_by_kube_rs(&r).await;
    kubectl_through_the_proxy(&r).await;
    silenced_watch(&r).await;
    real_429s_from_the_apf_helper(&r, &fake).await;
    real_410_after_compaction(&r).await;
    restart_through_the_hook(&r).await;
}

/// A throttle rule scoped to the dispatcher's token: its kube-rs client
/// gets 429, the admin's does not. Returns the proxy's 429 for comparison
/// with APF's own.
async fn throttle_met_by_kube_rs(r: &Real) -> Raw {
    let rule = FaultRule::new(ApiFaultMode::Throttle)
        .token(&r.cp.tokens.dispatcher)
        .verbs(["list"])
        .resources(["configmaps"])
        .retry_after(2)
        .times(1);
    let id = r.admin.add_fault(&rule).await.unwrap();
    // the admin's list through the proxy is not the rule's
    let admin_through: Api<ConfigMap> =
        Api::namespaced(r.proxy.kube_client(&r.cp.tokens.admin, NS).unwrap(), NS);
    admin_through.list(&ListParams::default()).await.unwrap();
    assert_eq!(r.admin.fault_affected(id).await.unwrap(), 0);
    // kube-rs retries the dispatcher's list after the Retry-After
    let t = Instant::now();
    r.through().list(&ListParams::default()).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.admin.fault_affected(id).await.unwrap(), 1);
    // without its retries it sees the 429
    let mut cfg = r.proxy.kube_config(&r.cp.tokens.dispatcher, NS).unwrap();
    cfg.default_retry = false;
    let no_retry: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), NS);
    r.admin.add_fault(&rule).await.unwrap();
    match no_retry.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
        other => panic!("the dispatcher's list was not throttled: {other:?}"),
    }
    no_retry.list(&ListParams::default()).await.unwrap();
    r.admin.add_fault(&rule).await.unwrap();
    let fake = raw(client()
        .get(r.configmaps())
        .bearer_auth(&r.cp.tokens.dispatcher))
    .await;
    assert_eq!((fake.status, fake.retry_after), (429, Some(2)));
    let by = &r.counters().await["requests_by_identity"]["dispatcher"];
    assert_eq!(by["list configmaps"], 5, "{by}");
    fake
}

/// kubectl through the proxy's kubeconfig: over HTTPS it presents the
/// dispatcher's token and meets the rules scoped to it; over plain HTTP it
/// would present nothing, and the real API server forbids anonymous reads.
async fn kubectl_through_the_proxy(r: &Real) {
    let Some(kubectl) = crate::sim::kubectl() else {
        println!("SKIP: kubectl through the proxy on the real API server: no kubectl");
        return;
    };
    let dir = r.cp.dir().join("kubectl");
    let https = dir.join("https.kubeconfig");
    r.proxy
        .write_kubeconfig(&https, &r.cp.tokens.dispatcher, NS)
        .unwrap();
    let run = |kc: std::path::PathBuf, args: &'static [&'static str]| {
        tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kc)
            .args(args)
            .env("HOME", &dir)
            .output()
    };
    let out = run(https.clone(), &["get", "configmaps", "-o", "name"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    r.admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .token(&r.cp.tokens.dispatcher)
                .verbs(["list"])
                .resources(["configmaps"])
                .times(1),
        )
        .await
        .unwrap();
    let out = run(https, &["get", "configmaps"]).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Internal error occurred: injected fault"),
        "{out:?}"
    );
    let plain = dir.join("http.kubeconfig");
    let kc = tcab_api_proxy::kubeconfig(&r.proxy.admin_url(), &r.cp.tokens.dispatcher, NS);
    tcab_api_proxy::write_kubeconfig(&plain, &kc).unwrap();
    let out = run(plain, &["get", "configmaps"]).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("system:anonymous"),
        "{out:?}"
    );
}

/// A silenced watch on the real API server: nothing after the rule, the
/// upstream watch kept to its timeout (then a clean end), and a resume gets
/// what it missed.
async fn silenced_watch(r: &Real) {
    let direct = r.direct().await;
    let list = r.through().list(&ListParams::default()).await.unwrap();
    let rv0 = list.metadata.resource_version.unwrap();
    let opened = Instant::now();
    let mut w = watch_lines(
        client()
            .get(format!(
                "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=6&resourceVersion={rv0}",
                r.configmaps()
            ))
            .bearer_auth(&r.cp.tokens.dispatcher),
    )
    .await;
    direct
        .create(&PostParams::default(), &cm("w1"))
        .await
        .unwrap();
    let (w1, _) = until_seen(&mut w, "ADDED w1 through the proxy", SECS, |s| {
        is_event(s, "ADDED", "w1")
    })
    .await;
    let (_, _, rv_w1) = event(&w1).unwrap();
    r.admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Silence)
                .token(&r.cp.tokens.dispatcher)
                .verbs(["watch"])
                .resources(["configmaps"])
                .for_seconds(60.0),
        )
        .await
        .unwrap();
    direct
        .create(&PostParams::default(), &cm("w2"))
        .await
        .unwrap();
    settled("the watch went silent at w2", SECS, async || {
        let n = r.counters().await;
        (n["silent_watches"] == 1).then_some(()).ok_or(n)
    })
    .await;
    let (end, between) = until_seen(&mut w, "the watch's end", SECS, |s| {
        matches!(s, Seen::End | Seen::Broken(_))
    })
    .await;
    assert_eq!(end, Seen::End, "the API server ended it at its timeout");
    assert!(
        opened.elapsed() >= Duration::from_secs(5),
        "{:?}",
        opened.elapsed()
    );
    assert!(
        between.iter().all(|s| !is_event(s, "ADDED", "w2")),
        "{between:?}"
    );
    r.admin.clear_faults().await.unwrap();
    let mut again = watch_lines(
        client()
            .get(format!(
                "{}?watch=true&timeoutSeconds=10&resourceVersion={rv_w1}",
                r.configmaps()
            ))
            .bearer_auth(&r.cp.tokens.dispatcher),
    )
    .await;
    until_seen(&mut again, "ADDED w2 on resume", SECS, |s| {
        is_event(s, "ADDED", "w2")
    })
    .await;
}

/// Lists `n` at once through the proxy with `token`.
async fn burst(r: &Real, token: &str, n: usize) -> Vec<Raw> {
    let c = client();
    let calls = (0..n).map(|_| raw(c.get(r.configmaps()).bearer_auth(token)));
    futures::future::join_all(calls).await
}

/// The APF helper's level makes the real API server answer 429 to
/// overlapping requests of its user, with the body and headers the proxy's
/// throttle imitates; removed, the user is served again.
async fn real_429s_from_the_apf_helper(r: &Real, fake: &Raw) {
    let direct = r.cp.client(&r.cp.tokens.admin).await.unwrap();
    let level = ThrottleLevel::for_user("tcab-proxy-test", "throttled")
        .shares(0)
        .install(&direct)
        .await
        .expect("the level is taken in");
    let pls: Api<PriorityLevelConfiguration> = Api::all(direct.clone());
    let uid = pls.get(level.name()).await.unwrap().metadata.uid.unwrap();
    let rejected = settled("APF rejects overlapping requests", SECS, async || {
        let answers = burst(r, &r.cp.tokens.throttled, 24).await;
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        answers
            .into_iter()
            .find(|a| a.status == 429)
            .ok_or(format!("{statuses:?}"))
    })
    .await;
    assert_eq!(rejected.body, APF_REJECTION_BODY);
    assert_eq!(rejected.content_type, "text/plain; charset=utf-8");
    assert!(rejected.retry_after.is_some_and(|s| s >= 1), "{rejected:?}");
    assert_eq!(rejected.priority_level_uid.as_deref(), Some(uid.as_str()));
    // the proxy's throttle answers as APF does
    assert_eq!(
        (fake.status, &fake.body, &fake.content_type),
        (rejected.status, &rejected.body, &rejected.content_type)
    );
    assert!(fake.priority_level_uid.is_some());
    // the admin (system:masters) is exempt
    let admin = burst(r, &r.cp.tokens.admin, 24).await;
    assert!(admin.iter().all(|a| a.status == 200));
    level.remove(&direct).await.unwrap();
    settled("the user is served again", SECS, async || {
        let answers = burst(r, &r.cp.tokens.throttled, 24).await;
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        statuses
            .iter()
            .all(|s| *s == 200)
            .then_some(())
            .ok_or(format!("{statuses:?}"))
    })
    .await;
    // the unnamed token is counted under its digest, never shown
    let by = r.counters().await["requests_by_identity"].clone();
    let names: Vec<&String> = by.as_object().unwrap().keys().collect();
    assert!(names.iter().any(|n| n.starts_with("token-")), "{names:?}");
    assert!(!by.to_string().contains(&r.cp.tokens.throttled));
}

/// A list at an exact resourceVersion etcd has compacted away: 410 Expired
/// from the real API server, through the proxy.
async fn real_410_after_compaction(r: &Real) {
    let direct = r.direct().await;
    let made = direct
        .create(&PostParams::default(), &cm("c1"))
        .await
        .unwrap();
    let rv1 = made.metadata.resource_version.unwrap();
    for i in 0..3 {
        let patch = serde_json::json!({"data": {"k": format!("v{i}")}});
        direct
            .patch("c1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let url = format!(
        "{}?resourceVersion={rv1}&resourceVersionMatch=Exact",
        r.configmaps()
    );
    let t = Instant::now();
    let gone = settled(
        "the old revision is compacted",
        Duration::from_secs(60),
        async || {
            let a = raw(client().get(&url).bearer_auth(&r.cp.tokens.admin)).await;
            if a.status == 410 {
                Ok(a)
            } else {
                Err(a.status)
            }
        },
    )
    .await;
    let status: serde_json::Value = serde_json::from_str(&gone.body).unwrap();
    assert_eq!(status["reason"], "Expired", "{status}");
    println!(
        "410 Expired {:?} after the writes (compaction every 2 s)",
        t.elapsed()
    );
}

/// `POST /admin/restart` with the hook: connections cut, the port closed
/// until the API server is back (a new process), a kube-rs watcher through
/// the proxy recovers and sees what comes after.
async fn restart_through_the_hook(r: &Real) {
    let through = r.through();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let watching = tokio::spawn(async move {
        let stream = watcher(through, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let line = match ev {
                Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                    format!("apply {}", c.metadata.name.unwrap())
                }
                Ok(watcher::Event::InitDone) => "init done".into(),
                Ok(_) => continue,
                Err(e) => format!("error {e}"),
            };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    until("the watcher's initial list", SECS, || {
        let got = rx.try_recv().ok();
        async move { got.filter(|l| l == "init done") }
    })
    .await;
    let rv_before = r
        .direct()
        .await
        .create(&PostParams::default(), &cm("before-restart"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let pid_before = r.cp.apiserver_pid();
    let t = Instant::now();
    let report = r.admin.restart(0.5).await.unwrap();
    assert!(report.watches_closed >= 1, "{report:?}");
    assert!(report.connections_cut >= 1, "{report:?}");
    assert!(
        tokio::net::TcpStream::connect(r.proxy.addr())
            .await
            .is_err(),
        "refused while the API server restarts"
    );
    until(
        "the proxy's port reopens",
        Duration::from_secs(90),
        || async {
            tokio::net::TcpStream::connect(r.proxy.addr())
                .await
                .ok()
                .map(drop)
        },
    )
    .await;
    println!(
        "the API server restarted through the hook in {:?}",
        t.elapsed()
    );
    assert_ne!(r.cp.apiserver_pid(), pid_before, "a new API server process");
    let n = r.counters().await;
    assert_eq!(
        (n["restarts"].as_u64(), n["restart_failures"].as_u64()),
        (Some(1), Some(0)),
        "{n}"
    );
    r.direct()
        .await
        .create(&PostParams::default(), &cm("after-restart"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    settled(
        "the watcher sees what came after the restart",
        SECS * 2,
        async || {
            while let Ok(l) = rx.try_recv() {
                seen.push(l);
            }
            if seen.iter().any(|l| l == "apply after-restart") {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
    watching.abort();
    // A resume from before the restart, through the proxy.
    let mut w = watch_lines(
        client()
            .get(format!(
                "{}?watch=true&timeoutSeconds=3&resourceVersion={rv_before}",
                r.configmaps()
            ))
            .bearer_auth(&r.cp.tokens.dispatcher),
    )
    .await;
    // The restarted API server's watch cache starts after it: 410, as
    // kube-sim's restart answers (the kube-rs watcher above relisted).
    let (first, _) = until_seen(&mut w, "the resume's first line", SECS, |_| true).await;
    let Seen::Line(line) = &first else {
        panic!("{first:?}")
    };
    let ev: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        (&ev["type"], &ev["object"]["code"], &ev["object"]["reason"]),
        (
            &serde_json::json!("ERROR"),
            &serde_json::json!(410),
            &serde_json::json!("Expired")
        ),
        "{line}"
    );
    assert!(
        seen.iter().any(|l| l.contains("Expired")),
        "the watcher met the 410 too: {seen:?}"
    );
}
