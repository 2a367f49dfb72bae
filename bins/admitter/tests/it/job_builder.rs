//! The driver and publisher Jobs, field by field, against the spec's "The
//! driver Job" and docs/job-contract.md.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::json;
use std::collections::BTreeMap;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::job_builder::{
    JobBuildError, JobSettings, MAX_DESCRIPTION_LEN, PUBLISHER_TERMINATION_GRACE_SECONDS,
    SUBSCRIPTION_FILE_MODE, SecurityContexts, Sizing, driver_job, publisher_job,
};
use tcab_shared::backend::types::{ClaimedPublish, ClaimedRun};
use tcab_shared::config::BinaryConfig;
use tcab_shared::names::{self, DRIVER_CONTAINER, PUBLISHER_CONTAINER};
use tcab_testkit::env::overlay;

const TOKEN: &str = "tok-9f8e7d6c5b4a-secret";

/// The pod securityContext PodSecurity `restricted` asks for, as the
/// defaults give it.
fn restricted_pod() -> serde_json::Value {
    json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// The container securityContext PodSecurity `restricted` asks for.
fn restricted_container() -> serde_json::Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

fn restricted() -> SecurityContexts {
    SecurityContexts {
        pod: serde_json::from_value(restricted_pod()).unwrap(),
        container: serde_json::from_value(restricted_container()).unwrap(),
    }
}

fn settings() -> JobSettings {
    JobSettings {
        managed_by: "tcab-dispatcher".into(),
        backend_url: "http://backend.tcab.svc:8080".into(),
        driver_image: "ghcr.io/tcab/driver:3f9c2e1".into(),
        publisher_image: Some("ghcr.io/tcab/publisher:3f9c2e1".into()),
        artifacts_url: "s3://tcab-runs/artifacts".into(),
        repos_url: "s3://tcab-runs/repos".into(),
        finish_deadline_seconds: 3600,
        report_deadline_seconds: 600,
        driver_managed_by: "tcab-driver".into(),
        termination_grace_seconds: 120,
        cpu_request: "250m".into(),
        memory_request: "512Mi".into(),
        cpu_limit: Some("2".into()),
        memory_limit: None,
        publisher_resources: Sizing {
            cpu_request: "100m".into(),
            memory_request: "256Mi".into(),
            cpu_limit: Some("1".into()),
            memory_limit: Some("1Gi".into()),
        },
        ttl_seconds_after_finished: 3600,
        driver_active_deadline_seconds: 7200,
        publisher_active_deadline_seconds: 2700,
        driver_secrets: vec!["provider-keys".into(), "extra-keys".into()],
        subscription_secret: Some("claude-subscription".into()),
        subscription_dir: "/var/run/tcab/subscription".into(),
        fs_group: 10001,
        driver_security: restricted(),
        publisher_security: restricted(),
        driver_service_account: Some("tcab-driver".into()),
        passthrough_env: vec![
            (
                "TCAB_CONTAINER_IMAGE_PYTHON".into(),
                "ghcr.io/tcab/run-python:3f9c2e1".into(),
            ),
            ("TCAB_K8S_NAMESPACE".into(), "tcab-sandboxes".into()),
            ("TCAB_K8S_NODE_SELECTOR".into(), "pool=sandbox".into()),
        ],
    }
}

fn launch_request() -> serde_json::Value {
    json!({"harness": "claude-code", "model": "opus", "case": "fizzbuzz",
           "sim": {"duration_ms": 1500, "outcome": "succeeded"}, "note": "quote \" and ü"})
}

fn run() -> ClaimedRun {
    serde_json::from_value(json!({
        "id": "run-7f3a",
        "token": TOKEN,
        "queue_seq": 42,
        "harness": "claude-code",
        "model": "opus",
        "case": "fizzbuzz",
        "attempt": 1,
        "launch_request": launch_request(),
        "lease_expires_at": "2026-11-29T16:04:11Z"
    }))
    .unwrap()
}

fn publish_request() -> serde_json::Value {
    json!({"release": "v1.4.0", "targets": ["console", "docs"]})
}

fn publish() -> ClaimedPublish {
    serde_json::from_value(json!({
        "id": "pub-12",
        "token": "pub-token-0123",
        "request": publish_request(),
        "lease_expires_at": "2026-11-29T16:04:11Z"
    }))
    .unwrap()
}

fn pod_spec(job: &Job) -> &PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn container(job: &Job) -> &Container {
    let pod = pod_spec(job);
    assert_eq!(pod.containers.len(), 1, "exactly one container");
    &pod.containers[0]
}

/// The env as (name, plain value or `fieldRef:<path>`), in order.
fn env_of(job: &Job) -> Vec<(String, String)> {
    container(job)
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|v: &EnvVar| {
            let value = match (&v.value, &v.value_from) {
                (Some(value), None) => value.clone(),
                (None, Some(from)) => {
                    let field = from.field_ref.as_ref().expect("only fieldRef is used");
                    assert!(from.secret_key_ref.is_none() && from.config_map_key_ref.is_none());
                    format!("fieldRef:{}", field.field_path)
                }
                other => panic!("{}: value and valueFrom {other:?}", v.name),
            };
            (v.name.clone(), value)
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[test]
fn driver_env_is_exactly_the_contract() {
    let job = driver_job(&settings(), &run());
    let env = env_of(&job);
    let launch = launch_request().to_string();
    let want = pairs(&[
        ("TCAB_BACKEND_URL", "http://backend.tcab.svc:8080"),
        ("TCAB_DRIVER_ARTIFACTS_URL", "s3://tcab-runs/artifacts"),
        ("TCAB_DRIVER_REPOS_URL", "s3://tcab-runs/repos"),
        ("TCAB_JOB_ID", "run-7f3a"),
        ("TCAB_JOB_TOKEN", TOKEN),
        ("TCAB_LAUNCH_REQUEST", &launch),
        ("TCAB_DRIVER_FINISH_DEADLINE_SECONDS", "3600"),
        ("TCAB_DRIVER_REPORT_DEADLINE_SECONDS", "600"),
        ("TCAB_DRIVER_RUNTIME", "kubernetes"),
        ("TCAB_DRIVER_MANAGED_BY", "tcab-driver"),
        ("TCAB_DRIVER_POD_IP", "fieldRef:status.podIP"),
        (
            "TCAB_CONTAINER_IMAGE_PYTHON",
            "ghcr.io/tcab/run-python:3f9c2e1",
        ),
        ("TCAB_K8S_NAMESPACE", "tcab-sandboxes"),
        ("TCAB_K8S_NODE_SELECTOR", "pool=sandbox"),
    ]);
    assert_eq!(env, want);
}

#[test]
fn launch_request_round_trips_as_json() {
    let job = driver_job(&settings(), &run());
    let env = env_of(&job);
    let raw = &env
        .iter()
        .find(|(k, _)| k == "TCAB_LAUNCH_REQUEST")
        .unwrap()
        .1;
    let parsed: serde_json::Value = serde_json::from_str(raw).unwrap();
    assert_eq!(parsed, launch_request());
    assert_eq!(
        parsed["sim"]["duration_ms"], 1500,
        "the fake driver's script survives"
    );
}

#[test]
fn pod_ip_comes_from_the_downward_api() {
    let job = driver_job(&settings(), &run());
    let var = container(&job)
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "TCAB_DRIVER_POD_IP")
        .unwrap();
    let field = var.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
    assert_eq!(field.field_path, "status.podIP");
    assert_eq!(field.api_version.as_deref(), Some("v1"));
    assert!(var.value.is_none());
}

#[test]
fn passthrough_is_filtered_sorted_and_after_the_fixed_vars() {
    let mut s = settings();
    s.passthrough_env = vec![
        ("TCAB_K8S_ZONE".into(), "z".into()),
        ("TCAB_CONTAINER_IMAGE_NODE".into(), "node:1".into()),
        ("TCAB_BACKEND_URL".into(), "http://evil".into()),
        ("PATH".into(), "/bin".into()),
        ("TCAB_K8S_A".into(), "a".into()),
    ];
    let env = env_of(&driver_job(&s, &run()));
    let tail: Vec<_> = env[11..].to_vec();
    assert_eq!(
        tail,
        pairs(&[
            ("TCAB_CONTAINER_IMAGE_NODE", "node:1"),
            ("TCAB_K8S_A", "a"),
            ("TCAB_K8S_ZONE", "z"),
        ])
    );
    let backend: Vec<_> = env
        .iter()
        .filter(|(k, _)| k == "TCAB_BACKEND_URL")
        .collect();
    assert_eq!(
        backend.len(),
        1,
        "a passthrough never overrides a fixed var"
    );
    assert_eq!(backend[0].1, "http://backend.tcab.svc:8080");
    assert!(!env.iter().any(|(k, _)| k == "PATH"));

    s.passthrough_env.clear();
    assert_eq!(
        env_of(&driver_job(&s, &run())).len(),
        11,
        "only the fixed vars"
    );
}

#[test]
fn image_and_container_name() {
    let job = driver_job(&settings(), &run());
    let c = container(&job);
    assert_eq!(c.name, DRIVER_CONTAINER);
    assert_eq!(c.name, "driver");
    assert_eq!(c.image.as_deref(), Some("ghcr.io/tcab/driver:3f9c2e1"));
    assert!(
        c.command.is_none() && c.args.is_none(),
        "the image's entrypoint runs"
    );
}

#[test]
fn labels_on_the_job_and_its_pod_template() {
    let job = driver_job(&settings(), &run());
    let want = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "tcab-dispatcher".to_string(),
        ),
        ("tcab.dev/job-id".to_string(), "run-7f3a".to_string()),
        ("tcab.dev/job-kind".to_string(), "run".to_string()),
        ("tcab.dev/claim".to_string(), names::claim_tag(TOKEN)),
        ("tcab.dev/harness".to_string(), "claude-code".to_string()),
        ("tcab.dev/model".to_string(), "opus".to_string()),
        ("tcab.dev/case".to_string(), "fizzbuzz".to_string()),
    ]);
    assert_eq!(job.metadata.labels.as_ref(), Some(&want));
    let template = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(template.labels.as_ref(), Some(&want));
    for value in want.values() {
        assert!(names::is_label_value(value), "{value}");
    }
}

