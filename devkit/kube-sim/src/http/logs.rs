//! `pods/log`: tail and follow.

use super::Query;
use crate::sim::Sim;
use crate::status::ApiError;
use crate::store::{Key, Kind};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
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

pub(super) fn logs(sim: &Arc<Sim>, ns: &str, name: &str, q: &Query) -> Result<Response, ApiError> {
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
    let state = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container.as_str()))
        .map(|c| c["state"].clone());
    let waiting = match &state {
        None => Some("ContainerCreating".to_string()),
        Some(s) => s["waiting"]["reason"].as_str().map(str::to_string),
    };
    if let Some(reason) = waiting {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    }
    // The API server asks the pod's kubelet for its logs.
    if let Some(node) = pod["spec"]["nodeName"].as_str() {
        if sim.store.get(&Key::new(Kind::Node, "", node)).is_none() {
            return Err(Kind::Node.not_found(node));
        }
        if !sim.machine_up(node) {
            let ip = sim.host_ip(node);
            return Err(ApiError::internal(format!(
                "Get \"https://{ip}:10250/containerLogs/{ns}/{name}/{container}\": dial tcp {ip}:10250: connect: no route to host"
            )));
        }
    }
    let tail = q
        .get("tailLines")
        .and_then(|t| t.parse::<i64>().ok())
        .map(|t| t.max(0) as usize);
    // One read gives both the text sent now and where following resumes, so
    // a line appended meanwhile is neither lost nor sent twice.
    let all = sim.store.read_log(ns, name, &container, None);
    let text = log_text(tail_of(&all, tail));
    let follow = super::params::flag(q, "follow");
    if !follow {
        return Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response());
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
}
