//! Secrets a program uses but never holds. The operator declares one with
//! the hosts it may go to (`--secret NAME=env:VAR@api.example.com` or
//! `[secrets.NAME]`); the program's environment gets `NAME=<placeholder>`,
//! a random token made for the run, and the run's egress proxy puts the
//! real value in place of the placeholder only in requests to those hosts
//! (`super::intercept`), and takes it out of everything that comes back.
//!
//! Here: the declaration (where the value comes from, the hosts it is bound
//! to, where in a request it may be substituted), reading the value (an
//! environment variable of sandbench's own, or a file only its owner can
//! read, opened without following a link), and the checks a run's secrets
//! pass before any sandbox is built. A [`Value`] is never printed, never
//! serialized and zeroed when dropped.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::policy::{parse_authority, Host, Network, Pattern};

/// Most secrets one run may carry.
pub const MAX_SECRETS: usize = 16;
/// Most hosts one secret may be bound to.
pub const MAX_BINDINGS: usize = 16;
/// Shortest value: a shorter one cannot be told apart from ordinary text in
/// the responses the proxy scrubs (every occurrence would be rewritten).
pub const MIN_VALUE: usize = 8;
/// Longest value (a header value past this is no token).
pub const MAX_VALUE: usize = 8 << 10;
/// Longest file a value is read from.
const MAX_FILE: u64 = 64 << 10;
/// What every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "sbx-secret-";

/// Variables sandbench sets in a sandbox itself: no secret may take their name.
const RESERVED: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "PWD",
    "SHELL",
    "USER",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
];

/// Where in a request a secret's placeholder may be replaced by its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Place {
    /// Header values (always).
    Headers,
    /// The request target's query string (opt-in: URLs end up in logs).
    Query,
    /// The request body (opt-in: bodies are stored, echoed, forwarded).
    Body,
}

impl Place {
    pub fn name(self) -> &'static str {
        self.into()
    }

    fn parse(s: &str) -> Result<Place, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "headers" | "header" => Ok(Place::Headers),
            "query" => Ok(Place::Query),
            "body" => Ok(Place::Body),
            other => Err(format!("'{}' is not a place for a secret (headers, query, body)", shown(other))),
        }
    }
}

/// Where a secret may be substituted: header values always, the others on opt-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Places {
    pub query: bool,
    pub body: bool,
}

impl Places {
    /// `headers,query,body` (any order; headers is implied).
    pub fn parse_list(s: &str) -> Result<Places, String> {
        let mut p = Places::default();
        for item in s.split(',').filter(|i| !i.trim().is_empty()) {
            p.add(Place::parse(item)?);
        }
        Ok(p)
    }

    fn add(&mut self, place: Place) {
        match place {
            Place::Headers => {}
            Place::Query => self.query = true,
            Place::Body => self.body = true,
        }
    }

    pub fn allows(&self, place: Place) -> bool {
        match place {
            Place::Headers => true,
            Place::Query => self.query,
            Place::Body => self.body,
        }
    }

    pub fn list(&self) -> Vec<Place> {
        let mut v = vec![Place::Headers];
        if self.query {
            v.push(Place::Query);
        }
        if self.body {
            v.push(Place::Body);
        }
        v
    }
}

