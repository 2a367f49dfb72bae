//! The environment a binary's configuration is read from: the declared
//! variables and the passthrough ones, as text. Nothing else is kept.

use super::ConfigError;
use super::vars::{PASSTHROUGH_PREFIXES, SETTINGS};
use std::collections::BTreeMap;

/// The declared and passthrough variables of an environment, unparsed.
/// Deliberately not `Debug`: it holds the service token as text.
pub struct Env {
    declared: BTreeMap<String, String>,
    passthrough: Vec<(String, String)>,
}

impl Env {
    /// Reads the given variables (the process environment in
    /// [`super::load`]); any other variable is dropped.
    pub fn from_vars<I>(vars: I) -> Result<Env, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        // A later value of the same name wins, as in a process environment.
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let passthrough = vars
            .iter()
            .filter(|(k, _)| is_passthrough(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut declared = BTreeMap::new();
        for (key, value) in vars {
            // Names match in any case (a lower-case variable is still read); the
            // same name twice in different case is an error.
            let Some(name) = declared_name(&key) else {
                continue;
            };
            if declared.insert(name.to_owned(), value).is_some() {
                return Err(ConfigError::Environment(format!(
                    "{name}: set twice, in different case"
                )));
            }
        }
        Ok(Env {
            declared,
            passthrough,
        })
    }

    /// Reads the process environment; a value that is not UTF-8 is an error
    /// naming its variable (when the variable is one the binaries read).
    pub fn from_process() -> Result<Env, ConfigError> {
        let mut vars = Vec::new();
        for (key, value) in std::env::vars_os() {
            let (Some(key), value) = (key.to_str().map(str::to_owned), value) else {
                continue;
            };
            match value.into_string() {
                Ok(value) => vars.push((key, value)),
                Err(_) if declared_name(&key).is_some() || is_passthrough(&key) => {
                    return Err(ConfigError::Environment(format!(
                        "{key}: expected UTF-8 text"
                    )));
                }
                Err(_) => {}
            }
        }
        Env::from_vars(vars)
    }

    /// A declared variable's text, as given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.declared.get(name).map(String::as_str)
    }

    /// Every `TCAB_K8S_*` and `TCAB_CONTAINER_*` variable, sorted by name.
    pub fn passthrough(&self) -> &[(String, String)] {
        &self.passthrough
    }
}

/// The declared name `name` stands for, ignoring case.
fn declared_name(name: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .map(|v| v.name())
        .find(|declared| declared.eq_ignore_ascii_case(name))
}

fn is_passthrough(name: &str) -> bool {
    PASSTHROUGH_PREFIXES.iter().any(|p| name.starts_with(p))
}
