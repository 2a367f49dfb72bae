//! The bodies of the admin calls kube-sim and the fault proxy share
//! (`POST /admin/restart`), so one client reads both.

use serde::{Deserialize, Serialize};

/// Body of `POST /admin/restart`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Restart {
    /// Real seconds the port stays closed (connections refused); 0 = it
    /// reopens at once.
    #[serde(default)]
    pub down_seconds: f64,
}

/// Longest downtime a restart may ask for.
pub const MAX_DOWN_SECONDS: f64 = 3600.0;

impl Restart {
    /// The downtime, if it is a number of seconds between 0 and
    /// [`MAX_DOWN_SECONDS`]; else why not.
    pub fn down(&self) -> Result<std::time::Duration, String> {
        if self.down_seconds.is_finite() && (0.0..=MAX_DOWN_SECONDS).contains(&self.down_seconds) {
            Ok(std::time::Duration::from_secs_f64(self.down_seconds))
        } else {
            Err(format!(
                "\"down_seconds\" must be between 0 and {MAX_DOWN_SECONDS}, got {}",
                self.down_seconds
            ))
        }
    }
}

/// What `POST /admin/restart` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartReport {
    /// The resourceVersion the history now starts at: a watch from an older
    /// one gets 410 ("" when the server cannot tell, as the fault proxy).
    pub resource_version: String,
    /// Connections cut (the caller's excepted).
    pub connections_cut: u64,
    /// Watches that were open.
    pub watches_closed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_downtime_is_bounded() {
        let r = |s| Restart { down_seconds: s }.down();
        assert_eq!(r(1.5), Ok(std::time::Duration::from_millis(1500)));
        assert_eq!(r(0.0), Ok(std::time::Duration::ZERO));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 3601.0] {
            assert!(r(bad).unwrap_err().contains("between 0 and 3600"), "{bad}");
        }
    }
}
