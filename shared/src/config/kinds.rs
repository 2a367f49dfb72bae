//! The kinds of value a variable holds. A kind knows how to parse a
//! variable's text, what to tell an operator whose text does not parse, and
//! how to write a value back as text, so the documentation shows a default
//! exactly as one would set it.

use super::{ConfigError, LogFormat};
use crate::secret::Secret;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

/// The lowest value a numeric variable accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Minimum {
    /// The bound.
    pub value: i64,
    /// Whether the bound itself is refused (`> value` rather than `>= value`).
    pub exclusive: bool,
}

/// One kind of value: its parser and how it is described.
pub trait Kind: Sync {
    /// The typed value a binary gets.
    type Value: Clone + PartialEq + fmt::Debug;
    /// How a declaration writes its default: a `const` form of the value.
    type Default: Copy + Sync;

    /// The value's type for the JSON description: `string`, `integer`,
    /// `number` or `boolean`.
    fn json_type(&self) -> &'static str {
        "string"
    }
    /// What a valid value looks like, as the error message puts it.
    fn expected(&self) -> Cow<'static, str>;
    /// What is asked for when a required variable is unset.
    fn missing(&self) -> Cow<'static, str> {
        self.expected()
    }
    /// The lowest value accepted, for numeric kinds.
    fn minimum(&self) -> Option<Minimum> {
        None
    }
    /// Parses trimmed, non-blank text. The error is the text to quote back
    /// (or, for a kind that overrides [`Kind::refusal`], why it was refused).
    fn parse(&self, text: &str) -> Result<Self::Value, String>;
    /// The error of variable `var` whose text [`Kind::parse`] refused with
    /// `error`: by default `expected ..., got <the text>`.
    fn refusal(&self, var: &'static str, error: String) -> ConfigError {
        ConfigError::Invalid {
            var,
            expected: self.expected(),
            got: error,
        }
    }
    /// The typed value of a declared default.
    fn value_of(&self, default: Self::Default) -> Self::Value;
    /// A value written as one would set it in the environment.
    fn show(&self, value: &Self::Value) -> String;
}

/// A whole number at least `min`, of the type the binary uses.
#[derive(Debug, Clone, Copy)]
pub struct Whole<T> {
    /// The lowest value accepted.
    pub min: T,
}

impl<T> Kind for Whole<T>
where
    T: FromStr + PartialOrd + Copy + fmt::Display + fmt::Debug + Into<i128> + Sync,
{
    type Value = T;
    type Default = T;

    fn json_type(&self) -> &'static str {
        "integer"
    }
    fn expected(&self) -> Cow<'static, str> {
        format!("a whole number >= {}", self.min).into()
    }
    fn minimum(&self) -> Option<Minimum> {
        let value = i64::try_from(self.min.into()).ok()?;
        Some(Minimum {
            value,
            exclusive: false,
        })
    }
    fn parse(&self, text: &str) -> Result<T, String> {
        match text.parse::<T>() {
            Ok(n) if n >= self.min => Ok(n),
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: T) -> T {
        default
    }
    fn show(&self, value: &T) -> String {
        value.to_string()
    }
}

/// A number of seconds above zero, fractions allowed.
#[derive(Debug, Clone, Copy)]
pub struct Seconds;

impl Kind for Seconds {
    type Value = Duration;
    type Default = Duration;

    fn json_type(&self) -> &'static str {
        "number"
    }
    fn expected(&self) -> Cow<'static, str> {
        "a number of seconds > 0".into()
    }
    fn minimum(&self) -> Option<Minimum> {
        Some(Minimum {
            value: 0,
            exclusive: true,
        })
    }
    fn parse(&self, text: &str) -> Result<Duration, String> {
        match text.parse::<f64>() {
            Ok(n) if n.is_finite() && n > 0.0 && n < 1e9 => Ok(Duration::from_secs_f64(n)),
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: Duration) -> Duration {
        default
    }
    fn show(&self, value: &Duration) -> String {
        value.as_secs_f64().to_string()
    }
}

