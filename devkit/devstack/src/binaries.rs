//! Finding the workspace's binaries, built from the current sources.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// The binaries the dev stack starts.
pub const ALL: [&str; 5] = [
    "tcab-backend-sim",
    "tcab-kube-sim",
    "tcab-admitter",
    "tcab-lease-keeper",
    "tcab-reaper",
];

/// The directory holding the workspace's binaries: next to the current
/// executable (`target/<profile>/`, or its parent for test executables in
/// `deps/` and examples in `examples/`).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the current executable")?;
    let mut dir = exe
        .parent()
        .map(Path::to_path_buf)
        .context("executable has no directory")?;
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    Ok(dir)
}

/// Whether a variable is one cargo sets for the crate it builds or runs
/// (not one that configures cargo itself).
fn set_by_cargo_for_a_crate(key: &str) -> bool {
    const EXACT: [&str; 9] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    EXACT.contains(&key) || key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_")
}

/// Path of one binary.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Makes sure every binary is built from the current sources: runs `cargo
/// build` for them (the `CARGO` that cargo sets for `cargo run`, or `cargo` on
/// PATH) in the same profile, a quick no-op when they are up to date. Without
/// cargo, the binaries already there are used as they are.
pub fn ensure_built(dir: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(&cargo);
    cmd.args(["build", "--bins", "--quiet"]);
    // A test process carries the variables cargo sets for the crate under
    // test; build scripts that watch them (ring's watches CARGO_PKG_NAME and
    // CARGO_MANIFEST_DIR) would then run again, and every dependent crate be
    // rebuilt, each time a test and a plain `cargo build` alternate.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_a_crate) {
            cmd.env_remove(&key);
        }
    }
    for pkg in ALL {
        cmd.args(["-p", pkg]);
    }
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    match cmd.status() {
        Ok(status) if status.success() => {}
        Ok(status) => bail!("cargo build of the dev stack's binaries failed ({status})"),
        Err(error) => eprintln!(
            "cannot run {cargo} ({error}); using the binaries in {} as they are",
            dir.display()
        ),
    }
    let missing: Vec<&str> = ALL
        .iter()
        .copied()
        .filter(|b| !path(dir, b).is_file())
        .collect();
    if !missing.is_empty() {
        bail!("missing in {}: {}", dir.display(), missing.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_crates_own_variables_are_dropped() {
        for key in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_EXE_tcab-devstack",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_a_crate(key), "{key}");
        }
        for key in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_for_a_crate(key), "{key}");
        }
    }
}
