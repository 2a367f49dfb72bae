//! The start-up check with the API server: before its first claim the
//! admitter creates, with `dryRun=All`, one Job built from its settings (a
//! driver Job, and a publisher Job while publishing is on). The API server
//! validates it as it would any Job and stores nothing, so a setting it will
//! always refuse (a name it does not accept, a limit below its request)
//! stops the admitter at start, naming the settings, instead of failing
//! every create while the claims bounce back queued.
//!
//! The dry run's answer also carries the API server's warnings about the
//! Job. The one that matters here is PodSecurity's: on a Job (a pod
//! controller) it only warns, `would violate PodSecurity "restricted:latest":
//! ...`, whether the namespace's `warn` label asked for it or its `enforce`
//! label will refuse every pod the Job controller makes. The admitter cannot
//! tell which without reading the namespace (a right it does not have), so
//! it is not a refusal here: it is said at start in one warn line per lane,
//! naming the namespace labels and the settings that meet the policy, and
//! a pod that is then refused is failed with the refusal by the
//! lease-keeper ([`policy_warnings`] reads them, pure).
//!
//! [`judge`] reads one dry run's answer (pure), [`dry_run`] makes one;
//! [`check`] runs them at start, retrying what may pass by itself (a
//! timeout, a 5xx, a 429, no connection, or a refusal that is not about the
//! settings) with the shared back-off, logged once per step. Server-side dry
//! run needs only the `create` permission the Role already grants.
//! `tcab-admitter check` (the `check` module) makes the same dry runs, once
//! each, and reports what they say.

use crate::job_builder::{self, JobSettings};
use http_body_util::BodyExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use kube::client::Body;
use kube::{Client, Resource};
use serde_json::json;
use std::fmt;
use std::time::Duration;
use tcab_shared::backend::{ClaimedPublish, ClaimedRun};
use tcab_shared::config::vars;
use tcab_shared::kube_api::{CallError, KubeCall, call};
use tcab_shared::retry::{Backoff, JITTER_PERCENT, random_sample};
use tcab_shared::runtime::CancellationToken;
use tcab_shared::{Lane, Secret, error_chain};

/// The back-off between dry runs that got no telling answer.
pub(crate) const RETRY: Backoff =
    Backoff::doubling(Duration::from_secs(1), Duration::from_secs(30)).with_jitter(JITTER_PERCENT);

/// The job id of the sample claims the checked Jobs are built from.
pub(crate) const SAMPLE_ID: &str = "tcab-dry-run";

/// What one dry run's answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The API server would create it (or validated it and found the name
    /// taken: 409 comes after validation).
    Passed,
    /// The API server will refuse every such Job: the settings are wrong,
    /// or the Role lacks `create` on Jobs.
    Refused {
        /// HTTP status.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
    /// No answer that tells (timeout, connection, 5xx, 429), or a refusal
    /// that is not about the settings (a quota, a namespace being deleted):
    /// try again.
    Unclear(String),
}

/// A warning the API server gave about a Job built from the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PolicyWarning {
    /// PodSecurity: the Job's pod template violates a level the namespace
    /// warns about or enforces (`restricted:latest`), and what violates it.
    PodSecurity {
        /// The level and version, e.g. `restricted:latest`.
        level: String,
        /// The violations, as the API server words them.
        violations: String,
    },
    /// Any other warning, as given.
    Other(String),
}

/// Reads the warnings of a dry run (the texts of its `Warning` headers).
pub(crate) fn policy_warnings(warnings: &[String]) -> Vec<PolicyWarning> {
    warnings
        .iter()
        .map(|w| {
            let pod_security = w
                .strip_prefix("would violate PodSecurity \"")
                .and_then(|rest| rest.split_once("\": "));
            match pod_security {
                Some((level, violations)) => PolicyWarning::PodSecurity {
                    level: level.to_owned(),
                    violations: violations.trim().to_owned(),
                },
                None => PolicyWarning::Other(w.trim().to_owned()),
            }
        })
        .collect()
}

/// The settings that give a lane's pods their security contexts.
fn security_settings(lane: Lane) -> [&'static str; 2] {
    match lane {
        Lane::Run => [
            vars::DRIVER_POD_SECURITY_CONTEXT.name,
            vars::DRIVER_SECURITY_CONTEXT.name,
        ],
        Lane::Publish => [
            vars::PUBLISHER_POD_SECURITY_CONTEXT.name,
            vars::PUBLISHER_SECURITY_CONTEXT.name,
        ],
    }
}

