//! Headless subcommands. Each returns the process exit code.

pub mod agent;
pub mod bench;
pub mod compare;
pub mod doctor;
pub mod gauntlet;
pub mod gauntlet_render;
pub mod log;
pub mod mcp;
pub mod run;
pub mod setup;

use std::fmt;

/// An error the user caused (bad input): exit code 2, one line.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
