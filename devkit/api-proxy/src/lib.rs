//! # tcab-api-proxy: kube-sim's API faults in front of a real kube-apiserver
//!
//! The chaos tests inject API faults into kube-sim by rule (500s, 503s, APF
//! 429s, latency, hung calls, silent watches; scoped by verb, resource and
//! bearer token; bounded by a count or seconds), cut its connections and
//! restart it. This proxy does the same to a real API server: clients (the
//! dispatcher, kubectl) talk to the proxy through a kubeconfig, the proxy
//! forwards to the API server, and the admin API, the same as kube-sim's
//! for these calls, decides what goes wrong. The rules, their decision, the
//! request parsing and the answers are `tcab-api-faults`, the very code
//! kube-sim runs.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use tcab_api_proxy::{ProxyOptions, UpstreamOptions, spawn};
//! let proxy = spawn(ProxyOptions::new(UpstreamOptions {
//!     url: "https://127.0.0.1:6443".into(),
//!     ca_pem: Some(std::fs::read("/tmp/cp/certs/apiserver.crt")?),
//! }))
//! .await?;
//! // the dispatcher's kubeconfig: the proxy's URL, the dispatcher's token
//! proxy.write_kubeconfig("/tmp/dispatcher.kubeconfig".as_ref(), "dispatcher-token", "tcab")?;
//! // faults: kube-sim's AdminClient::new(proxy.url()) drives the proxy
//! # Ok(()) }
//! ```
//!
//! **Plain HTTP to clients.** The proxy listens on loopback and serves
//! plain HTTP, as kube-sim does: kube-rs and kubectl send bearer tokens over
//! `http://` servers, so the kubeconfig needs no CA, the dev stack's code
//! that writes kube-sim's kubeconfigs serves both, and a connection cut is
//! a plain TCP close with no TLS alert in between. Towards the API server it
//! speaks HTTPS verified against the CA given (or plain HTTP, e.g. to
//! kube-sim), HTTP/1.1 as kube-rs does.
//!
//! **What a request meets.** Each request is read as the API server reads
//! it (verb and resource from method, path and query:
//! [`tcab_api_faults::RequestInfo`]) and counted, per identity too; the
//! first live rule covering it decides its fate (the same
//! [`tcab_api_faults::rules::decide`] as kube-sim). Discovery, `/version`
//! and health paths are never faulted nor counted. The modes:
//!
//! - `error500`, `unavailable`, `throttle`: the proxy answers (kube-sim's
//!   bodies; the 429 is APF's plain text with `Retry-After`), the API
//!   server never sees the request;
//! - `delay`: forwarded after the delay;
//! - `hang`: read and never answered, until the client gives up or the
//!   connection is cut;
//! - `applied` (with `error500`, `unavailable`, `hang`): forwarded and
//!   carried out first; the API server's answer is dropped;
//! - `silence` (watches): the watch is forwarded and stays open upstream,
//!   but nothing more (no event, no bookmark) reaches the client until the
//!   API server ends it at its `timeoutSeconds` (then the client's stream
//!   ends cleanly) or the client leaves. A watch open when the rule is
//!   added goes silent at its next event.
//!
//! Connection faults: `POST /admin/connections/cut`, and
//! `POST /admin/restart` (connections cut, the port refusing connections
//! for a while, and, with a [`RestartHook`], the real API server
//! restarted). See [`admin`] for every endpoint, and [`apf`] for real 429s
//! from the API server's own priority and fairness.

pub mod admin;
pub mod apf;
pub mod proxy;
pub mod server;
pub mod upstream;
pub mod watch;

pub use admin::ProxyCounters;
pub use proxy::RestartHook;
pub use server::ServingTls;
pub use upstream::{UpstreamError, UpstreamOptions};

use anyhow::Context;
use proxy::Proxy;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tcab_api_faults::FaultBook;
use tcab_api_faults::net::FaultListener;
use tokio::task::JoinHandle;

/// How to start a proxy.
#[derive(Clone)]
pub struct ProxyOptions {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The API server behind the proxy.
    pub upstream: UpstreamOptions,
    /// Names for bearer tokens in the per-identity request counters
    /// (token → name, e.g. the dispatcher's token → `dispatcher`).
    pub identities: BTreeMap<String, String>,
    /// A token the admin endpoints also accept (they always accept none).
    pub admin_token: Option<String>,
    /// Serve HTTPS with this certificate and key (else plain HTTP; kubectl
    /// needs HTTPS to send its credentials, see [`server`]).
    pub tls: Option<ServingTls>,
    /// Restarts the API server on `POST /admin/restart` (the launcher's);
    /// without one a restart only cuts and refuses connections.
    pub restart_hook: Option<RestartHook>,
}

impl std::fmt::Debug for ProxyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyOptions")
            .field("listen", &self.listen)
            .field("upstream", &self.upstream.url)
            .field("identities", &self.identities.values().collect::<Vec<_>>())
            .field("tls", &self.tls.is_some())
            .field("restart_hook", &self.restart_hook.is_some())
            .finish_non_exhaustive()
    }
}

impl ProxyOptions {
    /// A proxy on a free loopback port in front of `upstream`, no names, no
    /// hook.
    pub fn new(upstream: UpstreamOptions) -> Self {
        ProxyOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream,
            identities: BTreeMap::new(),
            admin_token: None,
            tls: None,
            restart_hook: None,
        }
    }

    /// Serves HTTPS with this certificate (chain) and key, both PEM.
    pub fn serve_tls(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        self.tls = Some(ServingTls { cert_pem, key_pem });
        self
    }

    /// Counts requests with `token` under `name`.
    pub fn identity(mut self, token: impl Into<String>, name: impl Into<String>) -> Self {
        self.identities.insert(token.into(), name.into());
        self
    }

    /// Restarts the API server with `hook` on `POST /admin/restart`.
    pub fn restart_hook(mut self, hook: RestartHook) -> Self {
        self.restart_hook = Some(hook);
        self
    }
}