/// The Job's annotations, and those of its pod template, which must be equal.
fn annotations_of(job: &Job) -> BTreeMap<String, String> {
    let template = job.spec.as_ref().unwrap().template.metadata.as_ref();
    let on_job = job.metadata.annotations.clone().unwrap_or_default();
    let on_pod = template.unwrap().annotations.clone().unwrap_or_default();
    assert_eq!(on_job, on_pod, "the Job and its pod template differ");
    on_job
}

/// The Job's labels, and those of its pod template, which must be equal.
fn labels_of(job: &Job) -> BTreeMap<String, String> {
    let template = job.spec.as_ref().unwrap().template.metadata.as_ref();
    let on_job = job.metadata.labels.clone().unwrap_or_default();
    let on_pod = template.unwrap().labels.clone().unwrap_or_default();
    assert_eq!(on_job, on_pod, "the Job and its pod template differ");
    on_job
}

fn strings(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn safe_to_evict_false_on_the_pod_template_and_the_job() {
    let job = driver_job(&settings(), &run());
    assert_eq!(
        annotations_of(&job)
            .get("cluster-autoscaler.kubernetes.io/safe-to-evict")
            .map(String::as_str),
        Some("false")
    );
}

#[test]
fn a_driver_job_says_which_harness_model_and_case_it_runs() {
    let job = driver_job(&settings(), &run());
    assert_eq!(
        annotations_of(&job),
        strings(&[
            ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
            ("tcab.dev/harness", "claude-code"),
            ("tcab.dev/model", "opus"),
            ("tcab.dev/case", "fizzbuzz"),
        ])
    );
    let l = labels_of(&job);
    assert_eq!(
        l.get("tcab.dev/harness").map(String::as_str),
        Some("claude-code")
    );
    assert_eq!(l.get("tcab.dev/model").map(String::as_str), Some("opus"));
    assert_eq!(l.get("tcab.dev/case").map(String::as_str), Some("fizzbuzz"));
}

#[test]
fn free_text_is_an_annotation_only_and_a_missing_case_is_left_out() {
    let mut claimed = run();
    claimed.model = "vendor/model 4.5 (preview)".into();
    claimed.case = None;
    claimed.jam = Some("jam-2026-spring".into());
    let job = driver_job(&settings(), &claimed);
    let a = annotations_of(&job);
    assert_eq!(
        a.get("tcab.dev/model").map(String::as_str),
        Some("vendor/model 4.5 (preview)")
    );
    assert_eq!(
        a.get("tcab.dev/jam").map(String::as_str),
        Some("jam-2026-spring")
    );
    assert!(!a.contains_key("tcab.dev/case"), "{a:?}");
    let l = labels_of(&job);
    assert!(
        !l.contains_key("tcab.dev/model"),
        "not a label value: {l:?}"
    );
    assert!(!l.contains_key("tcab.dev/case"), "{l:?}");
    assert_eq!(
        l.get("tcab.dev/jam").map(String::as_str),
        Some("jam-2026-spring")
    );
    for value in l.values() {
        assert!(names::is_label_value(value), "{value}");
    }

    // Empty values say nothing.
    claimed.harness = " ".into();
    let job = driver_job(&settings(), &claimed);
    assert!(!annotations_of(&job).contains_key("tcab.dev/harness"));
    assert!(!labels_of(&job).contains_key("tcab.dev/harness"));
}

#[test]
fn an_overlong_value_is_cut_on_a_character_boundary() {
    let mut claimed = run();
    claimed.case = Some("ü".repeat(MAX_DESCRIPTION_LEN));
    let job = driver_job(&settings(), &claimed);
    let case = annotations_of(&job)["tcab.dev/case"].clone();
    assert!(case.len() <= MAX_DESCRIPTION_LEN, "{}", case.len());
    assert!(case.len() > MAX_DESCRIPTION_LEN - 8, "{}", case.len());
    assert!(case.ends_with("ü…"), "{case}");
    assert!(!labels_of(&job).contains_key("tcab.dev/case"));
    let exact = "c".repeat(MAX_DESCRIPTION_LEN);
    claimed.case = Some(exact.clone());
    let job = driver_job(&settings(), &claimed);
    assert_eq!(
        annotations_of(&job)["tcab.dev/case"],
        exact,
        "not cut at the limit"
    );
}

#[test]
fn a_publisher_job_says_which_release_and_suite_it_publishes() {
    let mut claimed = publish();
    claimed.request = json!({"release": "2026-11-29", "suite": "main", "sim": {"duration_ms": 5}});
    let job = publisher_job(&settings(), &claimed).unwrap();
    let a = annotations_of(&job);
    assert_eq!(
        a.get("tcab.dev/release").map(String::as_str),
        Some("2026-11-29")
    );
    assert_eq!(a.get("tcab.dev/suite").map(String::as_str), Some("main"));
    let l = labels_of(&job);
    assert_eq!(
        l.get("tcab.dev/release").map(String::as_str),
        Some("2026-11-29")
    );
    assert_eq!(l.get("tcab.dev/suite").map(String::as_str), Some("main"));
    assert!(!a.contains_key("tcab.dev/harness") && !l.contains_key("tcab.dev/harness"));

    // A number is named as text; an object or a missing key names nothing.
    claimed.request = json!({"release": 42, "suite": {"name": "main"}});
    let job = publisher_job(&settings(), &claimed).unwrap();
    let a = annotations_of(&job);
    assert_eq!(a.get("tcab.dev/release").map(String::as_str), Some("42"));
    assert!(!a.contains_key("tcab.dev/suite"), "{a:?}");
    claimed.request = json!({});
    let job = publisher_job(&settings(), &claimed).unwrap();
    assert_eq!(
        annotations_of(&job),
        strings(&[("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")])
    );
}

#[test]
fn one_and_done_with_ttl_deadline_and_grace() {
    let job = driver_job(&settings(), &run());
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    assert_eq!(spec.active_deadline_seconds, Some(7200));
    let pod = pod_spec(&job);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.termination_grace_period_seconds, Some(120));

    let mut s = settings();
    s.termination_grace_seconds = 300;
    s.ttl_seconds_after_finished = 60;
    s.driver_active_deadline_seconds = 99;
    let job = driver_job(&s, &run());
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.ttl_seconds_after_finished, Some(60));
    assert_eq!(spec.active_deadline_seconds, Some(99));
    assert_eq!(pod_spec(&job).termination_grace_period_seconds, Some(300));
}

