//! The fake programs as a real process: the [`Host`] of the container
//! entrypoint `tcab-workload` (`src/bin/tcab-workload.rs`), which a real
//! node (the upstream kubelet with containerd and runc) runs as a pod's
//! container.
//!
//! - `tcab-workload driver | publisher | plain | pause` ([`parse_args`]); anything
//!   else is a usage message on stderr and exit status 2.
//! - env: the process environment, as the kubelet resolved it.
//! - namespace: the ServiceAccount directory's `namespace` file, else
//!   `POD_NAMESPACE`, else `default`.
//! - log: one line on stdout per line the program logs, nothing added (the
//!   kubelet's CRI log is what `kubectl logs` serves).
//! - SIGTERM: a real handler ([`sigterm_watch`]), installed before the
//!   program starts, so a program that ignores SIGTERM lives on until the
//!   kubelet's SIGKILL.
//! - sandbox pods: the Kubernetes API the way a pod reaches it,
//!   `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` with the
//!   ServiceAccount's `token` (read again for each call, as the kubelet
//!   rotates it) and `ca.crt` from [`SERVICEACCOUNT_DIR`] (or
//!   `TCAB_SERVICEACCOUNT_DIR`); `TCAB_KUBERNETES_URL` replaces the URL (a
//!   test's plain-HTTP fake API).
//! - the plain program's parameters: env `TCAB_RUN_SECONDS`,
//!   `TCAB_EXIT_CODE`, `TCAB_LOG_LINES`, `TCAB_ALLOCATE_MIB`, `TCAB_WRITE_MIB`,
//!   `TCAB_IGNORE_SIGTERM`, else the same
//!   annotations as on the in-process hosts, read from the downward API's
//!   `annotations` file in [`PODINFO_DIR`] (or `TCAB_PODINFO_DIR`)
//!   ([`plain_program`]). Without a run time it runs until SIGTERM.
//! - the exit status is the program's return value.

use crate::{
    ALLOCATE_MIB, EXIT_CODE, Host, IGNORE_SIGTERM, LOG_LINES, Program, RUN_SECONDS, WRITE_MIB,
};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
pub const SERVICEACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Where the image's pods mount the downward API's `annotations` file.
pub const PODINFO_DIR: &str = "/etc/podinfo";
/// The message of a wrong command line.
pub const USAGE: &str = "usage: tcab-workload driver|publisher|plain|pause";

/// Each plain-program annotation and the env variable that overrides it.
const PLAIN_ENV: [(&str, &str); 6] = [
    (RUN_SECONDS, "TCAB_RUN_SECONDS"),
    (EXIT_CODE, "TCAB_EXIT_CODE"),
    (LOG_LINES, "TCAB_LOG_LINES"),
    (ALLOCATE_MIB, "TCAB_ALLOCATE_MIB"),
    (WRITE_MIB, "TCAB_WRITE_MIB"),
    (IGNORE_SIGTERM, "TCAB_IGNORE_SIGTERM"),
];

/// The program the command line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `driver`: [`Program::Driver`].
    Driver,
    /// `publisher`: [`Program::Publisher`].
    Publisher,
    /// `plain`: [`Program::Plain`], parameters from [`plain_program`].
    Plain,
    /// `pause`: a pod sandbox's process (the CRI's "pause" image, which no
    /// registry here serves): waits for SIGTERM and exits 0.
    Pause,
}

/// Reads the arguments after the program's name: exactly one, the
/// program's name; `Err` is the message for stderr.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Which, String> {
    let args: Vec<String> = args.into_iter().collect();
    match args.as_slice() {
        [one] => match one.as_str() {
            "driver" => Ok(Which::Driver),
            "publisher" => Ok(Which::Publisher),
            "plain" => Ok(Which::Plain),
            "pause" => Ok(Which::Pause),
            other => Err(format!("unknown program {other:?}; {USAGE}")),
        },
        [] => Err(format!("no program named; {USAGE}")),
        _ => Err(format!(
            "one argument expected, got {}; {USAGE}",
            args.len()
        )),
    }
}

/// The program to run for `which` in a process with environment `env`.
pub fn program(which: Which, env: &HashMap<String, String>) -> Program {
    match which {
        Which::Driver => Program::Driver,
        Which::Publisher => Program::Publisher,
        Which::Plain | Which::Pause => plain_program(env),
    }
}