/// One line a person can act on, for a warning about `lane`'s Jobs in
/// `namespace`.
pub(crate) fn describe_warning(lane: Lane, namespace: &str, warning: &PolicyWarning) -> String {
    let what = lane.worker();
    match warning {
        PolicyWarning::PodSecurity { level, violations } => {
            let [pod, container] = security_settings(lane);
            format!(
                "the {what} pods violate PodSecurity \"{level}\" ({violations}): if namespace {namespace} enforces it (label pod-security.kubernetes.io/enforce), every such pod is refused and its Job failed with the refusal after the start grace; meet it with {pod} and {container} (the defaults do), or change the namespace's label"
            )
        }
        PolicyWarning::Other(text) => {
            format!("the API server warns about a {what} Job built from the settings: {text}")
        }
    }
}

/// Sends one dry-run create of `job` in `namespace`; the warnings the API
/// server gave with its answer, or its refusal as a Kubernetes API error.
async fn dry_run_create(
    client: &Client,
    namespace: &str,
    job: &Job,
) -> Result<Vec<String>, kube::Error> {
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let body = serde_json::to_vec(job).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(Job::url_path(&(), Some(namespace)))
        .create(&params, body)
        .map_err(kube::Error::BuildRequest)?;
    let response = client.send(request.map(Body::from)).await?;
    let warnings = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .flat_map(|v| warning_texts(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if status.is_success() {
        return Ok(warnings);
    }
    let refusal = serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
        kube::core::Status::failure(String::from_utf8_lossy(&bytes).trim(), "")
            .with_code(status.as_u16())
    });
    Err(kube::Error::Api(refusal.boxed()))
}

/// The texts of one `Warning` header, unquoted: RFC 7234's form the API
/// server uses, `299 - "text"`, one per header or several joined by commas
/// (as a proxy may join them). A part not of that form is left out.
fn warning_texts(header: &str) -> Vec<String> {
    let mut texts = Vec::new();
    let mut rest = header;
    loop {
        // `<code> <agent> "<text>"`: up to the opening quote.
        let Some(open) = rest.find('"') else {
            return texts;
        };
        let head: Vec<&str> = rest[..open].split_whitespace().collect();
        let mut text = String::new();
        let mut chars = rest[open + 1..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, escaped)) => text.push(escaped),
                    None => break,
                },
                '"' => {
                    end = Some(open + 1 + i + 1);
                    break;
                }
                c => text.push(c),
            }
        }
        let Some(end) = end else {
            return texts;
        };
        if head.len() == 2 && head[0].len() == 3 && head[0].bytes().all(|b| b.is_ascii_digit()) {
            texts.push(text);
        }
        // A date may follow the text; the next warning follows a comma.
        rest = match rest[end..].find(',') {
            Some(comma) => &rest[end + comma + 1..],
            None => return texts,
        };
    }
}

/// Whether a 403's message is the API server's RBAC refusal of creating Jobs.
fn lacks_job_create(message: &str) -> bool {
    message.contains("cannot create resource \"jobs\"")
}

/// Reads a dry-run create's result: 400 and 422 are the settings' fault, a
/// 403 saying the Role cannot create Jobs too; anything else may pass.
pub(crate) fn judge<T>(result: Result<T, CallError>) -> Verdict {
    match result {
        Ok(_) => Verdict::Passed,
        Err(error) if error.is_conflict() => Verdict::Passed,
        Err(CallError::Kube(kube::Error::Api(status)))
            if matches!(status.code, 400 | 422)
                || (status.code == 403 && lacks_job_create(&status.message)) =>
        {
            Verdict::Refused {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            }
        }
        Err(error) => Verdict::Unclear(error_chain(&error)),
    }
}

