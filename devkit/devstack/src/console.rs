//! Thin HTTP clients for what the dev stack and its tests drive: the reference
//! backend's console calls, and the cluster's API and admin endpoints (kube-sim,
//! or on the real control plane the fault proxy's plain-HTTP side).

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The reference backend's console calls (docs/backend-contract.md).
#[derive(Clone)]
pub struct Backend {
    http: reqwest::Client,
    url: String,
    token: String,
}

async fn answer(resp: reqwest::Response, what: &str) -> anyhow::Result<Value> {
    let status = resp.status();
    let text = resp
        .text()
        .await
        .with_context(|| format!("{what}: reading the answer"))?;
    if !status.is_success() {
        bail!("{what}: {status}: {text}");
    }
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).with_context(|| format!("{what}: answer is not JSON: {text}"))
}

impl Backend {
    /// A client for the backend at `url` with the service token.
    pub fn new(url: &str, token: &str) -> Self {
        Backend {
            http: http_client(),
            url: url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        }
    }

    /// The backend's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        answer(resp, &format!("{method} {path}")).await
    }

    /// Enqueues one run; returns its id.
    pub async fn enqueue_run(&self, run: Value) -> anyhow::Result<String> {
        let v = self.call(reqwest::Method::POST, "/jobs", Some(run)).await?;
        v["id"]
            .as_str()
            .map(str::to_owned)
            .context("enqueue answer has no id")
    }

    /// Enqueues a batch of runs in order; returns their ids in the same order.
    pub async fn enqueue_batch(&self, runs: Vec<Value>) -> anyhow::Result<Vec<String>> {
        let v = self
            .call(
                reqwest::Method::POST,
                "/jobs/batch",
                Some(json!({ "runs": runs })),
            )
            .await?;
        let ids = v["ids"].as_array().context("batch answer has no ids")?;
        Ok(ids
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect())
    }

    /// Enqueues one publish; returns its id.
    pub async fn enqueue_publish(&self, request: Value) -> anyhow::Result<String> {
        let v = self
            .call(
                reqwest::Method::POST,
                "/publish-jobs",
                Some(json!({ "request": request })),
            )
            .await?;
        v["id"]
            .as_str()
            .map(str::to_owned)
            .context("publish answer has no id")
    }

    /// Sets a harness's parallelism limit.
    pub async fn set_harness(&self, name: &str, max_parallel: u32) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/harnesses/{name}"),
            Some(json!({ "max_parallel": max_parallel })),
        )
        .await
        .map(drop)
    }

    /// A run as the backend sees it.
    pub async fn job(&self, id: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, &format!("/jobs/{id}"), None)
            .await
    }

    /// A publish as the backend sees it.
    pub async fn publish_job(&self, id: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, &format!("/publish-jobs/{id}"), None)
            .await
    }

    /// Every run (any state).
    pub async fn jobs(&self) -> anyhow::Result<Vec<Value>> {
        let v = self.call(reqwest::Method::GET, "/jobs", None).await?;
        Ok(v["jobs"].as_array().cloned().unwrap_or_default())
    }

    /// The runs in one state (`queued`, `running`, ...).
    pub async fn jobs_in_state(&self, state: &str) -> anyhow::Result<Vec<Value>> {
        let v = self
            .call(reqwest::Method::GET, &format!("/jobs?state={state}"), None)
            .await?;
        Ok(v["jobs"].as_array().cloned().unwrap_or_default())
    }

    /// The publishes in one state (`queued`, `dispatched`, ...).
    pub async fn publish_jobs_in_state(&self, state: &str) -> anyhow::Result<Vec<Value>> {
        let v = self
            .call(
                reqwest::Method::GET,
                &format!("/publish-jobs?state={state}"),
                None,
            )
            .await?;
        Ok(v["publish_jobs"].as_array().cloned().unwrap_or_default())
    }

    /// Every publish (any state).
    pub async fn publish_jobs(&self) -> anyhow::Result<Vec<Value>> {
        let v = self
            .call(reqwest::Method::GET, "/publish-jobs", None)
            .await?;
        Ok(v["publish_jobs"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /jobs/active`: the driven runs with their leases and the backend's `now`.
    pub async fn active_runs(&self) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, "/jobs/active", None).await
    }

    /// `GET /publish-jobs/active`: the dispatched publishes with their leases and the backend's `now`.
    pub async fn active_publishes(&self) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, "/publish-jobs/active", None)
            .await
    }

    /// Holds these run and publish ids as claimed and driven (`POST
    /// /admin/driven`, test admin only): a backend driving thousands of
    /// jobs without claiming each.
    pub async fn seed_driven(
        &self,
        runs: &[String],
        publish_jobs: &[String],
    ) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            "/admin/driven",
            Some(serde_json::json!({"runs": runs, "publish_jobs": publish_jobs})),
        )
        .await?;
        Ok(())
    }

    /// The calls the backend served per caller `User-Agent` and route
    /// (`GET /admin/calls`, test admin only); with `reset`, its counts start
    /// again from none (`POST`).
    pub async fn calls(
        &self,
        reset: bool,
    ) -> anyhow::Result<BTreeMap<String, BTreeMap<String, u64>>> {
        let method = if reset {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let v = self.call(method, "/admin/calls", None).await?;
        serde_json::from_value(v).context("/admin/calls: unreadable answer")
    }

    /// The backend's own record (`GET /admin/history`, test admin only):
    /// every history entry with its wall time, call, caller and claim tag,
    /// and the per-job calls refused for their token.
    pub async fn history(&self) -> anyhow::Result<crate::invariants::BackendRecord> {
        let mut record = crate::invariants::BackendRecord::default();
        loop {
            let after = record.entries.last().map_or(0, |e| e.seq);
            let v = self
                .call(
                    reqwest::Method::GET,
                    &format!("/admin/history?after={after}"),
                    None,
                )
                .await?;
            let page: crate::invariants::BackendRecord =
                serde_json::from_value(v).context("GET /admin/history: unreadable answer")?;
            record.refused = page.refused;
            if page.entries.is_empty() {
                return Ok(record);
            }
            record.entries.extend(page.entries);
        }
    }

    /// Injects a backend fault (`POST /admin/faults`): requests to `paths`
    /// (`*` = one segment) arriving in the next `seconds` are stalled (held,
    /// then applied) or answered 500.
    pub async fn add_fault(&self, paths: &[&str], mode: &str, seconds: f64) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            "/admin/faults",
            Some(json!({ "paths": paths, "mode": mode, "seconds": seconds })),
        )
        .await
        .map(drop)
    }

    /// Injects a backend fault given whole (`POST /admin/faults`), for the
    /// modes that take more than a window: `{"mode": "status", "status":
    /// 400, ...}`, `{"mode": "body", "body": {...}, "merge": true, ...}`.
    pub async fn add_fault_rule(&self, rule: Value) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/admin/faults", Some(rule))
            .await
            .map(drop)
    }

    /// The backend's open fault windows and the requests held now
    /// (`GET /admin/faults`).
    pub async fn faults(&self) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, "/admin/faults", None).await
    }

    /// Ends every backend fault window.
    pub async fn clear_faults(&self) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/admin/faults/clear", None)
            .await
            .map(drop)
    }

    /// Moves the backend's clock forward (needs `--enable-test-clock`).
    pub async fn advance_clock(&self, seconds: u64) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            "/admin/clock/advance",
            Some(json!({ "seconds": seconds })),
        )
        .await
        .map(drop)
    }
}

