//! The TLS both sides of an interception speak. Toward the program: a CA
//! made in memory for one run (its private key never written anywhere, its
//! certificate the only thing the sandbox gets, in its trust bundle), name-
//! constrained to the run's secret hosts and valid for a few days, which
//! signs one certificate per secret host when the program first connects.
//! Toward the real host: an ordinary verifying client (the system's roots,
//! plus the operator's `[network] upstream_ca` for local services and tests).
//! Both offer HTTP/1.1 only (ALPN): the interceptor speaks nothing else.

use std::collections::HashMap;
use std::io::Read;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::policy::Host;

/// The one protocol an interception speaks, both ways.
const ALPN: &[u8] = b"http/1.1";

/// The crypto every TLS config here uses.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn random16() -> Result<[u8; 16], String> {
    let mut r = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut r))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    // A positive serial number of at most 16 bytes (RFC 5280).
    r[0] &= 0x7f;
    r[0] |= 0x01;
    Ok(r)
}

/// Valid from yesterday to three days from now: a run lasts at most a day
/// (the wall-time limit's most), and nothing should trust this CA after.
fn validity(p: &mut rcgen::CertificateParams) {
    use chrono::Datelike;
    let day = |d: chrono::NaiveDate| rcgen::date_time_ymd(d.year(), d.month() as u8, d.day() as u8);
    let today = chrono::Utc::now().date_naive();
    p.not_before = day(today - chrono::Days::new(1));
    p.not_after = day(today + chrono::Days::new(3));
}

fn san(host: &Host) -> String {
    match host {
        Host::Name(n) => n.clone(),
        Host::Ip(a) => a.to_string(),
    }
}

/// One run's CA.
pub(crate) struct RunCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// A server config per host, made when the program first connects.
    servers: Mutex<HashMap<Host, Arc<ServerConfig>>>,
}

impl RunCa {
    /// A CA that may only sign for `hosts` (name constraints: a name
    /// permits itself and the names below it, an address itself).
    pub(crate) fn new(hosts: &[Host]) -> Result<RunCa, String> {
        let fail = |e: rcgen::Error| format!("cannot make the run's CA: {e}");
        let mut p = rcgen::CertificateParams::default();
        let id: String = random16()?[..4].iter().map(|b| format!("{b:02x}")).collect();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, format!("sandbench run CA {id}"));
        p.distinguished_name.push(rcgen::DnType::OrganizationName, "sandbench (this run only)");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&random16()?));
        let mut permitted = vec![];
        for h in hosts {
            permitted.push(match h {
                Host::Name(n) => rcgen::GeneralSubtree::DnsName(n.clone()),
                Host::Ip(a) => rcgen::GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(
                    *a,
                    if matches!(a, IpAddr::V4(_)) { 32 } else { 128 },
                )),
            });
        }
        p.name_constraints = Some(rcgen::NameConstraints { permitted_subtrees: permitted, excluded_subtrees: vec![] });
        validity(&mut p);
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let cert = p.self_signed(&key).map_err(fail)?;
        Ok(RunCa { cert, key, servers: Mutex::new(HashMap::new()) })
    }

    /// The CA's certificate, PEM: what the sandbox's trust bundle adds.
    pub(crate) fn pem(&self) -> String {
        self.cert.pem()
    }

    #[cfg(test)]
    pub(crate) fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The server side of an interception of `host`: a certificate for it
    /// signed by this CA, HTTP/1.1 only.
    pub(crate) fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, String> {
        let mut servers = self.servers.lock().map_err(|_| "the run's CA is unusable (a panic held it)".to_string())?;
        if let Some(c) = servers.get(host) {
            return Ok(c.clone());
        }
        let fail = |e: rcgen::Error| format!("cannot make a certificate for {host}: {e}");
        let mut p = rcgen::CertificateParams::new(vec![san(host)]).map_err(fail)?;
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, san(host));
        p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&random16()?));
        validity(&mut p);
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let leaf = p.signed_by(&key, &self.cert, &self.key).map_err(fail)?;
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), self.cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| format!("TLS: {e}"))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        let cfg = Arc::new(cfg);
        servers.insert(host.clone(), cfg.clone());
        Ok(cfg)
    }
}

