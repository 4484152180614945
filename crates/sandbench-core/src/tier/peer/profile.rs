//! Peer profiles: TOML files that say how to wrap a program in an existing
//! sandbox tool's command line. Shipped ones live in the repository's
//! `peers/` folder (compiled in); a user's own in `<config dir>/peers/*.toml`
//! add peers or replace a shipped one of the same name. Unknown keys are
//! errors, reported in one line with the file, line and key.
//!
//! Templates take `{placeholders}`; a `{` that does not open a known name
//! (JSON's `{"network": …}`) is literal text. See README "Peers" for the
//! list; `Context` below is the one place they are defined.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::spec::Limits;

/// One peer: how to invoke its tool around a program.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    /// The tier name (`--tier NAME`): lowercase letters, digits, `-`.
    pub name: String,
    /// One line for listings.
    pub describe: String,
    /// The tool's binary: a name looked up on PATH, or an absolute path.
    pub tool: String,
    /// Other binaries the tool needs on PATH (doctor checks them).
    #[serde(default)]
    pub needs: Vec<String>,
    /// The command that prints the tool's version (first line with a digit is kept).
    pub version: Vec<String>,
    /// Shell command that installs the tool (and its needs), run by `sandbench setup peers`.
    pub install: String,
    /// The wrapped command line. `{command...}` becomes the interpreter and
    /// the program, `{env...}` the program's environment (with `env_flag`),
    /// `{limits...}` the flags of `[limits]`.
    pub argv: Vec<String>,
    /// How one program variable is passed: e.g. `["--setenv", "{name}", "{value}"]`.
    /// Absent: the tool passes its own environment through to the program, so
    /// sandbench starts the tool with the program's environment.
    pub env_flag: Option<Vec<String>>,
    /// Extra variables for the tool's own environment (not the program's).
    #[serde(default)]
    pub tool_env: BTreeMap<String, String>,
    /// Files written into the run directory before the tool starts (settings
    /// files): name → content, placeholders expanded.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Directory the tool is started in (default: the scratch directory).
    pub cwd: Option<String>,
    /// Where the program's folder and the scratch folder appear inside the
    /// sandbox, when the tool mounts them elsewhere (default: the host paths).
    #[serde(default)]
    pub inside: Inside,
    /// Processes and memory of the tool itself, on top of the program's
    /// limits, in sandbench's outer cgroup (a runtime in node needs ~100 MiB).
    #[serde(default)]
    pub overhead: Overhead,
    /// Stderr lines that start with one of these come from the tool failing
    /// to build its sandbox (the run is an error, never a verdict).
    #[serde(default)]
    pub failure_prefixes: Vec<String>,
    /// sandbench's limits the tool enforces itself, with the flags that do it.
    #[serde(default)]
    pub limits: LimitFlags,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Inside {
    pub program_dir: Option<String>,
    pub scratch: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Overhead {
    pub pids: u64,
    pub memory_mib: u64,
}

impl Default for Overhead {
    fn default() -> Self {
        Overhead { pids: 4, memory_mib: 32 }
    }
}

/// Per sandbench limit, the flags the tool enforces it with (inserted at
/// `{limits...}`). An empty list: the fixed `argv` already enforces it (say
/// how in a comment). Absent: the tool cannot, and the report says
/// "not enforced". Wall time and output are always enforced by sandbench.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitFlags {
    pub cpu_time: Option<Vec<String>>,
    pub memory: Option<Vec<String>>,
    pub pids: Option<Vec<String>>,
    pub file_size: Option<Vec<String>>,
    pub disk: Option<Vec<String>>,
    pub open_files: Option<Vec<String>>,
    pub cpus: Option<Vec<String>>,
    pub network: Option<Vec<String>>,
}

