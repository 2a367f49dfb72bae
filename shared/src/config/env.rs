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

/// A `TCAB_*` variable of the environment that nothing reads, and the
/// known name closest to it (likely what was meant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// The variable as set.
    pub name: String,
    /// The closest known name (by edit distance).
    pub closest: &'static str,
}

/// The `TCAB_*` names among `names` that no tcab program reads: not a
/// declared variable (in any case), not a passthrough to the driver
/// (`TCAB_K8S_*`, `TCAB_CONTAINER_*`), not one the driver or publisher
/// reads in its pod; each with the known name closest to it. Sorted.
pub fn unknown_variables<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Unknown> {
    let known: Vec<&'static str> = SETTINGS
        .iter()
        .map(|v| v.name())
        .chain(crate::names::job_env::ALL)
        .filter(|n| n.starts_with("TCAB_"))
        .collect();
    let mut unknown: Vec<Unknown> = names
        .into_iter()
        .filter(|n| n.starts_with("TCAB_"))
        .filter(|n| !is_passthrough(n) && declared_name(n).is_none())
        .filter(|n| !known.contains(n))
        .filter_map(|n| {
            let closest = known
                .iter()
                .copied()
                .min_by_key(|k| strsim::levenshtein(n, k))?;
            Some(Unknown {
                name: n.to_owned(),
                closest,
            })
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown.dedup();
    unknown
}

/// Logs a warning for each `TCAB_*` variable of the process environment
/// that nothing reads, naming the closest known one (a misspelt variable is
/// otherwise silently ignored, its default used).
pub fn warn_unknown_variables() {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    for unknown in unknown_variables(names.iter().map(String::as_str)) {
        tracing::warn!(
            variable = %unknown.name,
            closest = unknown.closest,
            "{} is set, but no tcab program reads it: ignored (did you mean {}?)",
            unknown.name,
            unknown.closest
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_tcab_variable_is_named_with_its_closest_known_one() {
        let env = [
            "TCAB_DISPATCHER_MAX_INFLIHGT",
            "TCAB_BACKEND_URL",
            "tcab_dispatcher_poll_interval_seconds",
            "TCAB_K8S_SANDBOX_NODE_SELECTOR",
            "TCAB_CONTAINER_IMAGE_PYTHON",
            "TCAB_JOB_TOKEN",
            "TCAB_DRIVER_RUNTIME",
            "TCAB_PUBLISHER_IMG",
            "PATH",
            "RUST_LOG",
        ];
        assert_eq!(
            unknown_variables(env),
            [
                Unknown {
                    name: "TCAB_DISPATCHER_MAX_INFLIHGT".into(),
                    closest: "TCAB_DISPATCHER_MAX_INFLIGHT",
                },
                Unknown {
                    name: "TCAB_PUBLISHER_IMG".into(),
                    closest: "TCAB_PUBLISHER_IMAGE",
                },
            ]
        );
    }
}
