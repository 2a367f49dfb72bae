//! The archive read back: index -> manifest -> config and layers, digests,
//! sizes, diff_ids, annotations, determinism.

use std::process::Command;

use tcab_oci_image::{
    BASE_ENV, MEDIA_LAYER, WORKLOAD_PATH, digest, dispatcher_image, workload_image,
};

use crate::support::{Archive, bin_true, blob_path, fake_bin_dir};

#[test]
fn the_index_leads_to_a_manifest_config_and_layers_matching_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.tar");
    let image = workload_image("tcab/driver:dev", &bin_true(), &["driver", "--fast"]).unwrap();
    let manifest_digest = image.write_archive(&out).unwrap();
    let a = Archive::read(&out);

    assert_eq!(
        a.files["oci-layout"].data,
        br#"{"imageLayoutVersion":"1.0.0"}"#
    );
    let manifests = a.index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    let m = &manifests[0];
    assert_eq!(m["digest"], manifest_digest.as_str());
    assert_eq!(
        m["annotations"]["io.containerd.image.name"],
        "docker.io/tcab/driver:dev"
    );
    assert_eq!(m["annotations"]["org.opencontainers.image.ref.name"], "dev");

    // Every descriptor's digest and size are its blob's.
    let check = |d: &serde_json::Value| {
        let blob = &a.files[&blob_path(d["digest"].as_str().unwrap())].data;
        assert_eq!(digest(blob), d["digest"].as_str().unwrap());
        assert_eq!(blob.len() as u64, d["size"].as_u64().unwrap());
    };
    check(m);
    check(&a.manifest["config"]);
    let layers = a.manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2, "the base and the binary");
    for l in layers {
        assert_eq!(l["mediaType"], MEDIA_LAYER);
        check(l);
    }
    // The blobs are exactly the manifest, the config and the layers.
    let blobs = a
        .files
        .keys()
        .filter(|p| p.starts_with("blobs/sha256/"))
        .count();
    assert_eq!(blobs, 2 + layers.len());

    let c = &a.config;
    assert_eq!(
        (c["architecture"].as_str(), c["os"].as_str()),
        (Some("amd64"), Some("linux"))
    );
    let diff_ids: Vec<String> = a.layer_tars.iter().map(|t| digest(t)).collect();
    assert_eq!(c["rootfs"]["diff_ids"], serde_json::json!(diff_ids));
    assert_eq!(c["rootfs"]["type"], "layers");
    assert_eq!(c["config"]["User"], "65532:65532");
    assert_eq!(
        c["config"]["Entrypoint"],
        serde_json::json!([WORKLOAD_PATH, "driver", "--fast"])
    );
    assert_eq!(c["config"]["Env"], serde_json::json!(BASE_ENV));
    assert_eq!(c["config"]["WorkingDir"], "/home/nonroot");
    assert!(c["config"].get("Cmd").is_none(), "no Cmd when none is set");

    let top = &a.layers()[1];
    let bin = &top[WORKLOAD_PATH.trim_start_matches('/')];
    assert_eq!(
        (bin.kind, bin.mode, bin.uid, bin.mtime),
        (b'0', 0o755, 0, 0)
    );
    assert_eq!(bin.data, std::fs::read(bin_true()).unwrap());
    let base = &a.layers()[0];
    let home = &base["home/nonroot"];
    assert_eq!(
        (home.kind, home.mode, home.uid, home.gid),
        (b'5', 0o700, 65532, 65532)
    );
    let loader = &base["lib64/ld-linux-x86-64.so.2"];
    assert_eq!(
        (loader.kind, loader.link.as_str()),
        (b'2', "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    );
}

#[test]
fn the_same_image_written_twice_gives_the_same_bytes_and_a_changed_one_another_digest() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, args: &[&str]| {
        let out = dir.path().join(name);
        let digest = workload_image("tcab/x:1", &bin_true(), args)
            .unwrap()
            .write_archive(&out)
            .unwrap();
        (digest, std::fs::read(out).unwrap())
    };
    let (d1, b1) = write("1.tar", &["a"]);
    let (d2, b2) = write("2.tar", &["a"]);
    assert_eq!(d1, d2);
    assert!(b1 == b2, "the archives differ byte for byte");
    let (d3, _) = write("3.tar", &["b"]);
    assert_ne!(d1, d3, "another entrypoint is another image");
}

#[test]
fn the_dispatcher_is_named_in_docker_ios_library_with_its_tag() {
    let bins = fake_bin_dir();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.tar");
    dispatcher_image(bins.path(), "0.1.0", "0.1.0", "abc")
        .unwrap()
        .write_archive(&out)
        .unwrap();
    let a = Archive::read(&out);
    let ann = &a.index["manifests"][0]["annotations"];
    assert_eq!(
        ann["io.containerd.image.name"],
        "docker.io/library/tcab-dispatcher:0.1.0"
    );
    assert_eq!(ann["org.opencontainers.image.ref.name"], "0.1.0");
}

#[test]
fn gnu_tar_lists_the_archive_and_its_layers() {
    // An independent reader: GNU tar must accept what the hand-written writer makes.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.tar");
    workload_image("tcab/x:1", &bin_true(), &[])
        .unwrap()
        .write_archive(&out)
        .unwrap();
    let list = |path: &std::path::Path| {
        let o = Command::new("tar")
            .arg("-tvf")
            .arg(path)
            .arg("--numeric-owner")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let outer = list(&out);
    assert!(
        outer.contains(" index.json") && outer.contains(" oci-layout"),
        "{outer}"
    );
    let a = Archive::read(&out);
    let base = dir.path().join("base.tar");
    std::fs::write(&base, &a.layer_tars[0]).unwrap();
    let base = list(&base);
    assert!(
        base.contains("drwx------ 65532/65532") && base.contains(" home/nonroot/"),
        "{base}"
    );
    assert!(
        base.contains("drwxrwxrwt 0/0") && base.contains(" tmp/"),
        "{base}"
    );
    assert!(
        base.contains("lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        "{base}"
    );
}
