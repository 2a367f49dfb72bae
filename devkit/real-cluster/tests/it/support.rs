//! What the tests share: the skip rule, the process's control plane and a
//! namespace per test.

use std::path::Path;
use std::time::Duration;
use tcab_real_cluster::{Access, Identity, Settings};

/// The nodes the shared control plane has tokens for.
pub const NODES: [&str; 2] = ["node-a", "node-b"];

/// How long a test waits for what the control plane does by itself.
pub const LIMIT: Duration = Duration::from_secs(30);

pub use tcab_real_cluster::built_or_skip;

/// The settings of the shared control plane (every test gives the same).
pub fn shared_settings() -> Settings {
    Settings {
        nodes: NODES.map(String::from).to_vec(),
        identities: vec![Identity::new("viewer", &["tcab:viewers"])],
        ..Settings::default()
    }
}

/// The process's control plane, and a fresh namespace `prefix-<random>` in
/// it whose `default` ServiceAccount exists; `None` when skipping.
pub async fn shared_with_namespace(prefix: &str) -> Option<(&'static Access, String)> {
    built_or_skip()?;
    let access = tcab_real_cluster::shared_with(shared_settings)
        .await
        .unwrap_or_else(|e| panic!("{}", tcab_real_cluster::error_chain(&*e)));
    let ns = format!("{prefix}-{:08x}", rand::random::<u32>());
    access
        .create_namespace(&ns, LIMIT)
        .await
        .unwrap_or_else(|e| panic!("{}", tcab_real_cluster::error_chain(&e)));
    Some((access, ns))
}

/// The PIDs of live (not zombie) processes whose command line mentions `dir`.
pub fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if cmdline.contains(&needle) && !zombie {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Whether a process group has any member left.
pub fn group_alive(pgid: u32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid as i32), None).is_ok()
}
