//! `application/json;as=Table` output, which kubectl asks for to print
//! columns for `get`.

use crate::clock::{SimClock, parse_time};
use crate::objects::{condition_true, deleting};
use crate::store::Kind;
use serde_json::{Value, json};

/// Which part of the object each row carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Reads the `includeObject` query value.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn col(name: &str, ty: &str, format: &str, priority: i32, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "priority": priority, "description": description})
}

fn columns(kind: Kind) -> Value {
    match kind {
        Kind::Job => json!([
            col(
                "Name",
                "string",
                "name",
                0,
                "Name must be unique within a namespace."
            ),
            col("Status", "string", "", 0, "Status of the job."),
            col(
                "Completions",
                "string",
                "",
                0,
                "The desired number of successfully finished pods the job should be run with."
            ),
            col(
                "Duration",
                "string",
                "",
                0,
                "Time required to complete the job."
            ),
            col(
                "Age",
                "string",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created."
            ),
            col(
                "Containers",
                "string",
                "",
                1,
                "Names of each container in the template."
            ),
            col(
                "Images",
                "string",
                "",
                1,
                "Images referenced by each container in the template."
            ),
            col(
                "Selector",
                "string",
                "",
                1,
                "A label query over pods that should match the pod count."
            ),
        ]),
        Kind::Pod => json!([
            col(
                "Name",
                "string",
                "name",
                0,
                "Name must be unique within a namespace."
            ),
            col(
                "Ready",
                "string",
                "",
                0,
                "The aggregate readiness state of this pod for accepting traffic."
            ),
            col(
                "Status",
                "string",
                "",
                0,
                "The aggregate status of the containers in this pod."
            ),
            col(
                "Restarts",
                "string",
                "",
                0,
                "The number of times the containers in this pod have been restarted."
            ),
            col(
                "Age",
                "string",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created."
            ),
            col("IP", "string", "", 1, "IP address allocated to the pod."),
            col(
                "Node",
                "string",
                "",
                1,
                "Name of the node the pod is assigned to."
            ),
            col("Nominated Node", "string", "", 1, "Nominated node name."),
            col("Readiness Gates", "string", "", 1, "Pod readiness gates."),
        ]),
        Kind::Node => json!([
            col(
                "Name",
                "string",
                "name",
                0,
                "Name must be unique within a namespace."
            ),
            col("Status", "string", "", 0, "The status of the node"),
            col("Roles", "string", "", 0, "The roles of the node"),
            col(
                "Age",
                "string",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created."
            ),
            col(
                "Version",
                "string",
                "",
                0,
                "Kubelet Version reported by the node."
            ),
            col(
                "Internal-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node."
            ),
            col(
                "External-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node."
            ),
            col(
                "OS-Image",
                "string",
                "",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."
            ),
            col(
                "Kernel-Version",
                "string",
                "",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."
            ),
            col(
                "Container-Runtime",
                "string",
                "",
                1,
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."
            ),
        ]),
        Kind::Secret => json!([
            col(
                "Name",
                "string",
                "name",
                0,
                "Name must be unique within a namespace."
            ),
            col(
                "Type",
                "string",
                "",
                0,
                "Used to facilitate programmatic handling of secret data."
            ),
            col("Data", "string", "", 0, "Data contains the secret data."),
            col(
                "Age",
                "string",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created."
            ),
        ]),
        Kind::ServiceAccount => json!([
            col(
                "Name",
                "string",
                "name",
                0,
                "Name must be unique within a namespace."
            ),
            col(
                "Secrets",
                "string",
                "",
                0,
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."
            ),
            col(
                "Age",
                "string",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created."
            ),
        ]),
        Kind::Event | Kind::EventV1 => json!([
            col(
                "Last Seen",
                "string",
                "",
                0,
                "The time at which the most recent occurrence of this event was recorded."
            ),
            col(
                "Type",
                "string",
                "",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future."
            ),
            col(
                "Reason",
                "string",
                "",
                0,
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."
            ),
            col(
                "Object",
                "string",
                "",
                0,
                "The object that this event is about."
            ),
            col(
                "Subobject",
                "string",
                "",
                1,
                "The subobject that this event is about."
            ),
            col(
                "Source",
                "string",
                "",
                1,
                "The component reporting this event."
            ),
            col(
                "Message",
                "string",
                "",
                0,
                "A human-readable description of the status of this operation."
            ),
            col(
                "First Seen",
                "string",
                "",
                1,
                "The time at which the event was first recorded."
            ),
            col(
                "Count",
                "string",
                "",
                1,
                "The number of times this event has occurred."
            ),
            col(
                "Name",
                "string",
                "name",
                1,
                "Name must be unique within a namespace."
            ),
        ]),
    }
}