/// A whole number of seconds >= 1 (for a timeout sent to the API server as
/// an integer).
#[derive(Debug, Clone, Copy)]
pub struct WholeSeconds;

impl Kind for WholeSeconds {
    type Value = Duration;
    type Default = Duration;

    fn json_type(&self) -> &'static str {
        "integer"
    }
    fn expected(&self) -> Cow<'static, str> {
        Whole { min: 1u64 }.expected()
    }
    fn minimum(&self) -> Option<Minimum> {
        Whole { min: 1u64 }.minimum()
    }
    fn parse(&self, text: &str) -> Result<Duration, String> {
        Whole { min: 1u64 }.parse(text).map(Duration::from_secs)
    }
    fn value_of(&self, default: Duration) -> Duration {
        default
    }
    fn show(&self, value: &Duration) -> String {
        value.as_secs().to_string()
    }
}

/// `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`, any case).
#[derive(Debug, Clone, Copy)]
pub struct Flag;

impl Kind for Flag {
    type Value = bool;
    type Default = bool;

    fn json_type(&self) -> &'static str {
        "boolean"
    }
    fn expected(&self) -> Cow<'static, str> {
        "true or false".into()
    }
    fn parse(&self, text: &str) -> Result<bool, String> {
        match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: bool) -> bool {
        default
    }
    fn show(&self, value: &bool) -> String {
        value.to_string()
    }
}

/// Any text (read by code outside this module, such as the log filter).
#[derive(Debug, Clone, Copy)]
pub struct Text;

impl Kind for Text {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "text".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        Ok(text.to_owned())
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// An `http://` or `https://` URL without credentials, a query or a fragment; trailing
/// slashes are dropped.
#[derive(Debug, Clone, Copy)]
pub struct Url;

impl Kind for Url {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "an http:// or https:// URL without credentials, a query or a fragment".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        let rest = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"));
        // Credentials in the authority are refused, as the backend client
        // refuses them, and never echoed: the error line reaches the logs.
        if rest.is_some_and(|r| r.split('/').next().is_some_and(|a| a.contains('@'))) {
            return Err("<a URL with credentials, not shown>".to_owned());
        }
        match rest {
            Some(host)
                if !host.is_empty()
                    && !host.starts_with('/')
                    && !text.contains(char::is_whitespace)
                    && !text.contains(['?', '#']) =>
            {
                Ok(text.trim_end_matches('/').to_owned())
            }
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A secret, such as the service token: any text, never shown.
#[derive(Debug, Clone, Copy)]
pub struct SecretText {
    /// What the secret is, for the message when it is missing.
    pub what: &'static str,
}

impl Kind for SecretText {
    type Value = Secret;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        self.what.into()
    }
    fn parse(&self, text: &str) -> Result<Secret, String> {
        Ok(Secret::new(text))
    }
    fn value_of(&self, default: &'static str) -> Secret {
        Secret::new(default)
    }
    fn show(&self, _value: &Secret) -> String {
        crate::secret::REDACTED.to_owned()
    }
}

/// An image reference (no spaces).
#[derive(Debug, Clone, Copy)]
pub struct Image;

impl Kind for Image {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "an image reference without spaces".into()
    }
    fn missing(&self) -> Cow<'static, str> {
        "an image reference".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        if text.contains(char::is_whitespace) {
            Err(text.to_owned())
        } else {
            Ok(text.to_owned())
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

const DNS_NAME: &str = "a lowercase DNS name ([a-z0-9.-], alphanumeric at both ends)";

/// Whether `v` is a lowercase DNS name: a namespace, Secret or service account.
fn is_dns_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && v.as_bytes()[0].is_ascii_alphanumeric()
        && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()
}

/// A lowercase DNS name: a namespace, a Secret or a service account.
#[derive(Debug, Clone, Copy)]
pub struct DnsName;

impl Kind for DnsName {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        DNS_NAME.into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        if is_dns_name(text) {
            Ok(text.to_owned())
        } else {
            Err(text.to_owned())
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// Comma-separated DNS names; blanks between commas are skipped, and the
/// error quotes the one name that is wrong.
#[derive(Debug, Clone, Copy)]
pub struct DnsNames;

impl Kind for DnsNames {
    type Value = Vec<String>;
    type Default = &'static [&'static str];

    fn expected(&self) -> Cow<'static, str> {
        DNS_NAME.into()
    }
    fn parse(&self, text: &str) -> Result<Vec<String>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| DnsName.parse(s))
            .collect()
    }
    fn value_of(&self, default: &'static [&'static str]) -> Vec<String> {
        default.iter().map(|s| (*s).to_owned()).collect()
    }
    fn show(&self, value: &Vec<String>) -> String {
        value.join(",")
    }
}

