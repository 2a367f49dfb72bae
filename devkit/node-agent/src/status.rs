//! The pod status the kubelet writes, as pure functions over the pod JSON.
//!
//! Upstream (v1.36): `generateAPIPodStatus` and `convertToAPIContainerStatuses`
//! (pkg/kubelet/kubelet_pods.go) build the status; the conditions come from
//! pkg/kubelet/status/generate.go; the status manager
//! (pkg/kubelet/status/status_manager.go) keeps each condition's
//! `lastTransitionTime` while its status holds, keeps `startTime`, merges
//! with the API's status (`mergePodStatus`: conditions the kubelet does not
//! own stay as the API has them, `DisruptionTarget` is added only with the
//! terminal phase) and normalizes times to whole seconds; `TerminatePod`
//! gives containers that never ran `ContainerStatusUnknown`, exit 137.
//! [`patch`] then builds the strategic merge patch `PatchPodStatus` sends.

use crate::smp;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Conditions the kubelet owns (pkg/kubelet/types/pod_status.go
/// `PodConditionsByKubelet`, plus `PodReadyToStartContainers`, whose gate is
/// on by default).
pub const KUBELET_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodResizeInProgress",
    "PodResizePending",
    "PodReadyToStartContainers",
];

/// Waiting reason of a container being created.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of a container whose config cannot be made (a missing
/// Secret in its env).
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
/// Terminated reason of a container the kubelet lost track of.
pub const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Its message when the pod is terminated (`TerminatePod`).
pub const STATUS_UNKNOWN_MESSAGE: &str =
    "The container could not be located when the pod was terminated";

/// A container's state as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Not running yet.
    Waiting {
        /// `ContainerCreating`, `ErrImagePull`, ...
        reason: String,
        /// Why, when there is more to say.
        message: Option<String>,
        /// Whether the runtime has created the container (then it has an
        /// ID and its resources are reported).
        created: bool,
    },
    /// Running since `started_at`.
    Running {
        /// RFC 3339, whole seconds.
        started_at: String,
    },
    /// Exited.
    Terminated(Stop),
}

/// How a container stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// Exit code.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `ContainerStatusUnknown`.
    pub reason: String,
    /// A message (`ContainerStatusUnknown` has one).
    pub message: Option<String>,
    /// When it ran: (startedAt, finishedAt); `None` for a container that
    /// never started.
    pub ran: Option<(String, String)>,
}

impl Stop {
    /// A program that exited with `code` (on its own or after SIGTERM).
    pub fn exited(code: i32, started: &str, finished: &str) -> Self {
        Stop {
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            ran: Some((started.into(), finished.into())),
        }
    }
    /// SIGKILL at the end of the grace period: `Error`, 137.
    pub fn killed(started: &str, finished: &str) -> Self {
        Stop {
            reason: "Error".into(),
            ..Stop::exited(137, started, finished)
        }
    }
    /// The kernel's OOM killer: `OOMKilled`, 137.
    pub fn oom(started: &str, finished: &str) -> Self {
        Stop {
            reason: "OOMKilled".into(),
            ..Stop::exited(137, started, finished)
        }
    }
    /// A container that was running when its machine went down, as the
    /// runtime reports it once back: containerd, restarted, finds the task
    /// dead and records exit 255 (`unknownExitCode`) with reason `Unknown`
    /// and no message (when it saw the task die it has no reason, and the
    /// kubelet says `Error`: which one varies between runs on a real node).
    pub fn lost(started: &str, finished: &str) -> Self {
        Stop {
            reason: "Unknown".into(),
            ..Stop::exited(255, started, finished)
        }
    }
    /// A container that never ran or that the kubelet can no longer find.
    pub fn unknown() -> Self {
        Stop {
            exit_code: 137,
            reason: STATUS_UNKNOWN.into(),
            message: Some(STATUS_UNKNOWN_MESSAGE.into()),
            ran: None,
        }
    }
}

