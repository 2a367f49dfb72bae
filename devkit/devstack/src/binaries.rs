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
    // A test runs with the variables cargo sets for its own crate
    // (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). Passed on, they differ from
    // a build started from a shell, and a dependency's build script that
    // watches one (ring watches `CARGO_MANIFEST_DIR`) would be rerun, with
    // everything above it rebuilt, at every switch between the two.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let per_crate = name.starts_with("CARGO_PKG_")
            || matches!(
                name.as_ref(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            );
        if per_crate {
            cmd.env_remove(name.as_ref());
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
