//! User configuration: `$SANDBENCH_CONFIG`, else `$XDG_CONFIG_HOME/sandbench/config.toml`.

use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::spec::Limits;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub default_tier: String,
    pub theme: String,
    pub limits: Limits,
    pub process: ProcessConfig,
    pub docker: DockerConfig,
    /// Where the workbench's samples picker looks first (holding benign/ and hostile/).
    pub samples_dir: Option<PathBuf>,
    pub e2b: E2bConfig,
    pub agent: AgentConfig,
    pub microvm: MicrovmConfig,
    /// Which tiers the workbench warms (spares, pools, guests) ahead of runs.
    pub prewarm: Prewarm,
    /// The egress proxy's resolver (`[network] hosts`).
    pub network: NetworkConfig,
    /// What `sandbench mcp` offers its clients (flags override each key).
    pub mcp: McpConfig,
    /// Secrets the operator declares (`[secrets.NAME]`): where each value
    /// comes from, the hosts it may go to, where in a request. A run gets
    /// one only when it names it (`--secret NAME`, an MCP client's
    /// `secrets`), never by default.
    pub secrets: std::collections::BTreeMap<String, crate::egress::secrets::SecretConfig>,
    /// Keys and endpoints of the remote services, from the environment (not
    /// the file): filled by [`Config::load`], empty in a default config.
    #[serde(skip)]
    pub env: RemoteEnv,
    /// What sandbench takes from its own environment for itself (Docker
    /// endpoint, overrides for tests and CI): filled by [`Config::load`].
    #[serde(skip)]
    pub host: HostEnv,
    /// Where the run log lives: `$SANDBENCH_STATE_DIR`, else the XDG state
    /// dir's `sandbench/`. Set by `load` (not a config key); `None` (the
    /// default, as in tests that build a config) logs no runs.
    #[serde(skip)]
    pub state_dir: Option<PathBuf>,
}

/// What the remote clients take from the environment, under the names the
/// official SDKs read (`e2b` and `anthropic` on PyPI). Read once, here, so
/// that the e2b tier and the agent are handed values, never variable names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteEnv {
    pub e2b_api_key: Option<String>,
    pub e2b_domain: Option<String>,
    /// Deprecated in the SDK but still honoured there, so here too.
    pub e2b_api_url: Option<String>,
    /// Deprecated in the SDK but still honoured there: every envd call goes here.
    pub e2b_sandbox_url: Option<String>,
    /// `E2B_DEBUG=true`: the SDK's local mode (API at http://localhost:3000,
    /// envd at http://localhost:49983).
    pub e2b_debug: bool,
    pub anthropic_api_key: Option<String>,
    pub anthropic_base_url: Option<String>,
}

impl RemoteEnv {
    /// From this process's environment; blank values count as unset.
    pub fn from_process() -> RemoteEnv {
        RemoteEnv::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any lookup (tests pass a map instead of touching the process).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> RemoteEnv {
        let var = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        RemoteEnv {
            e2b_api_key: var("E2B_API_KEY"),
            e2b_domain: var("E2B_DOMAIN"),
            e2b_api_url: var("E2B_API_URL"),
            e2b_sandbox_url: var("E2B_SANDBOX_URL"),
            // The SDK's test: `os.getenv("E2B_DEBUG", "false").lower() == "true"`.
            e2b_debug: var("E2B_DEBUG").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            anthropic_api_key: var("ANTHROPIC_API_KEY"),
            anthropic_base_url: var("ANTHROPIC_BASE_URL"),
        }
    }
}

/// What sandbench takes from its environment besides the remote services'
/// keys, read once by [`Config::load`] and handed down: no tier, agent or
/// workbench code reads a variable itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostEnv {
    /// `DOCKER_HOST`, as the docker CLI reads it (blank: the local socket).
    pub docker_host: Option<String>,
    /// `DOCKER_TLS_VERIFY` set to anything but "" or "0".
    pub docker_tls_verify: bool,
    /// `SANDBENCH_DOCKER_IMAGE`: overrides `[docker] image`.
    pub docker_image: Option<String>,
    /// `SANDBENCH_HELPER`: the binary the process tier starts as its sandbox
    /// helper (default: this executable; tests point it at the built binary).
    pub helper: Option<PathBuf>,
    /// `SANDBENCH_TRY_USER_CGROUP`: an unprivileged user tries a delegated
    /// cgroup subtree anyway.
    pub try_user_cgroup: bool,
    /// `XDG_RUNTIME_DIR`: where an unprivileged sandbench keeps run folders.
    pub runtime_dir: Option<PathBuf>,
    /// `SANDBENCH_SAMPLES`: the samples folder, before any other.
    pub samples_dir: Option<PathBuf>,
    /// `SANDBENCH_REQUIRE_TIERS`: tiers whose unavailability is a failure (CI).
    pub require_tiers: Vec<String>,
}

