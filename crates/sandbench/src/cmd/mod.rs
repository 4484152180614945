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

/// A value as pretty JSON, newline-terminated, through the inert serializer
/// whatever the value: a record added later (the agent's transcript was
/// one) cannot hand a program's or a model's text out raw.
pub fn json_text(value: &impl serde::Serialize) -> serde_json::Result<String> {
    struct Inert<'a, T: ?Sized>(&'a T);
    impl<T: serde::Serialize + ?Sized> serde::Serialize for Inert<'_, T> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            crate::sanitize::inert::serialize(self.0, s)
        }
    }
    Ok(serde_json::to_string_pretty(&Inert(value))? + "\n")
}

/// [`emit`] a value as [`json_text`].
pub fn emit_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    emit(&json_text(value)?)
}
