//! The command line: `sandbench` (the workbench) and its headless subcommands.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::spec::{self, Limits};

#[derive(Debug, Parser)]
#[command(name = "sandbench", version, about = "Run untrusted, agent-written code in sandboxes and compare what each one costs and what it stops")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one program in a sandbox and report what happened.
    Run(RunArgs),
    /// Say, per tier, whether it works here, and what fixes it when not.
    Doctor(DoctorArgs),
    /// Measure start→exit latency of a tier against its baselines.
    Bench(BenchArgs),
    /// Build what a tier needs on this machine (images, guest kernels).
    Setup(SetupArgs),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Limit flags shared by every command that runs programs. Unset flags keep
/// the configured (or default) limits.
#[derive(Debug, Clone, Default, Args)]
pub struct LimitArgs {
    /// CPU time of the whole sandbox, e.g. 5s, 500ms.
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub cpu: Option<Duration>,
    /// Memory limit, e.g. 256M, 1G.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub memory: Option<u64>,
    /// Wall-clock limit, e.g. 10s.
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub timeout: Option<Duration>,
    /// Processes and threads at once.
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub pids: Option<u64>,
    /// Largest file the program may write, e.g. 16M.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub file_size: Option<u64>,
    /// Size of the writable scratch space, e.g. 64M.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub disk: Option<u64>,
    /// Output (stdout + stderr) captured before the run is stopped, e.g. 1M.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub output: Option<u64>,
}

impl LimitArgs {
    pub fn apply(&self, mut l: Limits) -> Limits {
        if let Some(v) = self.cpu {
            l.cpu_time = v;
        }
        if let Some(v) = self.memory {
            l.memory_bytes = v;
        }
        if let Some(v) = self.timeout {
            l.wall_time = v;
        }
        if let Some(v) = self.pids {
            l.pids = v;
        }
        if let Some(v) = self.file_size {
            l.file_size_bytes = v;
        }
        if let Some(v) = self.disk {
            l.disk_bytes = v;
        }
        if let Some(v) = self.output {
            l.output_bytes = v;
        }
        l
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Isolation tier.
    #[arg(long, short, value_name = "TIER")]
    pub tier: Option<String>,
    /// Language (python, sh); default from the file extension.
    #[arg(long, value_name = "LANG", value_parser = clap::value_parser!(spec::Language))]
    pub lang: Option<spec::Language>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Pass KEY=VALUE into the sandbox (nothing else of the host's environment is).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = spec::parse_env)]
    pub env: Vec<(String, String)>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The program, or - for standard input.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Tier to measure.
    #[arg(long, short, default_value = "process")]
    pub tier: String,
    /// Measured runs per contender (after one warm-up each).
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// What to set up (e.g. microvm).
    pub target: String,
    /// Rebuild everything, also what is up to date.
    #[arg(long)]
    pub force: bool,
}
