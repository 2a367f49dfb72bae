//! One declaration per variable ([`Setting`]) and what is derived from it:
//! reading the variable ([`Setting::get`], [`Setting::read`]) and describing
//! it ([`Declared`], which the `--help` text, the README table and the JSON
//! description are rendered from).

use super::kinds::{Kind, Minimum};
use super::{Binary, ConfigError, Env};

/// What a variable is when it is not set (or set to blank text).
#[derive(Debug, Clone, Copy)]
pub enum Fallback<D> {
    /// The binary refuses to start without it.
    Required,
    /// This default.
    Default(D),
    /// Nothing: the binary does without, or derives a value itself.
    Optional,
    /// This default when unset; set to blank text, nothing (a limit the
    /// operator removes by setting it empty).
    DefaultUnlessBlank(D),
}

/// The one declaration of an environment variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting<K: Kind> {
    /// The variable's name.
    pub name: &'static str,
    /// Its kind: how it is parsed, its type and minimum.
    pub kind: K,
    /// What it is when unset; a default is typed.
    pub fallback: Fallback<K::Default>,
    /// The binaries that read it.
    pub read_by: &'static [Binary],
    /// What it means, for operators.
    pub doc: &'static str,
}

impl<K: Kind> Setting<K> {
    /// The variable's value: parsed when set to non-blank text, else its
    /// fallback (`None` for an optional variable). Surrounding whitespace is
    /// ignored.
    pub fn read(&self, env: &Env) -> Result<Option<K::Value>, ConfigError> {
        let text = env.get(self.name).map(str::trim);
        match (text, self.fallback) {
            (Some(text), _) if !text.is_empty() => self
                .kind
                .parse(text)
                .map(Some)
                .map_err(|got| self.kind.refusal(self.name, got)),
            (Some(_), Fallback::DefaultUnlessBlank(_)) => Ok(None),
            (_, Fallback::Required) => Err(self.missing()),
            (_, Fallback::Default(d) | Fallback::DefaultUnlessBlank(d)) => {
                Ok(Some(self.kind.value_of(d)))
            }
            (_, Fallback::Optional) => Ok(None),
        }
    }

    /// The value of a required variable or of one with a default.
    pub fn get(&self, env: &Env) -> Result<K::Value, ConfigError> {
        self.read(env)?.ok_or_else(|| self.missing())
    }

    /// Whether the variable is set to non-blank text (its value unchecked).
    pub fn is_set(&self, env: &Env) -> bool {
        env.get(self.name).is_some_and(|v| !v.trim().is_empty())
    }

    fn missing(&self) -> ConfigError {
        ConfigError::Missing {
            var: self.name,
            expected: self.kind.missing(),
        }
    }

    /// The default as text, as one would set it; `None` when there is none.
    pub fn default_text(&self) -> Option<String> {
        match self.fallback {
            Fallback::Default(d) | Fallback::DefaultUnlessBlank(d) => {
                Some(self.kind.show(&self.kind.value_of(d)))
            }
            Fallback::Required | Fallback::Optional => None,
        }
    }

    /// A value as the documentation would write it.
    pub fn show(&self, value: &K::Value) -> String {
        self.kind.show(value)
    }
}

/// A declaration seen without its type: what the documentation needs.
pub trait Declared: Sync {
    /// The variable's name.
    fn name(&self) -> &'static str;
    /// The binaries that read it.
    fn read_by(&self) -> &'static [Binary];
    /// What it means.
    fn doc(&self) -> &'static str;
    /// Whether a binary that reads it refuses to start without it.
    fn required(&self) -> bool;
    /// Its default as text; `None` when it has none.
    fn default_text(&self) -> Option<String>;
    /// Whether setting it to blank text removes the default.
    fn blank_means_none(&self) -> bool;
    /// The JSON type of its value.
    fn json_type(&self) -> &'static str;
    /// The lowest value it accepts, when numeric.
    fn minimum(&self) -> Option<Minimum>;
    /// Checks the documented default against the reader: the value read
    /// from an environment without the variable must equal the value read
    /// with the variable set to the documented text, and show as that text.
    fn check_default(&self) -> Result<(), String>;
}

