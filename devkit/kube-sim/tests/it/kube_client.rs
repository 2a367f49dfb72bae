//! The real kube-rs client against the sim: typed create/list/get/delete,
//! Status errors, the watcher (list then watch), logs, and a client built
//! from the written kubeconfig.

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn kube_rs_speaks_to_the_sim() {
    let s = sim().await;
    let client = s.kube_client(None).unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let job: Job = serde_json::from_value(plain_job("kr", json!({"lane": "run"}), 0.3)).unwrap();
    // the watcher starts before the Job exists and sees it complete
    let watch_jobs = jobs.clone();
    let done = tokio::spawn(async move {
        let stream =
            watcher(watch_jobs, watcher::Config::default().labels("lane=run")).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(j) = stream.try_next().await.unwrap() {
            let complete = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                });
            if complete {
                return j;
            }
        }
        panic!("watch ended");
    });
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.resource_version.is_some());
    let err = jobs.create(&PostParams::default(), &job).await.unwrap_err();
    match err {
        kube::Error::Api(st) => assert_eq!((st.code, st.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("{other:?}"),
    }
    let list = jobs
        .list(&ListParams::default().labels("lane in (run)"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    let completed = tokio::time::timeout(SECS, done).await.unwrap().unwrap();
    assert_eq!(completed.status.unwrap().succeeded, Some(1));
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod_list = pods
        .list(&ListParams::default().labels("job-name=kr"))
        .await
        .unwrap();
    let pod = &pod_list.items[0];
    let name = pod.metadata.name.clone().unwrap();
    s.sim().store.append_log(NS, &name, "main", "hello");
    let logs = pods
        .logs(
            &name,
            &LogParams {
                container: Some("main".into()),
                tail_lines: Some(5),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(logs, "hello\n");
    match jobs.get("nope").await.unwrap_err() {
        kube::Error::Api(st) => assert_eq!(st.code, 404),
        other => panic!("{other:?}"),
    }
    jobs.delete("kr", &DeleteParams::background())
        .await
        .unwrap();
    eventually("pod deleted with the job", SECS, || async {
        pods.list(&ListParams::default().labels("job-name=kr"))
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;

    // from the kubeconfig the sim wrote
    let kc = Kubeconfig::read_from(s.kubeconfig_path()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(cfg.default_namespace, NS);
    let c2 = kube::Client::try_from(cfg).unwrap();
    let n = Api::<Job>::default_namespaced(c2)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn kube_rs_watcher_recovers_from_410() {
    let s = api_sim().await;
    let jobs: Api<Job> = Api::namespaced(s.kube_client(None).unwrap(), NS);
    let stream = watcher(jobs.clone(), watcher::Config::default()).applied_objects();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(j) = ev {
                let _ = tx.send(j.metadata.name.unwrap_or_default());
            }
        }
    });
    let c = client();
    post(&c, &jobs_url(&s), &plain_job("w1", json!({}), 1.0)).await;
    let got = tokio::time::timeout(SECS, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, "w1");
    // force every watch to restart from an expired version: kube re-lists
    s.admin().compact().await.unwrap();
    post(&c, &jobs_url(&s), &plain_job("w2", json!({}), 1.0)).await;
    let mut seen = vec![];
    while !seen.contains(&"w2".to_string()) {
        seen.push(
            tokio::time::timeout(Duration::from_secs(15), rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    task.abort();
}

#[tokio::test]
async fn sim_handle_kube_client_uses_the_namespace_and_the_token() {
    let role = "kind: Role\nmetadata: {name: r}\nrules:\n- apiGroups: [batch]\n  resources: [jobs]\n  verbs: [list]\n";
    let s = sim_with(|o| {
        o.controller = false;
        o.rbac = Some(tcab_kube_sim::Rbac::parse(role, "role-token").unwrap());
    })
    .await;
    post(&client(), &jobs_url(&s), &plain_job("k1", json!({}), 1.0)).await;
    // default namespace = the sim's; no token given = the admin token
    let cfg = s.kube_config(Some("t")).unwrap();
    assert_eq!(cfg.cluster_url.to_string().trim_end_matches('/'), s.url());
    assert_eq!(cfg.default_namespace, NS);
    let admin = s.kube_client(None).unwrap();
    assert_eq!(admin.default_namespace(), NS);
    let names = |l: kube::core::ObjectList<Job>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect()
    };
    let jobs = Api::<Job>::default_namespaced(admin.clone());
    assert_eq!(
        names(jobs.list(&ListParams::default()).await.unwrap()),
        ["k1"]
    );
    assert!(
        Api::<Pod>::default_namespaced(admin)
            .list(&ListParams::default())
            .await
            .is_ok()
    );
    // the given token is sent: the Role allows listing Jobs, not Pods
    let limited = s.kube_client(Some("role-token")).unwrap();
    let jobs = Api::<Job>::default_namespaced(limited.clone());
    assert_eq!(
        names(jobs.list(&ListParams::default()).await.unwrap()),
        ["k1"]
    );
    match Api::<Pod>::default_namespaced(limited)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(st)) => assert_eq!(st.code, 403),
        other => panic!("the Role has no pods: {other:?}"),
    }
}
