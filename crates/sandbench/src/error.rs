//! The one error type the front ends share: a user's bad input (exit code
//! 2, one line), as opposed to sandbench failing (exit code 1).

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
