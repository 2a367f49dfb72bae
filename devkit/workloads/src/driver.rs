//! The fake driver and fake publisher: what runs in the pods of tcab's
//! driver and publisher Jobs. They follow docs/job-contract.md: env from the
//! pod spec, reports to the backend with the per-job token, a sandbox pod,
//! logs, SIGTERM handling, and a script from the `sim` key of the request.
//! Every duration is on the [`Host`]'s clock.

use crate::{Host, sleep_unless_terminated};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

/// The `sim` script of a launch (or publish) request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct Script {
    /// Total time spread over the four working states.
    pub duration_ms: u64,
    /// `succeeded` or `failed` (an agent failure).
    pub outcome: String,
    /// Exit 1 right after reporting this state, with no cleanup.
    pub crash_at: Option<String>,
    /// Never finish on its own.
    pub hang: bool,
    /// Create a sandbox pod.
    pub sandbox: bool,
    /// Hand over a record before storing (and on SIGTERM).
    pub record: bool,
    /// Log lines written per state.
    pub log_lines: u32,
    /// Ignore SIGTERM (a driver stuck in a call that never returns): it
    /// goes on until the kubelet's SIGKILL at the end of the grace period,
    /// with no handover and no report.
    pub ignore_sigterm: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            duration_ms: 1000,
            outcome: "succeeded".into(),
            crash_at: None,
            hang: false,
            sandbox: true,
            record: true,
            log_lines: 1,
            ignore_sigterm: false,
        }
    }
}

impl Script {
    /// Reads the script from a serialized request; defaults when absent.
    pub fn from_request(request: Option<&str>) -> Self {
        request
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .and_then(|v| serde_json::from_value(v.get("sim")?.clone()).ok())
            .unwrap_or_default()
    }
}

/// Why a backend call did not land.
#[derive(Debug)]
enum CallError {
    /// 401: the token is no longer accepted.
    Refused,
    /// 409: the job is in another state.
    Conflict,
    /// Anything else, after the retries.
    Failed(String),
}

/// A backend client with the per-job token, retrying like the real driver.
struct Backend<'a, H> {
    host: &'a H,
    base: String,
    token: String,
}

impl<H: Host> Backend<'_, H> {
    /// Posts with a few retries (short back-off) on errors other than 401/409.
    async fn post(&self, path: &str, body: Value) -> Result<(), CallError> {
        self.post_until(path, body, None).await
    }

    /// Posts, retrying errors other than 401/409: a few times, or, with a
    /// deadline (on the host's clock), until it passes, with back-off capped at 1 s.
    async fn post_until(
        &self,
        path: &str,
        body: Value,
        deadline: Option<Duration>,
    ) -> Result<(), CallError> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let started = self.host.now();
        let mut last = String::new();
        for attempt in 0u32.. {
            if attempt > 0 {
                let out_of_time = match deadline {
                    Some(d) => self.host.now().duration_since(started).unsigned_abs() >= d,
                    None => attempt >= 4,
                };
                if out_of_time {
                    break;
                }
                let pause = Duration::from_millis((50u64 << attempt.min(5)).min(1000));
                self.host.sleep(pause).await;
            }
            let res = self
                .host
                .http()
                .post(&url)
                .bearer_auth(&self.token)
                .json(&body)
                .send()
                .await;
            match res {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if r.status().as_u16() == 401 => return Err(CallError::Refused),
                Ok(r) if r.status().as_u16() == 409 => return Err(CallError::Conflict),
                Ok(r) => last = format!("HTTP {}", r.status()),
                Err(e) => last = format!("transport: {e}"),
            }
        }
        Err(CallError::Failed(last))
    }
}

const STATES: [&str; 4] = ["starting", "running", "validating", "storing"];

/// A sandbox pod the driver made: namespace and name.
type Sandbox = Option<(String, String)>;

