//! OCI image archives built without a container engine, for containerd's
//! `ctr -n k8s.io images import`: an [`Image`] of [`Layer`]s and an
//! [`ImageConfig`], written as an OCI image layout in one tar by
//! [`Image::write_archive`]. [`dispatcher_image`] is the Dockerfile's runtime
//! stage, [`workload_image`] a test rig workload, both on [`debian_base`].

mod base;
pub mod elf;
mod images;
mod layer;
pub mod rig;
mod tar;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use base::{CA_BUNDLE, LIBRARY_DIRS, NONROOT, PACKAGES_FILE, debian_base};
pub use images::{
    BASE_ENV, DISPATCHER_BINARIES, NONROOT_USER, WORKING_DIR, WORKLOAD_PATH, dispatcher_image,
    workload_image,
};
pub use layer::{Entry, Layer, Source};

/// The media types written.
pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The manifest's media type.
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type.
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The layers' media type (uncompressed tar).
pub const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// The run-time part of an image's configuration, as Docker's `USER`,
/// `ENTRYPOINT`, `CMD`, `ENV`, `WORKDIR` and `LABEL` set it. Empty fields are
/// left out of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `uid:gid` or a user name.
    pub user: String,
    /// The command's first words.
    pub entrypoint: Vec<String>,
    /// The arguments after the entrypoint.
    pub cmd: Vec<String>,
    /// `NAME=value` entries.
    pub env: Vec<String>,
    /// The working directory.
    pub working_dir: String,
    /// The image's labels.
    pub labels: BTreeMap<String, String>,
}

/// An image: a name (normalised on writing, see [`normalise_reference`]), its
/// layers, bottom first, and its configuration.
#[derive(Debug, Clone, Default)]
pub struct Image {
    /// The reference, e.g. `tcab/driver:dev` or `tcab-dispatcher:0.1.0`.
    pub name: String,
    /// The layers, bottom first.
    pub layers: Vec<Layer>,
    /// The configuration.
    pub config: ImageConfig,
}

impl Image {
    /// The full reference containerd will list the image under.
    pub fn reference(&self) -> String {
        normalise_reference(&self.name)
    }

    /// Writes the image as an OCI image layout in one tar at `out`
    /// (`oci-layout`, `index.json` naming the one manifest with the
    /// `io.containerd.image.name` and `org.opencontainers.image.ref.name`
    /// annotations, and the blobs), for `ctr images import`. The same image
    /// always gives the same bytes. Returns the manifest's digest,
    /// `sha256:<hex>`.
    pub fn write_archive(&self, out: &Path) -> Result<String> {
        let mut blobs = BTreeMap::new();
        let mut layers = Vec::new();
        for layer in &self.layers {
            let tar = layer.tar()?;
            layers.push(Descriptor::new(MEDIA_LAYER, &tar));
            blobs.insert(digest(&tar), tar);
        }
        let c = &self.config;
        let config = ConfigJson {
            architecture: "amd64",
            os: "linux",
            config: RunConfig {
                user: &c.user,
                env: &c.env,
                entrypoint: &c.entrypoint,
                cmd: &c.cmd,
                working_dir: &c.working_dir,
                labels: &c.labels,
            },
            // Uncompressed layers: each diff_id is the layer's digest.
            rootfs: RootFs {
                kind: "layers",
                diff_ids: layers.iter().map(|l| l.digest.clone()).collect(),
            },
        };
        let config = serde_json::to_vec(&config)?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: MEDIA_MANIFEST,
            config: Descriptor::new(MEDIA_CONFIG, &config),
            layers,
        };
        blobs.insert(digest(&config), config);
        let manifest = serde_json::to_vec(&manifest)?;
        let reference = self.reference();
        let tag = tag_of(&reference);
        let mut desc = Descriptor::new(MEDIA_MANIFEST, &manifest);
        desc.annotations = Some(BTreeMap::from([
            ("io.containerd.image.name", reference.clone()),
            ("org.opencontainers.image.ref.name", tag),
        ]));
        desc.platform = Some(Platform {
            architecture: "amd64",
            os: "linux",
        });
        let manifest_digest = desc.digest.clone();
        blobs.insert(manifest_digest.clone(), manifest);
        let index = Index {
            schema_version: 2,
            media_type: MEDIA_INDEX,
            manifests: vec![desc],
        };

