//! DELETE preconditions and `dryRun=All` (`registry/generic/registry/store.go`
//! `Delete`, `registry/rest/delete.go` `BeforeDelete`,
//! `registry/generic/registry/dryrun.go`).

use crate::common::{
    bound_nowhere, job, job_path, job_pod_running, pod, pod_path, running, terminated,
};
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;
use tcab_conformance::cluster::WORKER;
use tcab_conformance::normalise::{self, scrub_with};
use tcab_conformance::{Cluster, Outcome, differential};

/// A uid no object has.
const OTHER_UID: &str = "00000000-0000-4000-8000-000000000001";

/// What is left of the pod: `gone`, or its summary.
async fn pod_left(c: &Cluster, name: &str) -> Result<Value> {
    Ok(match c.object(&pod_path(c, name)).await? {
        None => json!("gone"),
        Some(p) => normalise::pod(&p),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uid_precondition_mismatch() {
    differential(
        "deletes::uid_precondition_mismatch",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &bound_nowhere("p", json!({}))).await?;
            let a = c
                .delete(
                    &pod_path(c, "p"),
                    Some(&json!({"preconditions": {"uid": OTHER_UID}})),
                )
                .await?;
            o.answer("delete", a.code, &a.body);
            o.put("after", pod_left(c, "p").await?);
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_version_precondition_mismatch() {
    differential(
        "deletes::resource_version_precondition_mismatch",
        async |c: &Cluster, o: &mut Outcome| {
            let made = c.create(&c.pods(), &bound_nowhere("p", json!({}))).await?;
            let rv = made["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let a = c
                .delete(
                    &pod_path(c, "p"),
                    Some(&json!({"preconditions": {"resourceVersion": "1"}})),
                )
                .await?;
            let mut body = a.body.clone();
            if let Some(m) = body["message"].as_str() {
                body["message"] = json!(scrub_with(m, &[(&format!("({rv})"), "(<rv>)")]));
            }
            o.answer("delete", a.code, &body);
            o.put("after", pod_left(c, "p").await?);
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_preconditions() {
    differential(
        "deletes::matching_preconditions",
        async |c: &Cluster, o: &mut Outcome| {
            let made = c.create(&c.pods(), &bound_nowhere("p", json!({}))).await?;
            let md = &made["metadata"];
            let a = c
                .delete(
                    &pod_path(c, "p"),
                    Some(&json!({"gracePeriodSeconds": 0, "preconditions": {
                        "uid": md["uid"], "resourceVersion": md["resourceVersion"]}})),
                )
                .await?;
            o.answer("delete", a.code, &a.body);
            o.put("after", pod_left(c, "p").await?);
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_create_pod() {
    differential(
        "deletes::dry_run_create_pod",
        async |c: &Cluster, o: &mut Outcome| {
            let mut p = pod("", None, 60);
            p["metadata"]["generateName"] = json!("dry-");
            p["metadata"].as_object_mut().unwrap().remove("name");
            let a = c.post(&format!("{}?dryRun=All", c.pods()), &p).await?;
            o.answer("create", a.code, &a.body);
            o.put(
                "create.name",
                a.body["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("dry-") && n.len() == 9),
            );
            let list = c.get(&c.pods()).await?;
            o.put(
                "pods after",
                list.body["items"].as_array().map_or(0, Vec::len),
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_create_job() {
    differential(
        "deletes::dry_run_create_job",
        async |c: &Cluster, o: &mut Outcome| {
            let a = c
                .post(
                    &format!("{}?dryRun=All", c.jobs()),
                    &job("j", Some(WORKER), 60),
                )
                .await?;
            o.answer("create", a.code, &a.body);
            // the defaulted Job is answered: its generated selector and labels
            o.put(
                "create.selector",
                a.body["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default(),
            );
            o.put("stored", c.object(&job_path(c, "j")).await?.is_some());
            c.sleep(Duration::from_secs(3)).await;
            let pods = c.get(&c.pods()).await?;
            o.put(
                "pods after",
                pods.body["items"].as_array().map_or(0, Vec::len),
            );
            Ok(())
        },
    )
    .await
}

/// A dry-run DELETE of a running pod, the options in the query and then in
/// the body: answered as a graceful delete would be, and nothing changes
/// (the pod keeps running, is not marked, its program gets no signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_running_pod() {
    differential(
        "deletes::dry_run_delete_running_pod",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &pod("p", Some(WORKER), 600)).await?;
            running(c, "p").await?;
            let path = pod_path(c, "p");
            let a = c.delete(&format!("{path}?dryRun=All"), None).await?;
            o.answer("delete (query)", a.code, &a.body);
            let a = c
                .delete(
                    &path,
                    Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"], "gracePeriodSeconds": 5})),
                )
                .await?;
            o.answer("delete (body)", a.code, &a.body);
            c.sleep(Duration::from_secs(3)).await;
            o.put("after", pod_left(c, "p").await?);
            Ok(())
        },
    )
    .await
}

/// The same for a pod never scheduled (a real delete would remove it at
/// once, grace 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_unscheduled_pod() {
    differential(
        "deletes::dry_run_delete_unscheduled_pod",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &pod("p", None, 600)).await?;
            let path = pod_path(c, "p");
            let a = c.delete(&format!("{path}?dryRun=All"), None).await?;
            o.answer("delete", a.code, &a.body);
            c.sleep(Duration::from_secs(1)).await;
            o.put(
                "after",
                pod_left(c, "p")
                    .await?
                    .get("deleting")
                    .cloned()
                    .unwrap_or(json!(false)),
            );
            o.put("exists", c.object(&path).await?.is_some());
            Ok(())
        },
    )
    .await
}

/// Dry-run DELETEs a real one would carry out at once: a running pod forced
/// (`gracePeriodSeconds=0`) and a finished pod (grace 0 by the pod
/// strategy). Answered as the delete would be; both pods stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_at_once() {
    differential(
        "deletes::dry_run_delete_at_once",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &pod("live", Some(WORKER), 600)).await?;
            c.create(&c.pods(), &pod("done", Some(WORKER), 1)).await?;
            running(c, "live").await?;
            terminated(c, "done").await?;
            let a = c
                .delete(
                    &format!("{}?dryRun=All&gracePeriodSeconds=0", pod_path(c, "live")),
                    None,
                )
                .await?;
            o.answer("delete live forced", a.code, &a.body);
            let a = c
                .delete(&format!("{}?dryRun=All", pod_path(c, "done")), None)
                .await?;
            o.answer("delete done", a.code, &a.body);
            c.sleep(Duration::from_secs(3)).await;
            o.put("live after", pod_left(c, "live").await?);
            o.put("done after", pod_left(c, "done").await?);
            Ok(())
        },
    )
    .await
}

/// A dry-run DELETE of the namespace's pods (deletecollection), the options
/// in the query and then in the body: answered with the pods it would
/// delete, and every pod stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_collection() {
    differential(
        "deletes::dry_run_delete_collection",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &pod("a", Some(WORKER), 600)).await?;
            c.create(&c.pods(), &pod("b", None, 600)).await?;
            running(c, "a").await?;
            let listed = |body: &Value| -> Vec<String> {
                let mut items: Vec<String> = body["items"]
                    .as_array()
                    .map(|is| {
                        is.iter()
                            .map(|i| {
                                format!(
                                    "{} deleting={}",
                                    i["metadata"]["name"].as_str().unwrap_or(""),
                                    i["metadata"]["deletionTimestamp"].is_string()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                items.sort();
                items
            };
            let a = c.delete(&format!("{}?dryRun=All", c.pods()), None).await?;
            o.put("delete (query).code", a.code);
            o.put("delete (query).kind", a.body["kind"].clone());
            o.put("delete (query).items", listed(&a.body));
            let a = c
                .delete(
                    &c.pods(),
                    Some(&json!({"dryRun": ["All"], "gracePeriodSeconds": 0})),
                )
                .await?;
            o.put("delete (body).code", a.code);
            o.put("delete (body).items", listed(&a.body));
            c.sleep(Duration::from_secs(3)).await;
            o.put("a after", pod_left(c, "a").await?);
            o.put("b after", pod_left(c, "b").await?);
            Ok(())
        },
    )
    .await
}

/// A dry-run DELETE of a running Job with each propagation policy: the Job
/// and its pod stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_delete_job() {
    differential(
        "deletes::dry_run_delete_job",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.jobs(), &job("j", Some(WORKER), 600)).await?;
            let p = job_pod_running(c, "j").await?;
            for policy in ["Background", "Foreground", "Orphan"] {
                let a = c
                    .delete(
                        &format!("{}?dryRun=All&propagationPolicy={policy}", job_path(c, "j")),
                        None,
                    )
                    .await?;
                o.answer(&format!("delete {policy}"), a.code, &a.body);
            }
            c.sleep(Duration::from_secs(3)).await;
            let j = c.object(&job_path(c, "j")).await?;
            o.put(
                "job after",
                j.as_ref()
                    .map(normalise::object_marks)
                    .unwrap_or(json!("gone")),
            );
            o.put("pod after", pod_left(c, &p).await?);
            Ok(())
        },
    )
    .await
}

/// A Job DELETE in the background with a uid precondition, as the
/// dispatcher deletes its Jobs: a stale uid is 409 and the Job stays; the
/// right one removes it, answered with a Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_uid_precondition() {
    differential(
        "deletes::job_uid_precondition",
        async |c: &Cluster, o: &mut Outcome| {
            let made = c.create(&c.jobs(), &job("j", None, 60)).await?;
            let path = job_path(c, "j");
            let a = c
                .delete(
                    &path,
                    Some(&json!({"propagationPolicy": "Background",
                        "preconditions": {"uid": OTHER_UID}})),
                )
                .await?;
            o.answer("delete (stale uid)", a.code, &a.body);
            o.put("stored after", c.object(&path).await?.is_some());
            let a = c
                .delete(
                    &path,
                    Some(&json!({"propagationPolicy": "Background",
                        "preconditions": {"uid": made["metadata"]["uid"]}})),
                )
                .await?;
            o.answer("delete (its uid)", a.code, &a.body);
            o.put("stored at the end", c.object(&path).await?.is_some());
            Ok(())
        },
    )
    .await
}

/// A dry-run eviction of a running pod: answered as the eviction would be,
/// and the pod keeps running, with no `DisruptionTarget`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_eviction() {
    differential(
        "deletes::dry_run_eviction",
        async |c: &Cluster, o: &mut Outcome| {
            c.create(&c.pods(), &pod("p", Some(WORKER), 600)).await?;
            running(c, "p").await?;
            let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": c.ns},
                "deleteOptions": {"dryRun": ["All"]}});
            let a = c
                .post(&format!("{}/eviction", pod_path(c, "p")), &eviction)
                .await?;
            o.answer("eviction", a.code, &a.body);
            c.sleep(Duration::from_secs(3)).await;
            o.put("after", pod_left(c, "p").await?);
            Ok(())
        },
    )
    .await
}
