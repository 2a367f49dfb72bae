//! The JSON fixtures kept in this crate's `fixtures/` folder.
//!
//! - `death/`: Jobs and Pods shaped as a Kubernetes 1.31+ cluster writes them
//!   when a driver or publisher dies (the lease-keeper's death causes).

use serde::de::DeserializeOwned;
use std::path::PathBuf;

/// The path of `fixtures/<relative>`.
pub fn path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(relative)
}

/// `fixtures/<relative>` read as JSON into `T`; panics naming the file.
pub fn load<T: DeserializeOwned>(relative: &str) -> T {
    let path = path(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `fixtures/death/<file>` as `T`.
pub fn death<T: DeserializeOwned>(file: &str) -> T {
    load(&format!("death/{file}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_death_fixture_is_json() {
        let dir = super::path("death");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let _: serde_json::Value = super::death(&name);
            n += 1;
        }
        assert!(n > 0, "no fixtures in {}", dir.display());
    }
}
