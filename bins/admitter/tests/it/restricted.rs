//! On the real control plane (tcab-real-cluster; one `SKIP:` line when it is
//! not built): the driver and publisher Jobs the admitter builds from its
//! default settings pass PodSecurity `restricted`, as the API server's own
//! admission plugin judges them.
//!
//! PodSecurity does not enforce on a Job, only on the pods its controller
//! makes; for a Job it answers a namespace's `warn` level with a `Warning`
//! header (`would violate PodSecurity "restricted:latest": ...`). So each
//! Job is created with `dryRun=All` (validated and admitted, never stored) in
//! a namespace labelled `pod-security.kubernetes.io/warn=restricted`, and
//! the headers are read. The same Jobs with every securityContext set to `{}`
//! are warned of, which shows the check sees what it looks for.

use http::{Request, header};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder::{driver_job, publisher_job};
use tcab_real_cluster::{built_or_skip, shared};
use tcab_shared::backend::types::{ClaimedPublish, ClaimedRun};
use tcab_shared::config::BinaryConfig;
use tcab_testkit::env::overlay;

/// What PodSecurity's warnings start with for the `restricted` level.
const RESTRICTED_WARNING: &str = "would violate PodSecurity \"restricted:latest\"";

/// The driver Job (with its subscription mount, so with an fsGroup) and the
/// publisher Job of one claim each, built from the required settings plus
/// `extra`.
fn jobs(extra: &[(&str, &str)]) -> [Job; 2] {
    let base = [
        ("TCAB_BACKEND_URL", "http://backend.tcab:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", "token"),
        ("TCAB_DRIVER_IMAGE", "registry.example/driver:1"),
        ("TCAB_PUBLISHER_IMAGE", "registry.example/publisher:1"),
        ("TCAB_DRIVER_SUBSCRIPTION_SECRET", "subscription"),
    ];
    let config = AdmitterConfig::from_vars(overlay(&base, extra)).expect("valid settings");
    let run: ClaimedRun = serde_json::from_value(json!({
        "id": "run-1", "token": "run-token", "queue_seq": 1, "harness": "h", "model": "m",
        "attempt": 1, "launch_request": {}, "lease_expires_at": "2026-11-29T16:04:11Z"
    }))
    .expect("a claimed run");
    let publish: ClaimedPublish = serde_json::from_value(json!({
        "id": "pub-1", "token": "pub-token", "request": {},
        "lease_expires_at": "2026-11-29T16:04:11Z"
    }))
    .expect("a claimed publish");
    [
        driver_job(&config.jobs, &run),
        publisher_job(&config.jobs, &publish).expect("a publisher image is set"),
    ]
}

/// The `Warning` headers of a dry-run create of `job` in `namespace`, which
/// the API server must accept.
async fn dry_run_warnings(client: &kube::Client, namespace: &str, job: &Job) -> Vec<String> {
    let request = Request::post(format!(
        "/apis/batch/v1/namespaces/{namespace}/jobs?dryRun=All"
    ))
    .header(header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(job).expect("a Job serializes").into())
    .expect("a request");
    let response = client.send(request).await.expect("an answer");
    let status = response.status();
    let warnings = response
        .headers()
        .get_all(header::WARNING)
        .iter()
        .map(|v| warn_text(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .unwrap_or_default();
    assert!(
        status.is_success(),
        "the dry-run create answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    warnings
}

#[tokio::test]
async fn the_default_jobs_pass_podsecurity_restricted_on_the_real_api_server() {
    if built_or_skip().is_none() {
        return;
    }
    let access = shared().await.expect("the control plane");
    let client = access.admin_client().await.expect("an admin client");
    let name = format!("tcab-restricted-{:08x}", rand_suffix());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/warn-version": "latest",
        }}
    }))
    .expect("a namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the namespace created");

    for job in jobs(&[]) {
        let warnings = dry_run_warnings(&client, &name, &job).await;
        let kind = job.metadata.name.as_deref().unwrap_or("?");
        assert!(
            warnings.iter().all(|w| !w.contains("PodSecurity")),
            "{kind}: the default Job is warned of: {warnings:#?}"
        );
    }

    // Each setting at {} takes its part of `restricted` away, and the plugin says so.
    let off = jobs(&[
        ("TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT", "{}"),
        ("TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT", "{}"),
        ("TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT", "{}"),
        ("TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT", "{}"),
    ]);
    for job in off {
        let warnings = dry_run_warnings(&client, &name, &job).await.join("\n");
        let kind = job.metadata.name.as_deref().unwrap_or("?");
        for needle in [
            RESTRICTED_WARNING,
            "allowPrivilegeEscalation != false",
            "unrestricted capabilities",
            "runAsNonRoot != true",
            "seccompProfile",
        ] {
            assert!(
                warnings.contains(needle),
                "{kind}: no {needle:?} among the warnings: {warnings}"
            );
        }
    }

    let _ = namespaces.delete(&name, &DeleteParams::default()).await;
}

/// The text of a `Warning` header (`299 - "text"`, RFC 9111): the quoted
/// string with its backslash escapes undone.
fn warn_text(header: &str) -> String {
    let quoted = match (header.find('"'), header.rfind('"')) {
        (Some(start), Some(end)) if end > start => &header[start + 1..end],
        _ => return header.to_owned(),
    };
    let mut text = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        text.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    text
}

/// A suffix that keeps this test's namespace apart from another run's on a
/// shared control plane.
fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    nanos ^ std::process::id()
}
