//! Helpers shared by the end-to-end tests: a stack in a temporary directory,
//! scripted runs, and waits on observable conditions (never bare sleeps).

#![allow(dead_code)]

pub mod chart;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
pub use tcab_devstack::ClusterKind;
use tcab_devstack::{AdminError, ClusterAdmin, Container, Stack, StackOptions, wait_for};

/// Makes two tests of one `async fn $name(kind: ClusterKind)`: `$name::sim`
/// on kube-sim and `$name::real` on the real control plane (one SKIP line
/// when it is not built; a failure instead with
/// `TCAB_REAL_CLUSTER_REQUIRED=1`). The test files declare `#[macro_use] mod
/// common;`.
#[allow(unused_macros)]
macro_rules! on_both_clusters {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sim() {
                    super::$name($crate::common::ClusterKind::Sim).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn real() {
                    if tcab_real_cluster::built_or_skip().is_none() {
                        return;
                    }
                    super::$name($crate::common::ClusterKind::Real).await;
                }
            }
        )+
    };
}

/// `sim` on kube-sim, `real` on the real control plane: the limits of a
/// test whose waits depend on the cluster's timelines (kube-sim runs its
/// graces and controllers at `--speed`; the real one in real time, with the
/// launcher's short timings).
pub fn pick<T>(kind: ClusterKind, sim: T, real: T) -> T {
    match kind {
        ClusterKind::Sim => sim,
        ClusterKind::Real => real,
    }
}

/// A stack in a fresh temporary directory (kept on failure for its logs).
/// Dropping it fails the test when the dispatcher was refused by RBAC (a
/// 403 in a container's log, or in the real API server's audit log).
pub struct TestStack {
    pub stack: Stack,
    pub dir: tempfile::TempDir,
    /// Whether the test takes RBAC refusals away on purpose and checks
    /// each one itself ([`TestStack::expect_forbidden`]).
    forbidden_expected: bool,
}

/// Who runs the dispatcher in a test: the stack's own processes (a
/// container that exited fails the test) or the chart's pod, run by the
/// node agent (the stack starts no container).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunBy {
    Processes,
    Chart,
}

impl Drop for TestStack {
    fn drop(&mut self) {
        if std::thread::panicking() || self.forbidden_expected {
            return;
        }
        let forbidden = self.stack.forbidden();
        if !forbidden.is_empty() {
            panic!(
                "the dispatcher was refused by RBAC (the chart's Role must grant what it does):\n{}",
                forbidden.join("\n")
            );
        }
    }
}

impl TestStack {
    pub async fn start(kind: ClusterKind, tune: impl FnOnce(&mut StackOptions)) -> TestStack {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut options = StackOptions::new(dir.path());
        options.cluster = kind;
        options.poll_seconds = 0.1;
        tune(&mut options);
        let stack = Stack::start(options).await.expect("the dev stack starts");
        TestStack {
            stack,
            dir,
            forbidden_expected: false,
        }
    }

    /// The test takes permissions away on purpose and checks every 403 it
    /// meets itself: dropping the stack then no longer fails on one.
    pub fn expect_forbidden(&mut self) {
        self.forbidden_expected = true;
    }

    pub fn admin(&self) -> ClusterAdmin {
        self.stack.admin()
    }

    /// The cluster the stack runs on.
    pub fn kind(&self) -> ClusterKind {
        self.stack.kind()
    }

    /// [`pick`] for this stack's cluster.
    pub fn pick<T>(&self, sim: T, real: T) -> T {
        pick(self.kind(), sim, real)
    }

    /// The dispatcher's namespace (random on the real control plane).
    pub fn ns(&self) -> String {
        self.stack.namespace().to_owned()
    }

    /// The token the dispatcher presents (what its fault rules name).
    pub fn dispatcher_token(&self) -> String {
        self.stack.dispatcher_token.clone()
    }

