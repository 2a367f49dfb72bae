//! One image layer: a set of entries written as a deterministic tar.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::tar::{self, Kind};

/// Where a file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Read from this host path when the layer is written.
    Host(PathBuf),
    /// These bytes.
    Bytes(Vec<u8>),
}

/// One entry of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File {
        source: Source,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A directory.
    Dir { mode: u32, uid: u32, gid: u32 },
    /// A symbolic link to `target` (kept as given, absolute or relative).
    Symlink { target: String },
}

/// A filesystem layer. Entries are keyed by their path in the image (without
/// the leading `/`) and written sorted, with mtime 0 and each missing parent
/// directory as `0755 root:root`, so the same entries always give the same tar
/// and digest. Adding a path again replaces its entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer {
    entries: BTreeMap<String, Entry>,
}

impl Layer {
    /// An empty layer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file at `path` in the image with the content of the host file `host`.
    pub fn file(&mut self, path: &str, host: &Path, mode: u32, uid: u32, gid: u32) -> &mut Self {
        let source = Source::Host(host.to_path_buf());
        self.insert(
            path,
            Entry::File {
                source,
                mode,
                uid,
                gid,
            },
        )
    }

    /// A file at `path` in the image holding `data`.
    pub fn bytes(
        &mut self,
        path: &str,
        data: impl Into<Vec<u8>>,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> &mut Self {
        let source = Source::Bytes(data.into());
        self.insert(
            path,
            Entry::File {
                source,
                mode,
                uid,
                gid,
            },
        )
    }

    /// A directory at `path` (e.g. `mode` 0o1777 for `/tmp`).
    pub fn dir(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> &mut Self {
        self.insert(path, Entry::Dir { mode, uid, gid })
    }

    /// A symlink at `path` pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let target = target.to_string();
        self.insert(path, Entry::Symlink { target })
    }

    /// The entry at `path` (with or without a leading `/`), if any.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path.trim_start_matches('/'))
    }

    /// Every entry with its path (no leading `/`), sorted, as written, the
    /// implied parent directories included.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e))
    }

    fn insert(&mut self, path: &str, entry: Entry) -> &mut Self {
        let path = clean(path);
        // Every ancestor becomes a directory unless one was given already.
        for (i, _) in path.match_indices('/') {
            self.entries
                .entry(path[..i].to_string())
                .or_insert(Entry::Dir {
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                });
        }
        self.entries.insert(path, entry);
        self
    }

    /// The layer as an uncompressed tar (`application/vnd.oci.image.layer.v1.tar`).
    pub fn tar(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for (path, entry) in &self.entries {
            if path.is_empty()
                || path
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
            {
                bail!("layer: the path {path:?} is not a plain path");
            }
            if let Some((parent, _)) = path.rsplit_once('/')
                && !matches!(self.entries.get(parent), Some(Entry::Dir { .. }))
            {
                bail!("layer: /{path} is under /{parent}, which is not a directory");
            }
            match entry {
                Entry::File {
                    source,
                    mode,
                    uid,
                    gid,
                } => {
                    let data = match source {
                        Source::Bytes(b) => std::borrow::Cow::Borrowed(b.as_slice()),
                        Source::Host(p) => std::borrow::Cow::Owned(
                            std::fs::read(p)
                                .with_context(|| format!("reading {} for /{path}", p.display()))?,
                        ),
                    };
                    tar::append(&mut out, path, Kind::File(&data), *mode, *uid, *gid)?;
                }
                Entry::Dir { mode, uid, gid } => {
                    tar::append(&mut out, path, Kind::Dir, *mode, *uid, *gid)?
                }
                Entry::Symlink { target } => {
                    tar::append(&mut out, path, Kind::Symlink(target), 0o777, 0, 0)?
                }
            }
        }
        tar::finish(&mut out);
        Ok(out)
    }
}

/// `path` without its leading `/`, `.` components or doubled slashes.
fn clean(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_implied_and_an_explicit_directory_wins() {
        let mut layer = Layer::new();
        layer.bytes("/home/nonroot/x", "x", 0o600, 65532, 65532);
        layer.dir("/home/nonroot", 0o700, 65532, 65532);
        let paths: Vec<&str> = layer.entries().map(|(p, _)| p).collect();
        assert_eq!(paths, ["home", "home/nonroot", "home/nonroot/x"]);
        assert_eq!(
            layer.get("/home/nonroot"),
            Some(&Entry::Dir {
                mode: 0o700,
                uid: 65532,
                gid: 65532
            })
        );
        assert_eq!(
            layer.get("home"),
            Some(&Entry::Dir {
                mode: 0o755,
                uid: 0,
                gid: 0
            })
        );
    }

    #[test]
    fn an_entry_under_a_symlink_is_refused() {
        let mut layer = Layer::new();
        layer
            .symlink("/lib", "usr/lib")
            .bytes("/lib/x", "x", 0o644, 0, 0);
        let err = layer.tar().unwrap_err().to_string();
        assert!(err.contains("/lib/x is under /lib"), "{err}");
    }

    #[test]
    fn a_dot_dot_path_is_refused() {
        let mut layer = Layer::new();
        layer.bytes("/etc/../x", "x", 0o644, 0, 0);
        assert!(layer.tar().is_err());
    }
}
