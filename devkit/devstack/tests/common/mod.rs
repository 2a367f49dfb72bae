//! Helpers shared by the end-to-end tests: a stack in a temporary directory,
//! scripted runs, and waits on observable conditions (never bare sleeps).

#![allow(dead_code)]

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tcab_devstack::{Container, Stack, StackOptions, wait_for};
use tcab_kube_sim::AdminClient;

/// A stack in a fresh temporary directory (kept on failure for its logs).
pub struct TestStack {
    pub stack: Stack,
    pub dir: tempfile::TempDir,
}

impl TestStack {
    pub async fn start(tune: impl FnOnce(&mut StackOptions)) -> TestStack {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut options = StackOptions::new(dir.path());
        options.poll_seconds = 0.1;
        tune(&mut options);
        let stack = Stack::start(options).await.expect("the dev stack starts");
        TestStack { stack, dir }
    }

    pub fn admin(&self) -> AdminClient {
        AdminClient::new(self.stack.cluster.url())
    }

    /// The last lines of every container's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for c in Container::ALL {
            let log = self.stack.log(c);
            let lines: Vec<&str> = log.lines().collect();
            out.push_str(&format!("\n--- {} (last 25 lines) ---\n", c.binary()));
            out.push_str(&lines[lines.len().saturating_sub(25)..].join("\n"));
        }
        out
    }

    /// Panics with the logs attached.
    pub fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!("{what}{}", self.logs())
    }

    /// Waits until every run and publish the backend knows is terminal.
    pub async fn drained(&mut self, limit: Duration) -> (Vec<Value>, Vec<Value>) {
        let backend = self.stack.backend.clone();
        let result = wait_for("every job terminal", limit, || {
            let backend = backend.clone();
            async move {
                let runs = backend.jobs().await?;
                let pubs = backend.publish_jobs().await?;
                let done = runs
                    .iter()
                    .chain(pubs.iter())
                    .all(|j| terminal(&j["state"]));
                Ok(done.then_some((runs, pubs)))
            }
        })
        .await;
        if let Err(e) = self.stack.check_alive() {
            self.fail(e);
        }
        match result {
            Ok(v) => v,
            Err(e) => {
                let runs = self.stack.backend.jobs().await.unwrap_or_default();
                self.fail(format!("{e}; states: {}", states(&runs)))
            }
        }
    }

    /// Every Job in the namespace, grouped by backend job id.
    pub async fn jobs_by_id(&self) -> BTreeMap<String, Vec<String>> {
        let jobs = self.stack.cluster.jobs(None).await.expect("list jobs");
        let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for j in jobs {
            let id = j["metadata"]["labels"]["tcab.dev/job-id"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            by_id
                .entry(id)
                .or_default()
                .push(j["metadata"]["name"].as_str().unwrap_or("").to_owned());
        }
        by_id
    }

    /// Whether every driven run that has a live Job holds a lease reaching at
    /// least `margin_s` past the backend's `now`: the lease-keeper renewed at
    /// the backend's current time.
    pub async fn leases_renewed(&self, margin_s: i64) -> anyhow::Result<bool> {
        let active = self.stack.backend.active_runs().await?;
        let now: jiff::Timestamp = active["now"].as_str().unwrap_or_default().parse()?;
        let live: std::collections::BTreeSet<String> = self
            .stack
            .cluster
            .jobs(None)
            .await?
            .iter()
            .filter(|j| {
                !j["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                    })
                })
            })
            .filter_map(|j| {
                j["metadata"]["labels"]["tcab.dev/job-id"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        for job in active["jobs"].as_array().cloned().unwrap_or_default() {
            let id = job["id"].as_str().unwrap_or_default();
            if !live.contains(id) {
                continue;
            }
            let lease: jiff::Timestamp = job["lease_expires_at"]
                .as_str()
                .unwrap_or_default()
                .parse()?;
            if lease < now + jiff::SignedDuration::from_secs(margin_s) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sandbox pods (driver-managed) left in the namespace.
    pub async fn sandboxes(&self) -> Vec<Value> {
        let ns = self.stack.options.sandbox_namespace.clone();
        self.stack
            .cluster
            .pods(&ns, Some("app.kubernetes.io/managed-by=tcab-driver"))
            .await
            .expect("list pods")
    }
}

impl TestStack {
    /// kube-sim's whole audit timeline (every Pod and Job change, with who
    /// made it).
    pub async fn audit(&self) -> Vec<tcab_kube_sim::audit::AuditEntry> {
        let mut entries = Vec::new();
        loop {
            let after = entries
                .last()
                .map_or(0, |e: &tcab_kube_sim::audit::AuditEntry| e.seq);
            let page = self
                .admin()
                .audit(after)
                .await
                .unwrap_or_else(|e| self.fail(format!("reading the audit: {e}")));
            assert_eq!(page.dropped, 0, "the audit timeline overflowed");
            if page.entries.is_empty() {
                return entries;
            }
            entries.extend(page.entries);
        }
    }

    /// The invariants checked over the cluster's and the backend's records
    /// (see `tcab_devstack::invariants`).
    pub async fn verdict(&self) -> tcab_devstack::invariants::Verdict {
        let cluster = self.audit().await;
        let backend = self
            .stack
            .backend
            .history()
            .await
            .unwrap_or_else(|e| self.fail(format!("reading the backend's history: {e}")));
        tcab_devstack::invariants::check(
            &cluster,
            &backend,
            &tcab_devstack::invariants::Settings::default(),
        )
    }
}

pub fn terminal(state: &Value) -> bool {
    matches!(state.as_str(), Some("succeeded" | "failed" | "cancelled"))
}

/// "state count, ..." for a list of jobs.
pub fn states(jobs: &[Value]) -> String {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for j in jobs {
        *m.entry(j["state"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    format!("{m:?}")
}

/// A run whose fake driver follows `sim`.
pub fn run(case: &str, sim: Value) -> Value {
    json!({
        "harness": "h",
        "model": "m",
        "case": case,
        "jam": null,
        "launch_request": {"case": case, "sim": sim},
    })
}
