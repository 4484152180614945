//! Sample programs (`samples/benign`, `samples/hostile`) and their header:
//!
//! ```text
//! # name: fork-bomb
//! # tries: fork without end until the host's process table is full
//! # must: refuse new processes at the pids limit; the host stays responsive
//! # expect: *=violation:pids|cpu_time|wall_timeout microvm=violation:pids|wall_timeout
//! ```
//! `expect` = space-separated `tier=outcome[:kind|kind...]`; `*` is any tier
//! not named; kinds = at least one of them must appear.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::event::ViolationKind;
use crate::report::Outcome;
use crate::spec::Language;

#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub outcome: Outcome,
    /// At least one of these must appear (empty: no constraint).
    pub kinds: Vec<ViolationKind>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub path: PathBuf,
    pub name: String,
    pub language: Language,
    pub tries: String,
    pub must: String,
    /// Tier name (or `*`) → expectation.
    pub expect: BTreeMap<String, Expect>,
    pub code: String,
}

impl Sample {
    /// The expectation for `tier`, falling back to `*`.
    pub fn expect_for(&self, tier: &str) -> Option<&Expect> {
        self.expect.get(tier).or_else(|| self.expect.get("*"))
    }

    /// Parse one sample file's text.
    pub fn parse(path: &Path, code: String) -> anyhow::Result<Sample> {
        let language = Language::from_path(path)
            .with_context(|| format!("{}: unknown language (use .py or .sh)", path.display()))?;
        let mut name = None;
        let mut tries = String::new();
        let mut must = String::new();
        let mut expect = BTreeMap::new();
        for line in code.lines() {
            let Some(rest) = line.strip_prefix('#') else {
                if line.trim().is_empty() {
                    continue;
                }
                break;
            };
            let Some((key, value)) = rest.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "name" => name = Some(value.to_string()),
                "tries" => tries = value.to_string(),
                "must" => must = value.to_string(),
                "expect" => {
                    expect = parse_expect(value)
                        .with_context(|| format!("{}: bad expect line", path.display()))?
                }
                _ => {}
            }
        }
        let name = match name {
            Some(n) => n,
            None => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        Ok(Sample {
            path: path.to_path_buf(),
            name,
            language,
            tries,
            must,
            expect,
            code,
        })
    }
}

/// Parse `*=violation:pids|cpu_time microvm=ok`.
pub fn parse_expect(s: &str) -> anyhow::Result<BTreeMap<String, Expect>> {
    let mut out = BTreeMap::new();
    for item in s.split_whitespace() {
        let (tier, rest) = item
            .split_once('=')
            .with_context(|| format!("'{item}': expected tier=outcome[:kinds]"))?;
        let (outcome, kinds) = match rest.split_once(':') {
            Some((o, k)) => (o, Some(k)),
            None => (rest, None),
        };
        let outcome = match outcome {
            "ok" => Outcome::Ok,
            "violation" => Outcome::Violation,
            "error" => Outcome::Error,
            "cancelled" => Outcome::Cancelled,
            o => bail!("'{item}': unknown outcome '{o}'"),
        };
        let mut ks = vec![];
        for k in kinds
            .into_iter()
            .flat_map(|k| k.split('|'))
            .filter(|k| !k.is_empty())
        {
            ks.push(
                ViolationKind::parse(k)
                    .with_context(|| format!("'{item}': unknown violation kind '{k}'"))?,
            );
        }
        out.insert(tier.to_string(), Expect { outcome, kinds: ks });
    }
    Ok(out)
}

/// Every `.py` / `.sh` sample directly in `dir`, sorted by file name.
pub fn load_dir(dir: impl AsRef<Path>) -> anyhow::Result<Vec<Sample>> {
    let dir = dir.as_ref();
    let mut paths = vec![];
    for entry in std::fs::read_dir(dir)
        .with_context(|| format!("cannot read sample directory {}", dir.display()))?
    {
        let path = entry?.path();
        if path.is_file() && Language::from_path(&path).is_some() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let code = std::fs::read_to_string(&p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            Sample::parse(&p, code)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_parsed() {
        let code = "# name: fork-bomb\n# tries: fork forever\n# must: refuse at the pids limit\n# expect: *=violation:pids|cpu_time microvm=violation:wall_timeout docker=ok\nimport os\n# name: not-a-header\n";
        let s = Sample::parse(Path::new("x/fork.py"), code.into()).unwrap();
        assert_eq!(s.name, "fork-bomb");
        assert_eq!(s.language, Language::Python);
        assert_eq!(s.tries, "fork forever");
        assert_eq!(s.must, "refuse at the pids limit");
        let e = s.expect_for("process").unwrap();
        assert_eq!(e.outcome, Outcome::Violation);
        assert_eq!(e.kinds, [ViolationKind::Pids, ViolationKind::CpuTime]);
        assert_eq!(
            s.expect_for("microvm").unwrap().kinds,
            [ViolationKind::WallTimeout]
        );
        assert_eq!(
            s.expect_for("docker").unwrap(),
            &Expect {
                outcome: Outcome::Ok,
                kinds: vec![]
            }
        );
    }

    #[test]
    fn bad_expect_is_an_error() {
        assert!(parse_expect("*=maybe").is_err());
        assert!(parse_expect("*=violation:nope").is_err());
        assert!(parse_expect("process").is_err());
        let s = Sample::parse(Path::new("a.sh"), "echo hi\n".into()).unwrap();
        assert_eq!(s.name, "a");
        assert!(s.expect_for("process").is_none());
    }

    #[test]
    fn load_dir_reads_sorted_programs_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.sh"), "# name: b\necho b\n").unwrap();
        std::fs::write(d.path().join("a.py"), "# name: a\nprint(1)\n").unwrap();
        std::fs::write(d.path().join("README.md"), "no").unwrap();
        let s = load_dir(d.path()).unwrap();
        assert_eq!(
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
