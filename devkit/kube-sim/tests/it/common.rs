//! Helpers: starting a sim, a plain HTTP client, waiting on conditions,
//! reading watch streams.

use serde_json::{Value, json};
use std::future::Future;
use std::time::{Duration, Instant};
use tcab_kube_sim::{SimHandle, SimOptions, Timing, spawn};

pub const NS: &str = "tcab";

pub async fn sim_with(f: impl FnOnce(&mut SimOptions)) -> SimHandle {
    let mut o = SimOptions {
        namespace: NS.into(),
        ..SimOptions::default()
    };
    f(&mut o);
    spawn(o).await.expect("sim starts")
}

pub async fn sim() -> SimHandle {
    sim_with(|_| {}).await
}

/// A sim without the Job controller (pure API tests).
pub async fn api_sim() -> SimHandle {
    sim_with(|o| {
        o.controller = false;
        o.timing = Timing {
            bookmark_interval: Duration::from_millis(100),
            ..Timing::default()
        };
    })
    .await
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub fn jobs_url(s: &SimHandle) -> String {
    format!("{}/apis/batch/v1/namespaces/{NS}/jobs", s.url())
}

pub fn pods_url(s: &SimHandle) -> String {
    format!("{}/api/v1/namespaces/{NS}/pods", s.url())
}

/// A minimal valid Job running a plain container for `run_seconds`.
pub fn plain_job(name: &str, labels: Value, run_seconds: f64) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": labels, "annotations": {"kube-sim.tcab.dev/run-seconds": run_seconds.to_string()}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1"}]}}}
    })
}

pub async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let r = c.post(url).json(body).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

pub async fn get(c: &reqwest::Client, url: &str) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

pub async fn delete(c: &reqwest::Client, url: &str, body: Option<Value>) -> (u16, Value) {
    let mut rb = c.delete(url);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

/// Polls `check` until it returns `Some`, or panics after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads newline-delimited JSON events from a watch response.
pub struct WatchReader {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl WatchReader {
    pub async fn open(c: &reqwest::Client, url: &str) -> Self {
        let resp = c.get(url).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "watch {url}");
        WatchReader {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next event, `None` when the stream ended; panics after `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.resp.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Ok(None)) => return None,
                Ok(Err(e)) => panic!("watch stream error: {e}"),
                Err(_) => panic!("no watch event within {limit:?}"),
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_change(&mut self, limit: Duration) -> Option<Value> {
        loop {
            let ev = self.next(limit).await?;
            if ev["type"] != "BOOKMARK" {
                return Some(ev);
            }
        }
    }
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

pub const SECS: Duration = Duration::from_secs(10);

/// A driver Job as the admitter builds it (see docs/job-contract.md).
pub fn driver_job(id: &str, backend: &str, script: Value, grace: i64, extra_spec: Value) -> Value {
    let labels = json!({"app.kubernetes.io/managed-by": "tcab-dispatcher", "tcab.dev/job-id": id,
        "tcab.dev/job-kind": "run", "tcab.dev/claim": "abcd1234"});
    let launch = json!({"case": "c", "sim": script}).to_string();
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("tcab-driver-{id}-abcd1234"), "labels": labels},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 3600, "template": {
            "metadata": {"labels": labels, "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace, "containers": [{
                "name": "driver", "image": "driver:sha",
                "env": [
                    {"name": "TCAB_BACKEND_URL", "value": backend},
                    {"name": "TCAB_JOB_ID", "value": id},
                    {"name": "TCAB_JOB_TOKEN", "value": format!("tok-{id}")},
                    {"name": "TCAB_LAUNCH_REQUEST", "value": launch},
                    {"name": "TCAB_DRIVER_MANAGED_BY", "value": "tcab-driver"},
                    {"name": "TCAB_K8S_NAMESPACE", "value": "sandboxes"},
                ]}]}}}
    });
    if let Value::Object(m) = extra_spec {
        for (k, v) in m {
            job["spec"][k] = v;
        }
    }
    job
}

pub fn driver_name(id: &str) -> String {
    format!("tcab-driver-{id}-abcd1234")
}

pub fn condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

// ---- kube-rs helpers: typed objects prove the JSON has the real schema ----

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{Event, Pod, PodCondition};
use kube::api::{Api, ListParams};

/// A typed Job from JSON (panics when the JSON does not fit the schema).
pub fn typed_job(v: Value) -> Job {
    serde_json::from_value(v).expect("a batch/v1 Job")
}

/// A true condition of a Job.
pub fn job_cond<'a>(j: &'a Job, kind: &str) -> Option<&'a JobCondition> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// A condition of a pod (any status).
pub fn pod_cond<'a>(p: &'a Pod, kind: &str) -> Option<&'a PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// The phase of a pod.
pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Polls `get` until `check` holds for what it returns.
pub async fn wait_until<T, F, Fut>(
    what: &str,
    limit: Duration,
    mut get: F,
    check: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually(what, limit, || {
        let fut = get();
        let check = &check;
        async move { fut.await.filter(|v| check(v)) }
    })
    .await
}

/// The (first) pod of a Job, by its job-name label.
pub async fn pod_of(pods: &Api<Pod>, job: &str) -> Option<Pod> {
    pods.list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .ok()?
        .items
        .into_iter()
        .next()
}

/// The Events about an object, as `kubectl describe` finds them.
pub async fn events_about(events: &Api<Event>, kind: &str, name: &str) -> Vec<Event> {
    events
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        )))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Whether some Event has this reason and a message containing `text`.
pub fn has_event(evs: &[Event], reason: &str, text: &str) -> bool {
    evs.iter().any(|e| {
        e.reason.as_deref() == Some(reason)
            && e.message.as_deref().is_some_and(|m| m.contains(text))
    })
}

/// Waits until the sim's clock has moved `secs` sim seconds past `from`
/// (to let periodic controllers run a number of times).
pub async fn sim_time_passes(s: &SimHandle, from: jiff::Timestamp, secs: i64) {
    let until = from + jiff::SignedDuration::from_secs(secs);
    eventually("sim time to pass", SECS, || async {
        (s.sim().clock.now() >= until).then_some(())
    })
    .await
}
