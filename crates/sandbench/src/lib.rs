//! The `sandbench` front ends: the command line (`cli`, `cmd`) and the
//! workbench (`tui`), over the engine in `sandbench_core`. The engine's
//! public modules (its whole API: see its crate doc) are re-exported under
//! their own names so front-end code (and the integration tests) can say
//! `sandbench::runner`; `internals` is for the integration tests only.

pub use sandbench_core::{
    admission, agent, bench, compare, config, egress, event, gauntlet, host, http, internals, owner, policy, report,
    runlog, runner, samples, sanitize, session, session_files, setup, share, soak, spec, state, stats, tier, units,
};

pub mod cli;
pub mod cmd;
pub mod error;
#[cfg(test)]
mod layers;
pub mod tui;
