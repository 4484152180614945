//! sandbench: run untrusted, agent-written code in several isolation tiers and
//! compare, live, what each one costs and what it stops.
//!
//! `RunSpec` → [`tier::Tier`] → stream of [`event::RunEvent`] → [`runner`] → [`report::RunReport`].

pub mod agent;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod event;
pub mod gauntlet;
pub mod judge;
pub mod report;
pub mod runner;
pub mod samples;
pub mod sanitize;
pub mod spec;
pub mod tier;
pub mod tui;
