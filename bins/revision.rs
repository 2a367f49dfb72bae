//! The git revision a binary is built from, for the build scripts of the three
//! binary crates (each `build.rs` includes this file as a module).
//!
//! The revision becomes the compile-time variable `TCAB_REVISION` of the
//! binary crate only, so a new commit recompiles the three small binary crates
//! and nothing else of the workspace. It is, in order:
//! 1. `TCAB_GIT_REVISION` when set (the image build passes it: the build
//!    context has no `.git`);
//! 2. `git rev-parse HEAD` of the checkout the crate sits in;
//! 3. `unknown`.
//!
//! Uncommitted changes are not reflected: the revision names the commit HEAD
//! pointed at. Cargo reruns the script when `TCAB_GIT_REVISION` changes or
//! HEAD moves (the HEAD file, the branch's ref, `packed-refs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that overrides the revision at build time.
pub const INPUT: &str = "TCAB_GIT_REVISION";
/// The compile-time variable the binary reads with `env!`.
pub const OUTPUT: &str = "TCAB_REVISION";
/// The revision of a build outside git without `TCAB_GIT_REVISION`.
pub const UNKNOWN: &str = "unknown";

/// A revision and the files whose change must rerun the build script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub revision: String,
    pub watch: Vec<PathBuf>,
}

/// Prints cargo's directives for the crate at `CARGO_MANIFEST_DIR`. A
/// malformed `TCAB_GIT_REVISION` fails the build with a message naming it.
pub fn emit() {
    println!("cargo:rerun-if-env-changed={INPUT}");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let given = std::env::var(INPUT).ok();
    match resolve(&dir, given.as_deref()) {
        Ok(resolved) => {
            for path in &resolved.watch {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            println!("cargo:rustc-env={OUTPUT}={}", resolved.revision);
        }
        Err(message) => panic!("{message}"),
    }
}

/// The revision for a crate in `dir`, given the value of `TCAB_GIT_REVISION`.
pub fn resolve(dir: &Path, given: Option<&str>) -> Result<Resolved, String> {
    if let Some(value) = given.map(str::trim).filter(|v| !v.is_empty()) {
        return check_given(value).map(|revision| Resolved {
            revision,
            watch: Vec::new(),
        });
    }
    Ok(from_git(dir).unwrap_or_else(|| Resolved {
        revision: UNKNOWN.to_owned(),
        watch: Vec::new(),
    }))
}

/// A given revision: 1 to 64 characters of `[0-9A-Za-z._+-]` (a commit id,
/// or a `git describe` string).
pub fn check_given(value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "{INPUT}: expected a git revision (1 to 64 characters of [0-9A-Za-z._+-]), got {value:?}"
        ))
    }
}

/// HEAD's commit id of the checkout around `dir`, and the files that move
/// with it; `None` outside git or without a git command.
pub fn from_git(dir: &Path) -> Option<Resolved> {
    let revision = git(dir, &["rev-parse", "--verify", "--quiet", "HEAD"])?;
    let is_commit_id =
        matches!(revision.len(), 40 | 64) && revision.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_commit_id {
        return None;
    }
    let path = |name: &str| {
        git(
            dir,
            &["rev-parse", "--path-format=absolute", "--git-path", name],
        )
        .map(PathBuf::from)
    };
    let mut watch = Vec::new();
    watch.extend(path("HEAD"));
    // On a branch, HEAD's file stays the same across commits; the branch's
    // ref moves: a loose file, or a line of packed-refs until a commit
    // writes the loose file (its nearest existing folder notices that).
    if let Some(branch) = git(dir, &["symbolic-ref", "--quiet", "HEAD"]) {
        if let Some(loose) = path(&branch) {
            watch.push(nearest_existing(&loose));
        }
        watch.extend(path("packed-refs"));
    }
    watch.retain(|p| p.exists());
    watch.dedup();
    Some(Resolved { revision, watch })
}

/// `path` if it exists, else its nearest existing ancestor.
fn nearest_existing(path: &Path) -> PathBuf {
    let mut at = path;
    while !at.exists() {
        match at.parent() {
            Some(parent) => at = parent,
            None => break,
        }
    }
    at.to_path_buf()
}

/// One line of a git command's output, run in `dir`; `None` when it fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.trim();
    (!line.is_empty()).then(|| line.to_owned())
}
