use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use sandbench::cli::{Cli, Command};
use sandbench::cmd::{self, UsageError};
use sandbench::config::{self, Config};

fn main() -> ExitCode {
    // The sandbox helper is this same binary, exec'd fresh; it must not start
    // a runtime or parse arguments.
    if std::env::args_os().nth(1).is_some_and(|a| a == "__sandbox") {
        sandbench::tier::process_helper_main();
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "__zygote") {
        sandbench::tier::process_zygote_main();
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(e.kind(), DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line without its "error: " prefix.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            return fail(&format!("{first} (see sandbench --help)"), 2);
        }
    };
    init_logging();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => return fail(&format!("{e:#}"), 2),
    };
    // Every run a front end makes goes to the run log in the state dir
    // (doctor's probes, bench's timing runs and setup's checks do not).
    if let Some(dir) = &config.state_dir {
        let front_end = match &cli.command {
            None => Some("tui"),
            Some(Command::Run(_)) => Some("run"),
            Some(Command::Compare(_)) => Some("compare"),
            Some(Command::Gauntlet(_)) => Some("gauntlet"),
            Some(Command::Report(_)) => Some("report"),
            Some(Command::Agent(_)) => Some("agent"),
            Some(Command::Mcp(_)) => Some("mcp"),
            // The soak's runs are runs like any other (bench's timing runs are not logged).
            Some(Command::Bench(a)) if a.soak => Some("soak"),
            _ => None,
        };
        if let Some(f) = front_end {
            sandbench::runlog::install(sandbench::runlog::RunLog::new(dir), f);
        }
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err((e, code)) => return fail(&e, code),
    };
    // `run`, `agent` and `bench` name their one tier: reap only its leftovers.
    let own_tier = match &cli.command {
        Some(Command::Bench(a)) => Some(a.tier.clone()),
        Some(Command::Run(a)) => Some(a.tier.clone().unwrap_or_else(|| config.default_tier.clone())),
        Some(Command::Agent(a)) => Some(a.tier.clone().unwrap_or_else(|| config.default_tier.clone())),
        _ => None,
    };
    let result = rt.block_on(async move {
        match own_tier {
            Some(t) => sandbench::tier::reap_leftovers_of(&[t], &config).await,
            None => sandbench::tier::reap_leftovers(&config).await,
        }
        // The workbench owns its signals (it restores the terminal first);
        // every other command ends on SIGTERM/SIGHUP through the same
        // shutdown as a normal exit, so remote sandboxes and warm pools go too.
        let own_signals = cli.command.is_none();
        let command = async move {
            match cli.command {
                Some(Command::Run(a)) => cmd::run::run(a, &config).await,
                Some(Command::Compare(a)) => cmd::compare::run(a, &config).await,
                Some(Command::Doctor(a)) => cmd::doctor::run(a, &config).await,
                Some(Command::Bench(a)) => cmd::bench::run(a, &config).await,
                Some(Command::Gauntlet(a)) => cmd::gauntlet::run(a, &config).await,
                Some(Command::Agent(a)) => cmd::agent::run(a, &config).await,
                Some(Command::Report(a)) => cmd::report::run(a, &config).await,
                Some(Command::BenchUi(a)) => {
                    use sandbench::{cli::FloodArg, tui::bench_ui::FloodSource};
                    let source = match a.source {
                        FloodArg::Synthetic => FloodSource::Synthetic,
                        FloodArg::Process => FloodSource::Process,
                    };
                    sandbench::tui::bench_ui(&config, source, a.seconds, a.output, a.size.0, a.size.1).await
                }
                Some(Command::Setup(a)) => cmd::setup::run(a, &config).await,
                Some(Command::Mcp(a)) => cmd::mcp::run(*a, &config).await,
                Some(Command::Log(a)) => cmd::log::run(a, &config).await,
                Some(Command::Completions { shell }) => {
                    clap_complete::generate(shell, &mut Cli::command(), "sandbench", &mut std::io::stdout());
                    Ok(0)
                }
                None => sandbench::tui::run(&config, cli.file, cli.theme).await,
            }
        };
        let (r, signal) = if own_signals {
            (command.await, None)
        } else {
            tokio::select! {
                r = command => (r, None),
                sig = terminating_signal() => (Ok(128 + sig), Some(sig)),
            }
        };
        for w in sandbench::tier::shutdown().await {
            eprintln!("sandbench: {}", sandbench::sanitize::inert_line(&w, 400));
        }
        (r, signal)
    });
    let (result, signal) = result;
    // Everything this process made is gone (shutdown ran): its owner lock
    // file has nothing left to vouch for.
    sandbench::owner::release();
    if let Some(sig) = signal {
        drop(rt);
        die_of(sig);
    }
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 };
            fail(&format!("{e:#}").replace('\n', " "), code)
        }
    }
}

