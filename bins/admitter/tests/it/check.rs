//! `tcab-admitter check` as an operator (or the chart's `helm test` hook)
//! runs it: the built binary, exactly the environment given, against the
//! reference backend (backend-sim) and kube-sim. A good install passes
//! every check and exits 0; a wrong token, an address nothing listens on, a
//! backend that never answers, another service at the URL, a Role without
//! the pod rights each fail with their own line and exit 1; a malformed
//! variable exits 2 before any call. No line shows the token.

use tcab_testkit::cli::{Ran, run};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-admitter");
const NS: &str = "tcab";
const SERVICE_TOKEN: &str = "svc-token-check-9Kz-never-printed";
const WRONG_TOKEN: &str = "not-the-token-4Rq-never-printed";

/// The reference backend and kube-sim, for one test.
struct Sims {
    backend: tcab_backend_sim::SimHandle,
    cluster: tcab_kube_sim::SimHandle,
}

impl Sims {
    async fn start(rbac: Option<tcab_kube_sim::Rbac>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let backend =
            tcab_backend_sim::spawn(tcab_backend_sim::SimOptions::in_memory(SERVICE_TOKEN))
                .await
                .expect("backend-sim");
        let cluster = tcab_kube_sim::spawn(tcab_kube_sim::SimOptions {
            namespace: NS.into(),
            rbac,
            ..Default::default()
        })
        .await
        .expect("kube-sim");
        Sims { backend, cluster }
    }

    fn kubeconfig(&self) -> String {
        self.cluster.kubeconfig_path().display().to_string()
    }

    /// The admitter's environment for these sims, with `extra` over it.
    fn env(&self, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TCAB_BACKEND_URL", self.backend.url()),
            ("TCAB_BACKEND_SERVICE_TOKEN", SERVICE_TOKEN.to_owned()),
            ("TCAB_DRIVER_IMAGE", "driver:test".to_owned()),
            ("KUBECONFIG", self.kubeconfig()),
            ("POD_NAMESPACE", NS.to_owned()),
        ];
        for (name, value) in extra {
            env.retain(|(n, _)| n != name);
            env.push((*name, value.clone()));
        }
        env
    }
}

/// Runs `tcab-admitter check` (then `args`) with exactly `env`, off the
/// runtime that serves the sims.
async fn check(args: &[&str], env: Vec<(&'static str, String)>) -> Ran {
    let mut argv = vec!["check".to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run(BINARY, &args, &env)
    })
    .await
    .expect("the check ran")
}

/// The stdout line of `check`, which must be there once.
fn line<'a>(ran: &'a Ran, check: &str) -> &'a str {
    let name = format!("{check}:");
    let found: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(name.as_str()))
        .collect();
    assert_eq!(found.len(), 1, "one {check} line: {}", ran.stdout);
    found[0]
}

/// Asserts exit code `code` and no token anywhere in the output.
fn exited(ran: &Ran, code: i32) {
    assert_eq!(
        ran.code,
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        ran.stdout,
        ran.stderr
    );
    ran.assert_hides(SERVICE_TOKEN);
    ran.assert_hides(WRONG_TOKEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_install_passes_every_check_and_exits_0() {
    let sims = Sims::start(None).await;
    let ran = check(&[], sims.env(&[])).await;
    exited(&ran, 0);
    let first = ran.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "tcab-admitter check {} (revision {}), backend contract {}:",
            env!("CARGO_PKG_VERSION"),
            env!("TCAB_REVISION"),
            tcab_shared::backend::CONTRACT_VERSION
        )),
        "{first}"
    );
    let url = sims.backend.url();
    assert_eq!(
        line(&ran, "backend"),
        format!(
            "ok      backend: {url} answers GET /jobs/active with the service token (0 runs in flight)"
        )
    );
    assert!(
        line(&ran, "driver-job")
            .starts_with("ok      driver-job: the API server accepts a driver Job"),
        "{}",
        ran.stdout
    );
    assert!(
        line(&ran, "publisher-job").starts_with("skipped publisher-job: publishing is off"),
        "{}",
        ran.stdout
    );
    assert_eq!(
        line(&ran, "jobs"),
        "ok      jobs: the dispatcher's Jobs in namespace tcab can be listed"
    );
    assert_eq!(
        line(&ran, "pods"),
        "ok      pods: pods in namespace tcab can be listed"
    );
    assert_eq!(
        ran.stdout.lines().last(),
        Some("all 4 checks passed"),
        "{}",
        ran.stdout
    );
    // Nothing was claimed or created: a check changes nothing.
    let counters = sims.cluster.admin().counters().await.expect("counters");
    assert_eq!(
        counters.max_live_jobs.values().sum::<i64>(),
        0,
        "no Job created"
    );
}