impl LimitFlags {
    /// (limit name, flags) for every limit the profile mentions, in a fixed order.
    pub(crate) fn all(&self) -> [(&'static str, Option<&Vec<String>>); 8] {
        [
            ("cpu_time", self.cpu_time.as_ref()),
            ("memory", self.memory.as_ref()),
            ("pids", self.pids.as_ref()),
            ("file_size", self.file_size.as_ref()),
            ("disk", self.disk.as_ref()),
            ("open_files", self.open_files.as_ref()),
            ("cpus", self.cpus.as_ref()),
            ("network", self.network.as_ref()),
        ]
    }
}

/// The values placeholders expand to for one run.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub tool: String,
    /// Host paths.
    pub run: PathBuf,
    pub program_dir: PathBuf,
    pub scratch: PathBuf,
    pub home: PathBuf,
    /// What the program sees.
    pub inside_program_dir: String,
    pub inside_scratch: String,
    pub program_file: String,
    /// What runs before the interpreter, inside the tool's sandbox: sandbench's
    /// start marker (see `peer::Started`). Empty in checks of templates.
    pub launcher: Vec<String>,
    pub interpreter: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub limits: Limits,
}

fn mib(b: u64) -> u64 {
    b.div_ceil(1 << 20).max(1)
}

impl Context {
    /// The program's path inside the sandbox.
    pub(crate) fn inside_program(&self) -> String {
        format!("{}/{}", self.inside_program_dir.trim_end_matches('/'), self.program_file)
    }

    /// The launcher, the interpreter and the program: what `{command...}`
    /// stands for.
    pub(crate) fn command(&self) -> Vec<String> {
        let mut v = self.launcher.clone();
        v.extend(self.interpreter.iter().cloned());
        v.push(self.inside_program());
        v
    }

    fn value(&self, name: &str) -> Option<String> {
        let l = &self.limits;
        let p = |p: &Path| p.display().to_string();
        Some(match name {
            "tool" => self.tool.clone(),
            "run" => p(&self.run),
            "program_dir" => p(&self.program_dir),
            "program" => p(&self.program_dir.join(&self.program_file)),
            "scratch" => p(&self.scratch),
            "home" => p(&self.home),
            "inside_program_dir" => self.inside_program_dir.clone(),
            "inside_program" => self.inside_program(),
            "inside_scratch" => self.inside_scratch.clone(),
            "command_sh" => self.command().iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "),
            "uid" => self.uid.to_string(),
            "gid" => self.gid.to_string(),
            "cpu_secs" => l.cpu_time.as_secs_f64().ceil().max(1.0).to_string(),
            "wall_secs" => l.wall_time.as_secs_f64().ceil().max(1.0).to_string(),
            "memory_bytes" => l.memory_bytes.to_string(),
            "memory_mib" => mib(l.memory_bytes).to_string(),
            "pids" => l.pids.to_string(),
            "file_size_bytes" => l.file_size_bytes.to_string(),
            "file_size_mib" => mib(l.file_size_bytes).to_string(),
            "disk_bytes" => l.disk_bytes.to_string(),
            "disk_mib" => mib(l.disk_bytes).to_string(),
            "open_files" => l.open_files.to_string(),
            "cpus" => l.cpus.to_string(),
            _ => return None,
        })
    }

