//! Network egress: the only way out of a sandbox whose network limit is
//! `allow=HOST[:PORT],...` is an HTTP proxy sandbench runs on the host for
//! that one run. Inside, the program finds it at `127.0.0.1:3128` (and the
//! usual proxy variables point there); how a connection gets from that
//! address to the host proxy is each tier's business: the process tier
//! hands the host a listening socket made inside its empty network
//! namespace, the container loader and the guest relay carry connections
//! over a channel the program cannot reach ([`mux`]). Nothing else leaves:
//! no DNS server, no route, no other socket.
//!
//! - [`policy`]: the limit, matching, the address check.
//! - [`resolve`]: names resolved by the proxy alone (hosts map, system resolver), pinned per run.
//! - [`proxy`]: HTTP absolute-form and CONNECT (SNI checked), bounded.
//! - [`framing`]: HTTP/1.1 framing read strictly and written canonically (no smuggling).
//! - [`mux`]: many connections over one relayed channel.
//!
//! Every decision is a run event ([`NetRecord`]), folded into the report's
//! `network` list; a denial is also a `network` violation (worded by the judge).

pub mod framing;
pub mod mux;
pub mod policy;
pub mod proxy;
pub mod resolve;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::task::TaskTracker;

pub use policy::{AllowEntry, Host, Network};
pub use resolve::Hosts;

use crate::tier::RunContext;

/// Where the proxy is inside every sandbox that has one.
pub const SANDBOX_PORT: u16 = 3128;

/// The proxy as inside programs see it.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{SANDBOX_PORT}")
}

/// Variables well-behaved clients (pip, curl, urllib, requests, npm) read.
/// Enforcement does not depend on them: a program that ignores them has no
/// other way out.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = proxy_url();
    ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"].iter().map(|k| (k.to_string(), url.clone())).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allowed,
    Denied,
}

impl Decision {
    pub fn name(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
        }
    }
}

/// One connection the proxy decided on. Sent when decided (`open` while an
/// allowed connection goes on) and again when it ends, with its bytes.
/// Everything in it the program chose (host, method) is already inert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetRecord {
    /// The connection's number in its run.
    pub id: u64,
    /// When it was decided, ms since the run started.
    pub at_ms: f64,
    pub decision: Decision,
    /// CONNECT, GET, ... ("?" when the request was unreadable).
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The address the proxy connected to.
    pub address: Option<String>,
    /// Why denied, or where it went.
    pub detail: String,
    /// Bytes from the program, and to it.
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: f64,
    /// Still going (allowed, not yet closed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
}

impl NetRecord {
    /// "denied CONNECT evil.test:443 — not in the allow list".
    pub fn line(&self) -> String {
        let what = format!("{} {} {}:{}", self.decision.name(), self.method, self.host, self.port);
        match (self.decision, self.open) {
            (Decision::Allowed, true) => format!("{what} — {}", self.detail),
            (Decision::Allowed, false) => format!(
                "closed {} {}:{} — {} up, {} down, {}",
                self.method,
                self.host,
                self.port,
                crate::units::size(self.bytes_up),
                crate::units::size(self.bytes_down),
                crate::units::duration_ms(self.duration_ms)
            ),
            (Decision::Denied, _) => format!("{what} — {}", self.detail),
        }
    }
}

/// One run's egress proxy. Clones share it; when the last is dropped
/// (a tier's error path) every connection ends, so nothing of the run
/// outlives it. [`Egress::finish`] ends it in order and says what happened.
#[derive(Clone)]
pub struct Egress {
    server: Server,
    _guard: Arc<tokio_util::sync::DropGuard>,
}

/// What transports hold: serve connections of the run. It does not keep
/// the proxy alive.
#[derive(Clone)]
pub struct Server {
    shared: Arc<proxy::Shared>,
    tasks: TaskTracker,
}

impl Egress {
    /// The proxy for a run with this limit (`None` for `network none`).
    /// Its connections end when the run stops or [`Egress::finish`] is called.
    pub fn start(network: &Network, hosts: &Hosts, ctx: &RunContext) -> Option<Egress> {
        if network.is_none() {
            return None;
        }
        let stop = ctx.stop.child_token();
        let shared =
            proxy::Shared::new(network.clone(), resolve::Resolver::new(hosts.clone()), ctx.clone(), stop.clone());
        Some(Egress {
            server: Server { shared: Arc::new(shared), tasks: TaskTracker::new() },
            _guard: Arc::new(stop.drop_guard()),
        })
    }

    pub fn server(&self) -> Server {
        self.server.clone()
    }

    /// End every connection, wait until they are gone (their last records
    /// sent), and say what happened, for the report's `details.network`.
    pub async fn finish(self) -> serde_json::Value {
        let s = &self.server;
        s.shared.stop.cancel();
        s.tasks.close();
        s.tasks.wait().await;
        let t = s.shared.totals.lock().map(|t| *t).unwrap_or_default();
        json!({
            "policy": s.shared.network.to_string(),
            "proxy": format!("sandbench's egress proxy on the host, at {} inside the sandbox", proxy_url()),
            "allowed": t.allowed,
            "denied": t.denied,
            "bytes_up": t.bytes_up,
            "bytes_down": t.bytes_down,
            "dns_lookups": s.shared.resolver.lookups(),
        })
    }
}

impl Server {
    /// Serve one client connection (any transport) in the background.
    pub fn serve<S>(&self, client: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let sh = self.shared.clone();
        self.tasks.spawn(proxy::serve(sh, client));
    }

    /// Accept and serve connections from `listener` until the run stops.
    pub fn serve_listener(&self, listener: tokio::net::TcpListener) {
        let me = self.clone();
        self.track(async move {
            loop {
                match listener.accept().await {
                    Ok((s, _)) => {
                        let _ = s.set_nodelay(true);
                        me.serve(s)
                    }
                    Err(e) => {
                        tracing::debug!("egress listener: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            }
        });
    }

    /// Run `fut` (a tier's transport work) until it ends or the run stops;
    /// `finish` waits for it.
    pub fn track<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let stop = self.shared.stop.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}
