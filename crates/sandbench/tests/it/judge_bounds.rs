//! Every bound of a judge fails closed (issue 42, item 4 and "every bound
//! fails closed"): a program that buries a file at the file-size limit
//! where a bounded look would not reach it — behind more names than a walk
//! reads, deeper than it descends, in a directory it cannot open — reads
//! `violation` (the file was found anyway) or `incomplete` (the bound that
//! was hit is named), never `ok`; and a flood of names with nothing over a
//! limit behind it reads `incomplete`, naming the bound. One table, run in
//! a session call and in a fresh sandbox on every tier that runs here.

use crate::support::docker_common::{block_on, tier_ready};

use std::sync::Arc;
use std::time::Duration;

use sandbench::config::Config;
use sandbench::report::{Outcome, RunReport};
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

/// The file-size limit of every row.
const LIMIT: u64 = 1 << 20;
/// More names than any judge's walk reads in one mount (100,000).
const FLOOD: usize = 100_010;

fn tier(name: &str) -> Arc<dyn Tier> {
    std::env::set_var("SANDBENCH_HELPER", env!("CARGO_BIN_EXE_sandbench"));
    // No warm pool: a pool of this test's runtime would still be making
    // containers when the runtime ends (left to the next start's reaper).
    let mut config = Config::load().unwrap();
    config.docker.pool_size = 0;
    sandbench::tier::by_name(name, &config).unwrap()
}

fn limits() -> Limits {
    Limits {
        // Names cost the kernel's memory (dentries), charged to the sandbox.
        memory_bytes: 512 << 20,
        wall_time: Duration::from_secs(120),
        cpu_time: Duration::from_secs(60),
        file_size_bytes: LIMIT,
        // Docker gives a scratch mount one inode per 4 KiB, and a tmpfs
        // link takes an inode slot: room for the floods' names.
        disk_bytes: 1 << 30,
        ..Limits::default()
    }
}

/// A file of exactly the limit at `path` (allowed: the limit is reached,
/// not crossed, so nothing fails and the program says nothing).
fn capped(path: &str) -> String {
    format!(
        "os.makedirs(os.path.dirname({path:?}), exist_ok=True)\nwith open({path:?}, 'wb') as f:\n    f.write(b'x' * {LIMIT})\n"
    )
}

/// `n` names for one empty file under `dir` (links: no inode each).
fn names(dir: &str, n: usize) -> String {
    format!("os.makedirs({dir:?})\nopen({dir:?} + '/e', 'w').close()\nfor i in range({n}):\n    os.link({dir:?} + '/e', {dir:?} + '/n%d' % i)\n")
}

struct Row {
    name: &'static str,
    code: String,
    /// A file at the limit is behind the bound: `violation` or `incomplete`.
    /// Without one: exactly `incomplete`, naming `bound`.
    capped: bool,
    bound: Option<&'static str>,
}

fn rows() -> Vec<Row> {
    let deep = (0..70).map(|_| "d").collect::<Vec<_>>().join("/");
    vec![
        // Issue 42, item 4: a 5,000-name walk stopped before the file. The
        // file's folder between two of names: a directory lists its names
        // oldest first or newest first, and either way a walk meets names
        // first.
        Row {
            name: "10,002 empty names, and a capped file behind them",
            code: format!("{}{}{}", names("a", 5_001), capped("z/big"), names("b", 5_001)),
            capped: true,
            bound: None,
        },
        Row {
            name: "more names than the walk reads, and a capped file behind them",
            code: format!("{}{}{}", names("a", FLOOD), capped("z/big"), names("b", FLOOD)),
            capped: true,
            bound: None,
        },
        Row {
            name: "a capped file deeper than the walk descends",
            code: capped(&format!("{deep}/big")),
            capped: true,
            bound: None,
        },
        Row {
            name: "a capped file in a directory nobody may open",
            code: format!("{}os.chmod('locked', 0)\n", capped("locked/big")),
            capped: true,
            bound: None,
        },
        Row {
            name: "more names than the walk reads, nothing over a limit",
            code: names("a", FLOOD),
            capped: false,
            bound: Some("scratch_walk_entries"),
        },
        Row {
            name: "directories deeper than the walk descends, nothing over a limit",
            code: format!("os.makedirs({deep:?})\n"),
            capped: false,
            bound: Some("scratch_walk_depth"),
        },
    ]
}

fn check(tier: &str, how: &str, row: &Row, r: &RunReport) -> Result<(), String> {
    let what = format!("{tier} {how}: {}: {} · incomplete {:?}", row.name, r.summary_line(), r.incomplete);
    if r.stderr.contains("No space left on device") && row.code.contains("os.link") {
        // The tier's inode quota stopped the names first (the process
        // tier's 4096 per mount: below every walk's bound, so its walk
        // reads them all): that is a disk violation, never ok.
        return match r.has_violation(sandbench::event::ViolationKind::Disk) {
            true => Ok(()),
            false => Err(format!("{what}: names refused for want of inodes, and no disk violation")),
        };
    }
    if r.exit.code != Some(0) || r.outcome == Outcome::Error {
        return Err(format!("{what}: the row's program did not run to its end: {}", r.stderr));
    }
    if r.outcome == Outcome::Ok {
        return Err(format!("{what}: read ok"));
    }
    if row.capped {
        let found = r.outcome == Outcome::Violation && r.has_violation(sandbench::event::ViolationKind::FileSize);
        let named = r.outcome == Outcome::Incomplete && !r.incomplete.is_empty();
        if !found && !named {
            return Err(format!("{what}: neither the file found nor a bound named"));
        }
    } else if r.outcome != Outcome::Incomplete || !r.incomplete.iter().any(|b| Some(b.bound.as_str()) == row.bound) {
        return Err(format!("{what}: expected incomplete naming {:?}", row.bound));
    }
    Ok(())
}

fn spec(code: &str) -> RunSpec {
    let mut s = RunSpec::new(Language::Python, format!("import os\n{code}"));
    s.limits = limits();
    s
}

/// Every row in a session (a call each) and in a fresh sandbox; the
/// failures, all of them.
async fn table(name: &str, fresh: bool) -> Vec<String> {
    let t = tier(name);
    let mut bad = vec![];
    for row in rows() {
        // A session per row: each starts from an empty scratch.
        let s = Session::open(t.clone(), SessionSpec::new(limits())).await.unwrap();
        let r = s.run(spec(&row.code)).await.unwrap();
        bad.extend(check(name, "session call", &row, &r).err());
        s.close().await;
        if fresh {
            let r = sandbench::runner::run(t.clone(), spec(&row.code)).await;
            bad.extend(check(name, "fresh run", &row, &r).err());
        }
    }
    bad
}

#[sandbench_testkit::test(needs = ["process"])]
fn process_judges_never_read_ok_past_their_bounds() {
    let bad = block_on(table("process", true));
    assert!(bad.is_empty(), "{bad:#?}");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_judges_never_read_ok_past_their_bounds() {
    if !tier_ready("docker") {
        return;
    }
    let bad = block_on(table("docker", true));
    assert!(bad.is_empty(), "{bad:#?}");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_judges_never_read_ok_past_their_bounds() {
    if !tier_ready("gvisor") {
        return;
    }
    let bad = block_on(table("gvisor", false));
    assert!(bad.is_empty(), "{bad:#?}");
}
