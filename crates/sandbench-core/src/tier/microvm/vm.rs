//! One QEMU microVM: the command line, the process (which dies with
//! sandbench), the control channel (QEMU's stdio ↔ the guest's
//! virtio-serial port) and the serial console (QEMU's stderr, kept as a
//! bounded tail for error messages).
#![allow(unsafe_code)] // pre_exec hook of QEMU (async-signal-safe calls only)

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::artefacts::Paths;
use super::proto::{self, Decoder, Frame, Item, Ready};

const CONSOLE_TAIL: usize = 8 << 10;
/// Prefix of QEMU's `-name`: `sandbench-vm-<sandbench pid>-<seq>`, so leftovers
/// of a dead sandbench can be found among processes.
pub const NAME_PREFIX: &str = "sandbench-vm-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// What a guest is booted with; runs can only use guests of a fitting shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub mem_mib: u64,
    pub cpus: u32,
    pub accel: Accel,
}

pub(crate) enum Boot<'a> {
    /// A fresh boot; the scratch tmpfs size (bytes) when not the default.
    Cold(Option<u64>),
    /// Restore the state saved in this file (`-incoming`).
    Restore(&'a Path),
}

/// Kernel command line. The clock part is `clock::kernel_args` (the host's
/// TSC rate, when it has an invariant TSC); `panic=-1` + `-no-reboot` end
/// QEMU when the guest dies.
pub(crate) fn kernel_args(probe: bool, disk: Option<u64>, tsc_khz: Option<u64>) -> String {
    let mut s =
        format!("console=ttyS0 quiet panic=-1 reboot=t {} pci=off rdinit=/init", super::clock::kernel_args(tsc_khz));
    if probe {
        s.push_str(" sandbench.probe");
    }
    if let Some(d) = disk {
        s.push_str(&format!(" sandbench.disk={d}"));
    }
    s
}

pub(crate) fn qemu_version(qemu: &str) -> Option<String> {
    static V: OnceLock<Mutex<std::collections::HashMap<String, Option<String>>>> = OnceLock::new();
    let m = V.get_or_init(Default::default);
    if let Some(v) = m.lock().ok()?.get(qemu) {
        return v.clone();
    }
    let v = std::process::Command::new(qemu)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(|l| l.trim().to_string()));
    m.lock().ok()?.insert(qemu.to_string(), v.clone());
    v
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.to_string_lossy().replace('\'', "'\\''"))
}

/// Where QEMU finds its end of the egress channel.
pub(crate) const NET_FD: i32 = 3;

/// The QEMU arguments: the fewest devices that work. No network device, no
/// PCI bus, no firmware ROMs; the root disk read-only; one virtio-serial port
/// for control; the serial console on stderr.
pub(crate) fn args(paths: &Paths, shape: Shape, boot: &Boot, name: &str, qmp: Option<&Path>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-M".into(),
        format!("microvm,accel={},x-option-roms=off,rtc=off,pcie=off", shape.accel.name()),
        "-m".into(),
        format!("{}M", shape.mem_mib),
        "-smp".into(),
        shape.cpus.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-name".into(),
        name.into(),
        "-chardev".into(),
        "file,id=con,path=/dev/stderr".into(),
        "-serial".into(),
        "chardev:con".into(),
        "-kernel".into(),
        paths.kernel.to_string_lossy().into_owned(),
        "-initrd".into(),
        paths.initrd.to_string_lossy().into_owned(),
        "-append".into(),
        kernel_args(false, if let Boot::Cold(d) = boot { *d } else { None }, super::clock::host_tsc_khz()),
        "-drive".into(),
        format!("id=root,file={},format=raw,if=none,readonly=on", paths.rootfs.to_string_lossy().replace(',', ",,")),
        "-device".into(),
        "virtio-blk-device,drive=root".into(),
        "-device".into(),
        "virtio-serial-device,max_ports=3".into(),
        "-chardev".into(),
        "stdio,id=ctl,signal=off".into(),
        "-device".into(),
        "virtserialport,chardev=ctl,name=sandbench.0".into(),
        // The egress channel (a socketpair end QEMU inherits): the guest's
        // relay carries a run's allowed connections over it to the host proxy.
        "-chardev".into(),
        format!("socket,id=net,fd={NET_FD}"),
        "-device".into(),
        "virtserialport,chardev=net,name=sandbench.net".into(),
    ];
    if shape.accel == Accel::Kvm {
        a.extend(["-cpu".into(), "host".into()]);
    }
    if let Some(q) = qmp {
        a.extend(["-qmp".into(), format!("unix:{},server=on,wait=off", q.to_string_lossy().replace(',', ",,"))]);
    }
    if let Boot::Restore(state) = boot {
        a.extend(["-incoming".into(), format!("exec:cat {}", shell_quote(state))]);
    }
    a
}