fn quantities(map: Option<&BTreeMap<String, Quantity>>) -> Option<BTreeMap<&str, &str>> {
    map.map(|m| m.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect())
}

#[test]
fn resources_request_cpu_and_memory_and_limit_only_cpu_by_default() {
    let job = driver_job(&settings(), &run());
    let r = container(&job).resources.as_ref().unwrap();
    assert_eq!(
        quantities(r.requests.as_ref()),
        Some(BTreeMap::from([("cpu", "250m"), ("memory", "512Mi")]))
    );
    assert_eq!(
        quantities(r.limits.as_ref()),
        Some(BTreeMap::from([("cpu", "2")]))
    );
}

#[test]
fn resources_with_a_configured_memory_limit() {
    let mut s = settings();
    s.memory_limit = Some("4Gi".into());
    let job = driver_job(&s, &run());
    let r = container(&job).resources.as_ref().unwrap();
    assert_eq!(
        quantities(r.limits.as_ref()),
        Some(BTreeMap::from([("cpu", "2"), ("memory", "4Gi")]))
    );
}

#[test]
fn resources_without_any_limit() {
    let mut s = settings();
    s.cpu_limit = None;
    let job = driver_job(&s, &run());
    let r = container(&job).resources.as_ref().unwrap();
    assert!(r.limits.is_none());
    assert_eq!(
        quantities(r.requests.as_ref()),
        Some(BTreeMap::from([("cpu", "250m"), ("memory", "512Mi")]))
    );
}

