//! `pods/log`: tail and follow, the API server's checks and the kubelet's.

use super::Query;
use crate::objects;
use crate::sim::Sim;
use crate::status::ApiError;
use crate::store::{Key, Kind};
use crate::validation::{self, BadValue, FieldError};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The last `tail` lines (all of them when `None`).
pub(super) fn tail_of(lines: &[String], tail: Option<usize>) -> &[String] {
    match tail {
        Some(n) => &lines[lines.len().saturating_sub(n)..],
        None => lines,
    }
}

/// Log lines as the response text: each ends with a newline.
pub(super) fn log_text(lines: &[String]) -> String {
    lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect()
}

/// `PodLogOptions` as the API server validates them
/// (`ValidatePodLogOptions`): a negative `tailLines` is `422 Invalid`.
fn tail_lines(q: &Query, pod: &str) -> Result<Option<usize>, ApiError> {
    let Some(raw) = q.get("tailLines") else {
        return Ok(None);
    };
    let n: i64 = raw
        .parse()
        .map_err(|e| ApiError::bad_request(format!("tailLines {raw:?}: {e}")))?;
    if n < 0 {
        return Err(validation::invalid(
            "",
            "PodLogOptions",
            pod,
            &[FieldError::invalid(
                "tailLines",
                BadValue::Int(n),
                "must be greater than or equal to 0",
            )],
        ));
    }
    Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
}

/// Whether the kubelet has a log to show for `container`, or its refusal
/// (`kubelet_pods.go` `validateContainerLogStatus`, answered 400 with the
/// text as the message). kube-sim runs every container once, so there is
/// never a previous instance.
pub(super) fn kubelet_refusal(pod: &Value, container: &str, previous: bool) -> Option<String> {
    let name = objects::name(pod);
    let Some(status) = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
    else {
        return Some(format!(
            "container \"{container}\" in pod \"{name}\" is not available"
        ));
    };
    let has_id = |v: &Value| v["containerID"].as_str().is_some_and(|s| !s.is_empty());
    let state = &status["state"];
    let last = &status["lastState"]["terminated"];
    if previous {
        return (!has_id(last)).then(|| {
            format!("previous terminated container \"{container}\" in pod \"{name}\" not found")
        });
    }
    if state["running"].is_object() {
        return None;
    }
    if state["terminated"].is_object() {
        return (!has_id(&state["terminated"]) && !has_id(last))
            .then(|| format!("container \"{container}\" in pod \"{name}\" is terminated"));
    }
    if last.is_object() {
        return (!has_id(last))
            .then(|| format!("container \"{container}\" in pod \"{name}\" is terminated"));
    }
    let why = match state["waiting"]["reason"].as_str() {
        Some("ErrImagePull") => ": image can't be pulled".to_string(),
        Some("ImagePullBackOff") => ": trying and failing to pull image".to_string(),
        Some(reason) => format!(": {reason}"),
        None => " - no logs yet".to_string(),
    };
    Some(format!(
        "container \"{container}\" in pod \"{name}\" is waiting to start{why}"
    ))
}

