//! What to run and under which limits: the input every tier receives.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Languages a sandbox knows how to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Language {
    Python,
    Sh,
    /// Node.js (`node`): Debian's `nodejs` or any `node` on the tier's PATH.
    Javascript,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::Python, Language::Sh, Language::Javascript];

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// File name the program gets inside the sandbox.
    pub fn file_name(self) -> &'static str {
        match self {
            Language::Python => "main.py",
            Language::Sh => "main.sh",
            Language::Javascript => "main.js",
        }
    }

    /// File name for this program: [`Language::file_name`], except that
    /// JavaScript written as an ES module (`import`/`export` statements)
    /// becomes `main.mjs`, since Node treats a `.js` file as CommonJS and
    /// would reject the syntax.
    pub fn program_file(self, code: &str) -> &'static str {
        if self == Language::Javascript && looks_like_es_module(code) {
            return "main.mjs";
        }
        self.file_name()
    }

    /// The usual file extension (what the workbench saves a new file as and
    /// what its highlighter is chosen by).
    pub fn extension(self) -> &'static str {
        match self {
            Language::Python => "py",
            Language::Sh => "sh",
            Language::Javascript => "js",
        }
    }

    /// The Debian package that installs [`Language::interpreter`] (what
    /// `doctor` tells a user to install).
    pub fn debian_package(self) -> &'static str {
        match self {
            Language::Python => "python3",
            Language::Sh => "dash",
            Language::Javascript => "nodejs",
        }
    }

    /// The interpreter command line, with the program's path appended by the tier.
    /// Python runs unbuffered so output streams live instead of arriving at exit.
    pub fn interpreter(self) -> &'static [&'static str] {
        match self {
            Language::Python => &["python3", "-u"],
            Language::Sh => &["/bin/sh"],
            // Node writes to pipes synchronously on Linux: output streams live.
            Language::Javascript => &["node"],
        }
    }

    /// Guess from a file name's extension.
    pub fn from_path(path: &Path) -> Option<Language> {
        match path.extension()?.to_str()? {
            "py" => Some(Language::Python),
            "sh" => Some(Language::Sh),
            "js" | "mjs" | "cjs" => Some(Language::Javascript),
            _ => None,
        }
    }
}

/// A statement-level `import x from`/`import {..}`/`import "m"` or `export`
/// at the start of a line: ES module syntax (a dynamic `import(` is not).
fn looks_like_es_module(code: &str) -> bool {
    let statement = |l: &str, kw: &str| {
        l.strip_prefix(kw).is_some_and(|r| {
            r.starts_with(|c: char| c.is_whitespace() || matches!(c, '{' | '*' | '"' | '\''))
                && !r.trim_start().starts_with('(')
        })
    };
    code.lines().map(str::trim_start).any(|l| statement(l, "import") || statement(l, "export"))
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Ok(Language::Python),
            "sh" | "shell" => Ok(Language::Sh),
            "javascript" | "js" | "node" | "nodejs" => Ok(Language::Javascript),
            other => Err(format!("unknown language '{other}' (known: {})", Language::ALL.map(|l| l.name()).join(", "))),
        }
    }
}