#[test]
fn env_from_one_secret_ref_per_driver_secret() {
    let job = driver_job(&settings(), &run());
    let from = container(&job).env_from.as_ref().unwrap();
    let names: Vec<_> = from
        .iter()
        .map(|f| {
            assert!(f.config_map_ref.is_none() && f.prefix.is_none());
            f.secret_ref.as_ref().unwrap().name.clone()
        })
        .collect();
    assert_eq!(names, ["provider-keys", "extra-keys"]);

    let mut s = settings();
    s.driver_secrets.clear();
    assert!(container(&driver_job(&s, &run())).env_from.is_none());
}

#[test]
fn subscription_secret_is_an_optional_read_only_volume_with_fs_group() {
    let job = driver_job(&settings(), &run());
    let pod = pod_spec(&job);
    let volumes = pod.volumes.as_ref().unwrap();
    assert_eq!(volumes.len(), 1);
    let secret = volumes[0].secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("claude-subscription"));
    assert_eq!(secret.optional, Some(true));
    assert_eq!(secret.default_mode, Some(SUBSCRIPTION_FILE_MODE));
    assert_eq!(SUBSCRIPTION_FILE_MODE, 0o440);
    assert!(secret.items.is_none(), "every key is projected");

    let mounts = container(&job).volume_mounts.as_ref().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].name, volumes[0].name);
    assert_eq!(mounts[0].mount_path, "/var/run/tcab/subscription");
    assert_eq!(mounts[0].read_only, Some(true));
    assert!(mounts[0].sub_path.is_none());

    // The fsGroup joins the pod's securityContext, the rest of which stays.
    let mut want = restricted_pod();
    want["fsGroup"] = json!(10001);
    assert_eq!(serde_json::to_value(&pod.security_context).unwrap(), want);
}