/// The plain program's parameters: each from its env variable
/// (`TCAB_RUN_SECONDS`, ...) when set and not empty, else from the downward
/// API's `annotations` file under `TCAB_PODINFO_DIR` or [`PODINFO_DIR`]
/// (missing: no annotations); without a run time it runs until SIGTERM.
pub fn plain_program(env: &HashMap<String, String>) -> Program {
    let dir = env
        .get("TCAB_PODINFO_DIR")
        .map_or(PODINFO_DIR, String::as_str);
    let annotations = std::fs::read_to_string(PathBuf::from(dir).join("annotations"))
        .map(|text| parse_downward_api(&text))
        .unwrap_or_default();
    plain_from(env, &annotations)
}

/// [`plain_program`] over an environment and the annotations already read.
pub fn plain_from(env: &HashMap<String, String>, annotations: &HashMap<String, String>) -> Program {
    Program::plain(
        |key| {
            PLAIN_ENV
                .iter()
                .find(|(annotation, _)| *annotation == key)
                .and_then(|(_, var)| env.get(*var))
                .filter(|v| !v.is_empty())
                .or_else(|| annotations.get(key))
                .cloned()
        },
        None,
    )
}

/// A downward-API map file as the kubelet writes it (`key="value"` per
/// line, the value quoted as Go's `%q` does); lines it cannot read are
/// skipped.
pub fn parse_downward_api(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, quoted) = line.split_once('=')?;
            Some((key.to_string(), unquote_go(quoted)?))
        })
        .collect()
}

/// Undoes Go's `strconv.Quote`: `"..."` with `\n`, `\"`, `\\`, `\xNN`,
/// `\uNNNN`, `\UNNNNNNNN`, octal and the other single-letter escapes.
fn unquote_go(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    fn hex(chars: &mut std::str::Chars, n: usize) -> Option<u32> {
        let digits: String = chars.by_ref().take(n).collect();
        (digits.chars().count() == n).then_some(())?;
        u32::from_str_radix(&digits, 16).ok()
    }
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            continue;
        }
        let byte = match chars.next()? {
            'a' => 7,
            'b' => 8,
            'f' => 12,
            'n' => b'\n',
            'r' => b'\r',
            't' => b'\t',
            'v' => 11,
            '\\' => b'\\',
            '"' => b'"',
            '\'' => b'\'',
            'x' => u8::try_from(hex(&mut chars, 2)?).ok()?,
            e @ ('u' | 'U') => {
                let c = char::from_u32(hex(&mut chars, if e == 'u' { 4 } else { 8 })?)?;
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            d @ '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                u8::from_str_radix(&format!("{d}{rest}"), 8).ok()?
            }
            _ => return None,
        };
        out.push(byte);
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Installs the process's SIGTERM handler (from then on SIGTERM no longer
/// ends the process) and returns a watch that turns `true` when one comes.
/// Needs a tokio runtime.
pub fn sigterm_watch() -> std::io::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terms = signal(SignalKind::terminate())?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if terms.recv().await.is_some() {
            let _ = tx.send(true);
        }
    });
    Ok(rx)
}