/// With publishing on, the publish lane's backend list and publisher Job
/// are checked too; with a sandbox namespace, the pods there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_and_a_sandbox_namespace_add_their_checks() {
    let sims = Sims::start(None).await;
    let ran = check(
        &[],
        sims.env(&[
            ("TCAB_PUBLISHER_IMAGE", "publisher:test".to_owned()),
            ("TCAB_K8S_NAMESPACE", "sandboxes".to_owned()),
        ]),
    )
    .await;
    exited(&ran, 0);
    assert!(
        line(&ran, "backend-publish")
            .contains("answers GET /publish-jobs/active with the service token"),
        "{}",
        ran.stdout
    );
    assert!(
        line(&ran, "publisher-job")
            .starts_with("ok      publisher-job: the API server accepts a publisher Job"),
        "{}",
        ran.stdout
    );
    assert_eq!(
        line(&ran, "sandbox-pods"),
        "ok      sandbox-pods: sandbox pods in namespace sandboxes can be listed"
    );
    assert_eq!(
        ran.stdout.lines().last(),
        Some("all 7 checks passed"),
        "{}",
        ran.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_fails_the_backend_check_naming_the_variable() {
    let sims = Sims::start(None).await;
    let ran = check(
        &[],
        sims.env(&[("TCAB_BACKEND_SERVICE_TOKEN", WRONG_TOKEN.to_owned())]),
    )
    .await;
    exited(&ran, 1);
    let url = sims.backend.url();
    assert_eq!(
        line(&ran, "backend"),
        format!(
            "failed  backend: {url} refuses the service token (HTTP 401): TCAB_BACKEND_SERVICE_TOKEN is not a token the backend accepts; give the container the backend's service token"
        )
    );
    // The cluster side is checked all the same.
    assert!(
        line(&ran, "driver-job").starts_with("ok "),
        "{}",
        ran.stdout
    );
    assert_eq!(
        ran.stdout.lines().last(),
        Some("1 of 4 checks failed"),
        "{}",
        ran.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_nothing_listens_on_fails_the_backend_check() {
    let sims = Sims::start(None).await;
    let url = format!("http://{}", tcab_testkit::http::closed_addr());
    let ran = check(&[], sims.env(&[("TCAB_BACKEND_URL", url.clone())])).await;
    exited(&ran, 1);
    let backend = line(&ran, "backend");
    assert!(
        backend.starts_with(&format!(
            "failed  backend: cannot reach the backend at {url} ("
        )),
        "{backend}"
    );
    assert!(
        backend.ends_with("check TCAB_BACKEND_URL (the backend's in-cluster Service, with its port) and that nothing blocks the way to it"),
        "{backend}"
    );
}

/// A backend that takes the connection and never answers: the line names
/// the timeout and its variable, and the check ends after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_answers_fails_after_the_backend_timeout() {
    let sims = Sims::start(None).await;
    // Bound and never accepted: the kernel completes the connection, and
    // nothing ever reads the request.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", silent.local_addr().expect("addr"));
    let ran = check(
        &[],
        sims.env(&[
            ("TCAB_BACKEND_URL", url.clone()),
            ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "0.5".to_owned()),
        ]),
    )
    .await;
    drop(silent);
    exited(&ran, 1);
    assert_eq!(
        line(&ran, "backend"),
        format!(
            "failed  backend: the backend at {url} gave no answer to GET /jobs/active within 0.5 s (TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS): check TCAB_BACKEND_URL, that the backend is up, and that nothing drops the traffic to it"
        )
    );
}

/// A URL that reaches a service that is not the backend (here one that
/// answers every request with a web page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_service_at_the_url_fails_the_backend_check() {
    let sims = Sims::start(None).await;
    let page = axum::Router::new().fallback(|| async { "<html>welcome</html>" });
    let url = tcab_testkit::http::serve_url(page).await;
    let ran = check(&[], sims.env(&[("TCAB_BACKEND_URL", url.clone())])).await;
    exited(&ran, 1);
    let backend = line(&ran, "backend");
    assert!(
        backend.starts_with(&format!("failed  backend: {url} answers GET /jobs/active, but not as the backend contract says (")),
        "{backend}"
    );
    assert!(
        backend.contains("TCAB_BACKEND_URL may name another service"),
        "{backend}"
    );
}

