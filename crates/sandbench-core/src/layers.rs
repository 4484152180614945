//! The engine's layers, kept by a test: every source file of this crate is
//! given a layer by [`LAYERS`] (the one table; docs/architecture.md draws
//! it), and a file may name modules of its own layer and the layers below,
//! never one above. A `use crate::…`, a `super::…`, a child module or an
//! inline `crate::…` path all count: each is a dependency the compiler
//! would let through. `#[cfg(test)]` modules are left out (a test may
//! assemble higher layers to exercise a lower one).
//!
//! Why a test and not crates: the layers are one crate's modules (the
//! front end uses them through one dependency), and a test names the
//! offending line, which a crate boundary's "unresolved import" does not.

mod scan;

use std::collections::BTreeMap;
use std::path::Path;

use scan::{crate_files, violations, Table};

/// Bottom first. A module belongs to the entry with the longest matching
/// prefix (`egress::policy` is a plain type; the rest of `egress` is the
/// proxy the tiers start).
const LAYERS: &Table = &[
    // Plain types and host facts: what a run is, what it emits, what it
    // reports, the network limit's types, the config, small utilities.
    (
        "types",
        &[
            "units",
            "sanitize",
            "fsafe",
            "host",
            "http",
            "stats",
            "highwater",
            "bound",
            "owner",
            "setup",
            "spec",
            "event",
            "report",
            "config",
            "egress::policy",
            "egress::resolve",
            "egress::secrets",
            "egress::ca",
        ],
    ),
    // What every tier implements (the `Tier` trait and its answers), and
    // the table of the own tiers (plain data every list of tiers reads).
    ("contract", &["tier::contract", "tier::kinds"]),
    // What drives any `dyn Tier` and what tiers use while they run: the
    // runner, sessions, the judge, the egress proxy, background teardowns,
    // the data-library check every tier's probe asks.
    ("engine", &["runner", "session", "judge", "egress", "tier::background", "tier::libraries"]),
    // The tiers themselves (a tier may use another's parts: peers run in
    // the process tier's cgroups).
    ("tiers", &["tier::process", "tier::docker", "tier::microvm", "tier::e2b", "tier::peer"]),
    // The one place that names the tiers: build by name, reap, shut down.
    ("registry", &["tier", "tier::registry"]),
    // What is made of runs: benches, the gauntlet, soak, compare, the agent
    // loop, sharing, the MCP server's policy and files.
    (
        "products",
        &[
            "bench",
            "slowdown",
            "soak",
            "compare",
            "gauntlet",
            "samples",
            "frontier",
            "share",
            "state",
            "runlog",
            "agent",
            "policy",
            "admission",
            "session_files",
            "layers",
        ],
    ),
];

/// Where [`LAYERS`] is, for the test's advice.
const WHERE: &str = "LAYERS in src/layers.rs";

#[test]
fn no_layer_imports_a_higher_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = crate_files(&src);
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), src.display());
    let v = violations(LAYERS, WHERE, &files);
    assert!(v.is_empty(), "{} upward import(s):\n{}", v.len(), v.join("\n"));
}

/// The checker itself: an upward `use`, an inline upward path and an upward
/// `super::` are each caught; downward ones and comments are not.
#[test]
fn an_upward_import_is_named() {
    let file = |m: &str, src: &str| {
        let module: Vec<String> = m.split("::").map(String::from).collect();
        (module, (format!("src/{}.rs", m.replace("::", "/")), src.to_string()))
    };
    let files: BTreeMap<_, _> = [
        file("event", "//! see crate::runner\nuse crate::spec::Limits;\nuse crate::{units, runner::run};\n"),
        file("judge", "fn f() { let x = \"crate::bench\"; crate::event::MAX_DETAIL; crate::gauntlet::run(); }\n"),
        file("tier::contract", "use super::registry::by_name;\nuse super::super::spec::RunSpec;\n"),
        file("tier::docker::pool", "use super::Pool;\nuse crate::tier::contract::Tier;\n"),
        file("egress::policy", "#[cfg(test)]\nmod tests {\n    use crate::runner::run;\n}\n"),
    ]
    .into_iter()
    .collect();
    let v = violations(LAYERS, WHERE, &files);
    let joined = v.join("\n");
    assert_eq!(v.len(), 3, "{joined}");
    assert!(
        joined.contains("src/event.rs:3: `crate::runner::run` — event (types) reaches up into runner::run (engine)"),
        "{joined}"
    );
    assert!(joined.contains("src/judge.rs:1: `crate::gauntlet::run`"), "{joined}");
    assert!(joined.contains("src/tier/contract.rs:1: `super::registry::by_name`"), "{joined}");
}
