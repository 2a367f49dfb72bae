//! # tcab-workloads: what runs inside a pod of the test rig
//!
//! One implementation of the fake programs, used by both clusters of the
//! rig: kube-sim's simulated kubelets and the node agent that plays
//! kubelets against a real API server.
//!
//! - [`driver::run_driver`]: the fake tcab driver (docs/job-contract.md),
//!   scripted by the `sim` key of its launch request ([`driver::Script`]);
//! - [`driver::run_publisher`]: the fake publisher;
//! - the *plain* program: allocates [`ALLOCATE_MIB`] (on a real process
//!   only), writes [`LOG_LINES`] lines to its log, runs for the annotation
//!   [`RUN_SECONDS`] (or until SIGTERM) and exits with [`EXIT_CODE`].
//!
//! [`Program::for_pod`] chooses the program of a pod the way both kubelets
//! do; [`run`] runs it on a [`Host`]. The host is whoever runs the program:
//! it gives the program its environment, a log, a clock, SIGTERM, its
//! sandbox pods and an HTTP client for the backend. kube-sim's host works
//! in sim time on its in-memory store; the node agent's in real time
//! against a real API server.
//!
//! [`images`] holds the kubelet's image-reference and pull back-off rules,
//! which both kubelets apply before a program starts.
//!
//! ## On real nodes: the `tcab-workload` binary
//!
//! On a real node (the upstream kubelet with containerd and runc) a pod's
//! container is a real process in a real image; its entrypoint is this
//! crate's binary, `tcab-workload driver | publisher | plain` (any other
//! command line: a message on stderr, exit status 2), which runs the same
//! programs on [`container::ContainerHost`]:
//!
//! - env: the process environment; namespace: the ServiceAccount's
//!   `namespace` file, else `POD_NAMESPACE`, else `default`;
//! - log: each line on stdout as the program logs it (no prefix), so
//!   `kubectl logs` shows what the node agent serves;
//! - SIGTERM: a real handler installed before the program starts (a driver
//!   that ignores it lives on until the kubelet's SIGKILL);
//! - sandbox pods: `POST`/`DELETE` on the Kubernetes API at
//!   `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` with the
//!   ServiceAccount's token (read for each call) and CA from
//!   `/var/run/secrets/kubernetes.io/serviceaccount` (`TCAB_SERVICEACCOUNT_DIR`
//!   overrides the directory, `TCAB_KUBERNETES_URL` the URL, for tests);
//! - the plain program: env `TCAB_RUN_SECONDS`, `TCAB_EXIT_CODE`,
//!   `TCAB_LOG_LINES`, `TCAB_ALLOCATE_MIB`, `TCAB_WRITE_MIB`, `TCAB_IGNORE_SIGTERM`, else the annotations above from
//!   the downward API's `/etc/podinfo/annotations` (`TCAB_PODINFO_DIR`
//!   overrides the directory); without a run time it runs until SIGTERM
//!   and exits 143; [`ALLOCATE_MIB`] is allocated and [`WRITE_MIB`] written
//!   (to `/tmp/fill`) for real there;
//! - the exit status is the program's.

pub mod container;
pub mod driver;
pub mod images;

