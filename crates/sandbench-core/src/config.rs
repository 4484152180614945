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
    /// Where the run log lives: `$SANDBENCH_STATE_DIR`, else the XDG state
    /// dir's `sandbench/`. Set by `load` (not a config key); `None` (the
    /// default, as in tests that build a config) logs no runs.
    #[serde(skip)]
    pub state_dir: Option<PathBuf>,
}

/// `[e2b]`: the hosted tier. Key and endpoints come from the environment
/// (E2B_API_KEY, E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL).
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

/// `[agent]`: the model loop. The key comes from ANTHROPIC_API_KEY only.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub model: String,
    pub max_turns: u32,
    /// max_tokens of each model reply.
    pub max_tokens: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { model: "claude-sonnet-4-5".into(), max_turns: 10, max_tokens: 4096 }
    }
}

/// `[microvm]`: the QEMU microVM tier.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicrovmConfig {
    /// Guest kernel; default: the newest /boot/vmlinuz-*.
    pub kernel: Option<PathBuf>,
    /// Modules matching the kernel; default: /lib/modules/<kernel version>.
    pub modules_dir: Option<PathBuf>,
    /// The QEMU binary.
    pub qemu: String,
    /// "auto" (KVM when a probe guest boots, else TCG), "kvm" or "tcg".
    pub accel: String,
    /// Pre-booted, single-use guests kept ready in a long-lived sandbench.
    pub pool_size: usize,
    /// Guest memory on top of the run's memory limit (kernel, agent, page cache).
    pub overhead_bytes: u64,
    /// Try starting runs from a saved snapshot of a booted guest.
    pub snapshot: bool,
    /// Debian mirror for the root disk; default: the host's apt sources'
    /// Debian mirror, else http://deb.debian.org/debian.
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
            accel: "auto".into(),
            pool_size: 2,
            overhead_bytes: 192 << 20,
            snapshot: true,
            mirror: None,
            suite: "bookworm".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessConfig {
    /// uid/gid the program runs as when sandbench runs as root.
    pub uid: u32,
    pub gid: u32,
    /// Keep one sandbox helper started ahead of the next run (a warm start:
    /// its cgroup is joined already). Single use; off for one-shot `run`.
    pub spare: bool,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        // nobody/nogroup: owns no files, so a program that gets out of its
        // mount namespace still cannot write anything of the host's.
        ProcessConfig { uid: 65534, gid: 65534, spare: true }
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
    /// uid:gid the program runs as inside the container.
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
            user: "65534:65534".into(),
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
    pub fn load() -> anyhow::Result<Config> {
        let mut c = Config::load_file()?;
        c.state_dir = Some(state_dir());
        Ok(c)
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

/// sandbench's state (the run log): `$SANDBENCH_STATE_DIR`, else
/// `$XDG_STATE_HOME/sandbench` (`~/.local/state/sandbench`).
pub fn state_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("SANDBENCH_STATE_DIR").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    dirs::state_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("sandbench")
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
    }

    #[test]
    fn partial_config_fills_defaults() {
        let c: Config = toml::from_str("default_tier = \"docker\"\n[limits]\nmemory_bytes = 1048576\n").unwrap();
        assert_eq!(c.default_tier, "docker");
        assert_eq!(c.limits.memory_bytes, 1 << 20);
        assert_eq!(c.limits.pids, Limits::default().pids);
    }
}
