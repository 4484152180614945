//! The run log: every run a front end makes (run, compare, gauntlet, agent,
//! mcp, the workbench) appended as one JSON line to `runs.jsonl` in the
//! state directory, so that runs made by other processes (an agent's MCP
//! server in another terminal) can be listed and followed.
//!
//! Several sandbench processes append at once: each entry is one `write` on
//! an `O_APPEND` file, and rotation happens under an exclusive `flock`. The
//! log is bounded: past `max_bytes` the file becomes `runs.jsonl.1` (older
//! ones shift up, the oldest beyond `keep` is dropped). Entries hold what the
//! sandbox produced only bounded; nothing here is trusted when read back.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::report::RunReport;
use crate::sanitize::head_tail;
use crate::spec::RunSpec;

/// Code kept per entry (head and tail); the hash is of the whole program.
pub const MAX_CODE_BYTES: usize = 16 << 10;
/// stdout and stderr kept per entry, each (head and tail).
pub const MAX_OUTPUT_BYTES: usize = 8 << 10;
/// Default size of the current file before it is rotated.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 20;
/// Rotated files kept (`runs.jsonl.1` … `.N`).
pub const DEFAULT_KEEP: usize = 3;

/// One run as the log keeps it. Field names are a contract like the report's.
/// Written inert like the report ([`crate::sanitize::inert`]): the code, the
/// label and the client's name are as untrusted as the program's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Entry {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub unix_ms: i64,
    /// run, compare, gauntlet, agent, mcp, tui.
    pub front_end: String,
    /// The MCP client's name (from its `initialize`), when a client asked.
    #[serde(default)]
    pub client: Option<String>,
    pub tier: String,
    /// The session the run belonged to, when it had one.
    #[serde(default)]
    pub session: Option<String>,
    pub language: String,
    pub label: String,
    /// The program, head and tail when longer than `MAX_CODE_BYTES`.
    pub code: String,
    pub code_bytes: usize,
    pub code_truncated: bool,
    /// SHA-256 of the whole program, hex.
    pub code_sha256: String,
    /// The full verdict and timings; stdout/stderr bounded like the code.
    pub report: RunReport,
}

crate::sanitize::inert::inert_serialize!(Entry);

impl Entry {
    pub fn new(front_end: &str, client: Option<&str>, spec: &RunSpec, report: &RunReport) -> Entry {
        let now = chrono::Utc::now();
        let (code, code_cut) = head_tail(&spec.code, MAX_CODE_BYTES);
        let mut report = report.clone();
        let (stdout, cut) = head_tail(&report.stdout, MAX_OUTPUT_BYTES);
        report.stdout_truncated |= cut > 0;
        report.stdout = stdout;
        let (stderr, cut) = head_tail(&report.stderr, MAX_OUTPUT_BYTES);
        report.stderr_truncated |= cut > 0;
        report.stderr = stderr;
        Entry {
            time: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            unix_ms: now.timestamp_millis(),
            front_end: front_end.to_string(),
            client: client.map(|c| crate::sanitize::inert_line(c, 80)),
            tier: report.tier.clone(),
            session: report.session.as_ref().map(|s| s.id.clone()),
            language: spec.language.name().to_string(),
            label: spec.label.clone(),
            code,
            code_bytes: spec.code.len(),
            code_truncated: code_cut > 0,
            code_sha256: sha256_hex(spec.code.as_bytes()),
            report,
        }
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The log's files in one directory.
#[derive(Debug, Clone)]
pub struct RunLog {
    dir: PathBuf,
    pub max_bytes: u64,
    pub keep: usize,
}

impl RunLog {
    pub fn new(dir: impl Into<PathBuf>) -> RunLog {
        RunLog { dir: dir.into(), max_bytes: DEFAULT_MAX_BYTES, keep: DEFAULT_KEEP }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("runs.jsonl")
    }

    fn rotated(&self, n: usize) -> PathBuf {
        self.dir.join(format!("runs.jsonl.{n}"))
    }

    /// Append one entry (rotating first when the file would pass `max_bytes`).
    pub fn append(&self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        std::fs::create_dir_all(&self.dir)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join("runs.lock"))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| std::io::Error::from(e))?;
        let mut size = std::fs::metadata(self.path()).map(|m| m.len()).unwrap_or(0);
        if size > 0 && size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
            size = 0;
        }
        let mut f = OpenOptions::new().create(true).append(true).open(self.path())?;
        // One write: concurrent appenders never interleave within a line.
        let wrote = f.write_all(&line);
        if wrote.is_err() {
            // A full disk takes part of a line: cut it off again, so that the
            // log holds whole entries only (readers, and the next append).
            let _ = f.set_len(size);
        }
        wrote
    }

    fn rotate(&self) -> std::io::Result<()> {
        if self.keep == 0 {
            return std::fs::remove_file(self.path());
        }
        let _ = std::fs::remove_file(self.rotated(self.keep));
        for n in (1..self.keep).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        std::fs::rename(self.path(), self.rotated(1))
    }

    /// Every readable entry, oldest first, and how many lines were not entries.
    pub fn read_all(&self) -> std::io::Result<(Vec<Entry>, usize)> {
        let mut entries = vec![];
        let mut bad = 0;
        let mut files: Vec<PathBuf> = (1..=self.keep).rev().map(|n| self.rotated(n)).collect();
        files.push(self.path());
        for p in files {
            let f = match File::open(&p) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            read_lines(f, &mut entries, &mut bad);
        }
        Ok((entries, bad))
    }

    /// Entries appended to the current file past byte `offset`, and the new
    /// offset: how a follower picks up what other processes wrote. A rotated
    /// file (shorter than `offset`) is read from its start.
    pub fn read_from(&self, offset: u64) -> std::io::Result<(Vec<Entry>, u64)> {
        use std::io::{Seek, SeekFrom};
        let mut f = match File::open(self.path()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], 0)),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        let start = if offset > len { 0 } else { offset };
        f.seek(SeekFrom::Start(start))?;
        let mut entries = vec![];
        let mut bad = 0;
        let mut reader = BufReader::new(f);
        let mut pos = start;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf)?;
            // A line still being written has no newline yet: leave it for next time.
            if n == 0 || buf.last() != Some(&b'\n') {
                break;
            }
            pos += n as u64;
            parse_line(&buf, &mut entries, &mut bad);
        }
        Ok((entries, pos))
    }
}

