//! Container logs, and the kubelet's `GET /containerLogs/{ns}/{pod}/{container}`
//! (pkg/kubelet/server/server.go `getContainerLogs`,
//! pkg/kubelet/kubelet_pods.go `GetKubeletContainerLogs` and
//! `validateContainerLogStatus`, pkg/kubelet/kuberuntime/logs for the
//! options): `tailLines`, `limitBytes`, `timestamps`, `sinceSeconds`,
//! `sinceTime`, `previous` and `follow` (which streams until the container
//! stops). Errors are plain text, as the kubelet writes them: 404 for an
//! unknown pod or container, 422 for invalid options, 400 for a container
//! with no logs to show (waiting, or no previous instance).

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use jiff::Timestamp;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

#[derive(Default)]
struct Lines {
    lines: Vec<(Timestamp, String)>,
    done: bool,
}

/// One container's log: lines with their time, and whether the container
/// has stopped (which ends a follow).
pub struct ContainerLog {
    inner: Mutex<Lines>,
    changed: watch::Sender<u64>,
}

impl Default for ContainerLog {
    fn default() -> Self {
        ContainerLog {
            inner: Mutex::new(Lines::default()),
            changed: watch::channel(0).0,
        }
    }
}

impl ContainerLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a line (without its newline).
    pub fn append(&self, line: &str) {
        let mut l = self.lock();
        if l.done {
            return;
        }
        for part in line.split('\n') {
            l.lines.push((Timestamp::now(), part.to_string()));
        }
        drop(l);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The container stopped: nothing more is written, follows end.
    pub fn finish(&self) {
        self.lock().done = true;
        self.changed.send_modify(|n| *n += 1);
    }

    /// The lines from index `from`, and whether the log is finished.
    fn since(&self, from: usize) -> (Vec<(Timestamp, String)>, bool) {
        let l = self.lock();
        (l.lines.get(from..).unwrap_or_default().to_vec(), l.done)
    }

    /// Every line so far (tests and debugging).
    pub fn text(&self) -> Vec<String> {
        self.lock().lines.iter().map(|(_, l)| l.clone()).collect()
    }
}

/// The logs of the containers of the pods on one node, by pod UID and
/// container name.
#[derive(Default)]
pub struct LogBook {
    logs: Mutex<HashMap<(String, String), Arc<ContainerLog>>>,
    /// Pods (by UID) whose containers the runtime has removed: their logs
    /// are no longer served (the lines stay for the agent's own readers).
    removed: Mutex<std::collections::HashSet<String>>,
}

impl LogBook {
    /// The log of a pod's container (made on first use).
    pub fn get(&self, uid: &str, container: &str) -> Arc<ContainerLog> {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((uid.to_string(), container.to_string()))
            .or_default()
            .clone()
    }

    /// Forgets a pod's logs (the pod is gone from the API).
    pub fn forget(&self, uid: &str) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(u, _), _| u != uid);
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    /// The pod's containers are removed from the runtime, their log files
    /// with them: what the kubelet does to an evicted pod's dead containers
    /// at once (kubelet.go `cleanUpContainersInPod`: `ShouldPodContentBeRemoved`
    /// is true for an evicted pod, so none is kept).
    pub fn remove_containers(&self, uid: &str) {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string());
    }

    /// Whether the pod's containers were removed ([`Self::remove_containers`]).
    pub fn removed(&self, uid: &str) -> bool {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(uid)
    }
}

/// The options of one request (`v1.PodLogOptions` as query parameters).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogQuery {
    /// Stream until the container stops.
    pub follow: bool,
    /// The previous instance of the container.
    pub previous: bool,
    /// Prefix each line with its RFC 3339 time.
    pub timestamps: bool,
    /// Only the last N lines.
    pub tail_lines: Option<i64>,
    /// At most this many bytes.
    pub limit_bytes: Option<i64>,
    /// Only lines newer than this many seconds.
    pub since_seconds: Option<i64>,
    /// Only lines at or after this time.
    pub since_time: Option<Timestamp>,
}

/// apimachinery's bool conversion: absent is false; anything but `0` or
/// any-case `false` is true (even an empty value).
fn parse_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