    /// Expand `{name}` placeholders; `extra` holds `{name}`/`{value}` of an
    /// env flag. Errors name the unknown placeholder.
    pub(crate) fn expand(&self, template: &str, extra: &[(&str, &str)]) -> Result<String, String> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let name_len = after.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(after.len());
            if name_len > 0 && after[name_len..].starts_with('}') {
                let name = &after[..name_len];
                let v = extra
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
                    .or_else(|| self.value(name))
                    .ok_or_else(|| format!("unknown placeholder {{{name}}}"))?;
                out.push_str(&v);
                rest = &after[name_len + 1..];
            } else {
                out.push('{');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// POSIX shell quoting for `{command_sh}` (paths sandbench chose, but quoted all the same).
pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-=:+,".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The argv of one run: placeholders expanded, `{command...}`, `{env...}`
/// and `{limits...}` spliced in.
pub(crate) fn build_argv(p: &Profile, cx: &Context, program_env: &[(String, String)]) -> Result<Vec<String>, String> {
    let mut out = vec![];
    for a in &p.argv {
        match a.as_str() {
            "{command...}" => out.extend(cx.command()),
            "{env...}" => {
                let Some(flag) = &p.env_flag else {
                    return Err("argv has {env...} but the profile has no env_flag".into());
                };
                for (k, v) in program_env {
                    for f in flag {
                        out.push(cx.expand(f, &[("name", k), ("value", v)])?);
                    }
                }
            }
            "{limits...}" => {
                for (_, flags) in p.limits.all() {
                    for f in flags.into_iter().flatten() {
                        out.push(cx.expand(f, &[])?);
                    }
                }
            }
            _ => out.push(cx.expand(a, &[])?),
        }
    }
    Ok(out)
}

impl Profile {
    /// Parse one profile; the error is one line naming the file, line and key.
    pub(crate) fn parse(text: &str, file: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| one_line_error(text, file, &e))?;
        p.validate().map_err(|e| format!("peer profile {file}: {e}"))?;
        Ok(p)
    }

    fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if n.is_empty() || n.len() > 24 || !n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!("key `name`: '{n}' must be 1-24 lowercase letters, digits or '-'"));
        }
        // Tier names sandbench itself owns (and `all`, `egress`).
        if crate::tier::kinds::reserved(n) {
            return Err(format!(
                "key `name`: '{n}' is one of sandbench's own tiers or tier classes (all, egress); pick another name"
            ));
        }
        if self.tool.trim().is_empty() {
            return Err("key `tool`: empty".into());
        }
        if self.argv.is_empty() || self.version.is_empty() {
            return Err("keys `argv` and `version` must not be empty".into());
        }
        if !self.argv.iter().any(|a| a == "{command...}" || a.contains("{command_sh}")) {
            return Err("key `argv`: must contain \"{command...}\" or {command_sh} (where the program goes)".into());
        }
        if self.argv.iter().any(|a| a == "{env...}") != self.env_flag.is_some() {
            return Err(
                "keys `argv`/`env_flag`: use both (\"{env...}\" in argv and an env_flag) or neither (the tool passes its environment through)".into(),
            );
        }
        for f in self.files.keys() {
            if f.is_empty()
                || f.contains('/')
                || f.starts_with('.')
                || matches!(f.as_str(), "program" | "scratch" | "home")
            {
                return Err(format!("key `files.{f}`: a plain file name (no '/', not program/scratch/home)"));
            }
        }
        // Every template must expand: catches misspelt placeholders at load time.
        let cx = Context::example();
        let check = |key: &str, s: &str| -> Result<(), String> {
            cx.expand(s, &[("name", "N"), ("value", "V")]).map(|_| ()).map_err(|e| format!("key `{key}`: {e}"))
        };
        for a in self.argv.iter().filter(|a| !matches!(a.as_str(), "{command...}" | "{env...}" | "{limits...}")) {
            check("argv", a)?;
        }
        for a in &self.version {
            check("version", a)?;
        }
        for a in self.env_flag.iter().flatten() {
            check("env_flag", a)?;
        }
        for (k, v) in &self.tool_env {
            check(&format!("tool_env.{k}"), v)?;
        }
        for (k, v) in &self.files {
            check(&format!("files.{k}"), v)?;
        }
        for (k, flags) in self.limits.all() {
            for f in flags.into_iter().flatten() {
                check(&format!("limits.{k}"), f)?;
            }
        }
        if self.limits.all().iter().any(|(_, f)| f.is_some_and(|f| !f.is_empty()))
            && !self.argv.iter().any(|a| a == "{limits...}")
        {
            return Err("key `argv`: [limits] has flags but argv has no \"{limits...}\" to put them".into());
        }
        Ok(())
    }

    /// Limits the tool enforces itself, and those it cannot.
    pub(crate) fn enforced(&self) -> (Vec<&'static str>, Vec<&'static str>) {
        let mut yes = vec![];
        let mut no = vec![];
        for (k, f) in self.limits.all() {
            if f.is_some() {
                yes.push(k);
            } else {
                no.push(k);
            }
        }
        (yes, no)
    }
}

