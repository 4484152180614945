//! The process tier's host side of building a sandbox: start the helper,
//! lease the run's uid and make its cgroup while it execs, hand it the
//! sandbox's shape (`Launched`, single use), and the cgroup layout.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Context};
use nix::fcntl::OFlag;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::cgroup::{self, Layout, RunCgroup};
use super::sandbox::{self, Status};
use super::uids;
use crate::spec::Limits;

/// What the tier takes from sandbench's environment (`config::HostEnv`).
#[derive(Debug, Clone)]
pub(super) struct Host {
    /// The binary started as the sandbox helper.
    pub(super) exe: std::path::PathBuf,
    /// `exe` was configured (`SANDBENCH_HELPER`), not resolved.
    pub(super) explicit: bool,
    pub(super) try_user_cgroup: bool,
}

impl Host {
    pub(super) fn of(env: &crate::config::HostEnv) -> Host {
        Host {
            exe: env.helper.clone().unwrap_or_else(|| super::helper_exe::default_helper().exe.clone()),
            explicit: env.helper.is_some(),
            try_user_cgroup: env.try_user_cgroup,
        }
    }
}

/// How every sandbox of a tier instance is made (the same for cold and spares).
#[derive(Debug, Clone)]
pub(super) struct Shape {
    pub(super) host: Host,
    pub(super) uid_range: (u32, u32),
    pub(super) allow_degraded: bool,
    pub(super) zygote: Option<std::sync::Arc<super::zygote::Zygote>>,
}

/// A sandbox helper started with its [`sandbox::Prepare`]: namespaces,
/// root, the program's process set up and waiting, in its fresh cgroup.
/// Single use. Dropping it kills the helper (and with it the sandbox) and
/// removes the cgroup; the uid lease goes last, once nothing runs as it.
pub(super) struct Launched {
    pub(super) child: tokio::process::Child,
    /// The helper's stdin (a socket; see `take_channels`).
    pub(super) stdin: Option<tokio::net::UnixStream>,
    pub(super) status: Option<BufReader<tokio::net::unix::pipe::Receiver>>,
    /// Status lines read before the run (while waiting for `Ready`).
    pub(super) early: Vec<Status>,
    pub(super) ready: bool,
    pub(super) cg: Option<RunCgroup>,
    /// The run's own uid (as root); `None` in a user namespace, where the
    /// program keeps the invoking user's uid.
    pub(super) uid: Option<uids::UidLease>,
    pub(super) warnings: Vec<String>,
    /// Marks of the run's own time taken before `execute` (ms from its start).
    pub(super) timeline: Vec<(&'static str, f64)>,
    /// The cgroup's counters at the program's exit.
    pub(super) final_stats: Option<cgroup::Stats>,
    /// The host end of the channel init hands the egress listener over
    /// (see `netns`); every helper gets one, a run without network drops it.
    pub(super) net: Option<OwnedFd>,
    /// What the sandbox's helper and init hold once it is built, as they
    /// read it back from the kernel (`Status::Privileges`).
    pub(super) privileges: serde_json::Map<String, serde_json::Value>,
    /// The program's process comes from the zygote, started with this
    /// interpreter and environment (`zygote.rs`).
    pub(super) zygote: Option<sandbox::Waiter>,
    /// The zygote that forked the program's process, and its pid then.
    pub(super) forked_by: Option<(std::sync::Arc<super::zygote::Zygote>, u32)>,
}

impl Launched {
    pub(super) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether a spare, built and waiting, can still take a program, from
    /// what the kernel says: its helper runs, its cgroup still holds its
    /// init (a process killed from outside leaves `cgroup.procs` at its
    /// exit), and the zygote that watches its program's process (if one
    /// does) is still the one that did.
    pub(super) fn waiting(&mut self) -> bool {
        self.alive()
            && self.cg.as_ref().is_none_or(|c| !c.members().is_empty())
            && self.forked_by.as_ref().is_none_or(|(z, pid)| z.serving(*pid))
    }

