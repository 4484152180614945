//! `doctor` for the docker and gvisor tiers: the daemon, the program's uid,
//! the runtime, the image, then the honest test — a real hardened container
//! runs a trivial program through the runner — and what the warm pool costs.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::cgroup::Cgroup;
use super::container::{self, Shape};
use super::engine::{self, Engine};
use super::lifecycle::{launch, remove};
use super::{runsc_fix, DockerTier};
use crate::config::DockerConfig;
use crate::spec::{Language, RunSpec};
use crate::tier::contract::{Availability, Check};

/// The probe's program: where Node is, and each interpreter's version (its
/// `--version` only: nothing is loaded), then which data libraries import,
/// which common commands are there and whether `ls` works.
const PROBE: &str =
    "command -v node || echo none\nnode --version 2>/dev/null || echo none\npython3 --version 2>&1 || echo none\n";

/// Commands agents' shell snippets use that an image may lack.
const COMMANDS: &[&str] = &["awk", "sed", "grep", "which", "ps", "curl", "wget"];

fn probe_program() -> String {
    format!(
        "{PROBE}{}for c in {}; do command -v $c >/dev/null 2>&1 && echo \"cmd $c\"; done\n\
ls / >/dev/null 2>&1 && echo 'ls ok' || echo \"ls fails: $(ls -d / 2>&1 | head -c 200)\"\n",
        crate::tier::libraries::probe_sh(),
        COMMANDS.join(" ")
    )
}

/// The image's commands, from the probe's answer: which of [`COMMANDS`]
/// are missing, and whether `ls` works (gVisor's runsc 20221219 refuses
/// `statx` and `fstatat` with `AT_NO_AUTOMOUNT`, which coreutils 9 passes:
/// `ls` and `stat` fail with EINVAL there; nothing sandbench sets can change
/// that: a seccomp filter cannot rewrite the flag, and glibc's fallback
/// passes it on).
fn command_checks(stdout: &str, image: &str, tier: &str) -> Vec<Check> {
    let lines: Vec<&str> = stdout.lines().take(256).map(str::trim).collect();
    let missing: Vec<&str> =
        COMMANDS.iter().copied().filter(|c| !lines.iter().any(|l| l.strip_prefix("cmd ") == Some(*c))).collect();
    let mut checks = vec![if missing.is_empty() {
        Check::ok("commands", format!("{} in the image", COMMANDS.join(", ")))
    } else {
        Check::warn(
            "commands",
            format!("no {} in {image}: shell programs that use them fail", missing.join(", ")),
            format!("sandbench setup {tier} (builds the sandbench/runtime image with them), or set [docker] image to one with them"),
        )
    }];
    match lines.iter().find_map(|l| l.strip_prefix("ls ")) {
        Some("ok") => {}
        Some(failed) => {
            let said = crate::sanitize::inert_line(failed.trim_start_matches("fails:").trim(), 160);
            let why = if said.contains("Invalid argument") && tier == "gvisor" {
                "this runsc refuses statx/fstatat with AT_NO_AUTOMOUNT, which coreutils' ls and stat pass; \
Python's os.stat, node's fs.stat, find and du work"
            } else {
                "coreutils cannot stat files here"
            };
            checks.push(Check::warn(
                "ls",
                format!("ls fails in the sandbox ({said}): {why}"),
                if tier == "gvisor" {
                    "a runsc whose statx accepts AT_NO_AUTOMOUNT; until then list files from Python (os.listdir, os.stat) or use the docker tier"
                } else {
                    "see the image's coreutils"
                },
            ));
        }
        None => checks.push(Check::warn("ls", "the probe did not say whether ls works", "see the log (sandbench.log)")),
    }
    checks
}

