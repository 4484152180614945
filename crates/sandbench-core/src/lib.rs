//! sandbench's engine: run untrusted, agent-written code in isolation tiers
//! and judge what happened from facts the program cannot write.
//!
//! `RunSpec` → [`tier::Tier`] → stream of [`event::RunEvent`] → [`runner`]
//! (stamps, enforces wall time and output, folds) → [`report::RunReport`],
//! with [`judge`] deciding every violation. Nothing here knows of terminals,
//! command lines or printing: front ends (the `sandbench` crate) do that.

pub mod admission;
pub mod agent;
pub mod bench;
pub mod compare;
pub mod config;
pub mod egress;
pub mod event;
pub mod frontier;
pub mod fsafe;
pub mod gauntlet;
pub mod highwater;
pub mod host;
pub mod http;
mod judge;
#[cfg(test)]
mod layers;
pub mod owner;
pub mod policy;
pub mod report;
pub mod runlog;
pub mod runner;
pub mod samples;
pub mod sanitize;
pub mod session;
pub mod session_files;
pub mod setup;
pub mod share;
mod slowdown;
pub mod soak;
pub mod spec;
pub mod state;
pub mod stats;
pub mod tier;
pub mod units;
