//! The audit timeline (`GET /admin/audit`): every change to a Pod or a Job
//! with its wall time and who made it, through raw HTTP as clients send it.

use crate::common::*;
use serde_json::json;
use tcab_kube_sim::Rbac;
use tcab_kube_sim::audit::{Actor, AuditEntry};

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
"#;

fn of<'a>(entries: &'a [AuditEntry], kind: &str, name: &str) -> Vec<&'a AuditEntry> {
    entries
        .iter()
        .filter(|e| e.kind == kind && e.name == name)
        .collect()
}

#[tokio::test]
async fn changes_are_kept_in_order_with_wall_time_and_actor_across_a_restart() {
    let s = sim_with(|o| o.rbac = Some(Rbac::parse(ROLE, "dispatcher-token").unwrap())).await;
    let c = client();
    let admin = s.admin();
    let started = jiff::Timestamp::now();

    // The RBAC token creates a Job; the cluster makes, runs and finishes its pod.
    let labels = json!({"tcab.dev/job-id": "j1"});
    let r = c
        .post(jobs_url(&s))
        .bearer_auth("dispatcher-token")
        .json(&plain_job("j1", labels, 0.2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    // The admin token makes a bare pod; the RBAC token deletes it.
    let pod = json!({"metadata": {"name": "bare", "labels": {"tcab.dev/job-id": "j1"}},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    let r = c
        .post(pods_url(&s))
        .bearer_auth(s.admin_token())
        .json(&pod)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    eventually("the bare pod running", SECS, || async {
        let (_, p) = get(&c, &format!("{}/bare", pods_url(&s))).await;
        (p["status"]["phase"] == "Running").then_some(())
    })
    .await;
    let r = c
        .delete(format!("{}/bare", pods_url(&s)))
        .bearer_auth("dispatcher-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    eventually("the Job complete", SECS, || async {
        let (_, j) = get(&c, &format!("{}/j1", jobs_url(&s))).await;
        condition(&j, "Complete").map(|_| ())
    })
    .await;
    // An API-server restart leaves the timeline alone.
    admin.restart(0.0).await.unwrap();
    let page = eventually("the audit readable after the restart", SECS, || async {
        admin.audit(0).await.ok()
    })
    .await;
    let entries = &page.entries;
    assert_eq!(page.dropped, 0);
    assert_eq!(page.last, entries.last().unwrap().seq);
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] + 1 == w[1]), "{seqs:?}");
    let rvs: Vec<u64> = entries.iter().map(|e| e.rv).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    assert!(
        entries
            .iter()
            .all(|e| e.at >= started && e.at <= jiff::Timestamp::now())
    );
    assert!(
        entries.iter().all(|e| e.kind == "Pod" || e.kind == "Job"),
        "only Pods and Jobs"
    );

    let job = of(entries, "Job", "j1");
    assert_eq!(
        (job[0].event.as_str(), job[0].actor),
        ("ADDED", Actor::Rbac)
    );
    assert_eq!(job[0].labels["tcab.dev/job-id"], "j1");
    assert!(job[1..].iter().all(|e| e.actor == Actor::Cluster));
    assert_eq!(job.last().unwrap().finished.as_deref(), Some("Complete"));
    assert!(job[..job.len() - 1].iter().all(|e| e.finished.is_none()));

    let job_pod: Vec<&AuditEntry> = entries
        .iter()
        .filter(|e| e.kind == "Pod" && e.owner.as_deref() == Some("j1"))
        .collect();
    assert!(!job_pod.is_empty());
    assert!(job_pod.iter().all(|e| e.actor == Actor::Cluster));
    assert!(job_pod.iter().any(|e| e.running), "the pod ran");
    assert!(!job_pod.last().unwrap().running, "and stopped");

    let bare = of(entries, "Pod", "bare");
    assert_eq!(
        (bare[0].event.as_str(), bare[0].actor),
        ("ADDED", Actor::Admin)
    );
    let deleted = bare
        .iter()
        .find(|e| e.deleting || e.event == "DELETED")
        .expect("the delete is recorded");
    assert_eq!(deleted.actor, Actor::Rbac, "who deleted it: {deleted:?}");
    assert!(deleted.running, "it was running when the delete came");

    // Paging, and bad queries.
    let after = admin.audit(seqs[2]).await.unwrap();
    assert_eq!(after.entries.first().map(|e| e.seq), Some(seqs[3]));
    for q in ["after=x", "limit=-1", "since=1"] {
        let (code, _) = get(&c, &format!("{}/admin/audit?{q}", s.url())).await;
        assert_eq!(code, 400, "{q}");
    }
    let (code, page) = get(&c, &format!("{}/admin/audit?limit=1", s.url())).await;
    assert_eq!(
        (code, page["entries"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    // The RBAC token cannot read it.
    let r = c
        .get(format!("{}/admin/audit", s.url()))
        .bearer_auth("dispatcher-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
}

#[tokio::test]
async fn an_admin_endpoint_acts_as_the_admin() {
    let s = sim().await;
    let c = client();
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    assert_eq!(post(&c, &pods_url(&s), &pod).await.0, 201);
    s.admin().delete_pod(NS, "p", Some(0)).await.unwrap();
    let page = s.admin().audit(0).await.unwrap();
    let p = of(&page.entries, "Pod", "p");
    assert_eq!(p[0].actor, Actor::Anonymous, "created without a token");
    let gone = p.iter().find(|e| e.event == "DELETED").expect("deleted");
    assert_eq!(gone.actor, Actor::Admin);
}