/// The URL of the Kubernetes API as a pod reaches it: `TCAB_KUBERNETES_URL`
/// (tests), else `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`.
pub fn api_url(env: &HashMap<String, String>) -> Result<String, String> {
    if let Some(url) = env.get("TCAB_KUBERNETES_URL").filter(|u| !u.is_empty()) {
        return Ok(url.trim_end_matches('/').to_string());
    }
    match (
        env.get("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty()),
        env.get("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty()),
    ) {
        (Some(host), Some(port)) if host.contains(':') => Ok(format!("https://[{host}]:{port}")),
        (Some(host), Some(port)) => Ok(format!("https://{host}:{port}")),
        _ => Err("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set".into()),
    }
}

/// The [`Host`] of a real process in a container.
pub struct ContainerHost {
    env: HashMap<String, String>,
    namespace: String,
    serviceaccount: PathBuf,
    http: reqwest::Client,
    sigterm: watch::Receiver<bool>,
    /// What [`Host::allocate`] took, held until the process exits.
    held: Mutex<Vec<Vec<u8>>>,
}

impl ContainerHost {
    /// A host with environment `env` (the process's, in the binary) whose
    /// SIGTERM is `sigterm` ([`sigterm_watch`] in the binary); reads the
    /// namespace now.
    pub fn new(
        env: HashMap<String, String>,
        sigterm: watch::Receiver<bool>,
    ) -> Result<Self, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let serviceaccount = PathBuf::from(
            env.get("TCAB_SERVICEACCOUNT_DIR")
                .map_or(SERVICEACCOUNT_DIR, String::as_str),
        );
        let namespace = std::fs::read_to_string(serviceaccount.join("namespace"))
            .ok()
            .map(|ns| ns.trim().to_string())
            .filter(|ns| !ns.is_empty())
            .or_else(|| {
                env.get("POD_NAMESPACE")
                    .filter(|ns| !ns.is_empty())
                    .cloned()
            })
            .unwrap_or_else(|| "default".into());
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("building the HTTP client: {}", chain(&e)))?;
        Ok(ContainerHost {
            env,
            namespace,
            serviceaccount,
            http,
            sigterm,
            held: Mutex::new(Vec::new()),
        })
    }

    /// One call of the Kubernetes API with the ServiceAccount's current
    /// token; the answer's body, or the API's `message`.
    async fn kube(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", api_url(&self.env)?);
        let token_file = self.serviceaccount.join("token");
        let token = tokio::fs::read_to_string(&token_file)
            .await
            .map_err(|e| format!("reading {}: {e}", token_file.display()))?;
        let mut client = reqwest::Client::builder().timeout(Duration::from_secs(30));
        if let Ok(pem) = tokio::fs::read(self.serviceaccount.join("ca.crt")).await {
            let cas = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("reading the ServiceAccount's ca.crt: {}", chain(&e)))?;
            client = client.tls_certs_only(cas);
        }
        let client = client
            .build()
            .map_err(|e| format!("building the Kubernetes client: {}", chain(&e)))?;
        let mut request = client
            .request(method.clone(), &url)
            .bearer_auth(token.trim());
        if let Some(body) = body {
            request = request.json(body);
        }
        let failed = |e: reqwest::Error| format!("{method} {path}: {}", chain(&e));
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let text = response.text().await.map_err(failed)?;
        let answer = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(answer);
        }
        Err(answer["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{method} {path}: HTTP {status}")))
    }
}