/// The simulated cluster: its Kubernetes API (with the admin token) and its
/// admin endpoints (faults, counters).
#[derive(Clone)]
pub struct Cluster {
    http: reqwest::Client,
    url: String,
    token: String,
    namespace: String,
}

impl Cluster {
    /// A client for the sim at `url`, acting with `token` in `namespace`.
    pub fn new(url: &str, token: &str, namespace: &str) -> Self {
        Cluster {
            http: http_client(),
            url: url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The sim's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// GET a path of the sim (API or admin), as JSON.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await?;
        answer(resp, &format!("GET {path}")).await
    }

    /// The names of the first `n` objects added to the collection at `path`
    /// after `resource_version` (a list's), in the order the API server
    /// stored them, read from a watch within `limit`. A list cannot tell
    /// that order: creation timestamps have a resolution of one second.
    pub async fn first_added(
        &self,
        path: &str,
        resource_version: &str,
        n: usize,
        limit: std::time::Duration,
    ) -> anyhow::Result<Vec<String>> {
        let url = format!(
            "{}{path}?watch=1&resourceVersion={}&timeoutSeconds={}",
            self.url,
            encode(resource_version),
            limit.as_secs().max(1)
        );
        let mut resp = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .timeout(limit)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            bail!(
                "WATCH {path}: {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        let mut names = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        while names.len() < n {
            let Some(chunk) = resp.chunk().await? else {
                bail!("WATCH {path}: ended after {} of {n} additions", names.len());
            };
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line)
                    .with_context(|| format!("WATCH {path}: an event that is not JSON"))?;
                match event["type"].as_str() {
                    Some("ADDED") => {
                        if let Some(name) = event["object"]["metadata"]["name"].as_str() {
                            names.push(name.to_owned());
                        }
                    }
                    Some("ERROR") => bail!("WATCH {path}: {}", event["object"]),
                    _ => {}
                }
            }
        }
        names.truncate(n);
        Ok(names)
    }

    /// GET a path of the sim as text (e.g. a pod's log).
    pub async fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("GET {path}: {status}: {text}");
        }
        Ok(text)
    }

    /// GET a path as text, with its status whatever it is (a pod's
    /// endpoint through the API server's pod proxy, say).
    pub async fn get_answer(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .with_context(|| format!("GET {path}: reading the answer"))?;
        Ok((status, text))
    }

    /// POST a JSON body to a path of the sim (API or admin).
    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let resp = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        answer(resp, &format!("POST {path}")).await
    }

    /// POST a JSON body and return the status with the answer, whatever the
    /// status (a refusal's `Status` body is what a caller reads).
    pub async fn post_answer(&self, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        let resp = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .with_context(|| format!("POST {path}: reading the answer"))?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }

    /// PATCH a path of the sim's API with a body of `content_type` (e.g.
    /// `application/strategic-merge-patch+json`, as kubectl sends it).
    pub async fn patch(
        &self,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let resp = self
            .http
            .patch(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_string())
            .send()
            .await?;
        answer(resp, &format!("PATCH {path}")).await
    }

    /// DELETE a path of the API with a body (`DeleteOptions`).
    pub async fn delete(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let resp = self
            .http
            .delete(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        answer(resp, &format!("DELETE {path}")).await
    }

    /// The namespace it acts in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Deletes a Job of the stack's namespace as `kubectl delete job` does,
    /// with `propagation` (`Background`, `Foreground` or `Orphan`, as
    /// `--cascade=background|foreground|orphan`).
    pub async fn delete_job(&self, name: &str, propagation: &str) -> anyhow::Result<Value> {
        let path = format!("/apis/batch/v1/namespaces/{}/jobs/{name}", self.namespace);
        let resp = self
            .http
            .delete(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&serde_json::json!({
                "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation
            }))
            .send()
            .await?;
        answer(resp, &format!("DELETE {path}")).await
    }

    /// Jobs in a namespace (default: the stack's), optionally selected by label.
    pub async fn jobs(&self, selector: Option<&str>) -> anyhow::Result<Vec<Value>> {
        self.list("/apis/batch/v1", "jobs", &self.namespace.clone(), selector)
            .await
    }

    /// Pods in a namespace, optionally selected by label.
    pub async fn pods(
        &self,
        namespace: &str,
        selector: Option<&str>,
    ) -> anyhow::Result<Vec<Value>> {
        self.list("/api/v1", "pods", namespace, selector).await
    }

    async fn list(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        selector: Option<&str>,
    ) -> anyhow::Result<Vec<Value>> {
        let mut url = format!("{}{group}/namespaces/{ns}/{resource}", self.url);
        if let Some(sel) = selector {
            url.push_str("?labelSelector=");
            url.push_str(&encode(sel));
        }
        let req = self.http.get(url).bearer_auth(&self.token);
        let v = answer(req.send().await?, &format!("list {resource}")).await?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }
}

fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(15))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
