//! The pod status the kubelet writes, as pure functions over the pod JSON
//! (pkg/kubelet/kubelet_pods.go `generateAPIPodStatus`, the status
//! manager's merge): the kubelet owns the `PodReadyToStartContainers`,
//! `Initialized`, `ContainersReady` and `Ready` conditions and keeps every
//! other condition (`PodScheduled`, `DisruptionTarget`) as it finds it.

use crate::objects;
use serde_json::{Value, json};

/// Conditions the kubelet owns.
const KUBELET_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// Waiting reason of a container being created.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Terminated reason of a container the kubelet lost track of.
pub const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Its message when the pod is terminal.
pub const STATUS_UNKNOWN_MESSAGE: &str =
    "The container could not be located when the pod was terminated";

/// How a container stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// Exit code.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `ContainerStatusUnknown`.
    pub reason: &'static str,
    /// A message (only `ContainerStatusUnknown` has one).
    pub message: Option<&'static str>,
}

impl Stop {
    /// A program that exited with `code` on its own or after SIGTERM.
    pub fn exited(code: i32) -> Self {
        Stop {
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" },
            message: None,
        }
    }
    /// SIGKILL after the grace period: `Error`, 137.
    pub fn killed() -> Self {
        Stop {
            exit_code: 137,
            reason: "Error",
            message: None,
        }
    }
    /// The kernel's OOM killer: `OOMKilled`, 137.
    pub fn oom() -> Self {
        Stop {
            exit_code: 137,
            reason: "OOMKilled",
            message: None,
        }
    }
    /// A container the kubelet can no longer find: 137, `ContainerStatusUnknown`.
    pub fn unknown() -> Self {
        Stop {
            exit_code: 137,
            reason: STATUS_UNKNOWN,
            message: Some(STATUS_UNKNOWN_MESSAGE),
        }
    }
}

/// The kubelet's eviction (node pressure) as recorded on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// `status.message` and the DisruptionTarget message.
    pub message: String,
}