impl Context {
    /// Values for checking templates at load time.
    pub(crate) fn example() -> Context {
        Context {
            tool: "/usr/bin/tool".into(),
            run: "/run/x".into(),
            program_dir: "/run/x/program".into(),
            scratch: "/run/x/scratch".into(),
            home: "/run/x/home".into(),
            inside_program_dir: "/run/x/program".into(),
            inside_scratch: "/run/x/scratch".into(),
            program_file: "main.py".into(),
            launcher: vec![],
            interpreter: vec!["/usr/bin/python3".into(), "-u".into()],
            uid: 1000,
            gid: 1000,
            limits: Limits::default(),
        }
    }
}

/// toml's error, cut to one line: file, line, the key on that line, message.
fn one_line_error(text: &str, file: &str, e: &toml::de::Error) -> String {
    let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
    let Some(span) = e.span() else { return format!("peer profile {file}: {msg}") };
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let key = line.split_once('=').map(|(k, _)| k.trim().trim_matches('"')).filter(|k| !k.is_empty());
    match key {
        Some(k) if !msg.contains(&format!("`{k}`")) => {
            format!("peer profile {file}, line {line_no}, key `{k}`: {msg}")
        }
        _ => format!("peer profile {file}, line {line_no}: {msg}"),
    }
}

/// The shipped profiles, compiled in.
pub(crate) const SHIPPED: &[(&str, &str)] = &[
    ("peers/bwrap.toml", include_str!("../../../../../peers/bwrap.toml")),
    ("peers/firejail.toml", include_str!("../../../../../peers/firejail.toml")),
    ("peers/nsjail.toml", include_str!("../../../../../peers/nsjail.toml")),
    ("peers/srt.toml", include_str!("../../../../../peers/srt.toml")),
    ("peers/codex.toml", include_str!("../../../../../peers/codex.toml")),
];