impl fmt::Display for Places {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.list().iter().map(|p| p.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// One host a secret may go to: over TLS (`HOST[:PORT]`, port 443 by
/// default), or in clear (`http://HOST[:PORT]`, port 80 by default).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Binding {
    pub host: Host,
    pub port: u16,
    pub tls: bool,
}

impl Binding {
    pub fn parse(s: &str) -> Result<Binding, String> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        // ASCII lowercasing keeps byte offsets: the prefix's length cuts `t`.
        let (rest, tls) = if lower.starts_with("http://") {
            (&t[7..], false)
        } else if lower.starts_with("https://") {
            (&t[8..], true)
        } else {
            (t, true)
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err("an empty host".into());
        }
        if rest.contains('*') {
            return Err(format!("'{}': a secret is bound to exact hosts, not wildcards", shown(t)));
        }
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!("'{}': a host and port only (no path, query or user)", shown(t)));
        }
        let (host, port) = parse_authority(rest, Some(if tls { 443 } else { 80 }))?;
        Ok(Binding { host, port, tls })
    }

    /// Is this binding allowed by the run's network limit? A plain-HTTP
    /// binding needs an entry that names its host itself (not a wildcard):
    /// the value crosses that hop in clear.
    fn allowed_by(&self, network: &Network) -> bool {
        if self.tls {
            return network.allows(&self.host, self.port).is_some();
        }
        network.entries().iter().any(|e| !matches!(e.host, Pattern::Below(_)) && e.allows(&self.host, self.port))
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tls, self.port) {
            (true, 443) => write!(f, "{}", self.host),
            (true, p) => write!(f, "{}:{p}", self.host),
            (false, 80) => write!(f, "http://{}", self.host),
            (false, p) => write!(f, "http://{}:{p}", self.host),
        }
    }
}

/// Where a value is read from, on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An environment variable of sandbench's own.
    Env(String),
    /// A file only its owner (sandbench's user) can read or write.
    File(PathBuf),
    /// A value made in memory (the gauntlet's fake secrets, tests): never
    /// from a command line or a config.
    Memory(Vec<u8>),
}

impl Source {
    pub fn parse(s: &str) -> Result<Source, String> {
        if let Some(var) = s.strip_prefix("env:") {
            if !valid_name(var) {
                return Err(format!("'env:{}': not an environment variable name", shown(var)));
            }
            return Ok(Source::Env(var.to_string()));
        }
        if let Some(path) = s.strip_prefix("file:") {
            if path.is_empty() {
                return Err("'file:' needs a path".into());
            }
            return Ok(Source::File(PathBuf::from(path)));
        }
        Err(format!(
            "'{}' is not a value source: write env:VARIABLE (an environment variable of sandbench's) or file:PATH (a file only you can read, mode 0600)",
            shown(s)
        ))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env(v) => write!(f, "env:{v}"),
            Source::File(p) => write!(f, "file:{}", p.display()),
            Source::Memory(_) => f.write_str("memory"),
        }
    }
}

/// `[secrets.NAME]` in the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretConfig {
    /// `env:VARIABLE` or `file:PATH`.
    pub source: String,
    /// `HOST`, `HOST:PORT` (TLS) or `http://HOST[:PORT]` (plain HTTP).
    pub hosts: Vec<String>,
    /// Where the value may be substituted: `headers` (always), `query`, `body`.
    #[serde(default, rename = "in", skip_serializing_if = "Vec::is_empty")]
    pub places: Vec<Place>,
}

/// A secret as declared: everything but its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    pub source: Source,
    pub bindings: Vec<Binding>,
    pub places: Places,
}

impl Declared {
    /// `NAME=SOURCE@HOST[:PORT][,HOST...]` as `--secret` takes it.
    pub fn parse(s: &str) -> Result<Declared, String> {
        let (name, rest) = s.split_once('=').ok_or_else(|| {
            format!(
                "invalid --secret '{}': expected NAME=env:VAR@HOST[,HOST...] or NAME=file:PATH@HOST[,HOST...] (or a NAME declared under [secrets] in the config)",
                shown(s)
            )
        })?;
        check_name(name)?;
        // The last '@': a path may hold one, a host list cannot.
        let (source, hosts) = rest.rsplit_once('@').ok_or_else(|| {
            format!("invalid --secret '{}': name the hosts the value may go to after an '@', e.g. {name}=env:{name}@api.example.com", shown(name))
        })?;
        let source = Source::parse(source).map_err(|e| format!("--secret {name}: {e}"))?;
        let bindings = parse_bindings(name, hosts.split(','))?;
        Ok(Declared { name: name.to_string(), source, bindings, places: Places::default() })
    }

