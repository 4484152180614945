//! The sandbox's root file system, built by init in its mount namespace:
//! the host's binaries bound read-only, a fresh `/etc` with copied files,
//! Debian's alternatives links (and the run's CA when it has egress), and
//! the size-capped scratch
//! mounts. One step of `init_main` (see the table of contents in
//! `sandbox.rs`).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub(super) fn bind_ro(src: &Path, dst: &Path) -> Result<(), String> {
    mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
        .map_err(|e| format!("bind {}: {e}", src.display()))?;
    // A remount must keep the flags the host mount had (nosuid, nodev, ...):
    // the kernel refuses to clear them inside a user namespace.
    let keep = nix::sys::statvfs::statvfs(dst)
        .map(|s| {
            use nix::sys::statvfs::FsFlags;
            let f = s.flags();
            let mut m = MsFlags::empty();
            for (a, b) in [
                (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
                (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
                (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
                (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
                (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
                (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
            ] {
                if f.contains(a) {
                    m |= b;
                }
            }
            m
        })
        .unwrap_or(MsFlags::empty());
    mount(
        None::<&str>,
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | keep,
        None::<&str>,
    )
    .map_err(|e| format!("remount {} read-only: {e}", dst.display()))
}

pub(super) fn tmpfs(dst: &Path, opts: &str, extra: MsFlags) -> Result<(), String> {
    mount(Some("tmpfs"), dst, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra, Some(opts))
        .map_err(|e| format!("mount tmpfs on {}: {e}", dst.display()))
}

/// Host directories bound read-only, whole, into the sandbox: the
/// interpreters and their libraries. Nothing else of the host is bound; a
/// host unix socket planted in one of them is still unreachable because the
/// seccomp filter refuses `socket(AF_UNIX)` (Landlock cannot yet confine
/// pathname sockets).
pub const HOST_BINDS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Files copied (not bound) from the host's `/etc` into the sandbox's own:
/// the loader's cache, certificates, OpenSSL's config and matplotlib's
/// defaults (Debian's matplotlib reads `/etc/matplotlibrc` and refuses to
/// import without it). The interpreters'
/// config files are [`PYTHON_ETC`]; passwd, group and nsswitch.conf are
/// generated; `/etc/alternatives` is recreated link by link
/// ([`copy_alternatives`]). Nothing else of the host's `/etc` exists in the
/// sandbox.
pub const ETC_COPIED: &[&str] = &["ld.so.cache", "ssl/certs/ca-certificates.crt", "ssl/openssl.cnf", "matplotlibrc"];

/// Python's own config under `/etc/python3*/` (Debian ships them there).
pub const PYTHON_ETC: &[&str] = &["debian_config", "sitecustomize.py"];

/// Most links of the host's `/etc/alternatives` recreated in the sandbox
/// (Debian's has a few hundred); the root's inode budget allows for them.
pub(super) const MAX_ALTERNATIVES: usize = 1024;

/// What the recreated links' targets may take of the root tmpfs (4 MiB).
const ALTERNATIVES_BYTES: usize = 512 << 10;

/// Largest host file copied into the sandbox's `/etc`.
pub(super) const MAX_ETC_FILE: u64 = 4 << 20;

/// Copy a host file into the sandbox's `/etc` (as root, before the program
/// exists): the file itself, never what a link in its place points at (a
/// link from `/etc/matplotlibrc` to `/etc/shadow` would otherwise put the
/// shadow file in every sandbox), and only what was read from the one open
/// descriptor, bounded — no check on a path followed by a copy of it.
pub(super) fn copy_host_file(src: &Path, dst: &Path) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened =
        fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(src);
    // Absent on this host, or a link, a fifo, a device: nothing to copy.
    let Ok(file) = opened else { return Ok(()) };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let mut bytes = vec![];
    file.take(MAX_ETC_FILE + 1).read_to_end(&mut bytes).map_err(|e| format!("read {}: {e}", src.display()))?;
    if bytes.len() as u64 > MAX_ETC_FILE {
        return Ok(());
    }
    if let Some(dir) = dst.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    fs::write(dst, &bytes).map_err(|e| format!("copy {}: {e}", src.display()))?;
    fs::set_permissions(dst, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod {}: {e}", dst.display()))
}

/// The sandbox's `/etc`, built fresh: generated account files holding only
/// the sandbox's users, and the few host files the interpreters read.
pub(super) fn build_etc(etc: &Path, owner: (u32, u32)) -> Result<(), String> {
    fs::create_dir(etc).map_err(|e| format!("mkdir /etc: {e}"))?;
    let (uid, gid) = owner;
    let mut passwd = String::from("root:x:0:0:root:/root:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\n");
    if uid != 0 {
        passwd.push_str(&format!("sandbox:x:{uid}:{gid}:sandbench sandbox:/work:/usr/sbin/nologin\n"));
    }
    if gid != 0 {
        group.push_str(&format!("sandbox:x:{gid}:\n"));
    }
    let generated = [
        ("passwd", passwd),
        ("group", group),
        ("nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n".to_string()),
    ];
    for (name, text) in generated {
        fs::write(etc.join(name), text).map_err(|e| format!("write /etc/{name}: {e}"))?;
    }
    let host = Path::new("/etc");
    for f in ETC_COPIED {
        copy_host_file(&host.join(f), &etc.join(f))?;
    }
    if let Ok(rd) = fs::read_dir(host) {
        for e in rd.flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if n == "python3" || (n.starts_with("python3.") && n[8..].bytes().all(|b| b.is_ascii_digit())) {
                for f in PYTHON_ETC {
                    copy_host_file(&e.path().join(f), &etc.join(&*n).join(f))?;
                }
            }
        }
    }
    copy_alternatives(&etc.join("alternatives"))?;
    // localtime: the host's zone, by link into /usr (visible) or by copy.
    match fs::read_link(host.join("localtime")) {
        Ok(t) if t.starts_with("/usr/share/zoneinfo") => {
            std::os::unix::fs::symlink(&t, etc.join("localtime")).map_err(|e| format!("symlink /etc/localtime: {e}"))?
        }
        _ => copy_host_file(&host.join("localtime"), &etc.join("localtime"))?,
    }
    Ok(())
}

/// Debian's `/etc/alternatives`, recreated link by link: the bound
/// binaries and libraries reach many of their names through it (`awk`,
/// `which`, `nc`, `pager`; numpy's BLAS and LAPACK as `libblas.so.3`).
/// Only symbolic links are recreated, and only those whose target is an
/// absolute path into a directory of [`HOST_BINDS`] without `..`: nothing
/// there reaches past what the sandbox sees anyway, and a file or link
/// someone put there pointing elsewhere is left out. The directory is opened
/// without following a link and read fd-relative (readlinkat never follows
/// the name it reads).
pub(super) fn copy_alternatives(dst: &Path) -> Result<(), String> {
    use nix::fcntl::{open, readlinkat, OFlag};
    use nix::sys::stat::Mode;
    let host = "/etc/alternatives";
    let fd =
        match open(host, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            // Not a Debian host, or a link where the directory should be: nothing to recreate.
            Err(nix::Error::ENOENT | nix::Error::ELOOP | nix::Error::ENOTDIR) => return Ok(()),
            Err(e) => return Err(format!("open {host}: {e}")),
        };
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| format!("read {host}: {e}"))?;
    let mut names = vec![];
    for entry in dir.iter() {
        let Ok(entry) = entry else { break };
        let name = entry.file_name().to_bytes();
        // Reading stops at a bound well past Debian's few hundred.
        if names.len() >= 8 * MAX_ALTERNATIVES {
            break;
        }
        if name.starts_with(b".") || entry.file_type().is_some_and(|t| t != nix::dir::Type::Symlink) {
            continue;
        }
        names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
    }
    // In name order, so which links a bound leaves out does not depend on
    // the directory's hash order.
    names.sort();
    let mut links = vec![];
    // The root tmpfs is 4 MiB: a target longer than a short link's inline
    // space takes a page of it. What the links may take stays well inside.
    let mut budget: usize = ALTERNATIVES_BYTES;
    for name in names {
        if links.len() >= MAX_ALTERNATIVES {
            break;
        }
        // EINVAL: not a link after all.
        let Ok(target) = readlinkat(&dir, name.as_os_str()) else { continue };
        if !alternative_allowed(Path::new(&target)) {
            continue;
        }
        let cost = if target.len() > 128 { 4096 } else { target.len() };
        if cost > budget {
            break;
        }
        budget -= cost;
        links.push((name, target));
    }
    if links.is_empty() {
        return Ok(());
    }
    fs::create_dir(dst).map_err(|e| format!("mkdir /etc/alternatives: {e}"))?;
    for (name, target) in links {
        std::os::unix::fs::symlink(&target, dst.join(&name))
            .map_err(|e| format!("symlink /etc/alternatives/{}: {e}", name.to_string_lossy()))?;
    }
    Ok(())
}

/// Whether an alternative's target stays inside the host directories the
/// sandbox binds: absolute, no `.` or `..`, first component one of
/// [`HOST_BINDS`].
pub(super) fn alternative_allowed(target: &Path) -> bool {
    use std::path::Component;
    let mut parts = target.components();
    if parts.next() != Some(Component::RootDir) || target.as_os_str().len() > 1024 {
        return false;
    }
    let Some(Component::Normal(first)) = parts.next() else { return false };
    HOST_BINDS.iter().any(|d| first == *d) && parts.all(|c| matches!(c, Component::Normal(_)))
}

/// The system bundle as the sandbox sees it (its own copy, in its `/etc`).
pub(crate) const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Add the run's CA (a run with a secret over TLS) to the sandbox's copy of
/// the system bundle: clients that read the system store trust it, and the
/// trust variables point at the same file. The host's bundle is untouched
/// (this is the copy in the sandbox's fresh `/etc`, still ours alone: no
/// program exists yet).
pub(super) fn trust_run_ca(etc: &Path, pem: &str) -> Result<(), String> {
    let bundle = etc.join(SYSTEM_BUNDLE.trim_start_matches("/etc/"));
    if let Some(dir) = bundle.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&bundle)
        .map_err(|e| format!("open the sandbox's CA bundle: {e}"))?;
    std::io::Write::write_all(&mut f, format!("\n# sandbench: this run's CA (secrets)\n{pem}").as_bytes())
        .map_err(|e| format!("write the sandbox's CA bundle: {e}"))?;
    fs::set_permissions(&bundle, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod the CA bundle: {e}"))
}

/// Build the sandbox's file system view under a fresh tmpfs root and pivot
/// into it: the interpreters' directories read-only, a generated `/etc`,
/// /work and /tmp private tmpfs, a /dev of its own device nodes, a /proc of
/// the new pid namespace. Nothing else of the host.
pub(super) fn build_root(disk_bytes: u64, owner: (u32, u32), run_ca: Option<&str>) -> Result<(), String> {
    let r = |e: nix::Error, what: &str| format!("{what}: {e}");
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| r(e, "make mounts private"))?;
    let root = Path::new("/tmp");
    // Inodes for the generated /etc and the recreated alternatives.
    tmpfs(root, &format!("size=4m,nr_inodes={},mode=0755", 512 + MAX_ALTERNATIVES), MsFlags::empty())?;
    for d in HOST_BINDS {
        let src = Path::new("/").join(d);
        let dst = root.join(d);
        let Ok(meta) = fs::symlink_metadata(&src) else { continue };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&src).map_err(|e| format!("readlink {}: {e}", src.display()))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| format!("symlink {d}: {e}"))?;
        } else if meta.is_dir() {
            fs::create_dir(&dst).map_err(|e| format!("mkdir {d}: {e}"))?;
            bind_ro(&src, &dst)?;
        }
    }
    build_etc(&root.join("etc"), owner)?;
    if let Some(pem) = run_ca {
        trust_run_ca(&root.join("etc"), pem)?;
    }
    for d in ["proc", "dev", "work", "tmp"] {
        fs::create_dir(root.join(d)).map_err(|e| format!("mkdir {d}: {e}"))?;
    }
    mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| r(e, "mount /proc"))?;
    let dev = root.join("dev");
    // Not nodev: the sandbox's own device nodes live here. Only init can
    // make one: /dev is root's, mode 0755, and no process of the program
    // holds CAP_MKNOD.
    mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=0755"),
    )
    .map_err(|e| r(e, "mount tmpfs on /dev"))?;
    for (n, major, minor) in DEV_NODES {
        dev_node(&dev, n, *major, *minor)?;
    }
    for (l, t) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(t, dev.join(l)).map_err(|e| format!("symlink /dev/{l}: {e}"))?;
    }
    fs::create_dir(dev.join("shm")).map_err(|e| format!("mkdir /dev/shm: {e}"))?;
    let (uid, gid) = owner;
    tmpfs(&dev.join("shm"), &format!("size=8m,nr_inodes=64,mode=1777,uid={uid},gid={gid}"), MsFlags::MS_NOEXEC)?;
    tmpfs(&root.join("work"), &scratch_opts("work", disk_bytes, owner), MsFlags::empty())?;
    tmpfs(&root.join("tmp"), &scratch_opts("tmp", disk_bytes, owner), MsFlags::empty())?;

    nix::unistd::chdir(root).map_err(|e| r(e, "chdir new root"))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| r(e, "pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| r(e, "detach the old root"))?;
    nix::unistd::chdir("/").map_err(|e| r(e, "chdir /"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| r(e, "make the root read-only"))?;
    nix::unistd::sethostname("sandbench").map_err(|e| r(e, "sethostname"))?;
    Ok(())
}

/// The device nodes of the sandbox's `/dev`: name, major, minor (the
/// kernel's fixed numbers for its memory devices, as runc makes them).
const DEV_NODES: &[(&str, u64, u64)] =
    &[("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9)];

/// One device node of the sandbox's own, made with mknod: the program may
/// set its times (write permission is enough for that) or lock it, and the
/// host's node is not the one that changes. In a user namespace the kernel
/// makes no device node: the host's is bound there read-only instead, which
/// still passes writes to the device (a read-only mount refuses changes to
/// a device node's metadata, not I/O through it) but refuses utimensat,
/// chmod, chown and setxattr with EROFS.
fn dev_node(dev: &Path, name: &str, major: u64, minor: u64) -> Result<(), String> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let dst = dev.join(name);
    match mknod(&dst, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), makedev(major, minor)) {
        // mknod applies init's umask: the mode is set again, whole.
        Ok(()) => {
            fs::set_permissions(&dst, fs::Permissions::from_mode(0o666)).map_err(|e| format!("chmod /dev/{name}: {e}"))
        }
        Err(nix::Error::EPERM) => {
            fs::File::create(&dst).map_err(|e| format!("create /dev/{name}: {e}"))?;
            bind_ro(&Path::new("/dev").join(name), &dst)
        }
        Err(e) => Err(format!("mknod /dev/{name}: {e}")),
    }
}

/// Mount options of a scratch space (`work` or `tmp`) of `size` bytes.
pub(super) fn scratch_opts(which: &str, size: u64, (uid, gid): (u32, u32)) -> String {
    let size = size.max(4096);
    match which {
        "work" => format!("size={size},nr_inodes=4096,mode=0700,uid={uid},gid={gid}"),
        _ => format!("size={size},nr_inodes=4096,mode=1777"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_file_is_copied_but_never_through_a_link_or_past_its_bound() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("shadow");
        fs::write(&secret, "root:secret-hash").unwrap();
        let plain = d.path().join("plain.conf");
        fs::write(&plain, "ok").unwrap();
        let link = d.path().join("matplotlibrc");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let big = d.path().join("big");
        fs::File::create(&big).unwrap().set_len(MAX_ETC_FILE + 1).unwrap();
        let out = d.path().join("out");
        for (src, want) in [(&plain, Some("ok")), (&link, None), (&big, None), (&d.path().join("absent"), None)] {
            let dst = out.join(src.file_name().unwrap());
            copy_host_file(src, &dst).unwrap();
            assert_eq!(fs::read_to_string(&dst).ok().as_deref(), want, "{}", src.display());
        }
        assert_eq!(fs::metadata(out.join("plain.conf")).unwrap().permissions().mode() & 0o777, 0o644);
    }

    #[test]
    fn an_alternative_is_kept_only_when_it_points_into_a_bound_directory() {
        for t in ["/usr/bin/mawk", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "/bin/nc.openbsd", "/usr/./bin/vi"] {
            assert!(alternative_allowed(Path::new(t)), "{t}");
        }
        for t in [
            "/etc/shadow",
            "/root/.ssh/id_rsa",
            "/usr/../etc/shadow",
            "/usr/bin/../../etc/shadow",
            "usr/bin/mawk",
            "../usr/bin/mawk",
            "/",
            "/usrx/bin/a",
            "/proc/self/root",
            "/var/run/docker.sock",
        ] {
            assert!(!alternative_allowed(Path::new(t)), "{t}");
        }
        assert!(!alternative_allowed(Path::new(&format!("/usr/{}", "a/".repeat(600)))));
    }
}
