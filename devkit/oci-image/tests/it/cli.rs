//! The `tcab-oci-image` command line.

use std::process::Command;

use crate::support::{Archive, fake_bin_dir};

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcab-oci-image"))
}

#[test]
fn workload_writes_the_archive_and_prints_its_digest_and_reference() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.tar");
    let o = cli()
        .args([
            "workload",
            "--name",
            "tcab/driver:dev",
            "--bin",
            "/bin/true",
            "--out",
        ])
        .arg(&out)
        .args(["--", "driver", "--flag"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = Archive::read(&out);
    let digest = a.index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        format!("{digest} docker.io/tcab/driver:dev\n")
    );
    let entrypoint = &a.config["config"]["Entrypoint"];
    assert_eq!(
        *entrypoint,
        serde_json::json!(["/usr/local/bin/tcab-workload", "driver", "--flag"])
    );
    assert_eq!(a.layer_tars.len(), 2);
}

#[test]
fn dispatcher_labels_the_given_version_and_revision() {
    let bins = fake_bin_dir();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.tar");
    let o = cli()
        .args(["dispatcher", "--bin-dir"])
        .arg(bins.path())
        .args([
            "--tag",
            "abc",
            "--version",
            "9.9.9",
            "--revision",
            "deadbeef",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8(o.stdout)
            .unwrap()
            .ends_with(" docker.io/library/tcab-dispatcher:abc\n")
    );
    let labels = &Archive::read(&out).config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], "9.9.9");
    assert_eq!(labels["org.opencontainers.image.revision"], "deadbeef");
}

#[test]
fn bad_usage_exits_2_naming_what_is_wrong() {
    let o = cli()
        .args(["workload", "--name", "x", "--bin", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--out"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = cli().arg("build").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_missing_binary_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = cli()
        .args(["dispatcher", "--bin-dir"])
        .arg(dir.path())
        .args(["--tag", "t", "--out"])
        .arg(dir.path().join("d.tar"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tcab-admitter is missing"), "{err}");
    assert!(!dir.path().join("d.tar").exists(), "no archive is written");
}
