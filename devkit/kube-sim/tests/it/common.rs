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
