//! Helpers: the proxy in front of kube-sim, raw HTTP clients, watch streams
//! read line by line.

use serde_json::{Value, json};
use std::time::Duration;
use tcab_api_proxy::{ProxyHandle, ProxyOptions, UpstreamOptions};
use tcab_kube_sim::{AdminClient, SimHandle, SimOptions, Timing};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// The namespace of the kube-sim tests.
pub const NS: &str = "t";
/// The token the faults are scoped to (named `dispatcher` in the counters).
pub const DISPATCHER: &str = "dispatcher-token";
/// Long enough for anything that should happen at once.
pub const SECS: Duration = Duration::from_secs(10);

/// kube-sim (API only, bookmarks every 100 ms) and the proxy in front of it.
pub struct Rig {
    pub sim: SimHandle,
    pub proxy: ProxyHandle,
}

pub async fn rig_with(f: impl FnOnce(ProxyOptions) -> ProxyOptions) -> Rig {
    let sim = tcab_kube_sim::spawn(SimOptions {
        namespace: NS.into(),
        controller: false,
        timing: Timing {
            bookmark_interval: Duration::from_millis(100),
            ..Timing::default()
        },
        ..SimOptions::default()
    })
    .await
    .expect("kube-sim starts");
    let opts = ProxyOptions::new(UpstreamOptions {
        url: sim.url().into(),
        ca_pem: None,
    })
    .identity(DISPATCHER, "dispatcher");
    let proxy = tcab_api_proxy::spawn(f(opts))
        .await
        .expect("the proxy starts");
    Rig { sim, proxy }
}

pub async fn rig() -> Rig {
    rig_with(|o| o).await
}

impl Rig {
    /// kube-sim's admin client, pointed at the proxy.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(&self.proxy.admin_url())
    }
    /// kube-sim's admin client, pointed at kube-sim itself.
    pub fn sim_admin(&self) -> AdminClient {
        self.sim.admin()
    }
    /// The Jobs of [`NS`] through the proxy.
    pub fn jobs(&self) -> String {
        format!(
            "{}/apis/batch/v1/namespaces/{NS}/jobs",
            self.proxy.admin_url()
        )
    }
    /// The Jobs of [`NS`] on kube-sim itself.
    pub fn sim_jobs(&self) -> String {
        format!("{}/apis/batch/v1/namespaces/{NS}/jobs", self.sim.url())
    }
    /// The proxy's counters as JSON (the per-identity ones too).
    pub async fn counters(&self) -> Value {
        client()
            .get(format!("{}/admin/counters", self.proxy.admin_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
    /// Creates a Job on kube-sim directly (admin token); returns its
    /// resourceVersion.
    pub async fn create_job(&self, name: &str) -> String {
        let r = client()
            .post(self.sim_jobs())
            .bearer_auth(self.sim.admin_token())
            .json(&job(name))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "creating {name}");
        let v: Value = r.json().await.unwrap();
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A minimal valid Job.
pub fn job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1"}]}}}
    })
}

/// An answer as a test compares it: status, the headers that matter, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub content_type: Option<String>,
    pub body: String,
}

pub async fn answer(rb: reqwest::RequestBuilder) -> Answer {
    let r = rb.send().await.unwrap();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (retry_after, content_type) = (h("retry-after"), h("content-type"));
    Answer {
        status: r.status().as_u16(),
        retry_after,
        content_type,
        body: r.text().await.unwrap(),
    }
}

/// What a watch stream gave: a line, its clean end, or its breaking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Line(String),
    End,
    Broken(String),
}

/// Opens a watch (or any streamed GET) and reads it line by line in a task.
/// Panics unless it answers 200.
pub async fn watch_lines(rb: reqwest::RequestBuilder) -> UnboundedReceiver<Seen> {
    let mut r = rb.send().await.unwrap();
    assert_eq!(r.status(), 200, "the watch opens");
    let (tx, rx) = unbounded_channel();
    tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            match r.chunk().await {
                Ok(Some(c)) => {
                    buf.extend_from_slice(&c);
                    while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=i).collect();
                        let line = String::from_utf8_lossy(&line).trim().to_string();
                        if tx.send(Seen::Line(line)).is_err() {
                            return;
                        }
                    }
                }
                Ok(None) => {
                    let _ = tx.send(Seen::End);
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Seen::Broken(format!("{e:?}")));
                    return;
                }
            }
        }
    });
    rx
}

/// Reads until `pred` holds for something seen (returning it) or `limit`
/// passes (panicking with everything seen).
pub async fn until_seen(
    rx: &mut UnboundedReceiver<Seen>,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Seen) -> bool,
) -> (Seen, Vec<Seen>) {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(limit, async {
        while let Some(s) = rx.recv().await {
            if pred(&s) {
                return Some(s);
            }
            seen.push(s);
        }
        None
    })
    .await;
    match found {
        Ok(Some(s)) => (s, seen),
        _ => panic!("no {what} within {limit:?}; seen: {seen:?}"),
    }
}

/// The watch event of a line: (type, object name, resourceVersion).
pub fn event(s: &Seen) -> Option<(String, String, String)> {
    let Seen::Line(l) = s else { return None };
    let v: Value = serde_json::from_str(l).ok()?;
    Some((
        v["type"].as_str()?.to_string(),
        v["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        v["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    ))
}

/// Whether `s` is the event `etype` of the object `name`.
pub fn is_event(s: &Seen, etype: &str, name: &str) -> bool {
    event(s).is_some_and(|(t, n, _)| t == etype && n == name)
}
