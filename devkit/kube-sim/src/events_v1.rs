//! `events.k8s.io/v1` Events, served as upstream serves them: one storage
//! with the core v1 Events, each request converted. A create is validated
//! as upstream validates an Event created through `events.k8s.io/v1`
//! (`ValidateEventCreate` in `pkg/apis/core/validation/events.go`: the
//! legacy rules, then the strict ones), stored as a core v1 Event (so
//! `kubectl get events` and `kubectl describe` see it, by its
//! `involvedObject`), and answered in the `events.k8s.io/v1` form; a list
//! or get converts the stored core Events back (`pkg/apis/events/v1`'s
//! conversion: `regarding` is `involvedObject`, `note` is `message`,
//! `reportingController` is `reportingComponent`, the `deprecated*`
//! fields are `source`, `firstTimestamp`, `lastTimestamp` and `count`).
//!
//! Upstream validates on the internal type, so the paths of the errors
//! are the core names (`involvedObject.namespace`, `message`,
//! `reportingController`), and `regarding` itself is not required.

use crate::validation::meta::{self, dns1123_subdomain, each_invalid};
use crate::validation::{BadValue, ErrorList, FieldError};
use serde_json::{Map, Value, json};

/// The longest `reportingInstance`.
pub const REPORTING_INSTANCE_LIMIT: usize = 128;
/// The longest `action`.
pub const ACTION_LIMIT: usize = 128;
/// The longest `reason`.
pub const REASON_LIMIT: usize = 128;
/// The longest `note` (`message`), in bytes.
pub const NOTE_LIMIT: usize = 1024;

/// The `apiVersion` of the events.k8s.io form.
pub const API_VERSION: &str = "events.k8s.io/v1";

fn text<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj[key].as_str().unwrap_or("")
}

fn set(obj: &Value) -> bool {
    !obj.is_null()
}

/// The core v1 Event an `events.k8s.io/v1` Event is stored as.
pub fn to_core(v1: &Value) -> Value {
    let mut core = Map::new();
    core.insert("apiVersion".into(), json!("v1"));
    core.insert("kind".into(), json!("Event"));
    core.insert("metadata".into(), v1["metadata"].clone());
    let copy = [
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
        ("related", "related"),
        ("type", "type"),
        ("regarding", "involvedObject"),
        ("note", "message"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ];
    for (from, to) in copy {
        if set(&v1[from]) {
            core.insert(to.into(), v1[from].clone());
        }
    }
    // Go's zero values, as a core Event read back shows them.
    core.entry("involvedObject").or_insert_with(|| json!({}));
    core.entry("source").or_insert_with(|| json!({}));
    core.entry("firstTimestamp").or_insert(Value::Null);
    core.entry("lastTimestamp").or_insert(Value::Null);
    core.entry("reportingComponent").or_insert(json!(""));
    core.entry("reportingInstance").or_insert(json!(""));
    Value::Object(core)
}

/// The `events.k8s.io/v1` form of a stored core v1 Event.
pub fn from_core(core: &Value) -> Value {
    let mut v1 = Map::new();
    v1.insert("apiVersion".into(), json!(API_VERSION));
    v1.insert("kind".into(), json!("Event"));
    v1.insert("metadata".into(), core["metadata"].clone());
    // eventTime is not omitempty upstream: a legacy Event shows null.
    v1.insert("eventTime".into(), core["eventTime"].clone());
    let copy = [
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
        ("related", "related"),
        ("type", "type"),
        ("involvedObject", "regarding"),
        ("message", "note"),
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
    ];
    for (from, to) in copy {
        let value = &core[from];
        let empty = match value {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Object(m) => m.is_empty(),
            Value::Number(n) => n.as_i64() == Some(0),
            _ => false,
        };
        if !empty {
            v1.insert(to.into(), value.clone());
        }
    }
    Value::Object(v1)
}

/// Upstream's `ValidateEventCreate` for a request of `events.k8s.io/v1`,
/// over the core form of the Event (after [`to_core`]) in namespace `ns`.
pub fn validate_create(core: &Value, ns: &str) -> ErrorList {
    let mut errs = ErrorList::new();
    let involved_ns = core["involvedObject"]["namespace"].as_str().unwrap_or("");
    if !set(&core["eventTime"]) {
        // The legacy branch: an Event without eventTime.
        if involved_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                errs.push(namespace_mismatch(involved_ns));
            }
        } else if ns != involved_ns {
            errs.push(namespace_mismatch(involved_ns));
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(namespace_mismatch(involved_ns));
        }
        let controller = text(core, "reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        each_invalid(
            &mut errs,
            "reportingController",
            controller,
            meta::qualified_name(controller),
        );
        let limits = [
            (
                "reportingInstance",
                "reportingInstance",
                REPORTING_INSTANCE_LIMIT,
                true,
            ),
            ("action", "action", ACTION_LIMIT, true),
            ("reason", "reason", REASON_LIMIT, true),
            ("message", "message", NOTE_LIMIT, false),
        ];
        for (key, field, limit, required) in limits {
            let value = text(core, key);
            if required && value.is_empty() {
                errs.push(FieldError::required(field, ""));
            }
            if value.len() > limit {
                errs.push(FieldError::invalid(
                    field,
                    BadValue::Str(String::new()),
                    format!("can have at most {limit} characters"),
                ));
            }
        }
    }
    each_invalid(&mut errs, "namespace", ns, dns1123_subdomain(ns));

    // The strict rules of events.k8s.io/v1 and newer.
    meta::validate_object_meta(&core["metadata"], &mut errs);
    if let Some(series) = core["series"].as_object() {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                BadValue::Str(String::new()),
                "should be at least 2",
            ));
        }
        if series.get("lastObservedTime").is_none_or(Value::is_null) {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    if !set(&core["eventTime"]) {
        errs.push(FieldError::required("eventTime", ""));
    }
    let etype = text(core, "type");
    if etype != "Normal" && etype != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            BadValue::Str(String::new()),
            format!("has invalid value: {etype}"),
        ));
    }
    let unset =
        |field: &str| FieldError::invalid(field, BadValue::Str(String::new()), "needs to be unset");
    if set(&core["firstTimestamp"]) {
        errs.push(unset("firstTimestamp"));
    }
    if set(&core["lastTimestamp"]) {
        errs.push(unset("lastTimestamp"));
    }
    if core["count"].as_i64().unwrap_or(0) != 0 {
        errs.push(unset("count"));
    }
    if !text(&core["source"], "component").is_empty() || !text(&core["source"], "host").is_empty() {
        errs.push(unset("source"));
    }
    errs
}

