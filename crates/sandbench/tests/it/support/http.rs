//! A minimal HTTP/1.1 server for tests: loopback only, one request per
//! connection (`Connection: close`), Content-Length request bodies, replies
//! either whole or streamed with chunked transfer encoding — enough to speak
//! E2B's and Anthropic's HTTP shapes to sandbench's reqwest client.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path with the query string.
    pub target: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let n = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str())
    }
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.target.split_once('?')?.1;
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == key).then(|| percent_decode(v))
        })
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub enum Chunk {
    Data(Vec<u8>),
    /// Close the connection mid-body (a dropped stream).
    Abort,
}

pub enum Reply {
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Chunked body; ends when the sender is dropped (or at `Chunk::Abort`).
    Stream {
        status: u16,
        headers: Vec<(String, String)>,
        chunks: mpsc::Receiver<Chunk>,
    },
    /// Close without answering.
    Hangup,
}

impl Reply {
    pub fn json(status: u16, v: serde_json::Value) -> Reply {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&v).unwrap(),
        }
    }
    pub fn empty(status: u16) -> Reply {
        Reply::Full { status, headers: vec![], body: vec![] }
    }
    pub fn with_header(self, k: &str, v: &str) -> Reply {
        match self {
            Reply::Full { status, mut headers, body } => {
                headers.push((k.into(), v.into()));
                Reply::Full { status, headers, body }
            }
            Reply::Stream { status, mut headers, chunks } => {
                headers.push((k.into(), v.into()));
                Reply::Stream { status, headers, chunks }
            }
            Reply::Hangup => Reply::Hangup,
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Serve `handler` on 127.0.0.1:0; returns the address.
pub async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let Some(req) = read_request(&mut sock).await else {
                    return;
                };
                let reply = handler(req).await;
                let _ = write_reply(&mut sock, reply).await;
            });
        }
    });
    addr
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    Some(Request { method, target, headers, body })
}

async fn write_reply(sock: &mut tokio::net::TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Hangup => sock.shutdown().await,
        Reply::Full { status, headers, body } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nconnection: close\r\ncontent-length: {}\r\n",
                reason(status),
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(&body).await?;
            sock.flush().await
        }
        Reply::Stream { status, headers, mut chunks } => {
            let mut head =
                format!("HTTP/1.1 {status} {}\r\nconnection: close\r\ntransfer-encoding: chunked\r\n", reason(status));
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            sock.write_all(head.as_bytes()).await?;
            sock.flush().await?;
            while let Some(c) = chunks.recv().await {
                match c {
                    Chunk::Data(d) if d.is_empty() => {}
                    Chunk::Data(d) => {
                        sock.write_all(format!("{:x}\r\n", d.len()).as_bytes()).await?;
                        sock.write_all(&d).await?;
                        sock.write_all(b"\r\n").await?;
                        sock.flush().await?;
                    }
                    Chunk::Abort => {
                        // RST instead of a clean end of the chunked body.
                        // Dropping the socket mid-body: no terminating chunk.
                        return Ok(());
                    }
                }
            }
            sock.write_all(b"0\r\n\r\n").await?;
            sock.flush().await
        }
    }
}
