//! The API as a pod reaches it on a real node: HTTPS at
//! `$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, trusting only the
//! ServiceAccount's `ca.crt`.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tcab_workloads::Host;
use tcab_workloads::container::ContainerHost;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

/// A CA: its certificate (PEM) and the issuer that signs with it.
fn ca() -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}

/// An HTTPS server on 127.0.0.1 whose certificate `issuer` signed; it
/// answers every request 200 with a pod and keeps each request's head.
async fn https_api(issuer: &Issuer<'static, KeyPair>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let body = r#"{"kind":"Pod","metadata":{"name":"p"}}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, heads)
}

fn host(serviceaccount: &Path, port: u16) -> ContainerHost {
    let env = HashMap::from([
        (
            "TCAB_SERVICEACCOUNT_DIR".to_string(),
            serviceaccount.to_str().unwrap().to_string(),
        ),
        ("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()),
        ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
    ]);
    let (_, sigterm) = tokio::sync::watch::channel(false);
    ContainerHost::new(env, sigterm).unwrap()
}

#[tokio::test]
async fn the_api_is_reached_over_https_trusting_the_serviceaccounts_ca_only() {
    let (ca_pem, issuer) = ca();
    let (port, heads) = https_api(&issuer).await;
    let sa = tempfile::tempdir().unwrap();
    std::fs::write(sa.path().join("token"), "sa-token").unwrap();
    std::fs::write(sa.path().join("ca.crt"), &ca_pem).unwrap();
    assert_eq!(host(sa.path(), port).delete_pod("work", "p").await, Ok(()));
    let seen = heads.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("DELETE /api/v1/namespaces/work/pods/p HTTP/1.1\r\n"),
        "{}",
        seen[0]
    );
    assert!(
        seen[0]
            .to_ascii_lowercase()
            .contains("\r\nauthorization: bearer sa-token\r\n"),
        "{}",
        seen[0]
    );

    // Another CA's ca.crt: the server's certificate is not trusted.
    let (other_pem, _) = ca();
    let stranger = tempfile::tempdir().unwrap();
    std::fs::write(stranger.path().join("token"), "sa-token").unwrap();
    std::fs::write(stranger.path().join("ca.crt"), &other_pem).unwrap();
    let err = host(stranger.path(), port)
        .delete_pod("work", "p")
        .await
        .unwrap_err();
    assert!(err.contains("certificate"), "{err}");
    assert_eq!(heads.lock().unwrap().len(), 1);
}
