//! `tcab-admitter check`: an install checks itself. Started with the
//! admitter's own environment (the chart's `helm test` hook runs it so, in a
//! pod of the same image, ServiceAccount and Secret), it makes the calls an
//! install most often gets wrong, once each, changes nothing, prints one line
//! per check and exits:
//!
//! - `backend`: `GET /jobs/active` with the service token (read-only; no
//!   claim is made), so a wrong URL, a refused token (401/403), a backend
//!   that does not answer within the backend timeout, or something that is
//!   not the backend at that URL each get their own line;
//! - `backend-publish`: the same with `GET /publish-jobs/active`, while
//!   publishing is on;
//! - `driver-job`, `publisher-job`: a dry-run create of a Job built from
//!   the settings (the admitter's start-up check, `preflight`, made once),
//!   with the API server's PodSecurity warnings said as `warning` lines;
//! - `jobs`: the dispatcher's Jobs can be listed in its namespace (the
//!   view every container starts from);
//! - `pods`: pods can be listed there (the lease-keeper reads a dead
//!   driver's), and `sandbox-pods` in the sandbox namespace when it is
//!   another (the reaper's);
//! - `kubernetes`: instead of the cluster's checks, one failed line when
//!   no Kubernetes client can be made;
//! - `environment`: a `warning` line for each `TCAB_*` variable nothing
//!   reads (a misspelt name, whose default then applies unseen).
//!
//! The lines are `ok`, `failed`, `warning` or `skipped`, then the check's
//! name and what was found; a failed line says what to change. Exit 0 when
//! no check failed, 1 when one did, 2 (before any call) for a malformed
//! variable, as the admitter itself. No line shows a token.
//!
//! What each line says is decided from the calls' results by pure
//! functions (`backend_finding`, `dry_run_finding`, `list_finding`), tested
//! with plain data; `run_checks` makes the calls, and [`main`] is the whole
//! of the command.

use crate::config::AdmitterConfig;
use crate::preflight::{self, PolicyWarning, Refused, Verdict};
use crate::settings::AdmitterSettings;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::fmt;
use tcab_shared::backend::{self, BackendClient, BackendError, BackendErrorKind};
use tcab_shared::config::{Binary, BuildInfo, Env, Startup, startup, unknown_variables, vars};
use tcab_shared::kube_api::{self, CallError, KubeCall, call};
use tcab_shared::{Lane, error_chain, names, runtime};

/// The argument that starts the check: `tcab-admitter check`.
pub const COMMAND: &str = "check";

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// It passed.
    Ok,
    /// It failed: the install is wrong, and the line says what to change.
    Failed,
    /// Worth reading, but the install may be right (fails nothing).
    Warning,
    /// Not made: the settings turn what it checks off.
    Skipped,
}

impl Status {
    /// The word that starts the line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Warning => "warning",
            Status::Skipped => "skipped",
        }
    }
}

/// One line of the check's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// What it found.
    pub(crate) status: Status,
    /// The check's name (`backend`, `driver-job`, ...).
    pub(crate) check: &'static str,
    /// What was found, and for a failure what to change.
    pub(crate) text: String,
}

impl Finding {
    fn new(status: Status, check: &'static str, text: impl Into<String>) -> Self {
        Finding {
            status,
            check,
            text: text.into(),
        }
    }
}

impl fmt::Display for Finding {
    /// `failed  backend: ...`: the status padded, so the names line up.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<7} {}: {}",
            self.status.as_str(),
            self.check,
            self.text
        )
    }
}

/// The exit code of a check that found `findings`: 1 when one failed.
pub(crate) fn exit_code(findings: &[Finding]) -> i32 {
    i32::from(findings.iter().any(|f| f.status == Status::Failed))
}

/// The last line: how many checks failed of how many were made.
pub(crate) fn summary(findings: &[Finding]) -> String {
    let made = findings
        .iter()
        .filter(|f| matches!(f.status, Status::Ok | Status::Failed))
        .count();
    let failed = findings
        .iter()
        .filter(|f| f.status == Status::Failed)
        .count();
    if failed == 0 {
        format!("all {made} checks passed")
    } else {
        format!("{failed} of {made} checks failed")
    }
}

