//! The chart's alert rules evaluated by a real Prometheus against the
//! dispatcher installed from the chart on the real control plane (issue 37:
//! each new alert shown on the real control plane). The rules are the
//! chart's PrometheusRule as Helm renders it (with every `for` at 0s and the
//! count thresholds at 1, through values), written as a plain rules file; a
//! throwaway `prometheus` (Debian's package) scrapes the pod's three metrics
//! ports every second with the target labels the chart's PodMonitor gives
//! them under prometheus-operator, and evaluates the rules every second.
//! The test drives the cluster into each condition and reads
//! `/api/v1/alerts` until the alert fires, with its labels.
//!
//! Real cluster only (one SKIP line without the control plane's binaries),
//! and it needs the `prometheus` binary: without one on PATH it prints one
//! SKIP line and passes, even with `TCAB_REAL_CLUSTER_REQUIRED=1` (only a
//! missing binary skips; a Prometheus that fails to start fails the test).

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::chart::{RELEASE, admin_client, container, dispatcher_pods, fullname, name_of, values};
use common::{ClusterKind, TestStack, run};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcab_devstack::chart;
use tcab_devstack::console::encode;
use tcab_devstack::policy;
use tcab_devstack::stack::free_port;
use tcab_devstack::wait_for;

/// The longest wait of one step (the cluster's own timelines: a pod
/// started, a liveness restart, a start grace, a quota taken up).
const LIMIT: Duration = Duration::from_secs(90);

/// The driver image the stack's chart values name.
const DRIVER_IMAGE: &str = "tcab/driver:dev";

/// The alerts of issue 37, and the older ones: all get `for: 0s`, so a
/// condition that holds for one evaluation shows at once (a false page
/// too).
const ALERTS: [&str; 11] = [
    "TcabDispatcherGateClosed",
    "TcabDispatcherViewNotCurrent",
    "TcabDispatcherLaneSaturated",
    "TcabDispatcherReportsFailing",
    "TcabDispatcherContainerRestarting",
    "TcabDispatcherJobStuck",
    "TcabDispatcherDown",
    "TcabDispatcherAbsent",
    "TcabDispatcherAdmissionsFailing",
    "TcabDispatcherConfigurationDeaths",
    "TcabDispatcherSandboxMismatches",
];

/// `prometheus` on PATH, if any.
fn prometheus_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file())
}