impl LogQuery {
    /// Parses the query string; `Err` is the kubelet's answer to a bad one.
    pub fn parse(query: Option<&str>) -> Result<LogQuery, (StatusCode, String)> {
        let bad = || {
            (
                StatusCode::BAD_REQUEST,
                r#"{"message": "Unable to decode query."}"#.to_string(),
            )
        };
        let invalid = || {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"message": "Invalid request."}"#.to_string(),
            )
        };
        let mut q = LogQuery::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v);
            let int = |v: &str| v.parse::<i64>().map_err(|_| bad());
            match k {
                "follow" => q.follow = parse_bool(&v),
                "previous" => q.previous = parse_bool(&v),
                "timestamps" => q.timestamps = parse_bool(&v),
                "tailLines" => q.tail_lines = Some(int(&v)?),
                // The kubelet's backwards-compatible alias; "all" is no tail.
                "tail" if v == "all" => q.tail_lines = None,
                "tail" => q.tail_lines = Some(int(&v)?),
                "limitBytes" => q.limit_bytes = Some(int(&v)?),
                "sinceSeconds" => q.since_seconds = Some(int(&v)?),
                "sinceTime" => q.since_time = Some(v.parse().map_err(|_| bad())?),
                _ => {}
            }
        }
        // validation.ValidatePodLogOptions
        if q.tail_lines.is_some_and(|n| n < 0)
            || q.limit_bytes.is_some_and(|n| n < 1)
            || q.since_seconds.is_some_and(|n| n < 1)
            || (q.since_seconds.is_some() && q.since_time.is_some())
        {
            return Err(invalid());
        }
        Ok(q)
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which log the kubelet would read for `container` of `pod` (whose status
/// is the kubelet's latest), or its refusal (`validateContainerLogStatus`).
pub fn check_status(pod: &Value, container: &str, previous: bool) -> Result<(), String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let statuses = pod["status"]["containerStatuses"].as_array();
    let Some(cs) = statuses
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container)
    else {
        return Err(format!(
            "container \"{container}\" in pod \"{name}\" is not available"
        ));
    };
    let state = &cs["state"];
    let last = &cs["lastState"]["terminated"];
    if previous {
        if last["containerID"].as_str().is_none_or(str::is_empty) {
            return Err(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ));
        }
        return Ok(());
    }
    if state["running"].is_object() {
        return Ok(());
    }
    if state["terminated"].is_object() {
        if state["terminated"]["containerID"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
            || last["containerID"].as_str().is_some_and(|s| !s.is_empty())
        {
            return Ok(());
        }
        return Err(format!(
            "container \"{container}\" in pod \"{name}\" is terminated"
        ));
    }
    if let Some(reason) = state["waiting"]["reason"].as_str() {
        return Err(match reason {
            "ErrImagePull" => format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: trying and failing to pull image"
            ),
            r => format!("container \"{container}\" in pod \"{name}\" is waiting to start: {r}"),
        });
    }
    Err(format!(
        "container \"{container}\" in pod \"{name}\" is waiting to start - no logs yet"
    ))
}