/// One VM's unique name and, when it needs temporary files (the QMP socket
/// of a snapshot save), a directory for them, removed when dropped. A run's
/// guest needs none: nothing of it touches the disk.
pub(crate) struct RunDir {
    pub path: PathBuf,
    pub name: String,
    created: bool,
}

impl RunDir {
    pub(crate) fn create(runs: &Path, with_files: bool) -> anyhow::Result<RunDir> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        // The owner token lets a reaper in any pid namespace judge the VM.
        let name = format!("{}-{}", crate::owner::token()?, SEQ.fetch_add(1, Ordering::Relaxed));
        let path = runs.join(&name);
        if with_files {
            std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
        }
        Ok(RunDir { path, name, created: with_files })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The last bytes of the serial console.
#[derive(Default)]
pub(crate) struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
        let excess = self.0.len().saturating_sub(CONSOLE_TAIL);
        self.0.drain(..excess);
    }
}

pub(crate) struct Guest {
    child: Child,
    stdin: ChildStdin,
    items: mpsc::Receiver<Item>,
    console: Arc<Mutex<Tail>>,
    _dir: RunDir,
    pub qmp: Option<PathBuf>,
    pub shape: Shape,
    pub spawned: Instant,
    pub ready: Option<Ready>,
    /// Spawn → READY (or PONG after a restore), in ms.
    pub boot_ms: Option<f64>,
    /// Agent log lines seen before the run.
    pub notes: Vec<String>,
    /// The host end of the egress channel (`sandbench.net` in the guest).
    pub net: Option<std::os::fd::OwnedFd>,
    /// It ran the pool's warm-up call (`pool.rs`) before it was handed out.
    pub warmed_up: bool,
    /// Dropped with the guest: tells the pool that took it that its run is
    /// over (`Pool::take` defers the refill until then).
    pub(crate) ended: Option<tokio_util::sync::DropGuard>,
}

/// QEMU dies when the sandbench thread that started it dies, and a Ctrl-C
/// at the terminal reaches sandbench (which cancels and cleans up), not QEMU.
pub(crate) fn die_with_sandbench(cmd: &mut Command) {
    // SAFETY: the hook makes only async-signal-safe calls (prctl, setpgid)
    // between fork and exec, and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::setpgid(0, 0);
            Ok(())
        });
    }
}

/// Nice value of every QEMU: a TCG vCPU runs flat out whenever its guest
/// does, and it shares sandbench's scheduling group (its autogroup: QEMU
/// keeps sandbench's session) with sandbench's own threads and whatever
/// sandbench starts on the host. Behind them it gives way to that work
/// (the soak's host `/bin/true` probe, the output pumps) and, with
/// autogroups, still gets the group's whole share against other sessions.
pub const QEMU_NICE: i32 = 10;

/// QEMU runs at [`QEMU_NICE`].
pub(crate) fn behind_host_work(cmd: &mut Command) {
    // SAFETY: the hook makes one async-signal-safe system call
    // (setpriority) between fork and exec and touches no parent memory.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpriority(libc::PRIO_PROCESS, 0, QEMU_NICE);
            Ok(())
        });
    }
}

