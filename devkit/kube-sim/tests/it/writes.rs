//! Validation, unknown fields, dryRun, delete preconditions and boolean
//! parameters over raw HTTP, as clients send them.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

/// A Job shaped like the dispatcher's driver Job.
fn driver_like(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher", "tcab.dev/job-id": "run-1"},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600,
            "template": {
                "metadata": {"labels": {"tcab.dev/job-id": "run-1"}, "annotations": {"kube-sim.tcab.dev/run-seconds": "300"}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 120,
                    "securityContext": {"fsGroup": 1000},
                    "volumes": [{"name": "subscription", "secret": {"secretName": "sub", "optional": true, "defaultMode": 288}}],
                    "containers": [{"name": "driver", "image": "driver:1",
                        "env": [{"name": "TCAB_JOB_ID", "value": "run-1"},
                            {"name": "TCAB_DRIVER_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
                        "envFrom": [{"secretRef": {"name": "driver-env"}}],
                        "volumeMounts": [{"name": "subscription", "mountPath": "/run/subscription", "readOnly": true}],
                        "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2"}}}]}}}
    })
}

async fn send(rb: reqwest::RequestBuilder) -> (u16, Vec<String>, Value) {
    let r = rb.send().await.unwrap();
    let code = r.status().as_u16();
    let warnings = r
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    (code, warnings, r.json().await.unwrap_or(Value::Null))
}

