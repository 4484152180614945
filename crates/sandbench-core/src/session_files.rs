//! Files in and out of a session: write, read and list files in a session's
//! working directory (`/work`), the way agents move files (E2B's filesystem
//! API, code-interpreter tools).
//!
//! Every operation is a call in the session's own sandbox: a small program
//! of sandbench's own (`session_files.py`) runs as the sandbox's uid under
//! all its isolation, so no privileged code ever resolves a path among the
//! program's files (the rule of `docs/SECURITY.md`). The sandbox's mount view
//! and Landlock confine it, what it writes counts against the session's
//! disk and file size limits like any call's, and a link the program planted
//! can only lead where the program could go itself — and the helper refuses
//! links anyway, walking each path one component at a time with
//! `O_NOFOLLOW`, never crossing a mount.
//!
//! The path a client gives is checked here first (relative, or absolute
//! under `/work`; `..` may not climb out; no NUL; bounded length) and handed
//! over as hex-encoded components. Content goes in as base64 inside the
//! helper's source; what comes out is one ASCII line per fact, each with a
//! nonce of this call, parsed strictly and bounded by the call's output
//! limit. The program cannot run while the helper does (a session runs one
//! call at a time, and a call's processes are gone when it ends), but what
//! the helper reports about the session's files is still treated as
//! untrusted data: the files are the program's.

use std::time::Duration;

use base64::Engine;

use crate::report::{Outcome, RunReport};
use crate::sanitize::Untrusted;
use crate::spec::{format_size, Language, Limits, RunSpec};

/// Most bytes one `write_file` or `read_file` moves.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most entries one `list_files` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Deepest `list_files` goes below the directory it lists.
pub const MAX_DEPTH: u32 = 8;
/// Longest path a client may name, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// The session's working directory as clients name it.
pub const WORK: &str = "/work";
/// The helper's call never runs longer than this, whatever the session allows.
const MAX_WALL: Duration = Duration::from_secs(30);
/// Room in the output for everything but a read's content.
const OUTPUT_SLACK: u64 = 4096;

const HELPER: &str = include_str!("session_files.py");

/// One file operation, its path checked.
#[derive(Debug, Clone, PartialEq)]
pub enum FileOp {
    Write { path: Confined, data: Vec<u8>, mode: Option<u32> },
    Read { path: Confined, offset: u64, length: Option<u64> },
    List { path: Confined, depth: u32 },
}

/// A path inside the working directory: its components (never empty, `.`
/// or `..`) and how to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    pub parts: Vec<Vec<u8>>,
}

impl Confined {
    /// `path` as the client wrote it: relative to `/work`, or absolute under
    /// `/work`. `..` is resolved here, by text, and may not leave `/work`.
    pub fn new(path: &str) -> Result<Confined, String> {
        if path.len() > MAX_PATH_BYTES {
            return Err(format!("path is {} bytes; at most {MAX_PATH_BYTES}", path.len()));
        }
        if path.contains('\0') {
            return Err("path contains a NUL byte".into());
        }
        let rel = if let Some(rest) = path.strip_prefix('/') {
            match rest.strip_prefix("work") {
                Some(r) if r.is_empty() || r.starts_with('/') => r,
                _ => {
                    return Err(format!(
                        "{} is outside {WORK}: file tools reach only the session's working directory (give a path \
                         relative to it, or one under {WORK}/)",
                        show(path)
                    ))
                }
            }
        } else {
            path
        };
        let mut parts: Vec<Vec<u8>> = vec![];
        for c in rel.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(format!("{} climbs out of {WORK} with '..'", show(path)));
                    }
                }
                c if c.len() > 255 => return Err(format!("a component of {} is longer than 255 bytes", show(path))),
                c => parts.push(c.as_bytes().to_vec()),
            }
        }
        Ok(Confined { parts })
    }

    /// `/work/...` up to and including component `at` (all with `None`).
    pub fn shown(&self, at: Option<usize>) -> String {
        let n = at.map_or(self.parts.len(), |i| (i + 1).min(self.parts.len()));
        let mut s = WORK.to_string();
        for p in &self.parts[..n] {
            s.push('/');
            s.push_str(&String::from_utf8_lossy(p));
        }
        crate::sanitize::inert_line(&s, 300)
    }
}

