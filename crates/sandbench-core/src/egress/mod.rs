//! Network egress: the only way out of a sandbox whose network limit is
//! `allow=HOST[:PORT],...` is an HTTP proxy sandbench runs on the host for
//! that one run. Inside, the program finds it at `127.0.0.1:3128` (and the
//! usual proxy variables point there); how a connection gets from that
//! address to the host proxy is each tier's business: the process tier
//! hands the host a listening socket made inside its empty network
//! namespace, the container loader and the guest relay carry connections
//! over a channel the program cannot reach (`mux`). Nothing else leaves:
//! no DNS server, no route, no other socket.
//!
//! - `policy`: the limit, matching, the address check.
//! - `resolve`: names resolved by the proxy alone (hosts map, system resolver), pinned per run.
//! - `route`: each connection's request checked and sent to `proxy` or `intercept`.
//! - `proxy`: HTTP absolute-form and CONNECT (SNI checked), bounded.
//! - `framing`: HTTP/1.1 framing read strictly and written canonically (no smuggling).
//! - `mux`: many connections over one relayed channel.
//! - [`secrets`]: secrets the program uses but never holds; `intercept`
//!   substitutes them at the proxy (TLS answered with `ca`'s per-run CA)
//!   and `scrub` takes their values out of whatever comes back.
//!
//! Every decision is a run event ([`NetRecord`]), folded into the report's
//! `network` list; a denial is also a `network` violation (worded by the judge).

pub(crate) mod ca;
pub(crate) mod framing;
pub(crate) mod intercept;
pub(crate) mod mux;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod resolve;
pub(crate) mod route;
pub(crate) mod scrub;
pub mod secrets;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::json;
use tokio_util::task::TaskTracker;

pub use policy::{AllowEntry, Host, Network};
pub use resolve::Hosts;

// The run records live with the other run events (the bottom layer: the
// report and the judge read them without the proxy).
use crate::event::RunContext;
pub use crate::event::{Decision, NetRecord};

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

/// What the operator's config gives every run's proxy: the names it
/// resolves without DNS, and extra CAs it trusts when it re-originates TLS
/// to a secret's host (`[network] upstream_ca`).
#[derive(Debug, Clone, Default)]
pub struct Operator {
    pub hosts: Hosts,
    /// PEM text of each extra CA.
    pub upstream_ca: Vec<String>,
}

impl Operator {
    pub fn from_config(c: &crate::config::Config) -> Operator {
        Operator { hosts: c.network.hosts.clone(), upstream_ca: c.network.upstream_ca_pem.iter().cloned().collect() }
    }
}

/// `text` with every spelling of `value` in the scrubber's table (raw,
/// percent, base64, hex, JSON/JS and HTML escapes, quoted-printable)
/// replaced by `with`: for a value sandbench must not show or write that
/// is not a run's secret (the host's API key a gauntlet sample may print).
pub fn redact(text: &str, value: &str, with: &str) -> String {
    if value.is_empty() {
        return text.to_string();
    }
    let n = scrub::Needles::values(&[(value.as_bytes(), with.as_bytes().to_vec())]);
    n.replace_str(text, &mut [0]).unwrap_or_else(|| text.to_string())
}

/// Variables that make the usual clients trust a bundle: OpenSSL (Python's
/// `ssl`, `urllib`), `requests`, curl, pip, Node.
pub const TRUST_VARS: [&str; 5] =
    ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"];

/// Where the container loader and the guest agent write a run's CA bundle
/// (the image's system bundle and the run CA), as the program's uid, in its
/// fresh `/tmp`: their root file systems are read-only images. (The process
/// tier adds the run CA to its sandbox's own copy of the system bundle.)
pub const TMP_CA_BUNDLE: &str = "/tmp/sandbench-ca-bundle.pem";

/// Where a sandbox's system CA bundle may be (the first that exists is
/// the one the run's CA is added to).
pub const SYSTEM_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

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
    /// The run's secrets, when it has any ([`intercept`]).
    secrets: Option<Arc<intercept::RunSecrets>>,
    tasks: TaskTracker,
}