/// The backend check of `lane` (its active list, read with the service
/// token from `url`): the number of jobs it lists, or the error.
pub(crate) fn backend_finding(
    lane: Lane,
    url: &str,
    result: Result<usize, &BackendError>,
) -> Finding {
    let call = lane.spec().active_call;
    let (check, jobs) = match lane {
        Lane::Run => ("backend", "runs"),
        Lane::Publish => ("backend-publish", "publishes"),
    };
    let error = match result {
        Ok(driven) => {
            return Finding::new(
                Status::Ok,
                check,
                format!("{url} answers {call} with the service token ({driven} {jobs} in flight)"),
            );
        }
        Err(error) => error,
    };
    let url_var = vars::BACKEND_URL.name;
    let token_var = vars::BACKEND_SERVICE_TOKEN.name;
    let text = match error.kind() {
        BackendErrorKind::Unauthorized => format!(
            "{url} refuses the service token (HTTP {}): {token_var} is not a token the backend accepts; give the container the backend's service token",
            error.status().unwrap_or_default()
        ),
        BackendErrorKind::Transport => format!(
            "cannot reach the backend at {url} ({}): check {url_var} (the backend's in-cluster Service, with its port) and that nothing blocks the way to it",
            error_chain(error)
        ),
        BackendErrorKind::Timeout => format!(
            "the backend at {url} gave no answer to {call} within {} s ({}): check {url_var}, that the backend is up, and that nothing drops the traffic to it",
            error.timeout().unwrap_or_default().as_secs_f64(),
            vars::BACKEND_TIMEOUT_SECONDS.name
        ),
        BackendErrorKind::NotFound => format!(
            "{url} answers {call} with 404: {url_var} is not the backend's base URL (a wrong path, or another service)"
        ),
        BackendErrorKind::Malformed => format!(
            "{url} answers {call}, but not as the backend contract says ({}): {url_var} may name another service, or the backend speaks another contract than {}",
            error.detail(),
            backend::CONTRACT_VERSION
        ),
        _ => format!("the backend at {url} failed {call}: {}", error_chain(error)),
    };
    Finding::new(Status::Failed, check, text)
}

/// The check name of `lane`'s Job.
fn job_check(lane: Lane) -> &'static str {
    match lane {
        Lane::Run => "driver-job",
        Lane::Publish => "publisher-job",
    }
}

/// The lines of one dry-run create of a `lane` Job in `namespace`: its
/// verdict, then a `warning` for each warning the API server gave.
pub(crate) fn dry_run_finding(
    lane: Lane,
    namespace: &str,
    verdict: Verdict,
    warnings: &[PolicyWarning],
) -> Vec<Finding> {
    let check = job_check(lane);
    let what = lane.worker();
    let first = match verdict {
        Verdict::Passed => Finding::new(
            Status::Ok,
            check,
            format!(
                "the API server accepts a {what} Job built from the settings in namespace {namespace} (a dry run: nothing was created)"
            ),
        ),
        Verdict::Refused {
            code,
            reason,
            message,
        } => Finding::new(
            Status::Failed,
            check,
            Refused::of(lane, code, reason, message).to_string(),
        ),
        Verdict::Unclear(why) if why.contains(&format!("namespaces \"{namespace}\" not found")) => {
            Finding::new(
                Status::Failed,
                check,
                format!(
                    "namespace {namespace} does not exist ({why}): create it, or run the dispatcher in the namespace meant (POD_NAMESPACE, or the kubeconfig's)"
                ),
            )
        }
        Verdict::Unclear(why) => Finding::new(
            Status::Failed,
            check,
            format!(
                "a dry-run create of a {what} Job in namespace {namespace} got no telling answer: {why}"
            ),
        ),
    };
    let mut findings = vec![first];
    findings.extend(warnings.iter().map(|w| {
        Finding::new(
            Status::Warning,
            check,
            preflight::describe_warning(lane, namespace, w),
        )
    }));
    findings
}