fn render(t: &Timestamp, line: &str, timestamps: bool) -> String {
    if timestamps {
        // RFC 3339 with nanoseconds, as the CRI log format stores them.
        format!("{} {line}\n", t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    } else {
        format!("{line}\n")
    }
}

/// The answer to a log request for `log` with `q`: the selected lines, and
/// with `follow` every new line until the container stops.
pub fn respond(log: Arc<ContainerLog>, q: LogQuery) -> Response {
    let (lines, _) = log.since(0);
    let since = q.since_time.or_else(|| {
        q.since_seconds
            .map(|s| Timestamp::now() - jiff::SignedDuration::from_secs(s))
    });
    let mut picked: Vec<&(Timestamp, String)> = lines
        .iter()
        .filter(|(t, _)| since.is_none_or(|s| *t >= s))
        .collect();
    if let Some(n) = q.tail_lines {
        let n = n.max(0) as usize;
        if picked.len() > n {
            picked.drain(..picked.len() - n);
        }
    }
    let mut budget = q.limit_bytes.map(|n| n.max(0) as usize);
    let mut first = String::new();
    for (t, l) in &picked {
        first.push_str(&render(t, l, q.timestamps));
    }
    let take = |text: String, budget: &mut Option<usize>| -> (Bytes, bool) {
        match budget {
            None => (Bytes::from(text), false),
            Some(left) => {
                let n = text.len().min(*left);
                *left -= n;
                (Bytes::from(text.into_bytes()[..n].to_vec()), *left == 0)
            }
        }
    };
    let (head, exhausted) = take(first, &mut budget);
    let ok =
        |body: Body| (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response();
    if !q.follow || exhausted {
        return ok(Body::from(head));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        if !head.is_empty() && tx.send(Ok(head)).await.is_err() {
            return;
        }
        let mut seen = lines.len();
        let mut changes = log.changed.subscribe();
        loop {
            let (new, done) = log.since(seen);
            seen += new.len();
            let text: String = new
                .iter()
                .filter(|(t, _)| since.is_none_or(|s| *t >= s))
                .map(|(t, l)| render(t, l, q.timestamps))
                .collect();
            if !text.is_empty() {
                let (chunk, exhausted) = take(text, &mut budget);
                if tx.send(Ok(chunk)).await.is_err() || exhausted {
                    return;
                }
            }
            if done {
                return;
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                _ = tx.closed() => return,
            }
        }
    });
    ok(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queries_parse_and_validate_as_the_kubelet() {
        let q = LogQuery::parse(Some("tailLines=5&follow=true&limitBytes=10&timestamps")).unwrap();
        assert_eq!(
            (q.tail_lines, q.follow, q.limit_bytes, q.timestamps),
            (Some(5), true, Some(10), true)
        );
        assert!(
            !LogQuery::parse(Some("follow=false&previous=0"))
                .unwrap()
                .follow
        );
        assert_eq!(LogQuery::parse(Some("tail=all")).unwrap().tail_lines, None);
        assert_eq!(
            LogQuery::parse(Some("tailLines=-1")).unwrap_err().0,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            LogQuery::parse(Some("limitBytes=0")).unwrap_err().0,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            LogQuery::parse(Some("tailLines=x")).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        let t = LogQuery::parse(Some("sinceTime=2026-12-01T10%3A00%3A00Z")).unwrap();
        assert_eq!(t.since_time.unwrap().to_string(), "2026-12-01T10:00:00Z");
    }

    #[test]
    fn status_decides_what_can_be_read() {
        let pod = |state: Value| {
            json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [
                {"name": "c", "state": state, "lastState": {}}]}})
        };
        assert!(check_status(&pod(json!({"running": {}})), "c", false).is_ok());
        assert_eq!(
            check_status(
                &pod(json!({"waiting": {"reason": "ErrImagePull"}})),
                "c",
                false
            )
            .unwrap_err(),
            "container \"c\" in pod \"p\" is waiting to start: image can't be pulled"
        );
        assert_eq!(
            check_status(
                &pod(json!({"waiting": {"reason": "ContainerCreating"}})),
                "c",
                false
            )
            .unwrap_err(),
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        assert!(
            check_status(
                &pod(json!({"terminated": {"containerID": "containerd://x"}})),
                "c",
                false
            )
            .is_ok()
        );
        assert_eq!(
            check_status(&pod(json!({"terminated": {"exitCode": 137}})), "c", false).unwrap_err(),
            "container \"c\" in pod \"p\" is terminated"
        );
        assert_eq!(
            check_status(&pod(json!({"running": {}})), "c", true).unwrap_err(),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        assert_eq!(
            check_status(&pod(json!({"running": {}})), "x", false).unwrap_err(),
            "container \"x\" in pod \"p\" is not available"
        );
    }

    async fn body(r: Response) -> String {
        String::from_utf8(
            axum::body::to_bytes(r.into_body(), 1 << 20)
                .await
                .unwrap()
                .to_vec(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn tail_limit_and_follow() {
        let log = Arc::new(ContainerLog::default());
        for i in 1..=5 {
            log.append(&format!("line {i}"));
        }
        let q = |s: &str| LogQuery::parse(Some(s)).unwrap();
        assert_eq!(
            body(respond(log.clone(), q("tailLines=2"))).await,
            "line 4\nline 5\n"
        );
        assert_eq!(
            body(respond(log.clone(), q("limitBytes=9"))).await,
            "line 1\nli"
        );
        let followed = respond(log.clone(), q("tailLines=1&follow=true"));
        let reader = tokio::spawn(body(followed));
        log.append("line 6");
        log.finish();
        assert_eq!(reader.await.unwrap(), "line 5\nline 6\n");
        let stamped = body(respond(log.clone(), q("tailLines=1&timestamps=true"))).await;
        assert!(stamped.ends_with("Z line 6\n"), "{stamped}");
    }
}