/// Shipped profiles, then the user's (`dir/*.toml`, sorted): a user profile
/// with a shipped one's name replaces it. Errors name the file.
pub(crate) fn load_all(user_dir: Option<&Path>) -> Result<Vec<(Profile, String)>, String> {
    let mut out: Vec<(Profile, String)> = vec![];
    for (file, text) in SHIPPED {
        out.push((Profile::parse(text, file)?, file.to_string()));
    }
    let Some(dir) = user_dir else { return Ok(out) };
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(format!("cannot read peer profiles in {}: {e}", dir.display())),
    };
    files.sort();
    let mut seen_user: Vec<String> = vec![];
    for f in files {
        let shown = f.display().to_string();
        let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read peer profile {shown}: {e}"))?;
        let p = Profile::parse(&text, &shown)?;
        if seen_user.contains(&p.name) {
            return Err(format!(
                "peer profile {shown}: key `name`: '{}' is defined twice in {}",
                p.name,
                dir.display()
            ));
        }
        seen_user.push(p.name.clone());
        out.retain(|(q, _)| q.name != p.name);
        out.push((p, shown));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "envi"
describe = "env -i"
tool = "env"
version = ["{tool}", "--version"]
install = "apt-get install -y coreutils"
argv = ["{tool}", "-i", "{env...}", "{command...}"]
env_flag = ["{name}={value}"]
"#;

    #[test]
    fn shipped_profiles_parse() {
        let all = load_all(None).unwrap();
        let names: Vec<_> = all.iter().map(|(p, _)| p.name.as_str()).collect();
        assert_eq!(names, ["bwrap", "firejail", "nsjail", "srt", "codex"]);
        for (p, _) in &all {
            // Every shipped peer denies the network one way or another.
            assert!(p.limits.network.is_some(), "{} says nothing of the network", p.name);
        }
    }

    #[test]
    fn argv_expands_command_env_and_limits() {
        let mut p = Profile::parse(MINIMAL, "t.toml").unwrap();
        p.argv.insert(2, "{limits...}".into());
        p.limits.memory = Some(vec!["--mem={memory_mib}".into()]);
        p.limits.network = Some(vec![]);
        let cx = Context::example();
        let env = vec![("HOME".to_string(), "/w".to_string()), ("A".to_string(), "x y".to_string())];
        let argv = build_argv(&p, &cx, &env).unwrap();
        assert_eq!(
            argv,
            [
                "/usr/bin/tool",
                "-i",
                "--mem=256",
                "HOME=/w",
                "A=x y",
                "/usr/bin/python3",
                "-u",
                "/run/x/program/main.py"
            ]
        );
        assert_eq!(p.enforced().0, ["memory", "network"]);
        assert!(p.enforced().1.contains(&"pids"));
    }

    #[test]
    fn json_braces_are_literal_and_command_sh_is_quoted() {
        let cx = Context::example();
        assert_eq!(
            cx.expand(r#"{"allowWrite": ["{scratch}"], "x": {}}"#, &[]).unwrap(),
            r#"{"allowWrite": ["/run/x/scratch"], "x": {}}"#
        );
        assert_eq!(cx.expand("{command_sh}", &[]).unwrap(), "/usr/bin/python3 -u /run/x/program/main.py");
        assert_eq!(shell_quote("it's"), r#"'it'\''s'"#);
        assert!(cx.expand("{nope}", &[]).unwrap_err().contains("{nope}"));
    }

    #[test]
    fn bad_profiles_are_one_line_errors_naming_file_and_key() {
        let typo = MINIMAL.replace("env_flag", "env_flags");
        let e = Profile::parse(&typo, "/c/peers/mine.toml").unwrap_err();
        assert!(e.contains("/c/peers/mine.toml") && e.contains("env_flags") && !e.contains('\n'), "{e}");

        let wrong_type = MINIMAL.replace(r#"tool = "env""#, "tool = 3");
        let e = Profile::parse(&wrong_type, "m.toml").unwrap_err();
        assert!(e.contains("m.toml") && e.contains("`tool`") && e.contains("line 4") && !e.contains('\n'), "{e}");

        let nested = format!("{MINIMAL}\n[limits]\nmemroy = []\n");
        let e = Profile::parse(&nested, "m.toml").unwrap_err();
        assert!(e.contains("memroy") && !e.contains('\n'), "{e}");

        let placeholder = MINIMAL.replace("{name}={value}", "{nmae}={value}");
        let e = Profile::parse(&placeholder, "m.toml").unwrap_err();
        assert!(e.contains("env_flag") && e.contains("{nmae}"), "{e}");

        let reserved = MINIMAL.replace(r#"name = "envi""#, r#"name = "process""#);
        assert!(Profile::parse(&reserved, "m.toml").unwrap_err().contains("sandbench's own tiers"));

        let no_cmd = MINIMAL.replace(r#""{command...}""#, r#""x""#);
        assert!(Profile::parse(&no_cmd, "m.toml").unwrap_err().contains("{command...}"));

        let inherit_with_env = MINIMAL.replace("env_flag = [\"{name}={value}\"]", "");
        assert!(Profile::parse(&inherit_with_env, "m.toml").unwrap_err().contains("env_flag"));
    }

    #[test]
    fn user_profiles_add_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("envi.toml"), MINIMAL).unwrap();
        let mine = MINIMAL.replace(r#"name = "envi""#, r#"name = "bwrap""#).replace("env -i", "my own bwrap");
        std::fs::write(dir.path().join("zz-bwrap.toml"), mine).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a profile").unwrap();
        let all = load_all(Some(dir.path())).unwrap();
        let names: Vec<_> = all.iter().map(|(p, _)| p.name.as_str()).collect();
        assert_eq!(names, ["firejail", "nsjail", "srt", "codex", "envi", "bwrap"]);
        assert_eq!(all.last().unwrap().0.describe, "my own bwrap");
        assert!(load_all(Some(&dir.path().join("missing"))).is_ok());
        std::fs::write(dir.path().join("broken.toml"), "name = ").unwrap();
        let e = load_all(Some(dir.path())).unwrap_err();
        assert!(e.contains("broken.toml") && !e.contains('\n'), "{e}");
    }
}