impl Guest {
    pub(crate) fn spawn(qemu: &str, paths: &Paths, shape: Shape, boot: Boot, with_qmp: bool) -> anyhow::Result<Guest> {
        let dir = RunDir::create(&paths.runs, with_qmp)?;
        let name = format!("{NAME_PREFIX}{}", dir.name);
        let qmp = with_qmp.then(|| dir.path.join("qmp.sock"));
        let (net_host, net_qemu) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .context("cannot create the egress channel")?;
        let qfd = std::os::fd::AsRawFd::as_raw_fd(&net_qemu);
        let mut cmd = Command::new(qemu);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if qfd == NET_FD {
                    if libc::fcntl(qfd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(qfd, NET_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.args(args(paths, shape, &boot, &name, qmp.as_deref()))
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_sandbench(&mut cmd);
        behind_host_work(&mut cmd);
        let mut child =
            cmd.spawn().with_context(|| format!("cannot start {qemu} (apt-get install qemu-system-x86)"))?;
        drop(net_qemu);
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("QEMU has no stdin"))?;
        let mut stdout = child.stdout.take().ok_or_else(|| anyhow!("QEMU has no stdout"))?;
        let mut stderr = child.stderr.take().ok_or_else(|| anyhow!("QEMU has no stderr"))?;
        let (tx, items) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut dec = Decoder::new();
            let mut buf = vec![0u8; 64 << 10];
            let mut out = Vec::new();
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        if let Some(i) = dec.finish() {
                            let _ = tx.send(i).await;
                        }
                        return;
                    }
                    Ok(n) => {
                        dec.push(&buf[..n], &mut out);
                        for i in out.drain(..) {
                            if tx.send(i).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        let console = Arc::new(Mutex::new(Tail::default()));
        let c2 = console.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8 << 10];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = c2.lock() {
                    t.push(&buf[..n]);
                }
            }
        });
        Ok(Guest {
            child,
            stdin,
            items,
            console,
            _dir: dir,
            qmp,
            shape,
            spawned: Instant::now(),
            ready: None,
            boot_ms: None,
            warmed_up: false,
            ended: None,
            notes: vec![],
            net: Some(net_host),
        })
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// QEMU's `-name`, also the name of the run dir under `runs/` (without the prefix).
    pub(crate) fn vm_name(&self) -> String {
        format!("{NAME_PREFIX}{}", self._dir.name)
    }

    /// The console's last lines, made printable, for error messages.
    pub(crate) fn console_tail(&self, lines: usize) -> String {
        let t = self.console.lock().map(|t| t.0.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&t);
        let v: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let s = v[v.len().saturating_sub(lines)..].join(" | ");
        crate::sanitize::visible_controls(s.as_bytes())
    }

    /// Whether the guest's channel reader still runs (it is a task of the
    /// runtime that spawned the guest, and ends with it).
    pub(crate) fn channel_open(&self) -> bool {
        !self.items.is_closed()
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stdin.write_all(bytes).await.context("cannot write to the guest's control channel")?;
        self.stdin.flush().await.context("cannot write to the guest's control channel")?;
        Ok(())
    }

    /// The next item from the guest; `None` once QEMU's stdout is closed.
    pub(crate) async fn next(&mut self) -> Option<Item> {
        self.items.recv().await
    }

    fn died(&self, what: &str) -> anyhow::Error {
        let tail = self.console_tail(6);
        anyhow!("the guest died {what}{}", if tail.is_empty() { String::new() } else { format!(" (console: {tail})") })
    }

