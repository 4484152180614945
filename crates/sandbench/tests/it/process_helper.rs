//! The process tier's sandbox helper binary (`sandbench-sandbox`): taken
//! only when it is this build's and nobody else can write it; a helper of
//! another build refuses to build a sandbox, and it takes its channels
//! from the host over its stdin.

use crate::support::common;

use std::process::{Command, Stdio};

use common::{bin, helper_bin};
use sandbench::internals::process::small_helper;

/// A folder in the target directory (one file system with the built
/// binaries, so they can be hard-linked into it).
fn folder() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[sandbench_testkit::test]
fn the_built_helper_is_taken_and_one_of_another_build_is_not() {
    let good = folder();
    std::fs::hard_link(helper_bin(), good.path().join("sandbench-sandbox")).unwrap();
    small_helper(good.path(), Some(&bin())).expect("this build's helper is taken");
    // Any binary that does not answer this build's token is refused; here
    // sandbench itself (it does not know `__build`).
    let other = folder();
    std::fs::hard_link(bin(), other.path().join("sandbench-sandbox")).unwrap();
    let e = small_helper(other.path(), Some(&bin())).unwrap_err();
    assert!(e.contains("another build"), "{e}");
}

/// `cargo build` puts the helper beside sandbench: doctor says it is used.
#[sandbench_testkit::test]
fn doctor_names_the_helper_runs_start_with() {
    let out = Command::new(bin()).args(["doctor", "--format", "json"]).env_remove("SANDBENCH_HELPER").output().unwrap();
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let me = all.as_array().unwrap().iter().find(|t| t["tier"] == "process").unwrap();
    let check = me["checks"].as_array().unwrap().iter().find(|c| c["name"] == "helper").expect("a helper check");
    assert_eq!(check["level"], "ok", "{check}");
    assert!(check["detail"].as_str().unwrap().starts_with("sandbench-sandbox (this build's"), "{check}");
    // As root, the spare it builds to measure has its process from the zygote, and says so.
    if common::is_root() {
        let warm = me["checks"].as_array().unwrap().iter().find(|c| c["name"] == "warm").expect("a warm check");
        assert!(warm["detail"].as_str().unwrap().contains("forked from a warm one (the zygote"), "{warm}");
    }
}

/// A helper handed a sandbox's shape from another build says so and builds
/// nothing (its isolation code may be what a fix replaced).
#[sandbench_testkit::test]
fn a_helper_refuses_a_shape_from_another_build() {
    let dir = tempfile::tempdir().unwrap();
    let prep = serde_json::json!({
        "host_pid": std::process::id(),
        "cgroup_procs": [],
        "user_ns": false,
        "run_uid": 0,
        "run_gid": 0,
        "allow_degraded": false,
        "disk_bytes": 1 << 20,
        "waiter": null,
        "session": false,
        "build": "0123456789abcdef",
    })
    .to_string();
    let mut frame = (prep.len() as u64).to_le_bytes().to_vec();
    frame.extend_from_slice(prep.as_bytes());
    let input = dir.path().join("prepare");
    std::fs::write(&input, frame).unwrap();
    let status = dir.path().join("status");
    for helper in [helper_bin(), bin()] {
        // fd 3 is the helper's status channel.
        let out = Command::new("bash")
            .args(["-c", "exec 3>\"$1\"; exec \"$2\" __sandbox <\"$3\"", "-"])
            .arg(&status)
            .arg(&helper)
            .arg(&input)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(121), "{helper:?}: {out:?}");
        let said = std::fs::read_to_string(&status).unwrap();
        assert!(said.contains("from another build of sandbench"), "{helper:?}: {said}");
    }
}

/// The host hands the helper its status pipe and egress channel over its
/// stdin, a socket (`take_channels`). Exactly those two arrive and are
/// placed where the helper reports from; anything else ends it before it
/// does a thing.
#[sandbench_testkit::test]
fn a_helper_takes_its_channels_from_stdin_and_refuses_any_other_count() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    let send = |to: &UnixStream, fds: &[i32]| {
        let iov = [std::io::IoSlice::new(b"c")];
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(fds)];
        let cmsg = if fds.is_empty() { &[][..] } else { &cmsg[..] };
        nix::sys::socket::sendmsg::<()>(to.as_raw_fd(), &iov, cmsg, nix::sys::socket::MsgFlags::empty(), None).unwrap();
    };
    // The helper with a socket for stdin; the host's end of it.
    let start = |helper: &std::path::Path| {
        let (host, theirs) = UnixStream::pair().unwrap();
        let child = Command::new(helper)
            .arg("__sandbox")
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (host, child)
    };
    for helper in [helper_bin(), bin()] {
        // Two channels: the status line of a refused shape comes back on the
        // pipe that travelled over the socket.
        let (mut status_r, status_w) = std::io::pipe().unwrap();
        let (net, net_theirs) = UnixStream::pair().unwrap();
        let (host, mut child) = start(&helper);
        send(&host, &[status_w.as_raw_fd(), net_theirs.as_raw_fd()]);
        drop((status_w, net_theirs));
        let prep = serde_json::json!({
            "host_pid": std::process::id(), "cgroup_procs": [], "user_ns": false, "run_uid": 0, "run_gid": 0,
            "allow_degraded": false, "disk_bytes": 1 << 20, "waiter": null, "session": false,
            "build": "0123456789abcdef",
        })
        .to_string();
        (&host).write_all(&(prep.len() as u64).to_le_bytes()).unwrap();
        (&host).write_all(prep.as_bytes()).unwrap();
        let mut said = String::new();
        status_r.read_to_string(&mut said).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(121), "{helper:?}");
        assert!(said.contains("helper_started"), "{helper:?}: {said}");
        assert!(said.contains("from another build of sandbench"), "{helper:?}: {said}");
        drop(net);
        // One channel, none or four: refused on stderr (it has no status pipe).
        let out_fd = std::io::stdout().as_raw_fd();
        for fds in [vec![out_fd], vec![], vec![out_fd; 4]] {
            let (host, child) = start(&helper);
            send(&host, &fds);
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(121), "{helper:?} with {} fds: {out:?}", fds.len());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("expected its 2 or 3 channels on stdin, got {}", fds.len())),
                "{helper:?}: {err}"
            );
        }
    }
}
