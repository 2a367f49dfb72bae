//! The build scripts' revision logic (bins/revision.rs, shared by the three
//! binary crates): the given value wins and is checked, else HEAD of the
//! checkout with the files that move with it, else `unknown`. Driven against
//! throwaway git repositories; the git parts skip (and say so) without git.

#[allow(dead_code)] // `emit` is for build scripts only
#[path = "../../../revision.rs"]
mod build_script;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "tcab-revision-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn have_git() -> bool {
    let found = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("SKIP: no git command; the git-backed revision is untested here");
    }
    found
}

/// Runs git in `dir` (isolated from the user's configuration); returns stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A repository with one commit on branch `main`, and a crate folder in it.
fn repo() -> (TempDir, PathBuf) {
    let tmp = TempDir::new("repo");
    git(&tmp.0, &["init", "--quiet", "--initial-branch=main"]);
    let krate = tmp.0.join("bins").join("admitter");
    std::fs::create_dir_all(&krate).unwrap();
    std::fs::write(krate.join("Cargo.toml"), "[package]\n").unwrap();
    git(&tmp.0, &["add", "."]);
    git(&tmp.0, &["commit", "--quiet", "-m", "one"]);
    (tmp, krate)
}

fn canonical(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths.iter().map(|p| p.canonicalize().unwrap()).collect()
}

#[test]
fn a_given_revision_wins_and_is_checked() {
    let dir = TempDir::new("given");
    let got = build_script::resolve(&dir.0, Some(" 4eefe8c8c26b ")).unwrap();
    assert_eq!(got.revision, "4eefe8c8c26b");
    assert!(got.watch.is_empty());
    let described = build_script::resolve(&dir.0, Some("v0.1.0-3-g4eefe8c")).unwrap();
    assert_eq!(described.revision, "v0.1.0-3-g4eefe8c");
    for bad in ["has space", "semi;colon", "quote\"", &"a".repeat(65)] {
        let err = build_script::resolve(&dir.0, Some(bad)).unwrap_err();
        assert!(
            err.starts_with("TCAB_GIT_REVISION: expected"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn outside_git_without_a_given_revision_it_is_unknown() {
    let dir = TempDir::new("plain");
    // Guard: the temporary folder must not itself sit inside a repository.
    let inside = Command::new("git")
        .args(["-C"])
        .arg(&dir.0)
        .args(["rev-parse", "--git-dir"])
        .output()
        .is_ok_and(|o| o.status.success());
    if inside {
        println!("SKIP: the temporary folder is inside a git repository");
        return;
    }
    for given in [None, Some(""), Some("  ")] {
        let got = build_script::resolve(&dir.0, given).unwrap();
        assert_eq!(got.revision, build_script::UNKNOWN);
        assert!(got.watch.is_empty());
    }
}

#[test]
fn on_a_branch_it_is_head_and_watches_head_and_the_loose_ref() {
    if !have_git() {
        return;
    }
    let (tmp, krate) = repo();
    let head = git(&tmp.0, &["rev-parse", "HEAD"]);
    let got = build_script::resolve(&krate, None).unwrap();
    assert_eq!(got.revision, head);
    let git_dir = tmp.0.join(".git");
    assert_eq!(
        canonical(&got.watch),
        canonical(&[git_dir.join("HEAD"), git_dir.join("refs/heads/main")])
    );

    // A new commit moves the ref the script watches, and the revision with it.
    std::fs::write(krate.join("src.rs"), "// two\n").unwrap();
    git(&tmp.0, &["add", "."]);
    git(&tmp.0, &["commit", "--quiet", "-m", "two"]);
    let second = build_script::resolve(&krate, None).unwrap();
    assert_ne!(second.revision, head);
    assert_eq!(second.revision, git(&tmp.0, &["rev-parse", "HEAD"]));
}

#[test]
fn a_packed_branch_watches_packed_refs_and_the_folder_its_loose_ref_will_be_in() {
    if !have_git() {
        return;
    }
    let (tmp, krate) = repo();
    git(&tmp.0, &["pack-refs", "--all"]);
    let git_dir = tmp.0.join(".git");
    assert!(!git_dir.join("refs/heads/main").exists(), "packed");
    let got = build_script::resolve(&krate, None).unwrap();
    assert_eq!(got.revision, git(&tmp.0, &["rev-parse", "HEAD"]));
    assert_eq!(
        canonical(&got.watch),
        canonical(&[
            git_dir.join("HEAD"),
            git_dir.join("refs/heads"),
            git_dir.join("packed-refs"),
        ])
    );
}

#[test]
fn a_detached_head_watches_head_only() {
    if !have_git() {
        return;
    }
    let (tmp, krate) = repo();
    git(&tmp.0, &["checkout", "--quiet", "--detach"]);
    let got = build_script::resolve(&krate, None).unwrap();
    assert_eq!(got.revision, git(&tmp.0, &["rev-parse", "HEAD"]));
    assert_eq!(
        canonical(&got.watch),
        canonical(&[tmp.0.join(".git").join("HEAD")])
    );
}

#[test]
fn a_repository_without_commits_is_unknown() {
    if !have_git() {
        return;
    }
    let tmp = TempDir::new("empty");
    git(&tmp.0, &["init", "--quiet"]);
    let got = build_script::resolve(&tmp.0, None).unwrap();
    assert_eq!(got.revision, build_script::UNKNOWN);
}
