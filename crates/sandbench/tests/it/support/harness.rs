//! The integration tests' harness (libtest-mimic): every test registered by
//! `#[sandbench_testkit::test(needs = [...])]`, each need checked once before
//! anything runs. A test whose need is missing here is shown as *ignored*
//! with the reason printed once per need — never run and counted as passed —
//! unless `SANDBENCH_REQUIRE_TIERS` names the need (CI does, for every tier
//! it set up), and then it fails with the reason.
//!
//! Needs: a tier's name (`process`, `docker`, a peer such as `bwrap`: ready as
//! `sandbench doctor` says), `root`, `mcp` (a Python with the MCP SDK),
//! `pidns` (`unshare --pid --fork --mount-proc` works; required with
//! `process`), `report` (Chromium for the report's page), `chromium` (the
//! same browser, for the MCP server's web-page tests), `mcp-ts` (Node with
//! the TypeScript MCP SDK), `slow` (the slow
//! profile, `SANDBENCH_SLOW_TESTS=1`) and `cmd:NAME` (a command on PATH).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use libtest_mimic::{Arguments, Failed, Trial};

/// One registered test (made by the testkit attribute).
pub struct Case {
    pub module: &'static str,
    pub name: &'static str,
    pub needs: &'static [&'static str],
    pub run: fn(),
}

inventory::collect!(Case);

impl Case {
    /// The name libtest would give it: `module::test`, without the crate.
    fn full_name(&self) -> String {
        let m = self.module.split_once("::").map_or("", |(_, rest)| rest);
        if m.is_empty() {
            self.name.to_string()
        } else {
            format!("{m}::{}", self.name)
        }
    }
}

/// Needs named by `SANDBENCH_REQUIRE_TIERS`: missing is a failure.
pub fn required(need: &str) -> bool {
    // A pid namespace is part of what the process tier's tests need.
    let need = if need == "pidns" { "process" } else { need };
    std::env::var("SANDBENCH_REQUIRE_TIERS").unwrap_or_default().split(',').any(|t| t.trim() == need)
}

/// Every tier `sandbench doctor` knows: (available, summary). One call.
fn doctor() -> &'static BTreeMap<String, (bool, String)> {
    static D: OnceLock<BTreeMap<String, (bool, String)>> = OnceLock::new();
    D.get_or_init(|| {
        let out = Command::new(super::common::bin())
            .args(["doctor", "--format", "json"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let mut m = BTreeMap::new();
        if let Ok(o) = out {
            if let Ok(serde_json::Value::Array(all)) = serde_json::from_slice(&o.stdout) {
                for t in all {
                    if let Some(name) = t["tier"].as_str() {
                        let summary = t["summary"].as_str().unwrap_or("").to_string();
                        m.insert(name.to_string(), (t["available"] == true, summary));
                    }
                }
            }
        }
        m
    })
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Why `need` is missing here, or Ok.
fn check(need: &str) -> Result<(), String> {
    if let Some(cmd) = need.strip_prefix("cmd:") {
        return sandbench::host::which(cmd).map(|_| ()).ok_or_else(|| format!("{cmd} is not installed"));
    }
    match need {
        "root" => super::common::is_root().then_some(()).ok_or_else(|| "needs root".into()),
        "pidns" => succeeds(Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]))
            .then_some(())
            .ok_or_else(|| "unshare --pid --fork --mount-proc does not work here".into()),
        "report" | "chromium" => ["chromium", "chromium-browser"]
            .iter()
            .find_map(|c| sandbench::host::which(c))
            .map(|_| ())
            .ok_or_else(|| "the report's browser test needs Chromium (apt-get install chromium)".into()),
        "slow" => (std::env::var("SANDBENCH_SLOW_TESTS").as_deref() == Ok("1"))
            .then_some(())
            .ok_or_else(|| "a slow profile test (run with SANDBENCH_SLOW_TESTS=1)".into()),
        "mcp" => super::common::mcp_python()
            .map(|_| ())
            .ok_or_else(|| "no Python with the MCP SDK (run .ci/setup-mcp.sh or set SANDBENCH_MCP_PYTHON)".into()),
        "mcp-ts" => super::common::mcp_node().map(|_| ()).ok_or_else(|| {
            "no Node with the TypeScript MCP SDK (run .ci/setup-mcp.sh or set SANDBENCH_MCP_NODE)".into()
        }),
        tier => match doctor().get(tier) {
            Some((true, _)) => Ok(()),
            Some((false, why)) => Err(format!("the {tier} tier is unavailable: {why} (sandbench doctor)")),
            None => Err(format!("sandbench doctor does not list a {tier} tier")),
        },
    }
}

