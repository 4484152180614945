//! sandbench's engine: run untrusted, agent-written code in isolation tiers
//! and judge what happened from facts the program cannot write.
//!
//! `RunSpec` → [`tier::Tier`] → stream of [`event::RunEvent`] → [`runner`]
//! (stamps, enforces wall time and output, folds) → [`report::RunReport`],
//! with `judge` deciding every violation. Nothing here knows of terminals,
//! command lines or printing: front ends (the `sandbench` crate) do that.
//!
//! # The public surface
//!
//! Listed below by layer (the layers and the test that keeps them are in
//! `layers.rs` and docs/architecture.md). A public module is API as a whole;
//! what a tier is made of (its engine client, its wire protocol, its
//! sandbox's parts) is private to this crate, and a front end reaches a tier
//! only through [`tier`] (build by name, check, set up, reap, shut down).
//! `unreachable_pub` is on, so an item that cannot be named from outside is
//! written `pub(crate)`: a `pub` in this crate means API. The few parts the
//! integration tests inspect beneath the API are named in [`internals`].
#![warn(unreachable_pub)]

// Plain types and host facts.
pub mod config;
pub mod event;
pub mod host;
pub mod http;
pub mod owner;
pub mod report;
pub mod sanitize;
pub mod setup;
pub mod spec;
pub mod stats;
pub mod units;

// The tiers: the contract every tier implements, the table of kinds, and
// the registry that builds, checks, sets up and reaps them by name.
pub mod tier;

// What drives a tier: one run, a session of calls, the network limit.
pub mod egress;
pub mod runner;
pub mod session;

// What is made of runs.
pub mod admission;
pub mod agent;
pub mod bench;
pub mod compare;
pub mod frontier;
pub mod gauntlet;
pub mod policy;
pub mod runlog;
pub mod samples;
pub mod session_files;
pub mod share;
pub mod soak;
pub mod state;

// Beneath the API.
mod bound;
mod fsafe;
mod highwater;
mod judge;
#[cfg(test)]
mod layers;
mod slowdown;

/// The parts beneath the API that the integration tests look at from
/// outside (a tier built by its type, the engine's own Docker client, the
/// microVM's wire protocol, the lists a sandbox binds): named here, in one
/// place, so every other module of a tier stays private. Not for front ends.
pub mod internals {
    /// Run every background teardown to its end (a test's "nothing left").
    pub use crate::tier::background::drain;

    /// The gauntlet's canaries: the processes that still carry one.
    pub use crate::gauntlet::canary::processes_with;

    /// The docker and gVisor tiers.
    pub mod docker {
        pub use crate::bench::docker::cli_argv;
        pub use crate::tier::docker::engine::{Endpoint, Engine};
        pub use crate::tier::docker::reap::runsc_processes;
        pub use crate::tier::docker::DockerTier;
    }

    /// The E2B tier and its two HTTP dialects.
    pub mod e2b {
        pub use crate::tier::e2b::api::Api;
        pub use crate::tier::e2b::envd::Envd;
        pub use crate::tier::e2b::live::{live_sandboxes, reap_orphans};
        pub use crate::tier::e2b::session::CLEANUP_SCRIPT;
        pub use crate::tier::e2b::settings::Settings;
        pub use crate::tier::e2b::E2bTier;
    }

    /// The microVM tier and its wire protocol.
    pub mod microvm {
        pub use crate::tier::microvm::artefacts::paths as artefact_paths;
        pub use crate::tier::microvm::clock::host_tsc_khz;
        pub use crate::tier::microvm::proto;
        pub use crate::tier::microvm::vm::{NAME_PREFIX, QEMU_NICE};
        pub use crate::tier::microvm::{reap_leftovers, MicrovmTier};
    }

    /// The process tier and what its sandbox shows of the host.
    pub mod process {
        pub use crate::tier::process::helper_exe::{default_helper, small_helper};
        pub use crate::tier::process::sandbox::{ETC_COPIED, HOST_BINDS, PYTHON_ETC};
        /// The one table of calls every tier refuses (issue 42, item 8).
        pub use crate::tier::process::seccomp::{CLONE_FLAGS, DENIED};
        pub use crate::tier::process::ProcessTier;
    }

    /// Peers: who a peer runs as, and its run directory.
    pub mod peer {
        pub use crate::tier::peer::identity::RunAs;
        pub use crate::tier::peer::rundir::RunDir;
    }
}
