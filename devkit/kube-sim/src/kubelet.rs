//! The simulated kubelet: one task per pod moves it Pending -> Running ->
//! Succeeded/Failed, runs its program (fake driver, fake publisher or a
//! plain container) and delivers SIGTERM and SIGKILL.

use crate::clock::k8s_time;
use crate::driver;
use crate::objects::{self, condition_true, deleting};
use crate::sim::Sim;
use crate::store::Key;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What the kubelet can be told to do to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodSignal {
    /// Graceful stop: SIGTERM now, SIGKILL after `grace`; then the pod is removed.
    Term {
        /// Time the program has to exit.
        grace: Duration,
    },
    /// SIGKILL at once; `oom` marks the container OOMKilled.
    Kill {
        /// Out-of-memory kill.
        oom: bool,
    },
    /// The pod is gone (node crash, forced delete): stop with no status write.
    Vanish,
}

/// What a pod's program sees: its pod, a log, and SIGTERM.
pub struct ProcCtx {
    /// The shared sim.
    pub sim: Arc<Sim>,
    /// The pod as it was when the container started.
    pub pod: Arc<Value>,
    /// The pod's key.
    pub key: Key,
    /// The container's name.
    pub container: String,
    sigterm: watch::Receiver<bool>,
}

impl ProcCtx {
    /// Writes a line to the container's log.
    pub fn log(&self, line: impl AsRef<str>) {
        self.sim
            .store
            .append_log(&self.key.ns, &self.key.name, &self.container, line.as_ref());
    }

    /// The value of an env variable of the container (literal `value` only).
    pub fn env(&self, name: &str) -> Option<String> {
        self.pod["spec"]["containers"][0]["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str().map(str::to_string))
    }

    /// Whether SIGTERM has been delivered.
    pub fn terminated(&self) -> bool {
        *self.sigterm.borrow()
    }

    /// Waits until SIGTERM is delivered (forever if it never is).
    pub async fn sigterm(&self) {
        let mut rx = self.sigterm.clone();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sleeps `sim` of sim time; returns `false` when SIGTERM cut it short.
    pub async fn sleep(&self, sim: Duration) -> bool {
        tokio::select! {
            _ = self.sim.clock.sleep(sim) => true,
            _ = self.sigterm() => false,
        }
    }
}

/// Which program a pod's container runs.
#[derive(Debug, Clone, PartialEq)]
enum Program {
    Driver,
    Publisher,
    /// Runs for the given time (forever when `None`), exits with the code;
    /// SIGTERM stops it at once with 143.
    Plain {
        run: Option<Duration>,
        exit_code: i32,
    },
}

/// Annotation: how long a plain container runs, in (sim) seconds.
pub const RUN_SECONDS: &str = "kube-sim.tcab.dev/run-seconds";
/// Annotation: a plain container's exit code.
pub const EXIT_CODE: &str = "kube-sim.tcab.dev/exit-code";

fn program_for(sim: &Sim, pod: &Value) -> Program {
    let kind = objects::label(pod, "tcab.dev/job-kind");
    let name = objects::name(pod);
    let owned = objects::controller_job(pod).is_some();
    if owned && (kind == Some("run") || (kind.is_none() && name.starts_with("tcab-driver-"))) {
        return Program::Driver;
    }
    if owned && (kind == Some("publish") || (kind.is_none() && name.starts_with("tcab-publisher-")))
    {
        return Program::Publisher;
    }
    let ann = &pod["metadata"]["annotations"];
    let run = ann[RUN_SECONDS]
        .as_str()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .or(owned.then_some(sim.timing.default_job_pod_run));
    let exit_code = ann[EXIT_CODE]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Program::Plain { run, exit_code }
}

async fn run_program(program: Program, ctx: ProcCtx) -> i32 {
    match program {
        Program::Driver => driver::run_driver(&ctx).await,
        Program::Publisher => driver::run_publisher(&ctx).await,
        Program::Plain { run, exit_code } => {
            let done = match run {
                Some(d) => ctx.sleep(d).await,
                None => {
                    ctx.sigterm().await;
                    false
                }
            };
            if done { exit_code } else { 143 }
        }
    }
}

/// Registers a new pod and starts its kubelet task.
pub fn start(sim: Arc<Sim>, key: Key) {
    let (tx, rx) = mpsc::unbounded_channel();
    sim.pods
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), tx);
    tokio::spawn(run_pod(sim, key, rx));
}

fn unregister(sim: &Sim, key: &Key) {
    sim.pods
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
}

/// Counts a program in [`Sim::programs_running`] until it is dropped, which
/// happens when the program returns or its task is aborted.
struct Running(Arc<Sim>);

