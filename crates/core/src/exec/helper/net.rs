//! Namespaces mode's network namespace, set up by the template's builder: the loopback brought
//! up, and the listening sockets of the network allow-list's proxy. Raw system calls only.

use std::os::fd::RawFd;

/// The backlog of the proxy's listening sockets inside the sandbox.
const LISTEN_BACKLOG: i32 = 128;

/// Brings the new network namespace's loopback up, so servers the shell starts on localhost work.
/// A failure only costs that.
///
/// # Safety
///
/// Only in the template's builder, in its new network namespace (never Node's or the host's,
/// whose loopback it would change).
pub(super) unsafe fn loopback_up() {
    /// `struct ifreq` as `SIOCSIFFLAGS` reads it: the name, then the flags in the union (40 bytes).
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: plain integers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return;
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: `req` has `struct ifreq`'s layout and size; `fd` is our socket, closed right after;
    // the interface is our own namespace's (our contract).
    unsafe {
        libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &mut req as *mut IfReq);
        libc::close(fd);
    }
}

/// Listens on `127.0.0.1:<port>` (a port the kernel picks) and, where IPv6 is on, `[::1]:<port>`
/// in this network namespace: the listening sockets (IPv6's -1 when it is off), or `None` with
/// errno set when the IPv4 one fails.
///
/// # Safety
///
/// Only in the template's builder, in the template's own network namespace.
pub(super) unsafe fn listen_for_proxy() -> Option<[RawFd; 2]> {
    // SAFETY: plain integers and a `sockaddr_in` valid for the size passed; the sockets are ours.
    let v4 = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        if libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, LISTEN_BACKLOG) != 0
        {
            return None;
        }
        fd
    };
    // SAFETY: as above; `getsockname` fills at most `len` bytes of `bound`.
    let port = unsafe {
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::getsockname(v4, (&mut bound as *mut libc::sockaddr_in).cast(), &mut len) != 0 {
            return None;
        }
        bound.sin_port
    };
    // SAFETY: as above, for IPv6 on the same port; a failure (IPv6 off) leaves IPv4 alone.
    let v6 = unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let mut addr: libc::sockaddr_in6 = std::mem::zeroed();
        addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        addr.sin6_port = port;
        addr.sin6_addr.s6_addr[15] = 1;
        let one: libc::c_int = 1;
        if fd >= 0
            && libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
            && libc::bind(
                fd,
                (&addr as *const libc::sockaddr_in6).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ) == 0
            && libc::listen(fd, LISTEN_BACKLOG) == 0
        {
            fd
        } else {
            if fd >= 0 {
                libc::close(fd);
            }
            -1
        }
    };
    Some([v4, v6])
}