    /// A `[secrets.NAME]` table.
    pub fn from_config(name: &str, c: &SecretConfig) -> Result<Declared, String> {
        check_name(name)?;
        let source = Source::parse(&c.source).map_err(|e| format!("[secrets.{name}] source: {e}"))?;
        let bindings = parse_bindings(name, c.hosts.iter().map(String::as_str))?;
        let mut places = Places::default();
        for p in &c.places {
            places.add(*p);
        }
        Ok(Declared { name: name.to_string(), source, bindings, places })
    }

    /// Read the value (`env`: how to look a variable up in sandbench's own
    /// environment, read once by the front end).
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<OsString>) -> Result<Secret, String> {
        let name = &self.name;
        let raw: Vec<u8> = match &self.source {
            Source::Env(var) => {
                use std::os::unix::ffi::OsStringExt;
                match env(var) {
                    Some(v) if !v.is_empty() => v.into_vec(),
                    _ => return Err(format!("secret {name}: the environment variable {var} is not set (export it before starting sandbench)")),
                }
            }
            Source::File(p) => read_private_file(p).map_err(|e| format!("secret {name}: {e}"))?,
            Source::Memory(v) => v.clone(),
        };
        let value = Value::new(raw).map_err(|e| format!("secret {name} (from {}): {e}", self.source))?;
        Ok(Secret { name: name.clone(), bindings: self.bindings.clone(), places: self.places, value })
    }
}