fn namespace_mismatch(involved_ns: &str) -> FieldError {
    FieldError::invalid(
        "involvedObject.namespace",
        BadValue::Str(involved_ns.to_owned()),
        "does not match event.namespace",
    )
}

/// A field selector of `events.k8s.io/v1` in the core names the stored
/// Events are selected by (`regarding.*` is `involvedObject.*`,
/// `reportingController` is `reportingComponent`).
pub fn core_field_selector(selector: &str) -> String {
    selector
        .split(',')
        .map(|term| {
            let term = term.trim();
            if let Some(rest) = term.strip_prefix("regarding.") {
                format!("involvedObject.{rest}")
            } else if let Some(rest) = term.strip_prefix("reportingController") {
                format!("reportingComponent{rest}")
            } else {
                term.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "Event",
            "metadata": {"name": "tcab-driver-1-abcd1234.17f", "namespace": "tcab"},
            "eventTime": "2026-12-07T10:00:00.000000Z",
            "action": "ReportDeath", "reason": "ReportedDead", "type": "Warning",
            "note": "driver of job 1 reported dead: OOMKilled",
            "reportingController": "tcab.dev/lease-keeper", "reportingInstance": "tcab-dispatcher-x",
            "regarding": {"apiVersion": "batch/v1", "kind": "Job", "namespace": "tcab",
                "name": "tcab-driver-1-abcd1234", "uid": "u1"},
        })
    }

    fn fields(errs: &ErrorList) -> Vec<String> {
        errs.iter().map(|e| e.field.clone()).collect()
    }

    #[test]
    fn a_valid_event_is_stored_as_a_core_event_and_read_back_the_same() {
        let core = to_core(&event());
        assert!(
            validate_create(&core, "tcab").is_empty(),
            "{:?}",
            validate_create(&core, "tcab")
        );
        assert_eq!(core["involvedObject"]["name"], "tcab-driver-1-abcd1234");
        assert_eq!(core["message"], "driver of job 1 reported dead: OOMKilled");
        assert_eq!(core["reportingComponent"], "tcab.dev/lease-keeper");
        assert_eq!(core["apiVersion"], "v1");
        let back = from_core(&core);
        assert_eq!(back, event());
    }

    #[test]
    fn the_required_fields_and_limits_are_upstreams() {
        let mut e = event();
        for key in [
            "eventTime",
            "action",
            "reason",
            "reportingController",
            "reportingInstance",
        ] {
            e.as_object_mut().expect("an object").remove(key);
        }
        e["type"] = json!("Info");
        let got = fields(&validate_create(&to_core(&e), "tcab"));
        assert_eq!(got, ["eventTime", "type"], "{got:?}");
        // Without eventTime only the legacy rules apply (and the strict one
        // requiring it); the other required fields are checked with it.
        let mut e = event();
        e["action"] = json!("");
        e["reason"] = json!("R".repeat(129));
        e["note"] = json!("n".repeat(1025));
        e["reportingInstance"] = json!("");
        e["deprecatedCount"] = json!(3);
        let got = fields(&validate_create(&to_core(&e), "tcab"));
        assert_eq!(
            got,
            ["reportingInstance", "action", "reason", "message", "count"],
            "{got:?}"
        );
        let mut e = event();
        e["reportingController"] = json!("not a qualified name!");
        e["metadata"]["name"] = json!("Bad_Name");
        let got = fields(&validate_create(&to_core(&e), "tcab"));
        assert_eq!(got, ["reportingController", "metadata.name"], "{got:?}");
    }

    #[test]
    fn regarding_selectors_read_as_involved_object() {
        assert_eq!(
            core_field_selector("regarding.name=j,reason=ReportedDead,reportingController=a/b"),
            "involvedObject.name=j,reason=ReportedDead,reportingComponent=a/b"
        );
    }
}
