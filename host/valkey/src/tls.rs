//! TLS to a node: whom the operator trusts, and which certificate a node
//! serves.
//!
//! The operator dials pod IPs, which a cluster's certificate rarely names
//! (its names are the external hostnames clients verify). So [`Trust`]
//! checks that a node's certificate chains to the cluster's own CA (the
//! `ca.crt` of the Secret the cluster names) and is within its validity,
//! and does not check the name. Clients outside verify names as usual.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A CA bundle that cannot be trusted as given.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("the CA bundle holds no PEM certificate")]
    Empty,
    #[error("the CA bundle is not PEM: {0}")]
    Pem(String),
    #[error("the CA certificate is unusable: {0}")]
    Certificate(String),
    #[error("the key {key:?} is missing or empty")]
    Missing { key: &'static str },
    #[error("{key:?} is not a PEM {what}: {detail}")]
    Unreadable {
        key: &'static str,
        what: &'static str,
        detail: String,
    },
    #[error("\"tls.key\" is not the key of the certificate in \"tls.crt\": {0}")]
    Mismatch(String),
}

/// A cluster's TLS Secret, checked: whom to trust, and the certificate
/// every node should serve.
#[derive(Clone, Debug)]
pub struct Material {
    pub trust: Trust,
    /// The leaf of `tls.crt`.
    pub leaf: CertificateDer<'static>,
}

impl Material {
    /// Checks a TLS Secret's three keys (`ca.crt`, `tls.crt`, `tls.key`,
    /// as PEM): each is there, readable, and the key is the certificate's.
    /// Nothing is handed to Valkey that it would refuse to load.
    pub fn from_secret(
        ca: Option<&[u8]>,
        cert: Option<&[u8]>,
        key: Option<&[u8]>,
    ) -> Result<Self, TrustError> {
        fn present<'a>(value: Option<&'a [u8]>, key: &'static str) -> Result<&'a [u8], TrustError> {
            value
                .filter(|v| !v.is_empty())
                .ok_or(TrustError::Missing { key })
        }
        let (ca, cert, key) = (
            present(ca, "ca.crt")?,
            present(cert, "tls.crt")?,
            present(key, "tls.key")?,
        );
        let trust = Trust::from_pem(ca)?;
        let unreadable = |key, what| {
            move |e: rustls::pki_types::pem::Error| TrustError::Unreadable {
                key,
                what,
                detail: e.to_string(),
            }
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(unreadable("tls.crt", "certificate"))?;
        let Some(leaf) = chain.first().cloned() else {
            return Err(TrustError::Missing { key: "tls.crt" });
        };
        let private = PrivateKeyDer::from_pem_slice(key).map_err(unreadable("tls.key", "key"))?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(chain, private, &provider)
            .map_err(|e| TrustError::Mismatch(e.to_string()))?;
        Ok(Material { trust, leaf })
    }
}

/// Whom a TLS connection to a node trusts: the cluster's CA certificates.
/// Cheap to clone.
#[derive(Clone)]
pub struct Trust {
    connector: TlsConnector,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust").finish_non_exhaustive()
    }
}

impl Trust {
    /// Trusts the certificates of the PEM bundle `ca` (a Secret's
    /// `ca.crt`).
    pub fn from_pem(ca: &[u8]) -> Result<Self, TrustError> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| TrustError::Pem(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| TrustError::Certificate(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(TrustError::Empty);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(ChainOnly {
            roots: Arc::new(roots),
            provider: provider.clone(),
        });
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TrustError::Certificate(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Trust {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The TLS handshake over `tcp` to the node at `ip`.
    pub(crate) async fn handshake(
        &self,
        ip: IpAddr,
        tcp: TcpStream,
    ) -> io::Result<TlsStream<TcpStream>> {
        self.connector
            .connect(ServerName::IpAddress(ip.into()), tcp)
            .await
    }
}

/// The first certificate of a PEM bundle (a Secret's `tls.crt`: the leaf
/// comes first), if there is one.
pub fn leaf(pem: &[u8]) -> Option<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem).next()?.ok()
}

/// Verifies the chain to the trusted roots and the handshake signatures;
/// not the name (see the module docs).
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names`, signed by `ca`, as (cert PEM, key PEM).
    fn leaf_of(ca: &Ca, names: &[&str]) -> (String, String) {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    async fn serve_once(cert: &str, key: &str) -> std::net::SocketAddr {
        let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        addr
    }

    async fn dial(trust: &Trust, addr: std::net::SocketAddr) -> io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        trust.handshake(addr.ip(), tcp).await
    }

    #[tokio::test]
    async fn a_node_certificate_from_the_cluster_ca_is_trusted_whatever_its_names() {
        let ca = ca("cluster CA");
        // The certificate names the external hostnames, not the pod IP.
        let (cert, key) = leaf_of(&ca, &["*.valkey.example.com"]);
        let addr = serve_once(&cert, &key).await;
        let trust = Trust::from_pem(ca.pem.as_bytes()).unwrap();
        let tls = dial(&trust, addr)
            .await
            .expect("the cluster's CA is trusted");
        let served = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(Some(served), leaf(cert.as_bytes()));
    }

    #[tokio::test]
    async fn a_certificate_from_another_ca_is_refused() {
        let (cert, key) = leaf_of(&ca("someone else"), &["*.valkey.example.com"]);
        let addr = serve_once(&cert, &key).await;
        let trust = Trust::from_pem(ca("cluster CA").pem.as_bytes()).unwrap();
        let err = dial(&trust, addr).await.unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    }

    #[test]
    fn a_secret_is_checked_key_by_key_before_anything_uses_it() {
        let ca = ca("cluster CA");
        let (cert, key) = leaf_of(&ca, &["*.example.com"]);
        let (_, other_key) = leaf_of(&ca, &["*.example.com"]);
        let (ca, cert, key, other_key) = (
            ca.pem.as_bytes(),
            cert.as_bytes(),
            key.as_bytes(),
            other_key.as_bytes(),
        );
        let m = Material::from_secret(Some(ca), Some(cert), Some(key)).unwrap();
        assert_eq!(Some(m.leaf), leaf(cert));
        // (ca.crt, tls.crt, tls.key) => the error names
        type Key<'a> = Option<&'a [u8]>;
        let cases: [(Key<'_>, Key<'_>, Key<'_>, &str); 6] = [
            (None, Some(cert), Some(key), "\"ca.crt\" is missing"),
            (Some(ca), None, Some(key), "\"tls.crt\" is missing"),
            (Some(ca), Some(cert), Some(b""), "\"tls.key\" is missing"),
            (Some(ca), Some(b"junk"), Some(key), "\"tls.crt\" is missing"),
            (
                Some(ca),
                Some(cert),
                Some(b"junk"),
                "\"tls.key\" is not a PEM key",
            ),
            (
                Some(ca),
                Some(cert),
                Some(other_key),
                "is not the key of the certificate",
            ),
        ];
        for (ca, cert, key, says) in cases {
            let err = Material::from_secret(ca, cert, key)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{err:?} should say {says:?}");
        }
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        assert!(matches!(Trust::from_pem(b""), Err(TrustError::Empty)));
        assert!(matches!(
            Trust::from_pem(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(TrustError::Pem(_))
        ));
        assert_eq!(leaf(b"no pem here"), None);
    }
}
