//! A loopback "internet" for the egress and secrets tests: a test CA with a
//! server certificate for one name, and a loopback address where ports 80
//! and 443 (what a bare allow entry means) are both free — binding them
//! needs root.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::sync::Arc;

/// A CA the operator trusts through the config, and a TLS acceptor for
/// `host` with a certificate it signed.
pub struct TestCa {
    pub pem: String,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

/// `ca_name` must differ from `host`: OpenSSL takes a certificate whose
/// subject is its issuer for self-signed.
pub fn test_ca(ca_name: &str, host: &str) -> TestCa {
    let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, ca_name);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = p.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut lp = rcgen::CertificateParams::new(vec![host.into()]).unwrap();
    lp.distinguished_name.push(rcgen::DnType::CommonName, host);
    let leaf = lp.signed_by(&leaf_key, &ca, &ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    TestCa { pem: ca.pem(), acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)) }
}

/// Listeners on ports 80 and 443 of one address `127.<second>.x.y` (x, y
/// random, so that concurrent tests do not meet).
pub async fn bind_80_and_443(second: u8) -> (Ipv4Addr, tokio::net::TcpListener, tokio::net::TcpListener) {
    let mut rnd = [0u8; 2];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut rnd).unwrap();
    for i in 0..64u8 {
        let ip = Ipv4Addr::new(127, second, rnd[0].wrapping_add(i), rnd[1].max(1));
        if let (Ok(h), Ok(t)) =
            (tokio::net::TcpListener::bind((ip, 80)).await, tokio::net::TcpListener::bind((ip, 443)).await)
        {
            return (ip, h, t);
        }
    }
    panic!("no free loopback address for ports 80 and 443");
}
