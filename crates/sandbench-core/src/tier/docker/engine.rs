//! The connection to the Docker Engine: `DOCKER_HOST` (unix, tcp, ssh) like
//! every Docker tool, API version negotiated down to what the daemon speaks
//! (Debian's 20.10 engine speaks 1.41), and errors a user can act on.

use std::collections::BTreeSet;
use std::time::Duration;

use bollard::Docker;

/// Requests that take longer than this are cut; long waits (a program
/// running) use streams, which this does not limit.
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How long connecting and the first request may take before the daemon
/// counts as unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// A connected, version-negotiated engine and what it said about itself.
#[derive(Clone)]
pub struct Engine {
    pub docker: Docker,
    /// The address, as the user would write it in DOCKER_HOST.
    pub host: String,
    /// API version in use after negotiation, e.g. "1.41".
    pub api_version: String,
    /// The daemon's own version, e.g. "20.10.24+dfsg1".
    pub server_version: String,
    /// OCI runtimes the daemon knows (runc, runsc, ...).
    pub runtimes: BTreeSet<String>,
    /// The daemon runs on this machine (unix socket): its processes and
    /// cgroups are visible here.
    pub local: bool,
}

/// Where the engine is: `DOCKER_HOST` (read once into `config::HostEnv`),
/// or the local socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    /// `DOCKER_TLS_VERIFY` is set (not supported: refused with a hint).
    pub tls_verify: bool,
}

impl Endpoint {
    pub fn of(env: &crate::config::HostEnv) -> Endpoint {
        Endpoint {
            host: env.docker_host.clone().unwrap_or_else(|| DEFAULT_HOST.to_string()),
            tls_verify: env.docker_tls_verify,
        }
    }
}

/// One line that says how to get a daemon to answer.
pub(crate) fn start_daemon_hint(host: &str) -> String {
    if host.starts_with("unix://") {
        "start the daemon (systemctl start docker, or as root: dockerd --bridge=none --iptables=false &), or point DOCKER_HOST at a running one".into()
    } else {
        format!(
            "check that the engine at {host} is running and reachable, or unset DOCKER_HOST to use the local socket"
        )
    }
}

fn client_for(host: &str, tls_verify: bool) -> anyhow::Result<Docker> {
    let version = bollard::API_DEFAULT_VERSION;
    let docker = if let Some(path) = host.strip_prefix("unix://") {
        Docker::connect_with_unix(path, REQUEST_TIMEOUT_SECS, version)
    } else if host.starts_with("tcp://") || host.starts_with("http://") {
        if tls_verify {
            anyhow::bail!(
                "DOCKER_TLS_VERIFY is set but this sandbench build has no TLS support for the Docker API; use an ssh:// DOCKER_HOST instead"
            );
        }
        Docker::connect_with_http(host, REQUEST_TIMEOUT_SECS, version)
    } else if host.starts_with("ssh://") {
        // bollard's ssh transport runs the system `ssh` (multiplexed), so keys,
        // agents and ~/.ssh/config work as they do for the docker CLI.
        Docker::connect_with_ssh(host, REQUEST_TIMEOUT_SECS, version)
    } else {
        anyhow::bail!("DOCKER_HOST={host} is not supported: use unix://PATH, tcp://HOST:PORT or ssh://[USER@]HOST")
    };
    docker.map_err(|e| anyhow::anyhow!("cannot use DOCKER_HOST={host}: {e}"))
}

/// Why a request to the daemon failed, in one line without bollard's
/// internals: "connection refused", "no such file or directory", ...
pub(crate) fn cause(e: &bollard::errors::Error) -> String {
    // The engine ends its messages with `\r\n`: one inert line, never a
    // raw `^M` in a report or on the terminal.
    crate::sanitize::inert_message(&raw_cause(e), 600)
}

