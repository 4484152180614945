//! Sample programs (`samples/benign`, `samples/hostile`) and the header that
//! says what each tries and what a sandbox must do about it, per tier:
//!
//! ```text
//! # name: fork-bomb
//! # tries: fork without end until the host's process table is full
//! # must: refuse new processes at the pids limit; the host stays responsive
//! # expect: *=violation:pids microvm=violation:pids|wall_timeout
//! # escaped-if: "ATTACHED"
//! ```
//! (in a JavaScript sample the same lines start with `//`).
//! `expect` lists `tier=outcome[:kind|kind...]`; `egress` is every tier
//! whose traffic sandbench's egress proxy carries (`tier::kinds::proxied`:
//! process, docker, gvisor, microvm) and `*` every tier not otherwise
//! named, a tier's own name first, then `egress`, then `*`; the kinds mean
//! "at least one of these violations". A trailing `?`
//! (`gvisor=violation:disk?`) says the tier does not guarantee it: the
//! violation is what should be seen, but `ok` is no mismatch there (the
//! README's tier section says why). `escaped` (`bwrap=escaped`) declares a
//! known hole of a third-party peer: the cell shows ESCAPED, as declared, so
//! the matrix says which peer lets it through; sandbench's own tiers and `*`
//! may never declare it. `escaped-if` names output that only a breach could
//! produce; `delivers` names output that must arrive (a cell
//! whose report lacks it, without saying it was cut, lost output).
//! `network: allow=...` (optional) runs the sample under that network limit,
//! against the gauntlet's own loopback internet (`gauntlet::internet`;
//! `{http_port}` and `{tls_port}` stand for its ports); a tier that cannot
//! enforce it runs it with none (`{bound_port}` is the bound host's).
//! `secret: NAME@HOST` (with `network:`) gives the run a secret `NAME`
//! bound to `HOST` (the gauntlet's bound host), its value fresh per cell
//! and known only to sandbench: the cell escapes if the value shows up
//! anywhere the program or another host could see it. A tier that takes no
//! secrets runs the sample without one (and the program finds no `NAME`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::event::ViolationKind;
use crate::report::{Outcome, RunReport};
use crate::spec::Language;
use crate::tier::kinds;

#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub outcome: Outcome,
    /// At least one of these violation kinds must appear (empty: any or none).
    pub kinds: Vec<ViolationKind>,
    /// Not guaranteed on this tier: `ok` is accepted too (a `?` suffix).
    pub unguaranteed: bool,
    /// A peer's known hole: the cell escapes, as declared (`escaped`).
    pub escapes: bool,
}

impl Expect {
    pub fn parse(s: &str) -> Result<Expect, String> {
        if s == "escaped" {
            return Ok(Expect { outcome: Outcome::Ok, kinds: vec![], unguaranteed: false, escapes: true });
        }
        let (s, unguaranteed) = match s.strip_suffix('?') {
            Some(rest) => (rest, true),
            None => (s, false),
        };
        let (o, k) = s.split_once(':').unwrap_or((s, ""));
        let outcome = match o {
            "ok" => Outcome::Ok,
            "violation" => Outcome::Violation,
            "error" => Outcome::Error,
            "cancelled" => Outcome::Cancelled,
            other => return Err(format!("unknown outcome '{other}'")),
        };
        let kinds = k
            .split('|')
            .filter(|x| !x.is_empty())
            .map(|x| ViolationKind::parse(x).ok_or_else(|| format!("unknown violation kind '{x}'")))
            .collect::<Result<Vec<_>, _>>()?;
        if unguaranteed && outcome == Outcome::Ok {
            return Err("'ok?' means nothing: a '?' marks a violation the tier does not guarantee".into());
        }
        Ok(Expect { outcome, kinds, unguaranteed, escapes: false })
    }