#[test]
fn no_subscription_secret_no_volume() {
    let mut s = settings();
    s.subscription_secret = None;
    let job = driver_job(&s, &run());
    let pod = pod_spec(&job);
    assert!(pod.volumes.is_none());
    assert_eq!(
        serde_json::to_value(&pod.security_context).unwrap(),
        restricted_pod(),
        "no fsGroup without a mount"
    );
    assert!(container(&job).volume_mounts.is_none());
}

#[test]
fn service_account_when_configured() {
    let job = driver_job(&settings(), &run());
    assert_eq!(
        pod_spec(&job).service_account_name.as_deref(),
        Some("tcab-driver")
    );
    let mut s = settings();
    s.driver_service_account = None;
    assert!(
        pod_spec(&driver_job(&s, &run()))
            .service_account_name
            .is_none()
    );
}

#[test]
fn name_is_per_claim_valid_and_hides_the_token() {
    let job = driver_job(&settings(), &run());
    let name = job.metadata.name.clone().unwrap();
    assert_eq!(
        name,
        names::job_name(tcab_shared::Lane::Run, "run-7f3a", &names::claim_tag(TOKEN))
    );
    assert!(name.starts_with("tcab-driver-run-7f3a-"), "{name}");
    assert!(is_dns1123_label(&name), "{name}");
    assert!(job.metadata.generate_name.is_none());
    assert!(
        job.metadata.namespace.is_none(),
        "the client's namespace applies"
    );

    // Same claim, same name (a repeated create answers 409); a new claim, a new name.
    assert_eq!(driver_job(&settings(), &run()).metadata.name.unwrap(), name);
    let mut reclaimed = run();
    reclaimed.token = "another-token".into();
    assert_ne!(
        driver_job(&settings(), &reclaimed).metadata.name.unwrap(),
        name
    );

    // The token only appears in its env var.
    let mut json = serde_json::to_value(&job).unwrap();
    let text = json.to_string();
    assert_eq!(
        text.matches(TOKEN).count(),
        1,
        "token once, in TCAB_JOB_TOKEN"
    );
    json["spec"]["template"]["spec"]["containers"][0]["env"] = json!([]);
    assert!(!json.to_string().contains(TOKEN));
}

