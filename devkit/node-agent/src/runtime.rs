//! What runs in a container: the seam between the kubelet's pod worker and
//! the program.
//!
//! The worker's contract with a container is small: it is started with its
//! resolved env, a log to write to and a SIGTERM signal (the `Host` of
//! tcab-workloads); it ends with an exit code; dropping it is SIGKILL.
//! Today every container runs one of the rig's fake programs in-process
//! ([`Workload::Fake`]). Pods of a local image (the dispatcher's own) do
//! not come here: they run every container as a child process, with probes
//! and restarts, in [`crate::procs`].

use crate::Timing;
use serde_json::Value;
use tcab_workloads::Program;

/// What a pod's (first) container runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// A fake program of tcab-workloads, run in-process.
    Fake(Program),
}

impl Workload {
    /// The workload of a pod: its program, chosen as kube-sim chooses it
    /// (driver, publisher, or plain).
    pub fn for_pod(pod: &Value, timing: &Timing) -> Workload {
        Workload::Fake(Program::for_pod(pod, timing.job_pod_run))
    }
}

impl Workload {
    /// Whether the kernel OOM-kills it as it starts: a plain program that
    /// allocates more than the pod's first container's memory limit
    /// (`Program::oom_at_start`, the rule kube-sim can share).
    pub fn oom_at_start(&self, pod: &Value) -> bool {
        let limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
            .as_str()
            .and_then(crate::env::parse_quantity);
        match self {
            Workload::Fake(program) => program.oom_at_start(limit),
        }
    }
}

impl Workload {
    /// The eviction manager's message when what the program writes to its
    /// writable layer is over the pod's or its container's
    /// `ephemeral-storage` limit (`tcab_workloads::local_storage_eviction`,
    /// the rule kube-sim can share); `None` when it is within them.
    pub fn storage_eviction(&self, pod: &Value) -> Option<String> {
        match self {
            Workload::Fake(program) => {
                tcab_workloads::local_storage_eviction(pod, program.storage_used())
            }
        }
    }
}

/// Runs `workload` on `host`; returns the exit code.
pub async fn run<H: tcab_workloads::Host>(workload: &Workload, host: &H) -> i32 {
    match workload {
        Workload::Fake(program) => tcab_workloads::run(program, host).await,
    }
}