/// A command that failed: its one line on stderr and, when the command was
/// asked for JSON, one JSON error object on stdout too (a script reading
/// stdout gets JSON either way); `code` is the exit status.
fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("sandbench: {message}");
    if json_asked(std::env::args_os().skip(1)) {
        let v = serde_json::json!({
            "schema_version": sandbench::report::SCHEMA_VERSION,
            "outcome": "error",
            "error": message,
            "exit_code": code,
        });
        println!("{v}");
    }
    ExitCode::from(code)
}

/// The arguments ask for `--format json` (read from the raw arguments: the
/// error may be that they do not parse).
fn json_asked(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut prev_format = false;
    for a in args {
        if a == "--" {
            break;
        }
        if (prev_format && a == "json") || a == "--format=json" {
            return true;
        }
        prev_format = a == "--format";
    }
    false
}

/// End the process by `sig`'s default action, so the parent sees the usual
/// status of a process the signal ended (after our clean-up ran).
#[allow(unsafe_code)]
fn die_of(sig: i32) -> ! {
    use nix::sys::signal::{raise, signal, SigHandler, Signal};
    if let Ok(s) = Signal::try_from(sig) {
        // SAFETY: no other thread is left (the runtime was dropped), and
        // restoring the default disposition installs no handler code.
        let _ = unsafe { signal(s, SigHandler::SigDfl) };
        let _ = raise(s);
    }
    std::process::exit(128 + sig)
}

/// Wait for SIGTERM or SIGHUP; the signal's number. Never resolves if the
/// handlers cannot be installed (the default action then still ends us).
async fn terminating_signal() -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => libc::SIGTERM,
        _ = hup.recv() => libc::SIGHUP,
    }
}

/// The multi-threaded runtime. tokio reads `TOKIO_WORKER_THREADS` itself
/// and panics on a value it cannot use: here such a value is a usage error.
fn runtime() -> Result<tokio::runtime::Runtime, (String, u8)> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(v) = std::env::var_os("TOKIO_WORKER_THREADS") {
        match v.to_str().and_then(|s| s.parse::<usize>().ok()).filter(|n| *n > 0) {
            Some(n) => {
                b.worker_threads(n);
            }
            None => {
                let v = sandbench::sanitize::inert_line(&v.to_string_lossy(), 40);
                return Err((
                    format!("TOKIO_WORKER_THREADS is '{v}': set it to a whole number above 0, or unset it"),
                    2,
                ));
            }
        }
    }
    b.build().map_err(|e| (format!("cannot start the async runtime: {e}"), 1))
}

/// Logs go to a file, never to the terminal a run or the workbench uses.
fn init_logging() {
    let dir = config::log_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let Ok(file) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("sandbench.log")) else {
        return;
    };
    // rmcp logs every notification a client sends, with its content, at
    // info: a client could fill the disk through the log. Its errors only.
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SANDBENCH_LOG").unwrap_or_else(|_| "info,rmcp=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
}
