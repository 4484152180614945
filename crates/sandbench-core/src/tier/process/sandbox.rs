//! The in-sandbox side of the process tier. `sandbench __sandbox` is exec'd
//! fresh (single-threaded, so fork is safe) and builds the sandbox:
//!
//! ```text
//! helper (unshares namespaces; stays outside the run's cgroup)
//!   └─ init, pid 1 of a new pid namespace (mounts, pivot_root, joins the run's
//!      cgroup with the program; applies the run's limits; reaps; reports)
//!        └─ program (Landlock, rlimits, its own uid, seccomp, then exec of
//!           the waiting interpreter: it starts while init joins the cgroup)
//! ```
//! The helper's stdin carries a [`Prepare`] (length-prefixed) and then, once a
//! run takes the sandbox, its [`SandboxConfig`] (read by init). A sandbox made
//! ahead (a spare) is the same thing with the second part not sent yet: warm
//! and cold runs get the same isolation by the same code.
//!
//! The order is what makes a cold start cheap: on cgroup v1 moving a process
//! into a cgroup waits for an RCU grace period (~10 ms), so init moves itself
//! and the program's process only after the program's process has exec'd its
//! interpreter (trusted code, not the program yet), and the interpreter starts
//! up meanwhile. The program's first byte runs only after init has seen every
//! step succeed (cgroup joined, the run's rlimits and scratch size applied)
//! and says "go".
//!
//! When init exits the kernel kills every process left in the namespace, so
//! daemons cannot outlive the run; the helper and init die with their parent
//! (PR_SET_PDEATHSIG), so nothing survives sandbench being killed either.
//! Status goes to the host as JSON lines on fd 3.
#![allow(unsafe_code)] // fork, exec and raw descriptors between them: the sandbox helper is plumbing

use std::fs;
use std::os::fd::OwnedFd;

use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

// One file per concern; `init::init_main` reads as the order they run in
// (root, guard, cgroup, limits, privileges, "go", reaping). The helper, the
// status channel and the descriptors' plumbing they share stay in this file.
mod base; // the protocol, the status channel and the descriptors' plumbing
mod guard; // the scratch watch and the program's guard
mod init; // init: pid 1 — root, cgroup, limits, privileges, "go", reaping
mod limits; // rlimits, set by init on the program's process and by itself
mod privs; // what init holds, and drops, on the way
mod program; // the program's process: Landlock, uid, seccomp, wait for "go"
mod root; // the root file system: host binds, /etc, the run's CA, scratch
mod scratch; // the scratch mounts' names and sizes
mod session; // a kept sandbox: init's loop of calls
mod steps; // init's steps, for a one-shot run and a session's calls alike

use base::*;
pub(crate) use base::{frame_prepare, mono_ns, parse_status, Prepare, SandboxConfig, Status, Waiter};
use init::*;
pub(crate) use program::default_signals;
pub(crate) use root::SYSTEM_BUNDLE;
pub use root::{ETC_COPIED, HOST_BINDS, PYTHON_ETC};
pub(crate) use session::{frame_call, KILL_FRAME};
pub(crate) use steps::find_in_path;

