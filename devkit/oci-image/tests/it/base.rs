//! debian_base on real binaries of this machine.

use std::path::Path;
use std::process::Command;

use tcab_oci_image::{CA_BUNDLE, Entry, Layer, PACKAGES_FILE, Source, debian_base, elf};

use crate::support::{bin_true, is_shell};

/// The layer's bytes for `path`, read back from its tar.
fn read(layer: &Layer, path: &str) -> Vec<u8> {
    match layer.get(path) {
        Some(Entry::File {
            source: Source::Bytes(b),
            ..
        }) => b.clone(),
        Some(Entry::File {
            source: Source::Host(p),
            ..
        }) => std::fs::read(p).unwrap(),
        other => panic!("{path}: {other:?}"),
    }
}

/// Follows `path`'s symlinks inside the layer to a regular file, or panics.
fn resolve(layer: &Layer, path: &str) -> String {
    let mut path = path.trim_start_matches('/').to_string();
    for _ in 0..16 {
        match layer.get(&path) {
            Some(Entry::File { .. }) => return path,
            Some(Entry::Symlink { target }) => {
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                let joined = if target.starts_with('/') {
                    target.clone()
                } else {
                    format!("{dir}/{target}")
                };
                let mut parts: Vec<&str> = Vec::new();
                for c in joined.split('/').filter(|c| !c.is_empty() && *c != ".") {
                    if c == ".." {
                        parts.pop();
                    } else {
                        parts.push(c);
                    }
                }
                path = parts.join("/");
            }
            other => panic!("/{path} is not in the layer as a file or symlink: {other:?}"),
        }
    }
    panic!("/{path}: a symlink loop")
}

/// The layer's file for a soname, looked up in the multiarch directories as the loader does.
fn library(layer: &Layer, soname: &str) -> Option<String> {
    ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| format!("{d}/{soname}"))
        .find(|p| layer.get(p).is_some())
        .map(|p| resolve(layer, &p))
}

#[test]
fn every_library_the_test_binary_and_bin_true_need_and_the_loader_are_in_the_base() {
    let me = std::env::current_exe().unwrap();
    let layer = debian_base(&[&me, &bin_true()]).unwrap();
    for bin in [me.as_path(), &bin_true()] {
        let needs = elf::needs(bin).unwrap();
        let loader = needs.interpreter.expect("a dynamically linked binary");
        resolve(&layer, &loader);
        assert!(
            layer.get(&loader).is_some(),
            "the loader at its absolute path {loader}"
        );
        for soname in &needs.needed {
            assert!(
                library(&layer, soname).is_some(),
                "{soname} needed by {}",
                bin.display()
            );
        }
        // ldd, the loader's own answer, agrees on every library it resolves.
        let ldd = String::from_utf8(Command::new("ldd").arg(bin).output().unwrap().stdout).unwrap();
        for line in ldd.lines().filter(|l| l.contains("=> /")) {
            let soname = line.split_whitespace().next().unwrap();
            assert!(
                library(&layer, soname).is_some(),
                "ldd's {soname} for {}",
                bin.display()
            );
        }
    }
    // Every symlink's target is there too.
    for (path, entry) in layer.entries() {
        if let Entry::Symlink { .. } = entry {
            resolve(&layer, path);
        }
    }
}

#[test]
fn the_base_has_the_ca_bundle_users_tmp_and_home_and_no_shell() {
    let layer = debian_base(&[&bin_true()]).unwrap();
    assert_eq!(read(&layer, CA_BUNDLE), std::fs::read(CA_BUNDLE).unwrap());
    let passwd = String::from_utf8(read(&layer, "/etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l == "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"),
        "{passwd}"
    );
    assert!(
        passwd.lines().any(|l| l.starts_with("root:x:0:0:")),
        "{passwd}"
    );
    let group = String::from_utf8(read(&layer, "/etc/group")).unwrap();
    assert!(group.lines().any(|l| l == "nonroot:x:65532:"), "{group}");
    assert!(
        String::from_utf8(read(&layer, "/etc/nsswitch.conf"))
            .unwrap()
            .contains("passwd: files")
    );
    assert_eq!(
        layer.get("/tmp"),
        Some(&Entry::Dir {
            mode: 0o1777,
            uid: 0,
            gid: 0
        })
    );
    assert_eq!(
        layer.get("/home/nonroot"),
        Some(&Entry::Dir {
            mode: 0o700,
            uid: 65532,
            gid: 65532
        })
    );
    let shells: Vec<&str> = layer
        .entries()
        .map(|(p, _)| p)
        .filter(|p| is_shell(p))
        .collect();
    assert!(shells.is_empty(), "{shells:?}");
}

#[test]
fn the_base_records_each_host_files_debian_package_and_version() {
    let layer = debian_base(&[&bin_true()]).unwrap();
    let record = String::from_utf8(read(&layer, PACKAGES_FILE)).unwrap();
    let libc6 = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "libc6"])
        .output()
        .unwrap();
    let libc6 = String::from_utf8(libc6.stdout).unwrap();
    assert!(
        record.contains(&format!(
            "/lib/x86_64-linux-gnu/libc.so.6\tlibc6:amd64\t{libc6}\n"
        )),
        "{record}"
    );
    assert!(
        record.contains(&format!(
            "/lib64/ld-linux-x86-64.so.2\tlibc6:amd64\t{libc6}\n"
        )),
        "{record}"
    );
    assert!(
        record.contains(&format!("{CA_BUNDLE}\tca-certificates\t")),
        "{record}"
    );
    // Every file and symlink taken from the host is accounted for.
    for (path, entry) in layer.entries() {
        let from_host = matches!(
            entry,
            Entry::Symlink { .. }
                | Entry::File {
                    source: Source::Host(_),
                    ..
                }
        );
        if from_host {
            assert!(
                record.contains(&format!("/{path}\t")),
                "/{path} unrecorded in {record}"
            );
        }
    }
}

#[test]
fn a_library_nobody_has_is_named_with_the_binary_needing_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("needs-libq");
    let mut data = std::fs::read(bin_true()).unwrap();
    let (from, to) = (b"libc.so.6\0", b"libq.so.6\0");
    let at = data
        .windows(from.len())
        .position(|w| w == from)
        .expect("/bin/true names libc.so.6");
    data[at..at + from.len()].copy_from_slice(to);
    std::fs::write(&bin, data).unwrap();
    let err = format!("{:#}", debian_base(&[&bin]).unwrap_err());
    assert!(
        err.contains("libq.so.6") && err.contains(&bin.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_elf_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let err = format!("{:#}", debian_base(&[Path::new(&script)]).unwrap_err());
    assert!(
        err.contains(&script.display().to_string()) && err.contains("ELF"),
        "{err}"
    );
}
