//! A serving certificate read from PEM files and picked up again when the
//! files change (as cert-manager or a kubelet rotates them), with no
//! restart: the webhook's, and the sandbox's TLS fronts'.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tracing::{info, warn};

/// The server certificate chain and its private key, PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf certificate.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads both files; fails, naming the file, if either is unreadable
    /// or the key is not the certificate's.
    pub fn load(&self) -> anyhow::Result<CertifiedKey> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .with_context(|| format!("reading {}", self.cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing {}", self.cert.display()))?;
        if certs.is_empty() {
            anyhow::bail!("{} holds no certificate", self.cert.display());
        }
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .with_context(|| format!("reading the private key {}", self.key.display()))?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(certs, key, &provider).with_context(|| {
            format!(
                "{} does not match {}",
                self.key.display(),
                self.cert.display()
            )
        })
    }

    fn modified(&self) -> Option<(SystemTime, SystemTime)> {
        let m = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((m(&self.cert)?, m(&self.key)?))
    }
}

/// Serves the current certificate of its files. A background task looks
/// at the files every so often and swaps in a renewal; one that fails to
/// load keeps the old certificate (and says so). The task ends when the
/// last handle to this is dropped.
#[derive(Debug)]
pub struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    /// Loads `files` now (failing if they do not load) and looks at them
    /// again every `every`. Needs a Tokio runtime.
    pub fn watch(files: TlsFiles, every: Duration) -> anyhow::Result<Arc<Self>> {
        let me = Arc::new(ReloadingCert {
            current: RwLock::new(Arc::new(files.load()?)),
        });
        tokio::spawn(reload(files, every, Arc::downgrade(&me)));
        Ok(me)
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap().clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

async fn reload(files: TlsFiles, every: Duration, cert: Weak<ReloadingCert>) {
    let mut seen = files.modified();
    loop {
        tokio::time::sleep(every).await;
        let Some(cert) = cert.upgrade() else { return };
        let now = files.modified();
        if now == seen {
            continue;
        }
        match files.load() {
            Ok(key) => {
                *cert.current.write().unwrap() = Arc::new(key);
                seen = now;
                info!(cert = %files.cert.display(), "reloaded the serving certificate");
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "renewed certificate not loaded; keeping the old one")
            }
        }
    }
}