fn causes(st: &Value) -> Vec<(String, String, String)> {
    st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap().to_string(),
                c["field"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn invalid_jobs_get_422_with_upstream_causes() {
    let s = api_sim().await;
    let c = client();
    let (code, _, created) = send(c.post(jobs_url(&s)).json(&driver_like("ok"))).await;
    assert_eq!(code, 201, "{created}");
    // quantities are stored in canonical form, defaults filled
    let ctr = &created["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(ctr["resources"]["limits"]["cpu"], "2");
    assert_eq!(
        created["spec"]["template"]["spec"]["volumes"][0]["secret"]["defaultMode"],
        288
    );

    let mut bad = driver_like("bad");
    let spec = &mut bad["spec"]["template"]["spec"];
    spec["containers"][0]["env"][0]["name"] = json!("1TCAB");
    spec["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["fieldPath"] = json!("status.phase");
    spec["containers"][0]["envFrom"][0]["secretRef"]["name"] = json!("Not_A_Name");
    spec["containers"][0]["volumeMounts"][0]["name"] = json!("nope");
    spec["containers"][0]["resources"]["requests"]["cpu"] = json!("3");
    spec["containers"][0]["ports"] =
        json!([{"containerPort": 0}, {"containerPort": 8080, "name": "Bad Name"}]);
    let first = spec["containers"][0].clone();
    spec["containers"].as_array_mut().unwrap().push(first);
    bad["metadata"]["labels"]["tcab.dev/job-id"] = json!("-bad-");
    bad["metadata"]["annotations"]["bad key/x/y"] = json!("v");
    bad["spec"]["backoffLimit"] = json!(-1);
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&bad)).await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (422, Some("Invalid")),
        "{st}"
    );
    assert_eq!(st["details"]["name"], "bad");
    assert_eq!(st["details"]["group"], "batch");
    assert_eq!(st["details"]["kind"], "Job");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Job.batch \"bad\" is invalid: ["),
        "{st}"
    );
    let got = causes(&st);
    let want = [
        (
            "FieldValueInvalid",
            "metadata.labels",
            "Invalid value: \"-bad-\": a valid label must be an empty string",
        ),
        (
            "FieldValueInvalid",
            "metadata.annotations",
            "Invalid value: \"bad key/x/y\": a valid label key must consist",
        ),
        (
            "FieldValueInvalid",
            "spec.template.spec.containers[0].env[0].name",
            "Invalid value: \"1TCAB\": a valid environment variable name",
        ),
        (
            "FieldValueNotSupported",
            "spec.template.spec.containers[0].env[1].valueFrom.fieldRef.fieldPath",
            "Unsupported value: \"status.phase\": supported values: \"metadata.name\", ",
        ),
        (
            "FieldValueInvalid",
            "spec.template.spec.containers[0].envFrom[0].secretRef.name",
            "Invalid value: \"Not_A_Name\": a lowercase RFC 1123 subdomain",
        ),
        (
            "FieldValueNotFound",
            "spec.template.spec.containers[0].volumeMounts[0].name",
            "Not found: \"nope\"",
        ),
        (
            "FieldValueInvalid",
            "spec.template.spec.containers[0].resources.requests",
            "Invalid value: \"3\": must be less than or equal to cpu limit of 2",
        ),
        (
            "FieldValueRequired",
            "spec.template.spec.containers[0].ports[0].containerPort",
            "Required value",
        ),
        (
            "FieldValueInvalid",
            "spec.template.spec.containers[0].ports[1].name",
            "Invalid value: \"Bad Name\": must contain only alpha-numeric characters",
        ),
        (
            "FieldValueDuplicate",
            "spec.template.spec.containers[1].name",
            "Duplicate value: \"driver\"",
        ),
        (
            "FieldValueInvalid",
            "spec.backoffLimit",
            "Invalid value: -1: must be greater than or equal to 0",
        ),
    ];
    for (reason, field, msg) in want {
        assert!(
            got.iter()
                .any(|(r, f, m)| r == reason && f == field && m.starts_with(msg)),
            "no {reason} on {field} ({msg}) in {got:#?}"
        );
    }
    assert_eq!(get(&c, &format!("{}/bad", jobs_url(&s))).await.0, 404);

    // a name too long for the job-name label, a selector without manualSelector
    let long = "j".repeat(64);
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&driver_like(&long))).await;
    assert_eq!(code, 422);
    assert!(
        causes(&st)
            .iter()
            .any(|(_, f, m)| f == "spec.template.labels"
                && m.ends_with("must be no more than 63 characters")),
        "{st}"
    );
    let mut sel = driver_like("sel");
    sel["spec"]["selector"] = json!({"matchLabels": {"tcab.dev/job-id": "run-1"}});
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&sel)).await;
    assert_eq!(code, 422);
    assert!(
        causes(&st)
            .iter()
            .any(|(_, f, m)| f == "spec.selector" && m.ends_with("`selector` not auto-generated")),
        "{st}"
    );
    sel["spec"]["manualSelector"] = json!(true);
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&sel)).await;
    assert_eq!(code, 201, "{st}");
    assert_eq!(
        st["spec"]["selector"],
        json!({"matchLabels": {"tcab.dev/job-id": "run-1"}})
    );

    // a quantity that does not parse is a decoding error
    let mut q = driver_like("q");
    q["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2 cores");
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&q)).await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        st["message"],
        "Job in version \"v1\" cannot be handled as a Job: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}

#[tokio::test]
async fn resource_version_on_create_is_refused_by_storage() {
    let s = api_sim().await;
    let c = client();
    let mut job = driver_like("rv");
    job["metadata"]["resourceVersion"] = json!("42");
    // upstream's etcd store returns a plain error: 500, reason Unknown
    let (code, _, st) = send(c.post(jobs_url(&s)).json(&job)).await;
    assert_eq!(code, 500, "{st}");
    assert!(st.get("reason").is_none(), "{st}");
    assert_eq!(
        st["message"],
        "resourceVersion should not be set on objects to be created"
    );
    assert_eq!(get(&c, &format!("{}/rv", jobs_url(&s))).await.0, 404);
    // a dry run never reaches storage: accepted, and the version is echoed
    let (code, _, dry) = send(c.post(format!("{}?dryRun=All", jobs_url(&s))).json(&job)).await;
    assert_eq!(code, 201, "{dry}");
    assert_eq!(dry["metadata"]["resourceVersion"], "42");
    assert_eq!(get(&c, &format!("{}/rv", jobs_url(&s))).await.0, 404);
}