    /// Read status lines until the sandbox says it is ready.
    pub(super) async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let status = self.status.as_mut().ok_or_else(|| anyhow!("helper has no status pipe"))?;
        let mut line = Vec::new();
        while !self.ready {
            let n = read_line_bounded(status, &mut line).await.context("sandbox status")?;
            if n == 0 {
                anyhow::bail!("the sandbox ended while it was being built (see the log)");
            }
            match sandbox::parse_status(&line) {
                Status::Ready => self.ready = true,
                Status::Mark { .. } => {}
                Status::Privileges { who, held } => {
                    self.privileges.insert(who, json!(held));
                }
                Status::Error { msg } => anyhow::bail!("{msg}"),
                s => self.early.push(s),
            }
        }
        Ok(())
    }

    /// Processes of the sandbox (helper, init, the waiting interpreter) and
    /// their resident memory (PSS).
    pub(super) fn memory(&self) -> u64 {
        self.child.id().map(|p| crate::host::pss_bytes(&crate::host::process_tree(p as i32))).unwrap_or(0)
    }

    /// Finish off what is left of a sandbox whose program is done: the helper
    /// (it exits right after init), the cgroup, then the uid.
    pub(super) async fn teardown(mut self) {
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        if let Some(mut c) = self.cg.take() {
            tokio::task::spawn_blocking(move || c.remove()).await.ok();
        }
        drop(self.uid.take());
    }
}

/// The cgroup layout, detected once (the first caller's environment decides).
pub(super) fn layout(try_user_cgroup: bool) -> &'static Result<Layout, String> {
    static L: OnceLock<Result<Layout, String>> = OnceLock::new();
    L.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() && !try_user_cgroup {
            // v1 hierarchies are root's; on v2 an unprivileged user can only
            // use a delegated subtree, which detect() tries.
            return cgroup::detect().map_err(|e| format!("{e} (run as root, or use a systemd-delegated cgroup v2)"));
        }
        cgroup::detect()
    })
}