fn show(path: &str) -> String {
    crate::sanitize::inert_line(path, 200)
}

/// What a file operation found.
#[derive(Debug, Clone, PartialEq)]
pub enum FileReply {
    Written { path: String, bytes: u64, mode: u32 },
    Read { path: String, size: u64, offset: u64, data: Vec<u8> },
    Listed { path: String, entries: Vec<Entry>, truncated: bool },
}

/// One entry of a listing. Names come from the program: `path` and
/// `link_target` are [`Untrusted`] (serialized inert: hidden characters
/// shown by name, invalid UTF-8 replaced); `path_hex` has the exact bytes of
/// a name that is not UTF-8 or that holds a character shown by name.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    /// Relative to the listed directory.
    pub path: Untrusted,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// file, dir, symlink, fifo, socket, char_device, block_device, other.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    /// Permission bits, octal text ("644").
    pub mode: String,
    /// Seconds since the epoch, as the program may have set it.
    pub mtime: i64,
    /// Where a symbolic link points (never followed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_target: Option<Untrusted>,
    /// On another file system (not descended into).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub other_mount: bool,
}

impl FileOp {
    pub fn write(path: &str, data: Vec<u8>, mode: Option<u32>) -> Result<FileOp, String> {
        let path = Confined::new(path)?;
        if path.parts.is_empty() {
            return Err(format!("write_file needs a file's path under {WORK}, not {WORK} itself"));
        }
        if data.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "content is {} bytes; write_file takes at most {} per call",
                data.len(),
                format_size(MAX_FILE_BYTES)
            ));
        }
        if let Some(m) = mode {
            if m > 0o777 {
                return Err(format!("mode {m:o}: only permission bits (0 to 777 octal) may be set"));
            }
        }
        Ok(FileOp::Write { path, data, mode })
    }

    pub fn read(path: &str, offset: u64, length: Option<u64>) -> Result<FileOp, String> {
        let path = Confined::new(path)?;
        if path.parts.is_empty() {
            return Err(format!("{WORK} is a directory: list it with list_files"));
        }
        Ok(FileOp::Read { path, offset, length })
    }

    pub fn list(path: Option<&str>, depth: Option<u32>) -> Result<FileOp, String> {
        let path = Confined::new(path.unwrap_or(""))?;
        let depth = depth.unwrap_or(1);
        if depth == 0 || depth > MAX_DEPTH {
            return Err(format!("depth {depth}: from 1 (the directory's own entries) to {MAX_DEPTH}"));
        }
        Ok(FileOp::List { path, depth })
    }

    pub fn tool(&self) -> &'static str {
        match self {
            FileOp::Write { .. } => "write_file",
            FileOp::Read { .. } => "read_file",
            FileOp::List { .. } => "list_files",
        }
    }

    fn path(&self) -> &Confined {
        match self {
            FileOp::Write { path, .. } | FileOp::Read { path, .. } | FileOp::List { path, .. } => path,
        }
    }

    /// Most bytes of content one read may return in a session whose calls
    /// may print `output_bytes` (base64 takes 4 bytes for 3).
    pub fn max_read(output_bytes: u64) -> u64 {
        (output_bytes.saturating_sub(OUTPUT_SLACK) / 4 * 3).min(MAX_FILE_BYTES)
    }

    /// The call that performs this operation in a session with `limits`,
    /// and the nonce its answer carries.
    pub fn spec(&self, limits: &Limits) -> anyhow::Result<(RunSpec, String)> {
        let nonce = crate::host::random_hex(12)?;
        let hex = |p: &[u8]| p.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let parts = self.path().parts.iter().map(|p| format!("'{}'", hex(p))).collect::<Vec<_>>().join(", ");
        let budget = limits.output_bytes.saturating_sub(512);
        let args = match self {
            FileOp::Write { data, mode, .. } => format!(
                "'data': '{}', 'mode': {}",
                base64::engine::general_purpose::STANDARD.encode(data),
                mode.map_or("None".to_string(), |m| m.to_string())
            ),
            FileOp::Read { offset, length, .. } => {
                let most = FileOp::max_read(limits.output_bytes);
                format!("'offset': {offset}, 'length': {}", length.unwrap_or(most).min(most))
            }
            FileOp::List { depth, .. } => format!("'depth': {depth}, 'max_entries': {MAX_LIST_ENTRIES}"),
        };
        let op = match self {
            FileOp::Write { .. } => "write",
            FileOp::Read { .. } => "read",
            FileOp::List { .. } => "list",
        };
        // Only hex, base64, digits and the op's name go into this line.
        let code = format!(
            "_SB = {{'op': '{op}', 'nonce': '{nonce}', 'budget': {budget}, 'parts': [{parts}], {args}}}\n{HELPER}"
        );
        let mut spec = RunSpec::new(Language::Python, code);
        let mut l = limits.clone();
        l.wall_time = l.wall_time.min(MAX_WALL);
        spec.limits = l;
        spec.label = format!("mcp:{}", self.tool());
        Ok((spec, nonce))
    }

    /// What the run log keeps of this operation instead of its helper's
    /// source (which would hold a write's content).
    pub fn describe(&self) -> String {
        match self {
            FileOp::Write { path, data, mode } => format!(
                "# write_file {} ({} bytes{})",
                path.shown(None),
                data.len(),
                mode.map(|m| format!(", mode {m:o}")).unwrap_or_default()
            ),
            FileOp::Read { path, offset, length } => format!(
                "# read_file {} (offset {offset}{})",
                path.shown(None),
                length.map(|l| format!(", length {l}")).unwrap_or_default()
            ),
            FileOp::List { path, depth } => format!("# list_files {} (depth {depth})", path.shown(None)),
        }
    }

    /// The helper's answer, from its call's report.
    pub fn parse(&self, nonce: &str, report: &RunReport, limits: &Limits) -> Result<FileReply, String> {
        let tool = self.tool();
        let path = self.path();
        let mut entries = vec![];
        let mut end: Option<Vec<&str>> = None;
        for line in report.stdout.lines() {
            let Some(rest) = line.strip_prefix(nonce).and_then(|r| r.strip_prefix(' ')) else { continue };
            if end.is_some() {
                return Err(format!("{tool}: the helper said more after its last line; nothing was taken from it"));
            }
            let f: Vec<&str> = rest.split(' ').collect();
            match f[0] {
                "E" if matches!(self, FileOp::List { .. }) && entries.len() < MAX_LIST_ENTRIES => {
                    entries.push(entry(&f).ok_or_else(|| format!("{tool}: a malformed listing line"))?)
                }
                "OK" | "ERR" => end = Some(f),
                _ => return Err(format!("{tool}: the helper's answer is malformed; nothing was taken from it")),
            }
        }
        let Some(f) = end else {
            // The tier could not even put the helper in a full scratch.
            let said = format!("{} {}", report.error.as_deref().unwrap_or(""), report.stderr);
            if said.contains("No space left on device") {
                return Err(refusal(tool, "no_space", None, path, limits));
            }
            return Err(failed(tool, report));
        };
        if f[0] == "ERR" {
            let at = f.get(2).and_then(|a| a.parse::<i64>().ok()).filter(|a| *a >= 0).map(|a| a as usize);
            return Err(refusal(tool, f.get(1).copied().unwrap_or(""), at, path, limits));
        }
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        let bad = || format!("{tool}: the helper's answer is malformed; nothing was taken from it");
        match (self, f.get(1).copied()) {
            (FileOp::Write { .. }, Some("write")) if f.len() == 4 => Ok(FileReply::Written {
                path: path.shown(None),
                bytes: num(2).ok_or_else(bad)?,
                mode: u32::from_str_radix(f[3], 8).ok().filter(|m| *m <= 0o777).ok_or_else(bad)?,
            }),
            (FileOp::Read { .. }, Some("read")) if f.len() == 6 => {
                let (size, offset, len) = (num(2).ok_or_else(bad)?, num(3).ok_or_else(bad)?, num(4).ok_or_else(bad)?);
                let data = if f[5] == "-" {
                    vec![]
                } else {
                    base64::engine::general_purpose::STANDARD.decode(f[5]).map_err(|_| bad())?
                };
                if data.len() as u64 != len || len > MAX_FILE_BYTES || offset > size {
                    return Err(bad());
                }
                Ok(FileReply::Read { path: path.shown(None), size, offset, data })
            }
            (FileOp::List { .. }, Some("list")) if f.len() == 4 => {
                Ok(FileReply::Listed { path: path.shown(None), entries, truncated: f[3] == "cut" })
            }
            _ => Err(bad()),
        }
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * 8192 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `E kind size mode mtime path_hex target_hex|- x|-`
fn entry(f: &[&str]) -> Option<Entry> {
    if f.len() != 8 {
        return None;
    }
    let kind = match f[1] {
        "f" => "file",
        "d" => "dir",
        "l" => "symlink",
        "p" => "fifo",
        "s" => "socket",
        "c" => "char_device",
        "b" => "block_device",
        "?" => "other",
        _ => return None,
    };
    let mode = u32::from_str_radix(f[3], 8).ok().filter(|m| *m <= 0o7777)?;
    let raw = unhex(f[5])?;
    let path = Untrusted::from_bytes(&raw);
    // Exact bytes whenever the inert form is not the name itself.
    let exact = std::str::from_utf8(&raw).is_ok_and(|s| !s.chars().any(crate::sanitize::is_hidden));
    let path_hex = (!exact).then(|| f[5].to_string());
    let link_target = if f[6] == "-" { None } else { Some(Untrusted::from_bytes(&unhex(f[6])?)) };
    Some(Entry {
        path,
        path_hex,
        kind,
        size: f[2].parse().ok()?,
        mode: format!("{mode:o}"),
        mtime: f[4].parse().ok()?,
        link_target,
        other_mount: match f[7] {
            "x" => true,
            "-" => false,
            _ => return None,
        },
    })
}

/// Why the helper's call gave no answer.
fn failed(tool: &str, report: &RunReport) -> String {
    let why = match report.outcome {
        Outcome::Cancelled => "it was cancelled".to_string(),
        Outcome::Error => format!(
            "{} (the file tools run as a call in the session's sandbox: a scratch at its disk limit, {}, stops them \
             too — remove files with run_code)",
            report
                .error
                .as_deref()
                .map(|e| crate::sanitize::inert_line(e, 300))
                .unwrap_or_else(|| "the call failed".into()),
            format_size(report.limits.disk_bytes)
        ),
        _ if !report.violations.is_empty() => {
            let v = &report.violations[0];
            format!("it hit the session's {} limit ({})", v.kind.name(), crate::sanitize::inert_line(&v.detail, 200))
        }
        _ => {
            let err = report.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no answer");
            format!("no answer ({})", crate::sanitize::inert_line(err, 200))
        }
    };
    format!("{tool} could not be done in the session's sandbox: {why}")
}

/// A refusal the helper reported, in words.
fn refusal(tool: &str, code: &str, at: Option<usize>, path: &Confined, limits: &Limits) -> String {
    let p = path.shown(at);
    let whole = path.shown(None);
    let kind = |k: &str| match k {
        "p" => "a FIFO",
        "s" => "a socket",
        "c" => "a character device",
        "b" => "a block device",
        _ => "not a regular file",
    };
    let why = match code {
        "not_found" => format!("{p} does not exist"),
        "symlink" => format!(
            "{p} is a symbolic link; file tools never follow links (one could lead out of {WORK}): name the \
             file it points to, or remove it"
        ),
        "not_dir" => format!("{p} is not a directory"),
        "is_dir" => format!("{p} is a directory (list it with list_files)"),
        "mount" => format!("{p} is on another file system; file tools stay on the session's own scratch"),
        "no_space" => format!(
            "no space left in the session's scratch (its disk limit is {}): remove files, or open a session \
             with a larger disk",
            format_size(limits.disk_bytes)
        ),
        "file_size" => format!(
            "the file would pass the session's file_size limit {} (open a session with a larger one)",
            format_size(limits.file_size_bytes)
        ),
        "permission" => format!("{p}: permission denied in the sandbox"),
        c if c.starts_with("not_regular:") => {
            format!("{p} is {}; file tools read and write regular files only", kind(&c["not_regular:".len()..]))
        }
        c if c.starts_with("os:") => {
            format!("the sandbox refused it ({})", crate::sanitize::inert_line(&c[3..], 40))
        }
        c => format!("refused ({})", crate::sanitize::inert_line(c, 40)),
    };
    format!("{tool} {whole}: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn paths_stay_under_work() {
        let parts = |p: &str| Confined::new(p).map(|c| c.parts);
        let v = |x: &[&str]| x.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(parts("a/b.txt").unwrap(), v(&["a", "b.txt"]));
        assert_eq!(parts("/work/a/./b/../c").unwrap(), v(&["a", "c"]));
        assert_eq!(parts("/work").unwrap(), v(&[]));
        assert_eq!(parts("./").unwrap(), v(&[]));
        for (p, want) in [
            ("/etc/passwd", "outside /work"),
            ("/proc/self/environ", "outside /work"),
            ("/workshop/x", "outside /work"),
            ("../x", "climbs out"),
            ("/work/a/../../x", "climbs out"),
            ("a\0b", "NUL"),
        ] {
            let e = Confined::new(p).unwrap_err();
            assert!(e.contains(want), "{p}: {e}");
        }
        assert!(Confined::new(&"a/".repeat(3000)).unwrap_err().contains("at most"));
        assert!(Confined::new(&"x".repeat(300)).unwrap_err().contains("255"));
        assert!(FileOp::write("/work", vec![], None).unwrap_err().contains("not /work itself"));
        assert!(FileOp::write("f", vec![0; MAX_FILE_BYTES as usize + 1], None).unwrap_err().contains("at most 1M"));
        assert!(FileOp::write("f", vec![], Some(0o4755)).unwrap_err().contains("permission bits"));
        assert!(FileOp::list(None, Some(0)).is_err() && FileOp::list(None, Some(MAX_DEPTH + 1)).is_err());
        // A name shown back is inert.
        let c = Confined::new("a\u{202e}b/\x1b[2J").unwrap();
        assert_eq!(c.shown(None), "/work/a<U+202E>b/␛[2J");
    }

    fn report(stdout: &str) -> RunReport {
        let mut r = RunReport::failed("process", "python", "mcp", "x");
        r.outcome = Outcome::Ok;
        r.error = None;
        r.stdout = stdout.into();
        r
    }

    #[test]
    fn answers_are_parsed_strictly() {
        let l = Limits::default();
        let read = FileOp::read("a.txt", 0, None).unwrap();
        let ok = read.parse("N", &report("N OK read 5 0 5 aGVsbG8=\n"), &l).unwrap();
        assert_eq!(ok, FileReply::Read { path: "/work/a.txt".into(), size: 5, offset: 0, data: b"hello".to_vec() });
        // Lines of another nonce are not the helper's.
        let forged = "M OK read 5 0 5 aGVsbG8=\nN OK read 1 0 1 eA==\n";
        assert!(matches!(read.parse("N", &report(forged), &l).unwrap(), FileReply::Read { size: 1, .. }));
        for bad in [
            "N OK read 5 0 6 aGVsbG8=",
            "N OK read 5 9 0 -",
            "N OK read x 0 5 aGVsbG8=",
            "N OK read 5 0 5 !!!",
            "N OK read 5 0 5",
            "N OK write 5 644",
            "N WHAT",
            "N OK read 1 0 1 eA==\nN OK read 1 0 1 eA==",
        ] {
            assert!(read.parse("N", &report(bad), &l).is_err(), "{bad}");
        }
        let e = read.parse("N", &report("N ERR symlink 0\n"), &l).unwrap_err();
        assert!(e.starts_with("read_file /work/a.txt: /work/a.txt is a symbolic link"), "{e}");
        let e = read.parse("N", &report("N ERR not_regular:p 0\n"), &l).unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
        let e = read.parse("N", &report(""), &l).unwrap_err();
        assert!(e.contains("no answer"), "{e}");

        let list = FileOp::list(Some("d"), Some(2)).unwrap();
        let out = "N E f 3 644 100 612f62 - -\nN E l 0 777 100 6c 2f6574632f706173737764 -\nN E f 0 600 1 ff0a - -\nN OK list 3 all\n";
        let FileReply::Listed { entries, truncated, .. } = list.parse("N", &report(out), &l).unwrap() else { panic!() };
        assert!(!truncated);
        assert_eq!(entries[0].path, "a/b");
        assert_eq!(entries[1].link_target.as_ref().map(Untrusted::raw), Some("/etc/passwd"));
        assert_eq!((entries[2].path.raw(), entries[2].path_hex.as_deref()), ("\u{FFFD}\n", Some("ff0a")));
        assert!(list.parse("N", &report("N E f 3 644 100 zz - -\nN OK list 1 all"), &l).is_err());
        assert!(list.parse("N", &report("N E q 3 644 100 61 - -\nN OK list 1 all"), &l).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_answer_parses_or_is_refused_without_panicking(s in ".{0,400}") {
            let l = Limits::default();
            for op in [FileOp::read("a", 0, None).unwrap(), FileOp::list(None, None).unwrap(), FileOp::write("a", vec![1], None).unwrap()] {
                let _ = op.parse("N", &report(&format!("N {s}")), &l);
                let _ = op.parse("N", &report(&s), &l);
            }
        }
    }

    /// The helper itself, run by the host's Python in a temporary directory
    /// standing for /work (the tiers' tests run it in real sandboxes).
    fn helper(dir: &std::path::Path, op: &FileOp) -> Result<FileReply, String> {
        let l = Limits::default();
        let (spec, nonce) = op.spec(&l).unwrap();
        std::fs::write(dir.join("main.py"), &spec.code).unwrap();
        let out = Command::new("/usr/bin/python3")
            .args(["-u", "main.py"])
            .current_dir(dir)
            .env_clear()
            .output()
            .expect("python3 runs");
        let mut r = report(&String::from_utf8_lossy(&out.stdout));
        r.stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        op.parse(&nonce, &r, &l)
    }

    #[test]
    fn the_helper_writes_reads_lists_and_refuses_links_and_special_files() {
        if !std::path::Path::new("/usr/bin/python3").exists() {
            panic!("/usr/bin/python3 is needed to test the file tools' helper");
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A program left modules where a careless helper would import them.
        for m in ["binascii.py", "errno.py", "json.py", "os.py"] {
            std::fs::write(d.join(m), "raise SystemExit('planted module imported')\n").unwrap();
        }
        let w = helper(d, &FileOp::write("/work/sub/dir/notes.txt", b"hello\nworld".to_vec(), Some(0o600)).unwrap());
        assert_eq!(w.unwrap(), FileReply::Written { path: "/work/sub/dir/notes.txt".into(), bytes: 11, mode: 0o600 });
        assert!(!d.join("main.py").exists(), "the helper removes its own file");
        let r = helper(d, &FileOp::read("sub/dir/notes.txt", 6, Some(3)).unwrap()).unwrap();
        assert_eq!(
            r,
            FileReply::Read { path: "/work/sub/dir/notes.txt".into(), size: 11, offset: 6, data: b"wor".to_vec() }
        );
        // Binary content round-trips exactly.
        let bin: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        helper(d, &FileOp::write("bin", bin.clone(), None).unwrap()).unwrap();
        let FileReply::Read { data, .. } = helper(d, &FileOp::read("bin", 0, None).unwrap()).unwrap() else { panic!() };
        assert_eq!(data, bin);

        std::os::unix::fs::symlink("/etc", d.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("passwd")).unwrap();
        nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let e = helper(d, &FileOp::read("etc/passwd", 0, None).unwrap()).unwrap_err();
        assert!(e.contains("/work/etc is a symbolic link"), "{e}");
        let e = helper(d, &FileOp::read("passwd", 0, None).unwrap()).unwrap_err();
        assert!(e.contains("/work/passwd is a symbolic link"), "{e}");
        let e = helper(d, &FileOp::write("passwd", b"x".to_vec(), None).unwrap()).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_link(d.join("passwd")).unwrap(), std::path::Path::new("/etc/passwd"));
        let e = helper(d, &FileOp::write("etc/x", b"x".to_vec(), None).unwrap()).unwrap_err();
        assert!(e.contains("/work/etc is a symbolic link"), "{e}");
        // A FIFO is refused at once, not read (which would hang).
        let e = helper(d, &FileOp::read("fifo", 0, None).unwrap()).unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
        let e = helper(d, &FileOp::read("nope", 0, None).unwrap()).unwrap_err();
        assert!(e.contains("/work/nope does not exist"), "{e}");
        let e = helper(d, &FileOp::read("sub", 0, None).unwrap()).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = helper(d, &FileOp::list(Some("bin"), None).unwrap()).unwrap_err();
        assert!(e.contains("/work/bin is not a directory"), "{e}");

        // Weird names are listed as data; links are listed, never followed.
        std::fs::write(d.join("a\nb\u{202e}c"), "x").unwrap();
        std::fs::write(d.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff\x1b[2J")), "x")
            .unwrap();
        let FileReply::Listed { entries, truncated, .. } = helper(d, &FileOp::list(None, Some(3)).unwrap()).unwrap()
        else {
            panic!()
        };
        assert!(!truncated);
        let find = |p: &str| entries.iter().find(|e| e.path == p).unwrap_or_else(|| panic!("{p} in {entries:?}"));
        assert_eq!(find("sub/dir/notes.txt").kind, "file");
        assert_eq!(find("sub/dir").kind, "dir");
        assert_eq!(find("etc").kind, "symlink");
        assert_eq!(find("etc").link_target.as_ref().map(Untrusted::raw), Some("/etc"));
        assert_eq!(find("fifo").kind, "fifo");
        assert_eq!(find("a\nb\u{202e}c").size, 1);
        assert!(entries.iter().any(|e| e.path_hex.as_deref() == Some("ff1b5b324a")));
        assert!(!entries.iter().any(|e| e.path.raw().starts_with("etc/")), "the link to /etc was not descended into");
        let FileReply::Listed { entries, .. } = helper(d, &FileOp::list(None, Some(1)).unwrap()).unwrap() else {
            panic!()
        };
        assert!(!entries.iter().any(|e| e.path.raw().contains('/')), "depth 1 lists the directory's own entries");
    }
}