#[tokio::test]
async fn unknown_fields_warn_fail_or_vanish() {
    let s = api_sim().await;
    let c = client();
    let mut job = driver_like("uf");
    job["spec"]["foo"] = json!(1);
    job["spec"]["template"]["spec"]["containers"][0]["imagee"] = json!("x");
    let (code, warnings, created) = send(c.post(jobs_url(&s)).json(&job)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"spec.foo\\\"\"",
            "299 - \"unknown field \\\"spec.template.spec.containers[0].imagee\\\"\""
        ]
    );
    let (_, stored) = get(&c, &format!("{}/uf", jobs_url(&s))).await;
    assert!(stored["spec"].get("foo").is_none(), "{stored}");
    assert!(
        stored["spec"]["template"]["spec"]["containers"][0]
            .get("imagee")
            .is_none()
    );

    job["metadata"]["name"] = json!("uf-strict");
    let (code, _, st) = send(
        c.post(format!("{}?fieldValidation=Strict", jobs_url(&s)))
            .json(&job),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "Job in version \"v1\" cannot be handled as a Job: strict decoding error: unknown field \"spec.foo\", unknown field \"spec.template.spec.containers[0].imagee\""
    );
    job["metadata"]["name"] = json!("uf-ignore");
    let (code, warnings, _) = send(
        c.post(format!("{}?fieldValidation=Ignore", jobs_url(&s)))
            .json(&job),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));
    let (code, _, st) = send(
        c.post(format!("{}?fieldValidation=Loud", jobs_url(&s)))
            .json(&job),
    )
    .await;
    assert_eq!(
        (code, st["details"]["kind"].as_str()),
        (422, Some("CreateOptions"))
    );

    // patches: Warn drops what the patch brought, Strict is a 422 on `patch`
    let url = format!("{}/uf", jobs_url(&s));
    let patch = |q: &str, body: Value| {
        c.patch(format!("{url}{q}"))
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string())
    };
    let (code, warnings, patched) = send(patch(
        "",
        json!({"metadata": {"labels": {"x": "y"}}, "spec": {"bar": 2}}),
    ))
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(warnings, ["299 - \"unknown field \\\"spec.bar\\\"\""]);
    assert_eq!(patched["metadata"]["labels"]["x"], "y");
    assert!(patched["spec"].get("bar").is_none());
    let (code, _, st) = send(patch(
        "?fieldValidation=Strict",
        json!({"spec": {"bar": 2}}),
    ))
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "patch");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: unknown field \"spec.bar\"")
    );
    // an update may not change the template
    let (code, _, st) = send(patch(
        "",
        json!({"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 5}}}}),
    ))
    .await;
    assert_eq!(code, 422);
    assert_eq!(st["details"]["causes"][0]["field"], "spec.template");
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let s = sim().await;
    let c = client();
    let (code, _, st) = send(
        c.post(format!("{}?dryRun=Maybe", jobs_url(&s)))
            .json(&driver_like("d")),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        st["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Maybe\"}: supported values: \"All\""
    );
    let rv0 = s.sim().store.rv();
    let (code, _, dry) = send(
        c.post(format!("{}?dryRun=All", jobs_url(&s)))
            .json(&driver_like("d")),
    )
    .await;
    assert_eq!(code, 201);
    assert!(dry["metadata"]["uid"].is_string() && dry["metadata"].get("resourceVersion").is_none());
    assert_eq!(
        dry["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        dry["metadata"]["uid"]
    );
    let mut invalid = driver_like("d");
    invalid["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    assert_eq!(
        send(
            c.post(format!("{}?dryRun=All", jobs_url(&s)))
                .json(&invalid)
        )
        .await
        .0,
        422
    );
    assert_eq!(s.sim().store.rv(), rv0, "nothing written");
    assert_eq!(get(&c, &format!("{}/d", jobs_url(&s))).await.0, 404);

    // a real Job and its running pod (its envFrom Secret must exist, or the
    // container waits with CreateContainerConfigError)
    let (code, _) = post(
        &c,
        &format!("{}/api/v1/namespaces/{NS}/secrets", s.url()),
        &json!({"metadata": {"name": "driver-env"}, "stringData": {"K": "v"}}),
    )
    .await;
    assert_eq!(code, 201);
    let (_, job) = post(&c, &jobs_url(&s), &driver_like("d")).await;
    let pod = eventually("the pod runs", SECS, || async {
        let (_, l) = get(&c, &format!("{}?labelSelector=job-name%3Dd", pods_url(&s))).await;
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["status"]["phase"] == "Running")
            .cloned()
    })
    .await;
    let pod_url = format!(
        "{}/{}",
        pods_url(&s),
        pod["metadata"]["name"].as_str().unwrap()
    );
    let job_url = format!("{}/d", jobs_url(&s));
    let before_job = get(&c, &job_url).await.1;
    let before_pod = get(&c, &pod_url).await.1;
    let (code, _, upd) = send(
        c.patch(format!("{job_url}?dryRun=All"))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata": {"labels": {"dry": "yes"}}}"#),
    )
    .await;
    assert_eq!(
        (code, upd["metadata"]["labels"]["dry"].as_str()),
        (200, Some("yes"))
    );
    let mut put = before_job.clone();
    put["metadata"]["labels"]["dry"] = json!("put");
    let (code, _, upd) = send(c.put(format!("{job_url}?dryRun=All")).json(&put)).await;
    assert_eq!(
        (code, upd["metadata"]["labels"]["dry"].as_str()),
        (200, Some("put"))
    );
    let (code, _, gone) = send(c.delete(&pod_url).json(&json!({"dryRun": ["All"]}))).await;
    assert_eq!(code, 200);
    assert!(
        gone["metadata"]["deletionTimestamp"].is_string(),
        "a graceful delete shows its timestamp: {gone}"
    );
    let (code, _, list) = send(c.delete(format!(
        "{}?labelSelector=job-name%3Dd&dryRun=All",
        pods_url(&s)
    )))
    .await;
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let (code, _, _) =
        send(c.delete(format!("{job_url}?dryRun=All&propagationPolicy=Background"))).await;
    assert_eq!(code, 200);
    let (code, _, ev) = send(
        c.post(format!("{pod_url}/eviction?dryRun=All"))
            .json(&json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod["metadata"]["name"]}})),
    )
    .await;
    assert_eq!((code, ev["status"].as_str()), (201, Some("Success")));
    let (code, _, ev) = send(
        c.post(format!("{pod_url}/eviction"))
            .json(&json!({"metadata": {"name": pod["metadata"]["name"]}, "deleteOptions": {"dryRun": ["All"]}})),
    )
    .await;
    assert_eq!((code, ev["status"].as_str()), (201, Some("Success")));
    // nothing moved
    let after_job = get(&c, &job_url).await.1;
    assert_eq!(
        after_job["metadata"]["labels"],
        before_job["metadata"]["labels"]
    );
    assert_eq!(after_job["metadata"]["uid"], job["metadata"]["uid"]);
    assert!(after_job["metadata"].get("deletionTimestamp").is_none());
    let after_pod = get(&c, &pod_url).await.1;
    assert_eq!(after_pod["metadata"], before_pod["metadata"]);
    assert_eq!(after_pod["status"]["phase"], "Running");
    assert!(
        after_pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|c| c["type"] != "DisruptionTarget")
    );
}