/// What the kubelet knows of one pod: the input of [`generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// The node's IP.
    pub host_ip: String,
    /// The pod's IP, once its sandbox exists.
    pub pod_ip: Option<String>,
    /// The sandbox is up (`PodReadyToStartContainers`).
    pub sandbox_ready: bool,
    /// Every container's state, in spec order (containers missing here
    /// are reported waiting `ContainerCreating`).
    pub containers: Vec<(String, ContainerState)>,
    /// A node-pressure eviction: its message (phase `Failed`, reason
    /// `Evicted`, `DisruptionTarget` `TerminationByKubelet`).
    pub eviction: Option<String>,
    /// The eviction was for a local-storage limit: no `DisruptionTarget`
    /// (eviction_manager.go `localStorageEviction` calls `evictPod` without
    /// a condition; only node-pressure evictions add one).
    pub storage_eviction: bool,
    /// What the prober and the restarts add for containers run as local
    /// binaries (by name); a container without an entry is ready while
    /// it runs and never restarted.
    pub probed: std::collections::BTreeMap<String, Probed>,
    /// The pod's containers are restarted when they exit (restartPolicy
    /// Always, the pod not stopping): it stays `Running` between restarts.
    pub restarting: bool,
}

/// A container's readiness, restarts and last termination.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Probed {
    /// The readiness probe's verdict (true without a probe).
    pub ready: bool,
    /// How many times it was restarted.
    pub restart_count: u32,
    /// How its previous run ended (`lastState.terminated`).
    pub last: Option<Stop>,
}

impl Local {
    /// A pod just admitted: every container waits `ContainerCreating`.
    pub fn admitted(pod: &Value, host_ip: &str) -> Self {
        Local {
            host_ip: host_ip.into(),
            pod_ip: None,
            sandbox_ready: false,
            containers: container_names(pod)
                .into_iter()
                .map(|n| (n, waiting(CONTAINER_CREATING, None)))
                .collect(),
            eviction: None,
            storage_eviction: false,
            probed: Default::default(),
            restarting: false,
        }
    }

    /// Sets every container's state.
    pub fn set_all(&mut self, state: ContainerState) {
        for (_, s) in &mut self.containers {
            *s = state.clone();
        }
    }

    /// Every container not terminated yet stops with `stop` (running ones
    /// keep their start time in `stop.ran` when the caller gave one).
    pub fn terminate(&mut self, stop: &Stop) {
        for (_, s) in &mut self.containers {
            if !matches!(s, ContainerState::Terminated(_)) {
                *s = ContainerState::Terminated(stop.clone());
            }
        }
    }

    /// Whether every container has terminated.
    pub fn finished(&self) -> bool {
        self.containers
            .iter()
            .all(|(_, s)| matches!(s, ContainerState::Terminated(_)))
    }
}

/// A waiting state before the runtime created the container.
pub fn waiting(reason: &str, message: Option<&str>) -> ContainerState {
    ContainerState::Waiting {
        reason: reason.into(),
        message: message.map(str::to_string),
        created: false,
    }
}

/// The names of the pod's (regular) containers, in spec order.
pub fn container_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

fn container_spec<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

fn hex_digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The container ID the runtime gives a pod's container (containerd's
/// format: 64 hex digits).
pub fn container_id(pod_uid: &str, container: &str) -> String {
    format!("containerd://{}", hex_digest(&[pod_uid, container]))
}

/// The digested image reference of a pulled image (`imageID`).
pub fn image_id(image: &str) -> String {
    let repo = image.split(['@']).next().unwrap_or(image);
    let repo = match repo.rfind(':') {
        Some(i) if !repo[i..].contains('/') => &repo[..i],
        _ => repo,
    };
    format!("{repo}@sha256:{}", hex_digest(&[image]))
}

