//! The kubelet's HTTPS server on 127.0.0.1: a self-signed serving
//! certificate per node (CN `system:node:<name>`, O `system:nodes`, SANs
//! 127.0.0.1 and the node name, as a kubelet's serving certificate
//! names its node), no client certificate asked for (the API server, run
//! without `--kubelet-client-certificate`, presents none), HTTP/1.1.
//! Stopping the server cuts every open connection at once, as a dead
//! kubelet would.

use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// A node's serving certificate and key.
pub struct ServingCert {
    /// The certificate (DER).
    pub cert: CertificateDer<'static>,
    /// The certificate (PEM), for clients that want to verify it.
    pub cert_pem: String,
    key: PrivatePkcs8KeyDer<'static>,
}

impl ServingCert {
    /// A new self-signed certificate for `node`.
    pub fn generate(node: &str) -> anyhow::Result<Self> {
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), node.to_string()])
                .context("the serving certificate's names")?;
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
        dn.push(rcgen::DnType::OrganizationName, "system:nodes");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().context("generating the serving key")?;
        let cert = params
            .self_signed(&key)
            .context("signing the serving certificate")?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }

    fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .context("the serving certificate")?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(cfg)))
    }
}

/// A running HTTPS server; dropping it (or [`Server::stop`]) closes the
/// listener and cuts every connection.
pub struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Serves `app` over TLS with `cert` on `addr` (port 0 picks one).
    pub async fn start(
        addr: SocketAddr,
        cert: &ServingCert,
        app: axum::Router,
    ) -> anyhow::Result<Server> {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let addr = listener.local_addr().context("the bound address")?;
        let acceptor = cert.acceptor()?;
        let task = tokio::spawn(async move {
            // Connections live in this set: aborting the task drops it,
            // which aborts them all.
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else {
                            // Out of descriptors or the like: do not spin.
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        };
                        let acceptor = acceptor.clone();
                        let app = app.clone();
                        conns.spawn(async move {
                            let Ok(tls) = acceptor.accept(tcp).await else { return };
                            let service = TowerToHyperService::new(app);
                            let _ = auto::Builder::new(TokioExecutor::new())
                                .http1_only()
                                .serve_connection(TokioIo::new(tls), service)
                                .await;
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Server { addr, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and cuts every connection.
    pub fn stop(self) {}
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}
