//! The two images the project builds: the dispatcher and the test rig's workloads.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};

use crate::{Image, ImageConfig, Layer, debian_base};

/// The binaries the Dockerfile copies to `/usr/local/bin/`.
pub const DISPATCHER_BINARIES: [&str; 3] = ["tcab-admitter", "tcab-lease-keeper", "tcab-reaper"];

/// The environment of distroless `cc-debian12:nonroot`'s config, which the
/// Dockerfile's runtime stage inherits.
pub const BASE_ENV: [&str; 2] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
];

/// distroless `:nonroot`'s working directory.
pub const WORKING_DIR: &str = "/home/nonroot";

/// The Dockerfile's `USER` (the chart's runAsUser and runAsGroup).
pub const NONROOT_USER: &str = "65532:65532";

/// Where a workload image holds its binary.
pub const WORKLOAD_PATH: &str = "/usr/local/bin/tcab-workload";

/// The Dockerfile's runtime stage: [`debian_base`] for the three binaries of
/// `bin_dir`, then a layer with them at `/usr/local/bin/` (0755), `USER
/// 65532:65532`, the Dockerfile's `LABEL`s as its build args `VERSION` =
/// `version` and `REVISION` = `revision` (and `SOURCE` empty, its default)
/// make them, no entrypoint or command, and the base's env and working
/// directory. Named `tcab-dispatcher:<tag>`.
pub fn dispatcher_image(bin_dir: &Path, tag: &str, version: &str, revision: &str) -> Result<Image> {
    let paths: Vec<_> = DISPATCHER_BINARIES
        .iter()
        .map(|b| bin_dir.join(b))
        .collect();
    for p in &paths {
        if !p.is_file() {
            bail!(
                "{} is missing: build the binaries first (cargo build --release -p tcab-admitter -p tcab-lease-keeper -p tcab-reaper)",
                p.display()
            );
        }
    }
    let mut app = Layer::new();
    for (name, path) in DISPATCHER_BINARIES.iter().zip(&paths) {
        app.file(&format!("/usr/local/bin/{name}"), path, 0o755, 0, 0);
    }
    let labels = [
        ("org.opencontainers.image.title", "tcab-dispatcher"),
        (
            "org.opencontainers.image.description",
            "Turns the tcab backend's run and publish queues into Kubernetes Jobs",
        ),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
        ("org.opencontainers.image.source", ""),
        ("org.opencontainers.image.version", version),
        ("org.opencontainers.image.revision", revision),
    ];
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    Ok(Image {
        name: format!("tcab-dispatcher:{tag}"),
        layers: vec![debian_base(&refs)?, app],
        config: ImageConfig {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..nonroot_config()
        },
    })
}

/// A test rig workload: [`debian_base`] for `workload_bin`, then the binary at
/// [`WORKLOAD_PATH`] (0755), run as 65532:65532 with the entrypoint
/// `[WORKLOAD_PATH, program_args...]`. `name` is the image's reference.
pub fn workload_image(name: &str, workload_bin: &Path, program_args: &[&str]) -> Result<Image> {
    if !workload_bin.is_file() {
        bail!("the workload binary {} is missing", workload_bin.display());
    }
    let mut app = Layer::new();
    app.file(WORKLOAD_PATH, workload_bin, 0o755, 0, 0);
    let entrypoint = std::iter::once(WORKLOAD_PATH).chain(program_args.iter().copied());
    Ok(Image {
        name: name.to_string(),
        layers: vec![debian_base(&[workload_bin])?, app],
        config: ImageConfig {
            entrypoint: entrypoint.map(String::from).collect(),
            ..nonroot_config()
        },
    })
}

fn nonroot_config() -> ImageConfig {
    ImageConfig {
        user: NONROOT_USER.to_string(),
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        env: BASE_ENV.iter().map(|e| e.to_string()).collect(),
        working_dir: WORKING_DIR.to_string(),
        labels: BTreeMap::new(),
    }
}
