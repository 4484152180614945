//! The command line: `sandbench` (the workbench) and its headless subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::spec::{self, Limits};

#[derive(Debug, Parser)]
#[command(
    name = "sandbench",
    version,
    about = "Run untrusted, agent-written code in sandboxes and compare what each one costs and what it stops"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Open this program in the workbench (created on save if it does not exist).
    pub file: Option<PathBuf>,
    /// Workbench theme: dark, light, a name in the config dir's themes/, or a .toml path.
    #[arg(long, value_name = "THEME")]
    pub theme: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one program in a sandbox and report what happened.
    Run(RunArgs),
    /// Run one program on several tiers side by side.
    Compare(CompareArgs),
    /// Say, per tier, whether it works here, and what fixes it when not.
    Doctor(DoctorArgs),
    /// Measure start→exit latency of a tier against its baselines.
    Bench(BenchArgs),
    /// Every hostile sample on every tier: which tier stops what, at what cost.
    Gauntlet(GauntletArgs),
    /// Let a model solve a task with one tool, run_code, executed in a sandbox.
    Agent(AgentArgs),
    /// One page to share: the gauntlet, latency per tier, the safety × latency frontier, the machine.
    Report(ReportArgs),
    /// Measure the workbench's frame times and memory under an output flood.
    #[command(hide = true)]
    BenchUi(BenchUiArgs),
    /// Serve the tiers to agents over the Model Context Protocol (stdio; --http for loopback HTTP).
    Mcp(Box<McpArgs>),
    /// Print the run log (every run of every front end), filtered.
    Log(LogArgs),
    /// Get a tier ready on this machine: images, runtimes, guest kernels. Idempotent.
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
    /// Network: none (the default), or allow=HOST[:PORT][,HOST[:PORT]...]
    /// through sandbench's egress proxy (a bare host means ports 80 and 443).
    #[arg(long, value_name = "none|allow=HOSTS", value_parser = clap::value_parser!(crate::egress::Network))]
    pub network: Option<crate::egress::Network>,
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
        if let Some(v) = &self.network {
            l.network = v.clone();
        }
        l
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Isolation tier.
    #[arg(long, short, value_name = "TIER")]
    pub tier: Option<String>,
    /// Language (python, sh, javascript; aliases js, node); default from the file extension (.py, .sh, .js/.mjs).
    #[arg(long, visible_alias = "language", value_name = "LANG", value_parser = clap::value_parser!(spec::Language))]
    pub lang: Option<spec::Language>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Pass KEY=VALUE into the sandbox (nothing else of the host's environment is).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = spec::parse_env)]
    pub env: Vec<(String, String)>,
    /// A secret the program uses but never holds: NAME=env:VAR@HOST[:PORT][,HOST...],
    /// NAME=file:PATH@HOST..., or a NAME declared under [secrets] in the config.
    /// $NAME in the sandbox is a placeholder; the egress proxy puts the value
    /// in requests to those hosts only (they must be in --network allow=...).
    #[arg(long = "secret", value_name = "NAME[=SOURCE@HOSTS]")]
    pub secrets: Vec<String>,
    /// Where a secret may also be substituted besides header values: NAME=query,body.
    #[arg(long = "secret-in", value_name = "NAME=PLACES")]
    pub secret_in: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Run even where Landlock or seccomp cannot be enforced; the report
    /// marks the run degraded (otherwise it is refused).
    #[arg(long)]
    pub allow_degraded: bool,
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
    /// What to time: run (one-shot runs, cold and warm, against the tier's
    /// baselines) or session (a call in one kept session against a fresh
    /// warm run and the bare interpreter: the agent's hot path).
    #[arg(long, value_enum, default_value_t = BenchPath::Run)]
    pub path: BenchPath,
    /// Language of the programs timed: python (print(1), against bare
    /// python3 and bwrap) or javascript (console.log(1), against bare
    /// `node -e`).
    #[arg(long, visible_alias = "lang", value_name = "LANG", value_parser = clap::value_parser!(spec::Language))]
    pub language: Option<spec::Language>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Soak instead: benign and hostile samples on every selected tier, N in
    /// flight, for --duration; reports verdicts, output delivered, host
    /// latency and leftovers.
    #[arg(long)]
    pub soak: bool,
    /// Throughput (without --soak): keep --concurrency runs in flight this
    /// long, against as many concurrent bare equivalents (default 10s; the
    /// soak's default is 60s).
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub duration: Option<Duration>,
    /// Runs in flight (throughput and soak; default 4).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Soak and --all-tiers: comma-separated tiers (default: every
    /// available tier of sandbench's own; name peers to add them to a soak).
    #[arg(long, value_name = "TIERS")]
    pub tiers: Option<String>,
    /// Soak: samples folder (with benign/ and hostile/).
    #[arg(long, value_name = "DIR", requires = "soak")]
    pub samples: Option<PathBuf>,
    /// Soak: beside the one-shot runs, keep one session per tier that has
    /// sessions and call it again and again as an agent would (each call
    /// checks the session kept the last one's file); reports its p99 per minute.
    #[arg(long, requires = "soak")]
    pub sessions: bool,
    /// One table for every local tier available here: a fresh warm run, a
    /// session call and a cold run of print(1), in ms and × bare python3,
    /// each tier's contenders in one interleaved run (--runs rounds).
    #[arg(long, conflicts_with_all = ["soak", "duration", "concurrency", "language"])]
    pub all_tiers: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchPath {
    Run,
    Session,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MatrixFormat {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct GauntletArgs {
    /// Comma-separated tiers (default: every available tier of sandbench's
    /// own; name peers to add them).
    #[arg(long, value_name = "TIERS")]
    pub tiers: Option<String>,
    /// Samples folder (with benign/ and hostile/).
    #[arg(long, value_name = "DIR")]
    pub samples: Option<PathBuf>,
    /// Runs of each benign control per tier (for the latency figures).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Give every tier the limits as written. By default each tier's wall
    /// limit is stretched by the machine's load as measured on that tier
    /// (before its first cell and every minute), and an emulated CPU's limit
    /// (the microVM under TCG) by how much more CPU the same work takes
    /// there: the samples declare what happens on a quiet machine with a
    /// native CPU.
    #[arg(long)]
    pub limits_as_written: bool,
    #[arg(long, value_enum, default_value_t = MatrixFormat::Table)]
    pub format: MatrixFormat,
    /// Run even where Landlock or seccomp cannot be enforced; such cells are
    /// marked degraded (otherwise those runs are refused).
    #[arg(long)]
    pub allow_degraded: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// One self-contained HTML page (no scripts, nothing loaded from anywhere).
    Html,
    /// The same numbers as a JSON record.
    Json,
    /// The safety × latency frontier alone, as SVG.
    Svg,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Comma-separated tiers (default: every available tier of sandbench's own).
    #[arg(long, value_name = "TIERS")]
    pub tiers: Option<String>,
    /// Rounds of the latency benchmark (print(1) on every tier, interleaved).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Reuse the last gauntlet and latency benchmark kept in the state dir
    /// instead of running them again (what was never measured is run).
    #[arg(long)]
    pub reuse: bool,
    /// Samples folder of the gauntlet (with benign/ and hostile/).
    #[arg(long, value_name = "DIR")]
    pub samples: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Html)]
    pub format: ReportFormat,
    /// Where to write it; - for standard output (default: sandbench-report.html, .json or .svg here).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Run the gauntlet even where Landlock or seccomp cannot be enforced (such cells are marked degraded).
    #[arg(long)]
    pub allow_degraded: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Comma-separated tiers (default: every available tier, sandbench's own
    /// and the installed peers — the tier list `doctor` shows, as F6 in the
    /// workbench; unavailable ones are skipped and said).
    #[arg(long, value_name = "TIERS")]
    pub tiers: Option<String>,
    /// Language (python, sh, javascript; aliases js, node); default from the file extension (.py, .sh, .js/.mjs).
    #[arg(long, visible_alias = "language", value_name = "LANG", value_parser = clap::value_parser!(spec::Language))]
    pub lang: Option<spec::Language>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Pass KEY=VALUE into every sandbox.
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = spec::parse_env)]
    pub env: Vec<(String, String)>,
    /// Rounds: every tier runs the program once per round, rounds interleaved.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub repeat: u32,
    /// Run the tiers of a round all at once (quicker; the timings skew each
    /// other and are labelled so). By default one tier runs at a time.
    #[arg(long)]
    pub concurrent: bool,
    /// Accepted for old scripts: one tier at a time is the default now.
    #[arg(long, hide = true, conflicts_with = "concurrent")]
    pub sequential: bool,
    #[arg(long, value_enum, default_value_t = TableFormat::Text)]
    pub format: TableFormat,
    /// The program, or - for standard input.
    pub file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    Text,
    Json,
    Markdown,
    Csv,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Tier the model's code runs on (default: the configured default tier).
    #[arg(long, short, value_name = "TIER")]
    pub tier: Option<String>,
    /// Model name (default from [agent] model in the config).
    #[arg(long, short, value_name = "MODEL")]
    pub model: Option<String>,
    /// List the models the key can use (Anthropic's Models API) and exit.
    #[arg(long)]
    pub list_models: bool,
    /// Model turns before the loop stops without a final answer.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=200))]
    pub max_turns: Option<u32>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// A secret every program of the task may use but never holds (as `run --secret`):
    /// NAME=env:VAR@HOST[,HOST...], NAME=file:PATH@..., or a config NAME; its hosts must be in --network.
    #[arg(long = "secret", value_name = "NAME[=SOURCE@HOSTS]")]
    pub secrets: Vec<String>,
    /// Where a secret may also be substituted besides header values: NAME=query,body.
    #[arg(long = "secret-in", value_name = "NAME=PLACES")]
    pub secret_in: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// What the model should do.
    #[arg(required_unless_present = "list_models")]
    pub task: Option<String>,
}

/// What `bench-ui` floods the workbench with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloodArg {
    /// Synthetic output events generated in-process as fast as the UI takes them (UI cost alone).
    Synthetic,
    /// A real flood program on the process tier (end to end, includes the runner).
    Process,
}

