//! Validation: a Job or a Pod with one thing wrong. What is compared: the
//! code, the Status's reason and message, its details and every cause's
//! reason, field and message (`pkg/apis/batch/validation`,
//! `pkg/apis/core/validation`, `apimachinery/pkg/api/validation`), and that
//! nothing was written.

use crate::common::{job, pod};
use anyhow::Result;
use serde_json::{Value, json};
use tcab_conformance::{Cluster, Outcome, differential};

/// POSTs `body` to `path` and records the answer, then whether an object
/// of that name exists.
async fn create(c: &Cluster, o: &mut Outcome, path: &str, body: &Value) -> Result<()> {
    let a = c.post(path, body).await?;
    o.answer("create", a.code, &a.body);
    let name = body["metadata"]["name"].as_str().unwrap_or("");
    let stored = c.get(&format!("{path}/{name}")).await?;
    o.put("stored", stored.code == 200);
    Ok(())
}

async fn bad_job(name: &str, change: impl Fn(&mut Value)) {
    let probe = format!("validation::{name}");
    differential(&probe, async |c: &Cluster, o: &mut Outcome| {
        let mut j = job("v", None, 60);
        change(&mut j);
        create(c, o, &c.jobs(), &j).await
    })
    .await
}

async fn bad_pod(name: &str, change: impl Fn(&mut Value)) {
    let probe = format!("validation::{name}");
    differential(&probe, async |c: &Cluster, o: &mut Outcome| {
        let mut p = pod("v", None, 60);
        change(&mut p);
        create(c, o, &c.pods(), &p).await
    })
    .await
}

fn job_container(j: &mut Value) -> &mut Value {
    &mut j["spec"]["template"]["spec"]["containers"][0]
}

fn pod_container(p: &mut Value) -> &mut Value {
    &mut p["spec"]["containers"][0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_bad_name() {
    bad_job("job_bad_name", |j| {
        j["metadata"]["name"] = json!("Bad_Name")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_no_container() {
    bad_job("job_no_container", |j| {
        j["spec"]["template"]["spec"]["containers"] = json!([])
    })
    .await
}

/// One resource only: upstream checks the requests in Go map order, so two
/// violations come in either order from one create to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_limits_below_requests() {
    bad_job("job_limits_below_requests", |j| {
        job_container(j)["resources"] =
            json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_invalid_label() {
    bad_job("job_invalid_label", |j| {
        j["metadata"]["labels"] = json!({"app": "bad value!"})
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_bad_env_name() {
    bad_job(
        "job_bad_env_name",
        |j| {
            job_container(j)["env"] =
                json!([{"name": "GOOD", "value": "1"}, {"name": "A=B", "value": "2"}])
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_negative_backoff_limit() {
    bad_job("job_negative_backoff_limit", |j| {
        j["spec"]["backoffLimit"] = json!(-1)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_bad_name() {
    bad_pod("pod_bad_name", |p| {
        p["metadata"]["name"] = json!("bad.name_")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_no_container() {
    bad_pod("pod_no_container", |p| p["spec"]["containers"] = json!([])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_limits_below_requests() {
    bad_pod("pod_limits_below_requests", |p| {
        pod_container(p)["resources"] =
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "250m", "memory": "2Gi"}})
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_invalid_label_key() {
    bad_pod("pod_invalid_label_key", |p| {
        p["metadata"]["labels"] = json!({"-bad/key": "x"})
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_bad_env_name() {
    bad_pod("pod_bad_env_name", |p| {
        pod_container(p)["env"] = json!([{"name": "A=B", "value": "1"}])
    })
    .await
}

/// Upstream 1.34+ (RelaxedEnvironmentVariableValidation) takes any
/// printable ASCII but `=`; kube-sim keeps 1.31's rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_env_name_leading_digit() {
    bad_pod("pod_env_name_leading_digit", |p| {
        pod_container(p)["env"] = json!([{"name": "1ABC", "value": "1"}])
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_missing_image_and_bad_restart_policy() {
    bad_pod("pod_missing_image_and_bad_restart_policy", |p| {
        p["spec"]["restartPolicy"] = json!("Sometimes");
        pod_container(p).as_object_mut().unwrap().remove("image");
    })
    .await
}

/// A quantity that does not parse: refused while decoding (400, the
/// quantity's own message), before validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_bad_quantity() {
    bad_job("job_bad_quantity", |j| {
        job_container(j)["resources"] = json!({"requests": {"memory": "1Gx"}})
    })
    .await
}

/// A negative request: parses, refused by validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_negative_quantity() {
    bad_job("job_negative_quantity", |j| {
        job_container(j)["resources"] = json!({"requests": {"cpu": "-500m"}})
    })
    .await
}

/// A unit set off by a space: refused while decoding too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_bad_quantity_unit() {
    bad_pod("pod_bad_quantity_unit", |p| {
        pod_container(p)["resources"] = json!({"limits": {"memory": "12 Mi"}})
    })
    .await
}

/// A quantity given as a JSON number is accepted like its string, and one
/// finer than a milli-unit is rounded up (`1.0001` CPU is stored `1001m`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_numeric_quantity() {
    differential(
        "validation::pod_numeric_quantity",
        async |c: &Cluster, o: &mut Outcome| {
            let mut p = pod("v", None, 60);
            pod_container(&mut p)["resources"] =
                json!({"requests": {"cpu": 0.5, "memory": 1073741824}, "limits": {"cpu": "1.0001"}});
            let a = c.post(&c.pods(), &p).await?;
            o.put("create.code", a.code);
            let r = &a.body["spec"]["containers"][0]["resources"];
            o.put("stored resources", r.clone());
            Ok(())
        },
    )
    .await
}