    /// Does a report meet this expectation? `Err` says how it does not.
    pub fn check(&self, r: &RunReport) -> Result<(), String> {
        if self.escapes {
            // The gauntlet's judge accepts the declared escape before this.
            return Err(format!(
                "declared to escape here (a known hole of this tier), but nothing got out ({})",
                r.summary_line()
            ));
        }
        if self.unguaranteed && r.outcome == Outcome::Ok {
            return Ok(());
        }
        if r.outcome != self.outcome {
            return Err(format!(
                "expected outcome {}, got {} ({})",
                self.outcome.name(),
                r.outcome.name(),
                r.summary_line()
            ));
        }
        if !self.kinds.is_empty() && !self.kinds.iter().any(|k| r.has_violation(*k)) {
            let want: Vec<_> = self.kinds.iter().map(|k| k.name()).collect();
            let got: Vec<_> = r.violations.iter().map(|v| v.kind.name()).collect();
            return Err(format!("expected a {} violation, got [{}]", want.join("|"), got.join(", ")));
        }
        Ok(())
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.escapes {
            return f.write_str("escaped");
        }
        f.write_str(self.outcome.name())?;
        if !self.kinds.is_empty() {
            let k: Vec<_> = self.kinds.iter().map(|k| k.name()).collect();
            write!(f, ":{}", k.join("|"))?;
        }
        if self.unguaranteed {
            f.write_str("?")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub path: PathBuf,
    pub name: String,
    pub language: Language,
    /// "benign" or "hostile" (the directory it came from).
    pub group: String,
    pub tries: String,
    pub must: String,
    pub expect: BTreeMap<String, Expect>,
    pub escaped_if: Vec<String>,
    /// Output that must reach the report (unless it says the output was cut).
    pub delivers: Vec<String>,
    /// The network limit it runs under (with the internet's placeholders).
    pub network: Option<String>,
    /// `NAME@HOST` of its `secret:` line (with the internet's placeholders).
    pub secret: Option<String>,
    pub code: String,
}

impl Sample {
    /// What `tier` must do: its own item, else the `egress` class's if the
    /// proxy carries its traffic, else `*`'s.
    pub fn expect_for(&self, tier: &str) -> Option<&Expect> {
        self.expect
            .get(tier)
            .or_else(|| kinds::proxied().any(|t| t == tier).then(|| self.expect.get(kinds::PROXIED_CLASS)).flatten())
            .or_else(|| self.expect.get("*"))
    }

    pub fn is_hostile(&self) -> bool {
        self.group == "hostile"
    }

    pub fn parse(path: &Path, code: String) -> anyhow::Result<Sample> {
        let language = Language::from_path(path)
            .with_context(|| format!("{}: unknown language (use .py, .sh or .js)", path.display()))?;
        // The header is in the language's own line comments.
        let comment = if language == Language::Javascript { "//" } else { "#" };
        let mut s = Sample {
            path: path.to_path_buf(),
            name: path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            language,
            group: path
                .parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            tries: String::new(),
            must: String::new(),
            expect: BTreeMap::new(),
            escaped_if: vec![],
            delivers: vec![],
            network: None,
            secret: None,
            code: String::new(),
        };
        for line in code.lines() {
            let Some(rest) = line.strip_prefix(comment) else { break };
            let Some((key, value)) = rest.trim().split_once(':') else { continue };
            let value = value.trim();
            match key.trim() {
                "name" => s.name = value.to_string(),
                "tries" => s.tries = value.to_string(),
                "must" => s.must = value.to_string(),
                "expect" => {
                    for item in value.split_whitespace() {
                        let (tier, e) = item
                            .split_once('=')
                            .with_context(|| format!("{}: bad expect item '{item}'", path.display()))?;
                        let e = Expect::parse(e).map_err(|m| anyhow::anyhow!("{}: {m}", path.display()))?;
                        if e.escapes && (tier == "*" || kinds::reserved(tier)) {
                            bail!(
                                "{}: '{tier}=escaped': only a third-party peer's known hole may be declared",
                                path.display()
                            );
                        }
                        s.expect.insert(tier.to_string(), e);
                    }
                }
                "escaped-if" => s.escaped_if.push(value.trim_matches('"').to_string()),
                "delivers" => s.delivers.push(value.trim_matches('"').to_string()),
                "network" => {
                    let filled =
                        value.replace("{http_port}", "1").replace("{tls_port}", "1").replace("{bound_port}", "1");
                    filled
                        .parse::<crate::egress::Network>()
                        .map_err(|e| anyhow::anyhow!("{}: network: {e}", path.display()))?;
                    s.network = Some(value.to_string());
                }
                "secret" => {
                    let (name, host) = value
                        .split_once('@')
                        .with_context(|| format!("{}: secret: NAME@HOST, got '{value}'", path.display()))?;
                    let filled = host.replace("{bound_port}", "1");
                    crate::egress::secrets::Declared::parse(&format!("{name}=env:GAUNTLET_SECRET@{filled}"))
                        .map_err(|e| anyhow::anyhow!("{}: secret: {e}", path.display()))?;
                    s.secret = Some(value.to_string());
                }
                _ => {}
            }
        }
        if s.secret.is_some() && s.network.is_none() {
            bail!("{}: a 'secret:' line needs a 'network:' line that allows its host", path.display());
        }
        if s.expect.is_empty() {
            bail!("{}: the header has no 'expect:' line", path.display());
        }
        s.code = code;
        Ok(s)
    }
}

/// Load every sample under `dir` (its `benign/` and `hostile/` folders, or
/// the files directly in it), sorted benign first, then by name.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<Sample>> {
    let mut files = vec![];
    let mut visit = |d: &Path| -> anyhow::Result<()> {
        for e in std::fs::read_dir(d).with_context(|| format!("cannot read samples in {}", d.display()))? {
            let p = e?.path();
            if p.is_file() && Language::from_path(&p).is_some() {
                files.push(p);
            }
        }
        Ok(())
    };
    visit(dir)?;
    for sub in ["benign", "hostile"] {
        let d = dir.join(sub);
        if d.is_dir() {
            visit(&d)?;
        }
    }
    let mut out = vec![];
    for p in files {
        let code = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        out.push(Sample::parse(&p, code)?);
    }
    out.sort_by(|a, b| (a.is_hostile(), &a.name).cmp(&(b.is_hostile(), &b.name)));
    Ok(out)
}

/// The samples folder: `$SANDBENCH_SAMPLES`, else `samples/` next to the
/// current directory or the executable's source tree.
pub fn default_dir(env: &crate::config::HostEnv) -> PathBuf {
    if let Some(d) = &env.samples_dir {
        return d.clone();
    }
    let cwd = PathBuf::from("samples");
    if cwd.is_dir() {
        return cwd;
    }
    shipped_dir()
}

/// The samples shipped in the source tree this binary was built from.
pub fn shipped_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header() {
        let code = "# name: x\n# tries: a\n# must: b\n# expect: *=violation:pids|cpu_time docker=ok\n# escaped-if: \"ATTACHED\"\nprint(1)\n# not header\n";
        let s = Sample::parse(Path::new("samples/hostile/x.py"), code.into()).unwrap();
        assert_eq!(s.name, "x");
        assert_eq!(s.group, "hostile");
        assert_eq!(s.expect_for("process").unwrap().kinds, vec![ViolationKind::Pids, ViolationKind::CpuTime]);
        assert_eq!(s.expect_for("docker").unwrap().outcome, Outcome::Ok);
        assert_eq!(s.escaped_if, vec!["ATTACHED"]);
        assert_eq!(s.expect_for("process").unwrap().to_string(), "violation:pids|cpu_time");
        assert!(s.network.is_none());
        let n = Sample::parse(
            Path::new("samples/hostile/n.py"),
            "# expect: *=ok\n# network: allow=allowed.gauntlet.test:{http_port}\n".into(),
        )
        .unwrap();
        assert_eq!(n.network.as_deref(), Some("allow=allowed.gauntlet.test:{http_port}"));
        assert!(Sample::parse(Path::new("a.py"), "# expect: *=ok\n# network: everything\n".into()).is_err());
    }