impl HostEnv {
    pub fn from_process() -> HostEnv {
        HostEnv::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// From any lookup (tests pass a map instead of touching the process).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> HostEnv {
        let var = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        HostEnv {
            docker_host: var("DOCKER_HOST"),
            docker_tls_verify: var("DOCKER_TLS_VERIFY").is_some_and(|v| v != "0"),
            docker_image: var("SANDBENCH_DOCKER_IMAGE"),
            helper: var("SANDBENCH_HELPER").map(PathBuf::from),
            try_user_cgroup: get("SANDBENCH_TRY_USER_CGROUP").is_some(),
            runtime_dir: var("XDG_RUNTIME_DIR").map(PathBuf::from),
            samples_dir: var("SANDBENCH_SAMPLES").map(PathBuf::from),
            require_tiers: var("SANDBENCH_REQUIRE_TIERS")
                .map(|v| v.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect())
                .unwrap_or_default(),
        }
    }
}

/// `prewarm`: warm sandboxes cost memory (a microvm guest ~180 MB), so the
/// workbench warms a tier when it is selected or used, not at launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prewarm {
    /// The tier selected in the workbench, once its probe says it is ready.
    #[default]
    Selected,
    /// Every available tier, as soon as its probe says it is ready.
    All,
    /// None: every workbench run starts cold.
    None,
}

/// `[network]`: how the egress proxy resolves names (the limit itself is
/// `[limits] network`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Names resolved without DNS, like /etc/hosts: `"mirror.corp" =
    /// "10.0.0.5"` or a list. These addresses are the operator's word and
    /// pass the proxy's address check even when private or loopback.
    pub hosts: crate::egress::resolve::Hosts,
    /// A PEM file of CAs the proxy trusts, besides the system's, when it
    /// re-originates TLS to a secret's host (a local service, tests).
    pub upstream_ca: Option<PathBuf>,
    /// That file's text, read by [`Config::load`].
    #[serde(skip)]
    pub upstream_ca_pem: Option<String>,
}

impl NetworkConfig {
    /// Read `upstream_ca` (a missing or broken file is an error now, not at
    /// the first secret's request).
    pub fn load_upstream_ca(&mut self) -> anyhow::Result<()> {
        let Some(path) = &self.upstream_ca else { return Ok(()) };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("[network] upstream_ca: cannot read {}", path.display()))?;
        crate::egress::ca::certs_from_pem(text.as_bytes())
            .map_err(|e| anyhow::anyhow!("[network] upstream_ca {}: {e}", path.display()))?;
        self.upstream_ca_pem = Some(text);
        Ok(())
    }
}

/// `[mcp]`: the operator's terms for MCP clients. The `sandbench mcp` flags
/// (`--tiers`, `--max-memory`, `--max-sessions`, …) override each key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Tiers clients may use, the first the default (unset: `default_tier` only).
    pub tiers: Option<Vec<String>>,
    /// The most a client may ask of each limit (times in ms, sizes in
    /// bytes, as in `[limits]`); an unset key: the default limit is the most.
    pub max_limits: LimitCeilings,
    /// Sessions open at once, all clients together (0: no sessions).
    pub max_sessions: Option<usize>,
    /// A session's idle timeout, and the longest a client may ask for.
    pub session_idle_secs: Option<u64>,
    /// A session's lifetime cap, and the longest a client may ask for.
    pub session_life_secs: Option<u64>,
    /// Runs in flight at once, all clients together.
    pub max_runs: Option<usize>,
    /// Runs one client may have in flight at once.
    pub max_runs_per_client: Option<usize>,
    /// Sessions one client may hold open at once (default: `max_sessions`).
    pub max_sessions_per_client: Option<usize>,
    /// Calls waiting for a slot, all clients together.
    pub max_queue: Option<usize>,
    /// Memory limits of everything in flight together (bytes).
    pub budget_memory_bytes: Option<u64>,
    /// Pids limits of everything in flight together.
    pub budget_pids: Option<u64>,
    /// HTTP: the file of bearer tokens clients must send.
    pub token_file: Option<PathBuf>,
    /// HTTP: browser origins allowed to call (none by default).
    pub allowed_origins: Option<Vec<String>>,
    /// HTTP: MCP sessions at once.
    pub max_http_sessions: Option<usize>,
}