/// Runs the fake driver; returns the container's exit code.
pub async fn run_driver<H: Host>(ctx: &H) -> i32 {
    let (Some(base), Some(id), Some(token)) = (
        ctx.env("TCAB_BACKEND_URL"),
        ctx.env("TCAB_JOB_ID"),
        ctx.env("TCAB_JOB_TOKEN"),
    ) else {
        ctx.log("fatal: TCAB_BACKEND_URL, TCAB_JOB_ID and TCAB_JOB_TOKEN are required");
        return 2;
    };
    let script = Script::from_request(ctx.env("TCAB_LAUNCH_REQUEST").as_deref());
    let managed_by = ctx
        .env("TCAB_DRIVER_MANAGED_BY")
        .unwrap_or_else(|| "tcab-driver".into());
    let sandbox_ns = ctx
        .env("TCAB_K8S_NAMESPACE")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.namespace().to_string());
    let report_deadline = ctx
        .env("TCAB_DRIVER_REPORT_DEADLINE_SECONDS")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let backend = Backend {
        host: ctx,
        base,
        token,
    };
    let status_path = format!("/jobs/{id}/status");
    let per_state = Duration::from_millis(script.duration_ms / STATES.len() as u64);
    let mut sandbox: Sandbox = None;
    let mut reached = "dispatched";
    ctx.log(&format!("fake driver for job {id} starting"));
    for state in STATES {
        if ctx.terminated() && !script.ignore_sigterm {
            return on_sigterm(ctx, &backend, &id, &script, reached, &sandbox).await;
        }
        if state == "storing" && script.record {
            let _ = backend
                .post(&format!("/jobs/{id}/record"), record(reached))
                .await;
        }
        match backend.post(&status_path, json!({"state": state})).await {
            Ok(()) => {}
            Err(CallError::Refused) => {
                ctx.log(&format!(
                    "report {state} refused (401): the job was handed to another claim; exiting"
                ));
                delete_sandbox(ctx, &sandbox).await;
                return 1;
            }
            Err(CallError::Conflict) => {
                ctx.log(&format!("report {state} answered 409; carrying on"))
            }
            Err(CallError::Failed(why)) => {
                ctx.log(&format!("report {state} failed ({why}); carrying on"))
            }
        }
        reached = state;
        ctx.log(&format!("state {state}"));
        if state == "starting" && script.sandbox {
            sandbox = create_sandbox(ctx, &id, &managed_by, &sandbox_ns).await;
        }
        if script.crash_at.as_deref() == Some(state) {
            ctx.log(&format!("crashing in state {state}"));
            return 1;
        }
        for n in 0..script.log_lines {
            ctx.log(&format!("{state}: step {}/{}", n + 1, script.log_lines));
        }
        if script.hang && state == "running" {
            ctx.log("hanging");
            ctx.sigterm().await;
            if script.ignore_sigterm {
                ctx.log("received SIGTERM; ignoring it");
                std::future::pending::<()>().await;
            }
            return on_sigterm(ctx, &backend, &id, &script, reached, &sandbox).await;
        }
        if !pause(ctx, &script, per_state).await {
            return on_sigterm(ctx, &backend, &id, &script, reached, &sandbox).await;
        }
    }
    delete_sandbox(ctx, &sandbox).await;
    let body = if script.outcome == "failed" {
        json!({"state": "failed", "failure_kind": "agent", "detail": "the agent failed (scripted)"})
    } else {
        json!({"state": "succeeded"})
    };
    match backend
        .post_until(&status_path, body, report_deadline)
        .await
    {
        Ok(()) => {
            ctx.log(&format!("reported {}; exiting", script.outcome));
            0
        }
        Err(e) => {
            ctx.log(&format!("terminal report did not land: {e:?}"));
            1
        }
    }
}

/// Sleeps `d` on the host's clock; `false` when SIGTERM cut it short
/// (never, for a script that ignores SIGTERM).
async fn pause<H: Host>(ctx: &H, script: &Script, d: Duration) -> bool {
    if !script.ignore_sigterm {
        return sleep_unless_terminated(ctx, d).await;
    }
    let was_terminated = ctx.terminated();
    tokio::select! {
        _ = ctx.sleep(d) => {}
        _ = async {
            ctx.sigterm().await;
            if !was_terminated {
                ctx.log("received SIGTERM; ignoring it");
            }
            std::future::pending::<()>().await
        } => {}
    }
    true
}

fn record(reached: &str) -> Value {
    json!({"state_reached": reached, "record": {"score": 0.5, "tests_passed": 1, "tests_total": 2}})
}