fn parse_bindings<'a>(name: &str, items: impl Iterator<Item = &'a str>) -> Result<Vec<Binding>, String> {
    let mut out: Vec<Binding> = vec![];
    for item in items {
        let b = Binding::parse(item).map_err(|e| format!("secret {name}: host {e}"))?;
        if !out.contains(&b) {
            out.push(b);
        }
    }
    if out.is_empty() {
        return Err(format!("secret {name}: no host to send it to"));
    }
    if out.len() > MAX_BINDINGS {
        return Err(format!("secret {name}: {} hosts, at most {MAX_BINDINGS}", out.len()));
    }
    Ok(out)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

fn check_name(name: &str) -> Result<(), String> {
    if !valid_name(name) {
        return Err(format!(
            "secret name '{}': letters, digits and _ only, not starting with a digit (it becomes an environment variable)",
            shown(name)
        ));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str()) || upper.starts_with("SANDBENCH_") || upper.starts_with("LD_") {
        return Err(format!("secret name '{name}' is a variable sandbench sets itself in the sandbox: pick another"));
    }
    Ok(())
}

fn shown(s: &str) -> String {
    crate::sanitize::inert_line(s, 80)
}

/// Read a secret file: opened without following a link at its name, a
/// regular file owned by sandbench's user that no other user may read or
/// write (no group or other bits), at most 64 KiB. One trailing newline is
/// dropped (files are usually written with `echo`).
pub fn read_private_file(path: &Path) -> Result<Vec<u8>, String> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    let shown = path.display();
    // O_NONBLOCK: a FIFO at the name never blocks the open; O_NOCTTY: a
    // terminal never becomes ours.
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::errno::Errno::ELOOP => format!("{shown} is a symbolic link: name the file itself"),
        nix::errno::Errno::ENOENT => format!("{shown} does not exist"),
        e => format!("cannot open {shown}: {}", e.desc()),
    })?;
    let st = fstat(&fd).map_err(|e| format!("cannot stat {shown}: {}", e.desc()))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(format!("{shown} is not a regular file"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me {
        return Err(format!(
            "{shown} belongs to uid {}, not to sandbench's user (uid {me}): its owner could change it; chown it to yourself",
            st.st_uid
        ));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(format!(
            "{shown} has mode {:04o}: other users can read or write it; chmod 600 {shown}",
            st.st_mode & 0o7777
        ));
    }
    if st.st_size as u64 > MAX_FILE {
        return Err(format!("{shown} is larger than {} KiB: not a secret value", MAX_FILE >> 10));
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if buf.ends_with(b"\r\n") {
        buf.truncate(buf.len() - 2);
    } else if buf.ends_with(b"\n") {
        buf.truncate(buf.len() - 1);
    }
    Ok(buf)
}

/// A secret's value: never printed, never serialized, zeroed when dropped.
pub struct Value(zeroize::Zeroizing<Vec<u8>>);

impl Value {
    /// Checked for what a header value may carry: no control character (a
    /// CR or LF would let the value write header lines of its own), no
    /// leading or trailing space (it would be trimmed), 8 bytes to 8 KiB.
    pub fn new(raw: Vec<u8>) -> Result<Value, String> {
        let v = Value(zeroize::Zeroizing::new(raw));
        let b = v.bytes();
        if b.is_empty() {
            return Err("the value is empty".into());
        }
        if b.len() < MIN_VALUE {
            return Err(format!(
                "the value is {} bytes; at least {MIN_VALUE} (a shorter one cannot be told apart from ordinary text)",
                b.len()
            ));
        }
        if b.len() > MAX_VALUE {
            return Err(format!("the value is longer than {} KiB", MAX_VALUE >> 10));
        }
        if b.iter().any(|c| c.is_ascii_control()) {
            return Err("the value holds a control character (a newline, a NUL, ...)".into());
        }
        if b[0] == b' ' || b[b.len() - 1] == b' ' {
            return Err("the value starts or ends with a space".into());
        }
        if find(b, PLACEHOLDER_PREFIX.as_bytes()) {
            return Err(format!("the value contains '{PLACEHOLDER_PREFIX}', the start of every placeholder"));
        }
        Ok(v)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<secret value, {} bytes>", self.0.len())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A secret with its value, ready for a run.
#[derive(Debug)]
pub struct Secret {
    pub name: String,
    pub bindings: Vec<Binding>,
    pub places: Places,
    value: Value,
}

impl Secret {
    pub fn value(&self) -> &[u8] {
        self.value.bytes()
    }

    /// The hosts as written (`api.example.com`, `http://127.0.0.1:8080`).
    pub fn hosts(&self) -> Vec<String> {
        self.bindings.iter().map(Binding::to_string).collect()
    }
}

/// A run's secrets. Cheap to clone; `Debug` shows names only; never
/// serialized (a spec that is logged carries none of it).
#[derive(Clone, Default)]
pub struct Secrets(Arc<Vec<Secret>>);

impl Secrets {
    pub fn new(list: Vec<Secret>) -> Result<Secrets, String> {
        if list.len() > MAX_SECRETS {
            return Err(format!("{} secrets, at most {MAX_SECRETS} in one run", list.len()));
        }
        for (i, s) in list.iter().enumerate() {
            if list[..i].iter().any(|o| o.name == s.name) {
                return Err(format!("secret {} is given twice", s.name));
            }
        }
        Ok(Secrets(Arc::new(list)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Secret> {
        self.0.iter()
    }

    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|s| s.name.clone()).collect()
    }

    /// The ones named, in the order named (a front end's pick of what the
    /// operator declared).
    pub fn pick(&self, names: &[String]) -> Result<Secrets, String> {
        let mut out = vec![];
        for n in names {
            match self.0.iter().position(|s| &s.name == n) {
                Some(i) => out.push(i),
                None => {
                    let have = self.names();
                    return Err(if have.is_empty() {
                        format!("no secret named '{}' is offered here (none is)", shown(n))
                    } else {
                        format!("no secret named '{}' is offered here (offered: {})", shown(n), have.join(", "))
                    });
                }
            }
        }
        out.dedup();
        Ok(Secrets(Arc::new(
            out.into_iter()
                .map(|i| {
                    let s = &self.0[i];
                    Secret {
                        name: s.name.clone(),
                        bindings: s.bindings.clone(),
                        places: s.places,
                        value: Value(zeroize::Zeroizing::new(s.value().to_vec())),
                    }
                })
                .collect(),
        )))
    }

    /// What a run with these secrets must also hold, checked before any
    /// sandbox is built: every host of every secret in the run's allow list
    /// (a plain-HTTP host named there itself), and no secret under a name
    /// the program's environment already has.
    pub fn check(&self, network: &Network, env: &BTreeMap<String, String>) -> Result<(), String> {
        for s in self.iter() {
            if env.contains_key(&s.name) {
                return Err(format!(
                    "secret {0} and --env {0} name the same variable: the program gets the secret's placeholder there, drop the --env",
                    s.name
                ));
            }
            for b in &s.bindings {
                if b.allowed_by(network) {
                    continue;
                }
                return Err(if network.is_none() {
                    format!(
                        "secret {} goes to {b}, but the run has no network: add --network allow={}",
                        s.name,
                        allow_entry(b)
                    )
                } else if !b.tls && network.allows(&b.host, b.port).is_some() {
                    format!(
                        "secret {} goes in clear to {b}: the allow list must name {} itself (not a wildcard) for that ({network})",
                        s.name,
                        allow_entry(b)
                    )
                } else {
                    format!(
                        "secret {} goes to {b}, which the run's allow list does not allow ({network}); add {}",
                        s.name,
                        allow_entry(b)
                    )
                });
            }
        }
        Ok(())
    }
}

/// The allow entry a binding needs.
fn allow_entry(b: &Binding) -> String {
    match (b.tls, b.port) {
        (true, 443) | (false, 80) => b.host.to_string(),
        (_, p) => format!("{}:{p}", b.host),
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|s| &s.name)).finish()
    }
}

/// A run's secrets on the wire of a spec: names only.
impl Serialize for Secrets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|x| &x.name))
    }
}