/// The line of a list of `what` in `namespace`, which the dispatcher needs
/// `rights` for.
pub(crate) fn list_finding(
    check: &'static str,
    what: &str,
    namespace: &str,
    rights: &str,
    result: Result<(), &CallError>,
) -> Finding {
    match result {
        Ok(()) => Finding::new(
            Status::Ok,
            check,
            format!("{what} in namespace {namespace} can be listed"),
        ),
        Err(CallError::Kube(kube::Error::Api(status))) if status.code == 403 => Finding::new(
            Status::Failed,
            check,
            format!(
                "the API server refuses to list {what} in namespace {namespace} (403 {}: {}): a Role bound to the dispatcher's ServiceAccount must grant {rights} there",
                status.reason, status.message
            ),
        ),
        Err(error) => Finding::new(
            Status::Failed,
            check,
            format!(
                "cannot list {what} in namespace {namespace}: {}",
                error_chain(error)
            ),
        ),
    }
}

/// A `warning` for each `TCAB_*` variable of `names` that nothing reads.
pub(crate) fn environment_findings<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Finding> {
    unknown_variables(names)
        .into_iter()
        .map(|u| {
            Finding::new(
                Status::Warning,
                "environment",
                format!(
                    "{} is set, but no tcab program reads it: ignored (did you mean {}?)",
                    u.name, u.closest
                ),
            )
        })
        .collect()
}

/// The Kubernetes side of the check: a client and the namespace of the
/// dispatcher's Jobs.
#[derive(Clone)]
pub(crate) struct Cluster {
    /// The client (every call bounded by the kube timeout).
    pub(crate) kube: kube::Client,
    /// The namespace of the dispatcher's Jobs.
    pub(crate) namespace: String,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Makes every check with `config`'s settings, against `backend` and
/// `cluster` (or, without a Kubernetes client, one failed line saying why
/// instead of the cluster's checks), each call once; the findings in order.
pub(crate) async fn run_checks(
    config: &AdmitterConfig,
    backend: &BackendClient,
    cluster: Result<&Cluster, String>,
) -> Vec<Finding> {
    let settings = AdmitterSettings::from_config(config);
    let publishing = settings.jobs.publisher_image.is_some();
    let url = backend.base_url();
    let mut findings = vec![];

    let runs = backend.active_runs().await.map(|a| a.jobs.len());
    findings.push(backend_finding(Lane::Run, url, runs.as_ref().copied()));
    if publishing {
        let publishes = backend
            .active_publishes()
            .await
            .map(|a| a.publish_jobs.len());
        findings.push(backend_finding(
            Lane::Publish,
            url,
            publishes.as_ref().copied(),
        ));
    }

    let cluster = match cluster {
        Ok(cluster) => cluster,
        Err(why) => {
            findings.push(Finding::new(Status::Failed, "kubernetes", why));
            return findings;
        }
    };
    let namespace = cluster.namespace.as_str();
    let timeout = settings.kube_timeout;
    for (lane, job) in preflight::sample_jobs(&settings.jobs) {
        let (verdict, warnings) = preflight::dry_run(&cluster.kube, namespace, &job, timeout).await;
        findings.extend(dry_run_finding(lane, namespace, verdict, &warnings));
    }
    if !publishing {
        findings.push(Finding::new(
            Status::Skipped,
            job_check(Lane::Publish),
            format!(
                "publishing is off ({} is not set)",
                vars::PUBLISHER_IMAGE.name
            ),
        ));
    }

    let jobs: Api<Job> = Api::namespaced(cluster.kube.clone(), namespace);
    let owned = ListParams::default()
        .labels(&names::selector(
            names::MANAGED_BY,
            &settings.jobs.managed_by,
        ))
        .limit(1);
    let listed = call(KubeCall::ListJobs, timeout, jobs.list(&owned)).await;
    findings.push(list_finding(
        "jobs",
        "the dispatcher's Jobs",
        namespace,
        "list and watch on jobs.batch",
        listed.as_ref().map(|_| ()),
    ));

    let sandboxes = ListParams::default()
        .labels(&names::selector(
            names::MANAGED_BY,
            &settings.jobs.driver_managed_by,
        ))
        .limit(1);
    let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), namespace);
    let listed = call(KubeCall::ListPods, timeout, pods.list(&sandboxes)).await;
    findings.push(list_finding(
        "pods",
        "pods",
        namespace,
        "get, list and delete on pods, and get on pods/log",
        listed.as_ref().map(|_| ()),
    ));
    let sandbox_namespace = settings
        .jobs
        .passthrough_env
        .iter()
        .find(|(name, _)| name == vars::K8S_NAMESPACE.name)
        .map(|(_, value)| value.as_str())
        .filter(|ns| *ns != namespace);
    if let Some(sandbox_namespace) = sandbox_namespace {
        let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), sandbox_namespace);
        let listed = call(KubeCall::ListPods, timeout, pods.list(&sandboxes)).await;
        findings.push(list_finding(
            "sandbox-pods",
            "sandbox pods",
            sandbox_namespace,
            "list and delete on pods (the reaper's)",
            listed.as_ref().map(|_| ()),
        ));
    }
    findings
}

