//! What of an answer or an object is compared, and how it is written down.
//!
//! Kept: HTTP codes, Status `status`/`reason`/`message`, `details` (name,
//! group, kind, the causes' reason, field and message), condition types,
//! statuses and reasons in order, counts, phases, container states, exit
//! codes, finalizers, owner references, watch event types. Dropped or
//! masked: uids (`<uid>`), timestamps (`<time>`), resourceVersions (left out,
//! or named by the write they came from), generated names. A field that is
//! absent, `null`, `""`, `[]` or `{}` reads the same (Go's `omitempty`: no
//! client can tell them apart), except the Job status counts that are
//! pointers upstream (`ready`, `terminating`, `uncountedTerminatedPods`),
//! where absent shows as `-`.

use regex::Regex;
use serde_json::{Map, Value, json};
use std::sync::LazyLock;

static UID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap()
});
static TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\d{4}-\d{2}-\d{2}(T| )\d{2}:\d{2}:\d{2}(\.\d+)?( ?(Z|[+-]\d{2}:?\d{2})( [A-Z]{3})?)?",
    )
    .unwrap()
});

/// A text with uids and timestamps masked.
pub fn scrub(text: &str) -> String {
    let t = UID.replace_all(text, "<uid>");
    TIME.replace_all(&t, "<time>").into_owned()
}

/// [`scrub`], then each `(from, to)` replaced (a probe masks the
/// resourceVersions it knows).
pub fn scrub_with(text: &str, replace: &[(&str, &str)]) -> String {
    let mut t = scrub(text);
    for (from, to) in replace {
        if !from.is_empty() {
            t = t.replace(from, to);
        }
    }
    t
}

