//! The process tier's one way out, for a run whose network limit is an
//! allow list. The sandbox's network namespace stays empty but for its
//! loopback device: init (sandbench's, pid 1) brings `lo` up, listens on
//! `127.0.0.1:3128` and hands that listening socket to the host over a unix
//! socketpair the helper received from the host and placed as fd [`NET_FD`]
//! (inherited by init), then closes both. The host
//! accepts on it and serves each connection with the run's egress proxy, so
//! no byte is relayed inside the sandbox and no host socket is reachable
//! from it. The program gets neither descriptor; Landlock lets it connect
//! over TCP to that one port and bind none, and seccomp refuses it unix
//! sockets. No DNS server, no route, no other listener exists in there.
#![allow(unsafe_code)] // one ioctl (bring lo up) and the fd numbers inherited across exec

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socket, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

/// The socketpair end the helper receives (`take_channels`) and init inherits.
pub(crate) const NET_FD: i32 = 4;

/// Bring `lo` up in this (new, empty) network namespace.
fn loopback_up() -> Result<(), String> {
    let s = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| format!("socket for ioctl: {e}"))?;
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write `req`, which lives
    // across both calls; the descriptor is ours.
    unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(format!("SIOCGIFFLAGS lo: {}", std::io::Error::last_os_error()));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(format!("SIOCSIFFLAGS lo: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// In init: set up the listener and give it to the host (when `port` is
/// set), then close the inherited end whatever happens. Err: the run's
/// network could not be made as promised.
pub(crate) fn serve_port(port: Option<u16>) -> Result<(), String> {
    // SAFETY: NET_FD was placed by the helper before init's fork and nothing else in
    // init owns it; wrapping it closes it on every path out of here.
    let chan = (nix::fcntl::fcntl(unsafe { BorrowedFd::borrow_raw(NET_FD) }, nix::fcntl::FcntlArg::F_GETFD).is_ok())
        .then(|| unsafe { OwnedFd::from_raw_fd(NET_FD) });
    let Some(port) = port else { return Ok(()) };
    let chan = chan.ok_or_else(|| "no channel to the host's egress proxy (fd 4)".to_string())?;
    loopback_up()?;
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).map_err(|e| format!("listen on 127.0.0.1:{port}: {e}"))?;
    let fds = [l.as_raw_fd()];
    let msg = [ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"L")];
    sendmsg::<()>(chan.as_raw_fd(), &iov, &msg, MsgFlags::empty(), None)
        .map_err(|e| format!("handing the listener to the host: {e}"))?;
    Ok(())
}

/// On the host: wait for the listener init sends. `None` when the sandbox
/// closed the channel without one (it failed, and says why elsewhere).
pub(crate) async fn receive_listener(chan: OwnedFd) -> Option<tokio::net::TcpListener> {
    let std_sock = std::os::unix::net::UnixStream::from(chan);
    std_sock.set_nonblocking(true).ok()?;
    let sock = tokio::net::UnixStream::from_std(std_sock).ok()?;
    loop {
        sock.readable().await.ok()?;
        let got = sock.try_io(tokio::io::Interest::READABLE, || {
            let mut byte = [0u8; 1];
            let mut iov = [std::io::IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
            let m = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
                .map_err(std::io::Error::from)?;
            let mut fd = None;
            for c in m.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    for f in fds {
                        // SAFETY: the kernel just gave us this descriptor; we own it.
                        let owned = unsafe { OwnedFd::from_raw_fd(f) };
                        fd.get_or_insert(owned);
                    }
                }
            }
            Ok((m.bytes, fd))
        });
        match got {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) | Ok((0, None)) => return None,
            Ok((_, None)) => continue,
            Ok((_, Some(fd))) => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true).ok()?;
                return tokio::net::TcpListener::from_std(l).ok();
            }
        }
    }
}
