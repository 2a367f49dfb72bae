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

/// What to say before the build: on a first run (a binary is missing) that
/// the binaries are being built and roughly how long that takes; otherwise
/// nothing (the build is a quick check then).
pub fn before_build(missing: &[&str]) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "building the dev stack's binaries ({}); a first build takes several minutes on a 2-core machine; later runs rebuild only what changed ...",
            missing.join(", ")
        )
    })
}

/// What to say after a build that took `took`: always after a first build,
/// and after a rebuild that took long enough to notice (2 s).
pub fn after_build(first: bool, took: std::time::Duration) -> Option<String> {
    let secs = took.as_secs_f64();
    let text = if secs >= 60.0 {
        format!("{}m {:02}s", (secs / 60.0).floor(), (secs % 60.0).floor())
    } else {
        format!("{secs:.1}s")
    };
    if first {
        Some(format!("built the binaries in {text}"))
    } else if secs >= 2.0 {
        Some(format!("rebuilt the binaries in {text}"))
    } else {
        None
    }
}

fn missing(dir: &Path) -> Vec<&'static str> {
    ALL.iter()
        .copied()
        .filter(|b| !path(dir, b).is_file())
        .collect()
}

/// Makes sure every binary is built from the current sources: runs `cargo
/// build` for the workspace's binaries (the `CARGO` that cargo sets for `cargo run`, or `cargo` on
/// PATH) in the same profile, a quick no-op when they are up to date. Without
/// cargo, the binaries already there are used as they are. On a first run
/// (a binary missing) it says that it builds them, and how long it took.
pub fn ensure_built(dir: &Path) -> anyhow::Result<()> {
    let before = missing(dir);
    if let Some(line) = before_build(&before) {
        println!("{line}");
    }
    let started = std::time::Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(&cargo);
    // The whole workspace's binaries, as `scripts/test` builds them: a build
    // of only these packages would unify features differently and rebuild
    // the binaries every time the other build ran.
    cmd.args(["build", "--workspace", "--bins", "--quiet"]);
    // A test process carries the variables cargo sets for the crate under
    // test; build scripts that watch them (ring's watches CARGO_PKG_NAME and
    // CARGO_MANIFEST_DIR) would then run again, and every dependent crate be
    // rebuilt, each time a test and a plain `cargo build` alternate.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_a_crate) {
            cmd.env_remove(&key);
        }
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
    if let Some(line) = after_build(!before.is_empty(), started.elapsed()) {
        println!("{line}");
    }
    let missing = missing(dir);
    if !missing.is_empty() {
        bail!("missing in {}: {}", dir.display(), missing.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_first_build_is_announced_and_timed() {
        let first = before_build(&["tcab-admitter", "tcab-reaper"]).expect("announced");
        assert!(
            first.contains("building") && first.contains("several minutes"),
            "{first}"
        );
        assert!(first.contains("tcab-admitter, tcab-reaper"), "{first}");
        assert_eq!(
            before_build(&[]),
            None,
            "an up-to-date check says nothing first"
        );
        assert_eq!(
            after_build(true, Duration::from_secs(187)).as_deref(),
            Some("built the binaries in 3m 07s")
        );
        assert_eq!(
            after_build(true, Duration::from_millis(900)).as_deref(),
            Some("built the binaries in 0.9s")
        );
        assert_eq!(
            after_build(false, Duration::from_millis(12_300)).as_deref(),
            Some("rebuilt the binaries in 12.3s")
        );
        assert_eq!(after_build(false, Duration::from_millis(400)), None);
    }

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
