//! Starting and stopping: ready in order, nothing left behind however it
//! ends, a failed start stops what it started and shows the logs' tails.

use crate::support::{built_or_skip, group_alive, processes_mentioning};
use std::time::Duration;
use tcab_real_cluster::{ControlPlane, Failure, Settings, StartError};

#[tokio::test]
async fn without_the_binaries_the_error_says_how_to_build_them() {
    let empty = tempfile::tempdir().unwrap();
    let err = ControlPlane::start(Settings {
        bin_dir: Some(empty.path().to_owned()),
        ..Settings::default()
    })
    .await
    .unwrap_err();
    assert!(matches!(err, StartError::NotBuilt(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("run scripts/control-plane build"), "{msg}");
    assert!(
        msg.contains("etcd, kube-apiserver, kube-controller-manager, kube-scheduler"),
        "{msg}"
    );
}

#[tokio::test]
async fn starts_ready_and_stops_in_order_leaving_nothing() {
    if built_or_skip().is_none() {
        return;
    }
    let cp = ControlPlane::start(Settings {
        namespaces: vec!["one".into(), "two".into()],
        ..Settings::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let times = cp.start_times();
    println!("start times: {times:?}");
    assert!(times.etcd_ready <= times.apiserver_ready);
    assert!(times.apiserver_ready <= times.controllers_ready);
    assert!(times.controllers_ready <= times.default_service_accounts);

    // The admin reads what the start waited for.
    let client = cp.admin_client().await.unwrap();
    let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
        kube::Api::namespaced(client, "two");
    assert!(sas.get_opt("default").await.unwrap().is_some());

    let work_dir = cp.work_dir.clone();
    let pids = cp.pids();
    assert_eq!(
        pids.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler"
        ]
    );
    assert!(pids.iter().all(|(_, pid)| group_alive(*pid)));

    let stopping = tokio::time::Instant::now();
    let report = cp.stop().await;
    println!("stopped in {:?}: {report:?}", stopping.elapsed());
    let order: Vec<&str> = report.0.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        order,
        [
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
            "etcd"
        ],
        "{report:?}"
    );
    // Nothing needed SIGKILL: etcd went last, so the API server could finish.
    assert!(
        report.0.iter().all(|(_, how)| !how.starts_with("killed")),
        "{report:?}"
    );
    for (name, pid) in &pids {
        assert!(!group_alive(*pid), "{name} ({pid}) is still there");
    }
    assert!(!work_dir.exists(), "the temporary work dir was not removed");
}

#[tokio::test]
async fn a_dropped_control_plane_leaves_no_process() {
    if built_or_skip().is_none() {
        return;
    }
    let cp = ControlPlane::start(Settings::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let work_dir = cp.work_dir.clone();
    let pids = cp.pids();
    assert_eq!(processes_mentioning(&work_dir).len(), 4);
    drop(cp);
    for (name, pid) in &pids {
        assert!(!group_alive(*pid), "{name} ({pid}) is still there");
    }
    assert_eq!(processes_mentioning(&work_dir), []);
}

#[tokio::test]
async fn a_component_that_cannot_start_stops_the_rest_and_shows_the_logs() {
    if built_or_skip().is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let err = ControlPlane::start(Settings {
        work_dir: Some(work.path().to_owned()),
        extra_args: tcab_real_cluster::ExtraArgs {
            apiserver: vec!["--no-such-flag".into()],
            ..Default::default()
        },
        ..Settings::default()
    })
    .await
    .unwrap_err();
    println!("{err}");
    let StartError::Failed {
        failure,
        work_dir,
        tails,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(
        matches!(
            failure,
            Failure::Exited {
                component: "kube-apiserver",
                ..
            }
        ),
        "{failure:?}"
    );
    assert_eq!(work_dir, work.path());
    let api = tails
        .0
        .iter()
        .find(|t| t.component == "kube-apiserver")
        .expect("the API server's log tail");
    assert!(
        api.lines.contains("unknown flag: --no-such-flag"),
        "{}",
        api.lines
    );
    let msg = err.to_string();
    assert!(msg.contains("work dir kept at"), "{msg}");
    assert!(msg.contains("--- etcd"), "{msg}");
    // etcd, started before, was stopped.
    assert_eq!(processes_mentioning(work.path()), []);
}

#[tokio::test]
async fn a_start_not_ready_within_its_bound_stops_everything() {
    if built_or_skip().is_none() {
        return;
    }
    let err = ControlPlane::start(Settings {
        // etcd comes up in about a second at most; the API server needs
        // three. Whichever wait the bound cuts short, what was started stops.
        ready_timeout: Duration::from_secs(1),
        ..Settings::default()
    })
    .await
    .unwrap_err();
    let StartError::Failed {
        failure, work_dir, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(matches!(failure, Failure::Timeout { .. }), "{failure:?}");
    assert!(
        work_dir.join("logs").is_dir(),
        "the temporary work dir is kept"
    );
    assert_eq!(processes_mentioning(work_dir), []);
    std::fs::remove_dir_all(work_dir).unwrap();
}

#[tokio::test]
async fn components_die_with_a_killed_owner() {
    if built_or_skip().is_none() {
        return;
    }
    if !tcab_real_cluster::children_die_with_us() {
        println!("SKIP: setpriv --pdeathsig is not available (util-linux)");
        return;
    }
    // The binary for people: started, then SIGKILLed (no Drop, no stop), as a
    // test binary killed on a timeout would be.
    let work = tempfile::tempdir().unwrap();
    let mut owner = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_tcab-control-plane"))
            .arg("--work-dir")
            .arg(work.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = owner.0.stdout.take().unwrap();
    let up = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("Ctrl-C stops it"))
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(90), up)
            .await
            .unwrap()
            .unwrap(),
        "the binary never said it was up"
    );
    let owner_pid = owner.0.id();
    let components = || {
        processes_mentioning(work.path())
            .into_iter()
            .filter(|(pid, _)| *pid != owner_pid)
            .collect::<Vec<_>>()
    };
    assert_eq!(components().len(), 4, "{:?}", components());
    owner.0.kill().unwrap();
    owner.0.wait().unwrap();
    tcab_testkit::wait::settled("no component left", Duration::from_secs(10), async || {
        match components().as_slice() {
            [] => Ok(()),
            left => Err(format!("{left:?}")),
        }
    })
    .await;
}

/// A child process killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stand-in for the node agent: registers each node Ready with its own
/// token (through the kubectl built beside the control plane), prints the
/// agent's ready line and idles. Its arguments: kubectl, then the
/// launcher's `{api_url} {ca_file} {tokens}`, then the node names.
const FAKE_AGENT: &str = r#"
set -e
kubectl=$1; api=$2; ca=$3; tokens=$4; shift 4
for n in "$@"; do
  token=$(grep ",system:node:$n," "$tokens" | cut -d, -f1)
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s"},"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":"%s","lastTransitionTime":"%s"}]}}' "$n" "$now" "$now" |
    "$kubectl" --server="$api" --certificate-authority="$ca" --token="$token" create -f -
done
echo "node agent ready: admin http://127.0.0.1:9; nodes: $* (kubelet port 0)"
exec sleep 600
"#;

#[tokio::test]
async fn a_node_agent_run_by_the_launcher_is_waited_for_and_stopped_first() {
    let Some(bin) = built_or_skip() else {
        return;
    };
    let kubectl = bin.join("kubectl");
    if !kubectl.is_file() {
        println!(
            "SKIP: no kubectl in {} (scripts/control-plane build makes it)",
            bin.display()
        );
        return;
    }
    let nodes = vec!["agent-1".to_owned(), "agent-2".to_owned()];
    let mut args = vec![
        "-c".to_owned(),
        FAKE_AGENT.to_owned(),
        "fake-agent".to_owned(),
    ];
    args.push(kubectl.display().to_string());
    args.extend(["{api_url}", "{ca_file}", "{tokens}"].map(String::from));
    args.extend(nodes.iter().cloned());
    let cp = ControlPlane::start(Settings {
        nodes: nodes.clone(),
        node_agent: Some(tcab_real_cluster::NodeAgent {
            program: "/bin/sh".into(),
            args,
            ready_prefix: Some("node agent ready:".into()),
        }),
        ..Settings::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(cp.start_times().nodes_ready.is_some());
    assert_eq!(cp.node_agent_url(), Some("http://127.0.0.1:9"));
    let client = cp.admin_client().await.unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    for n in &nodes {
        let node = api.get(n).await.unwrap();
        assert_eq!(tcab_real_cluster::node_not_ready(&node), None, "{n}");
    }
    let pids = cp.pids();
    assert_eq!(pids.last().map(|(n, _)| *n), Some("node-agent"));
    let report = cp.stop().await;
    assert_eq!(
        report.0.first().map(|(n, _)| *n),
        Some("node-agent"),
        "{report:?}"
    );
    for (name, pid) in &pids {
        assert!(!group_alive(*pid), "{name} ({pid}) is still there");
    }
}
