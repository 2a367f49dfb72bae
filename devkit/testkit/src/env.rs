//! Environments as the binaries read them: owned `(name, value)` pairs.

/// The pairs as owned strings, in order.
pub fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `base` with each of `extra` set on top: a name already in `base` loses
/// its old value, and the new pair goes last. An empty value stays set (to
/// the empty string); see [`without_empty`] to unset instead.
pub fn overlay(base: &[(&str, &str)], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vars(base);
    for (k, v) in extra {
        env.retain(|(key, _)| key != k);
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    env
}

/// The pairs whose value is not empty: an empty value in an overlay then
/// means "unset this one".
pub fn without_empty(env: Vec<(String, String)>) -> Vec<(String, String)> {
    env.into_iter().filter(|(_, v)| !v.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_replaces_and_appends() {
        let env = overlay(&[("A", "1"), ("B", "2")], &[("A", "3"), ("C", "")]);
        assert_eq!(env, vars(&[("B", "2"), ("A", "3"), ("C", "")]));
        assert_eq!(without_empty(env), vars(&[("B", "2"), ("A", "3")]));
    }
}