/// Whether a pod is in a terminal phase.
pub fn terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn container_status(
    pod: &Value,
    name: &str,
    state: &ContainerState,
    probed: Option<&Probed>,
) -> Value {
    let spec = container_spec(pod, name).cloned().unwrap_or(Value::Null);
    let image = spec["image"].clone();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let mut st = Map::new();
    let created = match state {
        ContainerState::Waiting {
            reason,
            message,
            created,
        } => {
            let mut w = json!({"reason": reason});
            if let Some(m) = message {
                w["message"] = json!(m);
            }
            st.insert("waiting".into(), w);
            *created
        }
        ContainerState::Running { started_at } => {
            st.insert("running".into(), json!({"startedAt": started_at}));
            true
        }
        ContainerState::Terminated(stop) => {
            st.insert("terminated".into(), terminated(uid, name, stop));
            stop.ran.is_some()
        }
    };
    let running = matches!(state, ContainerState::Running { .. });
    let last = match probed.and_then(|p| p.last.as_ref()) {
        Some(stop) => json!({"terminated": terminated(uid, name, stop)}),
        None => json!({}),
    };
    let mut c = json!({
        "name": name,
        "state": Value::Object(st),
        "lastState": last,
        // Without probes the prober reports a running container ready and
        // started, anything else neither; with a readiness probe, its verdict.
        "ready": running && probed.is_none_or(|p| p.ready),
        "started": running,
        "restartCount": probed.map_or(0, |p| p.restart_count),
        "image": image,
        "imageID": "",
    });
    // RecursiveReadOnlyMounts (GA): every container reports its mounts.
    let mounts: Vec<Value> = spec["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let mut s = json!({"name": m["name"], "mountPath": m["mountPath"]});
            if m["readOnly"] == true {
                s["readOnly"] = json!(true);
                // The runtime here supports recursive read-only mounts.
                let rro = matches!(
                    m["recursiveReadOnly"].as_str(),
                    Some("Enabled" | "IfPossible")
                );
                s["recursiveReadOnly"] = json!(if rro { "Enabled" } else { "Disabled" });
            }
            s
        })
        .collect();
    if !mounts.is_empty() {
        c["volumeMounts"] = json!(mounts);
    }
    if created {
        c["imageID"] = json!(image_id(image.as_str().unwrap_or("")));
        c["containerID"] = json!(container_id(uid, name));
        // In-place resize (GA): a created container reports its allocated
        // requests and its resources.
        let resources = &spec["resources"];
        if resources.as_object().is_some_and(|r| !r.is_empty()) {
            c["resources"] = resources.clone();
        }
        if let Some(req) = resources["requests"].as_object().filter(|r| !r.is_empty()) {
            c["allocatedResources"] = Value::Object(req.clone());
        }
    }
    c
}

/// A `terminated` container state.
fn terminated(uid: &str, name: &str, stop: &Stop) -> Value {
    let mut t = json!({"exitCode": stop.exit_code, "reason": stop.reason,
        "startedAt": null, "finishedAt": null});
    if let Some(m) = &stop.message {
        t["message"] = json!(m);
    }
    if let Some((s, f)) = &stop.ran {
        t["startedAt"] = json!(s);
        t["finishedAt"] = json!(f);
        t["containerID"] = json!(container_id(uid, name));
    }
    t
}

/// Whether a container counts as ready: running, and its readiness probe
/// (if any) passed.
fn container_ready(local: &Local, name: &str) -> bool {
    local.containers.iter().any(|(c, s)| {
        c == name
            && matches!(s, ContainerState::Running { .. })
            && local.probed.get(name).is_none_or(|p| p.ready)
    })
}

/// The pod phase from the container states (restartPolicy Never, or a
/// pod that is finishing: the kubelet here never restarts a container).
fn phase(local: &Local) -> &'static str {
    if local.eviction.is_some() && local.finished() {
        return "Failed";
    }
    if local.restarting && !local.probed.is_empty() {
        // restartPolicy Always: a container that exited is started again.
        return "Running";
    }
    let states = || local.containers.iter().map(|(_, s)| s);
    if states().any(|s| matches!(s, ContainerState::Running { .. })) {
        return "Running";
    }
    if states().any(|s| matches!(s, ContainerState::Waiting { .. })) || local.containers.is_empty()
    {
        return "Pending";
    }
    if states().all(|s| matches!(s, ContainerState::Terminated(t) if t.exit_code == 0)) {
        "Succeeded"
    } else {
        "Failed"
    }
}