#[tokio::test]
async fn delete_preconditions_conflict_and_delete_nothing() {
    let s = api_sim().await;
    let c = client();
    let pod = json!({"metadata": {"name": "p", "labels": {"set": "a"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
    let (_, created) = post(&c, &pods_url(&s), &pod).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let url = format!("{}/p", pods_url(&s));
    let (code, _, st) = send(
        c.delete(&url)
            .json(&json!({"preconditions": {"uid": "not-it"}})),
    )
    .await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(
        st["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"p\": the UID in the precondition (not-it) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );
    assert_eq!(st["details"]["kind"], "Pod");
    let (code, _, st) = send(
        c.delete(&url)
            .json(&json!({"preconditions": {"uid": uid, "resourceVersion": "1"}})),
    )
    .await;
    assert_eq!(code, 409);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("the ResourceVersion in the precondition (1) does not match")
    );
    // deletecollection applies them to each item
    let (code, _, _) = send(
        c.delete(format!("{}?labelSelector=set%3Da", pods_url(&s)))
            .json(&json!({"preconditions": {"uid": "not-it"}})),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(get(&c, &url).await.0, 200, "nothing was deleted");
    // Once it runs its kubelet writes no more, so the resourceVersion read
    // is still current at the DELETE.
    let running = eventually("p runs", SECS, || async {
        let (_, p) = get(&c, &url).await;
        (p["status"]["containerStatuses"][0]["state"]["running"].is_object()).then_some(p)
    })
    .await;
    let rv = running["metadata"]["resourceVersion"].clone();
    let (code, _, _) = send(c.delete(&url).json(
        &json!({"preconditions": {"uid": uid, "resourceVersion": rv}, "gracePeriodSeconds": 0}),
    ))
    .await;
    assert_eq!(code, 200);
    assert_eq!(get(&c, &url).await.0, 404);
    // Jobs name their group
    post(&c, &jobs_url(&s), &driver_like("j")).await;
    let (code, _, st) = send(
        c.delete(format!("{}/j", jobs_url(&s)))
            .json(&json!({"preconditions": {"uid": "x"}})),
    )
    .await;
    assert_eq!(code, 409);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Operation cannot be fulfilled on Job.batch \"j\"")
    );
    let (code, _, st) = send(
        c.delete(format!("{}/j", jobs_url(&s)))
            .json(&json!({"propagationPolicy": "Sideways"})),
    )
    .await;
    assert_eq!(
        (code, st["details"]["kind"].as_str()),
        (422, Some("DeleteOptions"))
    );
}

#[tokio::test]
async fn boolean_parameters_parse_as_upstream() {
    let s = api_sim().await;
    let c = client();
    post(&c, &jobs_url(&s), &driver_like("b")).await;
    // the official Python client sends watch=True; an empty value is true too
    for q in ["watch=True", "watch=", "watch=yes", "watch"] {
        let mut w = WatchReader::open(&c, &format!("{}?{q}&timeoutSeconds=5", jobs_url(&s))).await;
        let ev = w
            .next_change(Duration::from_secs(5))
            .await
            .expect("an event");
        assert_eq!(
            (
                ev["type"].as_str(),
                ev["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some("b")),
            "{q}"
        );
    }
    for q in ["watch=false", "watch=FALSE", "watch=0"] {
        let (code, list) = get(&c, &format!("{}?{q}", jobs_url(&s))).await;
        assert_eq!((code, list["kind"].as_str()), (200, Some("JobList")), "{q}");
    }
    // the first of repeated values counts
    let (_, list) = get(&c, &format!("{}?watch=false&watch=true", jobs_url(&s))).await;
    assert_eq!(list["kind"], "JobList");
    let rv = rv_of(&get(&c, &format!("{}/b", jobs_url(&s))).await.1);
    let mut w = WatchReader::open(
        &c,
        &format!(
            "{}?watch=1&allowWatchBookmarks=True&resourceVersion={rv}",
            jobs_url(&s)
        ),
    )
    .await;
    let ev = w.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ev["type"], "BOOKMARK");
}