/// `v` without its empty members (absent, null, "", [], {} alike).
pub fn compact(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                let x = compact(x);
                if !is_empty(&x) {
                    out.insert(k.clone(), x);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(compact).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// A `Status` body: status, code, reason, message and details (causes as
/// `reason field: message`), masked.
pub fn status(v: &Value) -> Value {
    let causes: Vec<Value> = v["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    json!(format!(
                        "{} {}: {}",
                        c["reason"].as_str().unwrap_or(""),
                        c["field"].as_str().unwrap_or(""),
                        scrub(c["message"].as_str().unwrap_or(""))
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    compact(&json!({
        "kind": v["kind"],
        "status": v["status"],
        "code": v["code"],
        "reason": v["reason"],
        "message": v["message"].as_str().map(scrub),
        "details": {
            "name": v["details"]["name"],
            "group": v["details"]["group"],
            "kind": v["details"]["kind"],
            "retryAfterSeconds": v["details"]["retryAfterSeconds"],
            "causes": causes,
        },
    }))
}

/// The answer to a write: its code, and the Status it carried or a summary
/// of the object (`kind`, whether it has a uid, resourceVersion,
/// creationTimestamp and deletionTimestamp, its finalizers).
pub fn answer(code: u16, body: &Value) -> Value {
    if body["kind"] == "Status" {
        return json!({"code": code, "status": status(body)});
    }
    if !body.is_object() {
        return json!({"code": code, "text": body});
    }
    json!({"code": code, "object": object_marks(body)})
}

/// Which server-set fields an object carries (not their values).
pub fn object_marks(o: &Value) -> Value {
    let md = &o["metadata"];
    let has = |k: &str| !is_empty(&md[k]);
    compact(&json!({
        "kind": o["kind"],
        "uid": has("uid"),
        "resourceVersion": has("resourceVersion"),
        "creationTimestamp": has("creationTimestamp"),
        "deletionTimestamp": has("deletionTimestamp"),
        "deletionGracePeriodSeconds": md["deletionGracePeriodSeconds"],
        "finalizers": md["finalizers"],
    }))
}

/// A Job's status on one line: the counts (`-` for an absent pointer
/// count), the uncounted pods and the conditions in order.
pub fn job_status(s: &Value) -> String {
    let n = |k: &str| s[k].as_i64().unwrap_or(0);
    let p = |k: &str| {
        s[k].as_i64()
            .map(|x| x.to_string())
            .unwrap_or_else(|| "-".into())
    };
    let uncounted = match &s["uncountedTerminatedPods"] {
        Value::Object(m) => {
            let len = |k: &str| m.get(k).and_then(Value::as_array).map_or(0, Vec::len);
            format!("f{}s{}", len("failed"), len("succeeded"))
        }
        _ => "-".into(),
    };
    format!(
        "active={} ready={} terminating={} failed={} succeeded={} uncounted={} [{}]",
        n("active"),
        p("ready"),
        p("terminating"),
        n("failed"),
        n("succeeded"),
        uncounted,
        conditions(&s["conditions"])
    )
}

/// Conditions as `Type=Status/Reason`, in order.
pub fn conditions(cs: &Value) -> String {
    cs.as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={}/{}",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or(""),
                        c["reason"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// A condition of a status by type.
pub fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The first container's state as `waiting/Reason`, `running` or
/// `terminated/Reason/exitCode`.
pub fn container_state(pod: &Value) -> String {
    let st = &pod["status"]["containerStatuses"][0]["state"];
    if let Some(t) = st.get("terminated") {
        format!(
            "terminated/{}/{}",
            t["reason"].as_str().unwrap_or(""),
            t["exitCode"]
        )
    } else if let Some(w) = st.get("waiting") {
        format!("waiting/{}", w["reason"].as_str().unwrap_or(""))
    } else if st.get("running").is_some() {
        "running".into()
    } else {
        "-".into()
    }
}

/// What a pod is at: phase and reason, whether it is being deleted, its
/// finalizers and owners, the container's state, its conditions as
/// `Type=Status` (sorted: the kubelet and the controllers write them in
/// their own order) and its `DisruptionTarget` in full.
pub fn pod(p: &Value) -> Value {
    let md = &p["metadata"];
    let owners: Vec<String> = md["ownerReferences"]
        .as_array()
        .map(|os| {
            os.iter()
                .map(|o| {
                    format!(
                        "{} controller={} blockOwnerDeletion={}",
                        o["kind"].as_str().unwrap_or(""),
                        o["controller"],
                        o["blockOwnerDeletion"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut conds: Vec<String> = p["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["type"] != "DisruptionTarget")
                .map(|c| {
                    format!(
                        "{}={}",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    conds.sort();
    let disruption = condition(&p["status"], "DisruptionTarget").map(|c| {
        format!(
            "{}/{}: {}",
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
            scrub(c["message"].as_str().unwrap_or(""))
        )
    });
    compact(&json!({
        "phase": p["status"]["phase"],
        "reason": p["status"]["reason"],
        "message": p["status"]["message"].as_str().map(scrub),
        "deleting": !is_empty(&md["deletionTimestamp"]),
        "grace": md["deletionGracePeriodSeconds"],
        "finalizers": md["finalizers"],
        "owners": owners,
        "container": container_state(p),
        "conditions": conds,
        "DisruptionTarget": disruption,
    }))
}

/// Consecutive equal items once.
pub fn dedup<T: PartialEq>(mut v: Vec<T>) -> Vec<T> {
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_uids_and_times() {
        assert_eq!(
            scrub(
                "the UID in the precondition (0b1c7a57-2b0c-4c79-9b3a-1d2e3f405162) at 2026-03-01T10:00:00Z and 2026-03-01 10:00:00.5 +0000 UTC"
            ),
            "the UID in the precondition (<uid>) at <time> and <time>"
        );
        assert_eq!(
            scrub_with("too old resource version: 12 (40)", &[("12", "<rv>")]),
            "too old resource version: <rv> (40)"
        );
    }

    #[test]
    fn statuses_keep_what_clients_read() {
        let s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Job.batch \"x\" is invalid: spec.template.spec.containers: Required value",
            "reason": "Invalid", "code": 422,
            "details": {"name": "x", "group": "batch", "kind": "Job", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.template.spec.containers"}]}});
        assert_eq!(
            status(&s),
            json!({"kind": "Status", "status": "Failure", "code": 422, "reason": "Invalid",
                "message": "Job.batch \"x\" is invalid: spec.template.spec.containers: Required value",
                "details": {"name": "x", "group": "batch", "kind": "Job",
                    "causes": ["FieldValueRequired spec.template.spec.containers: Required value"]}})
        );
        // "" and absent read alike
        let a =
            json!({"kind": "Status", "status": "Failure", "code": 404, "details": {"group": ""}});
        let b = json!({"kind": "Status", "status": "Failure", "code": 404});
        assert_eq!(status(&a), status(&b));
    }

    #[test]
    fn job_status_lines() {
        let s = json!({"active": 1, "ready": 0, "uncountedTerminatedPods": {"failed": ["u"]},
            "conditions": [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}]});
        assert_eq!(
            job_status(&s),
            "active=1 ready=0 terminating=- failed=0 succeeded=0 uncounted=f1s0 [FailureTarget=True/BackoffLimitExceeded]"
        );
    }

    #[test]
    fn pods_in_short() {
        let p = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-03-01T10:00:00Z",
                "deletionGracePeriodSeconds": 30, "finalizers": ["batch.kubernetes.io/job-tracking"],
                "ownerReferences": [{"kind": "Job", "controller": true, "blockOwnerDeletion": true}]},
            "status": {"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"},
                {"type": "ContainersReady", "status": "False"}],
                "containerStatuses": [{"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}});
        assert_eq!(
            pod(&p),
            json!({"phase": "Failed", "deleting": true, "grace": 30,
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "owners": ["Job controller=true blockOwnerDeletion=true"],
                "container": "terminated/OOMKilled/137",
                "conditions": ["ContainersReady=False", "Ready=False"],
                "DisruptionTarget": "True/EvictionByEvictionAPI: Eviction API: evicting"})
        );
    }
}