/// Ceilings of the limits a remote client may ask for (`[mcp.max_limits]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitCeilings {
    pub cpu_time: Option<u64>,
    pub wall_time: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub output_bytes: Option<u64>,
}

impl LimitCeilings {
    /// `base` raised (or lowered) where a ceiling is set.
    pub fn apply(&self, mut l: Limits) -> Limits {
        use std::time::Duration;
        if let Some(v) = self.cpu_time {
            l.cpu_time = Duration::from_millis(v);
        }
        if let Some(v) = self.wall_time {
            l.wall_time = Duration::from_millis(v);
        }
        if let Some(v) = self.memory_bytes {
            l.memory_bytes = v;
        }
        if let Some(v) = self.pids {
            l.pids = v;
        }
        if let Some(v) = self.file_size_bytes {
            l.file_size_bytes = v;
        }
        if let Some(v) = self.disk_bytes {
            l.disk_bytes = v;
        }
        if let Some(v) = self.output_bytes {
            l.output_bytes = v;
        }
        l
    }
}

/// `[e2b]`: the hosted tier. Key and endpoints come from the environment
/// (E2B_API_KEY, E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL, E2B_DEBUG; see
/// [`RemoteEnv`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct E2bConfig {
    /// Sandbox template name or id.
    pub template: String,
    /// Seconds added to the wall time for the sandbox's own E2B timeout, which
    /// reaps it even if sandbench dies without killing it.
    pub timeout_margin_secs: u64,
}

impl Default for E2bConfig {
    fn default() -> Self {
        E2bConfig { template: "base".into(), timeout_margin_secs: 30 }
    }
}

/// `[agent]`: the model loop. The key comes from ANTHROPIC_API_KEY only
/// (and the endpoint from ANTHROPIC_BASE_URL; see [`RemoteEnv`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub model: String,
    pub max_turns: u32,
    /// max_tokens of each model reply.
    pub max_tokens: u32,
}

/// The model the agent uses unless `[agent] model` or `--model` says
/// otherwise: a current model of the official SDK's model list (`anthropic`
/// 2.14, `types/model.py`), not in its deprecation table. The one place the
/// default is written; `sandbench agent --list-models` shows what a key offers.
pub const DEFAULT_AGENT_MODEL: &str = "claude-sonnet-5-5";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { model: DEFAULT_AGENT_MODEL.into(), max_turns: 10, max_tokens: 4096 }
    }
}

/// `[microvm]`: the QEMU microVM tier.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicrovmConfig {
    /// Guest kernel; default: the newest /boot/vmlinuz-*.
    pub kernel: Option<PathBuf>,
    /// Modules matching the kernel; default: `/lib/modules/<kernel version>`.
    pub modules_dir: Option<PathBuf>,
    /// The QEMU binary.
    pub qemu: String,
    /// KVM when a probe guest boots, else TCG; or one of them, unprobed.
    pub accel: AccelSetting,
    /// Pre-booted, single-use guests kept ready in a long-lived sandbench.
    pub pool_size: usize,
    /// Guest memory on top of the run's memory limit (kernel, agent, page cache).
    pub overhead_bytes: u64,
    /// Try starting runs from a saved snapshot of a booted guest.
    pub snapshot: bool,
    /// Debian mirror for the root disk; default: the host's apt sources'
    /// Debian mirror, else <http://deb.debian.org/debian>.
    pub mirror: Option<String>,
    /// Debian suite for the root disk.
    pub suite: String,
}

impl Default for MicrovmConfig {
    fn default() -> Self {
        MicrovmConfig {
            kernel: None,
            modules_dir: None,
            qemu: "qemu-system-x86_64".into(),
            accel: AccelSetting::Auto,
            pool_size: 2,
            overhead_bytes: 192 << 20,
            snapshot: true,
            mirror: None,
            suite: "bookworm".into(),
        }
    }
}

/// `[microvm] accel`: a typo is an error naming the choices, not "auto".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AccelSetting {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessConfig {
    /// When sandbench runs as root, each run's program gets its own uid (and
    /// gid of the same number) from `uid_base .. uid_base + uid_count`, a
    /// range no host user has, so per-uid kernel quotas are never shared.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Keep one sandbox helper started ahead of the next run (a warm start:
    /// its cgroup is joined already). Single use; off for one-shot `run`.
    pub spare: bool,
    /// Run even where Landlock or the seccomp filter cannot be enforced;
    /// such runs are marked degraded. Off: they are refused.
    pub allow_degraded: bool,
    /// Fork Python programs' processes from one warm interpreter (root
    /// only; `tier/process/zygote.rs`) instead of starting one per sandbox.
    pub zygote: bool,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        // Far above any uid a distribution or a directory service hands
        // out; such uids own no host file, so a program that got out of its
        // mount namespace still could not write anything of the host's.
        ProcessConfig { uid_base: 2_000_000_000, uid_count: 65536, spare: true, allow_degraded: false, zygote: true }
    }
}