#[test]
fn serializes_as_a_valid_batch_v1_job() {
    let mut s = settings();
    s.memory_limit = Some("4Gi".into());
    let job = driver_job(&s, &run());
    let value = serde_json::to_value(&job).unwrap();
    assert_eq!(value["apiVersion"], "batch/v1");
    assert_eq!(value["kind"], "Job");
    assert_eq!(value["spec"]["backoffLimit"], 0);
    assert_eq!(value["spec"]["ttlSecondsAfterFinished"], 3600);
    assert_eq!(value["spec"]["activeDeadlineSeconds"], 7200);
    let pod = &value["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["terminationGracePeriodSeconds"], 120);
    assert_eq!(pod["securityContext"]["fsGroup"], 10001);
    assert_eq!(pod["volumes"][0]["secret"]["optional"], true);
    assert_eq!(pod["volumes"][0]["secret"]["defaultMode"], 0o440);
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["readOnly"], true);
    assert_eq!(pod["containers"][0]["resources"]["limits"]["memory"], "4Gi");
    assert_eq!(
        pod["containers"][0]["env"][10]["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    assert!(value.get("status").is_none());

    let back: Job = serde_json::from_value(value).unwrap();
    assert_eq!(back, job);
    let publisher = publisher_job(&s, &publish()).unwrap();
    let back: Job = serde_json::from_str(&serde_json::to_string(&publisher).unwrap()).unwrap();
    assert_eq!(back, publisher);
}

#[test]
fn publisher_job_has_the_publisher_contract() {
    let job = publisher_job(&settings(), &publish()).unwrap();
    let name = job.metadata.name.clone().unwrap();
    assert_eq!(
        name,
        names::job_name(
            tcab_shared::Lane::Publish,
            "pub-12",
            &names::claim_tag("pub-token-0123")
        )
    );
    assert!(name.starts_with("tcab-publisher-pub-12-") && is_dns1123_label(&name));

    let request = publish_request().to_string();
    assert_eq!(
        env_of(&job),
        pairs(&[
            ("TCAB_BACKEND_URL", "http://backend.tcab.svc:8080"),
            ("TCAB_PUBLISH_JOB_ID", "pub-12"),
            ("TCAB_JOB_TOKEN", "pub-token-0123"),
            ("TCAB_PUBLISH_REQUEST", &request),
        ])
    );

    let c = container(&job);
    assert_eq!(c.name, PUBLISHER_CONTAINER);
    assert_eq!(c.name, "publisher");
    assert_eq!(c.image.as_deref(), Some("ghcr.io/tcab/publisher:3f9c2e1"));
    assert!(c.env_from.is_none() && c.volume_mounts.is_none());

    let want_labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "tcab-dispatcher".to_string(),
        ),
        ("tcab.dev/job-id".to_string(), "pub-12".to_string()),
        ("tcab.dev/job-kind".to_string(), "publish".to_string()),
        (
            "tcab.dev/claim".to_string(),
            names::claim_tag("pub-token-0123"),
        ),
        ("tcab.dev/release".to_string(), "v1.4.0".to_string()),
    ]);
    assert_eq!(job.metadata.labels.as_ref(), Some(&want_labels));
    let template = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(template.labels.as_ref(), Some(&want_labels));
    let annotations = BTreeMap::from([
        (names::SAFE_TO_EVICT.to_string(), "false".to_string()),
        (names::RELEASE.to_string(), "v1.4.0".to_string()),
    ]);
    assert_eq!(template.annotations.as_ref(), Some(&annotations));
    assert_eq!(job.metadata.annotations.as_ref(), Some(&annotations));

    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    assert_eq!(spec.active_deadline_seconds, Some(45 * 60));
    let pod = pod_spec(&job);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        pod.termination_grace_period_seconds,
        Some(PUBLISHER_TERMINATION_GRACE_SECONDS)
    );
    assert!(pod.volumes.is_none());
    assert!(pod.service_account_name.is_none());
    assert_eq!(
        serde_json::to_value(&pod.security_context).unwrap(),
        restricted_pod(),
        "no fsGroup: the publisher mounts nothing"
    );

    // Its own sizing, not the driver's.
    let r = c.resources.as_ref().unwrap();
    assert_eq!(
        quantities(r.requests.as_ref()),
        Some(BTreeMap::from([("cpu", "100m"), ("memory", "256Mi")]))
    );
    assert_eq!(
        quantities(r.limits.as_ref()),
        Some(BTreeMap::from([("cpu", "1"), ("memory", "1Gi")]))
    );
}

#[test]
fn a_publisher_without_limits_gets_requests_only() {
    let mut s = settings();
    s.publisher_resources.cpu_limit = None;
    s.publisher_resources.memory_limit = None;
    let job = publisher_job(&s, &publish()).unwrap();
    let r = container(&job).resources.as_ref().unwrap();
    assert!(r.limits.is_none());
    assert_eq!(
        quantities(r.requests.as_ref()),
        Some(BTreeMap::from([("cpu", "100m"), ("memory", "256Mi")]))
    );
}

