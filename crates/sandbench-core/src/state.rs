//! What sandbench measured last, kept as JSON in the state dir
//! (`config::state_dir()`) so that `sandbench report --reuse` and the
//! workbench's frontier can show it without running it again: the last
//! gauntlet, the last latency comparison, the last `bench` of each tier.
//! Files are written whole (temporary file, then rename): a crash never
//! leaves half a result. Sandbox output in a saved gauntlet is cut to a head:
//! the report shows evidence, not floods.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::bench::BenchReport;
use crate::compare::Summary;
use crate::gauntlet::Matrix;
use crate::share::LatencyRun;

/// Bytes of each stream of a cell's output kept in a saved gauntlet.
pub const OUTPUT_HEAD: usize = 4096;

/// A saved result and when it was taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved<T> {
    /// Seconds since 1970 (UTC).
    pub saved_at: u64,
    pub sandbench_version: String,
    pub data: T,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn write<T: Serialize>(dir: &Path, name: &str, data: T) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let saved = Saved { saved_at: now(), sandbench_version: env!("CARGO_PKG_VERSION").into(), data };
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&saved)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> anyhow::Result<Option<Saved<T>>> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .with_context(|| format!("{} is not a result this sandbench can read; run it again", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn head(s: &mut String, truncated: &mut bool) {
    if s.len() > OUTPUT_HEAD {
        let mut end = OUTPUT_HEAD;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        *truncated = true;
    }
}

pub const GAUNTLET: &str = "gauntlet.json";
pub const LATENCY: &str = "latency.json";
pub const COMPARE: &str = "compare.json";

/// Keep `m` as the last gauntlet: outputs cut to `OUTPUT_HEAD`, and the
/// host's secret (the canary a sample may have printed) never written to disk.
pub fn save_gauntlet_in(dir: &Path, m: &Matrix, secret: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut m = m.clone();
    for c in &mut m.cells {
        for (s, t) in [
            (&mut c.report.stdout, &mut c.report.stdout_truncated),
            (&mut c.report.stderr, &mut c.report.stderr_truncated),
        ] {
            if let Some(k) = secret.filter(|k| !k.is_empty()) {
                *s = crate::egress::redact(s, k, "[the host's secret, redacted]");
                head(s, t);
                // A cut may leave the start of one: drop it too.
                if let Some(n) = (1..k.len()).rev().find(|n| k.is_char_boundary(*n) && s.ends_with(&k[..*n])) {
                    s.truncate(s.len() - n);
                }
            } else {
                head(s, t);
            }
        }
    }
    write(dir, GAUNTLET, m)
}

pub fn load_gauntlet_in(dir: &Path) -> anyhow::Result<Option<Saved<Matrix>>> {
    read(dir, GAUNTLET)
}

/// The latency benchmark of `sandbench report` (print(1) on every tier, and
/// the host's responsiveness meanwhile).
pub fn save_latency_in(dir: &Path, s: &LatencyRun) -> anyhow::Result<PathBuf> {
    write(dir, LATENCY, s)
}

pub fn load_latency_in(dir: &Path) -> anyhow::Result<Option<Saved<LatencyRun>>> {
    read(dir, LATENCY)
}

/// The last `sandbench compare` (any program).
pub fn save_compare_in(dir: &Path, s: &Summary) -> anyhow::Result<PathBuf> {
    write(dir, COMPARE, s)
}

pub fn load_compare_in(dir: &Path) -> anyhow::Result<Option<Saved<Summary>>> {
    read(dir, COMPARE)
}

fn bench_name(tier: &str) -> String {
    let safe: String = tier.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    format!("bench-{safe}.json")
}

/// The last `sandbench bench` of `r.tier`.
pub fn save_bench_in(dir: &Path, r: &BenchReport) -> anyhow::Result<PathBuf> {
    write(dir, &bench_name(&r.tier), r)
}

pub fn load_bench_in(dir: &Path, tier: &str) -> anyhow::Result<Option<Saved<BenchReport>>> {
    read(dir, &bench_name(tier))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{self, Mode};
    use crate::gauntlet::canary::Findings;
    use crate::report::{Outcome, RunReport};

    fn matrix() -> Matrix {
        let mut r = RunReport::failed("process", "python", "flood", "");
        r.outcome = Outcome::Violation;
        r.error = None;
        r.stdout = "é".repeat(OUTPUT_HEAD);
        let sample = crate::samples::Sample::parse(
            Path::new("hostile/flood.py"),
            "# name: flood\n# tries: x\n# must: y\n# expect: *=violation:output_limit\nprint(1)\n".into(),
        )
        .unwrap();
        let cell = crate::gauntlet::judge(&sample, "process", r, Findings::default());
        Matrix {
            tiers: vec!["process".into()],
            skipped_tiers: vec![("docker".into(), "no daemon".into())],
            samples: vec!["flood".into()],
            cells: vec![cell],
            latency: vec![],
            mismatches: 1,
            cancelled: false,
            scales: vec![],
        }
    }

    #[test]
    fn a_gauntlet_comes_back_as_saved_with_its_output_cut() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_gauntlet_in(d.path()).unwrap().is_none());
        let mut m = matrix();
        save_gauntlet_in(d.path(), &m, None).unwrap();
        let back = load_gauntlet_in(d.path()).unwrap().unwrap();
        assert_eq!(back.sandbench_version, env!("CARGO_PKG_VERSION"));
        let c = &back.data.cells[0];
        assert_eq!(c.verdict, m.cells[0].verdict);
        assert_eq!(c.sample, "flood");
        assert!(c.report.stdout.len() <= OUTPUT_HEAD && c.report.stdout_truncated);
        assert_eq!(back.data.skipped_tiers, m.skipped_tiers);
        // Only the finished file is there.
        let names: Vec<String> =
            std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names, [GAUNTLET]);
        // The secret, whole or cut at the head's end, is not written.
        m.cells[0].report.stdout = format!("{}sk-secret-value", "x".repeat(OUTPUT_HEAD - 5));
        // In any spelling of the scrubber's table too.
        m.cells[0].report.stderr = "key=sk-secret-value\nq=%73%6b%2d%73%65%63%72%65%74%2d%76%61%6c%75%65\n".into();
        save_gauntlet_in(d.path(), &m, Some("sk-secret-value")).unwrap();
        let text = std::fs::read_to_string(d.path().join(GAUNTLET)).unwrap();
        assert!(!text.contains("sk-s") && !text.contains("%73%6b"), "{}", &text[text.len().saturating_sub(300)..]);
        assert!(text.contains("key=[the host's secret, redacted]"));
        assert!(text.contains("q=[the host's secret, redacted]"));
    }

    #[test]
    fn latency_and_bench_round_trip_and_garbage_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let summary = compare::summarize(&["process".into()], &[], Mode::Sequential, 1, "print(1)", vec![]);
        let s = LatencyRun { summary, host: crate::share::HostStats::of(&[1.0, 3.0, 2.0]) };
        save_latency_in(d.path(), &s).unwrap();
        assert_eq!(load_latency_in(d.path()).unwrap().unwrap().data, s);
        let b = BenchReport { tier: "../x".into(), program: "print(1)".into(), ..Default::default() };
        let p = save_bench_in(d.path(), &b).unwrap();
        assert_eq!(p.parent().unwrap(), d.path(), "a tier name cannot leave the state dir");
        assert_eq!(load_bench_in(d.path(), "../x").unwrap().unwrap().data.tier, "../x");
        std::fs::write(d.path().join(COMPARE), "{").unwrap();
        let e = load_compare_in(d.path()).unwrap_err().to_string();
        assert!(e.contains("run it again"), "{e}");
    }
}