async fn on_sigterm<H: Host>(
    ctx: &H,
    backend: &Backend<'_, H>,
    id: &str,
    script: &Script,
    reached: &str,
    sandbox: &Sandbox,
) -> i32 {
    ctx.log(&format!(
        "received SIGTERM in state {reached}; handing over"
    ));
    if script.record {
        let _ = backend
            .post(&format!("/jobs/{id}/record"), record(reached))
            .await;
    }
    let body = json!({"state": "failed", "failure_kind": "infrastructure",
        "detail": format!("driver terminated (SIGTERM) in state {reached}")});
    if let Err(e) = backend.post(&format!("/jobs/{id}/status"), body).await {
        ctx.log(&format!("failed report did not land: {e:?}"));
    }
    delete_sandbox(ctx, sandbox).await;
    143
}

async fn create_sandbox<H: Host>(ctx: &H, id: &str, managed_by: &str, ns: &str) -> Sandbox {
    let pod = json!({
        "metadata": {
            "generateName": "tcab-sandbox-",
            "labels": {"tcab.dev/job-id": id, "app.kubernetes.io/managed-by": managed_by},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "sandbox", "image": "tcab-sandbox:sim"}]},
    });
    match ctx.create_pod(ns, pod).await {
        Ok(name) => {
            ctx.log(&format!("created sandbox pod {ns}/{name}"));
            Some((ns.to_string(), name))
        }
        Err(message) => {
            ctx.log(&format!("could not create the sandbox pod: {message}"));
            None
        }
    }
}

async fn delete_sandbox<H: Host>(ctx: &H, sandbox: &Sandbox) {
    if let Some((ns, name)) = sandbox {
        match ctx.delete_pod(ns, name).await {
            Ok(()) => ctx.log(&format!("deleted sandbox pod {ns}/{name}")),
            Err(message) => ctx.log(&format!(
                "could not delete sandbox pod {ns}/{name}: {message}"
            )),
        }
    }
}

/// Runs the fake publisher; returns the container's exit code.
pub async fn run_publisher<H: Host>(ctx: &H) -> i32 {
    let (Some(base), Some(id), Some(token)) = (
        ctx.env("TCAB_BACKEND_URL"),
        ctx.env("TCAB_PUBLISH_JOB_ID"),
        ctx.env("TCAB_JOB_TOKEN"),
    ) else {
        ctx.log("fatal: TCAB_BACKEND_URL, TCAB_PUBLISH_JOB_ID and TCAB_JOB_TOKEN are required");
        return 2;
    };
    let script = Script::from_request(ctx.env("TCAB_PUBLISH_REQUEST").as_deref());
    let backend = Backend {
        host: ctx,
        base,
        token,
    };
    let path = format!("/publish-jobs/{id}/result");
    ctx.log(&format!("fake publisher for publish job {id} starting"));
    for n in 0..script.log_lines {
        ctx.log(&format!("publishing: step {}/{}", n + 1, script.log_lines));
    }
    let finished = if script.hang {
        ctx.sigterm().await;
        false
    } else {
        sleep_unless_terminated(ctx, Duration::from_millis(script.duration_ms)).await
    };
    if script.crash_at.is_some() {
        ctx.log("crashing before the result");
        return 1;
    }
    let (body, code) = if finished {
        let detail = if script.outcome == "failed" {
            "publish failed (scripted)"
        } else {
            "released (sim)"
        };
        (json!({"outcome": script.outcome, "detail": detail}), 0)
    } else {
        ctx.log("received SIGTERM; reporting a failed result");
        (
            json!({"outcome": "failed", "detail": "publisher terminated (SIGTERM)"}),
            143,
        )
    };
    match backend.post(&path, body).await {
        Ok(()) => {
            ctx.log("result posted");
            code
        }
        Err(CallError::Refused) => {
            ctx.log("result refused (401); exiting");
            1
        }
        Err(e) => {
            ctx.log(&format!("result did not land: {e:?}"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_defaults_and_overrides() {
        assert_eq!(Script::from_request(None), Script::default());
        assert_eq!(Script::from_request(Some("not json")), Script::default());
        let s = Script::from_request(Some(
            r#"{"case":"x","sim":{"duration_ms":10,"outcome":"failed","crash_at":"running"}}"#,
        ));
        assert_eq!(
            (
                s.duration_ms,
                s.outcome.as_str(),
                s.crash_at.as_deref(),
                s.sandbox
            ),
            (10, "failed", Some("running"), true)
        );
        assert!(!s.ignore_sigterm);
        let s = Script::from_request(Some(r#"{"sim":{"hang":true,"ignore_sigterm":true}}"#));
        assert!(s.hang && s.ignore_sigterm);
    }
}