use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// Annotation: how long a plain container runs, in seconds (of the host's
/// clock). Absent: a Job's pod runs for the host's default, a bare pod until
/// it is deleted.
pub const RUN_SECONDS: &str = "kube-sim.tcab.dev/run-seconds";
/// Annotation: a plain container's exit code (default 0).
pub const EXIT_CODE: &str = "kube-sim.tcab.dev/exit-code";
/// Annotation: how many lines a plain container writes to its log when it
/// starts (`line 1`, `line 2`, ...; default none), so a test can read a
/// log that both clusters' kubelets serve alike.
pub const LOG_LINES: &str = "kube-sim.tcab.dev/log-lines";
/// Annotation: how many MiB a plain container allocates, every page
/// touched, before its log lines and holds until it exits (default none),
/// so a memory limit below it gets it OOM-killed. Only the container
/// entrypoint ([`container`]) allocates for real; the in-process hosts
/// leave [`Host::allocate`] a no-op.
pub const ALLOCATE_MIB: &str = "kube-sim.tcab.dev/allocate-mib";
/// Annotation: a plain container ignores SIGTERM (`true` or `1`), so a
/// graceful stop ends with the kubelet's SIGKILL at the end of the grace
/// period (exit 137) instead of its own exit 143.
pub const IGNORE_SIGTERM: &str = "kube-sim.tcab.dev/ignore-sigterm";
/// Annotation: how many MiB a plain container writes to a file in its
/// writable layer (`/tmp/fill`, its image's `/tmp`) after its allocation and
/// before its log lines, and then keeps (default none): what the kubelet's
/// eviction manager counts against the container's (and the pod's)
/// `ephemeral-storage` limit (eviction_manager.go `localStorageEviction`).
/// Only the container entrypoint ([`container`]) writes for real; the
/// in-process hosts leave [`Host::write`] a no-op and their kubelets judge
/// the limit from the annotation ([`Program::storage_used`]).
pub const WRITE_MIB: &str = "kube-sim.tcab.dev/write-mib";

/// What a program needs from whoever runs it.
///
/// Every method but the async ones is called often and must not block.
pub trait Host: Send + Sync {
    /// The value of an env variable of the container, as the kubelet
    /// resolved it (literal values, Secret keys, the downward API).
    fn env(&self, name: &str) -> Option<String>;
    /// The pod's namespace.
    fn namespace(&self) -> &str;
    /// Appends a line to the container's log.
    fn log(&self, line: &str);
    /// The host's wall clock (sim time on kube-sim).
    fn now(&self) -> jiff::Timestamp;
    /// Waits `d` on the host's clock (SIGTERM does not cut it short).
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send;
    /// Whether SIGTERM has been delivered.
    fn terminated(&self) -> bool;
    /// Waits until SIGTERM is delivered (forever if it never is).
    fn sigterm(&self) -> impl Future<Output = ()> + Send;
    /// The HTTP client for the backend.
    fn http(&self) -> &reqwest::Client;
    /// Creates a pod in `namespace` (with the pod's own credentials);
    /// returns its name, or the API's message.
    fn create_pod(
        &self,
        namespace: &str,
        pod: Value,
    ) -> impl Future<Output = Result<String, String>> + Send;
    /// Deletes a pod (default grace); `Err` carries the API's message.
    fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Allocates `mib` MiB, touches every page and holds it until the
    /// program ends (the plain program's [`ALLOCATE_MIB`]). The default does
    /// nothing: only a real process has real memory to run out of.
    fn allocate(&self, mib: u32) {
        let _ = mib;
    }
    /// Writes `mib` MiB to a file of the container's writable layer and
    /// keeps it (the plain program's [`WRITE_MIB`]). The default does
    /// nothing: only a real container has a layer to fill.
    fn write(&self, mib: u32) {
        let _ = mib;
    }
}

/// Sleeps `d` on the host's clock; `false` when SIGTERM cut it short.
pub async fn sleep_unless_terminated<H: Host>(host: &H, d: Duration) -> bool {
    tokio::select! {
        _ = host.sleep(d) => true,
        _ = host.sigterm() => false,
    }
}

/// Which program a pod's container runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// The fake tcab driver.
    Driver,
    /// The fake tcab publisher.
    Publisher,
    /// Allocates its memory, writes its log lines, runs for the given time
    /// (until SIGTERM when `None`) and exits with the code; SIGTERM stops it
    /// at once with 143, unless it ignores SIGTERM (then only the SIGKILL
    /// ends it before its time).
    Plain {
        /// How long it runs.
        run: Option<Duration>,
        /// Its exit code when it ran to the end.
        exit_code: i32,
        /// How many lines it writes to its log first.
        log_lines: u32,
        /// How many MiB it allocates (through [`Host::allocate`]) before
        /// its log lines; 0 for none.
        allocate_mib: u32,
        /// How many MiB it writes (through [`Host::write`]) after its
        /// allocation; 0 for none.
        write_mib: u32,
        /// It does not stop on SIGTERM ([`IGNORE_SIGTERM`]).
        ignore_sigterm: bool,
    },
}