#[derive(Debug, Args)]
pub struct BenchUiArgs {
    #[arg(long, value_enum, default_value_t = FloodArg::Synthetic)]
    pub source: FloodArg,
    /// Seconds of flood.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Output limit of the process-source run (the runner keeps that much for its report).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = spec::parse_size)]
    pub output: u64,
    /// Screen size, WIDTHxHEIGHT.
    #[arg(long, default_value = "120x40", value_parser = parse_wxh)]
    pub size: (u16, u16),
}

fn parse_wxh(s: &str) -> Result<(u16, u16), String> {
    let (w, h) = s.split_once('x').ok_or_else(|| format!("invalid size '{s}': expected WIDTHxHEIGHT, e.g. 120x40"))?;
    let p = |v: &str| {
        v.parse::<u16>()
            .ok()
            .filter(|n| *n >= 10)
            .ok_or_else(|| format!("invalid size '{s}': expected WIDTHxHEIGHT, e.g. 120x40"))
    };
    Ok((p(w)?, p(h)?))
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// What to set up: docker, gvisor, microvm, peers.
    pub target: String,
    /// Rebuild everything, also what is up to date.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// A secret clients may name in run_code (repeatable): a NAME declared
    /// under [secrets] in the config, or NAME=env:VAR@HOST[,HOST...]. Its
    /// value is read now; a client only ever names it.
    #[arg(long = "secret", value_name = "NAME[=SOURCE@HOSTS]")]
    pub secrets: Vec<String>,
    /// Comma-separated tiers clients may use; the first is the default
    /// (default: the configured default tier only).
    #[arg(long, value_name = "TIERS")]
    pub tiers: Option<String>,
    /// Serve streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "IP:PORT", value_parser = loopback_addr)]
    pub http: Option<std::net::SocketAddr>,
    /// Default limits of a run whose client asks for none.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Most CPU time a client may ask for (default: the default limit).
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub max_cpu: Option<Duration>,
    /// Most wall-clock time a client may ask for.
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub max_wall: Option<Duration>,
    /// Most memory a client may ask for.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub max_memory: Option<u64>,
    /// Most processes a client may ask for.
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub max_pids: Option<u64>,
    /// Largest file size a client may ask for.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub max_file_size: Option<u64>,
    /// Largest scratch space a client may ask for.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub max_disk: Option<u64>,
    /// Most output a client may ask for.
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub max_output: Option<u64>,
    /// Sessions open at once, all clients together (0: no sessions; default 4).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// A session's idle timeout, and the longest a client may ask for (default 5m).
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub session_idle: Option<Duration>,
    /// A session's lifetime cap, and the longest a client may ask for (default 30m).
    #[arg(long, value_name = "DURATION", value_parser = spec::parse_duration)]
    pub session_life: Option<Duration>,
    /// Runs in flight at once, all clients together (one-shot runs and calls in sessions; default 4).
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub max_runs: Option<u64>,
    /// Runs one client may have in flight at once (default 2); as many more, or half the queue, may wait.
    /// A client is one bearer token over HTTP (all its MCP sessions and stateless requests together).
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub max_runs_per_client: Option<u64>,
    /// Sessions one client may hold open at once (default: --max-sessions). A client is one bearer token
    /// over HTTP (all its MCP sessions and stateless requests together), or the stdio client.
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub max_sessions_per_client: Option<u64>,
    /// Calls waiting for a slot, all clients together; one more is refused (default 16).
    #[arg(long, value_name = "N")]
    pub max_queue: Option<usize>,
    /// Memory limits of everything in flight (runs and open sessions) together (default: half the host's memory).
    #[arg(long, value_name = "SIZE", value_parser = spec::parse_size)]
    pub budget_memory: Option<u64>,
    /// Pids limits of everything in flight together (default 2048).
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub budget_pids: Option<u64>,
    /// HTTP: the bearer tokens clients must send, one per line, in a file only you can read
    /// (default: a fresh token, written to a private file named on stderr).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// HTTP: a browser origin allowed to call (e.g. http://localhost:6274); repeatable. Default: none.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// HTTP: MCP sessions at once (default 16).
    #[arg(long, value_name = "N", value_parser = spec::parse_count)]
    pub max_http_sessions: Option<u64>,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only runs on this tier.
    #[arg(long, value_name = "TIER")]
    pub tier: Option<String>,
    /// Only runs with this outcome: ok, violation, incomplete, error, cancelled.
    #[arg(long, value_name = "OUTCOME")]
    pub outcome: Option<String>,
    /// Only runs since this long ago (30m, 2h, 7d) or this UTC time (2026-12-01T10:00:00Z).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only runs from this front end: run, compare, gauntlet, report, agent, mcp, tui, soak.
    #[arg(long, value_name = "NAME")]
    pub front_end: Option<String>,
    /// Only the calls of this session (an id like s-0a1b2c3d4e5f).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only the last N matching runs.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    /// text: one line per run; json: one log entry (JSON) per line.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Parse `--http`: an IP address and port on the loopback interface only.
/// The server runs code for whoever reaches it; anything wider than this
/// machine needs a proxy that authenticates, in front of it.
pub fn loopback_addr(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s
        .parse()
        .map_err(|_| format!("invalid --http address '{s}': expected IP:PORT on loopback, e.g. 127.0.0.1:8765"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "refusing --http {addr}: sandbench mcp listens on loopback only (127.0.0.1 or [::1]), because \
             whoever reaches it can run code; put an authenticating proxy in front to serve other machines"
        ));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::loopback_addr;

    #[test]
    fn http_is_loopback_only() {
        assert!(loopback_addr("127.0.0.1:8765").is_ok());
        assert!(loopback_addr("[::1]:8765").is_ok());
        let e = loopback_addr("0.0.0.0:8765").unwrap_err();
        assert!(e.contains("loopback only"), "{e}");
        assert!(loopback_addr("192.168.1.5:80").unwrap_err().contains("refusing"));
        assert!(loopback_addr("localhost").unwrap_err().contains("expected IP:PORT"));
    }
}