#[test]
fn no_publisher_image_is_a_typed_error() {
    let mut s = settings();
    s.publisher_image = None;
    let err = publisher_job(&s, &publish()).unwrap_err();
    assert_eq!(
        err,
        JobBuildError::NoPublisherImage {
            id: "pub-12".into()
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("TCAB_PUBLISHER_IMAGE") && text.contains("pub-12"),
        "{text}"
    );
}

/// The Jobs the admitter builds from an environment with only `extra`
/// beyond the required variables (and a publisher image): a driver Job with
/// no subscription Secret, a publisher Job.
fn jobs_configured_with(extra: &[(&str, &str)]) -> (Job, Job) {
    let base = [
        ("TCAB_BACKEND_URL", "http://backend.tcab:8080"),
        ("TCAB_BACKEND_SERVICE_TOKEN", "token"),
        ("TCAB_DRIVER_IMAGE", "driver:1"),
        ("TCAB_PUBLISHER_IMAGE", "publisher:1"),
    ];
    let config = AdmitterConfig::from_vars(overlay(&base, extra)).expect("valid");
    (
        driver_job(&config.jobs, &run()),
        publisher_job(&config.jobs, &publish()).unwrap(),
    )
}

/// A pod spec's securityContexts as JSON: the pod's, then its container's
/// (`null` where there is none).
fn contexts(job: &Job) -> (serde_json::Value, serde_json::Value) {
    let pod = pod_spec(job);
    (
        serde_json::to_value(&pod.security_context).unwrap(),
        serde_json::to_value(&container(job).security_context).unwrap(),
    )
}

/// What PodSecurity `restricted` would refuse in a pod spec, by the checks of
/// its profile that the dispatcher's settings can touch (upstream
/// `k8s.io/pod-security-admission/policy`): privileged containers, added
/// capabilities, privilege escalation, root, seccomp, volume types. The
/// real admission plugin judges the same Jobs in the real-cluster test.
fn restricted_violations(pod: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    let pod_sc = &pod["securityContext"];
    let containers = pod["containers"].as_array().cloned().unwrap_or_default();
    for c in &containers {
        let sc = &c["securityContext"];
        let name = c["name"].as_str().unwrap_or("?");
        if sc["privileged"] == true {
            found.push(format!("{name}: privileged"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            found.push(format!("{name}: allowPrivilegeEscalation != false"));
        }
        let caps = &sc["capabilities"];
        if !caps["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"))
        {
            found.push(format!("{name}: capabilities not all dropped"));
        }
        if caps["add"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c != "NET_BIND_SERVICE"))
        {
            found.push(format!("{name}: capabilities added"));
        }
        let non_root = match &sc["runAsNonRoot"] {
            serde_json::Value::Bool(b) => *b,
            _ => pod_sc["runAsNonRoot"] == true,
        };
        if !non_root {
            found.push(format!("{name}: runAsNonRoot != true"));
        }
        if sc["runAsUser"] == 0 || (sc["runAsUser"].is_null() && pod_sc["runAsUser"] == 0) {
            found.push(format!("{name}: runAsUser 0"));
        }
        let seccomp = match sc["seccompProfile"]["type"].as_str() {
            Some(t) => Some(t),
            None => pod_sc["seccompProfile"]["type"].as_str(),
        };
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            found.push(format!("{name}: seccompProfile {seccomp:?}"));
        }
    }
    for v in pod["volumes"].as_array().cloned().unwrap_or_default() {
        let allowed = [
            "name",
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        ];
        if let Some(kind) = v
            .as_object()
            .and_then(|m| m.keys().find(|k| !allowed.contains(&k.as_str())))
        {
            found.push(format!("volume {}: {kind}", v["name"]));
        }
    }
    found
}

fn pod_json(job: &Job) -> serde_json::Value {
    serde_json::to_value(pod_spec(job)).unwrap()
}

/// Unset, the four settings give both pods what PodSecurity `restricted`
/// asks for, and nothing more.
#[test]
fn by_default_driver_and_publisher_pods_meet_podsecurity_restricted() {
    let (driver, publisher) = jobs_configured_with(&[]);
    for job in [&driver, &publisher] {
        assert_eq!(contexts(job), (restricted_pod(), restricted_container()));
        assert_eq!(restricted_violations(&pod_json(job)), Vec::<String>::new());
    }
    // With the subscription Secret mounted, the fsGroup joins; still restricted.
    let (driver, _) = jobs_configured_with(&[("TCAB_DRIVER_SUBSCRIPTION_SECRET", "sub")]);
    let mut pod = restricted_pod();
    pod["fsGroup"] = json!(1000);
    assert_eq!(contexts(&driver), (pod, restricted_container()));
    assert_eq!(
        restricted_violations(&pod_json(&driver)),
        Vec::<String>::new()
    );
}