/// A Prometheus process, killed (and reaped) when dropped.
struct Prometheus {
    child: std::process::Child,
    url: String,
    config: PathBuf,
    http: reqwest::Client,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `binary` on a free loopback port with its own TSDB in `dir`,
    /// `config` as its configuration, and waits until it is ready.
    async fn start(binary: &Path, dir: &Path, config: Value) -> Prometheus {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = free_port().expect("a free port");
        let config_path = dir.join("prometheus.yml");
        // JSON is YAML: Prometheus reads it as its configuration.
        std::fs::write(&config_path, config.to_string()).expect("write the configuration");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("its log");
        let child = std::process::Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            config: config_path,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        };
        let ready = format!("{}/-/ready", prometheus.url);
        wait_for("prometheus ready", Duration::from_secs(30), || async {
            let answer = prometheus.http.get(&ready).send().await?;
            Ok(answer.status().is_success().then_some(()))
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e:#}\n{}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            )
        });
        prometheus
    }

    async fn api(&self, path: &str) -> anyhow::Result<Value> {
        let answer: Value = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::ensure!(answer["status"] == "success", "{answer}");
        Ok(answer["data"].clone())
    }

    /// The result vector of an instant query.
    async fn query(&self, promql: &str) -> anyhow::Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(promql)))
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The active (pending or firing) alerts.
    async fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The rule group's last evaluation, as Prometheus reports it.
    async fn last_evaluation(&self) -> anyhow::Result<jiff::Timestamp> {
        let data = self.api("/api/v1/rules").await?;
        let at = data["groups"][0]["lastEvaluation"]
            .as_str()
            .unwrap_or_default();
        Ok(at.parse()?)
    }

    /// Waits until alert `name` fires with every label of `labels`;
    /// returns it. On a timeout the active alerts are shown.
    async fn firing(&self, name: &str, labels: &[(&str, &str)]) -> Value {
        let last = std::sync::Mutex::new(Vec::new());
        let found = wait_for(&format!("{name} firing with {labels:?}"), LIMIT, || async {
            let alerts = self.alerts().await?;
            let hit = alerts.iter().find(|a| {
                a["state"] == "firing"
                    && a["labels"]["alertname"] == name
                    && labels.iter().all(|(k, v)| a["labels"][*k] == *v)
            });
            let hit = hit.cloned();
            *last.lock().expect("lock") = alerts;
            Ok(hit)
        })
        .await;
        found.unwrap_or_else(|e| {
            let alerts = last.lock().expect("lock").clone();
            panic!(
                "{e:#}\nactive alerts: {}",
                serde_json::to_string_pretty(&alerts).unwrap_or_default()
            )
        })
    }

    /// Asserts that no alert is active (pending or firing) at any poll
    /// until the rules have been evaluated `evaluations` more times.
    async fn quiet_for(&self, what: &str, evaluations: i64) {
        let from = self
            .last_evaluation()
            .await
            .expect("the rules' last evaluation");
        let until = from + jiff::SignedDuration::from_secs(evaluations);
        wait_for(what, LIMIT, || async {
            let alerts = self.alerts().await?;
            assert!(
                alerts.is_empty(),
                "{what}: no alert may be active, yet: {}",
                serde_json::to_string_pretty(&alerts).unwrap_or_default()
            );
            Ok((self.last_evaluation().await? >= until).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Rewrites the configuration and has Prometheus reload it (SIGHUP).
    fn reload(&self, config: Value) {
        std::fs::write(&self.config, config.to_string()).expect("write the configuration");
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    }
}

/// The scrape configuration prometheus-operator generates from the chart's
/// PodMonitor (templates/podmonitor.yaml), as static targets: one scrape
/// job per endpoint, job `<namespace>/<PodMonitor name>`, and on each
/// target the labels the operator's relabelings give it (`namespace`,
/// `pod`, `container`, `endpoint` = the port's name) plus
/// `app_kubernetes_io_instance`, the pod label named in podTargetLabels
/// (the chart's `relabelings` default is empty, so nothing else). Service
/// discovery is replaced by the pod's known name and ports: the node agent
/// runs the pod's containers as local processes on 127.0.0.1.
fn scrape_config(ns: &str, pod: &str, ports: &[(&str, &str, u64)], rules: &Path) -> Value {
    let job = format!("{ns}/{}", fullname(RELEASE));
    let targets: Vec<Value> = ports
        .iter()
        .map(|(container, endpoint, port)| {
            json!({"targets": [format!("127.0.0.1:{port}")],
                "labels": {"namespace": ns, "pod": pod, "container": container,
                    "endpoint": endpoint, "app_kubernetes_io_instance": RELEASE}})
        })
        .collect();
    // With no targets the job stays, empty: Prometheus then stops its
    // targets' scrape loops as it does when discovery loses them (writing
    // staleness markers); a job removed from the configuration instead
    // stops its loops without them, and its series linger for the 5-minute
    // lookback.
    let scrape_configs = json!([{"job_name": job, "metrics_path": "/metrics", "scheme": "http",
        "static_configs": targets}]);
    json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [rules.display().to_string()],
        "scrape_configs": scrape_configs,
    })
}

/// A healthy install: no alert active, not even while a lane is full of
/// long runs after the admitter restarted (the gate's reading then stays at
/// its start value 0, which once paged TcabDispatcherGateClosed). Then each
/// alert of issue 37 fired by its condition: Down (a frozen container),
/// ConfigurationDeaths (an image that cannot be pulled), SandboxMismatches
/// (a dead driver's sandbox of another managed-by value),
/// AdmissionsFailing (Job creates refused by a ResourceQuota while the gate
/// is open), Absent (the release's targets gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_alert_fires_on_the_real_control_plane_and_none_on_a_healthy_install() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let Some(prometheus_bin) = prometheus_binary() else {
        println!(
            "SKIP: no prometheus on PATH (Debian's `prometheus` package), so the alert rules cannot be evaluated live"
        );
        return;
    };
    let started = std::time::Instant::now();
    let t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    let ns = t.ns();
    let client = admin_client(&t).await;

    // Every alert at `for: 0s`, every count threshold at 1; a publish lane
    // of one slot to fill; a start grace of 3 s for the image-pull death;
    // a liveness probe that restarts a frozen container within seconds.
    let alerts: serde_json::Map<String, Value> = ALERTS
        .iter()
        .map(|a| ((*a).to_owned(), json!({"for": "0s"})))
        .collect();
    let rule_values = json!({"enabled": true, "alerts": alerts, "admissionErrors": 1,
        "configurationDeaths": 1, "sandboxMismatches": 1});
    let probe = json!({"initialDelaySeconds": 2, "periodSeconds": 1, "timeoutSeconds": 1,
        "failureThreshold": 5});
    let base = values(
        &t,
        json!({"terminationGracePeriodSeconds": 3,
            "dispatcher": {"maxPublishInflight": 1, "startGraceSeconds": 3},
            "metrics": {"livenessProbe": probe}}),
    );
    let mut with_rules = base.clone();
    common::chart::merge(
        &mut with_rules,
        json!({"metrics": {"prometheusRule": rule_values}}),
    );

    // The rules as Helm renders them; the cluster has no monitoring.coreos.com
    // CRDs, so the release itself is installed without the PrometheusRule
    // (the rest of the rendering is the same).
    let rendered = chart::render(&chart::chart_dir(), RELEASE, &ns, &with_rules)
        .await
        .expect("render the chart");
    let rule = rendered
        .iter()
        .find(|m| m.kind() == "PrometheusRule")
        .expect("a PrometheusRule");
    let rules_path = t.dir.path().join("rules.yml");
    std::fs::write(
        &rules_path,
        json!({"groups": rule.object["spec"]["groups"]}).to_string(),
    )
    .expect("write the rules");
    let _release = chart::install(&client, RELEASE, &ns, &base)
        .await
        .unwrap_or_else(|e| t.fail(format!("installing the chart: {e:#}")));
    let pod = common::chart::ready_pod(&t, RELEASE).await;
    let pod_name = name_of(&pod);
    let m = &base["metrics"];
    let port = |k: &str| m[k].as_u64().expect("a metrics port");
    let ports = [
        ("admitter", "admit-metrics", port("admitterPort")),
        ("lease-keeper", "lease-metrics", port("leaseKeeperPort")),
        ("reaper", "reap-metrics", port("reaperPort")),
    ];

    let prom_dir = t.dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).expect("its directory");
    let prom = Prometheus::start(
        &prometheus_bin,
        &prom_dir,
        scrape_config(&ns, &pod_name, &ports, &rules_path),
    )
    .await;
    let loaded: Vec<String> = prom.api("/api/v1/rules").await.expect("rules")["groups"][0]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(loaded, ALERTS, "every alert of the chart loaded");
    let sel = format!(r#"namespace="{ns}",app_kubernetes_io_instance="{RELEASE}""#);
    wait_for("the three containers scraped", LIMIT, || async {
        let up = prom.query(&format!("up{{{sel}}} == 1")).await?;
        Ok((up.len() == 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    // Baseline: the publish lane full of long publishes, its queue not
    // empty (two hanging publishes, a cap of one).
    for i in 0..2 {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"hang": true}}))
            .await
            .expect("enqueue publish");
    }
    let publish_full = || async {
        let q = format!(r#"tcab_dispatcher_lane_in_flight{{{sel},lane="publish"}} == 1"#);
        Ok((prom.query(&q).await?.len() == 1).then_some(()))
    };
    wait_for("the publish lane full", LIMIT, publish_full)
        .await
        .unwrap_or_else(|e| t.fail(e));
    prom.quiet_for("a healthy install with a full lane", 4)
        .await;

    // Down: the admitter frozen, its endpoint stops answering (a scrape
    // times out: up 0), as a wedged or stopped container looks to
    // Prometheus. The liveness probe then restarts it.
    let real = t.stack.real.as_ref().expect("a real cluster");
    let agent =
        tcab_node_agent::AdminClient::new(real.agent_url.as_deref().expect("the node agent"));
    let frozen_at = std::time::Instant::now();
    agent
        .freeze(&ns, &pod_name, "admitter")
        .await
        .expect("freeze the admitter");
    let down = prom
        .firing(
            "TcabDispatcherDown",
            &[
                ("namespace", &ns),
                ("pod", &pod_name),
                ("container", "admitter"),
                ("severity", "critical"),
            ],
        )
        .await;
    println!(
        "{:>5.1?} TcabDispatcherDown fired: {}",
        started.elapsed(),
        down["labels"]
    );

    // The admitter restarted with the publish lane full: it reads that
    // lane's gate on every tick, so the reading is 1 while renewals are
    // healthy, and never 0 on the way (it once sat at its start value 0
    // until the lane had room, and TcabDispatcherGateClosed paged before the
    // rule asked for room in the lane). No alert may fire.
    wait_for("the admitter restarted and Ready", LIMIT, || async {
        let pods = dispatcher_pods(&t).await;
        Ok(pods.into_iter().find(|p| {
            let c = container(p, "admitter");
            c["restartCount"] == 1 && c["ready"] == true
        }))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    wait_for(
        "the restarted admitter scraped, its full publish lane's gate reading open",
        LIMIT,
        || async {
            let q = format!(
                r#"tcab_dispatcher_gate_open{{{sel},lane="publish"}} == 1 and on (pod) up{{{sel},container="admitter"}} == 1"#
            );
            let views = format!(r#"min(tcab_dispatcher_view_current{{{sel}}}) == 1"#);
            Ok(
                (prom.query(&q).await?.len() == 1 && prom.query(&views).await?.len() == 1)
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let window = frozen_at.elapsed().as_secs() + 1;
    let closed = prom
        .query(&format!(
            r#"min_over_time(tcab_dispatcher_gate_open{{{sel},lane="publish"}}[{window}s]) == 0"#
        ))
        .await
        .unwrap_or_else(|e| t.fail(e));
    assert!(
        closed.is_empty(),
        "the full publish lane's gate read closed across the admitter's restart: {closed:?}"
    );
    wait_for("the publish lane full", LIMIT, publish_full)
        .await
        .unwrap_or_else(|e| t.fail(e));
    // The restart's own alerts resolve once the new process is scraped
    // (the view is current again, up is 1): then nothing may be active.
    let settled = wait_for("no alert active after the restart", LIMIT, || async {
        Ok(prom.alerts().await?.is_empty().then_some(()))
    })
    .await;
    if let Err(e) = settled {
        let alerts = prom.alerts().await.unwrap_or_default();
        t.fail(format!(
            "{e:#}: {}",
            serde_json::to_string_pretty(&alerts).unwrap_or_default()
        ));
    }
    prom.quiet_for("a full lane after an admitter restart", 4)
        .await;

    // SandboxMismatches and ConfigurationDeaths. A long run's driver
    // running; a sandbox pod of its job id with another managed-by value
    // than the driver's; the driver OOM-killed: the reaper keeps that pod
    // and counts a mismatch. Meanwhile the driver image cannot be pulled,
    // so the next run never starts: after the start grace its death is
    // reported with cause image_pull.
    let hang = t
        .stack
        .backend
        .enqueue_run(run("mismatch", json!({"hang": true, "log_lines": 1})))
        .await
        .expect("enqueue");
    let driver = t.running_driver(&hang, LIMIT).await;
    let foreign = policy::bare_pod(
        &format!("foreign-sandbox-{}", policy::suffix()),
        json!({"tcab.dev/job-id": hang, "app.kubernetes.io/managed-by": "someone-else"}),
    );
    policy::create_pod(&t.stack.cluster, &ns, &foreign)
        .await
        .expect("a sandbox pod of another managed-by value");
    t.admin()
        .set_unpullable(DRIVER_IMAGE, true)
        .await
        .expect("unpullable");
    let bad = t
        .stack
        .backend
        .enqueue_run(run("bad-image", json!({"hang": true})))
        .await
        .expect("enqueue");
    t.admin()
        .oom_kill(&ns, &name_of(&driver))
        .await
        .expect("oom kill the driver");
    let dead = t
        .run_until(&bad, "the image-pull death reported", LIMIT, |j| {
            j["state"] == "failed"
        })
        .await;
    assert!(
        dead["detail"]
            .as_str()
            .unwrap_or("")
            .contains("image pull failed"),
        "{dead}"
    );
    let deaths = prom
        .firing(
            "TcabDispatcherConfigurationDeaths",
            &[
                ("namespace", &ns),
                ("pod", &pod_name),
                ("cause", "image_pull"),
                ("severity", "warning"),
            ],
        )
        .await;
    println!(
        "{:>5.1?} TcabDispatcherConfigurationDeaths fired: {}",
        started.elapsed(),
        deaths["labels"]
    );
    t.admin()
        .set_unpullable(DRIVER_IMAGE, false)
        .await
        .expect("pullable");
    let mismatches = prom
        .firing(
            "TcabDispatcherSandboxMismatches",
            &[
                ("namespace", &ns),
                ("pod", &pod_name),
                ("severity", "warning"),
            ],
        )
        .await;
    println!(
        "{:>5.1?} TcabDispatcherSandboxMismatches fired: {}",
        started.elapsed(),
        mismatches["labels"]
    );

    // AdmissionsFailing: a ResourceQuota of no Jobs, so every Job create
    // is refused (403, exceeded quota) while the lease renewals, and so
    // the gate, are healthy.
    policy::create_resource_quota(
        &t.stack.cluster,
        &ns,
        "no-jobs",
        json!({"count/jobs.batch": "0"}),
    )
    .await
    .unwrap_or_else(|e| t.fail(format!("the quota: {e:#}")));
    t.stack
        .backend
        .enqueue_run(run("refused", json!({"duration_ms": 100})))
        .await
        .expect("enqueue");
    let failing = prom
        .firing(
            "TcabDispatcherAdmissionsFailing",
            &[
                ("namespace", &ns),
                ("pod", &pod_name),
                ("lane", "run"),
                ("step", "create"),
                ("severity", "warning"),
            ],
        )
        .await;
    println!(
        "{:>5.1?} TcabDispatcherAdmissionsFailing fired: {}",
        started.elapsed(),
        failing["labels"]
    );

    // Absent: the release's targets leave Prometheus, as they leave the
    // operator's service discovery when the pod (or the PodMonitor) is
    // gone; their series go stale and `absent(up{...})` holds.
    prom.reload(scrape_config(&ns, &pod_name, &[], &rules_path));
    let absent = prom
        .firing(
            "TcabDispatcherAbsent",
            &[
                ("namespace", &ns),
                ("app_kubernetes_io_instance", RELEASE),
                ("severity", "critical"),
            ],
        )
        .await;
    println!(
        "{:>5.1?} TcabDispatcherAbsent fired: {}",
        started.elapsed(),
        absent["labels"]
    );
    println!("every alert shown in {:.0?}", started.elapsed());
}