/// Resource limits of one run. Every tier enforces what it can and reports
/// what it cannot; none silently drops a limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// CPU time of the whole sandbox (all its processes together).
    #[serde(with = "duration_ms")]
    pub cpu_time: Duration,
    /// Wall-clock time from start to kill.
    #[serde(with = "duration_ms")]
    pub wall_time: Duration,
    /// Memory (resident, including tmpfs the program writes) in bytes.
    pub memory_bytes: u64,
    /// Processes and threads alive at once.
    pub pids: u64,
    /// Largest file the program may write, in bytes.
    pub file_size_bytes: u64,
    /// Total size of the writable scratch space (working dir and /tmp), in bytes.
    pub disk_bytes: u64,
    /// stdout + stderr bytes captured before the run is stopped.
    pub output_bytes: u64,
    /// Open file descriptors.
    pub open_files: u64,
    /// CPU bandwidth (1.0 = one core).
    pub cpus: f64,
    /// Network access: `none`, or `allow=HOST[:PORT],...` through the run's
    /// egress proxy (see `egress`). A tier that cannot enforce an allow list
    /// refuses the run.
    pub network: crate::egress::policy::Network,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_time: Duration::from_secs(5),
            wall_time: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            pids: 64,
            file_size_bytes: 16 << 20,
            disk_bytes: 64 << 20,
            output_bytes: 1 << 20,
            open_files: 256,
            cpus: 1.0,
            network: crate::egress::policy::Network::None,
        }
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// One program to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    pub language: Language,
    pub code: String,
    pub limits: Limits,
    /// Environment the user explicitly passed (`--env K=V`); nothing else from the host.
    pub env: BTreeMap<String, String>,
    /// A label for display (the file name, sample name, ...).
    pub label: String,
    /// Variables in the environment of whoever launches the sandbox (the
    /// gauntlet plants its secret canary here). Tiers whose launcher is a host
    /// command (peers) start it with these; a sandbox must keep them from the
    /// program. Never the program's own environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launcher_env: BTreeMap<String, String>,
    /// Names the egress proxy resolves for this run on top of `[network]
    /// hosts` (the gauntlet's own loopback "internet"). Never the program's.
    #[serde(default, skip_serializing_if = "crate::egress::resolve::Hosts::is_empty")]
    pub hosts: crate::egress::resolve::Hosts,
    /// Secrets the program uses but never holds (`egress::secrets`): it
    /// gets placeholders, the run's egress proxy puts the values in requests
    /// to their hosts. Written as names only; never read back.
    #[serde(default, skip_deserializing, skip_serializing_if = "crate::egress::secrets::Secrets::is_empty")]
    pub secrets: crate::egress::secrets::Secrets,
    /// CAs (PEM) the proxy trusts when it re-originates TLS to a secret's
    /// host, on top of the system's and the operator's (the gauntlet's own
    /// internet). Never the program's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_ca: Vec<String>,
}

impl RunSpec {
    pub fn new(language: Language, code: impl Into<String>) -> Self {
        RunSpec {
            language,
            code: code.into(),
            limits: Limits::default(),
            env: BTreeMap::new(),
            label: String::from("-"),
            launcher_env: BTreeMap::new(),
            hosts: Default::default(),
            secrets: Default::default(),
            upstream_ca: vec![],
        }
    }

    /// The interpreter command line, the program's path to be appended by
    /// the tier: the language's, except that a shell program whose `#!`
    /// line names bash runs under bash, which every tier has (under `sh`,
    /// dash, its `[[ ]]`, arrays and `<(...)` fail).
    pub fn interpreter(&self) -> Vec<String> {
        match self.shell() {
            Shell::Bash(arg) => std::iter::once("/bin/bash".to_string()).chain(arg).collect(),
            Shell::Sh(arg) => std::iter::once("/bin/sh".to_string()).chain(arg).collect(),
            _ => self.language.interpreter().iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Which shell runs a shell program, from its `#!` line as the kernel
    /// reads it (`#!/bin/bash`, `#!/usr/bin/bash -e`, `#!/usr/bin/env
    /// bash`: the interpreter and at most one argument, the rest of the
    /// line). `None` for the other languages.
    pub fn shell(&self) -> Shell {
        if self.language != Language::Sh {
            return Shell::None;
        }
        let first = self.code.lines().next().unwrap_or("");
        let Some(line) = first.strip_prefix("#!") else { return Shell::Sh(None) };
        let line = line.trim();
        let (path, arg) = match line.split_once([' ', '\t']) {
            Some((p, a)) => (p, Some(a.trim()).filter(|a| !a.is_empty())),
            None => (line, None),
        };
        let (name, arg) = match (path.rsplit('/').next().unwrap_or(path), arg) {
            // env's one argument is the command (no further argument: the
            // kernel passes "bash -e" as one word, which env cannot run).
            ("env", Some(cmd)) => (cmd, None),
            (name, arg) => (name, arg),
        };
        // An option word, as the kernel passes it (`-e`, `-eu`; `-o x` would
        // need a second word): anything else is not a shell's option.
        let option = |a: &str| a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c.is_ascii_alphabetic());
        match (name, arg) {
            (_, Some(a)) if !option(a) => Shell::Other(sanitize_word(first)),
            ("bash", arg) => Shell::Bash(arg.map(str::to_string)),
            ("sh" | "dash", arg) => Shell::Sh(arg.map(str::to_string)),
            _ => Shell::Other(sanitize_word(first)),
        }
    }

    /// The fixed environment every sandbox starts from, plus the user's additions.
    /// `home` is the sandbox's own working directory, never the host's home.
    pub fn sandbox_env(&self, home: &str, tmp: &str) -> Vec<(String, String)> {
        let mut env = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("HOME".into(), home.into()),
            ("TMPDIR".into(), tmp.into()),
        ];
        for (k, v) in &self.env {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        env
    }
}

/// The shell a shell program runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shell {
    /// Not a shell program.
    None,
    /// `/bin/sh` (dash): no `#!` line, or one naming sh (with its one
    /// option word).
    Sh(Option<String>),
    /// `/bin/bash`, with the `#!` line's one option word.
    Bash(Option<String>),
    /// A `#!` line naming what sandbench does not run (it runs under sh),
    /// as a short printable word.
    Other(String),
}