/// The system's roots, read once per process.
fn native_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!("system roots: {e}");
            }
            let mut store = RootCertStore::empty();
            store.add_parsable_certificates(found.certs);
            Arc::new(store)
        })
        .clone()
}

/// Certificates from PEM text (the operator's extra CA).
pub(crate) fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not PEM certificates ({e})"))?;
    if certs.is_empty() {
        return Err("no certificate in it".into());
    }
    Ok(certs)
}

/// The client side of an interception: verifies the real host against the
/// system's roots and `extra`, HTTP/1.1 only.
pub(crate) fn upstream_config(extra: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = (*native_roots()).clone();
    for c in extra {
        roots.add(c.clone()).map_err(|e| format!("an upstream CA certificate is unusable: {e}"))?;
    }
    let mut cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client(ca: &RunCa) -> tokio_rustls::TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der()).unwrap();
        let mut cfg = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }

    /// A handshake between the interception's server side for `host` and a
    /// client that trusts the run's CA alone, asking for `name`.
    async fn handshake(ca: &RunCa, host: &Host, name: &str) -> Result<Vec<u8>, String> {
        let (a, b) = tokio::io::duplex(1 << 16);
        let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(host).unwrap());
        let server = tokio::spawn(async move {
            let mut s = acceptor.accept(b).await.map_err(|e| e.to_string())?;
            let alpn = s.get_ref().1.alpn_protocol().map(|p| p.to_vec()).unwrap_or_default();
            s.write_all(b"ok").await.map_err(|e| e.to_string())?;
            s.shutdown().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(alpn)
        });
        let sn = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut c = client(ca).connect(sn, a).await.map_err(|e| e.to_string())?;
        let mut got = vec![];
        let _ = c.read_to_end(&mut got).await;
        assert_eq!(got, b"ok");
        server.await.unwrap()
    }

    #[tokio::test]
    async fn the_run_ca_serves_its_hosts_over_http1_only() {
        let api = Host::parse("api.test").unwrap();
        let ip = Host::parse("127.0.0.9").unwrap();
        let ca = RunCa::new(&[api.clone(), ip.clone()]).unwrap();
        assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(handshake(&ca, &api, "api.test").await.unwrap(), b"http/1.1", "h2 is never chosen");
        assert_eq!(handshake(&ca, &ip, "127.0.0.9").await.unwrap(), b"http/1.1");
        assert!(handshake(&ca, &api, "other.test").await.is_err(), "the certificate names its host only");
        // Cached per host; another run's CA is another CA, which a client of this one refuses.
        assert!(Arc::ptr_eq(&ca.server_config(&api).unwrap(), &ca.server_config(&api).unwrap()));
        let other = RunCa::new(std::slice::from_ref(&api)).unwrap();
        assert_ne!(other.pem(), ca.pem());
        let (a, b) = tokio::io::duplex(1 << 16);
        let acceptor = tokio_rustls::TlsAcceptor::from(other.server_config(&api).unwrap());
        tokio::spawn(async move { acceptor.accept(b).await.map(|_| ()) });
        let sn = rustls::pki_types::ServerName::try_from("api.test").unwrap();
        assert!(client(&ca).connect(sn, a).await.is_err());
    }

    #[test]
    fn name_constraints_refuse_any_other_host() {
        use rustls::client::danger::ServerCertVerifier;
        let ca = RunCa::new(&[Host::parse("api.test").unwrap()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca.der()).unwrap();
        let v =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build().unwrap();
        let now = rustls::pki_types::UnixTime::now();
        // Signed with the CA's own key: only its names pass.
        for (name, ok) in [("api.test", true), ("x.api.test", true), ("evil.test", false)] {
            let key = rcgen::KeyPair::generate().unwrap();
            let leaf = rcgen::CertificateParams::new(vec![name.to_string()])
                .unwrap()
                .signed_by(&key, &ca.cert, &ca.key)
                .unwrap();
            let sn = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
            assert_eq!(v.verify_server_cert(leaf.der(), &[], &sn, &[], now).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn extra_roots_come_from_pem() {
        let ca = RunCa::new(&[Host::parse("a.test").unwrap()]).unwrap();
        let certs = certs_from_pem(ca.pem().as_bytes()).unwrap();
        assert_eq!(certs, vec![ca.der()]);
        assert!(certs_from_pem(b"not a certificate").is_err());
        let cfg = upstream_config(&certs).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