/// A Role that grants the Job rights but none on pods: the dry runs and the
/// Job list pass, the pod list fails saying what to grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_pod_rights_fails_the_pod_check() {
    const TOKEN: &str = "dispatcher-sa-token";
    let role = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: jobs-only
rules:
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["create", "get", "list", "watch", "delete"]
"#;
    let rbac = tcab_kube_sim::Rbac::parse(role, TOKEN).expect("a Role");
    let sims = Sims::start(Some(rbac)).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    sims.cluster
        .write_kubeconfig(&kubeconfig, TOKEN)
        .expect("kubeconfig");
    let ran = check(
        &[],
        sims.env(&[("KUBECONFIG", kubeconfig.display().to_string())]),
    )
    .await;
    exited(&ran, 1);
    assert!(
        line(&ran, "driver-job").starts_with("ok "),
        "{}",
        ran.stdout
    );
    assert!(line(&ran, "jobs").starts_with("ok "), "{}", ran.stdout);
    let pods = line(&ran, "pods");
    assert!(
        pods.starts_with(
            "failed  pods: the API server refuses to list pods in namespace tcab (403 Forbidden"
        ),
        "{pods}"
    );
    assert!(
        pods.ends_with("a Role bound to the dispatcher's ServiceAccount must grant get, list and delete on pods, and get on pods/log there"),
        "{pods}"
    );
}

/// No Kubernetes config at all: the backend is still checked, and one line
/// says why the cluster's checks could not be made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_kubernetes_config_the_backend_is_still_checked() {
    let sims = Sims::start(None).await;
    let ran = check(
        &[],
        sims.env(&[(
            "KUBECONFIG",
            "/nonexistent/tcab-check-kubeconfig".to_owned(),
        )]),
    )
    .await;
    exited(&ran, 1);
    assert!(line(&ran, "backend").starts_with("ok "), "{}", ran.stdout);
    let kubernetes = line(&ran, "kubernetes");
    assert!(
        kubernetes.starts_with(
            "failed  kubernetes: no Kubernetes client: cannot find a Kubernetes config"
        ),
        "{kubernetes}"
    );
    assert_eq!(
        ran.stdout.lines().last(),
        Some("1 of 2 checks failed"),
        "{}",
        ran.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_variable_exits_2_naming_it_before_any_call() {
    let sims = Sims::start(None).await;
    let ran = check(
        &[],
        sims.env(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "eight".to_owned())]),
    )
    .await;
    let stderr = ran.config_error(SERVICE_TOKEN);
    assert!(
        stderr.contains("TCAB_DISPATCHER_MAX_INFLIGHT") && stderr.contains("eight"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_after_check_exits_2_and_help_names_the_command() {
    let sims = Sims::start(None).await;
    let ran = check(&["--now"], sims.env(&[])).await;
    let stderr = ran.config_error(SERVICE_TOKEN);
    assert!(stderr.contains("unexpected argument \"--now\""), "{stderr}");
    let help = check(&["--help"], vec![]).await;
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    assert!(
        help.stdout
            .contains("Usage: tcab-admitter [--help | --version | check]"),
        "{}",
        help.stdout
    );
    assert!(
        help.stdout.contains("`tcab-admitter check`"),
        "{}",
        help.stdout
    );
}
