//! Descriptors between processes and threads: close-on-exec pipes, descriptors passed over a Unix
//! socket (`SCM_RIGHTS`), and waiting until one is readable. The pipe and the send are
//! async-signal-safe (no allocation, no lock), for a forked child or the sandbox helper.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A pipe whose ends close on exec: (read, write).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid two-element buffer.
    if unsafe { raw_cloexec_pipe(&mut fds) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `pipe` for a forked child: fills `fds` with (read, write), both close-on-exec; 0, or -1 with
/// `errno` set.
///
/// # Safety
///
/// None beyond the call's: `fds` is a valid buffer the kernel fills with two new descriptors,
/// which the caller then owns. Unsafe only because a forked child calls it where std's pipe would
/// allocate.
pub(crate) unsafe fn raw_cloexec_pipe(fds: &mut [RawFd; 2]) -> libc::c_int {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        // SAFETY: `fds` is a valid two-element buffer.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        // SAFETY: `fds` is a valid two-element buffer.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return -1;
        }
        // SAFETY: flags of the two descriptors just created, which nobody else owns yet.
        unsafe {
            libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(fds[1], libc::F_SETFD, libc::FD_CLOEXEC);
        }
        0
    }
}

/// A Unix seqpacket socket pair, both ends close-on-exec: one message per send, so a report or a
/// notification's descriptors arrive whole (a helper's report, a sandboxed exec's listener).
#[cfg(target_os = "linux")]
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The most descriptors one message carries.
#[cfg(target_os = "linux")]
pub(crate) const MAX_FDS_PER_MESSAGE: usize = 8;
/// A control buffer for `MAX_FDS_PER_MESSAGE` descriptors, in 8-byte words (aligned as
/// `cmsghdr`): `CMSG_SPACE(8 * sizeof(int))` is 48 bytes on 64-bit Linux, less on 32-bit.
#[cfg(target_os = "linux")]
const CONTROL_WORDS: usize = 8;

/// Sends `payload` (at least one byte) and `fds` in one message over the socket `channel`; the
/// errno when it could not be sent whole. Async-signal-safe.
///
/// # Safety
///
/// `channel` is an open socket of this process and `fds` open descriptors of it.
#[cfg(target_os = "linux")]
pub(crate) unsafe fn send_fds(channel: RawFd, payload: &[u8], fds: &[RawFd]) -> Result<(), i32> {
    if payload.is_empty() || fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(libc::EINVAL);
    }
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    let bytes = size_of_val(fds) as libc::c_uint;
    // SAFETY: `msghdr` and the control buffer are plain data on our stack; the CMSG macros stay
    // within `control` (room for `MAX_FDS_PER_MESSAGE` descriptors); `sendmsg` only reads the
    // payload (the iovec's pointer is mutable by type alone) and copies what it is given.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(bytes) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<libc::c_int>(),
                fds.len(),
            );
        }
        let sent = libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL);
        if sent == payload.len() as isize {
            Ok(())
        } else if sent < 0 {
            Err(super::errno())
        } else {
            Err(libc::EMSGSIZE)
        }
    }
}

/// One message received by `recv_fds`.
#[derive(Debug)]
#[cfg(target_os = "linux")]
pub(crate) struct Received {
    /// Payload bytes read (0: end of file).
    pub(crate) len: usize,
    /// The descriptors it carried, close-on-exec, now ours.
    pub(crate) fds: Vec<OwnedFd>,
    /// More descriptors came than fit (`MSG_CTRUNC`): the kernel closed the rest.
    pub(crate) truncated: bool,
}

