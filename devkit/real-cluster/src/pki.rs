//! The control plane's keys and certificates, made here (no openssl):
//!
//! - a CA (`ca.crt`, `ca.key`): it signs the API server's serving certificate
//!   and is the API server's client CA, so a caller can later mint a client
//!   certificate for any identity ([`mint_client_cert`]);
//! - the API server's serving certificate (`apiserver.crt`, `apiserver.key`)
//!   for `127.0.0.1`, `localhost`, the in-cluster names and the node
//!   network's gateway address;
//! - the service-account signing key (`sa.key`, `sa.pub`): ECDSA P-256, so
//!   tokens are signed ES256.
//!
//! All keys are ECDSA P-256 in PKCS#8 PEM, which kube-apiserver and
//! kube-controller-manager read.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// Why keys or certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("generating {what}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where the files are (all in one directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkiFiles {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl PkiFiles {
    /// The file names in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        PkiFiles {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        }
    }
}

const CA_COMMON_NAME: &str = "tcab-real-cluster-ca";

/// The CA's parameters. The same every time, so an issuer can be rebuilt
/// from the key alone (the subject and key identifier are all a signature
/// needs from them).
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(CA_COMMON_NAME, &[]);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn name(common_name: &str, organizations: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn
}

fn generate_key(what: &'static str) -> Result<KeyPair, PkiError> {
    KeyPair::generate().map_err(|source| PkiError::Generate { what, source })
}

fn write(path: &Path, text: &str) -> Result<(), PkiError> {
    std::fs::write(path, text).map_err(|source| PkiError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Makes every key and certificate and writes them to `dir`.
pub fn generate(dir: &Path) -> Result<PkiFiles, PkiError> {
    let files = PkiFiles::in_dir(dir);

    let ca_key = generate_key("the CA key")?;
    let ca_cert = ca_params()
        .self_signed(&ca_key)
        .map_err(|source| PkiError::Generate {
            what: "the CA certificate",
            source,
        })?;
    write(&files.ca_cert, &ca_cert.pem())?;
    write(&files.ca_key, &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca_params(), ca_key);

    let serving_key = generate_key("the API server's serving key")?;
    let sans = [
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        // The first address of the default service CIDR (10.0.0.0/24).
        "10.0.0.1",
        // The host's loopback as real nodes see it (node::network::GATEWAY_IP).
        "10.201.255.1",
    ];
    let mut params = CertificateParams::new(sans.map(String::from).to_vec()).map_err(|source| {
        PkiError::Generate {
            what: "the serving certificate's names",
            source,
        }
    })?;
    params.distinguished_name = name("kube-apiserver", &[]);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let serving = params
        .signed_by(&serving_key, &issuer)
        .map_err(|source| PkiError::Generate {
            what: "the serving certificate",
            source,
        })?;
    // The chain: the serving certificate, then the CA (as --tls-cert-file wants).
    write(
        &files.serving_cert,
        &format!("{}{}", serving.pem(), ca_cert.pem()),
    )?;
    write(&files.serving_key, &serving_key.serialize_pem())?;

    let sa_key = generate_key("the service-account signing key")?;
    write(&files.sa_key, &sa_key.serialize_pem())?;
    write(&files.sa_pub, &sa_key.public_key_pem())?;
    Ok(files)
}

/// A client certificate and its key, both PEM.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Mints a client certificate signed by the CA whose key is at `ca_key`:
/// the API server authenticates it as user `user` (the CN) in `groups` (the
/// O's). E.g. a node's identity, `system:node:<name>` in `system:nodes`, for
/// a node not named when the control plane started.
pub fn mint_client_cert(
    ca_key: &Path,
    user: &str,
    groups: &[String],
) -> Result<ClientCert, PkiError> {
    let pem = std::fs::read_to_string(ca_key).map_err(|source| PkiError::Read {
        path: ca_key.to_owned(),
        source,
    })?;
    let ca_key = KeyPair::from_pem(&pem).map_err(|source| PkiError::Generate {
        what: "the CA key (parsing it)",
        source,
    })?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let key = generate_key("a client key")?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(user, groups);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| PkiError::Generate {
            what: "a client certificate",
            source,
        })?;
    Ok(ClientCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(dir.path()).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert!(read(&files.ca_cert).starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            read(&files.serving_cert)
                .matches("BEGIN CERTIFICATE")
                .count(),
            2
        );
        assert!(read(&files.sa_key).starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(read(&files.sa_pub).starts_with("-----BEGIN PUBLIC KEY-----"));
        let minted =
            mint_client_cert(&files.ca_key, "system:node:n1", &["system:nodes".into()]).unwrap();
        assert!(minted.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
