//! Where the control plane's binaries are, and whether they are all there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the bin dir (overrides the default).
pub const BIN_ENV: &str = "TCAB_CONTROL_PLANE_BIN";

/// Set to `1` (CI, after a successful `scripts/control-plane build`), a
/// missing binary fails [`built_or_skip`] instead of skipping.
pub const REQUIRED_ENV: &str = "TCAB_REAL_CLUSTER_REQUIRED";

/// The binaries a start needs.
pub const BINARIES: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The workspace's root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bin dir to use when the settings name none: `$TCAB_CONTROL_PLANE_BIN`,
/// else what `scripts/control-plane path` prints (the script is the one place
/// the Kubernetes version is chosen).
pub fn default_bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let script = workspace_root().join("scripts/control-plane");
    let out = Command::new(&script)
        .arg("path")
        .output()
        .map_err(|e| format!("cannot run {} path: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} path failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The binaries of [`BINARIES`] missing from `dir` (not an executable file).
pub fn missing(dir: &Path) -> Vec<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    BINARIES
        .into_iter()
        .filter(|name| {
            !std::fs::metadata(dir.join(name))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .collect()
}

/// Whether the binaries are there. For tests that skip without them:
///
/// ```no_run
/// if let Err(why) = tcab_real_cluster::binaries_present() {
///     println!("SKIP: {why}");
///     return;
/// }
/// ```
pub fn binaries_present() -> Result<PathBuf, String> {
    let dir = default_bin_dir()?;
    let missing = missing(&dir);
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "the real control plane is not built ({} missing in {}): run scripts/control-plane build",
            missing.join(", "),
            dir.display()
        ))
    }
}

/// For a test that needs the real control plane: the bin dir, or `None`
/// after printing one `SKIP: ...` line naming `scripts/control-plane build`
/// (the test then returns and passes). With `TCAB_REAL_CLUSTER_REQUIRED=1`
/// a missing binary panics instead, so CI cannot skip the real tier by
/// accident.
pub fn built_or_skip() -> Option<PathBuf> {
    match binaries_present() {
        Ok(dir) => Some(dir),
        Err(why) if std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1") => {
            panic!("{why} ({REQUIRED_ENV}=1)")
        }
        Err(why) => {
            println!("SKIP: {why}");
            None
        }
    }
}
