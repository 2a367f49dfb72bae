//! Job builders: pure functions from (settings, claimed job) to the batch/v1
//! Job the admitter creates. docs/job-contract.md lists what the pods receive.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SecretEnvSource, SecretVolumeSource,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use tcab_shared::Lane;
use tcab_shared::backend::types::{ClaimedPublish, ClaimedRun};
use tcab_shared::names;

/// Everything about a Job that comes from the admitter's configuration
/// rather than from the claim. Built by the admitter's configuration (`tcab_admitter::AdmitterConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// Value of the `app.kubernetes.io/managed-by` label on every Job and pod.
    pub managed_by: String,
    /// The backend URL handed to drivers and publishers.
    pub backend_url: String,
    /// The driver image (pinned by the deployment).
    pub driver_image: String,
    /// The publisher image; `None` keeps the publish lane closed.
    pub publisher_image: Option<String>,
    /// `TCAB_DRIVER_ARTIFACTS_URL` for the driver.
    pub artifacts_url: String,
    /// `TCAB_DRIVER_REPOS_URL` for the driver.
    pub repos_url: String,
    /// `TCAB_DRIVER_FINISH_DEADLINE_SECONDS` for the driver.
    pub finish_deadline_seconds: u64,
    /// `TCAB_DRIVER_REPORT_DEADLINE_SECONDS` for the driver.
    pub report_deadline_seconds: u64,
    /// The managed-by value the driver puts on its sandbox pods.
    pub driver_managed_by: String,
    /// The driver pod's `terminationGracePeriodSeconds`.
    pub termination_grace_seconds: i64,
    /// The driver container's CPU request (a Kubernetes quantity).
    pub cpu_request: String,
    /// The driver container's memory request.
    pub memory_request: String,
    /// The driver container's CPU limit; `None` sets none.
    pub cpu_limit: Option<String>,
    /// The driver container's memory limit; unset by default (see the spec).
    pub memory_limit: Option<String>,
    /// The publisher container's requests and limits (its own settings).
    pub publisher_resources: Sizing,
    /// `ttlSecondsAfterFinished` of every Job.
    pub ttl_seconds_after_finished: i32,
    /// The driver Job's `activeDeadlineSeconds` backstop.
    pub driver_active_deadline_seconds: i64,
    /// The publisher Job's `activeDeadlineSeconds` (45 minutes by default).
    pub publisher_active_deadline_seconds: i64,
    /// Secrets whose keys reach the driver's env through `envFrom`.
    pub driver_secrets: Vec<String>,
    /// A Secret mounted read-only (optional: true) instead of put in the env.
    pub subscription_secret: Option<String>,
    /// Where the subscription Secret is mounted.
    pub subscription_dir: String,
    /// The driver pod's `fsGroup`, so the unprivileged driver reads the mount
    /// (set only when the subscription Secret is mounted).
    pub fs_group: i64,
    /// The driver pod's and container's securityContext; `fs_group` is
    /// added to the pod's.
    pub driver_security: SecurityContexts,
    /// The publisher pod's and container's securityContext.
    pub publisher_security: SecurityContexts,
    /// The driver pod's service account; `None` uses the namespace default.
    pub driver_service_account: Option<String>,
    /// Every `TCAB_K8S_*` and `TCAB_CONTAINER_*` variable of the admitter's
    /// own environment, sorted by name, passed through to the driver.
    pub passthrough_env: Vec<(String, String)>,
}

/// A container's requests and limits, as Kubernetes quantities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// The CPU request.
    pub cpu_request: String,
    /// The memory request.
    pub memory_request: String,
    /// The CPU limit; `None` sets none.
    pub cpu_limit: Option<String>,
    /// The memory limit; `None` sets none.
    pub memory_limit: Option<String>,
}

/// A pod's securityContext and its container's, each left out of the Job
/// when empty (set to `{}`). The defaults meet PodSecurity `restricted`
/// (`tcab_shared::config::vars::RESTRICTED_POD`, `RESTRICTED_CONTAINER`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SecurityContexts {
    /// The pod's.
    pub pod: PodSecurityContext,
    /// The container's.
    pub container: SecurityContext,
}