impl Egress {
    /// The proxy for a run (`None` for `network none`), with its secrets'
    /// placeholders and CA made. Its connections end when the run stops or
    /// [`Egress::finish`] is called.
    pub fn start(spec: &crate::spec::RunSpec, op: &Operator, ctx: &RunContext) -> anyhow::Result<Option<Egress>> {
        let network = &spec.limits.network;
        if network.is_none() {
            anyhow::ensure!(spec.secrets.is_empty(), "secrets need a network allow list naming their hosts");
            return Ok(None);
        }
        let secrets = if spec.secrets.is_empty() {
            None
        } else {
            spec.secrets.check(network, &spec.env).map_err(anyhow::Error::msg)?;
            let mut roots = vec![];
            for pem in op.upstream_ca.iter().chain(&spec.upstream_ca) {
                roots.extend(ca::certs_from_pem(pem.as_bytes()).map_err(|e| anyhow::anyhow!("an upstream CA: {e}"))?);
            }
            Some(Arc::new(intercept::RunSecrets::new(&spec.secrets, &roots).map_err(anyhow::Error::msg)?))
        };
        let stop = ctx.stop.child_token();
        let resolver = resolve::Resolver::new(op.hosts.merged(&spec.hosts));
        let shared = proxy::Shared::new(network.clone(), resolver, ctx.clone(), stop.clone());
        Ok(Some(Egress {
            server: Server { shared: Arc::new(shared), secrets, tasks: TaskTracker::new() },
            _guard: Arc::new(stop.drop_guard()),
        }))
    }

    /// The run CA's certificate (PEM), when a secret of the run goes over
    /// TLS: the tier adds it to the sandbox's trust bundle at `bundle`.
    pub fn ca_pem(&self) -> Option<String> {
        self.server.secrets.as_ref().and_then(|s| s.ca_pem())
    }

    /// What the program's environment gets: the proxy variables, each
    /// secret's placeholder under its name, and (with a run CA) the trust
    /// variables pointing at `bundle`. A variable the user set (`user`)
    /// keeps the user's value; a secret's name never collides with one
    /// (refused before the run).
    pub fn sandbox_env(
        &self,
        user: &std::collections::BTreeMap<String, String>,
        bundle: &str,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = proxy_env();
        if let Some(s) = &self.server.secrets {
            env.extend(s.env());
            if s.ca_pem().is_some() {
                env.extend(TRUST_VARS.iter().map(|k| (k.to_string(), bundle.to_string())));
            }
        }
        env.retain(|(k, _)| !user.contains_key(k));
        env
    }

    pub fn server(&self) -> Server {
        self.server.clone()
    }

    /// A proxy for `network` and `hosts` alone (tests of the proxy itself).
    #[cfg(test)]
    pub(crate) fn for_test(network: &str, hosts: Hosts, ctx: &RunContext) -> Egress {
        let mut spec = crate::spec::RunSpec::new(crate::spec::Language::Sh, "");
        spec.limits.network = network.parse().expect("a network limit");
        spec.hosts = hosts;
        Egress::start(&spec, &Operator::default(), ctx).expect("the proxy starts").expect("an allow list")
    }

    /// End every connection, wait until they are gone (their last records
    /// sent), and say what happened, for the report's `details.network`.
    pub async fn finish(self) -> serde_json::Value {
        let s = &self.server;
        s.shared.stop.cancel();
        s.tasks.close();
        s.tasks.wait().await;
        let t = s.shared.totals.lock().map(|t| *t).unwrap_or_default();
        let mut v = json!({
            "policy": s.shared.network.to_string(),
            "proxy": format!("sandbench's egress proxy on the host, at {} inside the sandbox", proxy_url()),
            "allowed": t.allowed,
            "denied": t.denied,
            "bytes_up": t.bytes_up,
            "bytes_down": t.bytes_down,
            "dns_lookups": s.shared.resolver.lookups(),
        });
        if let Some(secrets) = &s.secrets {
            v["secrets"] = secrets.report();
        }
        v
    }
}

impl Server {
    /// Serve one client connection (any transport) in the background.
    pub fn serve<S>(&self, client: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.tasks.spawn(route::serve(self.shared.clone(), self.secrets.clone(), client));
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
