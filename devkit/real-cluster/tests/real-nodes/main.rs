//! Real nodes: the upstream kubelet on containerd and runc, running images
//! built here (`tcab-oci-image`), inside the rig's node network. Each test
//! starts its own cluster (a few seconds) and stops it, so nothing outlives
//! it. Without root, containerd, runc, the CNI plugins or the kubelet each
//! test prints one SKIP line and passes (`TCAB_REAL_NODES_REQUIRED=1` makes
//! that a failure: scripts/test sets it once it has installed them).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{LogParams, PostParams};
use serde_json::{Value, json};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcab_real_cluster::node::{network, ready_or_skip};
use tcab_real_cluster::{KubeletCluster, KubeletSettings, Settings, error_chain};
use tokio::sync::Mutex;

const NS: &str = "work";

/// The cluster as a test body holds it (to stop a kubelet, say).
type Shared = Arc<Mutex<KubeletCluster>>;

/// Starts a cluster with real nodes `names` and the rig's images, runs
/// `body`, and stops the cluster however the body ended.
async fn with_cluster<F, Fut>(names: &[&str], body: F)
where
    F: FnOnce(kube::Client, Shared) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(_bins) = ready_or_skip() else {
        return;
    };
    let workload = tcab_oci_image::rig::target_binary("tcab-workload").expect("tcab-workload");
    let dir = workload.parent().unwrap().join("rig-images");
    let images = tcab_oci_image::rig::workload_archives(&workload, &dir).expect("images");
    let cluster = KubeletCluster::start(
        Settings {
            namespaces: vec![NS.into()],
            ..Settings::default()
        },
        KubeletSettings::new(names.iter().map(|s| s.to_string()).collect(), images),
    )
    .await
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let client = cluster.admin_client().await.expect("admin client");
    let shared = Arc::new(Mutex::new(cluster));
    let outcome = tokio::spawn(body(client, shared.clone())).await;
    let cluster = Arc::try_unwrap(shared)
        .ok()
        .expect("the body's task ended, and its handle with it")
        .into_inner();
    cluster.stop().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn create_pod(client: &kube::Client, pod: Value) -> String {
    let pod: Pod = serde_json::from_value(pod).unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let made = api
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    made.metadata.name.unwrap()
}