impl Shell {
    /// What a report says ran the program (`details.shell`).
    pub fn describe(&self) -> Option<String> {
        match self {
            Shell::None => None,
            Shell::Sh(_) => Some("sh (dash)".into()),
            Shell::Bash(_) => Some("bash (the program's #! line)".into()),
            Shell::Other(line) => {
                Some(format!("sh (dash): the program's {line} is not run here; use #!/bin/bash or none"))
            }
        }
    }
}

fn sanitize_word(line: &str) -> String {
    crate::sanitize::inert_line(line, 60)
}

/// Parse a byte size such as `256M`, `1G`, `512k`, `64MiB` or `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size '{s}': expected a number with an optional unit (K, M, G), e.g. 256M"));
    }
    let n: u64 = num.parse().map_err(|_| format!("invalid size '{s}': number too large"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("invalid size '{s}': unknown unit '{unit}' (use K, M or G, e.g. 256M)")),
    };
    let v = n.checked_mul(mult).ok_or_else(|| format!("invalid size '{s}': too large"))?;
    if v == 0 {
        return Err(format!("invalid size '{s}': must be greater than zero"));
    }
    Ok(v)
}

/// Parse a duration such as `5s`, `500ms`, `2m`, `1.5s` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration '{s}': expected e.g. 5s, 500ms or 2m"))?;
    let secs = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration '{s}': unknown unit '{unit}' (use ms, s, m or h)")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!("invalid duration '{s}': must be between 1ms and 24h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration as the command line takes it, the exact inverse of
/// `parse_duration`: "5s", "1500ms", "0.25ms".
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{}ms", us as f64 / 1000.0)
    }
}

/// Parse a positive count (pids, open files).
pub fn parse_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("invalid count '{s}': expected a positive whole number")),
        Ok(n) => Ok(n),
    }
}