/// Would libtest run a test of this name with these arguments?
fn selected(args: &Arguments, name: &str) -> bool {
    let hit = |f: &str| if args.exact { name == f } else { name.contains(f) };
    args.filter.as_deref().is_none_or(hit) && !args.skip.iter().any(|s| hit(s))
}

pub fn main() {
    let args = Arguments::from_args();
    let mut cases: Vec<&Case> = inventory::iter::<Case>.into_iter().collect();
    cases.sort_by_key(|c| c.full_name());
    let mut missing: BTreeMap<&str, (String, usize)> = BTreeMap::new();
    let mut trials = vec![];
    // How long each passing test took: the slowest are printed at the end,
    // so a run that grew shows where (figures, never assertions).
    let took: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Duration, String)>>> = Default::default();
    for c in cases {
        let name = c.full_name();
        // Needs are checked only for tests that would run (a filtered run
        // of TUI tests does not ask the Docker engine anything).
        let mut lacks = vec![];
        if selected(&args, &name) && !args.list {
            for n in c.needs {
                if let Err(why) = check(n) {
                    lacks.push((*n, why));
                }
            }
        }
        let fail: Vec<String> = lacks
            .iter()
            .filter(|(n, _)| required(n))
            .map(|(n, why)| format!("SANDBENCH_REQUIRE_TIERS names {n}, but {why}"))
            .collect();
        for (n, why) in &lacks {
            missing.entry(n).or_insert_with(|| (why.clone(), 0)).1 += 1;
        }
        let ignored = !lacks.is_empty() && fail.is_empty();
        let run = c.run;
        let took = std::sync::Arc::clone(&took);
        trials.push(
            Trial::test(name.clone(), move || {
                if !fail.is_empty() {
                    return Err(Failed::from(fail.join("; ")));
                }
                let t0 = std::time::Instant::now();
                run();
                took.lock().unwrap_or_else(|e| e.into_inner()).push((t0.elapsed(), name));
                Ok(())
            })
            .with_ignored_flag(ignored),
        );
    }
    for (need, (why, n)) in &missing {
        let what = if required(need) { "FAILING (required)" } else { "ignored" };
        eprintln!("sandbench tests: {n} test(s) {what}: {need}: {why}");
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let mut took = std::mem::take(&mut *took.lock().unwrap_or_else(|e| e.into_inner()));
    if took.len() > 1 {
        took.sort_by_key(|t| std::cmp::Reverse(t.0));
        let total: std::time::Duration = took.iter().map(|t| t.0).sum();
        eprintln!(
            "sandbench tests: the slowest of {} passed ({:.0} s in all, in parallel):",
            took.len(),
            total.as_secs_f64()
        );
        for (d, name) in took.iter().take(SLOWEST_SHOWN) {
            eprintln!("  {:>7.1} s  {name}", d.as_secs_f64());
        }
    }
    conclusion.exit();
}

/// How many of the slowest tests a run names at its end.
const SLOWEST_SHOWN: usize = 25;

/// With our own harness a plain `#[test]` is compiled away without a word:
/// such a test would never run. This one fails instead.
#[sandbench_testkit::test]
fn every_test_is_registered_with_the_harness() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut bad = vec![];
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, line) in text.lines().enumerate() {
                let l = line.trim();
                if l == "#[test]" || l.starts_with("#[tokio::test") {
                    bad.push(format!("{}:{}", p.display(), i + 1));
                }
            }
        }
    }
    assert!(bad.is_empty(), "use #[sandbench_testkit::test] (a plain test attribute never runs here): {bad:?}");
}
