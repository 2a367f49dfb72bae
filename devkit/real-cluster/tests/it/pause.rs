//! Pausing kube-controller-manager: a Job made while it is paused gets no
//! pod, and gets one once it resumes; a paused one stops with the control
//! plane by its SIGTERM. Both on control planes of their own: the API tests
//! beside them need the controller-manager of the shared one (a new
//! namespace waits for its `default` ServiceAccount).

use crate::support::{LIMIT, built_or_skip, processes_mentioning};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use std::time::Duration;
use tcab_real_cluster::{ControlPlane, Settings, SharedControlPlane};
use tcab_testkit::wait::settled;

/// How long a paused controller-manager must leave a new Job without a pod:
/// many times what its Job controller takes to make one when it runs (the
/// test measures that first and prints both).
const PODLESS_FOR: Duration = Duration::from_secs(3);

/// A Job of one pod that never runs (no node here), named `name`.
fn job(name: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "pause"}],
            }},
        },
    }))
    .unwrap()
}

/// The names of the pods of Job `name`.
async fn pods_of(pods: &Api<Pod>, name: &str) -> Vec<String> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The PID of the kube-controller-manager whose command line names `work_dir`.
fn controller_manager_pid(work_dir: &std::path::Path) -> u32 {
    processes_mentioning(work_dir)
        .into_iter()
        .find(|(_, cmdline)| {
            cmdline
                .split_whitespace()
                .next()
                .is_some_and(|program| program.ends_with("/kube-controller-manager"))
        })
        .map(|(pid, _)| pid)
        .expect("a kube-controller-manager process")
}

/// The state letter of process `pid` (`T`: stopped by a signal).
fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// Through a shared control plane's owner (its control socket), as the
/// dev stack's tests ask for it: a Job made while the controller-manager is
/// paused gets no pod for many times the Job controller's usual reaction,
/// and gets it once the controller-manager resumes.
#[tokio::test]
async fn a_job_made_while_the_controller_manager_is_paused_gets_its_pod_once_it_resumes() {
    if built_or_skip().is_none() {
        return;
    }
    // Settings no other test uses: an owner, and a controller-manager, of its own.
    let cp = SharedControlPlane::attach(Settings {
        namespaces: vec![format!("paused-{:08x}", rand::random::<u32>())],
        ..Settings::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{}", tcab_real_cluster::error_chain(&e)));
    let ns = "default";
    let client = cp.admin_client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client, ns);

    // Running, the Job controller makes a Job's pod at once.
    let made = tokio::time::Instant::now();
    jobs.create(&PostParams::default(), &job("before"))
        .await
        .unwrap();
    settled("the pod of Job before", LIMIT, async || {
        match pods_of(&pods, "before").await.as_slice() {
            [] => Err("no pod yet"),
            _ => Ok(()),
        }
    })
    .await;
    let reaction = made.elapsed();

    let took = cp
        .pause_controller_manager()
        .await
        .unwrap_or_else(|e| panic!("{}", tcab_real_cluster::error_chain(&e)));
    let pid = controller_manager_pid(&cp.work_dir);
    assert_eq!(state(pid), 'T', "kube-controller-manager ({pid}) stopped");
    println!("running, the Job controller made a pod in {reaction:?}; paused in {took:?}");
    jobs.create(&PostParams::default(), &job("during"))
        .await
        .unwrap();
    let created = tokio::time::Instant::now();
    // Looked at until PODLESS_FOR has passed; the first pod fails the test.
    while created.elapsed() < PODLESS_FOR {
        let seen = pods_of(&pods, "during").await;
        assert!(
            seen.is_empty(),
            "a pod {:?} after the Job was made, the controller-manager paused: {seen:?}",
            created.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = jobs.get("during").await.unwrap().status.unwrap_or_default();
    assert_eq!(status.active, None, "no pod counted: {status:?}");

    let took = cp
        .resume_controller_manager()
        .await
        .unwrap_or_else(|e| panic!("{}", tcab_real_cluster::error_chain(&e)));
    assert_ne!(
        state(pid),
        'T',
        "kube-controller-manager ({pid}) runs again"
    );
    let resumed = tokio::time::Instant::now();
    settled("the pod of Job during", LIMIT, async || {
        match pods_of(&pods, "during").await.as_slice() {
            [] => Err("no pod yet"),
            _ => Ok(()),
        }
    })
    .await;
    println!(
        "resumed in {took:?}; the paused Job's pod came {:?} after",
        resumed.elapsed()
    );
    // Asked again, each is a no-op answered at once.
    cp.resume_controller_manager().await.unwrap();
    assert_ne!(state(pid), 'T');
}

/// On a control plane of the caller's own: paused, every thread of the
/// controller-manager is stopped and it answers no health check; resumed,
/// it runs and answers; paused again, the control plane still stops it by
/// its SIGTERM (continued after it), not by SIGKILL after the grace.
#[tokio::test]
async fn a_paused_controller_manager_resumes_and_stops_with_the_control_plane_by_its_sigterm() {
    if built_or_skip().is_none() {
        return;
    }
    let mut cp = ControlPlane::start(Settings::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, pid) = cp
        .pids()
        .into_iter()
        .find(|(name, _)| *name == "kube-controller-manager")
        .unwrap();
    let healthz = format!(
        "https://127.0.0.1:{}/healthz",
        cp.ports().controller_manager
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();

    cp.pause_controller_manager().await.unwrap();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
        let s = stat.rsplit(')').next().unwrap().trim_start();
        assert!(s.starts_with('T'), "thread {tid} of {pid}: {s}");
    }
    let err = http.get(&healthz).send().await.unwrap_err();
    assert!(err.is_timeout(), "a paused one answers nothing: {err}");

    cp.resume_controller_manager().await.unwrap();
    assert_ne!(state(pid), 'T');
    let answer = http.get(&healthz).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);

    cp.pause_controller_manager().await.unwrap();
    let stopping = tokio::time::Instant::now();
    let report = cp.stop().await;
    println!("stopped in {:?}: {report:?}", stopping.elapsed());
    let (_, how) = report
        .0
        .iter()
        .find(|(name, _)| *name == "kube-controller-manager")
        .unwrap();
    assert!(how.starts_with("stopped"), "by its SIGTERM: {how}");
}
