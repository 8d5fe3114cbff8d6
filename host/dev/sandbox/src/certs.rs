//! The sandbox's certificate authority, standing in for cert-manager: it
//! issues a TLS cluster's Secret (`ca.crt`, `tls.crt`, `tls.key`) and
//! renews it on demand, as cert-manager rewrites the Secret in place.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA that lives as long as the sandbox (its key is never written out).
pub struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl Authority {
    /// A new CA named `name`.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM (a Secret's `ca.crt`).
    pub fn ca_pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate with a new key for `names`: DNS names
    /// (wildcards allowed) and IP addresses, as subject alternative names.
    pub fn issue(&self, names: &[String]) -> anyhow::Result<Issued> {
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().map(String::as_str).unwrap_or("valkey"),
        );
        params.distinguished_name = dn;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_valkey::tls::{Material, leaf};

    #[test]
    fn issued_certificates_chain_to_the_authority_and_each_renewal_is_new() {
        let ca = Authority::new("sandbox CA").unwrap();
        let names = ["*.valkey.test".to_string(), "127.0.0.1".to_string()];
        let first = ca.issue(&names).unwrap();
        let material = Material::from_secret(
            Some(ca.ca_pem().as_bytes()),
            Some(first.cert.as_bytes()),
            Some(first.key.as_bytes()),
        )
        .expect("the key is the certificate's and the CA reads");
        assert_eq!(Some(material.leaf), leaf(first.cert.as_bytes()));
        let renewed = ca.issue(&names).unwrap();
        assert_ne!(renewed.cert, first.cert);
        assert_ne!(renewed.key, first.key);
    }
}