impl JobSettings {
    /// The driver container's requests and limits.
    pub fn driver_resources(&self) -> Sizing {
        Sizing {
            cpu_request: self.cpu_request.clone(),
            memory_request: self.memory_request.clone(),
            cpu_limit: self.cpu_limit.clone(),
            memory_limit: self.memory_limit.clone(),
        }
    }
}

use tcab_shared::names::{DRIVER_CONTAINER, PUBLISHER_CONTAINER};
/// Name of the pod volume that projects the subscription Secret.
pub const SUBSCRIPTION_VOLUME: &str = "subscription";
/// File mode of the projected subscription files: read-only for the owner
/// and the pod's `fsGroup` (0440), nothing for anyone else.
pub const SUBSCRIPTION_FILE_MODE: i32 = 0o440;
/// The publisher pod's `terminationGracePeriodSeconds`. A publisher sent
/// SIGTERM only has to post its failed result, which one backend call does;
/// a minute covers that with the backend client's retries to spare.
pub const PUBLISHER_TERMINATION_GRACE_SECONDS: i64 = 60;

/// Environment variable names of the contract (docs/job-contract.md),
/// declared in the shared crate so the start-up check of unknown variables
/// knows them too.
pub use tcab_shared::names::job_env as env;

/// Why a Job could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobBuildError {
    /// A publish was claimed while no publisher image is configured; the
    /// publish lane should have been closed.
    #[error(
        "no publisher image is configured (TCAB_PUBLISHER_IMAGE), cannot build a Job for publish {id}"
    )]
    NoPublisherImage {
        /// The backend publish job id.
        id: String,
    },
}

/// The driver Job for one claim of a run.
///
/// The returned Job holds the per-job token in its pod env (the contract
/// with the driver), so never log or `Debug`-print it.
pub fn driver_job(settings: &JobSettings, run: &ClaimedRun) -> Job {
    let names = names::claim_names(Lane::Run, &run.id, run.token.expose());
    named_driver_job(settings, run, &names)
}