/// Human form of a byte size, the inverse of `parse_size` for whole units.
pub fn format_size(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else if b >= 1 << 20 {
        format!("{:.1}M", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{b}B")
    }
}

/// Parse `K=V` for `--env`.
pub fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("invalid --env '{s}': expected KEY=VALUE"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("invalid --env '{s}': the name must be letters, digits and _"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_programs_hash_bang_line_picks_its_shell() {
        let sh = |code: &str| RunSpec::new(Language::Sh, code);
        let bash = |arg: Option<&str>| Shell::Bash(arg.map(str::to_string));
        for (code, want) in [
            ("echo hi\n", Shell::Sh(None)),
            ("", Shell::Sh(None)),
            ("#!/bin/sh\necho\n", Shell::Sh(None)),
            ("#!/usr/bin/env sh\n", Shell::Sh(None)),
            ("#! /bin/dash\n", Shell::Sh(None)),
            ("#!/bin/sh -e\n", Shell::Sh(Some("-e".into()))),
            ("#!/bin/bash\n[[ 1 ]]\n", bash(None)),
            ("#!/usr/bin/bash\n", bash(None)),
            ("#!/usr/bin/env bash\n", bash(None)),
            ("#!/bin/bash -eu\n", bash(Some("-eu"))),
            ("#!/bin/bash\t-e \n", bash(Some("-e"))),
            // The kernel passes "-e -u" as one word, which bash refuses.
            ("#!/bin/bash -e -u\n", Shell::Other("#!/bin/bash -e -u".into())),
            ("#!/bin/bash ; rm -rf /\n", Shell::Other("#!/bin/bash ; rm -rf /".into())),
            ("#!/usr/bin/env bash -e\n", Shell::Other("#!/usr/bin/env bash -e".into())),
            ("#!/usr/bin/zsh\n", Shell::Other("#!/usr/bin/zsh".into())),
            // A second line is never the #! line.
            ("echo\n#!/bin/bash\n", Shell::Sh(None)),
        ] {
            assert_eq!(sh(code).shell(), want, "{code:?}");
        }
        assert_eq!(sh("#!/bin/bash -e\n").interpreter(), ["/bin/bash", "-e"]);
        assert_eq!(sh("#!/usr/bin/zsh\n").interpreter(), ["/bin/sh"]);
        assert_eq!(RunSpec::new(Language::Python, "#!/bin/bash\n").shell(), Shell::None);
        assert_eq!(RunSpec::new(Language::Python, "#!/bin/bash\n").interpreter(), ["python3", "-u"]);
        // What a report says is one inert line.
        let raw = sh("#!/usr/bin/\x1b[31mzsh\n").shell().describe().unwrap();
        assert!(!raw.contains('\x1b'), "{raw:?}");
    }

    #[test]
    fn javascript_names_extensions_and_module_files() {
        for n in ["javascript", "js", "JS", "node", "nodejs"] {
            assert_eq!(n.parse::<Language>(), Ok(Language::Javascript), "{n}");
        }
        for f in ["a.js", "a.mjs", "a.cjs"] {
            assert_eq!(Language::from_path(Path::new(f)), Some(Language::Javascript), "{f}");
        }
        assert_eq!(Language::Javascript.name(), "javascript");
        let err = "ruby".parse::<Language>().unwrap_err();
        assert!(err.contains("javascript") && !err.contains('\n'), "{err}");
        let js = Language::Javascript;
        assert_eq!(js.program_file("console.log(1)\n"), "main.js");
        assert_eq!(js.program_file("const m = await import('fs')\n"), "main.js");
        assert_eq!(js.program_file("const fs = require('fs')\nimportant()\n"), "main.js");
        assert_eq!(js.program_file("import fs from 'node:fs'\nconsole.log(1)\n"), "main.mjs");
        assert_eq!(js.program_file("import { readFileSync } from 'fs'\n"), "main.mjs");
        assert_eq!(js.program_file("  export const x = 1\n"), "main.mjs");
        assert_eq!(js.program_file("import('fs')\n"), "main.js");
        assert_eq!(Language::Python.program_file("import os\n"), "main.py");
    }

    #[test]
    fn durations_format_to_what_parses_back() {
        for ms in [1u64, 250, 999, 1000, 1500, 5000, 60_000, 86_400_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{}", format_duration(d));
        }
        let d = Duration::from_micros(250);
        assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        assert_eq!(format_duration(Duration::from_secs(5)), "5s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("256Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("inf").is_err());
    }

    #[test]
    fn sizes_round_trip() {
        for s in ["256M", "1G", "512K", "7B"] {
            assert_eq!(format_size(parse_size(s).unwrap()), s);
        }
    }

    #[test]
    fn languages() {
        assert_eq!(Language::from_path(Path::new("a/b.py")), Some(Language::Python));
        assert_eq!(Language::from_path(Path::new("x.sh")), Some(Language::Sh));
        assert_eq!(Language::from_path(Path::new("x.rb")), None);
        assert!("ruby".parse::<Language>().unwrap_err().contains("python, sh, javascript"));
    }

    #[test]
    fn env_is_scrubbed_and_user_wins() {
        let mut spec = RunSpec::new(Language::Sh, "true");
        spec.env.insert("LANG".into(), "de_DE.UTF-8".into());
        spec.env.insert("FOO".into(), "bar".into());
        let env = spec.sandbox_env("/work", "/tmp");
        let names: Vec<_> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME", "TMPDIR", "FOO", "LANG"]);
        assert!(parse_env("A=1").is_ok());
        assert!(parse_env("A").is_err());
        assert!(parse_env("A-B=1").is_err());
    }
}