fn cond(kind: &str, status: bool, reason: Option<&str>, message: Option<String>) -> Value {
    let mut c = json!({"type": kind, "status": if status { "True" } else { "False" },
        "lastProbeTime": null});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// The kubelet's own conditions in the order `generateAPIPodStatus`
/// appends them (generate.go).
fn kubelet_conditions(pod: &Value, local: &Local, phase: &str) -> Vec<Value> {
    let names = container_names(pod);
    let ready_to_start = local.sandbox_ready && !local.finished();
    let initialized = if phase == "Succeeded" {
        cond("Initialized", true, Some("PodCompleted"), None)
    } else {
        cond("Initialized", true, None, None)
    };
    let containers_ready = match phase {
        "Succeeded" => cond("ContainersReady", false, Some("PodCompleted"), None),
        "Failed" => cond("ContainersReady", false, Some("PodFailed"), None),
        _ => {
            let unready: Vec<&str> = names
                .iter()
                .filter(|n| !container_ready(local, n))
                .map(String::as_str)
                .collect();
            if unready.is_empty() {
                cond("ContainersReady", true, None, None)
            } else {
                cond(
                    "ContainersReady",
                    false,
                    Some("ContainersNotReady"),
                    Some(format!(
                        "containers with unready status: [{}]",
                        unready.join(" ")
                    )),
                )
            }
        }
    };
    let mut ready = containers_ready.clone();
    ready["type"] = json!("Ready");
    if ready["status"] == "True" {
        let conditions = pod["status"]["conditions"].as_array();
        let unmet: Vec<String> = pod["spec"]["readinessGates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["conditionType"].as_str())
            .filter_map(
                |t| match conditions.into_iter().flatten().find(|c| c["type"] == t) {
                    None => Some(format!(
                        "corresponding condition of pod readiness gate \"{t}\" does not exist."
                    )),
                    Some(c) if c["status"] != "True" => Some(format!(
                        "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                        c["status"].as_str().unwrap_or("")
                    )),
                    Some(_) => None,
                },
            )
            .collect();
        if !unmet.is_empty() {
            ready = cond(
                "Ready",
                false,
                Some("ReadinessGatesNotReady"),
                Some(unmet.join(", ")),
            );
        }
    }
    vec![
        cond("PodReadyToStartContainers", ready_to_start, None, None),
        initialized,
        ready,
        containers_ready,
        cond("PodScheduled", true, None, None),
    ]
}

/// The status the kubelet writes for `pod` (as the API has it now) from
/// what it knows (`local`), at `now` (RFC 3339, whole seconds): the API's
/// status with every kubelet-owned field replaced and the conditions
/// merged.
pub fn generate(pod: &Value, local: &Local, now: &str) -> Value {
    let old = &pod["status"];
    let mut status = old.as_object().cloned().unwrap_or_default();
    let phase = phase(local);
    let generation = pod["metadata"]["generation"].as_i64().unwrap_or(0);
    let old_conditions: Vec<Value> = old["conditions"].as_array().cloned().unwrap_or_default();
    let mut conditions: Vec<Value> = old_conditions
        .iter()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c["type"].as_str().unwrap_or("")))
        .cloned()
        .collect();
    let terminal_now = matches!(phase, "Succeeded" | "Failed");
    if let Some(message) = local
        .eviction
        .as_ref()
        .filter(|_| terminal_now && !local.storage_eviction)
    {
        let dt = json!({"type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
            "reason": "TerminationByKubelet", "message": message});
        match conditions
            .iter_mut()
            .find(|c| c["type"] == "DisruptionTarget")
        {
            Some(c) => *c = dt,
            None => conditions.push(dt),
        }
    }
    conditions.extend(kubelet_conditions(pod, local, phase));
    for c in &mut conditions {
        let kind = c["type"].as_str().unwrap_or("").to_string();
        let owned = KUBELET_CONDITIONS.contains(&kind.as_str()) || kind == "DisruptionTarget";
        if !owned || c.get("lastTransitionTime").is_some_and(|t| !t.is_null()) {
            continue;
        }
        let prev = old_conditions.iter().find(|o| o["type"] == kind.as_str());
        c["lastTransitionTime"] = match prev {
            Some(p) if p["status"] == c["status"] => p["lastTransitionTime"].clone(),
            _ => json!(now),
        };
        if generation > 0 {
            c["observedGeneration"] = json!(generation);
        }
    }
    // A phase unchanged keeps its reason and message; an eviction sets them.
    if old["phase"].as_str() != Some(phase) {
        status.remove("reason");
        status.remove("message");
    }
    if let Some(message) = local.eviction.as_ref().filter(|_| terminal_now) {
        status.insert("reason".into(), json!("Evicted"));
        status.insert("message".into(), json!(message));
    }
    status.insert("phase".into(), json!(phase));
    status.insert("conditions".into(), json!(conditions));
    status.insert("hostIP".into(), json!(local.host_ip));
    status.insert("hostIPs".into(), json!([{"ip": local.host_ip}]));
    if let Some(ip) = &local.pod_ip {
        status.insert("podIP".into(), json!(ip));
        status.insert("podIPs".into(), json!([{"ip": ip}]));
    }
    if old["startTime"].as_str().is_none() {
        status.insert("startTime".into(), json!(now));
    }
    if generation > 0 {
        let observed = old["observedGeneration"]
            .as_i64()
            .unwrap_or(0)
            .max(generation);
        status.insert("observedGeneration".into(), json!(observed));
    }
    let names = container_names(pod);
    let statuses: Vec<Value> = names
        .iter()
        .map(|n| {
            let state = local
                .containers
                .iter()
                .find(|(c, _)| c == n)
                .map(|(_, s)| s.clone())
                .unwrap_or_else(|| waiting(CONTAINER_CREATING, None));
            container_status(pod, n, &state, local.probed.get(n.as_str()))
        })
        .collect();
    status.insert("containerStatuses".into(), json!(statuses));
    Value::Object(status)
}