/// The driver Job for one claim of a run, named `names` (which the
/// admission derived from the claim once, with
/// [`names::claim_names`]).
pub fn named_driver_job(
    settings: &JobSettings,
    run: &ClaimedRun,
    names: &names::ClaimNames,
) -> Job {
    let token = run.token.expose();
    let names::ClaimNames {
        claim,
        job_name: name,
    } = names;
    let mut object_labels = job_labels(settings, Lane::Run, &run.id, claim);
    let mut object_annotations = annotations();
    describe(
        &mut object_labels,
        &mut object_annotations,
        [
            (names::HARNESS, Some(run.harness.clone())),
            (names::MODEL, Some(run.model.clone())),
            (names::CASE, run.case.clone()),
            (names::JAM, run.jam.clone()),
        ],
    );

    let mut vars = vec![
        plain(env::BACKEND_URL, &settings.backend_url),
        plain(env::ARTIFACTS_URL, &settings.artifacts_url),
        plain(env::REPOS_URL, &settings.repos_url),
        plain(env::JOB_ID, &run.id),
        plain(env::JOB_TOKEN, token),
        plain(env::LAUNCH_REQUEST, &run.launch_request.to_string()),
        plain(
            env::FINISH_DEADLINE,
            &settings.finish_deadline_seconds.to_string(),
        ),
        plain(
            env::REPORT_DEADLINE,
            &settings.report_deadline_seconds.to_string(),
        ),
        plain(env::RUNTIME, "kubernetes"),
        plain(env::DRIVER_MANAGED_BY, &settings.driver_managed_by),
        EnvVar {
            name: env::POD_IP.to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".to_owned()),
                    field_path: "status.podIP".to_owned(),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
    ];
    vars.extend(
        passthrough(&settings.passthrough_env)
            .into_iter()
            .map(|(k, v)| plain(k, v)),
    );

    let env_from: Vec<EnvFromSource> = settings
        .driver_secrets
        .iter()
        .map(|secret| EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: secret.clone(),
                optional: None,
            }),
            ..EnvFromSource::default()
        })
        .collect();

    let mut pod_security = settings.driver_security.pod.clone();
    let (volumes, mounts) = match &settings.subscription_secret {
        Some(secret) => (
            Some(vec![Volume {
                name: SUBSCRIPTION_VOLUME.to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    optional: Some(true),
                    default_mode: Some(SUBSCRIPTION_FILE_MODE),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            Some(vec![VolumeMount {
                name: SUBSCRIPTION_VOLUME.to_owned(),
                mount_path: settings.subscription_dir.clone(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
        ),
        None => (None, None),
    };
    if settings.subscription_secret.is_some() {
        // The configuration refuses an fsGroup in the pod's context, so
        // nothing given there is overwritten.
        pod_security.fs_group = Some(settings.fs_group);
    }

    let container = Container {
        name: DRIVER_CONTAINER.to_owned(),
        image: Some(settings.driver_image.clone()),
        env: Some(vars),
        env_from: (!env_from.is_empty()).then_some(env_from),
        volume_mounts: mounts,
        resources: Some(resources(&settings.driver_resources())),
        security_context: unless_empty(&settings.driver_security.container),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".to_owned()),
        termination_grace_period_seconds: Some(settings.termination_grace_seconds),
        service_account_name: settings.driver_service_account.clone(),
        security_context: unless_empty(&pod_security),
        volumes,
        ..PodSpec::default()
    };
    assemble(
        name.clone(),
        object_labels,
        object_annotations,
        pod,
        settings.ttl_seconds_after_finished,
        settings.driver_active_deadline_seconds,
    )
}

/// The publisher Job for one claim of a publish, or an error when no
/// publisher image is configured.
///
/// The publisher gets the publisher env of docs/job-contract.md only (no
/// driver Secrets, subscription mount or service account), its own
/// requests and limits (`publisher_resources`) and securityContexts
/// (`publisher_security`),
/// `publisher_active_deadline_seconds` and
/// [`PUBLISHER_TERMINATION_GRACE_SECONDS`]. Like the driver Job it holds the
/// per-job token in its env: never log it.
pub fn publisher_job(
    settings: &JobSettings,
    publish: &ClaimedPublish,
) -> Result<Job, JobBuildError> {
    let names = names::claim_names(Lane::Publish, &publish.id, publish.token.expose());
    named_publisher_job(settings, publish, &names)
}

/// The publisher Job for one claim of a publish, named `names` (derived
/// once by the admission, with [`names::claim_names`]).
pub fn named_publisher_job(
    settings: &JobSettings,
    publish: &ClaimedPublish,
    names: &names::ClaimNames,
) -> Result<Job, JobBuildError> {
    let image =
        settings
            .publisher_image
            .as_ref()
            .ok_or_else(|| JobBuildError::NoPublisherImage {
                id: publish.id.clone(),
            })?;
    let token = publish.token.expose();
    let names::ClaimNames {
        claim,
        job_name: name,
    } = names;
    let mut object_labels = job_labels(settings, Lane::Publish, &publish.id, claim);
    let mut object_annotations = annotations();
    let named = |key: &str| publish.request.get(key).and_then(scalar_text);
    describe(
        &mut object_labels,
        &mut object_annotations,
        [
            (names::RELEASE, named("release")),
            (names::SUITE, named("suite")),
        ],
    );
    let vars = vec![
        plain(env::BACKEND_URL, &settings.backend_url),
        plain(env::PUBLISH_JOB_ID, &publish.id),
        plain(env::JOB_TOKEN, token),
        plain(env::PUBLISH_REQUEST, &publish.request.to_string()),
    ];
    let container = Container {
        name: PUBLISHER_CONTAINER.to_owned(),
        image: Some(image.clone()),
        env: Some(vars),
        resources: Some(resources(&settings.publisher_resources)),
        security_context: unless_empty(&settings.publisher_security.container),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".to_owned()),
        termination_grace_period_seconds: Some(PUBLISHER_TERMINATION_GRACE_SECONDS),
        security_context: unless_empty(&settings.publisher_security.pod),
        ..PodSpec::default()
    };
    Ok(assemble(
        name.clone(),
        object_labels,
        object_annotations,
        pod,
        settings.ttl_seconds_after_finished,
        settings.publisher_active_deadline_seconds,
    ))
}

/// A securityContext, or none when it sets nothing (`{}`).
fn unless_empty<T: Default + PartialEq + Clone>(context: &T) -> Option<T> {
    (*context != T::default()).then(|| context.clone())
}

/// The four labels every Job and pod template carries.
fn job_labels(
    settings: &JobSettings,
    lane: Lane,
    id: &str,
    claim: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (names::MANAGED_BY.to_owned(), settings.managed_by.clone()),
        (names::JOB_ID.to_owned(), id.to_owned()),
        (names::JOB_KIND.to_owned(), lane.label_value().to_owned()),
        (names::CLAIM.to_owned(), claim.to_owned()),
    ])
}

/// The autoscaler guard, on the Job and its pod template.
fn annotations() -> BTreeMap<String, String> {
    BTreeMap::from([(names::SAFE_TO_EVICT.to_owned(), "false".to_owned())])
}

/// Longest annotation value that says what a Job runs; a longer value (the
/// backend's to choose) is cut there and ends with `…`, so it can never make
/// the Job too big to create. The pod's env carries the claim in full.
pub const MAX_DESCRIPTION_LEN: usize = 1024;

/// Adds what a Job runs: each non-empty value as an annotation, and as a
/// label too when it is a valid label value.
fn describe<const N: usize>(
    object_labels: &mut BTreeMap<String, String>,
    object_annotations: &mut BTreeMap<String, String>,
    pairs: [(&str, Option<String>); N],
) {
    for (key, value) in pairs {
        let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        if names::is_label_value(&value) {
            object_labels.insert(key.to_owned(), value.clone());
        }
        object_annotations.insert(key.to_owned(), cut(value, MAX_DESCRIPTION_LEN));
    }
}

/// `value` cut to at most `max` bytes on a character boundary, ending with
/// `…` when it was cut.
fn cut(mut value: String, max: usize) -> String {
    if value.len() <= max {
        return value;
    }
    let ellipsis = '…';
    let mut end = max - ellipsis.len_utf8();
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value.truncate(end);
    value.push(ellipsis);
    value
}

/// A JSON string, number or boolean as text; anything else is not a name.
fn scalar_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Requests for CPU and memory, and each limit only when configured (the
/// driver's memory limit is unset by default, see the spec).
fn resources(settings: &Sizing) -> ResourceRequirements {
    let requests = BTreeMap::from([
        ("cpu".to_owned(), Quantity(settings.cpu_request.clone())),
        (
            "memory".to_owned(),
            Quantity(settings.memory_request.clone()),
        ),
    ]);
    let mut limits = BTreeMap::new();
    if let Some(cpu) = &settings.cpu_limit {
        limits.insert("cpu".to_owned(), Quantity(cpu.clone()));
    }
    if let Some(memory) = &settings.memory_limit {
        limits.insert("memory".to_owned(), Quantity(memory.clone()));
    }
    ResourceRequirements {
        requests: Some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    }
}

/// The passthrough variables: only `TCAB_K8S_*` and `TCAB_CONTAINER_*`
/// names, sorted by name, one per name (the last given wins).
fn passthrough(vars: &[(String, String)]) -> BTreeMap<&str, &str> {
    vars.iter()
        .filter(|(name, _)| {
            env::PASSTHROUGH_PREFIXES
                .iter()
                .any(|p| name.starts_with(p))
        })
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

/// A plain `name=value` variable.
fn plain(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// The Job around a pod spec: one-and-done, with its TTL and deadline.
fn assemble(
    name: String,
    object_labels: BTreeMap<String, String>,
    object_annotations: BTreeMap<String, String>,
    pod: PodSpec,
    ttl_seconds_after_finished: i32,
    active_deadline_seconds: i64,
) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(object_labels.clone()),
            annotations: Some(object_annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(ttl_seconds_after_finished),
            active_deadline_seconds: Some(active_deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(object_labels),
                    annotations: Some(object_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}