/// Receives one message into `payload` with the descriptors it carries (at most
/// `MAX_FDS_PER_MESSAGE`), retrying an interrupted wait.
#[cfg(target_os = "linux")]
pub(crate) fn recv_fds(channel: BorrowedFd<'_>, payload: &mut [u8]) -> io::Result<Received> {
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: `msghdr` is plain data; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    let n = loop {
        // SAFETY: `msg` describes valid buffers; received descriptors get close-on-exec.
        let n = unsafe { libc::recvmsg(channel.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `control` (`msg` says how many
    // bytes); each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count =
                    ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len: n,
        fds,
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// What `wait_readable` saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(target_os = "linux")]
pub(crate) enum Readiness {
    /// Data waits.
    Readable,
    /// The other end hung up (nothing left to read), or the descriptor is unusable.
    HungUp,
    /// `stop` became readable or hung up.
    Stopped,
    /// The timeout passed.
    TimedOut,
    /// A signal ended the wait.
    Interrupted,
}

/// Waits up to `timeout_ms` (-1: no limit) until `fd` is readable or hung up, or `stop` (when
/// given) is readable or hung up (`stop` wins when both are).
#[cfg(target_os = "linux")]
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    stop: Option<BorrowedFd<'_>>,
    timeout_ms: libc::c_int,
) -> Readiness {
    let entry = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = [
        entry(fd.as_raw_fd()),
        entry(stop.map_or(-1, |s| s.as_raw_fd())),
    ];
    let count = if stop.is_some() { 2 } else { 1 };
    // SAFETY: a valid array of at least `count` pollfd.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout_ms) };
    if ready < 0 {
        return match super::errno() {
            libc::EINTR => Readiness::Interrupted,
            _ => Readiness::HungUp,
        };
    }
    let hung_up = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    if fds[1].revents & (libc::POLLIN | hung_up) != 0 {
        Readiness::Stopped
    } else if fds[0].revents & libc::POLLIN != 0 {
        Readiness::Readable
    } else if fds[0].revents & hung_up != 0 {
        Readiness::HungUp
    } else {
        Readiness::TimedOut
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_pass_over_a_socket_with_their_payload() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (read, write) = pipe().unwrap();
        let (read2, _write2) = pipe().unwrap();
        let fds = [read.as_raw_fd(), read2.as_raw_fd()];
        // SAFETY: our socket and our descriptors.
        unsafe { send_fds(a.as_raw_fd(), b"hi", &fds) }.unwrap();
        let mut payload = [0u8; 8];
        let got = recv_fds(b.as_fd(), &mut payload).unwrap();
        assert_eq!(
            (&payload[..got.len], got.fds.len(), got.truncated),
            (&b"hi"[..], 2, false)
        );
        // The first one received is the pipe's read end: what goes in comes out there.
        std::fs::File::from(write).write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        let mut received = std::fs::File::from(got.fds.into_iter().next().unwrap());
        received.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
        // Too many descriptors, or no payload: refused before anything is sent.
        let many = [read.as_raw_fd(); MAX_FDS_PER_MESSAGE + 1];
        // SAFETY: as above.
        let too_many = unsafe { send_fds(a.as_raw_fd(), b"x", &many) };
        assert_eq!(too_many, Err(libc::EINVAL));
        // SAFETY: as above.
        let no_payload = unsafe { send_fds(a.as_raw_fd(), b"", &fds) };
        assert_eq!(no_payload, Err(libc::EINVAL));
        drop(a);
        let end = recv_fds(b.as_fd(), &mut payload).unwrap();
        assert_eq!((end.len, end.fds.len()), (0, 0));
    }

    #[test]
    fn pipes_close_on_exec() {
        let (read, write) = pipe().unwrap();
        for fd in [read.as_raw_fd(), write.as_raw_fd()] {
            // SAFETY: F_GETFD on our descriptor.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
    }

    #[test]
    fn waits_say_what_happened() {
        let (read, write) = pipe().unwrap();
        let (stop_read, stop_write) = pipe().unwrap();
        let stop = Some(stop_read.as_fd());
        assert_eq!(wait_readable(read.as_fd(), stop, 0), Readiness::TimedOut);
        let mut writer = std::fs::File::from(write);
        writer.write_all(b"x").unwrap();
        assert_eq!(wait_readable(read.as_fd(), None, -1), Readiness::Readable);
        std::fs::File::from(stop_write).write_all(b"s").unwrap();
        assert_eq!(wait_readable(read.as_fd(), stop, -1), Readiness::Stopped);
        let mut byte = [0u8; 1];
        std::fs::File::from(read.try_clone().unwrap())
            .read_exact(&mut byte)
            .unwrap();
        drop(writer);
        assert_eq!(wait_readable(read.as_fd(), None, -1), Readiness::HungUp);
    }
}