/// A label value: 1-63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
#[derive(Debug, Clone, Copy)]
pub struct LabelValue;

impl Kind for LabelValue {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "a label value (1-63 of [A-Za-z0-9._-], alphanumeric at both ends)".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        if !text.is_empty() && crate::names::is_label_value(text) {
            Ok(text.to_owned())
        } else {
            Err(text.to_owned())
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// The form every quantity the API server accepts takes: apimachinery's
/// own expression, the one its `ErrFormatWrong` quotes
/// (`staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`). The
/// parser below is looser in two ways this refuses: a number with no digit
/// (`Mi`), and an exponent followed by a suffix (`1e3Mi`).
const QUANTITY_FORM: &str = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// A Kubernetes resource quantity, parsed with Kubernetes' own grammar:
/// the text must have the form the API server accepts (`QUANTITY_FORM`)
/// and parse with `kube_quantity` (which knows the suffixes and gives the
/// value compared in the limit-versus-request checks). `None` when it is not
/// a quantity.
pub fn parse_quantity(text: &str) -> Option<kube_quantity::ParsedQuantity> {
    static FORM: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let form = FORM.get_or_init(|| regex::Regex::new(QUANTITY_FORM).expect("a valid expression"));
    if !form.is_match(text) {
        return None;
    }
    kube_quantity::ParsedQuantity::try_from(text).ok()
}

/// A Kubernetes resource quantity such as `250m`, `2`, `1Gi`, `512M`,
/// greater than zero (see [`parse_quantity`]).
#[derive(Debug, Clone, Copy)]
pub struct Quantity;

impl Kind for Quantity {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "a Kubernetes quantity above 0 such as 250m, 2, 1Gi".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        match parse_quantity(text) {
            Some(q) if q.to_bytes_f64().is_some_and(|v| v > 0.0) => Ok(text.to_owned()),
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// An absolute path inside a container.
#[derive(Debug, Clone, Copy)]
pub struct AbsolutePath;

impl Kind for AbsolutePath {
    type Value = String;
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        "an absolute path".into()
    }
    fn parse(&self, text: &str) -> Result<String, String> {
        if text.starts_with('/') {
            Ok(text.to_owned())
        } else {
            Err(text.to_owned())
        }
    }
    fn value_of(&self, default: &'static str) -> String {
        default.to_owned()
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// An `IP:port` socket address (no host names).
#[derive(Debug, Clone, Copy)]
pub struct Address {
    /// An address shown in the error message as an example.
    pub example: &'static str,
}

impl Kind for Address {
    type Value = SocketAddr;
    type Default = SocketAddr;

    fn expected(&self) -> Cow<'static, str> {
        format!("an IP:port address such as {}", self.example).into()
    }
    fn parse(&self, text: &str) -> Result<SocketAddr, String> {
        text.parse().map_err(|_| text.to_owned())
    }
    fn value_of(&self, default: SocketAddr) -> SocketAddr {
        default
    }
    fn show(&self, value: &SocketAddr) -> String {
        value.to_string()
    }
}

/// The log format, `text` or `json` (any case).
#[derive(Debug, Clone, Copy)]
pub struct Format;

impl Kind for Format {
    type Value = LogFormat;
    type Default = LogFormat;

    fn expected(&self) -> Cow<'static, str> {
        "text or json".into()
    }
    fn parse(&self, text: &str) -> Result<LogFormat, String> {
        match text.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(text.to_owned()),
        }
    }
    fn value_of(&self, default: LogFormat) -> LogFormat {
        default
    }
    fn show(&self, value: &LogFormat) -> String {
        value.to_string()
    }
}

/// A JSON object of one Kubernetes type, such as core/v1
/// `PodSecurityContext`, read strictly: the text must be a JSON object whose
/// every field the type has, with a value of its type. k8s-openapi's reader
/// drops a field it does not know without a word, so a misspelt field (say
/// `runAsNonroot`) would vanish from every Job while the operator believes it
/// set; here it is refused, by comparing the text with the object written
/// back. A field set to `null` counts as left out, as the API server reads it.
#[derive(Debug)]
pub struct KubeObject<T> {
    /// The type as the API reference names it, for messages.
    what: &'static str,
    of: PhantomData<fn() -> T>,
}

// Not derived: the derives would ask `T` to be `Clone` and `Copy` as well.
impl<T> Clone for KubeObject<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for KubeObject<T> {}

impl<T> KubeObject<T> {
    /// The kind of a JSON object of the Kubernetes type named `what`
    /// (`core/v1 SecurityContext`).
    pub const fn new(what: &'static str) -> Self {
        KubeObject {
            what,
            of: PhantomData,
        }
    }
}

impl<T> Kind for KubeObject<T>
where
    T: DeserializeOwned + Serialize + Clone + PartialEq + fmt::Debug,
{
    type Value = T;
    /// The default as JSON text.
    type Default = &'static str;

    fn expected(&self) -> Cow<'static, str> {
        format!("a JSON object of Kubernetes {} fields", self.what).into()
    }
    fn parse(&self, text: &str) -> Result<T, String> {
        let given: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if !given.is_object() {
            return Err(format!("got {}, not an object", json_kind(&given)));
        }
        let mut reader = serde_json::Deserializer::from_str(text);
        let value: T = serde_path_to_error::deserialize(&mut reader).map_err(|e| {
            let at = e.path().to_string();
            format!("{at}: {}", e.into_inner())
        })?;
        let kept = serde_json::to_value(&value).map_err(|e| e.to_string())?;
        match dropped_field(&given, &kept, "") {
            Some(field) => Err(format!(
                "unknown field {field} (a {} has no such field)",
                self.what
            )),
            None => Ok(value),
        }
    }
    fn refusal(&self, var: &'static str, reason: String) -> ConfigError {
        ConfigError::Refused {
            var,
            expected: self.expected(),
            reason,
        }
    }
    fn value_of(&self, default: &'static str) -> T {
        // A declaration's own constant; the declarations' tests read each
        // default, so a default that does not parse fails them, not a start.
        match self.parse(default) {
            Ok(value) => value,
            Err(why) => panic!(
                "the declared default {default} is not a {}: {why}",
                self.what
            ),
        }
    }
    fn show(&self, value: &T) -> String {
        serde_json::to_string(value).unwrap_or_default()
    }
}

/// What a JSON value is, for a message.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The path (`capabilities.dorp`, `sysctls[0].valu`) of the first field of
/// `given` that is not in `kept` (the object read from it and written back),
/// leaving out fields set to `null`; `None` when every field was kept.
fn dropped_field(given: &serde_json::Value, kept: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match (given, kept) {
        (Value::Object(given), Value::Object(kept)) => given
            .iter()
            .filter(|(_, value)| !value.is_null())
            .find_map(|(key, value)| {
                let here = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match kept.get(key) {
                    None => Some(here),
                    Some(back) => dropped_field(value, back, &here),
                }
            }),
        (Value::Array(given), Value::Array(kept)) => given
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(i, (value, back))| dropped_field(value, back, &format!("{at}[{i}]"))),
        _ => None,
    }
}