/// Entry point of `sandbench __sandbox`. Never returns.
pub fn helper_main() -> ! {
    let channels = take_channels();
    // The host spawned us without code of its own before exec; a host that
    // died before this is caught by the parent check below.
    set_pdeathsig();
    mark("helper_started");
    // Started as /proc/self/{exe,fd/N}, its name would be "exe" or a number.
    let _ = nix::sys::prctl::set_name(c"sandbench-sbx");
    let prep = match read_prepare() {
        Ok(p) => p,
        Err(e) => fail(format!("sandbox helper: {e}")),
    };
    if prep.build != super::helper_exe::BUILD {
        fail(format!(
            "this sandbox helper ({}) is from another build of sandbench than the one that started it: rebuild both (cargo build --release)",
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    // A connection to the zygote comes with a shape that uses it, never
    // without (it would sit unused on fd 5), nor the shape without it.
    if prep.zygote != (channels == 3) {
        fail(format!("the zygote's connection ({channels} channels) does not match the sandbox's shape"));
    }
    // If the host died before PDEATHSIG was set, we were reparented: stop now.
    if nix::unistd::getppid().as_raw() != prep.host_pid {
        // SAFETY: plain exit of a process nobody waits for any more.
        unsafe { libc::_exit(122) }
    }
    // Opened here, written by init after pivot_root (when /sys is gone from
    // its view): descriptors survive both.
    let mut procs = vec![];
    for p in &prep.cgroup_procs {
        match fs::OpenOptions::new().write(true).open(p) {
            Ok(f) => procs.push(OwnedFd::from(f)),
            Err(e) => fail(format!("cannot open cgroup {p}: {e}")),
        }
    }
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    // The cgroup namespace is rooted where the helper was born (sandbench's
    // own cgroup): the program sees its run cgroup as
    // /sandbench/<opaque name>, nothing of the host's tree above.
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if prep.user_ns {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    if let Err(e) = unshare(flags) {
        let hint = if prep.user_ns {
            " (unprivileged user namespaces may be disabled: sysctl -w kernel.unprivileged_userns_clone=1)"
        } else {
            ""
        };
        fail(format!("cannot create namespaces: {e}{hint}"));
    }
    if prep.user_ns {
        // Identity map: our uid keeps its number; capabilities inside the
        // namespace are gone at exec because the uid is not 0.
        let maps = [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ];
        for (f, v) in maps {
            if let Err(e) = fs::write(f, v) {
                fail(format!("cannot write {f}: {e}"));
            }
        }
    }
    if let Err(e) = privs::narrow_bounding_before_init() {
        fail(format!("the sandbox helper cannot narrow its bounding set: {e}"));
    }
    mark("namespaces_made");
    // Held open by the helper for its whole life: init, which loses its
    // parent-death signal when it changes uid, learns from its EOF whether
    // the helper died before the signal was set again.
    let (alive_r, alive_w) = pipe();
    // SAFETY: single-threaded (exec'd fresh), so fork is safe.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(alive_w);
            let owner = if prep.user_ns { (uid.as_raw(), gid.as_raw()) } else { (prep.run_uid, prep.run_gid) };
            init_main(&prep, owner, procs, alive_r)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(procs);
            drop(alive_r);
            // init alone holds the egress channel (and the zygote's).
            let _ = nix::unistd::close(super::netns::NET_FD);
            if prep.zygote {
                let _ = nix::unistd::close(ZYG_FD);
            }
            // Only the status pipe matters now; the program's output reaches
            // the host through its own copies of stdout and stderr, so the
            // host sees EOF when the program side is gone.
            release_output();
            // From here the helper only waits for init: it needs nothing.
            match privs::drop_helper() {
                Ok(held) => send(&Status::Privileges { who: "helper".into(), held }),
                Err(e) => fail(format!("the sandbox helper cannot drop its privileges: {e}")),
            }
            let st = waitpid(child, None);
            drop(alive_w);
            if let Ok(WaitStatus::Signaled(_, sig, _)) = st {
                send(&Status::Warning { msg: format!("sandbox init killed by {sig}") });
            }
            // SAFETY: plain exit; nothing to flush.
            unsafe { libc::_exit(0) }
        }
        Err(e) => fail(format!("fork of the sandbox init failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::program::parse_exec;
    use super::steps::go_message;
    use super::*;
    use std::ffi::CString;

    fn cfg(interp: &[&str], file: &str, env: &[(&str, &str)]) -> SandboxConfig {
        SandboxConfig {
            code: "x".into(),
            file_name: file.into(),
            interpreter: interp.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cpu_secs: 1,
            data_limit: None,
            file_size_bytes: 1,
            disk_bytes: 1,
            open_files: 1,
            nproc: None,
        }
    }

    #[test]
    fn exec_messages_round_trip_and_drop_what_cannot_be_passed() {
        let c = cfg(&["/bin/sh"], "main.sh", &[("PATH", "/bin"), ("A", "b=c"), ("BAD", "x\0y"), ("K=V", "z")]);
        let exe = CString::new("/bin/sh").unwrap();
        let m = go_message(false, &exe, &c);
        let (e, argv, env) = parse_exec(&m).unwrap();
        assert_eq!(e, exe);
        assert_eq!(argv, vec![CString::new("/bin/sh").unwrap(), CString::new("main.sh").unwrap()]);
        assert_eq!(env, vec![CString::new("PATH=/bin").unwrap(), CString::new("A=b=c").unwrap()]);
        assert_eq!(go_message(true, &exe, &c), b"run");
        assert!(parse_exec(b"run").is_none());
        assert!(parse_exec(b"exec\0").is_none());
        assert!(parse_exec(b"").is_none());
    }

    fn helper_exe_build() -> String {
        crate::tier::process::helper_exe::BUILD.into()
    }

    #[test]
    fn prepare_is_framed_by_its_length() {
        let p = Prepare {
            host_pid: 7,
            cgroup_procs: vec!["/x/cgroup.procs".into()],
            user_ns: false,
            run_uid: 2,
            run_gid: 2,
            allow_degraded: false,
            disk_bytes: 4096,
            waiter: None,
            network_port: None,
            run_ca: None,
            session: false,
            build: helper_exe_build(),
            zygote: false,
        };
        let f = frame_prepare(&p);
        let n = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        assert_eq!(n, f.len() - 8);
        let back: Prepare = serde_json::from_slice(&f[8..]).unwrap();
        assert_eq!(back.cgroup_procs, p.cgroup_procs);
    }
}
