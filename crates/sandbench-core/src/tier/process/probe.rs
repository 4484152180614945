//! What the process tier can do here: `doctor`'s checks (cgroups, the
//! interpreters, a real sandbox running a trivial program, what it holds)
//! and the limits this host lets it enforce.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cgroup;
use super::facts::{interpreter_detail, interpreter_on_host};
use super::launch::layout;
use super::{seccomp, ProcessTier};
use crate::spec::{Language, RunSpec};
use crate::tier::contract::{Availability, Check};

impl ProcessTier {
    /// Which binary builds each sandbox (see `helper_exe`).
    fn helper_check(&self) -> Check {
        if self.host.explicit {
            return Check::ok("helper", format!("{} (SANDBENCH_HELPER)", self.host.exe.display()));
        }
        match &super::helper_exe::default_helper().fallback {
            None => {
                Check::ok("helper", format!("{} (this build's, next to sandbench)", super::helper_exe::HELPER_NAME))
            }
            Some(why) => Check::warn(
                "helper",
                format!("sandbench's own binary, as each run's sandbox helper: {why}"),
                "cargo build --release builds sandbench-sandbox next to sandbench (cargo run builds only sandbench); \
each run's helper then starts in about half the CPU time",
            ),
        }
    }

    pub(super) async fn probe_inner(&self) -> Availability {
        let mut checks = vec![];
        match layout(self.host.try_user_cgroup) {
            Ok(l) => checks.push(Check::ok(
                "cgroup",
                format!("{} — memory and pids limits, CPU accounting", match l.version() {
                    cgroup::Version::V1 => "v1",
                    cgroup::Version::V2 => "v2",
                }),
            )),
            // The sandbox still works (the probe below says whether): a
            // weaker fallback, so a warning.
            Err(e) => checks.push(Check::warn(
                "cgroup",
                format!("unavailable: {e}; fork and memory bombs are contained only by rlimits and the pid namespace"),
                "run sandbench as root, or on cgroup v2 from a delegated cgroup (systemd-run --user --scope -p Delegate=yes sandbench ...)",
            )),
        }
        checks.push(self.helper_check());
        for lang in Language::ALL {
            let missing = format!("{} not found in /usr/local/bin:/usr/bin:/bin", lang.interpreter()[0]);
            let fix = format!("apt-get install {}", lang.debian_package());
            match interpreter_on_host(lang) {
                Some(p) => checks.push(Check::ok(lang.name(), interpreter_detail(lang, p))),
                // Python and sh are the tier's own (spares, probes); without
                // Node only JavaScript programs fail.
                None if lang == Language::Javascript => {
                    checks.push(Check::warn(lang.name(), format!("{missing}: JavaScript programs cannot run"), fix))
                }
                None => checks.push(Check::fail(lang.name(), missing, fix)),
            }
        }
        // The honest test: build a real sandbox and run a trivial program,
        // which also says which data libraries import there.
        let mut spec = RunSpec::new(Language::Sh, format!("{}exit 0\n", crate::tier::libraries::probe_sh()));
        spec.limits.wall_time = Duration::from_secs(10);
        spec.label = "doctor probe".into();
        let probe = ProcessTier {
            host: self.host.clone(),
            egress: Default::default(),
            uid_base: self.uid_base,
            uid_count: self.uid_count,
            allow_degraded: self.allow_degraded,
            keep_spare: false,
            spare_limits: self.spare_limits.clone(),
            spare: Default::default(),
            spare_language: Arc::new(Mutex::new(Language::Python)),
            filling: Default::default(),
            zygote: None,
        };
        let report = crate::runner::run(Arc::new(probe), spec).await;
        let sandbox_ok = report.outcome == crate::report::Outcome::Ok && report.exit.code == Some(0);
        if sandbox_ok {
            let d = &report.details;
            checks.push(Check::ok(
                "namespaces",
                format!(
                    "pid, net, mount, ipc, uts, cgroup{}",
                    if d["user_ns"].as_bool() == Some(true) { ", user" } else { "" }
                ),
            ));
            let ll = d["landlock"].as_str().unwrap_or("unknown").to_string();
            if ll == "fully_enforced" || ll == "partially_enforced" {
                checks.push(Check::ok("landlock", ll));
            } else {
                checks.push(Check::fail(
                    "landlock",
                    ll,
                    "boot with lsm=landlock,... (CONFIG_SECURITY_LANDLOCK); the mount namespace still applies",
                ));
            }
            checks.push(Check::ok(
                "seccomp",
                format!(
                    "{} syscalls denied, namespace clones refused, socket families other than {} refused",
                    seccomp::DENIED.len(),
                    seccomp::FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            ));
            checks.push(crate::tier::libraries::check(
                &report.stdout,
                "in the sandbox",
                "apt-get install --no-install-recommends python3-numpy python3-pandas python3-matplotlib (the sandbox sees the host's /usr)",
            ));
            checks.push(Check::ok("uid", uid_policy(self.uid_base, self.uid_count, &d["uid"])));
            checks.push(holds_check(&d["privileges"]));
            checks.push(Check::ok("warm", self.warm_check().await));
        } else {
            let why = report.error.clone().unwrap_or_else(|| report.summary_line());
            checks.push(Check::fail(
                "sandbox",
                format!("a trivial program failed: {why}"),
                "check that user namespaces are allowed (sysctl kernel.unprivileged_userns_clone=1) and see the log",
            ));
        }
        let available = sandbox_ok;
        let summary = if available {
            let cg = match layout(self.host.try_user_cgroup) {
                Ok(l) => format!("cgroup {:?}", l.version()).to_lowercase(),
                Err(_) => "no cgroup: weaker containment".into(),
            };
            format!("ready ({cg}, landlock {}, seccomp)", report.details["landlock"].as_str().unwrap_or("?"))
        } else {
            "unavailable: the sandbox could not start a trivial program".into()
        };
        Availability { tier: "process".into(), available, summary, checks }
    }
}

/// What the sandbox's init (and its helper outside) held while the probe's
/// program ran, as each read it back from the kernel: a warning when that
/// was not reported (sandbench cannot say).
pub(super) fn holds_check(privileges: &serde_json::Value) -> Check {
    let said = |who: &str| privileges.get(who).and_then(|v| v.as_str()).map(|h| format!("{who}: {h}"));
    match (said("init"), said("helper")) {
        (Some(i), h) => Check::ok("holds", [Some(i), h].into_iter().flatten().collect::<Vec<_>>().join("; ")),
        _ => Check::warn(
            "holds",
            "the sandbox's init did not say what it holds",
            "see the log (sandbench.log): the privilege drop may have failed",
        ),
    }
}

/// Which uid programs run as, in words, for `doctor` and the report.
pub(super) fn uid_policy(base: u32, count: u32, used: &serde_json::Value) -> String {
    if nix::unistd::geteuid().is_root() {
        format!(
            "each run gets its own uid from {base}..{} (no host process has it; this run: {used})",
            u64::from(base) + u64::from(count) - 1
        )
    } else {
        format!("the invoking user's uid {used}, inside a user namespace (per-uid quotas are shared with that user)")
    }
}
