//! The scratch watch (init's fanotify marks on the scratch mounts) and the
//! program's guard descriptor, handed from the program's side to init over
//! a socket pair: how limit hits hidden afterwards are still seen
//! (`highwater.rs`).

use std::os::fd::{AsRawFd, OwnedFd};

use super::base::*;
use super::scratch::SCRATCH;

/// The scratch mounts as the watch names them.
pub(super) fn scratch_mounts() -> Vec<crate::highwater::Scratch> {
    SCRATCH.iter().map(|m| crate::highwater::Scratch::new(m, *m)).collect()
}

/// High-water marks of the scratch space, watched by init from before the
/// program starts (see [`crate::highwater`]): file events need
/// CAP_SYS_ADMIN (sandbench as root); the mount checks work without.
pub(super) fn watch_scratch() -> Option<crate::highwater::Watch> {
    match crate::highwater::Watch::new(&scratch_mounts(), u64::MAX, crate::highwater::Mode::Pin) {
        Ok(w) => Some(w),
        // init made these mounts a moment ago: not opening them is a broken sandbox.
        Err(e) => fail(format!("cannot watch the scratch space: {e}")),
    }
}

/// The program's side of the guard (see [`crate::highwater::install_guard`]):
/// install the filter and hand its listener to init over `sock`. A guard
/// that cannot be installed is reported, not fatal: the watch then races
/// space freed by the program.
pub(super) fn send_guard(sock: std::os::fd::OwnedFd) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    match crate::highwater::install_guard() {
        Ok(listener) => {
            let fds = [listener.as_raw_fd()];
            let iov = [std::io::IoSlice::new(b"g")];
            if let Err(e) =
                sendmsg::<()>(sock.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
            {
                // Without a supervisor every guarded call would wait forever.
                fail(format!("cannot hand the scratch guard to init: {e}"));
            }
        }
        Err(e) => send(&Status::Warning {
            msg: format!("{e}: space the program frees is not checked first, so a full scratch emptied at once may go unreported"),
        }),
    }
}

/// The socket the program's process hands its guard listener over.
pub(super) fn guard_socket() -> (OwnedFd, OwnedFd) {
    match nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => fail(format!("init cannot make the guard's socket: {e}")),
    }
}

/// Init's side: the listener, or None when the program sent none.
pub(super) fn receive_guard(sock: &std::os::fd::OwnedFd) -> Option<crate::highwater::Guard> {
    let (_, fds, _) = recv_fds::<1>(sock.as_raw_fd()).ok()?;
    let fd = fds.into_iter().next()?;
    match crate::highwater::Guard::new(fd) {
        Ok(g) => Some(g),
        Err(e) => fail(format!("scratch guard: {e}")),
    }
}