/// A value replaces its default whole (it is not merged with it), and each
/// lane takes its own two.
#[test]
fn a_set_context_replaces_the_default_whole_per_lane() {
    let (driver, publisher) = jobs_configured_with(&[
        (
            "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT",
            r#"{"runAsUser": 1001, "runAsGroup": 1001}"#,
        ),
        (
            "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
            r#"{"readOnlyRootFilesystem": true}"#,
        ),
        (
            "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT",
            r#"{"runAsNonRoot": true, "runAsUser": 2002, "seccompProfile": {"type": "Localhost", "localhostProfile": "tcab/publisher.json"}}"#,
        ),
        (
            "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT",
            r#"{"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}"#,
        ),
    ]);
    assert_eq!(
        contexts(&driver),
        (
            json!({"runAsGroup": 1001, "runAsUser": 1001}),
            json!({"readOnlyRootFilesystem": true})
        )
    );
    assert_eq!(
        restricted_violations(&pod_json(&driver)),
        [
            "driver: allowPrivilegeEscalation != false",
            "driver: capabilities not all dropped",
            "driver: runAsNonRoot != true",
            "driver: seccompProfile None",
        ],
        "replaced, not merged: none of the defaults is left"
    );
    assert_eq!(
        contexts(&publisher),
        (
            json!({"runAsNonRoot": true, "runAsUser": 2002,
                   "seccompProfile": {"type": "Localhost", "localhostProfile": "tcab/publisher.json"}}),
            json!({"allowPrivilegeEscalation": false,
                   "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}})
        )
    );
    assert_eq!(
        restricted_violations(&pod_json(&publisher)),
        Vec::<String>::new()
    );
}

/// `{}` turns a default off: the Job then carries no such securityContext
/// (the driver pod keeps only the fsGroup of its mount).
#[test]
fn an_empty_object_sets_no_context() {
    let off = [
        ("TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT", "{}"),
        ("TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT", " {} "),
        ("TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT", "{}"),
        ("TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT", "{}"),
    ];
    let (driver, publisher) = jobs_configured_with(&off);
    for job in [&driver, &publisher] {
        assert!(pod_spec(job).security_context.is_none());
        assert!(container(job).security_context.is_none());
        assert!(!restricted_violations(&pod_json(job)).is_empty());
    }
    let mut with_mount = off.to_vec();
    with_mount.push(("TCAB_DRIVER_SUBSCRIPTION_SECRET", "sub"));
    let (driver, _) = jobs_configured_with(&with_mount);
    assert_eq!(contexts(&driver), (json!({"fsGroup": 1000}), json!(null)));
}

#[test]
fn secrets_stay_out_of_debug_of_the_inputs() {
    // The claim's Debug (what a log line might print) never shows the token.
    assert!(!format!("{:?}", run()).contains(TOKEN));
    assert!(!format!("{:?}", publish()).contains("pub-token-0123"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: RngSeed::Fixed(20261129),
        ..ProptestConfig::default()
    })]

    /// For any id the backend hands out (a label value) and any token, the
    /// name is valid, the labels are valid, and the env names are unique.
    #[test]
    fn names_labels_and_env_stay_valid(
        id in "[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?",
        token in "[ -~]{1,64}",
        extra in proptest::collection::vec(("TCAB_(K8S|CONTAINER)_[A-Z_]{1,12}", "[ -~]{0,20}"), 0..6),
        harness in "[ -~]{0,70}",
        model in "\\PC{0,70}",
        case in proptest::option::of("[a-z0-9._/-]{0,70}"),
    ) {
        let mut s = settings();
        s.passthrough_env = extra;
        let mut claimed = run();
        claimed.id = id.clone();
        claimed.token = token.as_str().into();
        claimed.harness = harness.clone();
        claimed.model = model.clone();
        claimed.case = case.clone();
        let job = driver_job(&s, &claimed);
        let name = job.metadata.name.clone().unwrap();
        prop_assert!(is_dns1123_label(&name), "{}", name);
        for value in job.metadata.labels.as_ref().unwrap().values() {
            prop_assert!(names::is_label_value(value), "{}", value);
        }
        // Free text always reaches the annotations, whole (it is short here).
        let a = annotations_of(&job);
        for (key, value) in [("tcab.dev/harness", Some(harness)), ("tcab.dev/model", Some(model)), ("tcab.dev/case", case)] {
            match value.filter(|v| !v.trim().is_empty()) {
                Some(v) => prop_assert_eq!(a.get(key), Some(&v)),
                None => prop_assert!(!a.contains_key(key)),
            }
        }
        let env = env_of(&job);
        let mut names: Vec<_> = env.iter().map(|(k, _)| k.clone()).collect();
        let passthrough = names[11..].to_vec();
        let mut sorted = passthrough.clone();
        sorted.sort();
        prop_assert_eq!(passthrough, sorted);
        let count = names.len();
        names.sort();
        names.dedup();
        prop_assert_eq!(names.len(), count, "env names are unique");
    }
}