fn read_lines(f: File, entries: &mut Vec<Entry>, bad: &mut usize) {
    let mut reader = BufReader::new(f);
    let mut buf = Vec::new();
    while let Ok(n) = reader.read_until(b'\n', &mut buf) {
        if n == 0 {
            break;
        }
        parse_line(&buf, entries, bad);
        buf.clear();
    }
}

fn parse_line(buf: &[u8], entries: &mut Vec<Entry>, bad: &mut usize) {
    let line = buf.strip_suffix(b"\n").unwrap_or(buf);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match serde_json::from_slice::<Entry>(line) {
        Ok(e) => entries.push(e),
        Err(_) => *bad += 1,
    }
}

/// The log this process writes to and the front end it is, set once by the
/// binary's `main` from the config. Library users (tests) that never install
/// one log nothing.
static SINK: OnceLock<(RunLog, &'static str)> = OnceLock::new();

pub fn install(log: RunLog, front_end: &'static str) {
    let _ = SINK.set((log, front_end));
}

/// The installed log, if any.
pub fn installed() -> Option<&'static RunLog> {
    SINK.get().map(|(l, _)| l)
}

/// Record a finished run. A failure to log never fails the run: it goes to
/// sandbench's own log file.
pub fn record(spec: &RunSpec, report: &RunReport, client: Option<&str>) {
    let Some((log, front_end)) = SINK.get() else { return };
    if let Err(e) = log.append(&Entry::new(front_end, client, spec, report)) {
        tracing::warn!("cannot append to the run log {}: {e}", log.path().display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Language;

    fn entry(code: &str, out: &str) -> Entry {
        let spec = RunSpec::new(Language::Python, code);
        let mut r = RunReport::failed("process", "python", "-", "x");
        r.stdout = out.into();
        Entry::new("run", Some("client\x1b[2J"), &spec, &r)
    }

    #[test]
    fn entries_are_bounded_hashed_and_inert() {
        let code = "print(1)\n".repeat(10_000);
        let e = entry(&code, &"y".repeat(100_000));
        assert!(e.code.len() < MAX_CODE_BYTES + 100 && e.code_truncated);
        assert_eq!(e.code_bytes, code.len());
        assert_eq!(e.code_sha256, sha256_hex(code.as_bytes()));
        assert_eq!(e.code_sha256.len(), 64);
        assert!(e.report.stdout.len() < MAX_OUTPUT_BYTES + 100 && e.report.stdout_truncated);
        assert_eq!(e.client.as_deref(), Some("client␛[2J"));
        assert!(e.time.ends_with('Z'));
    }

    #[test]
    fn appends_rotate_and_read_back_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RunLog::new(dir.path());
        let one = serde_json::to_vec(&entry("print(0)", "")).unwrap().len() as u64 + 1;
        log.max_bytes = one * 2 + 5; // two entries per file
        log.keep = 2;
        for i in 0..7 {
            log.append(&entry(&format!("print({i})"), "")).unwrap();
        }
        // 7 entries, 2 per file, 1 current + 2 rotated kept: the last 5 or 6 survive.
        let (all, bad) = log.read_all().unwrap();
        assert_eq!(bad, 0);
        let codes: Vec<_> = all.iter().map(|e| e.code.clone()).collect();
        assert_eq!(codes.last().unwrap(), "print(6)");
        assert!(codes.len() <= 6 && codes.len() >= 5, "{codes:?}");
        assert!(!codes.contains(&"print(0)".to_string()));
        assert!(!dir.path().join("runs.jsonl.3").exists());
        for w in codes.windows(2) {
            assert!(w[0] < w[1], "oldest first: {codes:?}");
        }
    }

    #[test]
    fn a_follower_reads_only_whole_new_lines_and_skips_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::new(dir.path());
        log.append(&entry("print(1)", "")).unwrap();
        let (got, off) = log.read_from(0).unwrap();
        assert_eq!(got.len(), 1);
        let mut f = OpenOptions::new().append(true).open(log.path()).unwrap();
        f.write_all(b"not json\n{\"half\":").unwrap();
        let (got, off2) = log.read_from(off).unwrap();
        assert!(got.is_empty());
        log.append(&entry("print(2)", "")).unwrap();
        // The half line is now glued to a whole one: that line is garbage, skipped.
        let (_, bad) = log.read_all().unwrap();
        assert_eq!(bad, 2);
        assert!(off2 > off);
    }
}
