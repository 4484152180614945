//! sandbench's integration tests, one binary (it links once), a module per
//! area, run by our own harness (`support::harness`, libtest-mimic): each
//! test says what it needs (`#[sandbench_testkit::test(needs = [...])]`),
//! and one that cannot run here shows as ignored with the reason, never as
//! passed; `SANDBENCH_REQUIRE_TIERS` turns those into failures.

mod support {
    pub mod common;
    pub mod docker_common;
    pub mod fake_anthropic;
    pub mod fake_e2b;
    pub mod harness;
    pub mod hidden;
    pub mod http;
    pub mod loopback_web;
    pub mod mcp;
    pub mod parity;
}

mod agent_cli;
mod agent_dialect;
mod agent_loop;
mod bench_session;
mod bench_throughput;
mod chaos;
mod docker_lifecycle;
mod docker_output;
mod docker_verdicts;
mod docs_snippets;
mod e2b_cli;
mod e2b_dialect;
mod e2b_lifecycle;
mod egress;
mod gauntlet;
mod headless;
mod host_inodes;
mod javascript;
mod judge_bounds;
mod mcp_bounds;
mod mcp_clients;
mod mcp_files;
mod mcp_http_auth;
mod mcp_stdio;
mod mcp_stream;
mod mcp_ts;
mod microvm_protocol;
mod microvm_tier;
mod peak_memory;
mod peers;
mod process_boundary;
mod process_cli;
mod process_helper;
mod process_privileges;
mod process_reaping;
mod process_spare;
mod process_zygote;
mod program_start;
mod reaper;
mod report;
mod runlog_cli;
mod secrets;
mod session_agent;
mod session_plants;
mod sessions;
mod soak;
mod terminal_injection;
mod tui_agent;
mod tui_app;
mod tui_compare;
mod tui_e2e;
mod tui_figures;
mod tui_gauntlet;
mod tui_instrument;
mod tui_runs;
mod tui_screens;
mod tui_snapshots;
mod tui_views;
mod untrusted_exits;

fn main() {
    support::harness::main();
}