fn label<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod["metadata"]["labels"][key].as_str()
}

/// Whether the pod's controller (ownerReference with `controller: true`)
/// is a batch/v1 Job.
fn owned_by_job(pod: &Value) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["controller"] == true && r["kind"] == "Job")
}

impl Program {
    /// The program of a pod: a Job's pod labelled `tcab.dev/job-kind=run`
    /// (or, without the label, named `tcab-driver-...`) runs the driver;
    /// `publish` (or `tcab-publisher-...`) the publisher; anything else the
    /// plain program, which allocates [`ALLOCATE_MIB`], writes [`LOG_LINES`]
    /// lines, runs for [`RUN_SECONDS`] (a Job's pod without it for
    /// `job_pod_run`, a bare pod until deleted) and exits with [`EXIT_CODE`].
    pub fn for_pod(pod: &Value, job_pod_run: Duration) -> Program {
        let kind = label(pod, "tcab.dev/job-kind");
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let owned = owned_by_job(pod);
        if owned && (kind == Some("run") || (kind.is_none() && name.starts_with("tcab-driver-"))) {
            return Program::Driver;
        }
        if owned
            && (kind == Some("publish") || (kind.is_none() && name.starts_with("tcab-publisher-")))
        {
            return Program::Publisher;
        }
        let annotations = &pod["metadata"]["annotations"];
        Program::plain(
            |key| annotations[key].as_str().map(str::to_string),
            owned.then_some(job_pod_run),
        )
    }

    /// The plain program with the parameters `annotation` gives for the
    /// annotation keys [`RUN_SECONDS`], [`EXIT_CODE`], [`LOG_LINES`] and
    /// [`ALLOCATE_MIB`] (and [`IGNORE_SIGTERM`]); a run time absent (or not a number of seconds
    /// `>= 0`) is `default_run`, anything else absent or unreadable its
    /// default (0).
    pub fn plain(
        annotation: impl Fn(&str) -> Option<String>,
        default_run: Option<Duration>,
    ) -> Program {
        fn number<T: std::str::FromStr>(value: Option<String>) -> Option<T> {
            value?.trim().parse().ok()
        }
        let run = number::<f64>(annotation(RUN_SECONDS))
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .or(default_run);
        Program::Plain {
            run,
            exit_code: number(annotation(EXIT_CODE)).unwrap_or(0),
            log_lines: number(annotation(LOG_LINES)).unwrap_or(0),
            allocate_mib: number(annotation(ALLOCATE_MIB)).unwrap_or(0),
            write_mib: number(annotation(WRITE_MIB)).unwrap_or(0),
            ignore_sigterm: annotation(IGNORE_SIGTERM)
                .is_some_and(|v| matches!(v.trim(), "true" | "1")),
        }
    }

    /// Whether the kernel OOM-kills this program as it starts in a
    /// container whose memory limit is `limit_bytes`: the plain program
    /// allocates [`ALLOCATE_MIB`] first thing, every page touched, so more
    /// than the limit is an OOM kill (`OOMKilled`, 137) before its first log
    /// line, as on a real node (the process's own few MiB are not counted).
    /// No limit: never.
    pub fn oom_at_start(&self, limit_bytes: Option<f64>) -> bool {
        match (self, limit_bytes) {
            (Program::Plain { allocate_mib, .. }, Some(limit)) => {
                f64::from(*allocate_mib) * 1024.0 * 1024.0 > limit
            }
            _ => false,
        }
    }