        let mut tar = Vec::new();
        tar::append(
            &mut tar,
            "oci-layout",
            tar::Kind::File(br#"{"imageLayoutVersion":"1.0.0"}"#),
            0o644,
            0,
            0,
        )?;
        tar::append(
            &mut tar,
            "index.json",
            tar::Kind::File(&serde_json::to_vec(&index)?),
            0o644,
            0,
            0,
        )?;
        tar::append(&mut tar, "blobs", tar::Kind::Dir, 0o755, 0, 0)?;
        tar::append(&mut tar, "blobs/sha256", tar::Kind::Dir, 0o755, 0, 0)?;
        for (digest, blob) in &blobs {
            let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
            tar::append(&mut tar, &name, tar::Kind::File(blob), 0o644, 0, 0)?;
        }
        tar::finish(&mut tar);
        std::fs::write(out, tar).with_context(|| format!("writing {}", out.display()))?;
        Ok(manifest_digest)
    }
}

/// `sha256:<hex>` of `data`.
pub fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// A reference as containerd's CRI names images (docker's `ParseDockerRef`):
/// `docker.io` when the first component is not a registry host, `library/`
/// for a one-component `docker.io` name, `:latest` when there is neither tag
/// nor digest, and the tag dropped when there is a digest.
/// `tcab/driver:dev` becomes `docker.io/tcab/driver:dev`, `busybox`
/// `docker.io/library/busybox:latest`.
pub fn normalise_reference(r: &str) -> String {
    let (named, digest) = match r.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (r, None),
    };
    let slash = named.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match named[slash..].rfind(':') {
        Some(i) => (&named[..slash + i], Some(&named[slash + i + 1..])),
        None => (named, None),
    };
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first != first.to_lowercase() =>
        {
            (first, rest.to_string())
        }
        _ => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    match (digest, tag) {
        (Some(d), _) => format!("{domain}/{path}@{d}"),
        (None, Some(t)) => format!("{domain}/{path}:{t}"),
        (None, None) => format!("{domain}/{path}:latest"),
    }
}

/// The tag of a normalised reference (empty for a digest reference).
fn tag_of(reference: &str) -> String {
    if reference.contains('@') {
        return String::new();
    }
    let slash = reference.rfind('/').map_or(0, |i| i + 1);
    reference[slash..]
        .rsplit_once(':')
        .map(|(_, t)| t.to_string())
        .unwrap_or_default()
}

// The JSON documents, as structs so their field order never depends on
// serde_json's features.

#[derive(Serialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    digest: String,
    size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<&'static str, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform: Option<Platform>,
}

impl Descriptor {
    fn new(media_type: &'static str, blob: &[u8]) -> Self {
        Self {
            media_type,
            digest: digest(blob),
            size: blob.len(),
            annotations: None,
            platform: None,
        }
    }
}

#[derive(Serialize)]
struct Platform {
    architecture: &'static str,
    os: &'static str,
}

#[derive(Serialize)]
struct Index {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    manifests: Vec<Descriptor>,
}

#[derive(Serialize)]
struct Manifest {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    architecture: &'static str,
    os: &'static str,
    config: RunConfig<'a>,
    rootfs: RootFs,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    user: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    env: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    entrypoint: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    cmd: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    working_dir: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_normalised_as_containerds_cri_does() {
        for (given, want) in [
            ("busybox", "docker.io/library/busybox:latest"),
            (
                "tcab-dispatcher:0.1.0",
                "docker.io/library/tcab-dispatcher:0.1.0",
            ),
            ("tcab/driver:dev", "docker.io/tcab/driver:dev"),
            ("docker.io/tcab/driver", "docker.io/tcab/driver:latest"),
            ("index.docker.io/busybox:1", "docker.io/library/busybox:1"),
            ("localhost/x", "localhost/x:latest"),
            ("localhost:5000/x:v1", "localhost:5000/x:v1"),
            ("registry.example/a/b:c", "registry.example/a/b:c"),
            ("x:t@sha256:abcd", "docker.io/library/x@sha256:abcd"),
        ] {
            assert_eq!(normalise_reference(given), want, "{given}");
        }
        assert_eq!(tag_of("localhost:5000/x:v1"), "v1");
        assert_eq!(tag_of("docker.io/library/x@sha256:ab"), "");
    }
}