impl<K: Kind> Declared for Setting<K> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn read_by(&self) -> &'static [Binary] {
        self.read_by
    }
    fn doc(&self) -> &'static str {
        self.doc
    }
    fn required(&self) -> bool {
        matches!(self.fallback, Fallback::Required)
    }
    fn default_text(&self) -> Option<String> {
        Setting::default_text(self)
    }
    fn blank_means_none(&self) -> bool {
        matches!(self.fallback, Fallback::DefaultUnlessBlank(_))
    }
    fn json_type(&self) -> &'static str {
        self.kind.json_type()
    }
    fn minimum(&self) -> Option<Minimum> {
        self.kind.minimum()
    }
    fn check_default(&self) -> Result<(), String> {
        let unset = Env::from_vars(Vec::new()).map_err(|e| e.to_string())?;
        let read_unset = self.read(&unset);
        let Some(text) = Setting::default_text(self) else {
            return match read_unset {
                Ok(None) => Ok(()),
                Err(ConfigError::Missing { .. }) if self.required() => Ok(()),
                other => Err(format!("no documented default, but unset reads {other:?}")),
            };
        };
        let unset_value = match read_unset {
            Ok(Some(v)) => v,
            other => return Err(format!("default {text:?}, but unset reads {other:?}")),
        };
        let set =
            Env::from_vars([(self.name.to_owned(), text.clone())]).map_err(|e| e.to_string())?;
        match self.read(&set) {
            Ok(Some(v)) if v == unset_value && self.show(&v) == text => Ok(()),
            other => Err(format!(
                "default {text:?} reads {unset_value:?} when unset, but {other:?} when set to it"
            )),
        }
    }
}

/// Checks, for one binary, that each field of its parsed configuration
/// shows as the documented default of the variable it came from, and that
/// no variable the binary reads was left out. Used by the binaries' tests:
/// parse an environment with only the required variables, then call
/// [`DefaultsCheck::value`] or [`DefaultsCheck::optional`] for each field,
/// [`DefaultsCheck::skip`] for what has no documented default, then
/// [`DefaultsCheck::finish`].
#[derive(Debug)]
pub struct DefaultsCheck {
    binary: Binary,
    seen: Vec<&'static str>,
    wrong: Vec<String>,
}

impl DefaultsCheck {
    /// Starts the check for `binary`.
    pub fn new(binary: Binary) -> Self {
        Self {
            binary,
            seen: Vec::new(),
            wrong: Vec::new(),
        }
    }

    /// A field read with [`Setting::get`]: it must show as the default.
    pub fn value<K: Kind>(&mut self, setting: &Setting<K>, field: &K::Value) -> &mut Self {
        self.compare(setting, Some(setting.show(field)))
    }

    /// A field read with [`Setting::read`]: it must be `None` when the
    /// variable has no default, else show as the default.
    pub fn optional<K: Kind>(
        &mut self,
        setting: &Setting<K>,
        field: &Option<K::Value>,
    ) -> &mut Self {
        self.compare(setting, field.as_ref().map(|v| setting.show(v)))
    }

    /// A variable that has no documented default to compare: required, or
    /// derived from another (say why in a comment).
    pub fn skip<K: Kind>(&mut self, setting: &Setting<K>) -> &mut Self {
        self.seen.push(setting.name);
        self
    }

    fn compare<K: Kind>(&mut self, setting: &Setting<K>, got: Option<String>) -> &mut Self {
        self.seen.push(setting.name);
        if !setting.read_by.contains(&self.binary) {
            self.wrong.push(format!(
                "{}: not declared as read by {}",
                setting.name,
                self.binary.name()
            ));
        }
        let documented = setting.default_text();
        if got != documented {
            self.wrong.push(format!(
                "{}: documented default {documented:?}, parsed {got:?}",
                setting.name
            ));
        }
        self
    }

    /// Panics with every mismatch, and with every variable the binary reads
    /// that was not compared.
    pub fn finish(&self) {
        let mut problems = self.wrong.clone();
        for v in super::vars::SETTINGS {
            if v.read_by().contains(&self.binary) && !self.seen.contains(&v.name()) {
                problems.push(format!("{}: not compared", v.name()));
            }
        }
        assert!(
            problems.is_empty(),
            "{}: {}",
            self.binary.name(),
            problems.join("; ")
        );
    }
}