/// A short human duration as kubectl prints it (`42s`, `3m5s`, `2h`, `4d`).
pub fn human(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10_800 => format!("{}m", s / 60),
        10_800..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn since(clock: &SimClock, t: &Value) -> String {
    match parse_time(t) {
        Some(t) => human(clock.now().duration_since(t).as_secs()),
        None => "<unknown>".into(),
    }
}

fn job_cells(clock: &SimClock, j: &Value) -> Vec<Value> {
    let status = if deleting(j) {
        "Terminating"
    } else if condition_true(j, "Complete") {
        "Complete"
    } else if condition_true(j, "Failed") {
        "Failed"
    } else if condition_true(j, "FailureTarget") {
        "FailureTarget"
    } else if j["spec"]["suspend"] == true {
        "Suspended"
    } else {
        "Running"
    };
    let completions = format!(
        "{}/{}",
        j["status"]["succeeded"].as_i64().unwrap_or(0),
        j["spec"]["completions"].as_i64().unwrap_or(1)
    );
    let duration = match (
        parse_time(&j["status"]["startTime"]),
        parse_time(&j["status"]["completionTime"]),
    ) {
        (Some(s), Some(e)) => human(e.duration_since(s).as_secs()),
        (Some(s), None) => human(clock.now().duration_since(s).as_secs()),
        _ => String::new(),
    };
    let containers = j["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let images: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    let selector = j["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    vec![
        j["metadata"]["name"].clone(),
        json!(status),
        json!(completions),
        json!(duration),
        json!(since(clock, &j["metadata"]["creationTimestamp"])),
        json!(names.join(",")),
        json!(images.join(",")),
        json!(selector),
    ]
}

/// The STATUS column as kubectl's pod printer computes it.
fn pod_status(p: &Value) -> String {
    let phase = p["status"]["phase"].as_str().unwrap_or("");
    let mut reason = match p["status"]["reason"].as_str() {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => phase.to_string(),
    };
    let mut has_running = false;
    for c in p["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
    {
        let state = &c["state"];
        if let Some(w) = state["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = w.to_string();
        } else if let Some(t) = state["terminated"].as_object() {
            match t
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                Some(r) => reason = r.to_string(),
                None => {
                    let sig = t.get("signal").and_then(Value::as_i64).unwrap_or(0);
                    let code = t.get("exitCode").and_then(Value::as_i64).unwrap_or(0);
                    reason = if sig != 0 {
                        format!("Signal:{sig}")
                    } else {
                        format!("ExitCode:{code}")
                    };
                }
            }
        } else if c["ready"] == true && state["running"].is_object() {
            has_running = true;
        }
    }
    if reason == "Completed" && has_running {
        reason = "Running".into();
    }
    if deleting(p) && p["status"]["reason"] == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting(p) && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    if reason.is_empty() {
        "Unknown".into()
    } else {
        reason
    }
}

fn node_cells(clock: &SimClock, n: &Value) -> Vec<Value> {
    let ready = n["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"] == "True");
    let mut status = match ready {
        Some(true) => "Ready".to_string(),
        Some(false) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if n["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let addr = |t: &str| {
        n["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["type"] == t))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let info = &n["status"]["nodeInfo"];
    vec![
        n["metadata"]["name"].clone(),
        json!(status),
        json!("<none>"),
        json!(since(clock, &n["metadata"]["creationTimestamp"])),
        info["kubeletVersion"].clone(),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        info["osImage"].clone(),
        info["kernelVersion"].clone(),
        info["containerRuntimeVersion"].clone(),
    ]
}

fn secret_cells(clock: &SimClock, s: &Value) -> Vec<Value> {
    vec![
        s["metadata"]["name"].clone(),
        json!(s["type"].as_str().unwrap_or("Opaque")),
        json!(s["data"].as_object().map_or(0, |d| d.len())),
        json!(since(clock, &s["metadata"]["creationTimestamp"])),
    ]
}

fn service_account_cells(clock: &SimClock, sa: &Value) -> Vec<Value> {
    vec![
        sa["metadata"]["name"].clone(),
        json!(sa["secrets"].as_array().map_or(0, Vec::len)),
        json!(since(clock, &sa["metadata"]["creationTimestamp"])),
    ]
}

fn event_cells(clock: &SimClock, e: &Value) -> Vec<Value> {
    let obj = &e["involvedObject"];
    let component = e["source"]["component"].as_str().unwrap_or("");
    let source = match e["source"]["host"].as_str() {
        Some(h) => format!("{component}, {h}"),
        // An events.k8s.io Event names its reporter instead (upstream's
        // formatEventSource).
        None if component.is_empty() => {
            let controller = e["reportingComponent"].as_str().unwrap_or("");
            match e["reportingInstance"].as_str().filter(|i| !i.is_empty()) {
                Some(i) => format!("{controller}, {i}"),
                None => controller.to_string(),
            }
        }
        None => component.to_string(),
    };
    // Without the deprecated timestamps the eventTime stands for both.
    fn or_event_time<'a>(e: &'a Value, t: &str) -> &'a Value {
        if e[t].is_null() {
            &e["eventTime"]
        } else {
            &e[t]
        }
    }
    vec![
        json!(since(clock, or_event_time(e, "lastTimestamp"))),
        e["type"].clone(),
        e["reason"].clone(),
        json!(format!(
            "{}/{}",
            obj["kind"].as_str().unwrap_or("").to_lowercase(),
            obj["name"].as_str().unwrap_or("")
        )),
        json!(obj["fieldPath"].as_str().unwrap_or("")),
        json!(source),
        e["message"].clone(),
        json!(since(clock, or_event_time(e, "firstTimestamp"))),
        json!(e["count"].as_i64().unwrap_or(1)),
        e["metadata"]["name"].clone(),
    ]
}

fn pod_cells(clock: &SimClock, p: &Value) -> Vec<Value> {
    let total = p["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = p["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |cs| cs.iter().filter(|c| c["ready"] == true).count());
    vec![
        p["metadata"]["name"].clone(),
        json!(format!("{ready}/{total}")),
        json!(pod_status(p)),
        json!("0"),
        json!(since(clock, &p["metadata"]["creationTimestamp"])),
        json!(p["status"]["podIP"].as_str().unwrap_or("<none>")),
        json!(p["spec"]["nodeName"].as_str().unwrap_or("<none>")),
        json!("<none>"),
        json!("<none>"),
    ]
}

fn row(clock: &SimClock, kind: Kind, obj: &Value, include: IncludeObject) -> Value {
    let cells = match kind {
        Kind::Job => job_cells(clock, obj),
        Kind::Pod => pod_cells(clock, obj),
        Kind::Node => node_cells(clock, obj),
        Kind::Secret => secret_cells(clock, obj),
        Kind::ServiceAccount => service_account_cells(clock, obj),
        Kind::Event => event_cells(clock, obj),
        Kind::EventV1 => event_cells(clock, &crate::events_v1::to_core(obj)),
    };
    let object = match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => obj.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"].clone(),
        }),
    };
    json!({"cells": cells, "object": object})
}

/// A Table of objects.
pub fn table<'a>(
    clock: &SimClock,
    kind: Kind,
    objs: impl IntoIterator<Item = &'a Value>,
    rv: u64,
    cont: Option<String>,
    include: IncludeObject,
) -> Value {
    let rows: Vec<Value> = objs
        .into_iter()
        .map(|o| row(clock, kind, o, include))
        .collect();
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        md["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": columns(kind), "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(5), "5s");
        assert_eq!(human(185), "3m5s");
        assert_eq!(human(900), "15m");
        assert_eq!(human(7200 * 3), "6h");
        assert_eq!(human(86_400 * 3), "3d");
    }

    #[test]
    fn pod_rows_read_status() {
        let clock = SimClock::new(1.0);
        let p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"ready": false, "state": {"terminated": {"reason": "OOMKilled"}}}]}});
        let t = table(&clock, Kind::Pod, [&p], 3, None, IncludeObject::Metadata);
        assert_eq!(t["rows"][0]["cells"][2], "OOMKilled");
        assert_eq!(t["rows"][0]["cells"][1], "0/1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