    /// Wait for the agent's READY (cold boot) or PONG (after `ping`).
    pub(crate) async fn wait_for(
        &mut self,
        want_pong: bool,
        timeout: Duration,
        stop: &CancellationToken,
    ) -> anyhow::Result<WaitEnd> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            tokio::select! {
                it = self.items.recv() => match it {
                    None => return Err(self.died("while booting")),
                    Some(Item::Frame(Frame::Ready(r))) if !want_pong => {
                        self.boot_ms = Some(self.spawned.elapsed().as_secs_f64() * 1000.0);
                        self.ready = Some(r);
                        return Ok(WaitEnd::Ready);
                    }
                    Some(Item::Frame(Frame::Pong)) if want_pong => {
                        self.boot_ms = Some(self.spawned.elapsed().as_secs_f64() * 1000.0);
                        return Ok(WaitEnd::Ready);
                    }
                    Some(Item::Frame(Frame::Log(l))) => self.notes.push(l),
                    Some(_) => {}
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let tail = self.console_tail(6);
                    bail!("the guest did not become ready within {} s{}", timeout.as_secs(),
                        if tail.is_empty() { String::new() } else { format!(" (console: {tail})") });
                }
                _ = stop.cancelled() => return Ok(WaitEnd::Stopped),
            }
        }
    }

    /// Kill QEMU and wait until it is gone; the run dir goes with `self`.
    pub(crate) async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Start killing without waiting (the wait happens in `kill`).
    pub(crate) fn start_kill(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    Ready,
    Stopped,
}

/// QEMU processes whose `-name` carries `token`.
pub(crate) fn owned_qemu(token: &str) -> Vec<i32> {
    let want = format!("{NAME_PREFIX}{token}-");
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let mut args = cmdline.split(|b| *b == 0);
        if args.any(|a| a == b"-name") && args.next().is_some_and(|n| n.starts_with(want.as_bytes())) {
            out.push(pid);
        }
    }
    out
}

/// Kill QEMU processes and remove run dirs whose sandbench is provably dead
/// (see `owner`): never another host's or boot's, never a held owner lock.
pub(crate) fn reap(paths: &Paths) -> usize {
    let mut sweep = crate::owner::Sweep::new();
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let Some(i) = args.iter().position(|a| *a == b"-name") else { continue };
            let Some(name) = args.get(i + 1).and_then(|a| std::str::from_utf8(a).ok()) else { continue };
            let Some(rest) = name.strip_prefix(NAME_PREFIX) else { continue };
            if sweep.name_dead(rest) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                tracing::info!("killed leftover QEMU {pid} of a dead sandbench ({rest})");
                n += 1;
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(&paths.runs) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if sweep.name_dead(&name) {
                let _ = std::fs::remove_dir_all(e.path());
                n += 1;
            }
        }
    }
    n
}

/// Ask a guest to say it is alive (used after a snapshot restore).
pub(crate) async fn ping(g: &mut Guest) -> anyhow::Result<()> {
    g.send(&proto::encode(proto::K_PING, b"p")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_has_no_network_and_a_read_only_root() {
        let p = super::super::artefacts::paths();
        let a = args(
            &p,
            Shape { mem_mib: 448, cpus: 1, accel: Accel::Tcg },
            &Boot::Cold(Some(1 << 20)),
            "sandbench-vm-1-0",
            None,
        );
        let s = a.join(" ");
        assert!(s.contains("-nodefaults"));
        assert!(s.contains("readonly=on"));
        assert!(!s.contains("netdev") && !s.contains("-nic") && !s.contains("virtio-net"));
        assert!(s.contains("microvm,accel=tcg"));
        assert!(s.contains(&super::super::clock::kernel_args(super::super::clock::host_tsc_khz())));
        assert!(s.contains("sandbench.disk=1048576"));
        // The egress channel is a serial port, not a network device.
        assert!(s.contains("socket,id=net,fd=3") && s.contains("name=sandbench.net"));
        let r = args(
            &p,
            Shape { mem_mib: 448, cpus: 1, accel: Accel::Tcg },
            &Boot::Restore(Path::new("/x/it's")),
            "n",
            None,
        );
        assert!(r.join(" ").contains("exec:cat '/x/it'\\''s'"));
    }

    #[test]
    fn console_tail_is_bounded() {
        let mut t = Tail::default();
        for _ in 0..100 {
            t.push(&[b'x'; 1000]);
        }
        assert_eq!(t.0.len(), CONSOLE_TAIL);
    }
}