fn raw_cause(e: &bollard::errors::Error) -> String {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError { status_code, message } => format!("{} (HTTP {status_code})", message.trim()),
        E::RequestTimeoutError => "no answer in time".into(),
        other => {
            // Walk to the innermost source: io errors say it best.
            let mut inner: &dyn std::error::Error = other;
            while let Some(s) = inner.source() {
                inner = s;
            }
            let text = inner.to_string();
            if text.is_empty() {
                other.to_string()
            } else {
                text
            }
        }
    }
}

/// How an error starts when the engine, not the run, failed: a front end
/// and a test can tell it from a verdict on the program.
pub(crate) const ENGINE_GONE: &str = "the Docker engine stopped answering";

/// True when the engine never answered the request (the connection was
/// refused, dropped or timed out), as opposed to answering with an error.
pub(crate) fn is_unreachable(e: &bollard::errors::Error) -> bool {
    !matches!(
        e,
        bollard::errors::Error::DockerResponseServerError { .. }
            | bollard::errors::Error::DockerContainerWaitError { .. }
    )
}

/// True for "404 no such image/container".
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

impl Engine {
    /// Connect to `DOCKER_HOST` (or the local socket), negotiate the API
    /// version and learn the runtimes. One clear line when it fails.
    pub async fn connect(at: &Endpoint) -> anyhow::Result<Engine> {
        let host = at.host.clone();
        if let Some(path) = host.strip_prefix("unix://") {
            if !std::path::Path::new(path).exists() {
                anyhow::bail!(
                    "cannot reach the Docker daemon at {host} (no socket at {path}): {}",
                    start_daemon_hint(&host)
                );
            }
        }
        let docker = client_for(&host, at.tls_verify)?;
        let unreachable = |why: String| {
            anyhow::anyhow!("cannot reach the Docker daemon at {host} ({why}): {}", start_daemon_hint(&host))
        };
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
            Err(_) => return Err(unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))),
            Ok(Err(e)) => return Err(unreachable(cause(&e))),
            Ok(Ok(d)) => d,
        };
        let (version, info) =
            match tokio::time::timeout(CONNECT_TIMEOUT, async { tokio::try_join!(docker.version(), docker.info()) })
                .await
            {
                Err(_) => return Err(unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))),
                Ok(Err(e)) => return Err(unreachable(cause(&e))),
                Ok(Ok(v)) => v,
            };
        let cv = docker.client_version();
        let runtimes = info.runtimes.map(|r| r.into_keys().collect()).unwrap_or_default();
        Ok(Engine {
            local: host.starts_with("unix://"),
            docker,
            host,
            api_version: format!("{}.{}", cv.major_version, cv.minor_version),
            server_version: version.version.unwrap_or_else(|| "?".into()),
            runtimes,
        })
    }

    /// Whether the engine answers a ping within `within`; else why not.
    pub(crate) async fn answers(&self, within: Duration) -> Result<(), String> {
        match tokio::time::timeout(within, self.docker.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(cause(&e)),
            Err(_) => Err(format!("no answer within {} s", within.as_secs())),
        }
    }

    /// Is the image there? Ok(false) when the engine says no such image.
    pub async fn has_image(&self, image: &str) -> anyhow::Result<bool> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(anyhow::anyhow!("cannot look up image {image} at {}: {}", self.host, cause(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_hosts_say_what_works() {
        let e = client_for("ftp://x", false).err().unwrap().to_string();
        assert!(e.contains("unix://") && e.contains("ssh://"), "{e}");
        assert!(client_for("tcp://127.0.0.1:1", false).is_ok());
        assert!(client_for("ssh://user@host", false).is_ok());
    }

    #[tokio::test]
    async fn dead_socket_gives_one_line() {
        // A socket file nobody listens on any more.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docker.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let docker = client_for(&format!("unix://{}", path.display()), false).unwrap();
        let e = docker.negotiate_version().await.err().unwrap();
        let c = cause(&e);
        assert!(c.contains("refused"), "{c}");
        assert!(!c.contains('\n'));
    }

    #[test]
    fn the_engines_line_ends_are_not_shown_raw() {
        let e = bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            message: "No such container: abc\r\n".into(),
        };
        assert_eq!(cause(&e), "No such container: abc (HTTP 404)");
    }
}
