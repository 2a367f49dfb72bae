//! A string that must never reach a log: the service token and per-job tokens.
//!
//! The value is held in a [`secrecy::SecretString`], so it is zeroed when
//! dropped and its `Debug` is a placeholder. There is deliberately no
//! `Display`: a token cannot be formatted into a header, a URL or a message
//! by accident. That is a compile error, not a placeholder on the wire:
//!
//! ```compile_fail
//! let token = tcab_shared::Secret::new("t0ken");
//! let header = format!("Bearer {token}");
//! ```
//!
//! The value is read only where it is sent, with [`Secret::expose`]:
//!
//! ```
//! let token = tcab_shared::Secret::new("t0ken");
//! assert_eq!(format!("Bearer {}", token.expose()), "Bearer t0ken");
//! assert_eq!(format!("{token:?}"), "Secret(<redacted>)");
//! ```

use secrecy::{ExposeSecret, SecretString};
use std::fmt;

/// What a secret shows wherever it is printed for a reader (config dumps).
pub const REDACTED: &str = "<redacted>";

/// A secret string. `Debug` prints a fixed placeholder, so a secret inside any
/// logged or debug-printed struct stays hidden; it has no `Display`. Read the
/// value only where it is put on the wire, with [`Secret::expose`].
#[derive(Clone, Default)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The value, for the one place it is sent (an auth header, a pod env var).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        String::deserialize(de).map(Secret::new)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value_and_expose_gives_it() {
        let s = Secret::new("hunter2-token");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2-token");
        assert!(!s.is_empty());
        assert!(Secret::default().is_empty());
    }

    #[test]
    fn hidden_inside_a_derived_debug() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Holder {
            token: Secret,
        }
        let h = Holder {
            token: "abc-secret".into(),
        };
        assert!(!format!("{h:?}").contains("abc-secret"));
    }

    #[test]
    fn read_from_json_as_a_plain_string() {
        let s: Secret = serde_json::from_str(r#""from-the-wire""#).unwrap();
        assert_eq!(s.expose(), "from-the-wire");
        assert_eq!(s, Secret::new("from-the-wire"));
        assert_ne!(s, Secret::new("other"));
    }
}
