//! The API server as the agent reaches it: its URL, the CA that signed its
//! serving certificate, and a bearer token per identity (each node's
//! `system:node:<name>` token; a pod's ServiceAccount token for what its
//! program does).

use anyhow::Context;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::path::PathBuf;
use std::time::Duration;

/// How to reach the cluster: plain data, as the control plane's launcher
/// hands it out.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// `https://127.0.0.1:PORT`.
    pub api_url: String,
    /// A PEM file with the CA (or the self-signed serving certificate) of
    /// the API server.
    pub ca_pem: PathBuf,
}

/// The API server's address and trust roots, read once.
#[derive(Clone)]
pub struct Conn {
    url: http::Uri,
    roots: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Reads the CA file and checks the URL.
    pub fn new(cluster: &Cluster) -> anyhow::Result<Conn> {
        let url: http::Uri = cluster
            .api_url
            .parse()
            .with_context(|| format!("the API URL {:?}", cluster.api_url))?;
        let pem = std::fs::read(&cluster.ca_pem)
            .with_context(|| format!("reading the CA file {}", cluster.ca_pem.display()))?;
        let roots: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing the CA file {}", cluster.ca_pem.display()))?;
        if roots.is_empty() {
            anyhow::bail!("no certificate in the CA file {}", cluster.ca_pem.display());
        }
        Ok(Conn { url, roots })
    }

    /// The API URL.
    pub fn url(&self) -> String {
        self.url.to_string().trim_end_matches('/').to_string()
    }

    /// A kube-rs client that presents `token`.
    pub fn client(&self, token: &str) -> anyhow::Result<kube::Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut cfg = kube::Config::new(self.url.clone());
        cfg.root_cert = Some(self.roots.clone());
        cfg.auth_info.token = Some(token.to_string().into());
        cfg.connect_timeout = Some(Duration::from_secs(10));
        cfg.read_timeout = Some(Duration::from_secs(60));
        cfg.write_timeout = Some(Duration::from_secs(30));
        // The API server names a request's field manager after the user
        // agent's first word, as it does for a real kubelet.
        cfg.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!(
                "kubelet/",
                env!("CARGO_PKG_VERSION"),
                " (linux) tcab-node-agent"
            )),
        ));
        kube::Client::try_from(cfg).context("building the API client")
    }
}
