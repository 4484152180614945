//! What this host offers the process tier: the interpreters programs run
//! with (the sandbox sees the host's /usr) and the limits it can enforce.

use std::sync::OnceLock;

use super::cgroup;
use crate::spec::Language;
use crate::tier::contract::LimitMaxima;

/// What this host lets the process tier enforce: no more processes than the
/// kernel's pid space (less sandbench's own in the run cgroup), no more
/// memory or tmpfs scratch space than the host has, no more descriptors than
/// `fs.nr_open`, no more CPU bandwidth than the CPUs it may use.
pub(crate) fn host_maxima() -> LimitMaxima {
    static M: OnceLock<LimitMaxima> = OnceLock::new();
    *M.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
        // PID_MAX_LIMIT: pid_max can never exceed it.
        let pid_max = read("/proc/sys/kernel/pid_max").unwrap_or(4 << 20).min(4 << 20);
        let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| (kb >> 10) << 20)
        });
        LimitMaxima {
            memory_bytes: mem,
            pids: Some(pid_max.saturating_sub(cgroup::SUPERVISORS)),
            disk_bytes: mem,
            open_files: read("/proc/sys/fs/nr_open"),
            cpus: std::thread::available_parallelism().ok().map(|n| n.get() as f64),
        }
    })
}

pub(super) fn interpreter_on_host(lang: Language) -> Option<String> {
    let cmd = lang.interpreter()[0];
    if cmd.starts_with('/') {
        return std::path::Path::new(cmd).exists().then(|| cmd.to_string());
    }
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| format!("{d}/{cmd}"))
        .find(|p| std::path::Path::new(p).exists())
}

/// What doctor shows for an interpreter found on the host: its version
/// too (`--version`, bounded), since tiers differ (Debian's Node beside
/// NodeSource's, the image's Python beside the host's).
pub(super) fn interpreter_detail(lang: Language, path: String) -> String {
    if lang == Language::Sh {
        return path;
    }
    match version_answer(&path) {
        Some(answer) => format!("{path} {}", version_word(&answer)),
        None => path,
    }
}

/// `path --version`'s first 4 KiB, within 2 s (a host interpreter that
/// hangs or floods holds up no probe); None when it failed or took longer
/// (then it is killed, by the pid this started).
fn version_answer(path: &str) -> Option<String> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut out).take(4096).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let got = rx.recv_timeout(std::time::Duration::from_secs(2));
    // Its end, within what is left of the 2 s (it may close its output and
    // go on): else killed.
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if std::time::Instant::now() < deadline && got.is_ok() => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let buf = got.ok()?;
    status?.success().then(|| String::from_utf8_lossy(&buf).into_owned())
}

/// The version in an interpreter's `--version` answer (`v20.19.2`,
/// `Python 3.11.2`): its last word, printable and short.
pub(crate) fn version_word(answer: &str) -> String {
    let word = answer.lines().next().unwrap_or("").split_whitespace().last().unwrap_or("");
    word.chars().filter(char::is_ascii_graphic).take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_interpreters_version_answer_is_bounded_in_time_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p.to_string_lossy().into_owned()
        };
        assert_eq!(version_answer(&script("ok", "echo Python 3.11.2")).as_deref(), Some("Python 3.11.2\n"));
        assert_eq!(version_word("Python 3.11.2\n"), "3.11.2");
        let t0 = std::time::Instant::now();
        assert_eq!(version_answer(&script("hangs", "exec sleep 30")), None);
        assert_eq!(version_answer(&script("quiet-then-hangs", "echo v1; exec >&-; exec sleep 30")), None);
        assert_eq!(version_answer(&script("floods", "exec yes")), None);
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{:?}", t0.elapsed());
        assert_eq!(version_word("v1\x1b[2J\n"), "v1[2J");
    }
}