/// The `docker` and `gvisor` tiers (`[docker]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// Image the sandboxes run (needs python3 and /bin/sh). `sandbench setup
    /// docker` writes the name of the image it built here when it had to build one.
    /// `$SANDBENCH_DOCKER_IMAGE` overrides it.
    pub image: String,
    /// Warm containers kept ready per tier (0 = every run starts cold).
    pub pool_size: usize,
    /// The program's uid inside the container: "auto" (default: a fresh uid
    /// per run from sandbench's dedicated range, 1879048192..1895825407, that
    /// no host process has) or a fixed numeric "uid:gid" (never 0).
    pub user: String,
    /// Debian suite and mirror `sandbench setup docker` builds a local image from
    /// when the image is neither present nor pullable.
    pub debian_suite: String,
    pub debian_mirror: String,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            image: "python:3.12-slim".into(),
            pool_size: 2,
            user: "auto".into(),
            debian_suite: "bookworm".into(),
            debian_mirror: "http://deb.debian.org/debian".into(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default_tier: "process".into(),
            theme: "dark".into(),
            limits: Limits::default(),
            process: ProcessConfig::default(),
            docker: DockerConfig::default(),
            e2b: E2bConfig::default(),
            agent: AgentConfig::default(),
            samples_dir: None,
            microvm: MicrovmConfig::default(),
            prewarm: Prewarm::default(),
            network: NetworkConfig::default(),
            mcp: McpConfig::default(),
            secrets: Default::default(),
            env: RemoteEnv::default(),
            host: HostEnv::default(),
            state_dir: None,
        }
    }
}

impl Config {
    pub fn path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("SANDBENCH_CONFIG") {
            return Some(PathBuf::from(p));
        }
        dirs::config_dir().map(|d| d.join("sandbench").join("config.toml"))
    }

    /// Load the config file; a missing file gives the defaults, a broken one an error.
    /// Also reads the remote services' keys and endpoints from the
    /// environment ([`RemoteEnv`]).
    pub fn load() -> anyhow::Result<Config> {
        let mut config = Config::load_file()?;
        config.network.load_upstream_ca()?;
        crate::egress::secrets::check_config(&config.secrets)
            .map_err(|e| anyhow::anyhow!("the config's [secrets]: {e}"))?;
        config.env = RemoteEnv::from_process();
        config.host = HostEnv::from_process();
        config.state_dir = Some(state_dir());
        Ok(config)
    }

    fn load_file() -> anyhow::Result<Config> {
        let Some(path) = Config::path() else { return Ok(Config::default()) };
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .with_context(|| format!("config file {} is not valid; fix it or move it away", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read config file {}", path.display())),
        }
    }
}

/// Where sandbench keeps built artefacts (images, guest kernels).
pub fn data_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("SANDBENCH_DATA_DIR") {
        return PathBuf::from(p);
    }
    dirs::data_dir().unwrap_or_else(std::env::temp_dir).join("sandbench")
}

/// Where sandbench keeps what it measured last (the gauntlet, latency runs)
/// for `sandbench report --reuse`: `$SANDBENCH_STATE_DIR`, else the XDG state
/// dir (`~/.local/state/sandbench`). The variable is read once per process.
pub fn state_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os("SANDBENCH_STATE_DIR").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => dirs::state_dir()
            .or_else(|| dirs::home_dir().map(|h| h.join(".local").join("state")))
            .unwrap_or_else(std::env::temp_dir)
            .join("sandbench"),
    })
    .clone()
}