/// The settings a refusal's message points at, by the fields it names; all
/// the Job settings of the lane when it names none of them.
pub(crate) fn settings_named(lane: Lane, message: &str) -> Vec<&'static str> {
    let driver = lane == Lane::Run;
    let by_field: &[(&str, &[&'static str])] = &[
        ("serviceAccountName", &[vars::DRIVER_SERVICE_ACCOUNT.name]),
        ("envFrom", &[vars::DRIVER_SECRETS.name]),
        ("secretName", &[vars::DRIVER_SUBSCRIPTION_SECRET.name]),
        ("volumes", &[vars::DRIVER_SUBSCRIPTION_SECRET.name]),
        ("mountPath", &[vars::DRIVER_SUBSCRIPTION_DIR.name]),
        ("volumeMounts", &[vars::DRIVER_SUBSCRIPTION_DIR.name]),
        ("fsGroup", &[vars::DRIVER_FS_GROUP.name]),
        (
            "terminationGracePeriodSeconds",
            &[vars::DRIVER_TERMINATION_GRACE_SECONDS.name],
        ),
        ("ttlSecondsAfterFinished", &[vars::JOB_TTL_SECONDS.name]),
        ("managed-by", &[vars::MANAGED_BY.name]),
        (".env[", &["TCAB_K8S_*", "TCAB_CONTAINER_*"]),
    ];
    let resources: &[&'static str] = if driver {
        &[
            vars::DRIVER_CPU_REQUEST.name,
            vars::DRIVER_MEMORY_REQUEST.name,
            vars::DRIVER_CPU_LIMIT.name,
            vars::DRIVER_MEMORY_LIMIT.name,
        ]
    } else {
        &[
            vars::PUBLISHER_CPU_REQUEST.name,
            vars::PUBLISHER_MEMORY_REQUEST.name,
            vars::PUBLISHER_CPU_LIMIT.name,
            vars::PUBLISHER_MEMORY_LIMIT.name,
        ]
    };
    let (image, deadline) = if driver {
        (
            vars::DRIVER_IMAGE.name,
            vars::DRIVER_ACTIVE_DEADLINE_SECONDS.name,
        )
    } else {
        (
            vars::PUBLISHER_IMAGE.name,
            vars::PUBLISHER_ACTIVE_DEADLINE_SECONDS.name,
        )
    };
    let mut named: Vec<&'static str> = vec![];
    fn add(named: &mut Vec<&'static str>, names: &[&'static str]) {
        for name in names {
            if !named.contains(name) {
                named.push(name);
            }
        }
    }
    for (field, names) in by_field {
        if message.contains(field) {
            add(&mut named, names);
        }
    }
    if message.contains("resources") {
        add(&mut named, resources);
    }
    if message.contains(".image") {
        add(&mut named, &[image]);
    }
    if message.contains("activeDeadlineSeconds") {
        add(&mut named, &[deadline]);
    }
    if named.is_empty() {
        add(&mut named, &[image]);
        add(&mut named, resources);
        if driver {
            add(
                &mut named,
                &[
                    vars::DRIVER_SERVICE_ACCOUNT.name,
                    vars::DRIVER_SECRETS.name,
                    vars::DRIVER_SUBSCRIPTION_SECRET.name,
                    vars::DRIVER_SUBSCRIPTION_DIR.name,
                    "TCAB_K8S_*",
                    "TCAB_CONTAINER_*",
                ],
            );
        }
    }
    named
}

/// The API server refused a Job built from the settings: the admitter
/// cannot admit anything with them, and exits 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The lane whose Job was refused.
    pub lane: Lane,
    /// HTTP status.
    pub code: u16,
    /// The Status reason.
    pub reason: String,
    /// The Status message (the API server's words).
    pub message: String,
    /// The settings it points at.
    pub settings: Vec<&'static str>,
}

