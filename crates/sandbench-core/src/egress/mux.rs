//! Many TCP connections over one byte channel: how a container's loader and
//! a guest's relay (`guest/egress_relay.py`) bring the connections a program
//! opens to `127.0.0.1:3128` inside its sandbox out to the host proxy, over a
//! channel the program cannot reach (the container's attached stdio, a
//! virtio-serial port). The far side is sandbench's code but sits next to
//! the program, so everything it sends is bounded and checked.
//!
//! A message is `op u8 | id u32 BE | data`:
//! `O` a connection opened (far → host), `D` bytes, `E` no more bytes from
//! the sender (half close), `R` the connection is gone, `W` the receiver
//! took `u32 BE` more bytes of `D` (credit). Each side sends at most
//! [`WINDOW`] bytes a connection ahead of the credit it got, so one slow
//! connection never stalls the others or fills anyone's memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};

use super::Server;

pub(crate) const WINDOW: usize = 256 << 10;
/// Largest `D` payload either side sends.
pub(crate) const MAX_DATA: usize = 16 << 10;
/// Connections the far side may have open at once through one channel.
pub(crate) const MAX_CONNS: usize = 64;

pub(crate) const OPEN: u8 = b'O';
pub(crate) const DATA: u8 = b'D';
pub(crate) const EOF: u8 = b'E';
pub(crate) const RESET: u8 = b'R';
pub(crate) const CREDIT: u8 = b'W';

pub(crate) fn message(op: u8, id: u32, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(5 + data.len());
    m.push(op);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(data);
    m
}

enum Chunk {
    Data(Vec<u8>),
    Eof,
}

struct Conn {
    to_proxy: mpsc::UnboundedSender<Chunk>,
    /// Bytes of `D` received and not yet written into the proxy.
    unread: Arc<AtomicUsize>,
    /// What this side may still send on the connection.
    credit: Arc<Semaphore>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The host end of one channel. Feed it the far side's messages with
/// [`Mux::incoming`]; what it sends comes out of the receiver `new` returns.
pub(crate) struct Mux {
    egress: Server,
    out: mpsc::UnboundedSender<Vec<u8>>,
    conns: HashMap<u32, Conn>,
    /// Messages that broke the protocol (ignored, counted for the report).
    pub violations: u64,
}

impl Mux {
    pub(crate) fn new(egress: Server) -> (Mux, mpsc::UnboundedReceiver<Vec<u8>>) {
        // Unbounded, and still bounded: every data message needs credit the
        // far side gave (a window per connection), every credit a data
        // message it sent. A bounded queue could deadlock the transport: the
        // loop that feeds `incoming` is the one that drains the far side.
        let (out, rx) = mpsc::unbounded_channel();
        (Mux { egress, out, conns: HashMap::new(), violations: 0 }, rx)
    }

    /// One message from the far side.
    pub(crate) async fn incoming(&mut self, msg: &[u8]) {
        if msg.len() < 5 || msg.len() > 5 + MAX_DATA {
            self.violations += 1;
            return;
        }
        let op = msg[0];
        let id = u32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]);
        let data = &msg[5..];
        match op {
            OPEN => {
                if self.conns.contains_key(&id) || self.conns.len() >= MAX_CONNS {
                    self.violations += u64::from(self.conns.contains_key(&id));
                    let _ = self.out.send(message(RESET, id, &[]));
                    return;
                }
                self.open(id);
            }
            DATA => {
                let Some(c) = self.conns.get(&id) else { return };
                let unread = c.unread.fetch_add(data.len(), Ordering::AcqRel) + data.len();
                if unread > WINDOW {
                    // Past the credit it was given: the far side is broken.
                    self.violations += 1;
                    self.reset(id).await;
                    return;
                }
                let _ = c.to_proxy.send(Chunk::Data(data.to_vec()));
            }
            EOF => {
                if let Some(c) = self.conns.get(&id) {
                    let _ = c.to_proxy.send(Chunk::Eof);
                }
            }
            RESET => {
                self.conns.remove(&id);
            }
            CREDIT => {
                let Some(c) = self.conns.get(&id) else { return };
                let n = data.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize).unwrap_or(0);
                // Never more credit than one window in all.
                let room = WINDOW.saturating_sub(c.credit.available_permits());
                c.credit.add_permits(n.min(room));
            }
            _ => self.violations += 1,
        }
    }

    async fn reset(&mut self, id: u32) {
        self.conns.remove(&id);
        let _ = self.out.send(message(RESET, id, &[]));
    }

    /// Drop every connection (the run is over).
    pub(crate) fn close_all(&mut self) {
        self.conns.clear();
    }

    fn open(&mut self, id: u32) {
        let (proxy_side, mux_side) = tokio::io::duplex(64 << 10);
        self.egress.serve(proxy_side);
        let (mut rd, mut wr) = tokio::io::split(mux_side);
        let (tx, mut rx) = mpsc::unbounded_channel::<Chunk>();
        let unread = Arc::new(AtomicUsize::new(0));
        let credit = Arc::new(Semaphore::new(WINDOW));
        let out = self.out.clone();
        let unread2 = unread.clone();
        // Far side → proxy: write what arrived, then give the credit back.
        let writer = tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                match chunk {
                    Chunk::Data(d) => {
                        if wr.write_all(&d).await.is_err() {
                            let _ = out.send(message(RESET, id, &[]));
                            return;
                        }
                        unread2.fetch_sub(d.len(), Ordering::AcqRel);
                        let _ = out.send(message(CREDIT, id, &(d.len() as u32).to_be_bytes()));
                    }
                    Chunk::Eof => {
                        let _ = wr.shutdown().await;
                    }
                }
            }
        });
        let out = self.out.clone();
        let credit2 = credit.clone();
        // Proxy → far side, within the credit.
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_DATA];
            loop {
                let Ok(permit) = credit2.acquire().await else { return };
                permit.forget();
                // One byte of credit is held; take what else is there, up to a chunk.
                let extra = credit2.available_permits().min(MAX_DATA - 1);
                if let Ok(p) = credit2.try_acquire_many(extra as u32) {
                    p.forget();
                }
                let want = extra + 1;
                match rd.read(&mut buf[..want]).await {
                    Ok(n) if n > 0 => {
                        credit2.add_permits(want - n);
                        if out.send(message(DATA, id, &buf[..n])).is_err() {
                            return;
                        }
                    }
                    _ => {
                        let _ = out.send(message(EOF, id, &[]));
                        return;
                    }
                }
            }
        });
        self.conns.insert(id, Conn { to_proxy: tx, unread, credit, tasks: [writer, reader] });
    }
}

