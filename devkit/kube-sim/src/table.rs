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

fn pod_status(p: &Value) -> String {
    if deleting(p) {
        return "Terminating".into();
    }
    let cs = p["status"]["containerStatuses"].as_array();
    if let Some(t) = cs.and_then(|cs| cs.iter().find_map(|c| c["state"]["terminated"].as_object()))
    {
        return t
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("Error")
            .to_string();
    }
    match p["status"]["phase"].as_str() {
        Some("Pending") if p["spec"]["nodeName"].is_string() => "ContainerCreating".into(),
        Some(phase) => phase.to_string(),
        None => "Unknown".into(),
    }
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