/// Where logs go (never to the terminal).
pub fn log_dir() -> PathBuf {
    dirs::state_dir().or_else(dirs::cache_dir).unwrap_or_else(std::env::temp_dir).join("sandbench")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_an_error_that_names_the_key() {
        let e = toml::from_str::<Config>("[limits]\nmemroy_bytes = 1\n").unwrap_err().to_string();
        assert!(e.contains("memroy_bytes"), "{e}");
        let e = toml::from_str::<Config>("defualt_tier = \"docker\"\n").unwrap_err().to_string();
        assert!(e.contains("defualt_tier"), "{e}");
        let e = toml::from_str::<Config>("[microvm]\naccel = \"kvmm\"\n").unwrap_err().to_string();
        assert!(e.contains("kvmm") && e.contains("tcg"), "{e}");
    }

    #[test]
    fn host_env_reads_each_variable_once_and_ignores_blanks() {
        let vars: std::collections::HashMap<&str, &str> = [
            ("DOCKER_HOST", " tcp://127.0.0.1:2375 "),
            ("DOCKER_TLS_VERIFY", "0"),
            ("SANDBENCH_DOCKER_IMAGE", "  "),
            ("SANDBENCH_REQUIRE_TIERS", "process, docker,,"),
            ("SANDBENCH_TRY_USER_CGROUP", ""),
        ]
        .into();
        let h = HostEnv::from_lookup(|k| vars.get(k).map(|v| v.to_string()));
        assert_eq!(h.docker_host.as_deref(), Some("tcp://127.0.0.1:2375"));
        assert!(!h.docker_tls_verify);
        assert_eq!(h.docker_image, None);
        assert_eq!(h.require_tiers, ["process", "docker"]);
        assert!(h.try_user_cgroup, "set, even empty, means try");
        assert_eq!(h.helper, None);
    }

    #[test]
    fn the_network_limit_and_hosts_parse() {
        let c: Config = toml::from_str(
            "[limits]\nnetwork = \"allow=pypi.test\"\n[network]\nhosts = { \"pypi.test\" = \"127.0.0.5\" }\n",
        )
        .unwrap();
        assert_eq!(c.limits.network.to_string(), "allow=pypi.test");
        assert_eq!(c.network.hosts.0["pypi.test"].len(), 1);
        let e = toml::from_str::<Config>("[limits]\nnetwork = \"allow=a b\"\n").unwrap_err().to_string();
        assert!(e.contains("not a host name"), "{e}");
        let e = toml::from_str::<Config>("[network]\nhost = {}\n").unwrap_err().to_string();
        assert!(e.contains("host"), "{e}");
    }

    #[test]
    fn mcp_bounds_and_http_terms_from_the_file() {
        let c: Config = toml::from_str(
            "[mcp]\nmax_runs = 3\nmax_runs_per_client = 1\nmax_queue = 5\nbudget_memory_bytes = 1073741824\n\
             budget_pids = 500\ntoken_file = \"/etc/sandbench/tokens\"\nallowed_origins = [\"http://localhost:6274\"]\n\
             max_http_sessions = 3\n",
        )
        .unwrap();
        let m = &c.mcp;
        assert_eq!((m.max_runs, m.max_runs_per_client, m.max_queue), (Some(3), Some(1), Some(5)));
        assert_eq!((m.budget_memory_bytes, m.budget_pids, m.max_http_sessions), (Some(1 << 30), Some(500), Some(3)));
        assert_eq!(m.token_file.as_deref(), Some(std::path::Path::new("/etc/sandbench/tokens")));
        assert_eq!(m.allowed_origins.as_deref(), Some(&["http://localhost:6274".to_string()][..]));
        let e = toml::from_str::<Config>("[mcp]\nmax_run = 3\n").unwrap_err().to_string();
        assert!(e.contains("max_run"), "{e}");
    }

    #[test]
    fn mcp_terms_from_the_file() {
        let c: Config = toml::from_str(
            "[mcp]\ntiers = [\"docker\"]\nmax_sessions = 2\n[mcp.max_limits]\nmemory_bytes = 1073741824\n",
        )
        .unwrap();
        assert_eq!(c.mcp.tiers.as_deref(), Some(&["docker".to_string()][..]));
        assert_eq!(c.mcp.max_sessions, Some(2));
        let l = c.mcp.max_limits.apply(Limits::default());
        assert_eq!((l.memory_bytes, l.pids), (1 << 30, Limits::default().pids));
        let e = toml::from_str::<Config>("[mcp.max_limits]\nmemory = 1\n").unwrap_err().to_string();
        assert!(e.contains("memory"), "{e}");
    }

    #[test]
    fn partial_config_fills_defaults() {
        let c: Config = toml::from_str("default_tier = \"docker\"\n[limits]\nmemory_bytes = 1048576\n").unwrap();
        assert_eq!(c.default_tier, "docker");
        assert_eq!(c.limits.memory_bytes, 1 << 20);
        assert_eq!(c.limits.pids, Limits::default().pids);
    }
}
