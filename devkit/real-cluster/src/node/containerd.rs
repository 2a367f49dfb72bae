//! containerd for one real node: its configuration (root, state and socket
//! under the node's directory; CNI from Debian's plugins; our pause image),
//! the node's CNI network, and image imports with `ctr`.

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sandbox ("pause") image every pod's sandbox runs; imported like the
/// other images, since no registry answers here.
pub const PAUSE_IMAGE: &str = "docker.io/tcab/pause:dev";
/// Where Debian's containernetworking-plugins are.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The paths of one node's containerd.
#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub cni_conf_dir: PathBuf,
}

impl Paths {
    pub fn in_dir(dir: &Path) -> Paths {
        Paths {
            dir: dir.to_owned(),
            config: dir.join("config.toml"),
            socket: dir.join("containerd.sock"),
            cni_conf_dir: dir.join("cni"),
        }
    }
}

/// containerd's configuration. `restrict_oom_score_adj`: the CRI plugin
/// otherwise asks runc for -998 on every sandbox, which needs
/// CAP_SYS_RESOURCE (not granted on every machine); restricted, it keeps
/// containerd's own score as the floor.
pub fn config(p: &Paths) -> String {
    let d = p.dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"#,
        sock = p.socket.display(),
        cni = p.cni_conf_dir.display(),
    )
}

/// The node's pod network: a bridge of its own with the gateway address,
/// host-local addresses from its /24 (state under the node's directory).
pub fn cni_conflist(bridge: &str, subnet: Ipv4Addr, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "tcab-pods",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false,
             "hairpinMode": true,
             "ipam": {"type": "host-local",
                      "ranges": [[{"subnet": format!("{subnet}/24")}]],
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": ipam_dir}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

/// Imports an OCI image archive into the CRI's namespace (`k8s.io`).
pub fn import(socket: &Path, archive: &Path) -> io::Result<()> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ctr images import {}: {}: {}",
            archive.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