/// The strategic merge patch of the status subresource from the API's
/// status to `new`, with the pod's UID as a precondition
/// (`preparePatchBytesForPodStatus`); `None` when nothing changed.
pub fn patch(pod: &Value, new: &Value) -> Option<Value> {
    let old = json!({"status": pod["status"]});
    let new_obj = json!({"status": new});
    let mut p = smp::two_way(&old, &new_obj, smp::pod_keys);
    if p.as_object().is_none_or(|m| m.is_empty()) {
        return None;
    }
    p["metadata"] = json!({"uid": pod["metadata"]["uid"]});
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "uid": "u-1", "generation": 1},
            "spec": {"containers": [{"name": "driver", "image": "tcab/driver:1",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "t0"}]}})
    }

    fn cond_of<'a>(s: &'a Value, kind: &str) -> &'a Value {
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn admitted_pod_waits_creating_and_keeps_scheduled_time() {
        let p = pod();
        let s = generate(&p, &Local::admitted(&p, "127.0.0.1"), "t1");
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["qosClass"], "Burstable");
        assert_eq!(s["startTime"], "t1");
        assert_eq!(s["observedGeneration"], 1);
        let c = &s["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], CONTAINER_CREATING);
        assert_eq!(
            (c["ready"].as_bool(), c["started"].as_bool()),
            (Some(false), Some(false))
        );
        assert!(c.get("containerID").is_none() && c.get("resources").is_none());
        assert_eq!(cond_of(&s, "PodScheduled")["lastTransitionTime"], "t0");
        assert_eq!(cond_of(&s, "PodReadyToStartContainers")["status"], "False");
        assert_eq!(
            cond_of(&s, "Ready")["message"],
            "containers with unready status: [driver]"
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
    }

    #[test]
    fn probed_containers_report_readiness_restarts_and_last_state() {
        let p = pod();
        let name = container_names(&p)[0].clone();
        let mut l = Local::admitted(&p, "127.0.0.1");
        l.sandbox_ready = true;
        l.restarting = true;
        l.set_all(ContainerState::Running {
            started_at: "t2".into(),
        });
        l.probed.insert(name.clone(), Probed::default());
        let s = generate(&p, &l, "t2");
        assert_eq!(
            s["containerStatuses"][0]["ready"], false,
            "not ready before its probe"
        );
        assert_eq!(cond_of(&s, "Ready")["status"], "False");
        assert_eq!(
            cond_of(&s, "ContainersReady")["reason"],
            "ContainersNotReady"
        );
        // Killed for its liveness probe, restarted.
        l.set_all(ContainerState::Terminated(Stop::exited(137, "t2", "t3")));
        let s = generate(&p, &l, "t3");
        assert_eq!(
            s["phase"], "Running",
            "restartPolicy Always keeps it Running"
        );
        l.probed.insert(
            name,
            Probed {
                ready: true,
                restart_count: 1,
                last: Some(Stop::exited(137, "t2", "t3")),
            },
        );
        l.set_all(ContainerState::Running {
            started_at: "t4".into(),
        });
        let s = generate(&p, &l, "t4");
        let c = &s["containerStatuses"][0];
        assert_eq!(
            (c["ready"].as_bool(), c["restartCount"].as_i64()),
            (Some(true), Some(1))
        );
        let last = &c["lastState"]["terminated"];
        assert_eq!(
            (
                last["exitCode"].as_i64(),
                last["reason"].as_str(),
                last["finishedAt"].as_str()
            ),
            (Some(137), Some("Error"), Some("t3"))
        );
        assert_eq!(cond_of(&s, "Ready")["status"], "True");
    }

    #[test]
    fn running_then_oom_killed() {
        let mut p = pod();
        let mut l = Local::admitted(&p, "127.0.0.1");
        l.pod_ip = Some("10.244.0.5".into());
        l.sandbox_ready = true;
        l.set_all(ContainerState::Running {
            started_at: "t2".into(),
        });
        let s = generate(&p, &l, "t2");
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.244.0.5");
        let c = &s["containerStatuses"][0];
        assert_eq!(c["ready"], true);
        assert_eq!(c["allocatedResources"]["memory"], "1Gi");
        assert!(
            c["containerID"]
                .as_str()
                .unwrap()
                .starts_with("containerd://")
        );
        assert_eq!(cond_of(&s, "Ready")["status"], "True");
        p["status"] = s;
        l.terminate(&Stop::oom("t2", "t3"));
        let s = generate(&p, &l, "t3");
        assert_eq!(s["phase"], "Failed");
        let t = &s["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["reason"].as_str(), t["exitCode"].as_i64()),
            (Some("OOMKilled"), Some(137))
        );
        assert_eq!(
            (t["startedAt"].as_str(), t["finishedAt"].as_str()),
            (Some("t2"), Some("t3"))
        );
        assert_eq!(cond_of(&s, "Ready")["reason"], "PodFailed");
        assert_eq!(cond_of(&s, "PodReadyToStartContainers")["status"], "False");
        // Initialized kept its transition time.
        assert_eq!(cond_of(&s, "Initialized")["lastTransitionTime"], "t2");
    }

    #[test]
    fn eviction_sets_reason_and_disruption_target_only_when_terminal() {
        let mut p = pod();
        p["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Foreign", "status": "True"}));
        let mut l = Local::admitted(&p, "127.0.0.1");
        l.set_all(ContainerState::Running {
            started_at: "t1".into(),
        });
        l.eviction = Some("The node was low on resource: memory. ".into());
        let s = generate(&p, &l, "t2");
        assert_eq!(s["phase"], "Running");
        assert!(s.get("reason").is_none());
        l.terminate(&Stop::exited(143, "t1", "t3"));
        let s = generate(&p, &l, "t3");
        assert_eq!(
            (s["phase"].as_str(), s["reason"].as_str()),
            (Some("Failed"), Some("Evicted"))
        );
        let dt = cond_of(&s, "DisruptionTarget");
        assert_eq!(dt["reason"], "TerminationByKubelet");
        assert_eq!(dt["lastTransitionTime"], "t3");
        assert_eq!(cond_of(&s, "Foreign")["status"], "True");
        // A local-storage eviction: the same reason and message, no condition.
        l.storage_eviction = true;
        let s = generate(&p, &l, "t3");
        assert_eq!(s["reason"], "Evicted");
        assert!(
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "DisruptionTarget")
        );
    }

    #[test]
    fn a_container_lost_with_its_machine_ends_255_without_a_message() {
        let p = pod();
        let mut l = Local::admitted(&p, "127.0.0.1");
        l.terminate(&Stop::lost("t1", "t2"));
        let s = generate(&p, &l, "t2");
        let t = &s["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(255), Some("Unknown"))
        );
        assert!(t.get("message").is_none());
        // It ran: it has an ID, so its log is served.
        assert!(t["containerID"].is_string() && t["startedAt"] == "t1");
        assert_eq!(s["phase"], "Failed");
    }

    #[test]
    fn never_started_containers_end_status_unknown() {
        let p = pod();
        let mut l = Local::admitted(&p, "127.0.0.1");
        l.terminate(&Stop::unknown());
        let s = generate(&p, &l, "t1");
        let t = &s["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(t["reason"], STATUS_UNKNOWN);
        assert_eq!(t["exitCode"], 137);
        assert!(t["startedAt"].is_null() && t.get("containerID").is_none());
        assert_eq!(s["phase"], "Failed");
    }

    #[test]
    fn the_patch_carries_the_uid_and_only_changes() {
        let p = pod();
        let l = Local::admitted(&p, "127.0.0.1");
        let s = generate(&p, &l, "t1");
        let patch = patch(&p, &s).unwrap();
        assert_eq!(patch["metadata"]["uid"], "u-1");
        assert!(patch["status"].get("qosClass").is_none());
        let mut written = p.clone();
        written["status"] = s.clone();
        assert_eq!(patch_of_same(&written, &l), None);
    }

    fn patch_of_same(p: &Value, l: &Local) -> Option<Value> {
        let s = generate(p, l, "t9");
        patch(p, &s)
    }

    #[test]
    fn image_ids_drop_the_tag() {
        assert!(image_id("tcab/driver:1").starts_with("tcab/driver@sha256:"));
        assert!(image_id("registry:5000/x").starts_with("registry:5000/x@sha256:"));
    }
}