/// An error's message and every source's, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl Host for ContainerHost {
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn log(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await
    }

    fn terminated(&self) -> bool {
        *self.sigterm.borrow()
    }

    async fn sigterm(&self) {
        let mut rx = self.sigterm.clone();
        // The sender is gone only once it has sent `true` or never will.
        let _ = rx.wait_for(|term| *term).await;
        if !*rx.borrow() {
            std::future::pending::<()>().await;
        }
    }

    fn http(&self) -> &reqwest::Client {
        &self.http
    }

    async fn create_pod(&self, namespace: &str, mut pod: Value) -> Result<String, String> {
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        let created = self.kube(Method::POST, &path, Some(&pod)).await?;
        Ok(created["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), String> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        self.kube(Method::DELETE, &path, None).await.map(|_| ())
    }

    fn allocate(&self, mib: u32) {
        const PAGE: usize = 4096;
        let mut block = vec![0u8; (mib as usize).saturating_mul(1 << 20)];
        // Zeroed pages are only mapped; writing one byte of each commits it.
        for byte in block.iter_mut().step_by(PAGE) {
            *byte = 1;
        }
        let block = std::hint::black_box(block);
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(block);
    }

    fn write(&self, mib: u32) {
        // The image's /tmp (1777) is in the container's writable layer
        // (`TMPDIR` moves it, for tests). The data is flushed so the layer's
        // usage counts it; a failure goes to stderr and the program goes on.
        use std::io::Write;
        let path = std::env::temp_dir().join("fill");
        let block = vec![0x5au8; 1 << 20];
        let written = std::fs::File::create(&path).and_then(|mut f| {
            for _ in 0..mib {
                f.write_all(&block)?;
            }
            f.sync_all()
        });
        if let Err(e) = written {
            eprintln!("writing {mib} MiB to {}: {e}", path.display());
        }
    }
}

/// The entrypoint after the command line: installs the SIGTERM handler,
/// builds the host from the process environment and runs the program;
/// returns the exit status (1 when the host cannot be built, with the
/// reason on stderr).
pub async fn main(which: Which) -> i32 {
    let sigterm = match sigterm_watch() {
        Ok(rx) => rx,
        Err(e) => {
            eprintln!("installing the SIGTERM handler: {e}");
            return 1;
        }
    };
    if which == Which::Pause {
        let mut sigterm = sigterm;
        let _ = sigterm.wait_for(|t| *t).await;
        return 0;
    }
    let env: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let program = program(which, &env);
    match ContainerHost::new(env, sigterm) {
        Ok(host) => crate::run(&program, &host).await,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_command_line_names_exactly_one_program() {
        assert_eq!(parse_args(strings(&["driver"])), Ok(Which::Driver));
        assert_eq!(parse_args(strings(&["publisher"])), Ok(Which::Publisher));
        assert_eq!(parse_args(strings(&["plain"])), Ok(Which::Plain));
        assert_eq!(parse_args(strings(&["pause"])), Ok(Which::Pause));
        for wrong in [&[][..], &["Driver"], &["plain", "extra"], &["--help"]] {
            let message = parse_args(strings(wrong)).unwrap_err();
            assert!(message.ends_with(USAGE), "{message}");
        }
        assert!(
            parse_args(strings(&["sleep"]))
                .unwrap_err()
                .starts_with("unknown program \"sleep\"")
        );
    }

    #[test]
    fn the_downward_api_file_is_read_as_the_kubelet_quotes_it() {
        let text = "kube-sim.tcab.dev/log-lines=\"3\"\n\
            kubectl.kubernetes.io/last-applied-configuration=\"{\\\"a\\\":\\\"b\\\\\\\\c\\\"}\\n\"\n\
            odd=\"tab\\there \\u00e9\\x41\\101\\U0001F600\"\n\
            unquoted=3\n\
            bad-escape=\"\\q\"\n\
            kube-sim.tcab.dev/exit-code=\"7\"";
        let read = parse_downward_api(text);
        assert_eq!(
            read,
            map(&[
                (LOG_LINES, "3"),
                (
                    "kubectl.kubernetes.io/last-applied-configuration",
                    "{\"a\":\"b\\\\c\"}\n"
                ),
                ("odd", "tab\there éAA😀"),
                (EXIT_CODE, "7"),
            ])
        );
        assert!(parse_downward_api("").is_empty());
    }

    #[test]
    fn env_wins_over_annotations_and_nothing_runs_until_sigterm() {
        let annotations = map(&[
            (RUN_SECONDS, "5"),
            (EXIT_CODE, "3"),
            (LOG_LINES, "2"),
            (ALLOCATE_MIB, "8"),
        ]);
        assert_eq!(
            plain_from(&map(&[]), &annotations),
            Program::Plain {
                run: Some(Duration::from_secs(5)),
                exit_code: 3,
                log_lines: 2,
                allocate_mib: 8,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        let env = map(&[
            ("TCAB_RUN_SECONDS", "0.5"),
            ("TCAB_EXIT_CODE", "7"),
            ("TCAB_LOG_LINES", ""),
            ("TCAB_ALLOCATE_MIB", "16"),
        ]);
        assert_eq!(
            plain_from(&env, &annotations),
            Program::Plain {
                run: Some(Duration::from_millis(500)),
                exit_code: 7,
                log_lines: 2,
                allocate_mib: 16,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        assert_eq!(
            plain_from(&map(&[("TCAB_RUN_SECONDS", "-1")]), &map(&[])),
            Program::Plain {
                run: None,
                exit_code: 0,
                log_lines: 0,
                allocate_mib: 0,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
    }

    #[test]
    fn the_plain_program_reads_the_podinfo_dir_when_there_is_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("annotations"),
            format!("{LOG_LINES}=\"4\"\n{RUN_SECONDS}=\"1\""),
        )
        .unwrap();
        let env = map(&[
            ("TCAB_PODINFO_DIR", dir.path().to_str().unwrap()),
            ("TCAB_EXIT_CODE", "9"),
        ]);
        assert_eq!(
            plain_program(&env),
            Program::Plain {
                run: Some(Duration::from_secs(1)),
                exit_code: 9,
                log_lines: 4,
                allocate_mib: 0,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        let missing = map(&[("TCAB_PODINFO_DIR", "/nonexistent/tcab-podinfo")]);
        assert_eq!(
            program(Which::Plain, &missing),
            Program::Plain {
                run: None,
                exit_code: 0,
                log_lines: 0,
                allocate_mib: 0,
                write_mib: 0,
                ignore_sigterm: false
            }
        );
        assert_eq!(program(Which::Driver, &env), Program::Driver);
    }

    #[test]
    fn the_api_is_the_service_env_or_the_test_url() {
        let service = map(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        assert_eq!(api_url(&service).unwrap(), "https://10.96.0.1:443");
        let v6 = map(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "6443"),
        ]);
        assert_eq!(api_url(&v6).unwrap(), "https://[fd00::1]:6443");
        let mut test = service.clone();
        test.insert("TCAB_KUBERNETES_URL".into(), "http://127.0.0.1:9/".into());
        assert_eq!(api_url(&test).unwrap(), "http://127.0.0.1:9");
        assert!(api_url(&map(&[])).is_err());
    }
}
