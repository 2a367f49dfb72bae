//! The proxy's client to the API server behind it: HTTPS verified against
//! a given CA (the real kube-apiserver's self-signed one), or plain HTTP
//! (kube-sim), HTTP/1.1 as kube-rs and kubectl speak it.

use axum::body::Body;
use http::{HeaderMap, HeaderName, Uri, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::sync::Arc;
use std::time::Duration;

/// Where the proxy forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamOptions {
    /// The API server's URL: `https://127.0.0.1:6443` or `http://...`
    /// (scheme, host and port; no path).
    pub url: String,
    /// PEM certificates the API server's serving certificate must chain to
    /// (for `https`; the kube-apiserver's `--cert-dir` writes
    /// `apiserver.crt`, which holds its serving cert and its CA).
    pub ca_pem: Option<Vec<u8>>,
}

/// Why the upstream client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The URL does not parse or is not `http(s)://host:port`.
    #[error("upstream URL {url:?}: {why}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// An `https` URL without a CA.
    #[error("upstream URL {0:?} is https: give the CA PEM of its serving certificate")]
    NoCa(String),
    /// The CA PEM holds no usable certificate.
    #[error("the upstream CA PEM holds no usable certificate ({0})")]
    BadCa(String),
    /// rustls refused the configuration.
    #[error("TLS configuration")]
    Tls(#[source] rustls::Error),
}

/// The HTTP client to the API server.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Body>;

/// The upstream: its base URL and a pooled client.
#[derive(Clone)]
pub struct Upstream {
    base: String,
    client: HttpClient,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("base", &self.base)
            .finish()
    }
}

impl Upstream {
    /// Builds the client (no connection is made yet).
    pub fn new(opts: &UpstreamOptions) -> Result<Upstream, UpstreamError> {
        let bad = |why: &str| UpstreamError::Url {
            url: opts.url.clone(),
            why: why.to_string(),
        };
        let uri: Uri = opts
            .url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("give scheme, host and port only, no path"));
        }
        let base = format!("{}://{authority}", uri.scheme_str().unwrap_or("http"));
        let mut roots = rustls::RootCertStore::empty();
        match (&opts.ca_pem, https) {
            (Some(pem), _) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| UpstreamError::BadCa(e.to_string()))?;
                let (added, _ignored) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(UpstreamError::BadCa("no certificate parsed".into()));
                }
            }
            (None, true) => return Err(UpstreamError::NoCa(opts.url.clone())),
            (None, false) => {}
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(UpstreamError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Upstream { base, client })
    }

    /// `scheme://host:port` of the API server.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a client's request on to the API server: the same method,
    /// path, query, headers (but the hop-by-hop ones and `Host`) and body.
    pub async fn forward(
        &self,
        req: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, ForwardError> {
        let (mut parts, body) = req.into_parts();
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("{}{pq}", self.base)
            .parse()
            .map_err(|e: http::uri::InvalidUri| ForwardError(e.to_string()))?;
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::HOST);
        self.client
            .request(http::Request::from_parts(parts, body))
            .await
            .map_err(|e| ForwardError(error_chain(&e)))
    }
}

/// The API server could not be reached or did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ForwardError(pub String);

/// An error and its sources on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Removes the headers that belong to one connection (RFC 9110 7.6.1):
/// the fixed hop-by-hop set and any the `Connection` header names.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(url: &str, ca: Option<&[u8]>) -> UpstreamOptions {
        UpstreamOptions {
            url: url.into(),
            ca_pem: ca.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn urls_and_cas_are_checked() {
        let u = Upstream::new(&opts("http://127.0.0.1:8080/", None)).unwrap();
        assert_eq!(u.base(), "http://127.0.0.1:8080");
        let err = |o| Upstream::new(&o).unwrap_err().to_string();
        assert!(err(opts("https://127.0.0.1:6443", None)).contains("give the CA PEM"));
        assert!(err(opts("ftp://x:1", None)).contains("http or https"));
        assert!(err(opts("http://x:1/api", None)).contains("no path"));
        assert!(
            err(opts("https://127.0.0.1:6443", Some(b"not a pem")))
                .contains("no usable certificate")
        );
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-private".parse().unwrap());
        h.insert("x-private", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("authorization", "Bearer t".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["authorization", "content-type"]);
    }
}