    /// The value of an admin call; `None` after printing one `SKIP:` line
    /// when the call has no equivalent on this cluster (the rest of the
    /// test decides whether to go on without it). Panics on any other
    /// failure.
    pub fn supported<T>(&self, what: &str, result: Result<T, AdminError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => match e.unsupported() {
                Some(why) => {
                    println!("SKIP: {what} on the {} cluster: {why}", self.kind());
                    None
                }
                None => self.fail(format!("{what}: {e}")),
            },
        }
    }

    /// The last lines of every container's log, for a failure message (none
    /// of a container the stack did not start, e.g. under the chart).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for c in Container::ALL {
            let log = self.stack.log(c);
            if log.is_empty() {
                continue;
            }
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

    /// Waits until every run and publish the backend knows is terminal;
    /// with the dispatcher run by the stack's processes, fails the test if
    /// one of them exited meanwhile.
    pub async fn drained(&mut self, limit: Duration, by: RunBy) -> (Vec<Value>, Vec<Value>) {
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
        if by == RunBy::Processes
            && let Err(e) = self.stack.check_alive()
        {
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
            .filter(|j| !job_finished(j))
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
    /// The cluster's whole audit timeline (every Pod and Job change, with
    /// who made it): kube-sim's, or the real API server's audit log of the
    /// stack's namespaces.
    pub async fn audit(&self) -> Vec<tcab_kube_sim::audit::AuditEntry> {
        self.admin()
            .audit()
            .await
            .unwrap_or_else(|e| self.fail(format!("reading the audit: {e}")))
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

/// Whether a Job has finished (Complete or Failed).
pub fn job_finished(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
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

/// The label selector of the dispatcher's own pods (driver or publisher) of one backend job.
pub fn own_pods_selector(id: &str) -> String {
    format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-dispatcher")
}

/// The lines of a log that contain every one of `parts`.
pub fn lines_with<'a>(log: &'a str, parts: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

impl TestStack {
    /// The dispatcher's pods (driver or publisher) of one backend job.
    pub async fn own_pods(&self, id: &str) -> Vec<Value> {
        let ns = self.stack.options.namespace.clone();
        self.stack
            .cluster
            .pods(&ns, Some(&own_pods_selector(id)))
            .await
            .expect("list pods")
    }

    /// The Jobs of one backend job.
    pub async fn jobs_of(&self, id: &str) -> Vec<Value> {
        self.stack
            .cluster
            .jobs(Some(&format!("tcab.dev/job-id={id}")))
            .await
            .expect("list jobs")
    }

    /// The core v1 Events of the stack's namespace that `selector` (a
    /// field selector) picks, as `kubectl get events --field-selector`
    /// lists them.
    pub async fn events(&self, selector: &str) -> Vec<Value> {
        let ns = self.stack.options.namespace.clone();
        let selector: String = selector
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let list = self
            .stack
            .cluster
            .get(&format!(
                "/api/v1/namespaces/{ns}/events?fieldSelector={selector}"
            ))
            .await
            .expect("list events");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the dispatcher's Event `reason` about a Job of run `id`
    /// (its note names `job <id>`) is listed; returns it, after checking
    /// that it is about a Job, found by that Job's name too (as `kubectl
    /// describe job` and `--field-selector involvedObject.name=` find it,
    /// also once the Job is gone), from the container `by`.
    pub async fn job_event(&self, id: &str, reason: &str, by: &str, limit: Duration) -> Value {
        let needle = format!("job {id} ");
        let event = wait_for(
            &format!("a {reason} Event about run {id}"),
            limit,
            || async {
                let found = self
                    .events(&format!("reason={reason}"))
                    .await
                    .into_iter()
                    .find(|e| e["message"].as_str().is_some_and(|m| m.contains(&needle)));
                Ok(found)
            },
        )
        .await
        .unwrap_or_else(|e| self.fail(format!("run {id}: {e}")));
        let about = &event["involvedObject"];
        let job = about["name"].as_str().unwrap_or_default().to_owned();
        if about["kind"] != "Job" || about["namespace"] != self.ns().as_str() || job.is_empty() {
            self.fail(format!(
                "{reason} is not about a Job of this namespace: {event}"
            ));
        }
        if event["reportingComponent"] != format!("tcab.dev/{by}")
            || event["reportingInstance"]
                .as_str()
                .is_none_or(str::is_empty)
            || event["eventTime"].is_null()
        {
            self.fail(format!(
                "{reason}: not the {by}'s events.k8s.io Event: {event}"
            ));
        }
        let by_name = self.events(&format!("involvedObject.name={job}")).await;
        if !by_name
            .iter()
            .any(|e| e["metadata"]["name"] == event["metadata"]["name"])
        {
            self.fail(format!(
                "{reason} not found by its Job's name {job}: {by_name:?}"
            ));
        }
        event
    }

    /// The sandbox pods of one backend job.
    pub async fn sandboxes_of(&self, id: &str) -> Vec<Value> {
        self.sandboxes()
            .await
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["tcab.dev/job-id"] == id)
            .collect()
    }

    /// Waits until the backend's run `id` satisfies `done`; returns it.
    pub async fn run_until(
        &self,
        id: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let backend = self.stack.backend.clone();
        wait_for(what, limit, || {
            let backend = backend.clone();
            let done = &done;
            async move {
                let j = backend.job(id).await?;
                Ok(done(&j).then_some(j))
            }
        })
        .await
        .unwrap_or_else(|e| self.fail(format!("run {id}: {e}")))
    }

    /// Waits until the backend's publish `id` satisfies `done`; returns it.
    pub async fn publish_until(
        &self,
        id: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let backend = self.stack.backend.clone();
        wait_for(what, limit, || {
            let backend = backend.clone();
            let done = &done;
            async move {
                let j = backend.publish_job(id).await?;
                Ok(done(&j).then_some(j))
            }
        })
        .await
        .unwrap_or_else(|e| self.fail(format!("publish {id}: {e}")))
    }

    /// Waits until run `id`'s driver has reported `running` and its pod runs
    /// with its sandbox made; returns the driver pod.
    pub async fn running_driver(&self, id: &str, limit: Duration) -> Value {
        self.run_until(id, "the driver to report running", limit, |j| {
            j["state"] == "running"
        })
        .await;
        wait_for("the driver pod and its sandbox", limit, || async {
            let running = self
                .own_pods(id)
                .await
                .into_iter()
                .find(|p| p["status"]["phase"] == "Running");
            let sandbox = !self.sandboxes_of(id).await.is_empty();
            Ok(running.filter(|_| sandbox))
        })
        .await
        .unwrap_or_else(|e| self.fail(e))
    }

    /// Waits until no sandbox of `id` is left (or each is terminating) and
    /// the reaper has logged reaping one of them.
    pub async fn sandboxes_reaped(&self, id: &str, limit: Duration) {
        let needle = format!("job_id={id}");
        wait_for("the sandbox reaped", limit, || async {
            let left = self
                .sandboxes_of(id)
                .await
                .iter()
                .any(|p| p["metadata"]["deletionTimestamp"].is_null());
            let logged = !lines_with(
                &self.stack.log(Container::Reaper),
                &["reaped sandbox pod", &needle],
            )
            .is_empty();
            Ok((!left && logged).then_some(()))
        })
        .await
        .unwrap_or_else(|e| self.fail(format!("run {id}: {e}")));
    }

    /// Whether the reaper ever reaped a sandbox of `id`.
    pub fn reaped_any_of(&self, id: &str) -> bool {
        !lines_with(
            &self.stack.log(Container::Reaper),
            &["reaped sandbox pod", &format!("job_id={id}")],
        )
        .is_empty()
    }
}

/// The order of each admission, read from the records of the three parties
/// it touches rather than from the dispatcher's logs: the backend's history
/// (the claim), the vault recorder between the admitter and the lease-keeper
/// (the token's `Put`), and the API server (the Job's create and the stale
/// Jobs' deletes: its audit log on the real cluster, kube-sim's timeline on
/// the simulated one).
impl TestStack {
    /// The dispatcher's creates and deletes of Jobs and Pods, as the API
    /// server received and answered them.
    pub async fn dispatcher_writes(&self) -> Vec<tcab_devstack::timeline::Write> {
        self.admin()
            .dispatcher_writes()
            .await
            .unwrap_or_else(|e| self.fail(format!("reading the dispatcher's writes: {e}")))
    }

    /// For every Job the dispatcher created: the backend's history shows its
    /// claim (the job `dispatched` under the Job's claim tag), the vault's
    /// `Put` of that claim reached the recorder after the claim, and the
    /// lease-keeper's answer to it went back before the API server received
    /// the Job's create. Returns how many Jobs were checked.
    pub async fn assert_tokens_put_before_creates(
        &self,
        recorder: &tcab_devstack::vault_recorder::VaultRecorder,
    ) -> usize {
        let writes = self.dispatcher_writes().await;
        let audit = self.audit().await;
        let history = self
            .stack
            .backend
            .history()
            .await
            .unwrap_or_else(|e| self.fail(format!("reading the backend's history: {e}")));
        let mut seen = std::collections::BTreeSet::new();
        for create in writes
            .iter()
            .filter(|w| w.verb == "create" && w.kind == "Job")
        {
            if !seen.insert(create.name.clone()) {
                continue;
            }
            let labels = audit
                .iter()
                .find(|e| e.kind == "Job" && e.name == create.name && e.event == "ADDED")
                .map(|e| e.labels.clone())
                .unwrap_or_else(|| self.fail(format!("no ADDED entry of {create:?}")));
            let (Some(id), Some(claim)) =
                (labels.get("tcab.dev/job-id"), labels.get("tcab.dev/claim"))
            else {
                self.fail(format!("Job {} without its job id or claim", create.name));
            };
            let claimed = history
                .entries
                .iter()
                .find(|e| {
                    e.job_id == *id && e.state == "dispatched" && e.claim.as_deref() == Some(claim)
                })
                .and_then(|e| e.wall_at);
            let puts = recorder.puts_of(id, claim);
            let context = || {
                format!(
                    "Job {} (job {id}, claim {claim}): claimed at {claimed:?}, created {create:?}, puts {puts:#?}, every vault call {:#?}",
                    create.name,
                    recorder.calls()
                )
            };
            let Some(claimed) = claimed else {
                self.fail(format!("no claim in the backend's history: {}", context()));
            };
            let Some(first) = puts.iter().min_by_key(|p| p.answered) else {
                self.fail(format!("no Put the lease-keeper accepted: {}", context()));
            };
            if first.received < claimed {
                self.fail(format!("a Put before its claim: {}", context()));
            }
            if first.answered > create.received {
                self.fail(format!(
                    "the Job's create reached the API server before the vault's Put was answered: {}",
                    context()
                ));
            }
        }
        seen.len()
    }

    /// The dispatcher's delete of Job `stale` was answered before the API
    /// server received its create of Job `new`.
    pub async fn assert_deleted_before_created(&self, stale: &str, new: &str) {
        let writes = self.dispatcher_writes().await;
        let find = |verb: &str, name: &str| {
            writes
                .iter()
                .find(|w| w.verb == verb && w.kind == "Job" && w.name == name)
                .cloned()
        };
        let (Some(delete), Some(create)) = (find("delete", stale), find("create", new)) else {
            self.fail(format!(
                "the delete of {stale} or the create of {new} is not among the dispatcher's writes: {writes:#?}"
            ));
        };
        if delete.completed > create.received {
            self.fail(format!(
                "the stale Job's delete was not answered before the new Job's create was received: {delete:?}, {create:?}"
            ));
        }
    }
}