/// The declarations a front end has: the config's `[secrets]`, then the
/// command line's (`--secret NAME=...` declares, `--secret NAME` picks a
/// config one), with `--secret-in NAME=...` places. Returns the declared
/// secrets the run uses.
pub fn declarations(
    config: &BTreeMap<String, SecretConfig>,
    flags: &[String],
    places: &[String],
) -> Result<Vec<Declared>, String> {
    let mut out: Vec<Declared> = vec![];
    for f in flags {
        let d = if f.contains('=') {
            Declared::parse(f)?
        } else {
            let name = f.trim();
            let c = config.get(name).ok_or_else(|| {
                format!(
                    "--secret {}: no [secrets.{0}] in the config; declare it there or write {0}=env:VAR@HOST",
                    shown(name)
                )
            })?;
            Declared::from_config(name, c)?
        };
        if out.iter().any(|o| o.name == d.name) {
            return Err(format!("secret {} is given twice", d.name));
        }
        out.push(d);
    }
    for p in places {
        let (name, list) = p
            .split_once('=')
            .ok_or_else(|| format!("invalid --secret-in '{}': expected NAME=headers,query,body", shown(p)))?;
        let d = out
            .iter_mut()
            .find(|d| d.name == name)
            .ok_or_else(|| format!("--secret-in {}: no --secret of that name in this run", shown(name)))?;
        d.places = Places::parse_list(list).map_err(|e| format!("--secret-in {name}: {e}"))?;
    }
    Ok(out)
}

/// Read every declared value.
pub fn resolve_all(decls: &[Declared], env: &dyn Fn(&str) -> Option<OsString>) -> Result<Secrets, String> {
    let list = decls.iter().map(|d| d.resolve(env)).collect::<Result<Vec<_>, _>>()?;
    Secrets::new(list)
}

/// The `[secrets]` table read whole (a typo in a name or a host is an
/// error when the config loads, not when the secret is first used).
pub fn check_config(table: &BTreeMap<String, SecretConfig>) -> Result<(), String> {
    for (name, c) in table {
        Declared::from_config(name, c)?;
    }
    Ok(())
}

