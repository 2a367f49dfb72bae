//! The proxy's side towards its clients: HTTP/1.1 on a [`FaultListener`]
//! (whose connections can be cut and whose port can be closed), over TLS
//! when the proxy has a serving certificate.
//!
//! Why TLS matters: kubectl (client-go's `clientcmd`) sends a kubeconfig
//! user's credentials only to an `https://` server; over plain HTTP it is
//! anonymous, which a real API server forbids. kube-rs sends its token
//! either way.

use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;
use tcab_api_faults::net::FaultListener;
use tokio_rustls::TlsAcceptor;

/// The certificate (chain) and key the proxy serves HTTPS with, as PEM.
/// The API server's own pair is the natural choice: kube-apiserver's
/// `--cert-dir` holds `apiserver.crt` (its serving cert, for `127.0.0.1`
/// among others, and the self-signed CA) and `apiserver.key`, so clients
/// trust the proxy with the CA they trust the API server with.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingTls {
    /// The certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// Its private key (PKCS#1, PKCS#8 or SEC1).
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

/// The serving certificate or key does not make a TLS configuration.
#[derive(Debug, thiserror::Error)]
#[error("the proxy's serving certificate: {0}")]
pub struct ServingTlsError(String);

impl ServingTls {
    /// The TLS acceptor (HTTP/1.1 by ALPN, as the proxy serves only that).
    pub fn acceptor(&self) -> Result<TlsAcceptor, ServingTlsError> {
        let bad = |e: &dyn std::fmt::Display| ServingTlsError(e.to_string());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?;
        if certs.is_empty() {
            return Err(ServingTlsError("no certificate in the PEM".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| bad(&e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad(&e))?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(cfg)))
    }
}

/// How long a client may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Accepts connections until dropped; each is served on its own task with
/// `app`, its [`ConnTag`](tcab_api_faults::net::ConnTag) in the requests'
/// extensions (`ConnectInfo`). With `tls`, a connection that opens with a
/// TLS handshake is served HTTPS and any other plain HTTP, on the same
/// port: kubectl gets HTTPS, kube-sim's admin client and kube-rs may use
/// either.
pub async fn serve(mut listener: FaultListener, tls: Option<TlsAcceptor>, app: axum::Router) {
    loop {
        let (mut conn, tag) = listener.accept().await;
        let app = app.clone().layer(axum::Extension(ConnectInfo(tag)));
        let tls = tls.clone();
        tokio::spawn(async move {
            let svc = TowerToHyperService::new(app);
            let http = hyper::server::conn::http1::Builder::new();
            let tls = match tls {
                Some(tls) => match tokio::time::timeout(HANDSHAKE, opens_tls(&mut conn)).await {
                    Ok(Ok(true)) => Some(tls),
                    Ok(Ok(false)) => None,
                    Ok(Err(e)) => {
                        return tracing::debug!(peer = %tag.peer, error = %e, "connection ended");
                    }
                    Err(_) => return tracing::debug!(peer = %tag.peer, "connection sent nothing"),
                },
                None => None,
            };
            let served = match tls {
                None => http
                    .serve_connection(TokioIo::new(conn), svc)
                    .with_upgrades()
                    .await
                    .map_err(|e| e.to_string()),
                Some(tls) => match tokio::time::timeout(HANDSHAKE, tls.accept(conn)).await {
                    Ok(Ok(stream)) => http
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await
                        .map_err(|e| e.to_string()),
                    Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                    Err(_) => Err("TLS handshake timed out".into()),
                },
            };
            if let Err(e) = served {
                tracing::debug!(peer = %tag.peer, error = %e, "connection ended");
            }
        });
    }
}

/// Whether a connection opens with a TLS handshake record (content type
/// 22); an HTTP/1 request opens with a method's letter.
async fn opens_tls(conn: &mut tcab_api_faults::net::FaultConn) -> std::io::Result<bool> {
    let mut first = [0u8; 1];
    let n = conn.peek(&mut first).await?;
    Ok(n == 1 && first[0] == 0x16)
}
