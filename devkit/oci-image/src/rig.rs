//! The test rig's images for real nodes: the fake workloads (one
//! `tcab-workload` binary, an entrypoint argument per image) and the pod
//! sandbox's pause image, written once per binary into a cache directory.
//!
//! Archives are rebuilt only when the binary changed (its SHA-256 is kept
//! beside each archive), and written to a temporary name then renamed, so
//! test processes running at once never read half an archive.

use crate::{Image, digest, workload_image};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The pod sandbox's image (containerd's `sandbox_image`).
pub const PAUSE_IMAGE: &str = "docker.io/tcab/pause:dev";

/// Each workload image of the rig and the `tcab-workload` program it runs.
pub const WORKLOAD_IMAGES: [(&str, &str); 6] = [
    (PAUSE_IMAGE, "pause"),
    ("tcab/driver:dev", "driver"),
    ("tcab/publisher:dev", "publisher"),
    ("tcab-sandbox:sim", "plain"),
    ("tcab/plain:dev", "plain"),
    ("tcab/plain:1", "plain"),
];

/// Writes (or finds current in `dir`) an archive per [`WORKLOAD_IMAGES`]
/// entry for `workload_bin`; returns their paths.
pub fn workload_archives(workload_bin: &Path, dir: &Path) -> Result<Vec<PathBuf>> {
    let bytes = std::fs::read(workload_bin)
        .with_context(|| format!("reading the workload binary {}", workload_bin.display()))?;
    let key = format!("{} {}\n", digest(&bytes), env!("CARGO_PKG_VERSION"));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    for (name, program) in WORKLOAD_IMAGES {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let archive = dir.join(format!("{file}.tar"));
        let key_file = dir.join(format!("{file}.key"));
        let current =
            archive.is_file() && std::fs::read_to_string(&key_file).is_ok_and(|k| k == key);
        if !current {
            write_atomically(&workload_image(name, workload_bin, &[program])?, &archive)?;
            std::fs::write(&key_file, &key)
                .with_context(|| format!("writing {}", key_file.display()))?;
        }
        out.push(archive);
    }
    Ok(out)
}

/// Writes `image` to `path` through a temporary file in the same directory.
pub fn write_atomically(image: &Image, path: &Path) -> Result<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    let d = image.write_archive(&tmp)?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming onto {}", path.display()))?;
    Ok(d)
}

/// A binary of this workspace's target directory, beside the running
/// executable (`target/<profile>/`, or its parent for a test in `deps/`).
pub fn target_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the current executable")?;
    let mut dir = exe
        .parent()
        .context("the executable has no directory")?
        .to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        anyhow::bail!(
            "{} is not built (cargo build -p tcab-workloads --bin {name})",
            path.display()
        )
    }
}
