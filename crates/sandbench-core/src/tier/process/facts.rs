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
    let out = std::process::Command::new(&path).arg("--version").stdin(std::process::Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => format!("{path} {}", version_word(&String::from_utf8_lossy(&o.stdout))),
        _ => path,
    }
}

/// The version in an interpreter's `--version` answer (`v20.19.2`,
/// `Python 3.11.2`): its last word, printable and short.
pub(crate) fn version_word(answer: &str) -> String {
    let word = answer.lines().next().unwrap_or("").split_whitespace().last().unwrap_or("");
    word.chars().filter(char::is_ascii_graphic).take(40).collect()
}