/// A fresh placeholder for `name`: `sbx-secret-NAME-` and 32 random hex digits.
pub fn placeholder(name: &str) -> std::io::Result<String> {
    let mut r = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut r)?;
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{PLACEHOLDER_PREFIX}{name}-{hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Network {
        s.parse().unwrap()
    }

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn declarations_parse_strictly() {
        let d =
            Declared::parse("GH_TOKEN=env:GH@api.github.com,uploads.github.com:8443,http://127.0.0.1:8080").unwrap();
        assert_eq!(d.name, "GH_TOKEN");
        assert_eq!(d.source, Source::Env("GH".into()));
        let hosts: Vec<String> = d.bindings.iter().map(|b| b.to_string()).collect();
        assert_eq!(hosts, ["api.github.com", "uploads.github.com:8443", "http://127.0.0.1:8080"]);
        assert_eq!((d.bindings[0].port, d.bindings[0].tls), (443, true));
        assert_eq!((d.bindings[2].port, d.bindings[2].tls), (8080, false));
        let d = Declared::parse("K=file:/home/me/a@b/key@https://api.test").unwrap();
        assert_eq!(d.source, Source::File("/home/me/a@b/key".into()), "the last @ splits");
        for bad in [
            "K",
            "K=env:V",
            "K=env:V@",
            "K=vault:x@a.test",
            "K=env:@a.test",
            "K=env:A-B@a.test",
            "K=file:@a.test",
            "K=env:V@*.a.test",
            "K=env:V@a.test/path",
            "K=env:V@u@a.test",
            "K=env:V@a b",
            "1K=env:V@a.test",
            "K-1=env:V@a.test",
            "PATH=env:V@a.test",
            "HTTPS_PROXY=env:V@a.test",
            "ssl_cert_file=env:V@a.test",
            "SANDBENCH_X=env:V@a.test",
            "K=env:V@a.test:0",
        ] {
            assert!(Declared::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_config_table_denies_unknown_keys_and_takes_places() {
        #[derive(Deserialize)]
        struct W {
            secrets: BTreeMap<String, SecretConfig>,
        }
        let w: W = toml::from_str(
            "[secrets.OPENAI_API_KEY]\nsource = \"env:OPENAI_API_KEY\"\nhosts = [\"api.openai.com\"]\nin = [\"headers\", \"query\"]\n",
        )
        .unwrap();
        let d = Declared::from_config("OPENAI_API_KEY", &w.secrets["OPENAI_API_KEY"]).unwrap();
        assert_eq!(d.places, Places { query: true, body: false });
        let e = toml::from_str::<W>("[secrets.K]\nsource = \"env:K\"\nhost = [\"a.test\"]\n").err().unwrap();
        assert!(e.to_string().contains("host"), "{e}");
        let e = toml::from_str::<W>("[secrets.K]\nsource = \"env:K\"\nhosts = [\"a.test\"]\nin = [\"cookies\"]\n");
        assert!(e.is_err());
        let table =
            BTreeMap::from([("K".to_string(), SecretConfig { source: "env:K".into(), hosts: vec![], places: vec![] })]);
        assert!(check_config(&table).unwrap_err().contains("no host"));
    }

    #[test]
    fn flags_declare_pick_from_the_config_and_set_places() {
        let table = BTreeMap::from([(
            "K".to_string(),
            SecretConfig { source: "env:K".into(), hosts: vec!["a.test".into()], places: vec![Place::Body] },
        )]);
        let d = declarations(&table, &["K".into(), "J=env:J@b.test".into()], &["J=query".into()]).unwrap();
        assert_eq!(d[0].places, Places { query: false, body: true });
        assert_eq!(d[1].places, Places { query: true, body: false });
        assert!(declarations(&table, &["X".into()], &[]).unwrap_err().contains("[secrets.X]"));
        assert!(declarations(&table, &["K".into(), "K".into()], &[]).unwrap_err().contains("twice"));
        assert!(declarations(&table, &["K".into()], &["J=query".into()]).unwrap_err().contains("no --secret"));
        assert!(declarations(&table, &["K".into()], &["K=cookies".into()]).is_err());
    }

    #[test]
    fn values_come_from_the_environment_checked() {
        let d = Declared::parse("K=env:MY_KEY@a.test").unwrap();
        assert!(d.resolve(&no_env).unwrap_err().contains("MY_KEY is not set"));
        let env = |v: &'static str| move |_: &str| Some(OsString::from(v));
        assert_eq!(d.resolve(&env("sk-live-0123456789")).unwrap().value(), b"sk-live-0123456789");
        for (bad, why) in [
            ("abc1234", "at least"),
            ("sk-0123456789\r\nX-Evil: 1", "control"),
            ("sk-0123456789\0", "control"),
            (" sk-0123456789", "space"),
            ("x-sbx-secret-K-0000", "placeholder"),
        ] {
            let e = d.resolve(&env(bad)).unwrap_err();
            assert!(e.contains(why) && !e.contains(bad), "{bad:?}: {e}");
        }
        let s = d.resolve(&env("sk-live-0123456789")).unwrap();
        let one = format!("{s:?}");
        let shown = format!("{one} {:?}", Secrets::new(vec![s]).unwrap());
        assert!(!shown.contains("sk-live") && shown.contains("K"), "{shown}");
    }

    #[test]
    fn files_must_be_private_regular_and_not_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("key");
        std::fs::write(&good, "sk-file-0123456789\n").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_private_file(&good).unwrap(), b"sk-file-0123456789");
        for mode in [0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&good, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(read_private_file(&good).unwrap_err().contains("chmod 600"), "{mode:o}");
        }
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read_private_file(&good).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(read_private_file(&link).unwrap_err().contains("symbolic link"));
        assert!(read_private_file(dir.path()).unwrap_err().contains("not a regular file"));
        assert!(read_private_file(&dir.path().join("none")).unwrap_err().contains("does not exist"));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_private_file(&fifo).unwrap_err().contains("not a regular file"), "a FIFO never blocks");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; (MAX_FILE + 1) as usize]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_private_file(&big).unwrap_err().contains("larger"));
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&good, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            assert!(read_private_file(&good).unwrap_err().contains("belongs to uid 65534"));
        }
    }

    #[test]
    fn a_secrets_hosts_must_be_allowed_and_plain_ones_named() {
        let env = |_: &str| Some(OsString::from("sk-live-0123456789"));
        let one = |s: &str| Secrets::new(vec![Declared::parse(s).unwrap().resolve(&env).unwrap()]).unwrap();
        let e = BTreeMap::new();
        assert!(one("K=env:K@api.test").check(&net("allow=api.test"), &e).is_ok());
        assert!(one("K=env:K@api.test").check(&net("allow=*.test"), &e).is_ok(), "TLS under a wildcard");
        assert!(one("K=env:K@api.test:8443").check(&net("allow=api.test"), &e).unwrap_err().contains("api.test:8443"));
        assert!(one("K=env:K@api.test").check(&Network::None, &e).unwrap_err().contains("no network"));
        assert!(one("K=env:K@other.test").check(&net("allow=api.test"), &e).unwrap_err().contains("does not allow"));
        assert!(one("K=env:K@http://api.test").check(&net("allow=api.test"), &e).is_ok());
        let w = one("K=env:K@http://api.test").check(&net("allow=*.test,api.test:443"), &e).unwrap_err();
        assert!(w.contains("in clear") && w.contains("itself"), "{w}");
        let env_k = BTreeMap::from([("K".to_string(), "x".to_string())]);
        assert!(one("K=env:K@api.test").check(&net("allow=api.test"), &env_k).unwrap_err().contains("--env"));
        let s = one("K=env:K@api.test");
        assert_eq!(s.pick(&["K".into()]).unwrap().names(), ["K"]);
        assert!(s.pick(&["J".into()]).unwrap_err().contains("offered: K"));
        assert_eq!(serde_json::to_string(&s).unwrap(), "[\"K\"]");
    }

    #[test]
    fn placeholders_are_fresh_and_header_safe() {
        let a = placeholder("K").unwrap();
        assert!(a.starts_with("sbx-secret-K-") && a.len() == "sbx-secret-K-".len() + 32, "{a}");
        assert_ne!(a, placeholder("K").unwrap());
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }
}
