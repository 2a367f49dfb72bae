//! 409 answers, as the dispatcher reads them: a create whose name is taken
//! is `AlreadyExists` (the admitter's "the Job exists"), worded
//! `object is being deleted: ...` while the holder is being deleted
//! (`registry/generic/registry/store.go` `Create`); a dry-run create
//! validates before it looks for the name (the admitter's start-up check
//! relies on a 422 for a bad Job even when the name is taken); a write with
//! a stale resourceVersion is `Conflict` (`store.go` `Update`,
//! `OptimisticLockErrorMsg`).

use crate::common::{job, job_path, pod, pod_path};
use anyhow::Result;
use reqwest::Method;
use serde_json::{Value, json};
use tcab_conformance::normalise::object_marks;
use tcab_conformance::{Cluster, Outcome, differential};

/// A finalizer no controller knows: it holds a deleted object until the
/// probe removes it.
const HOLD: &str = "conformance.tcab.dev/hold";

/// A suspended Job (no pod).
fn suspended(name: &str) -> Value {
    let mut j = job(name, None, 60);
    j["spec"]["suspend"] = json!(true);
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_existing() {
    differential(
        "conflicts::create_existing",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            c.create(&c.jobs(), &suspended("j")).await?;
            let a = c.post(&c.jobs(), &suspended("j")).await?;
            o.answer("job again", a.code, &a.body);
            let dry = format!("{}?dryRun=All", c.jobs());
            let a = c.post(&dry, &suspended("j")).await?;
            o.answer("job again, dry run", a.code, &a.body);
            let mut bad = suspended("j");
            bad["spec"]["backoffLimit"] = json!(-1);
            let a = c.post(&dry, &bad).await?;
            o.answer("invalid job again, dry run", a.code, &a.body);
            c.create(&c.pods(), &pod("p", None, 60)).await?;
            let a = c.post(&c.pods(), &pod("p", None, 60)).await?;
            o.answer("pod again", a.code, &a.body);
            Ok(())
        },
    )
    .await
}

/// A Job held by a finalizer, deleted in the background as the dispatcher
/// deletes: marked and answered as the object; a create of its name is 409
/// "object is being deleted"; once the finalizer is off the Job goes and
/// the name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_while_deleting() {
    differential(
        "conflicts::create_while_deleting",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let mut held = suspended("j");
            held["metadata"]["finalizers"] = json!([HOLD]);
            c.create(&c.jobs(), &held).await?;
            let path = job_path(c, "j");
            let a = c
                .delete(&path, Some(&json!({"propagationPolicy": "Background"})))
                .await?;
            o.answer("delete", a.code, &a.body);
            let a = c.post(&c.jobs(), &suspended("j")).await?;
            o.answer("create while deleting", a.code, &a.body);
            let a = c
                .post(&format!("{}?dryRun=All", c.jobs()), &suspended("j"))
                .await?;
            o.answer("create while deleting, dry run", a.code, &a.body);
            let a = c
                .merge_patch(&path, &json!({"metadata": {"finalizers": null}}))
                .await?;
            o.put("release.code", a.code);
            o.put("stored after release", c.object(&path).await?.is_some());
            let a = c.post(&c.jobs(), &suspended("j")).await?;
            o.answer("create after", a.code, &a.body);
            Ok(())
        },
    )
    .await
}

/// Writes that carry a resourceVersion that is no longer current: a PUT and
/// a merge patch naming it are 409 `Conflict`, and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_writes() {
    differential(
        "conflicts::stale_writes",
        async |c: &Cluster, o: &mut Outcome| -> Result<()> {
            let made = c.create(&c.pods(), &pod("p", None, 60)).await?;
            let stale = made["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let path = pod_path(c, "p");
            let a = c
                .merge_patch(&path, &json!({"metadata": {"labels": {"v": "1"}}}))
                .await?;
            o.put("patch.code", a.code);
            let mut old = made.clone();
            old["metadata"]["labels"] = json!({"v": "2"});
            let a = c
                .call(Method::PUT, &path, Some(&old), "application/json")
                .await?;
            o.answer("put stale", a.code, &a.body);
            let a = c
                .merge_patch(
                    &path,
                    &json!({"metadata": {"resourceVersion": stale, "labels": {"v": "3"}}}),
                )
                .await?;
            o.answer("patch stale", a.code, &a.body);
            let now = c.object(&path).await?.unwrap_or(Value::Null);
            o.put("labels after", now["metadata"]["labels"].clone());
            o.put("after", object_marks(&now));
            Ok(())
        },
    )
    .await
}
