//! The gauntlet's bound host (`bound.gauntlet.test`): an HTTPS upstream a
//! sample's secret is bound to, with a certificate from a CA made per cell
//! (trusted by the run's egress proxy through `RunSpec::upstream_ca`, never
//! by the program). It logs every request it receives whole and answers with
//! that request, so a program that asks it to echo its credentials gets
//! them back: as the body (`/echo`), in a response header (`/header`), in
//! 7-byte chunks so the value straddles chunks (`/chunked`), and gzip
//! compressed although nobody asked (`/gzip`). Loopback only.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) const BOUND: &str = "bound.gauntlet.test";

/// A request's bytes kept at most, and all requests' together.
const KEEP: usize = 64 << 10;
const KEEP_ALL: usize = 512 << 10;
/// Connections served at once (a sample cannot make it hold more).
const MAX_CONNS: usize = 16;

pub(crate) struct Bound {
    pub port: u16,
    /// The CA (PEM) that signed its certificate.
    pub ca_pem: String,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Bound {
    /// Listen on `ip` (a free port) with a fresh CA and certificate.
    pub(crate) fn plant(ip: Ipv4Addr) -> std::io::Result<Bound> {
        let bad = |e: rcgen::Error| std::io::Error::other(format!("the bound host's certificate: {e}"));
        let mut p = rcgen::CertificateParams::new(vec![]).map_err(bad)?;
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, "sandbench gauntlet upstream CA");
        let ca_key = rcgen::KeyPair::generate().map_err(bad)?;
        let ca = p.self_signed(&ca_key).map_err(bad)?;
        let leaf_key = rcgen::KeyPair::generate().map_err(bad)?;
        let mut lp = rcgen::CertificateParams::new(vec![BOUND.into()]).map_err(bad)?;
        lp.distinguished_name.push(rcgen::DnType::CommonName, BOUND);
        let leaf = lp.signed_by(&leaf_key, &ca, &ca_key).map_err(bad)?;
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .map_err(std::io::Error::other)?;
        let cfg = Arc::new(cfg);
        let l = TcpListener::bind((ip, 0))?;
        let port = l.local_addr()?.port();
        l.set_nonblocking(true)?;
        let log: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (lg, st) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let busy = Arc::new(AtomicUsize::new(0));
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) if busy.load(Ordering::Relaxed) < MAX_CONNS => {
                        busy.fetch_add(1, Ordering::Relaxed);
                        let (cfg, lg, busy) = (cfg.clone(), lg.clone(), busy.clone());
                        std::thread::spawn(move || {
                            let _ = serve(c, cfg, &lg);
                            busy.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Bound { port, ca_pem: ca.pem(), log, stop, thread: Some(thread) })
    }

    /// Every request it received, whole (up to what it keeps).
    pub(crate) fn requests(&self) -> Vec<Vec<u8>> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// One connection: one request read, logged and echoed, then closed.
fn serve(c: TcpStream, cfg: Arc<rustls::ServerConfig>, log: &Mutex<Vec<Vec<u8>>>) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.set_write_timeout(Some(Duration::from_secs(5)))?;
    let conn = rustls::ServerConnection::new(cfg).map_err(std::io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, c);
    let req = read_request(&mut s)?;
    if let Ok(mut l) = log.lock() {
        if l.iter().map(Vec::len).sum::<usize>() < KEEP_ALL {
            l.push(req.clone());
        }
    }
    s.write_all(&reply(&req))?;
    s.conn.send_close_notify();
    s.flush()
}

/// A head and its body (Content-Length, or chunked up to the last chunk).
fn read_request(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut req = vec![];
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if req.len() > KEEP {
            return Ok(req);
        }
        match s.read(&mut b)? {
            0 => return Ok(req),
            n => req.extend_from_slice(&b[..n]),
        }
    };
    let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
    let len: Option<usize> =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    let chunked = head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let done = |r: &[u8]| match len {
        Some(n) => r.len() >= head_end + n.min(KEEP),
        None if chunked => r[head_end..].windows(5).any(|w| w == b"0\r\n\r\n"),
        None => true,
    };
    while !done(&req) && req.len() < head_end + KEEP {
        match s.read(&mut b) {
            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
            _ => break,
        }
    }
    Ok(req)
}

/// The request, sent back the way its path asks.
fn reply(req: &[u8]) -> Vec<u8> {
    let line_end = req.iter().position(|b| *b == b'\n').unwrap_or(req.len());
    let line = String::from_utf8_lossy(&req[..line_end]).into_owned();
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let head_end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(req.len());
    // Every header value on one line, for an echo in a response header.
    let headers: String = String::from_utf8_lossy(&req[line_end.min(head_end)..head_end])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let mut r = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n".to_vec();
    if path.starts_with("/gzip") {
        let mut z = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
        let _ = z.write_all(req);
        let z = z.finish().unwrap_or_default();
        r.extend_from_slice(format!("Content-Encoding: gzip\r\nContent-Length: {}\r\n\r\n", z.len()).as_bytes());
        r.extend_from_slice(&z);
    } else if path.starts_with("/chunked") {
        r.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        for c in req.chunks(7) {
            r.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            r.extend_from_slice(c);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"0\r\n\r\n");
    } else if path.starts_with("/header") {
        r.extend_from_slice(format!("X-Echo: {headers}\r\nContent-Length: 3\r\n\r\nok\n").as_bytes());
    } else {
        r.extend_from_slice(format!("Content-Length: {}\r\n\r\n", req.len()).as_bytes());
        r.extend_from_slice(req);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_echoes_every_way_it_is_asked() {
        let req = b"GET /chunked HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer k\r\n\r\n";
        let r = reply(req);
        assert!(String::from_utf8_lossy(&r).contains("Transfer-Encoding: chunked"));
        let r = String::from_utf8(reply(&req.replace_path("/header"))).unwrap();
        assert!(r.contains("X-Echo: Host: b; Authorization: Bearer k\r\n"), "{r}");
        let r = reply(&req.replace_path("/gzip"));
        let body = &r[r.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
        let mut out = vec![];
        flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
        assert!(out.starts_with(b"GET /gzip HTTP/1.1"));
        // A chunked request is read to its last chunk.
        let body = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(read_request(&mut &body[..]).unwrap(), body.to_vec());
    }

    trait Path {
        fn replace_path(&self, p: &str) -> Vec<u8>;
    }
    impl Path for [u8] {
        fn replace_path(&self, p: &str) -> Vec<u8> {
            String::from_utf8_lossy(self).replacen("/chunked", p, 1).into_bytes()
        }
    }
    impl<const N: usize> Path for [u8; N] {
        fn replace_path(&self, p: &str) -> Vec<u8> {
            self[..].replace_path(p)
        }
    }
}
