//! Isolation tiers. A tier knows how to probe whether it can run here, and how
//! to run one program and stream `RunEvent`s; it knows nothing of front ends.
//!
//! - `contract`: the trait every tier implements, and what it answers.
//! - [`kinds`]: the table of sandbench's own tiers (name, boundary, needs,
//!   limits, network, setup), which every list of tiers iterates.
//! - `registry`: the tiers by name (the one place that builds them).
//! - `process`, `docker` (docker and gvisor), `microvm`, `e2b`:
//!   sandbench's own tiers; `peer`: other tools' sandboxes, from profiles.
//! - `background`: teardowns that outlive the run that started them.
//!
//! Inside the engine, modules import from `contract` or `registry` directly
//! (the layers test, `tests/layers.rs`, keeps them apart); the re-exports
//! below keep the front end's paths (`sandbench_core::tier::Tier`) short.

pub(crate) mod background;
pub(crate) mod contract;
pub(crate) mod docker;
pub(crate) mod e2b;
pub mod kinds;
pub(crate) mod libraries;
pub(crate) mod microvm;
pub(crate) mod peer;
pub(crate) mod process;
pub(crate) mod registry;

pub use crate::event::{RunContext, MAX_DETAIL};
pub use contract::*;
/// The peers installed here (`sandbench doctor` lists them).
pub use peer::names as peer_names;
/// The process tier's sandbox helper: `sandbench-sandbox`, a binary of
/// its own, when it is this build's (see `process::helper_exe`); else
/// sandbench's binary re-executes itself into it (`main` calls it first).
/// Never a binary found on a path.
pub use process::helper_exe::{BUILD as PROCESS_HELPER_BUILD, HELPER_NAME as PROCESS_HELPER_NAME};
pub use process::sandbox::helper_main as process_helper_main;
pub use process::zygote::trampoline_main as process_zygote_main;
pub use registry::*;