/// Start a helper and hand it the sandbox's shape. The run's uid (a
/// /proc scan) and cgroup are made while the helper binary execs.
/// `session`: a session's sandbox, which runs one program per call
/// (`session.rs`); otherwise one program, then it ends.
pub(super) async fn launch(
    limits: &Limits,
    waiter: Option<sandbox::Waiter>,
    network_port: Option<u16>,
    run_ca: Option<String>,
    session: bool,
    shape: &Shape,
    t0: std::time::Instant,
) -> anyhow::Result<Launched> {
    let (uid_range, allow_degraded) = (shape.uid_range, shape.allow_degraded);
    let try_user_cgroup = shape.host.try_user_cgroup;
    let at = |what: &'static str| (what, t0.elapsed().as_secs_f64() * 1000.0);
    let mut timeline = vec![];
    let root = nix::unistd::geteuid().is_root();
    let exe = &shape.host.exe;
    let (status_r, status_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("cannot create the status pipe")?;
    let (net_host, net_helper) = stream_pair().context("cannot create the egress channel")?;
    // The helper's stdin is a socket: the status pipe and the egress channel
    // travel over it (`take_channels`), so the spawn needs no code between
    // fork and exec and std makes it a posix_spawn (a vfork: no copy of this
    // process's page tables, no copy-on-write faults in its threads after).
    let (ctl_host, ctl_helper) = stream_pair().context("cannot create the helper's control socket")?;
    // The program's process from the zygote where it is exactly what this
    // sandbox would start (`zygote.rs`); otherwise init forks it.
    let usable = |z: &&std::sync::Arc<super::zygote::Zygote>| {
        root && !session && waiter.as_ref() == Some(&z.waiter) && z.fits(allow_degraded)
    };
    let zygote = shape.zygote.as_ref().filter(usable).filter(|z| match z.ready(exe) {
        Ok(()) => true,
        Err(e) => {
            tracing::info!("no zygote: {e}");
            false
        }
    });
    let zygote_conn = match zygote {
        Some(_) => Some(super::zygote::pair().context("cannot connect the sandbox to the zygote")?),
        None => None,
    };
    let mut cmd = Command::new(exe);
    cmd.arg("__sandbox")
        .env_clear()
        .stdin(std::process::Stdio::from(ctl_helper))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().with_context(|| format!("cannot start the sandbox helper {}", exe.display()))?;
    // Our copy of the helper's end goes with the command: init must see EOF
    // when the host closes its end.
    drop(cmd);
    timeline.push(at("helper_spawned"));
    let mut fds = vec![status_w.as_raw_fd(), net_helper.as_raw_fd()];
    fds.extend(zygote_conn.as_ref().map(|(_, h)| h.as_raw_fd()));
    let iov = [std::io::IoSlice::new(b"c")];
    nix::sys::socket::sendmsg::<()>(
        ctl_host.as_raw_fd(),
        &iov,
        &[nix::sys::socket::ControlMessage::ScmRights(&fds)],
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .context("cannot hand the sandbox helper its channels")?;
    drop(status_w);
    drop(net_helper);
    let zygote_conn = zygote_conn.map(|(z, _)| z);
    let mut stdin = {
        let s = std::os::unix::net::UnixStream::from(ctl_host);
        s.set_nonblocking(true).context("helper's control socket")?;
        tokio::net::UnixStream::from_std(s).context("helper's control socket")?
    };
    let lim = limits.clone();
    let (uid, cg, warnings) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let mut warnings = vec![];
        let uid = if root {
            Some(
                uids::lease(uid_range.0, uid_range.1)
                    .map_err(|e| anyhow!("cannot get the run a uid of its own: {e}"))?,
            )
        } else {
            None
        };
        let cg = match layout(try_user_cgroup) {
            // Cgroups work here: a run without its own is not the sandbox
            // sandbench promised, so it does not happen.
            Ok(l) => Some(RunCgroup::create(l, &lim).context("cannot create the run's cgroup")?),
            Err(e) => {
                warnings.push(format!(
                    "no cgroup ({e}): fork and memory bombs are contained only by rlimits and the pid namespace"
                ));
                None
            }
        };
        Ok((uid, cg, warnings))
    })
    .await
    .context("sandbox preparation")??;
    timeline.push(at("uid_and_cgroup"));
    let mut forked_by = None;
    if let (Some(z), Some(conn)) = (zygote, zygote_conn) {
        let id = uid.as_ref().map_or(0, |l| l.uid);
        let pid = z.hand(conn, id, id, network_port).map_err(|e| anyhow!("cannot start the program's process: {e}"))?;
        forked_by = Some((z.clone(), pid));
    }
    let prep = sandbox::Prepare {
        host_pid: std::process::id() as i32,
        cgroup_procs: cg
            .as_ref()
            .map(|c| c.procs_files().iter().map(|p| p.to_string_lossy().into_owned()).collect())
            .unwrap_or_default(),
        user_ns: !root,
        run_uid: uid.as_ref().map_or(0, |l| l.uid),
        run_gid: uid.as_ref().map_or(0, |l| l.uid),
        allow_degraded,
        disk_bytes: limits.disk_bytes,
        waiter,
        network_port,
        run_ca,
        session,
        build: super::helper_exe::BUILD.into(),
        zygote: zygote.is_some(),
    };
    stdin.write_all(&sandbox::frame_prepare(&prep)).await.context("cannot talk to the sandbox helper")?;
    let status_rx = tokio::net::unix::pipe::Receiver::from_owned_fd(status_r).context("status pipe")?;
    Ok(Launched {
        child,
        stdin: Some(stdin),
        status: Some(BufReader::new(status_rx)),
        early: vec![],
        ready: false,
        cg,
        uid,
        warnings,
        timeline,
        final_stats: None,
        net: Some(net_host),
        privileges: Default::default(),
        zygote: zygote.map(|z| z.waiter.clone()),
        forked_by,
    })
}

/// An unnamed, close-on-exec unix stream socketpair.
fn stream_pair() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
}

/// Read one line of at most 64 KiB; longer lines are cut (the rest is read as
/// further lines and fails to parse, which is reported, not trusted).
pub(super) async fn read_line_bounded<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    line.clear();
    let n = (&mut *r).take(64 * 1024).read_until(b'\n', line).await?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::process::sandbox::Status;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn bounded_lines() {
        let data = vec![b'x'; 100_000];
        let mut r = BufReader::new(&data[..]);
        let mut line = vec![];
        let n = read_line_bounded(&mut r, &mut line).await.unwrap();
        assert_eq!(n, 64 * 1024);
        assert!(matches!(sandbox::parse_status(&line), Status::Error { .. }));
    }
}