/// The image's interpreters, from the probe's answer (the image is the
/// user's choice: its answer is bounded and made inert): Node's path and
/// version, Python's version.
fn interpreter_checks(stdout: &str, image: &str, tier: &str) -> Vec<Check> {
    let mut lines = stdout.lines().map(str::trim);
    let (node, node_version, python) =
        (lines.next().unwrap_or(""), lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    // A version starts with a digit (after Node's `v`): a shell's "not
    // found" or anything else is no version.
    let version = |l: &str| {
        Some(crate::tier::process::version_word(l))
            .filter(|v| v.trim_start_matches('v').starts_with(|c: char| c.is_ascii_digit()))
    };
    let python = match version(python) {
        Some(v) => Check::ok("python", format!("python3 {v} in the image")),
        None => Check::fail(
            "python",
            format!("no python3 in {image}"),
            format!("sandbench setup {tier}, or set [docker] image to one with python3"),
        ),
    };
    let node = if node.starts_with('/') && node.len() <= 200 {
        let v = version(node_version).map(|v| format!(" {v}")).unwrap_or_default();
        Check::ok("javascript", format!("node{v} at {} in the image", crate::sanitize::inert_line(node, 200)))
    } else {
        Check::warn(
            "javascript",
            format!("no node in {image}: JavaScript programs cannot run"),
            format!("sandbench setup {tier} (builds the sandbench/runtime image with nodejs), or set [docker] image to one with node"),
        )
    };
    vec![python, node]
}

impl DockerTier {
    /// What the warm pool costs while it waits, measured on one container
    /// started now (as the pool starts them) and removed.
    pub(super) async fn warm_check(&self, engine: &Engine) -> String {
        let n = self.cfg.pool_size;
        if n == 0 {
            return "no warm pool ([docker] pool_size = 0): every run starts cold".into();
        }
        let shape = Shape::new(&self.image, self.runtime, &self.cfg.user, &self.limits);
        let each = match launch(engine, &shape, &format!("doctor-{}", container::new_run_id()), self.name).await {
            Ok(id) => {
                // The loader needs a moment to be resident and waiting.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let m = Cgroup::find(&id).and_then(|c| c.sample(true).usage.memory_bytes);
                remove(&engine.docker, &id).await;
                m
            }
            Err(_) => None,
        };
        format!(
            "long-lived front ends keep {n} container(s) started ahead{}; [docker] pool_size bounds it",
            each.map(|b| format!(", {} each while waiting (measured now)", crate::units::size(b))).unwrap_or_default()
        )
    }

    pub(super) async fn probe_inner(&self) -> Availability {
        let mut checks = vec![];
        let name = self.name.to_string();
        // A probe asks afresh: the daemon may have restarted, or a runtime
        // been registered, since the last one.
        self.reconnect().await;
        let engine = match self.engine().await {
            Ok(e) => e,
            Err(e) => {
                checks.push(Check::fail("daemon", format!("{e:#}"), engine::start_daemon_hint(&self.endpoint.host)));
                return Availability {
                    tier: name,
                    available: false,
                    summary: "unavailable: no Docker daemon answers".into(),
                    checks,
                };
            }
        };
        checks.push(Check::ok(
            "daemon",
            format!("{} — engine {}, API {} (negotiated)", engine.host, engine.server_version, engine.api_version),
        ));
        let mut ok = true;
        match container::choose_ids(&self.cfg.user, engine.local) {
            Ok(_) => {
                let mut detail = container::describe_user(&self.cfg.user);
                if engine.local && self.cfg.user.trim() != container::AUTO_USER {
                    if let Ok((uid, _)) = container::program_ids(&self.cfg.user) {
                        if host_has_uid(uid) {
                            detail.push_str(&format!(" — a host process has uid {uid} too: it shares per-uid quotas"));
                        }
                    }
                }
                checks.push(Check::ok("uid", detail));
            }
            Err(e) => {
                ok = false;
                checks.push(Check::fail("uid", format!("{e:#}"), "set [docker] user = \"auto\" in the config"));
            }
        }
        if let Some(rt) = self.runtime {
            if engine.runtimes.contains(rt) {
                checks.push(Check::ok("runtime", format!("{rt} registered")));
            } else {
                ok = false;
                checks.push(Check::fail(
                    "runtime",
                    format!(
                        "the daemon has no '{rt}' runtime (it has: {})",
                        engine.runtimes.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    runsc_fix(),
                ));
            }
        }
        match engine.has_image(&self.image).await {
            Ok(true) => checks.push(Check::ok("image", self.image.clone())),
            Ok(false) => {
                ok = false;
                checks.push(Check::fail(
                    "image",
                    format!("{} is not present", self.image),
                    format!("sandbench setup {}", self.name),
                ));
            }
            Err(e) => {
                ok = false;
                checks.push(Check::fail("image", format!("{e:#}"), format!("sandbench setup {}", self.name)));
            }
        }
        if ok {
            // The honest test: a real container runs a trivial program,
            // which also says which interpreters the image has.
            let mut spec = RunSpec::new(Language::Sh, probe_program());
            spec.label = "doctor probe".into();
            let probe = DockerTier {
                name: self.name,
                runtime: self.runtime,
                cfg: DockerConfig { pool_size: 0, ..self.cfg.clone() },
                image: self.image.clone(),
                endpoint: self.endpoint.clone(),
                engine: tokio::sync::Mutex::new(Some(engine.clone())),
                pool: OnceLock::new(),
                runs: AtomicU64::new(0),
                prewarmed: AtomicBool::new(false),
                limits: self.limits.clone(),
                egress: Default::default(),
            };
            let report = crate::runner::run(Arc::new(probe), spec).await;
            if report.outcome == crate::report::Outcome::Ok && report.exit.code == Some(0) {
                checks.push(Check::ok(
                    "container",
                    format!(
                        "a hardened container ran a trivial program in {}",
                        crate::units::duration_ms(report.timings_ms.total)
                    ),
                ));
                checks.push(Check::ok(
                    "holds",
                    "no capability but SETUID/SETGID/SETPCAP in the container's bounding set, none in the program's; a one-shot loader drops \
SETGID and SETPCAP once the program is its own uid and SETUID once it has killed, as that uid, what the program left; a session's agent (PID 1, not dumpable, another uid than the program's) and its loaders keep them \
(as root) to make each call's program the session's uid and end the call's processes",
                ));
                checks.extend(interpreter_checks(&report.stdout, &self.image, self.name));
                checks.push(crate::tier::libraries::check(
                    &report.stdout,
                    "in the image",
                    &format!(
                        "sandbench setup {} (builds the sandbench/runtime image with Debian's python3-numpy, python3-pandas, python3-matplotlib), or set [docker] image to one with them",
                        self.name
                    ),
                ));
                checks.extend(command_checks(&report.stdout, &self.image, self.name));
                checks.push(Check::ok("warm", self.warm_check(&engine).await));
            } else {
                ok = false;
                let why = report.error.clone().unwrap_or_else(|| report.summary_line());
                checks.push(Check::fail(
                    "container",
                    format!("a trivial program failed: {why}"),
                    "see the log (sandbench.log) and the daemon's log",
                ));
            }
        }
        let summary = if ok {
            format!("ready ({}, image {}, engine API {})", self.runtime_name(), self.image, engine.api_version)
        } else {
            "unavailable: see the failed checks".into()
        };
        Availability { tier: name, available: ok, summary, checks }
    }
}

/// Does any host process run as `uid` now?
fn host_has_uid(uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())
            && e.metadata().is_ok_and(|m| m.uid() == uid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_checks_read_a_path_and_versions_and_keep_them_inert() {
        use crate::tier::contract::CheckLevel;
        let c = interpreter_checks("/usr/bin/node\nv18.19.0\nPython 3.11.2\n", "img", "docker");
        assert_eq!((c[0].level, c[0].detail.as_str()), (CheckLevel::Ok, "python3 3.11.2 in the image"));
        assert_eq!((c[1].level, c[1].detail.as_str()), (CheckLevel::Ok, "node v18.19.0 at /usr/bin/node in the image"));
        for out in ["", "none\nnone\nPython 3.11.2\n", "v20\n"] {
            let c = interpreter_checks(out, "img", "gvisor");
            assert_eq!(c[1].level, CheckLevel::Warn, "{out:?}");
            assert!(c[1].fix.clone().unwrap().contains("sandbench setup gvisor"));
        }
        for out in ["none\nnone\nnone\n", "none\nnone\n/bin/sh: 1: python3: not found\n", "none\nnone\n"] {
            let c = interpreter_checks(out, "img", "docker");
            assert_eq!(c[0].level, CheckLevel::Fail, "{out:?}");
        }
        interpreter_checks_stay_inert();
    }

    #[test]
    fn command_checks_name_what_is_missing_and_why_ls_fails() {
        use crate::tier::contract::CheckLevel;
        let all: String = COMMANDS.iter().map(|c| format!("cmd {c}\n")).collect();
        let c = command_checks(&format!("{all}ls ok\n"), "img", "docker");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].level, CheckLevel::Ok);
        let c = command_checks("cmd awk\ncmd sed\ncmd grep\ncmd which\nls ok\n", "img", "docker");
        assert_eq!(c[0].level, CheckLevel::Warn);
        assert!(c[0].detail.starts_with("no ps, curl, wget in img"), "{}", c[0].detail);
        let c = command_checks(
            &format!("{all}ls fails: ls: cannot access '/': Invalid argument\x1b]0;t\x07\n"),
            "img",
            "gvisor",
        );
        assert_eq!(c[1].level, CheckLevel::Warn);
        assert!(c[1].detail.contains("AT_NO_AUTOMOUNT"), "{}", c[1].detail);
        assert!(!c[1].detail.contains('\x1b') && !c[1].detail.contains('\x07'), "{}", c[1].detail);
        assert_eq!(command_checks(&all, "img", "docker")[1].level, CheckLevel::Warn);
    }

    fn interpreter_checks_stay_inert() {
        let c = interpreter_checks("/x\x1b]52;c;AAAA\x07\nv1\x1b[2J\nPython \x1b]0;t\x07\n", "img", "docker");
        for c in c {
            assert!(!c.detail.contains('\x1b') && !c.detail.contains('\x07'), "{}", c.detail);
        }
    }
}