/// Waits (up to `limit`) until the pod satisfies `done`; returns it.
async fn wait_pod(
    client: &kube::Client,
    name: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + limit;
    loop {
        let pod = serde_json::to_value(api.get(name).await.expect("get pod")).unwrap();
        if done(&pod) {
            return pod;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not as waited for within {limit:?}: {:#}",
            pod["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn terminated(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]["state"]["terminated"]
}

fn plain_pod(name: &str, env: Value, resources: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "main", "image": "tcab/plain:dev", "env": env,
                                 "resources": resources}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_in_a_real_container_and_its_log_is_read_through_the_api_server() {
    with_cluster(&["real-1"], |client, cluster| async move {
        let env = json!([{"name": "TCAB_LOG_LINES", "value": "3"},
                          {"name": "TCAB_RUN_SECONDS", "value": "0"},
                          {"name": "TCAB_EXIT_CODE", "value": "3"}]);
        let name = create_pod(&client, plain_pod("plain", env, json!({}))).await;
        let pod = wait_pod(&client, &name, Duration::from_secs(60), |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
        let t = terminated(&pod);
        assert_eq!(t["exitCode"], 3, "{t:#}");
        assert_eq!(t["reason"], "Error", "{t:#}");
        assert!(
            t["containerID"]
                .as_str()
                .unwrap()
                .starts_with("containerd://"),
            "{t:#}"
        );
        let ip: std::net::Ipv4Addr = pod["status"]["podIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            ip.octets()[..3],
            network::pod_subnet(0).octets()[..3],
            "pod IP {ip}"
        );
        // The API server reads the log from the kubelet through the rig's
        // egress proxy (the node's address is inside the node network).
        let api: Api<Pod> = Api::namespaced(client.clone(), NS);
        let log = api.logs(&name, &LogParams::default()).await.expect("logs");
        assert_eq!(log, "line 1\nline 2\nline 3\n");
        // The egress proxy carries the API server only to loopback and the
        // node network: any other address is refused before a packet goes.
        let socket = cluster.lock().await.network().egress_socket().to_owned();
        for (target, want) in [
            ("192.168.1.1:80", "403"),
            ("10.0.0.9:443", "403"),
            ("8.8.8.8:53", "403"),
            ("10.201.0.1:10250", "200"),
        ] {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut conn = tokio::net::UnixStream::connect(&socket)
                .await
                .expect("egress socket");
            conn.write_all(
                format!("CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut answer = [0u8; 12];
            conn.read_exact(&mut answer).await.unwrap();
            let answer = String::from_utf8_lossy(&answer).into_owned();
            assert_eq!(&answer[9..12], want, "CONNECT {target}: {answer}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_below_what_the_program_touches_is_an_oom_kill_by_the_kernel() {
    with_cluster(&["real-1"], |client, _cluster| async move {
        let env = json!([{"name": "TCAB_ALLOCATE_MIB", "value": "96"},
                          {"name": "TCAB_RUN_SECONDS", "value": "30"}]);
        let limits = json!({"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}});
        let name = create_pod(&client, plain_pod("hog", env, limits)).await;
        let pod = wait_pod(&client, &name, Duration::from_secs(60), |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
        let t = terminated(&pod);
        assert_eq!(t["reason"], "OOMKilled", "{t:#}");
        assert_eq!(t["exitCode"], 137, "{t:#}");
    })
    .await;
}

/// The fake driver in a real container: it reaches the backend through the
/// gateway the rig forwards, and the API server as pods do (the
/// `kubernetes` Service through kube-proxy, its ServiceAccount's token and
/// CA) to make and delete its sandbox pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_reaches_the_backend_through_the_gateway_and_the_api_through_its_service() {
    with_cluster(&["real-1"], |client, cluster| async move {
        let backend = tcab_testkit::backend::MockBackend::start().await;
        backend.add_run_row("run-1", "dispatched", "job-token");
        let port: u16 = backend.url.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap();
        let gateway = cluster.lock().await.network().forward_host_port(port).expect("forward");
        for (kind, body) in [
            ("serviceaccounts", json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "driver"}})),
            ("roles", json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "sandboxes"},
                "rules": [{"apiGroups": [""], "resources": ["pods"],
                           "verbs": ["create", "delete", "get"]}]})),
            ("rolebindings", json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding", "metadata": {"name": "driver-sandboxes"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sandboxes"},
                "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": NS}]})),
        ] {
            let group = if kind == "serviceaccounts" { "api/v1" } else { "apis/rbac.authorization.k8s.io/v1" };
            let req = http::Request::post(format!("/{group}/namespaces/{NS}/{kind}"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            client.request::<Value>(req).await.unwrap_or_else(|e| panic!("creating {kind}: {e}"));
        }
        let env = json!([
            {"name": "TCAB_BACKEND_URL", "value": format!("http://{gateway}")},
            {"name": "TCAB_JOB_ID", "value": "run-1"},
            {"name": "TCAB_JOB_TOKEN", "value": "job-token"},
            {"name": "TCAB_LAUNCH_REQUEST",
             "value": r#"{"sim": {"duration_ms": 200, "record": false, "log_lines": 0}}"#},
        ]);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "driver", "namespace": NS},
            "spec": {"restartPolicy": "Never", "serviceAccountName": "driver",
                     "containers": [{"name": "driver", "image": "tcab/driver:dev", "env": env}]}
        });
        let name = create_pod(&client, pod).await;
        let pod = wait_pod(&client, &name, Duration::from_secs(90), |p| {
            matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .await;
        let api: Api<Pod> = Api::namespaced(client.clone(), NS);
        let log = api.logs(&name, &LogParams::default()).await.expect("logs");
        assert_eq!(pod["status"]["phase"], "Succeeded", "{:#}\nlog:\n{log}", pod["status"]);
        assert_eq!(backend.row_state("run-1"), "succeeded", "log:\n{log}");
        assert!(log.contains(&format!("created sandbox pod {NS}/")), "log:\n{log}");
        assert!(log.contains(&format!("deleted sandbox pod {NS}/")), "log:\n{log}");
    })
    .await;
}

/// The child of [`a_killed_run_leaves_nothing_after_the_next_start`]: starts
/// a cluster with a running pod, prints its holder's PID and the cluster's
/// directory, and waits to be killed. Run only by that test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_killed_run_leaves_nothing_after_the_next_start"]
async fn killed_run_child() {
    if std::env::var("TCAB_KILLED_RUN_CHILD").is_err() {
        return;
    }
    let workload = tcab_oci_image::rig::target_binary("tcab-workload").expect("tcab-workload");
    let images = tcab_oci_image::rig::workload_archives(
        &workload,
        &workload.parent().unwrap().join("rig-images"),
    )
    .expect("images");
    let cluster = KubeletCluster::start(
        Settings {
            namespaces: vec![NS.into()],
            ..Settings::default()
        },
        KubeletSettings::new(vec!["doomed".into()], images),
    )
    .await
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let client = cluster.admin_client().await.expect("client");
    let name = create_pod(&client, plain_pod("left", json!([]), json!({}))).await;
    wait_pod(&client, &name, Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    println!("READY {}", cluster.node_dir("doomed").unwrap().display());
    std::future::pending::<()>().await;
}

/// A run killed with its cluster up (a test SIGKILLed on a timeout) leaves
/// containers and containerd's shims behind (they outlive containerd by
/// design), their cgroups, and its directory with the images: the next
/// start sweeps them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_leaves_nothing_after_the_next_start() {
    if ready_or_skip().is_none() {
        return;
    }
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "killed_run_child", "--nocapture"])
        .env("TCAB_KILLED_RUN_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the child run");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let node_dir = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(dir) = line.strip_prefix("READY ") {
                return std::path::PathBuf::from(dir);
            }
        }
        panic!("the child run ended before its cluster was up");
    })
    .await
    .expect("the child's cluster up within 120 s");
    // .../tcab-nodes-XXXX/nodes/doomed
    let cluster_dir = node_dir.parent().unwrap().parent().unwrap().to_owned();
    let holder: u32 = std::fs::read_to_string(cluster_dir.join("holder.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cgroup = std::path::PathBuf::from(format!("/sys/fs/cgroup/memory/tcab-{holder}-doomed"));
    child.kill().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{holder}")).exists() {
        assert!(Instant::now() < deadline, "the holder outlived its run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let procs = |dir: &Path| -> usize {
        walkdir(dir)
            .iter()
            .map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .count()
            })
            .sum()
    };
    assert!(
        procs(&cgroup) > 0,
        "the killed run left nothing running: the test shows nothing"
    );
    with_cluster(&["real-1"], |_client, _cluster| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        while cgroup.exists() || cluster_dir.exists() {
            assert!(
                Instant::now() < deadline,
                "left after the next start: cgroup {} ({} processes), directory {}",
                cgroup.exists(),
                procs(&cgroup),
                cluster_dir.exists()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_owned()];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walkdir(&e.path()));
        }
    }
    out
}