    #[test]
    fn javascript_headers_are_line_comments() {
        let code = "// name: js-x\n// tries: a\n// expect: *=violation:memory\nconst a = [];\n// not header\n";
        let s = Sample::parse(Path::new("samples/hostile/x.js"), code.into()).unwrap();
        assert_eq!((s.name.as_str(), s.language), ("js-x", Language::Javascript));
        assert_eq!(s.expect_for("docker").unwrap().kinds, vec![ViolationKind::Memory]);
        // A '#' header is not JavaScript (and would not parse as a program).
        assert!(Sample::parse(Path::new("x.js"), "# expect: *=ok\n".into()).is_err());
    }

    #[test]
    fn shipped_samples_include_javascript() {
        let all = load_dir(&shipped_dir()).unwrap();
        assert!(all.iter().any(|s| s.language == Language::Javascript && s.is_hostile()));
    }

    #[test]
    fn unguaranteed_expectations_accept_ok_and_nothing_else() {
        let e = Expect::parse("violation:disk?").unwrap();
        assert!(e.unguaranteed);
        assert_eq!(e.to_string(), "violation:disk?");
        let mut r = RunReport::failed("gvisor", "python", "x", "e");
        r.outcome = Outcome::Ok;
        r.error = None;
        assert!(e.check(&r).is_ok(), "ok is accepted where the tier does not guarantee the hit");
        r.outcome = Outcome::Error;
        assert!(e.check(&r).is_err());
        r.outcome = Outcome::Violation;
        assert!(e.check(&r).is_err(), "a violation of another kind is still a mismatch");
        assert!(Expect::parse("ok?").is_err());
        assert!(!Expect::parse("violation:disk").unwrap().unguaranteed);
    }

