//! The accept thread and one connection's service: the request head read within `HEAD_TIMEOUT`,
//! decided against the rules, the upstream resolved and connected (only to a checked address),
//! answered or relayed.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::relay::relay;
use super::*;
use crate::sys::{self, Readiness};

/// The port a bound socket listens on.
pub(crate) fn local_port(fd: RawFd) -> io::Result<u16> {
    // SAFETY: `sockaddr_storage` is plain data; getsockname fills at most `len` bytes of it.
    unsafe {
        let mut addr: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(
            fd,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        match i32::from(addr.ss_family) {
            libc::AF_INET => {
                let a = &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                Ok(u16::from_be(a.sin_port))
            }
            libc::AF_INET6 => {
                let a = &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                Ok(u16::from_be(a.sin6_port))
            }
            _ => Err(io::Error::other("not an IP socket")),
        }
    }
}

pub(super) fn accept_loop(shared: &Arc<Shared>, listeners: &[OwnedFd]) {
    let mut fds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|fd| fd.as_raw_fd())
        .chain(std::iter::once(shared.stop.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `fds` is a valid array of its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds.last().is_some_and(|stop| stopped(stop.revents)) {
            return;
        }
        for pfd in &fds[..listeners.len()] {
            if pfd.revents == 0 {
                continue;
            }
            // SAFETY: a listening socket we hold; the new descriptor is ours (wrapped at once).
            let fd = unsafe {
                libc::accept4(
                    pfd.fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                continue;
            }
            // SAFETY: `fd` was just returned by accept4 and is owned by nobody else.
            let client = unsafe { TcpStream::from_raw_fd(fd) };
            if shared.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                shared.connections.fetch_sub(1, Ordering::AcqRel);
                reply(
                    &client,
                    503,
                    "Service Unavailable",
                    "too many proxy connections",
                );
                continue;
            }
            let serving = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("pi-sandbox-proxy-conn".into())
                .stack_size(THREAD_STACK_BYTES)
                .spawn(move || {
                    serve(&serving, client);
                    serving.connections.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                shared.connections.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Answers `status` with a short text body and closes the connection.
fn reply(client: &TcpStream, status: u16, reason: &str, body: &str) {
    let body = format!("pi-native-ops sandbox proxy: {body}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut client = client;
    let _ = client.write_all(response.as_bytes());
    let _ = client.shutdown(Shutdown::Write);
}

/// `reply`, then reads what the client still sends (at most `LINGER_BYTES`, for at most
/// `LINGER_TIME`) before the connection is closed: closing with unread bytes sends a reset, which
/// can destroy the answer before the client reads it.
fn reply_and_linger(client: &TcpStream, status: u16, reason: &str, body: &str) {
    reply(client, status, reason, body);
    let _ = client.set_read_timeout(Some(LINGER_TIME));
    let mut buf = [0u8; 16 << 10];
    let mut left = LINGER_BYTES;
    let mut reader = client;
    while left > 0 {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// How reading the head ended, when it did not deliver one.
enum HeadRead {
    /// The client left, the proxy stopped, or the head did not come in `HEAD_TIMEOUT`.
    Gone,
    Refused(HeadError),
}

/// Reads until the end of the head: the buffer, the head, where it ends in the buffer. A head
/// is refused as soon as its bytes so far are (`head::scan`), not only once it is complete.
fn read_head(
    client: &TcpStream,
    stop: RawFd,
    timeout: Duration,
) -> Result<(Vec<u8>, head::Head, usize), HeadRead> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; head::MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !wait_readable(client.as_raw_fd(), stop, left) {
            return Err(HeadRead::Gone);
        }
        let mut reader = client;
        let n = match reader.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return Err(HeadRead::Gone),
            Ok(n) => n,
        };
        len += n;
        match head::scan(&buf[..len], len - n) {
            Ok(Parsed::Partial) => {}
            Ok(Parsed::Complete(head, end)) => {
                buf.truncate(len);
                return Ok((buf, head, end));
            }
            Err(e) => return Err(HeadRead::Refused(e)),
        }
    }
}

/// Waits until `fd` is readable (true), or the proxy stops or `timeout` passes (false).
fn wait_readable(fd: RawFd, stop: RawFd, timeout: Duration) -> bool {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: both descriptors outlive the wait (the caller's connection, the proxy's stop pipe).
    let (fd, stop) = unsafe { (BorrowedFd::borrow_raw(fd), BorrowedFd::borrow_raw(stop)) };
    loop {
        match sys::wait_readable(fd, Some(stop), ms) {
            Readiness::Interrupted => continue,
            Readiness::Readable | Readiness::HungUp => return true,
            Readiness::Stopped | Readiness::TimedOut => return false,
        }
    }
}

/// One connection from the sandbox: read the head, decide, resolve, connect, relay.
fn serve(shared: &Shared, client: TcpStream) {
    let stop = shared.stop.as_raw_fd();
    let (buf, head, end) = match read_head(&client, stop, shared.timeouts.head) {
        Ok(read) => read,
        Err(HeadRead::Gone) => return,
        Err(HeadRead::Refused(e)) => {
            let (status, reason, why) = e.status();
            return reply_and_linger(&client, status, reason, why);
        }
    };
    let (host, port) = head.target.host_port();
    let refuse = |why: &str| {
        shared.report(&client, host, port, None);
        reply_and_linger(&client, 403, "Forbidden", why);
    };
    let Some(rule) = shared.rules.decide(host, port) else {
        return refuse(&format!(
            "{host}:{port} is not in the sandbox's network.allow (an entry without a port \
             allows ports 80 and 443)"
        ));
    };
    let addresses = match addresses(shared, host, port) {
        Ok(addresses) if addresses.is_empty() => {
            return refuse(&format!(
                "{host} resolves to no address the sandbox may reach (a loopback, private or \
                 link-local address needs an entry that is the address)"
            ))
        }
        Ok(addresses) => addresses,
        Err(e) => {
            shared.report(&client, host, port, Some(rule));
            return reply_and_linger(
                &client,
                502,
                "Bad Gateway",
                &format!("cannot resolve {host}: {e}"),
            );
        }
    };
    shared.report(&client, host, port, Some(rule));
    let upstream = match connect(&addresses) {
        Ok(upstream) => upstream,
        Err(e) => {
            return reply_and_linger(
                &client,
                502,
                "Bad Gateway",
                &format!("cannot connect to {host}:{port}: {e}"),
            )
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    // A peer that stops reading cannot hold a write (and this thread) forever.
    let _ = client.set_write_timeout(Some(shared.timeouts.idle));
    let _ = upstream.set_write_timeout(Some(shared.timeouts.idle));
    let rest = &buf[end..];
    let (first, body_left) = match &head.target {
        Target::Tunnel { .. } => {
            let mut writer = &client;
            if writer
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .is_err()
            {
                return;
            }
            (rest.to_vec(), None)
        }
        Target::Http { .. } => {
            let mut first = upstream_head(&head, &shared.rules.headers_for(host, port));
            // The body's bytes that came with the head; anything past it (a pipelined second
            // request) is dropped: one request per connection.
            let take = rest
                .len()
                .min(usize::try_from(head.body).unwrap_or(usize::MAX));
            first.extend_from_slice(&rest[..take]);
            (first, Some(head.body - take as u64))
        }
    };
    let mut writer = &upstream;
    if !first.is_empty() && writer.write_all(&first).is_err() {
        return;
    }
    relay(&client, &upstream, body_left, stop, shared.timeouts.idle);
}

/// The addresses a connection to `host:port` may go to, in the resolver's order: a name's
/// (resolved here, on the host) or the address itself, less those the rules do not let it reach.
/// Empty: none of them may be reached.
fn addresses(shared: &Shared, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let all = match Host::parse(host) {
        Some(Host::Address(ip)) => vec![SocketAddr::new(ip, port)],
        Some(Host::Name(name)) => (shared.resolve)(&name, port)?,
        None => return Err(io::Error::other("not a host name")),
    };
    Ok(all
        .into_iter()
        .filter(|addr| shared.rules.reaches(*addr))
        .collect())
}

/// Connects to the first of `addresses` that answers, within `CONNECT_TIMEOUT` in all: to the
/// very address that was checked (no second lookup a changed DNS answer could redirect).
fn connect(addresses: &[SocketAddr]) -> io::Result<TcpStream> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut last = io::Error::other("the name has no address");
    for addr in addresses {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        match TcpStream::connect_timeout(addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}
