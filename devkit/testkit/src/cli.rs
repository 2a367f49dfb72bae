//! Running a built binary as an operator would: exactly the environment
//! given (nothing inherited), the arguments given, and what it did read back
//! as exit code, stdout and stderr.

use std::process::Command;

/// What one run of a binary did.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `binary` with `args` and exactly `env`, and waits for it to exit.
pub fn run(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let output = Command::new(binary)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{binary} starts: {e}"));
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

impl Ran {
    /// Asserts the run was refused as a configuration error (exit code 2,
    /// nothing on stdout, exactly one stderr line, and `secret` nowhere in
    /// it), and returns that line.
    pub fn config_error(&self, secret: &str) -> &str {
        assert_eq!(self.code, Some(2), "stderr: {}", self.stderr);
        assert!(self.stdout.is_empty(), "stdout: {:?}", self.stdout);
        assert_eq!(self.stderr.lines().count(), 1, "one line: {}", self.stderr);
        self.assert_hides(secret);
        &self.stderr
    }

    /// Asserts `secret` shows in neither stdout nor stderr.
    pub fn assert_hides(&self, secret: &str) {
        assert!(
            !self.stderr.contains(secret) && !self.stdout.contains(secret),
            "a secret leaked: {self:?}"
        );
    }

    /// Asserts the first stderr line is the JSON log line a binary starts
    /// with, naming `binary`, its `version`, its `revision` and the backend
    /// `contract` it speaks; returns it.
    pub fn starting_line(
        &self,
        binary: &str,
        version: &str,
        revision: &str,
        contract: &str,
    ) -> serde_json::Value {
        let first = self.first_log_line();
        assert_eq!(first["version"], version, "{first}");
        assert_eq!(first["revision"], revision, "{first}");
        assert_eq!(first["contract"], contract, "{first}");
        assert_eq!(
            first["message"],
            format!(
                "{binary} {version} (revision {revision}) starting, backend contract {contract}"
            ),
            "{first}"
        );
        first
    }

    /// The first stderr line, parsed as a JSON log line.
    pub fn first_log_line(&self) -> serde_json::Value {
        serde_json::from_str(self.stderr.lines().next().unwrap_or_default())
            .unwrap_or_else(|e| panic!("a JSON line first ({e}): {}", self.stderr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Ran {
        run("/bin/sh", &["-c", script], &[("WHO", "kit")])
    }

    #[test]
    fn the_environment_is_exactly_the_one_given() {
        let ran = sh("echo \"$WHO ${HOME:-nohome}\"; echo err >&2; exit 3");
        assert_eq!(ran.code, Some(3));
        assert_eq!(ran.stdout, "kit nohome\n");
        assert_eq!(ran.stderr, "err\n");
    }

    #[test]
    fn a_config_error_is_one_stderr_line_and_exit_2() {
        let ran = sh("echo 'WHO: expected a name' >&2; exit 2");
        assert_eq!(ran.config_error("s3cr3t"), "WHO: expected a name\n");
    }

    #[test]
    #[should_panic(expected = "a secret leaked")]
    fn a_secret_on_stderr_fails_the_config_error_check() {
        sh("echo 'token s3cr3t' >&2; exit 2").config_error("s3cr3t");
    }

    #[test]
    fn the_starting_line_names_binary_version_revision_and_contract() {
        let line = r#"{"level":"INFO","version":"1.2.3","revision":"abc","contract":"7","message":"tool 1.2.3 (revision abc) starting, backend contract 7"}"#;
        let ran = sh(&format!("echo '{line}' >&2; exit 1"));
        assert_eq!(
            ran.starting_line("tool", "1.2.3", "abc", "7")["level"],
            "INFO"
        );
    }

    #[test]
    fn the_first_log_line_is_read_as_json() {
        let ran = sh("echo '{\"level\":\"INFO\"}' >&2; echo more >&2");
        assert_eq!(ran.first_log_line()["level"], "INFO");
    }
}