    /// The bytes this program leaves in its container's writable layer
    /// (the plain program's [`WRITE_MIB`]), which the eviction manager
    /// counts against its `ephemeral-storage` limit; 0 for the others.
    pub fn storage_used(&self) -> u64 {
        match self {
            Program::Plain { write_mib, .. } => u64::from(*write_mib) << 20,
            _ => 0,
        }
    }
}

/// A quantity of bytes (`16Mi`, `20M`, `1e6`, `1024`), as the API server
/// accepts one; `None` when it does not parse.
pub fn parse_bytes(q: &str) -> Option<f64> {
    const UNITS: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let q = q.trim();
    for (suffix, mult) in UNITS {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|v| v * mult);
        }
    }
    q.parse().ok()
}

/// A byte count as a quantity's canonical string: the largest binary
/// suffix that divides it (`48Mi`), else the plain number.
fn bytes_quantity(n: u64) -> String {
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// The kubelet eviction manager's verdict on a pod whose first container
/// has `used` bytes in its writable layer (its program's
/// [`Program::storage_used`]; its log and the pod's other files are not
/// counted): the eviction message, or `None`. Upstream checks, in this
/// order (eviction_manager.go `localStorageEviction`), each emptyDir's
/// `sizeLimit` (nothing is written to a volume here), the pod's usage
/// against the sum of its containers' `ephemeral-storage` limits
/// (`podEphemeralStorageLimitEviction`, helpers.go
/// `podEphemeralStorageMessageFmt`), then each container's against its own
/// (`containerEphemeralStorageLimitEviction`,
/// `containerEphemeralStorageMessageFmt`); the pod's sum comes first, so a
/// lone container over its limit gets the pod's message.
pub fn local_storage_eviction(pod: &Value, used: u64) -> Option<String> {
    let containers = pod["spec"]["containers"].as_array()?;
    let limit = |c: &Value| {
        c["resources"]["limits"]["ephemeral-storage"]
            .as_str()
            .map(|q| (q.to_string(), parse_bytes(q).unwrap_or(0.0)))
    };
    let limits: Vec<(String, f64)> = containers.iter().filter_map(limit).collect();
    if !limits.is_empty() {
        let total: f64 = limits.iter().map(|(_, b)| b).sum();
        if used as f64 > total {
            let shown = match limits.as_slice() {
                [(q, _)] => q.clone(),
                _ => bytes_quantity(total as u64),
            };
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {shown}. "
            ));
        }
    }
    let first = containers.first()?;
    match limit(first) {
        Some((q, bytes)) if bytes > 0.0 && used as f64 > bytes => Some(format!(
            "Container {} exceeded its local ephemeral storage limit \"{q}\". ",
            first["name"].as_str().unwrap_or("")
        )),
        _ => None,
    }
}