/// Carry a channel whose messages are each prefixed with their length (u32
/// BE), the framing of the guest's `sandbench.net` port, until it closes or
/// the run stops.
pub(crate) fn carry_framed<S>(server: Server, chan: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(chan);
    let (mut mux, mut out) = Mux::new(server.clone());
    server.track(async move {
        while let Some(m) = out.recv().await {
            let mut f = (m.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(&m);
            if wr.write_all(&f).await.is_err() {
                return;
            }
        }
    });
    server.track(async move {
        let mut buf = Vec::with_capacity(64 << 10);
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = match rd.read(&mut chunk).await {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            buf.extend_from_slice(&chunk[..n]);
            let mut at = 0;
            while buf.len() - at >= 4 {
                let len = u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
                if len > 5 + MAX_DATA {
                    // Not the relay's framing: stop trusting the channel.
                    tracing::warn!("egress channel: a message of {len} bytes; closing the channel");
                    mux.close_all();
                    return;
                }
                if buf.len() - at < 4 + len {
                    break;
                }
                mux.incoming(&buf[at + 4..at + 4 + len]).await;
                at += 4 + len;
            }
            buf.drain(..at);
        }
        mux.close_all();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::{Egress, Hosts};
    use crate::event::RunContext;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn a_far_connection_reaches_the_proxy_and_gets_its_answer() {
        let (tx, mut events) = mpsc::channel(64);
        let ctx = RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() };
        let eg = Egress::for_test("allow=pypi.test", Hosts::default(), &ctx);
        let (mut mux, mut out) = Mux::new(eg.server());
        mux.incoming(&message(OPEN, 7, &[])).await;
        mux.incoming(&message(DATA, 7, b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")).await;
        let mut answer = vec![];
        while let Some(m) = out.recv().await {
            assert_eq!(&m[1..5], &7u32.to_be_bytes());
            match m[0] {
                DATA => answer.extend_from_slice(&m[5..]),
                EOF => break,
                CREDIT | RESET => {}
                o => panic!("unexpected op {o}"),
            }
        }
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 403"), "{text}");
        // A broken far side: data past its window resets the connection.
        mux.incoming(&message(OPEN, 8, &[])).await;
        for _ in 0..(WINDOW / MAX_DATA + 2) {
            mux.incoming(&message(DATA, 8, &vec![b'x'; MAX_DATA])).await;
        }
        assert!(mux.violations >= 1);
        mux.incoming(&[1, 2]).await;
        mux.close_all();
        drop(mux);
        let summary = eg.finish().await;
        assert!(summary["denied"].as_u64().unwrap() >= 1, "{summary}");
        let mut saw = false;
        while let Ok(ev) = events.try_recv() {
            if let crate::event::EventKind::Network(r) = ev.kind {
                saw |= r.host == "evil.test";
            }
        }
        assert!(saw);
    }
}
