//! The API as tests meet it: the admin, the Node authorizer, RBAC for a
//! ServiceAccount, the identities the launcher makes. All on the process's
//! shared control plane, each test in its own namespace.

use crate::support::{LIMIT, NODES, shared_with_namespace};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use std::path::Path;
use tcab_testkit::wait::settled;

async fn client(kubeconfig: &Path) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

async fn whoami(client: kube::Client) -> (String, Vec<String>) {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    (
        user.username.unwrap_or_default(),
        user.groups.unwrap_or_default(),
    )
}

#[tokio::test]
async fn the_admin_reads_namespaces_and_each_new_one_gets_its_default_service_account() {
    let Some((access, ns)) = shared_with_namespace("admin").await else {
        return;
    };
    let client = access.admin_client().await.unwrap();
    let names: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for want in ["default", "kube-system", "kube-node-lease", ns.as_str()] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .get_opt("default")
        .await
        .unwrap();
    assert!(sa.is_some());
    // The root-CA publisher gives every namespace the CA pods trust.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let ca = settled("kube-root-ca.crt in the namespace", LIMIT, async || {
        cms.get_opt("kube-root-ca.crt")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    let published = ca
        .data
        .unwrap_or_default()
        .remove("ca.crt")
        .unwrap_or_default();
    let ours = std::fs::read_to_string(&access.ca_cert).unwrap();
    assert_eq!(published.trim(), ours.trim());
    assert_eq!(whoami(client).await.0, "admin");
}

#[tokio::test]
async fn a_node_lists_only_its_own_pods() {
    let Some((access, _ns)) = shared_with_namespace("node-authz").await else {
        return;
    };
    let node = &access.nodes[NODES[0]];
    let client = client(&node.kubeconfig).await;
    assert_eq!(
        whoami(client.clone()).await,
        (
            format!("system:node:{}", NODES[0]),
            vec!["system:nodes".to_owned(), "system:authenticated".to_owned()]
        )
    );
    let pods: Api<Pod> = Api::all(client);
    let err = pods.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");
    assert!(
        err.to_string().contains("spec.nodeName field selector"),
        "{err}"
    );
    let own = ListParams::default().fields(&format!("spec.nodeName={}", NODES[0]));
    pods.list(&own).await.unwrap();
}

#[tokio::test]
async fn a_service_account_without_a_role_is_refused_jobs_and_with_one_may_list_them() {
    let Some((access, ns)) = shared_with_namespace("rbac").await else {
        return;
    };
    let admin = access.admin_client().await.unwrap();
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("worker".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = access
        .service_account_kubeconfig(&ns, "worker", &dir.path().join("worker.kubeconfig"))
        .await
        .unwrap();
    let worker = client(&kubeconfig).await;
    assert_eq!(
        whoami(worker.clone()).await.0,
        format!("system:serviceaccount:{ns}:worker")
    );
    let jobs: Api<Job> = Api::namespaced(worker, &ns);
    let err = jobs.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");

    let role = Role {
        metadata: ObjectMeta {
            name: Some("jobs-reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["batch".into()]),
            resources: Some(vec!["jobs".into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("worker-reads-jobs".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "jobs-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "worker".into(),
            namespace: Some(ns.clone()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The authorizer reads RBAC from its informers: allowed once it has seen the binding.
    settled("the worker may list Jobs", LIMIT, async || {
        jobs.list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())
    })
    .await;
}

#[tokio::test]
async fn service_account_tokens_are_signed_es256() {
    let Some((access, _ns)) = shared_with_namespace("jwks").await else {
        return;
    };
    let admin = access.admin_client().await.unwrap();
    let jwks = admin
        .request_text(
            http::Request::get("/openid/v1/jwks")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let jwks: serde_json::Value = serde_json::from_str(&jwks).unwrap();
    let key = &jwks["keys"][0];
    assert_eq!(
        (key["kty"].as_str(), key["alg"].as_str()),
        (Some("EC"), Some("ES256")),
        "{jwks}"
    );
    assert_eq!(key["crv"].as_str(), Some("P-256"), "{jwks}");
}

#[tokio::test]
async fn static_and_minted_identities_are_who_they_say() {
    let Some((access, _ns)) = shared_with_namespace("identities").await else {
        return;
    };
    let viewer = client(&access.identities["viewer"].kubeconfig).await;
    assert_eq!(
        whoami(viewer).await,
        (
            "viewer".to_owned(),
            vec!["tcab:viewers".to_owned(), "system:authenticated".to_owned()]
        )
    );
    // A node not named at start, by a client certificate from the CA.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = access
        .client_cert_kubeconfig(
            "system:node:late-node",
            &["system:nodes".into()],
            &dir.path().join("late-node.kubeconfig"),
        )
        .unwrap();
    let late = client(&kubeconfig).await;
    assert_eq!(
        whoami(late.clone()).await,
        (
            "system:node:late-node".to_owned(),
            vec!["system:nodes".to_owned(), "system:authenticated".to_owned()]
        )
    );
    let pods: Api<Pod> = Api::all(late);
    pods.list(&ListParams::default().fields("spec.nodeName=late-node"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_node_that_registers_ready_is_awaited_until_untainted() {
    let Some((access, _ns)) = shared_with_namespace("node-ready").await else {
        return;
    };
    let name = NODES[1];
    // What a node agent does first: register its Node, Ready, with its own token.
    let me = client(&access.nodes[name].kubeconfig).await;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff_now());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}
        }
    }))
    .unwrap();
    Api::<Node>::all(me)
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    access
        .wait_for_nodes(&[name.to_owned()], LIMIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let admin = access.admin_client().await.unwrap();
    let seen = Api::<Node>::all(admin.clone()).get(name).await.unwrap();
    assert_eq!(tcab_real_cluster::node_not_ready(&seen), None);
    Api::<Node>::all(admin)
        .delete(name, &Default::default())
        .await
        .unwrap();
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The API server's audit log records a Pod's creation and deletion with who
/// made them and the object as it became, and a ServiceAccount's refused
/// request.
#[tokio::test]
async fn the_audit_log_records_writes_to_pods_with_their_author() {
    let Some((access, ns)) = shared_with_namespace("audit").await else {
        return;
    };
    let log = access
        .audit_log
        .clone()
        .expect("the audit log is on by default");
    let client = access.admin_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "audited", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.delete("audited", &Default::default()).await.unwrap();
    let events = settled("both writes in the audit log", LIMIT, async || {
        let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
        let mine: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                e["objectRef"]["namespace"] == ns.as_str() && e["objectRef"]["name"] == "audited"
            })
            .collect();
        // The scheduler's binding and a node's status writes may come in
        // between: the admin's create and delete are what is looked for.
        if mine.iter().any(|e| e["verb"] == "delete") {
            Ok(mine)
        } else {
            Err(format!("{} events so far, no delete", mine.len()))
        }
    })
    .await;
    assert_eq!(events[0]["verb"], "create");
    assert_eq!(events[0]["user"]["username"], "admin");
    assert_eq!(
        events[0]["responseObject"]["metadata"]["labels"]["app"],
        "x"
    );
    let delete = events
        .iter()
        .find(|e| e["verb"] == "delete")
        .expect("the delete");
    assert_eq!(delete["user"]["username"], "admin");
}