/// Runs `program` on `host`; returns the container's exit code.
pub async fn run<H: Host>(program: &Program, host: &H) -> i32 {
    match program {
        Program::Driver => driver::run_driver(host).await,
        Program::Publisher => driver::run_publisher(host).await,
        Program::Plain {
            run,
            exit_code,
            log_lines,
            allocate_mib,
            write_mib,
            ignore_sigterm,
        } => {
            if *allocate_mib > 0 {
                host.allocate(*allocate_mib);
            }
            if *write_mib > 0 {
                host.write(*write_mib);
            }
            for i in 1..=*log_lines {
                host.log(&format!("line {i}"));
            }
            let done = match (run, ignore_sigterm) {
                (Some(d), false) => sleep_unless_terminated(host, *d).await,
                (None, false) => {
                    host.sigterm().await;
                    false
                }
                (Some(d), true) => {
                    host.sleep(*d).await;
                    true
                }
                (None, true) => std::future::pending().await,
            };
            if done { *exit_code } else { 143 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_eviction_manager_judges_the_pod_total_before_each_container() {
        let pod = |limits: &[Option<&str>]| {
            let containers: Vec<Value> = limits
                .iter()
                .enumerate()
                .map(|(i, l)| match l {
                    Some(l) => json!({"name": format!("c{i}"),
                        "resources": {"limits": {"ephemeral-storage": l}}}),
                    None => json!({"name": format!("c{i}")}),
                })
                .collect();
            json!({"spec": {"containers": containers}})
        };
        let mib = 1u64 << 20;
        assert_eq!(local_storage_eviction(&pod(&[None]), 48 * mib), None);
        assert_eq!(
            local_storage_eviction(&pod(&[Some("16Mi")]), 16 * mib),
            None
        );
        assert_eq!(
            local_storage_eviction(&pod(&[Some("16Mi")]), 48 * mib).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 16Mi. ")
        );
        assert_eq!(
            local_storage_eviction(&pod(&[Some("16Mi"), Some("32Mi")]), 64 * mib).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 48Mi. ")
        );
        // Under the pod's total, over the first container's own limit.
        assert_eq!(
            local_storage_eviction(&pod(&[Some("16Mi"), Some("100Mi")]), 20 * mib).as_deref(),
            Some("Container c0 exceeded its local ephemeral storage limit \"16Mi\". ")
        );
        assert_eq!(
            Program::plain(|k| (k == WRITE_MIB).then(|| "48".to_string()), None).storage_used(),
            48 * mib
        );
    }

    fn job_pod(name: &str, labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels, "annotations": annotations,
            "ownerReferences": [{"kind": "Job", "controller": true, "name": "j", "uid": "u"}]}})
    }

    #[test]
    fn programs_follow_labels_names_and_annotations() {
        let d = Duration::from_millis(100);
        assert_eq!(
            Program::for_pod(
                &job_pod("x", json!({"tcab.dev/job-kind": "run"}), json!({})),
                d
            ),
            Program::Driver
        );
        assert_eq!(
            Program::for_pod(&job_pod("tcab-driver-1-a", json!({}), json!({})), d),
            Program::Driver
        );
        assert_eq!(
            Program::for_pod(&job_pod("tcab-publisher-1-a", json!({}), json!({})), d),
            Program::Publisher
        );
        // A label other than run/publish wins over the name.
        assert_eq!(
            Program::for_pod(
                &job_pod(
                    "tcab-driver-1",
                    json!({"tcab.dev/job-kind": "x"}),
                    json!({})
                ),
                d
            ),
            Program::Plain {
                run: Some(d),
                exit_code: 0,
                log_lines: 0,
                allocate_mib: 0,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        // Not owned by a Job: never the driver; runs until deleted.
        let bare =
            json!({"metadata": {"name": "tcab-driver-1", "labels": {"tcab.dev/job-kind": "run"}}});
        assert_eq!(
            Program::for_pod(&bare, d),
            Program::Plain {
                run: None,
                exit_code: 0,
                log_lines: 0,
                allocate_mib: 0,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        let annotated = job_pod(
            "p",
            json!({}),
            json!({RUN_SECONDS: "2.5", EXIT_CODE: "3", LOG_LINES: "4", ALLOCATE_MIB: "16"}),
        );
        assert_eq!(
            Program::for_pod(&annotated, d),
            Program::Plain {
                run: Some(Duration::from_millis(2500)),
                exit_code: 3,
                log_lines: 4,
                allocate_mib: 16,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
    }

    #[test]
    fn ignoring_sigterm_and_the_oom_rule() {
        let p = Program::plain(
            |k| match k {
                IGNORE_SIGTERM => Some("true".into()),
                ALLOCATE_MIB => Some("96".into()),
                _ => None,
            },
            None,
        );
        assert!(matches!(
            p,
            Program::Plain {
                ignore_sigterm: true,
                allocate_mib: 96,
                ..
            }
        ));
        let mib = 1024.0 * 1024.0;
        assert!(p.oom_at_start(Some(32.0 * mib)));
        assert!(!p.oom_at_start(Some(96.0 * mib)));
        assert!(!p.oom_at_start(None));
        assert!(!Program::Driver.oom_at_start(Some(1.0)));
    }
}