    #[test]
    fn a_peer_may_declare_a_known_escape_and_sandbench_tiers_never() {
        let s = Sample::parse(Path::new("h/a.py"), "# expect: *=ok bwrap=escaped\n".into()).unwrap();
        let e = s.expect_for("bwrap").unwrap();
        assert!(e.escapes);
        assert_eq!(e.to_string(), "escaped");
        let mut r = RunReport::failed("bwrap", "python", "x", "e");
        r.outcome = Outcome::Ok;
        assert!(e.check(&r).is_err(), "a declared escape that did not happen is stale");
        assert!(!s.expect_for("process").unwrap().escapes);
        for bad in ["*=escaped", "process=escaped", "docker=escaped", "microvm=escaped"] {
            assert!(Sample::parse(Path::new("h/a.py"), format!("# expect: {bad}\n")).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tier_s_own_item_beats_the_egress_class_which_beats_the_rest() {
        let s = Sample::parse(
            Path::new("h/a.py"),
            "# expect: *=ok egress=violation:network docker=violation:network|secret_misdirected\n".into(),
        )
        .unwrap();
        let got = |t: &str| s.expect_for(t).unwrap().to_string();
        assert_eq!(got("docker"), "violation:network|secret_misdirected", "the tier's own item first");
        for t in kinds::proxied().filter(|t| *t != "docker") {
            assert_eq!(got(t), "violation:network", "{t} carries its traffic through the proxy");
        }
        // Not proxied: its provider filters (e2b), or a peer.
        assert_eq!(got("e2b"), "ok");
        assert_eq!(got("bwrap"), "ok");
        // Without `*`, a tier outside the class has no expectation.
        let only = Sample::parse(Path::new("h/b.py"), "# expect: egress=ok\n".into()).unwrap();
        assert!(only.expect_for("process").is_some() && only.expect_for("e2b").is_none());
        // The class holds only sandbench's own tiers: it never escapes.
        assert!(Sample::parse(Path::new("h/c.py"), "# expect: *=ok egress=escaped\n".into()).is_err());
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(Sample::parse(Path::new("a.py"), "print(1)".into()).is_err());
        assert!(Sample::parse(Path::new("a.py"), "# expect: *=weird\n".into()).is_err());
        assert!(Sample::parse(Path::new("a.py"), "# expect: *=violation:nope\n".into()).is_err());
        assert!(Sample::parse(Path::new("a.rb"), "# expect: *=ok\n".into()).is_err());
    }

    #[test]
    fn shipped_samples_all_parse() {
        let all = load_dir(&shipped_dir()).unwrap();
        assert!(all.iter().filter(|s| s.is_hostile()).count() >= 20);
        assert!(all.iter().any(|s| !s.is_hostile()));
        for s in &all {
            assert!(!s.tries.is_empty() && !s.must.is_empty(), "{} lacks tries/must", s.path.display());
        }
    }
}
