//! What a probe saw, as ordered `key = value` lines (values rendered as
//! compact JSON), so two clusters' outcomes compare line by line and a
//! difference names the line.

use serde_json::Value;

/// A probe's record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    lines: Vec<(String, String)>,
}

/// One line that differs between the clusters (`None`: the side has no
/// such line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub key: String,
    pub sim: Option<String>,
    pub real: Option<String>,
}

impl Outcome {
    pub fn new() -> Self {
        Outcome::default()
    }

    /// Records `value` under `key` (a repeated key replaces the value in
    /// place).
    pub fn put(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let shown = render(&value.into());
        match self.lines.iter_mut().find(|(k, _)| *k == key) {
            Some(line) => line.1 = shown,
            None => self.lines.push((key, shown)),
        }
    }

    /// An answer as lines `<prefix>.code`, and for a Status its `status`,
    /// `reason`, `message`, `details` and `causes`, or for an object which
    /// server-set fields it carries ([`crate::normalise`]).
    pub fn answer(&mut self, prefix: &str, code: u16, body: &Value) {
        self.put(format!("{prefix}.code"), code);
        if body["kind"] == "Status" {
            let s = crate::normalise::status(body);
            for k in ["status", "reason", "message", "details"] {
                let mut v = s[k].clone();
                if k == "details"
                    && let Some(m) = v.as_object_mut()
                {
                    m.remove("causes");
                }
                if !v.is_null() {
                    self.put(format!("{prefix}.{k}"), v);
                }
            }
            if !s["details"]["causes"].is_null() {
                self.put(format!("{prefix}.causes"), s["details"]["causes"].clone());
            }
        } else if body.is_object() {
            self.put(
                format!("{prefix}.object"),
                crate::normalise::object_marks(body),
            );
        } else {
            self.put(format!("{prefix}.text"), body.clone());
        }
    }

    /// The value of a line.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn lines(&self) -> &[(String, String)] {
        &self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The lines that differ, in kube-sim's order, then the real side's
    /// extra lines.
    pub fn compare(sim: &Outcome, real: &Outcome) -> Vec<Difference> {
        let mut out = Vec::new();
        for (k, v) in &sim.lines {
            let other = real.get(k);
            if other != Some(v.as_str()) {
                out.push(Difference {
                    key: k.clone(),
                    sim: Some(v.clone()),
                    real: other.map(str::to_string),
                });
            }
        }
        for (k, v) in &real.lines {
            if sim.get(k).is_none() {
                out.push(Difference {
                    key: k.clone(),
                    sim: None,
                    real: Some(v.clone()),
                });
            }
        }
        out
    }
}

fn render(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_compare_by_key() {
        let mut a = Outcome::new();
        a.put("code", 422);
        a.put("reason", "Invalid");
        a.put("only sim", true);
        let mut b = Outcome::new();
        b.put("reason", "Invalid");
        b.put("code", 409);
        b.put("only real", json!(["x"]));
        let d = Outcome::compare(&a, &b);
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["code", "only sim", "only real"]);
        assert_eq!(d[0].sim.as_deref(), Some("422"));
        assert_eq!(d[0].real.as_deref(), Some("409"));
        assert_eq!(d[1].real, None);
        assert_eq!(d[2].real.as_deref(), Some(r#"["x"]"#));
        b.put("code", 422);
        assert_eq!(b.get("code"), Some("422"));
        assert_eq!(b.lines().len(), 3);
    }
}