fn container_names(p: &Value) -> Vec<String> {
    p["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn image_of(p: &Value, container: &str) -> Value {
    p["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .map(|c| c["image"].clone())
        .unwrap_or(Value::Null)
}

/// The containerd ID of a pod's container.
pub fn container_id(pod: &str, c: &str) -> String {
    format!("containerd://{pod}-{c}")
}

fn cond(
    kind: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
    at: &str,
) -> Value {
    let mut c = json!({"type": kind, "status": if status { "True" } else { "False" },
        "lastProbeTime": null, "lastTransitionTime": at});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// Replaces the kubelet-owned conditions, keeping the others. A condition
/// whose status does not change keeps its lastTransitionTime.
fn set_kubelet_conditions(p: &mut Value, new: Vec<Value>) {
    let old: Vec<Value> = p["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for mut c in new {
        if let Some(prev) = old.iter().find(|o| o["type"] == c["type"])
            && prev["status"] == c["status"]
        {
            c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
        }
        out.push(c);
    }
    for o in old {
        let t = o["type"].as_str().unwrap_or("");
        if !KUBELET_CONDITIONS.contains(&t) {
            out.push(o);
        }
    }
    objects::ensure_object(&mut p["status"]).insert("conditions".into(), json!(out));
}

fn unready_message(names: &[String]) -> String {
    format!("containers with unready status: [{}]", names.join(" "))
}

/// The pod IP the sim gives a pod on the node with this index.
pub fn pod_ip(node_index: usize, name: &str) -> String {
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!("10.244.{}.{}", node_index % 250, h % 250 + 2)
}

/// A pod whose containers are not running yet: every container waits with
/// `waiting` (reason, message). `sandbox` says whether the pod sandbox is
/// up (volumes mounted). Returns whether anything changed.
pub fn mark_waiting(
    p: &mut Value,
    waiting: (&str, Option<&str>),
    sandbox: bool,
    host_ip: &str,
    now: &str,
) -> bool {
    let before = p["status"].clone();
    let names = container_names(p);
    let statuses: Vec<Value> = names
        .iter()
        .map(|n| {
            let mut w = json!({"reason": waiting.0});
            if let Some(m) = waiting.1 {
                w["message"] = json!(m);
            }
            json!({"name": n, "image": image_of(p, n), "imageID": "", "ready": false,
                "restartCount": 0, "started": false, "state": {"waiting": w}})
        })
        .collect();
    let status = objects::ensure_object(&mut p["status"]);
    status.insert("phase".into(), json!("Pending"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    if status.get("startTime").is_none_or(Value::is_null) {
        status.insert("startTime".into(), json!(now));
    }
    status.insert("containerStatuses".into(), json!(statuses));
    let msg = unready_message(&names);
    set_kubelet_conditions(
        p,
        vec![
            cond("PodReadyToStartContainers", sandbox, None, None, now),
            cond("Initialized", true, None, None, now),
            cond(
                "Ready",
                false,
                Some("ContainersNotReady"),
                Some(msg.clone()),
                now,
            ),
            cond(
                "ContainersReady",
                false,
                Some("ContainersNotReady"),
                Some(msg),
                now,
            ),
        ],
    );
    p["status"] != before
}

/// Every container runs (and is ready) since `started`.
pub fn mark_running(p: &mut Value, started: &str, host_ip: &str, pod_ip: &str) {
    let pod_name = objects::name(p).to_string();
    let statuses: Vec<Value> = container_names(p)
        .iter()
        .map(|n| {
            let image = image_of(p, n);
            json!({
                "name": n, "image": image, "imageID": format!("{}@sha256:0", image.as_str().unwrap_or("")),
                "containerID": container_id(&pod_name, n), "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    let status = objects::ensure_object(&mut p["status"]);
    status.insert("phase".into(), json!("Running"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("podIP".into(), json!(pod_ip));
    status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    if status.get("startTime").is_none_or(Value::is_null) {
        status.insert("startTime".into(), json!(started));
    }
    status.insert("containerStatuses".into(), json!(statuses));
    set_kubelet_conditions(
        p,
        vec![
            cond("PodReadyToStartContainers", true, None, None, started),
            cond("Initialized", true, None, None, started),
            cond("Ready", true, None, None, started),
            cond("ContainersReady", true, None, None, started),
        ],
    );
}

/// The pod is terminal: every container that has not terminated yet stops
/// with `stop`; the phase follows the exit codes (restartPolicy Never); an
/// eviction records `Evicted` and its DisruptionTarget condition.
pub fn mark_terminated(p: &mut Value, stop: &Stop, eviction: Option<&Eviction>, finished: &str) {
    let pod_name = objects::name(p).to_string();
    let names = container_names(p);
    let old: Vec<Value> = p["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut all_zero = true;
    let statuses: Vec<Value> = names
        .iter()
        .map(|n| {
            let prev = old.iter().find(|c| c["name"] == n.as_str());
            if let Some(t) = prev.and_then(|c| c["state"]["terminated"].as_object()) {
                all_zero &= t.get("exitCode").and_then(Value::as_i64) == Some(0);
                return prev.cloned().unwrap_or(Value::Null);
            }
            let started = prev.and_then(|c| c["state"]["running"]["startedAt"].as_str());
            let mut t = json!({"exitCode": stop.exit_code, "reason": stop.reason});
            if let Some(m) = stop.message {
                t["message"] = json!(m);
            }
            if let Some(s) = started {
                t["startedAt"] = json!(s);
                t["finishedAt"] = json!(finished);
                t["containerID"] = json!(container_id(&pod_name, n));
            }
            all_zero &= stop.exit_code == 0;
            let mut c = prev.cloned().unwrap_or_else(
                || json!({"name": n, "image": image_of(p, n), "imageID": "", "restartCount": 0}),
            );
            c["state"] = json!({"terminated": t});
            c["ready"] = json!(false);
            c["started"] = json!(false);
            c
        })
        .collect();
    let phase = if all_zero && eviction.is_none() {
        "Succeeded"
    } else {
        "Failed"
    };
    let reason = if phase == "Succeeded" {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    let status = objects::ensure_object(&mut p["status"]);
    status.insert("phase".into(), json!(phase));
    status.insert("containerStatuses".into(), json!(statuses));
    if let Some(e) = eviction {
        status.insert("reason".into(), json!("Evicted"));
        status.insert("message".into(), json!(e.message));
    }
    if status.get("startTime").is_none_or(Value::is_null) {
        status.insert("startTime".into(), json!(finished));
    }
    set_kubelet_conditions(
        p,
        vec![
            cond("PodReadyToStartContainers", false, None, None, finished),
            cond("Initialized", true, None, None, finished),
            cond("Ready", false, Some(reason), None, finished),
            cond("ContainersReady", false, Some(reason), None, finished),
        ],
    );
    if let Some(e) = eviction {
        set_condition(
            p,
            "DisruptionTarget",
            "TerminationByKubelet",
            &e.message,
            finished,
        );
    }
}

/// Adds or updates a true condition the way `UpdatePodCondition` does: a
/// condition with the same status, reason and message is left as it is.
/// Returns whether anything changed.
pub fn set_condition(p: &mut Value, kind: &str, reason: &str, message: &str, now: &str) -> bool {
    let status = objects::ensure_object(&mut p["status"]);
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(arr) = list.as_array_mut() else {
        return false;
    };
    let new = json!({"type": kind, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": null, "lastTransitionTime": now});
    match arr.iter_mut().find(|c| c["type"] == kind) {
        Some(c) if c["status"] == "True" && c["reason"] == reason && c["message"] == message => {
            false
        }
        Some(c) => {
            let keep_time = c["status"] == "True";
            let t = c["lastTransitionTime"].clone();
            *c = new;
            if keep_time {
                c["lastTransitionTime"] = t;
            }
            true
        }
        None => {
            arr.push(new);
            true
        }
    }
}

/// Sets the pod's Ready condition to False (the node controller's
/// MarkPodsNotReady). Returns whether it changed.
pub fn mark_not_ready(p: &mut Value, now: &str) -> bool {
    let Some(arr) = p["status"]["conditions"].as_array_mut() else {
        return false;
    };
    match arr.iter_mut().find(|c| c["type"] == "Ready") {
        Some(c) if c["status"] != "False" => {
            c["status"] = json!("False");
            c["lastTransitionTime"] = json!(now);
            true
        }
        _ => false,
    }
}

/// Whether a pod is in a terminal phase.
pub fn terminal(p: &Value) -> bool {
    matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "driver", "image": "d:1"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}})
    }

    #[test]
    fn waiting_running_terminated_keep_foreign_conditions() {
        let mut p = pod();
        assert!(mark_waiting(
            &mut p,
            ("CreateContainerConfigError", Some("secret \"x\" not found")),
            true,
            "10.0.0.1",
            "t1"
        ));
        assert!(!mark_waiting(
            &mut p,
            ("CreateContainerConfigError", Some("secret \"x\" not found")),
            true,
            "10.0.0.1",
            "t2"
        ));
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        assert_eq!(w["reason"], "CreateContainerConfigError");
        assert_eq!(w["message"], "secret \"x\" not found");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["message"], "containers with unready status: [driver]");
        mark_running(&mut p, "t3", "10.0.0.1", "10.244.1.7");
        assert_eq!(p["status"]["phase"], "Running");
        mark_terminated(&mut p, &Stop::oom(), None, "t4");
        let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["reason"].as_str(), t["exitCode"].as_i64()),
            (Some("OOMKilled"), Some(137))
        );
        assert!(t.get("signal").is_none(), "the kubelet never sets signal");
        assert_eq!(t["startedAt"], "t3");
        assert_eq!(p["status"]["phase"], "Failed");
        let types: Vec<&str> = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert!(types.contains(&"PodScheduled") && types.contains(&"DisruptionTarget"));
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["reason"], "PodFailed");
    }

    #[test]
    fn a_pod_that_never_ran_terminates_with_status_unknown() {
        let mut p = pod();
        mark_waiting(&mut p, (CONTAINER_CREATING, None), false, "10.0.0.1", "t1");
        mark_terminated(&mut p, &Stop::unknown(), None, "t2");
        let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(t["reason"], STATUS_UNKNOWN);
        assert_eq!(t["message"], STATUS_UNKNOWN_MESSAGE);
        assert_eq!(t["exitCode"], 137);
        assert!(t.get("startedAt").is_none());
    }

    #[test]
    fn kubelet_eviction_keeps_the_pod_failed_and_evicted() {
        let mut p = pod();
        mark_running(&mut p, "t1", "10.0.0.1", "10.244.1.7");
        let e = Eviction {
            message: "The node was low on resource: memory. ".into(),
        };
        mark_terminated(&mut p, &Stop::exited(143), Some(&e), "t2");
        assert_eq!(p["status"]["phase"], "Failed");
        assert_eq!(p["status"]["reason"], "Evicted");
        let dt = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")
            .unwrap()
            .clone();
        assert_eq!(dt["reason"], "TerminationByKubelet");
        assert_eq!(dt["message"], e.message);
    }

    #[test]
    fn succeeded_only_when_every_exit_is_zero() {
        let mut p = pod();
        mark_running(&mut p, "t1", "h", "i");
        mark_terminated(&mut p, &Stop::exited(0), None, "t2");
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }
}
