//! Reading archives back: a small ustar reader (GNU tar cross-checks it in
//! `archive::gnu_tar_lists_the_archive_and_its_layers`), and test binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One tar entry as read back.
#[derive(Debug, Clone)]
pub struct TarEntry {
    /// b'0' file, b'5' directory, b'2' symlink.
    pub kind: u8,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u64,
    pub data: Vec<u8>,
    pub link: String,
}

fn field(h: &[u8]) -> String {
    let end = h.iter().position(|&b| b == 0).unwrap_or(h.len());
    String::from_utf8(h[..end].to_vec()).unwrap()
}

fn octal(h: &[u8]) -> u64 {
    u64::from_str_radix(field(h).trim(), 8).unwrap()
}

/// Every entry of a tar by path (no trailing `/`), in file order checked sorted.
pub fn read_tar(tar: &[u8]) -> BTreeMap<String, TarEntry> {
    let (mut at, mut out, mut order) = (0, BTreeMap::new(), Vec::new());
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        assert_eq!(&h[257..263], b"ustar\0", "a ustar header at {at}");
        let (prefix, name) = (field(&h[345..500]), field(&h[0..100]));
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let size = octal(&h[124..136]) as usize;
        let data = tar[at + 512..at + 512 + size].to_vec();
        let path = path.trim_end_matches('/').to_string();
        order.push(path.clone());
        let entry = TarEntry {
            kind: h[156],
            mode: octal(&h[100..108]) as u32,
            uid: octal(&h[108..116]) as u32,
            gid: octal(&h[116..124]) as u32,
            mtime: octal(&h[136..148]),
            data,
            link: field(&h[157..257]),
        };
        assert!(out.insert(path.clone(), entry).is_none(), "{path} twice");
        at += 512 + size.next_multiple_of(512);
    }
    assert_eq!(tar.len(), at + 1024, "two zero blocks end the archive");
    out
}

/// An image archive read back: its files, index, manifest, config and layers.
pub struct Archive {
    pub files: BTreeMap<String, TarEntry>,
    pub index: Value,
    pub manifest: Value,
    pub config: Value,
    /// Each layer's raw tar, bottom first.
    pub layer_tars: Vec<Vec<u8>>,
}

impl Archive {
    pub fn read(path: &Path) -> Self {
        let files = read_tar(&std::fs::read(path).unwrap());
        let json = |name: &str| -> Value { serde_json::from_slice(&files[name].data).unwrap() };
        let index = json("index.json");
        let manifest = json(&blob_path(
            index["manifests"][0]["digest"].as_str().unwrap(),
        ));
        let config = json(&blob_path(manifest["config"]["digest"].as_str().unwrap()));
        let layer_tars = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                files[&blob_path(l["digest"].as_str().unwrap())]
                    .data
                    .clone()
            })
            .collect();
        Self {
            files,
            index,
            manifest,
            config,
            layer_tars,
        }
    }

    /// Each layer's entries, bottom first.
    pub fn layers(&self) -> Vec<BTreeMap<String, TarEntry>> {
        self.layer_tars.iter().map(|t| read_tar(t)).collect()
    }
}

/// `blobs/sha256/<hex>` for `sha256:<hex>`.
pub fn blob_path(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.strip_prefix("sha256:").unwrap())
}

/// A small dynamically linked binary of this machine.
pub fn bin_true() -> PathBuf {
    PathBuf::from("/bin/true")
}

/// A temporary directory with copies of `/bin/true` named as the dispatcher's binaries.
pub fn fake_bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in tcab_oci_image::DISPATCHER_BINARIES {
        std::fs::copy(bin_true(), dir.path().join(name)).unwrap();
    }
    dir
}

/// A shell's or busybox's path, if `path` is one.
pub fn is_shell(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    ["sh", "bash", "dash", "ash", "zsh"].contains(&base) || path.contains("busybox")
}
