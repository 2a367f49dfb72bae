//! Finding the workspace's binaries (and building them when they are missing).

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
/// executable (`target/<profile>/`, or its parent for test executables in `deps/`).
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

/// Path of one binary.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Makes sure every binary exists, building the missing ones with cargo (the
/// `CARGO` cargo sets for `cargo run`, or `cargo` on PATH) in the same profile.
pub fn ensure_built(dir: &Path) -> anyhow::Result<()> {
    let missing: Vec<&str> = ALL
        .iter()
        .copied()
        .filter(|b| !path(dir, b).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = dir.file_name().is_some_and(|n| n == "release");
    eprintln!(
        "building {} (not found in {})",
        missing.join(", "),
        dir.display()
    );
    let mut cmd = std::process::Command::new(cargo);
    cmd.arg("build").arg("--bins");
    for pkg in [
        "tcab-backend-sim",
        "tcab-kube-sim",
        "tcab-admitter",
        "tcab-lease-keeper",
        "tcab-reaper",
    ] {
        cmd.args(["-p", pkg]);
    }
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of the dev stack's binaries failed ({status})");
    }
    let still: Vec<&str> = ALL
        .iter()
        .copied()
        .filter(|b| !path(dir, b).is_file())
        .collect();
    if !still.is_empty() {
        bail!(
            "after building, still missing in {}: {}",
            dir.display(),
            still.join(", ")
        );
    }
    Ok(())
}