/// The first line: what is checked, by which build, speaking which
/// contract, where.
pub(crate) fn header(
    build: &BuildInfo,
    api_server: &str,
    namespace: &str,
    backend_url: &str,
) -> String {
    format!(
        "{} check {build}, backend contract {}: backend {backend_url}, Kubernetes API {api_server}, namespace {namespace}",
        Binary::Admitter.name(),
        backend::CONTRACT_VERSION
    )
}

/// The whole of `tcab-admitter check`, after `check`: reads the
/// configuration (`args` are what follows `check`: `--help` and
/// `--version` print and exit 0, anything else or a bad variable exits 2),
/// makes the checks, prints their lines on stdout; the exit code.
pub fn main(args: &[String], about: &str, build: &BuildInfo) -> i32 {
    let config = match startup::<AdmitterConfig>(args, about, build, Env::from_process()) {
        Startup::Run(config) => config,
        Startup::Print(text) => {
            print!("{text}");
            return 0;
        }
        Startup::Fail(line) => {
            eprintln!("{line}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!(
                "{} check: cannot start the async runtime: {error}",
                Binary::Admitter.name()
            );
            return 1;
        }
    };
    runtime.block_on(check(config, build))
}

/// Builds the clients from `config`, makes the checks, prints the lines;
/// the exit code.
async fn check(config: AdmitterConfig, build: &BuildInfo) -> i32 {
    runtime::install_tls_provider();
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    let environment = environment_findings(names.iter().map(String::as_str));
    let backend = match backend::client_from_config(&config.backend, Binary::Admitter) {
        Ok(backend) => backend,
        Err(error) => {
            // The configuration checks the URL and token already; a client
            // that still cannot be built is said as it is.
            let finding = Finding::new(Status::Failed, "backend", error_chain(&error));
            println!("{finding}");
            return 1;
        }
    };
    let agent = Binary::Admitter.user_agent();
    let (cluster, api_server) = match kube_api::client_with_url(Some(&agent)).await {
        Ok((kube, api_server)) => {
            let namespace = config
                .common
                .namespace
                .clone()
                .unwrap_or_else(|| kube.default_namespace().to_owned());
            (Ok(Cluster { kube, namespace }), api_server)
        }
        Err(error) => (
            Err(format!("no Kubernetes client: {}", error_chain(&error))),
            "(none)".to_owned(),
        ),
    };
    let namespace = cluster.as_ref().map_or("(none)", |c| c.namespace.as_str());
    println!(
        "{}",
        header(build, &api_server, namespace, backend.base_url())
    );
    let mut findings = run_checks(&config, &backend, cluster.as_ref().map_err(Clone::clone)).await;
    findings.extend(environment);
    for finding in &findings {
        println!("{finding}");
    }
    println!("{}", summary(&findings));
    exit_code(&findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status as ApiStatus;

    const URL: &str = "http://backend.tcab:8080";

    fn one_line(finding: &Finding) -> String {
        let line = finding.to_string();
        assert_eq!(line.lines().count(), 1, "{line}");
        line
    }

    #[test]
    fn a_line_is_its_status_its_check_and_what_was_found() {
        let ok = backend_finding(Lane::Run, URL, Ok(3));
        assert_eq!(
            one_line(&ok),
            "ok      backend: http://backend.tcab:8080 answers GET /jobs/active with the service token (3 runs in flight)"
        );
        let publish = backend_finding(Lane::Publish, URL, Ok(0));
        assert!(
            one_line(&publish).starts_with(
                "ok      backend-publish: http://backend.tcab:8080 answers GET /publish-jobs/active"
            ),
            "{publish}"
        );
    }

    #[test]
    fn only_a_failure_fails_the_check() {
        let found = |status| Finding::new(status, "x", "y");
        let passing = [
            found(Status::Ok),
            found(Status::Warning),
            found(Status::Skipped),
        ];
        assert_eq!(exit_code(&passing), 0);
        assert_eq!(summary(&passing), "all 1 checks passed");
        let failing = [found(Status::Ok), found(Status::Failed), found(Status::Ok)];
        assert_eq!(exit_code(&failing), 1);
        assert_eq!(summary(&failing), "1 of 3 checks failed");
    }

    #[test]
    fn a_namespace_that_does_not_exist_is_named() {
        let why = "ApiError: namespaces \"tcab\" not found: NotFound (ErrorResponse { status: \"Failure\", message: \"namespaces \\\"tcab\\\" not found\", reason: \"NotFound\", code: 404 })";
        let found = dry_run_finding(Lane::Run, "tcab", Verdict::Unclear(why.into()), &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].status, Status::Failed);
        assert!(
            found[0].text.starts_with("namespace tcab does not exist"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_refused_job_names_the_settings_and_a_warning_is_its_own_line() {
        let refused = Verdict::Refused {
            code: 422,
            reason: "Invalid".into(),
            message: "spec.template.spec.serviceAccountName: Invalid value: \"a..b\"".into(),
        };
        let found = dry_run_finding(Lane::Run, "tcab", refused, &[]);
        assert_eq!(found[0].status, Status::Failed);
        assert!(
            one_line(&found[0]).starts_with("failed  driver-job: TCAB_DRIVER_SERVICE_ACCOUNT: the API server refuses a driver Job"),
            "{}",
            found[0]
        );
        let warning = PolicyWarning::PodSecurity {
            level: "restricted:latest".into(),
            violations: "runAsNonRoot != true".into(),
        };
        let found = dry_run_finding(Lane::Publish, "tcab", Verdict::Passed, &[warning]);
        assert_eq!(
            found.iter().map(|f| f.status).collect::<Vec<_>>(),
            [Status::Ok, Status::Warning]
        );
        assert!(
            found[0].text.contains("nothing was created"),
            "{}",
            found[0]
        );
        assert!(
            found[1]
                .text
                .contains("TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT"),
            "{}",
            found[1]
        );
    }

    #[test]
    fn a_list_the_role_refuses_says_what_to_grant() {
        let forbidden = CallError::Kube(kube::Error::Api(
            ApiStatus::failure(
                "pods is forbidden: User \"system:serviceaccount:tcab:d\" cannot list resource \"pods\" in API group \"\" in the namespace \"sandbox\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        ));
        let found = list_finding(
            "sandbox-pods",
            "sandbox pods",
            "sandbox",
            "list and delete on pods",
            Err(&forbidden),
        );
        let line = one_line(&found);
        assert!(line.starts_with("failed  sandbox-pods: the API server refuses to list sandbox pods in namespace sandbox (403 Forbidden"), "{line}");
        assert!(
            line.ends_with("must grant list and delete on pods there"),
            "{line}"
        );
        let ok = list_finding("jobs", "the dispatcher's Jobs", "tcab", "x", Ok(()));
        assert_eq!(
            one_line(&ok),
            "ok      jobs: the dispatcher's Jobs in namespace tcab can be listed"
        );
    }

    #[test]
    fn a_misspelt_variable_is_a_warning_naming_the_closest() {
        let found =
            environment_findings(["TCAB_DISPATCHER_MAX_INFLIHGT", "TCAB_DRIVER_IMAGE", "HOME"]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].status, Status::Warning);
        assert!(
            found[0]
                .text
                .contains("did you mean TCAB_DISPATCHER_MAX_INFLIGHT?"),
            "{}",
            found[0]
        );
    }
}