impl Running {
    fn new(sim: &Arc<Sim>) -> Self {
        sim.programs.fetch_add(1, Ordering::SeqCst);
        Running(sim.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.programs.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a container stopped.
struct Stop {
    exit_code: i32,
    reason: &'static str,
    signal: Option<i32>,
}

async fn run_pod(sim: Arc<Sim>, key: Key, mut rx: mpsc::UnboundedReceiver<PodSignal>) {
    // Pending: scheduling, then container start. A signal here stops the pod
    // before its container ever ran.
    let pending = async {
        sim.clock.sleep(sim.timing.schedule_delay).await;
        let now = k8s_time(sim.clock.now());
        let _ = sim.store.update(&key, |p| {
            p["spec"]["nodeName"] = json!("sim-node");
            p["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]);
            Ok(true)
        });
        sim.clock.sleep(sim.timing.start_delay).await;
    };
    tokio::select! {
        _ = pending => {}
        sig = rx.recv() => {
            unregister(&sim, &key);
            if !matches!(sig, Some(PodSignal::Vanish) | None) {
                let _ = sim.store.remove(&key);
            }
            return;
        }
    }
    let started = k8s_time(sim.clock.now());
    let Ok(pod) = sim.store.update(&key, |p| {
        mark_running(p, &started, &key.name);
        Ok(true)
    }) else {
        unregister(&sim, &key);
        return;
    };
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("main")
        .to_string();
    let (term_tx, term_rx) = watch::channel(false);
    let ctx = ProcCtx {
        sim: sim.clone(),
        pod: pod.clone(),
        key: key.clone(),
        container,
        sigterm: term_rx,
    };
    let running = Running::new(&sim);
    let program = program_for(&sim, &pod);
    let mut proc = tokio::spawn(async move {
        let _running = running;
        run_program(program, ctx).await
    });
    let mut kill_at: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let stop = loop {
        let kill_timer = async {
            match kill_at.as_mut() {
                Some(t) => t.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            res = &mut proc => {
                break Some(match res {
                    Ok(code) => Stop { exit_code: code, reason: if code == 0 { "Completed" } else { "Error" }, signal: None },
                    Err(_) => Stop { exit_code: 2, reason: "Error", signal: None },
                });
            }
            _ = kill_timer => {
                proc.abort();
                break Some(Stop { exit_code: 137, reason: "Error", signal: Some(9) });
            }
            sig = rx.recv() => match sig {
                Some(PodSignal::Term { grace }) => {
                    let _ = term_tx.send(true);
                    if kill_at.is_none() {
                        kill_at = Some(Box::pin(tokio::time::sleep(sim.clock.real(grace))));
                    }
                }
                Some(PodSignal::Kill { oom }) => {
                    proc.abort();
                    break Some(Stop { exit_code: 137, reason: if oom { "OOMKilled" } else { "Error" }, signal: Some(9) });
                }
                Some(PodSignal::Vanish) | None => {
                    proc.abort();
                    break None;
                }
            }
        }
    };
    // A killed program has stopped for good before its pod says so: nothing
    // it does can follow the terminated status (or the pod's disappearance).
    if !proc.is_finished() {
        let _ = proc.await;
    }
    unregister(&sim, &key);
    let Some(stop) = stop else {
        return; // vanished: no status to write
    };
    let finished = k8s_time(sim.clock.now());
    let Ok(pod) = sim.store.update(&key, |p| {
        mark_terminated(p, &stop, &started, &finished);
        Ok(true)
    }) else {
        return;
    };
    if deleting(&pod) {
        let _ = sim.store.remove(&key);
    }
}

fn container_id(pod: &str, c: &str) -> String {
    format!("containerd://{pod}-{c}")
}

fn mark_running(p: &mut Value, started: &str, pod_name: &str) {
    let statuses: Vec<Value> = p["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let n = c["name"].as_str().unwrap_or("");
                    json!({
                        "name": n, "image": c["image"], "imageID": format!("{}@sha256:0", c["image"].as_str().unwrap_or("")),
                        "containerID": container_id(pod_name, n), "ready": true, "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": started}},
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut conds = vec![];
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        conds.push(json!({"type": t, "status": "True", "lastTransitionTime": started}));
    }
    keep_disruption(p, &mut conds);
    let qos = p["status"]["qosClass"].clone();
    p["status"] = json!({
        "phase": "Running", "hostIP": "10.0.0.1", "podIP": pod_ip(pod_name), "podIPs": [{"ip": pod_ip(pod_name)}],
        "startTime": started, "containerStatuses": statuses, "conditions": conds, "qosClass": qos,
    });
}

fn keep_disruption(p: &Value, conds: &mut Vec<Value>) {
    if condition_true(p, "DisruptionTarget")
        && let Some(c) = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget"))
    {
        conds.push(c.clone());
    }
}

/// A stable fake IP per pod name.
fn pod_ip(name: &str) -> String {
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!("10.244.{}.{}", (h >> 8) % 250 + 1, h % 250 + 2)
}

fn mark_terminated(p: &mut Value, stop: &Stop, started: &str, finished: &str) {
    let name = objects::name(p).to_string();
    let mut terminated = json!({
        "exitCode": stop.exit_code, "reason": stop.reason, "startedAt": started, "finishedAt": finished,
    });
    if let Some(s) = stop.signal {
        terminated["signal"] = json!(s);
    }
    if let Some(cs) = p["status"]["containerStatuses"].as_array_mut() {
        for c in cs {
            let n = c["name"].as_str().unwrap_or("").to_string();
            let mut t = terminated.clone();
            t["containerID"] = json!(container_id(&name, &n));
            c["state"] = json!({"terminated": t});
            c["ready"] = json!(false);
            c["started"] = json!(false);
        }
    }
    let phase = if stop.exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    };
    p["status"]["phase"] = json!(phase);
    if let Some(cs) = p["status"]["conditions"].as_array_mut() {
        for c in cs {
            if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                c["status"] = json!("False");
                c["reason"] = json!("PodCompleted");
                c["lastTransitionTime"] = json!(finished);
            }
        }
    }
}