/// `GET pods/{name}/log`, in upstream's order (`pkg/registry/core/pod/rest/log.go`,
/// `strategy.go` `LogLocation`): the options, the pod, the container; a pod
/// not yet on a node has no log (204, nothing asked of a kubelet);
/// then its Node, its kubelet, and the kubelet's own checks.
pub(super) fn logs(sim: &Arc<Sim>, ns: &str, name: &str, q: &Query) -> Result<Response, ApiError> {
    let tail = tail_lines(q, name)?;
    let pod = sim
        .store
        .get(&Key::new(Kind::Pod, ns, name))
        .ok_or_else(|| Kind::Pod.not_found(name))?;
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let container = match q.get("container") {
        Some(c) if containers.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    let text_plain = |text: String| ([(header::CONTENT_TYPE, "text/plain")], text).into_response();
    // The API server asks the pod's kubelet for its logs; a pod with no
    // node has no kubelet to ask: no stream, which the API server answers
    // 204 No Content (`LocationStreamer` without a location).
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    if sim.store.get(&Key::new(Kind::Node, "", node)).is_none() {
        return Err(Kind::Node.not_found(node));
    }
    if !sim.machine_up(node) {
        let ip = sim.host_ip(node);
        return Err(ApiError::internal(format!(
            "Get \"https://{ip}:10250/containerLogs/{ns}/{name}/{container}\": dial tcp {ip}:10250: connect: no route to host"
        )));
    }
    if let Some(refusal) = kubelet_refusal(&pod, &container, super::params::flag(q, "previous")) {
        return Err(ApiError::bad_request(refusal));
    }
    // One read gives both the text sent now and where following resumes, so
    // a line appended meanwhile is neither lost nor sent twice.
    let all = sim.store.read_log(ns, name, &container, None);
    let text = log_text(tail_of(&all, tail));
    let follow = super::params::flag(q, "follow");
    if !follow {
        return Ok(text_plain(text));
    }
    // Follow: send what is there, then new lines until the container stops.
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let sim = sim.clone();
    let (ns, name) = (ns.to_string(), name.to_string());
    let mut sent = all.len();
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(text))).await.is_err() {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Whether it runs is read before the log: the lines a container
            // writes before it stops are all in the read that follows.
            let running = sim
                .pods
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&Key::new(Kind::Pod, &ns, &name));
            let all = sim.store.read_log(&ns, &name, &container, None);
            let chunk = log_text(all.get(sent..).unwrap_or_default());
            sent = sent.max(all.len());
            if !chunk.is_empty() && tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                return;
            }
            if !running || tx.is_closed() {
                return;
            }
        }
    });
    let mut res = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_and_text() {
        let lines: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(tail_of(&lines, None), &lines[..]);
        assert_eq!(tail_of(&lines, Some(2)), &lines[1..]);
        assert_eq!(tail_of(&lines, Some(9)), &lines[..]);
        assert!(tail_of(&lines, Some(0)).is_empty());
        assert_eq!(log_text(&lines), "a\nb\nc\n");
        assert_eq!(log_text(&[]), "");
    }

    #[test]
    fn the_kubelet_shows_a_log_only_of_a_container_that_ran() {
        let pod = |state: Value, last: Value| {
            serde_json::json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [
                {"name": "c", "state": state, "lastState": {"terminated": last}}]}})
        };
        let none = Value::Null;
        let ran = serde_json::json!({"containerID": "containerd://1", "exitCode": 0});
        let refusal = |p: &Value, previous| kubelet_refusal(p, "c", previous).unwrap_or_default();
        assert_eq!(
            kubelet_refusal(
                &pod(serde_json::json!({"running": {}}), none.clone()),
                "c",
                false
            ),
            None
        );
        assert_eq!(
            kubelet_refusal(
                &pod(serde_json::json!({"terminated": ran}), none.clone()),
                "c",
                false
            ),
            None
        );
        // no previous instance: every kube-sim container runs once
        assert_eq!(
            refusal(&pod(serde_json::json!({"running": {}}), none.clone()), true),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        // a container the kubelet lost: terminated without a container id
        assert_eq!(
            refusal(
                &pod(
                    serde_json::json!({"terminated": {"exitCode": 137}}),
                    none.clone()
                ),
                false
            ),
            "container \"c\" in pod \"p\" is terminated"
        );
        assert_eq!(
            refusal(
                &pod(
                    serde_json::json!({"waiting": {"reason": "ErrImagePull"}}),
                    none.clone()
                ),
                false
            ),
            "container \"c\" in pod \"p\" is waiting to start: image can't be pulled"
        );
        assert_eq!(
            refusal(
                &pod(
                    serde_json::json!({"waiting": {"reason": "InvalidImageName"}}),
                    none.clone()
                ),
                false
            ),
            "container \"c\" in pod \"p\" is waiting to start: InvalidImageName"
        );
        assert_eq!(
            refusal(&pod(serde_json::json!({"waiting": {}}), none), false),
            "container \"c\" in pod \"p\" is waiting to start - no logs yet"
        );
        // a pod the kubelet has not reported on yet
        assert_eq!(
            refusal(&serde_json::json!({"metadata": {"name": "p"}}), false),
            "container \"c\" in pod \"p\" is not available"
        );
    }
}