impl Refused {
    /// The refusal of a `lane` Job, naming the settings its message points at.
    pub(crate) fn of(lane: Lane, code: u16, reason: String, message: String) -> Self {
        let settings = settings_named(lane, &message);
        Refused {
            lane,
            code,
            reason,
            message,
            settings,
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.lane.worker();
        if self.code == 403 {
            return write!(
                f,
                "the API server refuses to create Jobs ({} {}: {}): the dispatcher's Role must grant create on jobs.batch",
                self.code, self.reason, self.message
            );
        }
        write!(
            f,
            "{}: the API server refuses a {what} Job built from these settings ({} {}: {})",
            self.settings.join(", "),
            self.code,
            self.reason,
            self.message
        )
    }
}

impl std::error::Error for Refused {}

/// A claim of each lane as the Jobs checked at start are built from: a
/// sample id and token, an empty request.
fn samples() -> (ClaimedRun, ClaimedPublish) {
    let token = Secret::new("tcab-dry-run-token");
    let lease = jiff::Timestamp::UNIX_EPOCH;
    let run = ClaimedRun {
        id: SAMPLE_ID.to_owned(),
        token: token.clone(),
        queue_seq: 0,
        harness: "dry-run".to_owned(),
        model: "dry-run".to_owned(),
        case: None,
        jam: None,
        attempt: 1,
        launch_request: json!({}),
        lease_expires_at: lease,
        enqueued_at: None,
    };
    let publish = ClaimedPublish {
        id: SAMPLE_ID.to_owned(),
        token,
        request: json!({}),
        lease_expires_at: lease,
        enqueued_at: None,
    };
    (run, publish)
}

/// The Jobs the settings make, one per enabled lane.
pub(crate) fn sample_jobs(settings: &JobSettings) -> Vec<(Lane, Job)> {
    let (run, publish) = samples();
    let mut jobs = vec![(Lane::Run, job_builder::driver_job(settings, &run))];
    if let Ok(job) = job_builder::publisher_job(settings, &publish) {
        jobs.push((Lane::Publish, job));
    }
    jobs
}

/// One dry-run create of `job` in `namespace`, bounded by `kube_timeout`:
/// what its answer says, and the warnings the API server gave with it
/// (none unless it passed).
pub(crate) async fn dry_run(
    client: &Client,
    namespace: &str,
    job: &Job,
    kube_timeout: Duration,
) -> (Verdict, Vec<PolicyWarning>) {
    let result = call(
        KubeCall::CreateJob,
        kube_timeout,
        dry_run_create(client, namespace, job),
    )
    .await;
    let warnings = result
        .as_ref()
        .map(|w| policy_warnings(w))
        .unwrap_or_default();
    (judge(result), warnings)
}

/// Dry-runs the create of each Job the settings make until each has a
/// telling answer: `Ok` when all passed, the refusal otherwise; the
/// warnings of a dry run that passed are said at warn, once each. Unclear
/// answers are retried with [`RETRY`] (each step logged once at warn) until
/// `shutdown`, which ends the check with `Ok` (nothing will be claimed).
pub(crate) async fn check(
    client: &Client,
    namespace: &str,
    settings: &JobSettings,
    kube_timeout: Duration,
    shutdown: &CancellationToken,
) -> Result<(), Refused> {
    for (lane, job) in sample_jobs(settings) {
        let mut failures: u32 = 0;
        loop {
            let (verdict, warnings) = dry_run(client, namespace, &job, kube_timeout).await;
            for warning in &warnings {
                tracing::warn!(%lane, namespace, "start-up check: {}", describe_warning(lane, namespace, warning));
            }
            match verdict {
                Verdict::Passed => {
                    tracing::info!(%lane, "start-up check: the API server accepts a Job built from the settings (dry run)");
                    break;
                }
                Verdict::Refused {
                    code,
                    reason,
                    message,
                } => return Err(Refused::of(lane, code, reason, message)),
                Verdict::Unclear(why) => {
                    failures = failures.saturating_add(1);
                    let wait = RETRY.wait(failures, random_sample());
                    tracing::warn!(
                        %lane, error = %why, attempt = failures, retry_in_ms = wait.as_millis() as u64,
                        "cannot check the Job settings with the API server yet (a dry-run create got no telling answer); no claim until it does"
                    );
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> CallError {
        CallError::Kube(kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn settings_errors_and_a_role_without_create_are_refusals_the_rest_is_retried() {
        assert_eq!(judge(Ok(())), Verdict::Passed);
        assert_eq!(
            judge::<()>(Err(api(409, "AlreadyExists", "exists"))),
            Verdict::Passed
        );
        for code in [400, 422] {
            assert!(matches!(
                judge::<()>(Err(api(code, "Invalid", "bad"))),
                Verdict::Refused { code: c, .. } if c == code
            ));
        }
        let rbac = "jobs.batch is forbidden: User \"system:serviceaccount:tcab:tcab\" cannot create resource \"jobs\" in API group \"batch\" in the namespace \"tcab\"";
        assert!(matches!(
            judge::<()>(Err(api(403, "Forbidden", rbac))),
            Verdict::Refused { code: 403, .. }
        ));
        for (code, message) in [
            (403, "exceeded quota: jobs"),
            (404, "namespaces \"x\" not found"),
            (429, "slow down"),
            (500, "etcd"),
            (503, "unavailable"),
        ] {
            assert!(
                matches!(
                    judge::<()>(Err(api(code, "x", message))),
                    Verdict::Unclear(_)
                ),
                "{code}"
            );
        }
        assert!(matches!(
            judge::<()>(Err(CallError::TimedOut(Duration::from_secs(15)))),
            Verdict::Unclear(_)
        ));
    }

    #[test]
    fn a_refusal_names_the_settings_of_the_fields_it_names() {
        let sa = "Job.batch \"x\" is invalid: spec.template.spec.serviceAccountName: Invalid value: \"a..b\": a lowercase RFC 1123 subdomain";
        assert_eq!(
            settings_named(Lane::Run, sa),
            [vars::DRIVER_SERVICE_ACCOUNT.name]
        );
        let limits = "spec.template.spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi";
        assert_eq!(
            settings_named(Lane::Publish, limits),
            [
                vars::PUBLISHER_CPU_REQUEST.name,
                vars::PUBLISHER_MEMORY_REQUEST.name,
                vars::PUBLISHER_CPU_LIMIT.name,
                vars::PUBLISHER_MEMORY_LIMIT.name
            ]
        );
        let secret = "spec.template.spec.containers[0].envFrom[0].secretRef.name: Invalid value";
        assert_eq!(
            settings_named(Lane::Run, secret),
            [vars::DRIVER_SECRETS.name]
        );
        let unknown = settings_named(Lane::Run, "something else entirely");
        assert!(unknown.contains(&vars::DRIVER_IMAGE.name) && unknown.contains(&"TCAB_K8S_*"));
    }

    #[test]
    fn a_warning_header_reads_as_its_unquoted_texts() {
        assert_eq!(
            warning_texts(
                r#"299 - "would violate PodSecurity \"restricted:latest\": runAsNonRoot != true""#
            ),
            [r#"would violate PodSecurity "restricted:latest": runAsNonRoot != true"#]
        );
        assert_eq!(warning_texts(r#"299 - "a \\ b""#), [r"a \ b"]);
        // Joined by a proxy, one with a date; commas inside a text stay.
        assert_eq!(
            warning_texts(
                r#"299 - "first, with a comma", 299 - "second" "Mon, 07 Dec 2026 04:00:00 GMT""#
            ),
            ["first, with a comma", "second"]
        );
        // Text the API server sent as UTF-8 (an admission policy's words).
        assert_eq!(warning_texts(r#"299 - "déjà vu""#), ["déjà vu"]);
        for malformed in [
            "299",
            "299 -",
            "299 - unquoted",
            r#"299 - "unterminated"#,
            r#"- "no code""#,
        ] {
            assert!(warning_texts(malformed).is_empty(), "{malformed}");
        }
    }

    #[test]
    fn a_pod_security_warning_names_the_namespace_label_and_the_lanes_settings() {
        let warnings = policy_warnings(&[
            r#"would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "driver" must set securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true"#.into(),
            "spec.template.spec.containers[0].env[3]: hides previous definition".into(),
        ]);
        assert_eq!(
            warnings[0],
            PolicyWarning::PodSecurity {
                level: "restricted:latest".into(),
                violations: r#"allowPrivilegeEscalation != false (container "driver" must set securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true"#.into(),
            }
        );
        assert!(matches!(&warnings[1], PolicyWarning::Other(t) if t.contains("hides previous")));
        let run = describe_warning(Lane::Run, "tcab", &warnings[0]);
        for part in [
            "driver pods violate PodSecurity \"restricted:latest\"",
            "namespace tcab",
            "pod-security.kubernetes.io/enforce",
            "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT",
            "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
            "runAsNonRoot != true",
        ] {
            assert!(run.contains(part), "{part}: {run}");
        }
        let publish = describe_warning(Lane::Publish, "tcab", &warnings[0]);
        assert!(
            publish.contains("TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT"),
            "{publish}"
        );
    }

    #[test]
    fn the_refusal_reads_as_one_line_naming_the_settings() {
        let refused = Refused {
            lane: Lane::Run,
            code: 422,
            reason: "Invalid".into(),
            message: "spec.template.spec.serviceAccountName: Invalid value".into(),
            settings: vec![vars::DRIVER_SERVICE_ACCOUNT.name],
        };
        assert_eq!(
            refused.to_string(),
            "TCAB_DRIVER_SERVICE_ACCOUNT: the API server refuses a driver Job built from these settings (422 Invalid: spec.template.spec.serviceAccountName: Invalid value)"
        );
        let rbac = Refused {
            code: 403,
            reason: "Forbidden".into(),
            ..refused
        };
        assert!(
            rbac.to_string()
                .contains("Role must grant create on jobs.batch")
        );
    }
}