/// A running proxy. Dropping it stops it and cuts every connection.
pub struct ProxyHandle {
    addr: SocketAddr,
    url: String,
    /// The serving certificate chain, when serving HTTPS.
    ca_pem: Option<Vec<u8>>,
    proxy: Arc<Proxy>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("url", &self.url)
            .field("upstream", &self.proxy.upstream.base())
            .finish()
    }
}

impl ProxyHandle {
    /// The API's base for clients: `https://127.0.0.1:PORT` when the proxy
    /// has a serving certificate, else `http://...` (the kubeconfigs'
    /// server).
    pub fn url(&self) -> &str {
        &self.url
    }
    /// `http://127.0.0.1:PORT`: the same port in plain HTTP, which it always
    /// also speaks; kube-sim's `AdminClient` (which trusts no private CA)
    /// takes this one.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// The PEM a client trusts the proxy with, when it serves HTTPS.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The API server's base URL.
    pub fn upstream(&self) -> &str {
        self.proxy.upstream.base()
    }
    /// The rules, open watches and counters, for in-process inspection.
    pub fn book(&self) -> &FaultBook {
        &self.proxy.book
    }
    /// A kubeconfig pointing at the proxy: one cluster (with the serving
    /// certificate as its `certificate-authority-data` when HTTPS), one
    /// user with bearer `token`, one context in `namespace`.
    pub fn kubeconfig(&self, token: &str, namespace: &str) -> kube::config::Kubeconfig {
        let mut kc = kubeconfig(&self.url, token, namespace);
        if let (Some(pem), Some(c)) = (&self.ca_pem, kc.clusters[0].cluster.as_mut()) {
            use base64::Engine;
            c.certificate_authority_data =
                Some(base64::engine::general_purpose::STANDARD.encode(pem));
        }
        kc
    }
    /// Writes [`ProxyHandle::kubeconfig`] to `path` (parents created).
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        token: &str,
        namespace: &str,
    ) -> anyhow::Result<()> {
        write_kubeconfig(path, &self.kubeconfig(token, namespace))
    }
    /// The kube-rs configuration for the proxy: [`ProxyHandle::url`] (its
    /// certificate trusted when HTTPS), bearer `token`, default namespace
    /// `namespace`. For tweaks such as `default_retry` (kube-rs retries
    /// 429s, 503s and 504s by default, after their `Retry-After`); else see
    /// [`ProxyHandle::kube_client`].
    pub fn kube_config(&self, token: &str, namespace: &str) -> anyhow::Result<kube::Config> {
        let mut cfg = kube::Config::new(self.url.parse().context("the proxy's URL")?);
        if let Some(pem) = &self.ca_pem {
            use rustls_pki_types::CertificateDer;
            use rustls_pki_types::pem::PemObject;
            let ders = CertificateDer::pem_slice_iter(pem)
                .map(|c| c.map(|c| c.to_vec()))
                .collect::<Result<Vec<_>, _>>()
                .context("the serving certificate")?;
            cfg.root_cert = Some(ders);
        }
        cfg.default_namespace = namespace.to_string();
        cfg.auth_info.token = Some(token.to_owned().into());
        Ok(cfg)
    }
    /// A kube-rs client from [`ProxyHandle::kube_config`]. Installs the
    /// ring rustls provider if none is installed yet.
    pub fn kube_client(&self, token: &str, namespace: &str) -> anyhow::Result<kube::Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        kube::Client::try_from(self.kube_config(token, namespace)?)
            .context("building a kube-rs client for the proxy")
    }
    /// Stops the proxy now.
    pub fn shutdown(mut self) {
        self.stop();
    }
    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        // Connections outlive the server task: cut them, so no hung request
        // or relayed watch stays behind.
        self.proxy.net.stop();
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a proxy: builds the upstream client, binds the listener, serves.
pub async fn spawn(opts: ProxyOptions) -> anyhow::Result<ProxyHandle> {
    let upstream = upstream::Upstream::new(&opts.upstream)?;
    let acceptor = opts.tls.as_ref().map(ServingTls::acceptor).transpose()?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let proxy = Arc::new(Proxy::new(
        upstream,
        opts.identities,
        opts.admin_token,
        opts.restart_hook,
    ));
    let app = axum::Router::new()
        .fallback(proxy::handle)
        .with_state(proxy.clone());
    let listener =
        FaultListener::new(listener, proxy.net.clone()).context("reading the bound address")?;
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let task = tokio::spawn(server::serve(listener, acceptor, app));
    Ok(ProxyHandle {
        addr,
        url: format!("{scheme}://{addr}"),
        ca_pem: opts.tls.map(|t| t.cert_pem),
        proxy,
        task: Some(task),
    })
}

/// A kubeconfig for a server URL: one cluster `tcab-api-proxy`, one user
/// with bearer `token`, one (current) context in `namespace`.
pub fn kubeconfig(server: &str, token: &str, namespace: &str) -> kube::config::Kubeconfig {
    use kube::config::{
        AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
    };
    const NAME: &str = "tcab-api-proxy";
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.into(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_owned().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context {
                cluster: NAME.into(),
                user: Some(NAME.into()),
                namespace: Some(namespace.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    }
}

/// Writes a kubeconfig as YAML (parent directories created).
pub fn write_kubeconfig(path: &Path, config: &kube::config::Kubeconfig) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_saphyr::to_string(config).context("rendering the kubeconfig")?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
