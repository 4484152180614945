//! Headless subcommands. Each returns the process exit code.

pub mod agent;
pub mod bench;
pub mod compare;
pub mod doctor;
pub mod gauntlet;
pub mod gauntlet_render;
pub mod log;
pub mod mcp;
pub mod progress;
pub mod report;
pub mod run;
pub mod setup;

pub use crate::error::{usage, UsageError};

/// Write a command's result to standard output. A reader that went away
/// (`sandbench ... | head`) ends the output quietly, as Unix tools do; any
/// other write failure is an error that says where the output was going.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to standard output: {e}"))
        }
        _ => Ok(()),
    }
}

/// [`emit`] a value as pretty JSON, newline-terminated.
pub fn emit_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    emit(&(serde_json::to_string_pretty(value)? + "\n"))
}
