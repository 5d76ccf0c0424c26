//! The network allow-list (`network: { allow, headers }`, namespaces mode): the sandbox's only
//! way out is this proxy, which runs on Node's side.
//!
//! How a connection gets here without any binary in the sandbox: the template's builder (already
//! in the sandbox's network namespace, which has only a loopback) listens on `127.0.0.1:<port>`
//! and `[::1]:<port>` there and hands the two listening sockets to Node over a socket pair
//! (`SCM_RIGHTS`). The accept thread here accepts on them: each accepted socket is the sandbox's
//! end of a loopback connection, read and written directly (no relay process, no copy in the
//! sandbox). Commands find it through `HTTP_PROXY` & co.; anything else has no route.
//!
//! What it speaks: HTTP/1.1 forward proxying (an absolute `http://` URI, one request per
//! connection, `Connection: close` upstream) and `CONNECT host:port` tunnels (HTTPS, git, any
//! TCP). Heads are tokenized by `httparse` and checked in `head.rs`; what a request may name and
//! reach is `rules.rs`. Names are resolved here, on the host (the sandbox has no DNS), and the
//! connection goes only to an address the rules let it reach, the one that was checked.
//! Configured headers are added to plain `http://` requests to the host and port their entry
//! names; a tunnel's bytes (TLS) are never touched.
//!
//! Each allowed and each refused connection is one `PolicyEvent` (`Connect { host, port }`), sent
//! to the sink of the command that is running (see `Shared::report`), at most
//! `MAX_EVENTS_PER_COMMAND` per command.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The kernel-side relay measured against `relay` (BPF sockmap redirect; not used: see
/// `measure_relay` and bench/NOTES.md).
#[cfg(test)]
mod redirect;

#[cfg(test)]
mod fuzz;
mod head;
mod rules;

pub(crate) use rules::Rules;

use crate::policy::{now_ms, EventSink, EventTarget, PolicyEvent};
use crate::sys::{self, pipe, Readiness};
use head::{upstream_head, HeadError, Parsed, Target};
use rules::Host;

/// How long a client has to send its whole request head after connecting.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long resolving and connecting to an allowed host may take, all addresses together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection on which neither side sent anything for this long is closed (a stalled registry
/// download rather than a slow one: package managers retry).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Connections open at once per sandbox (each has a thread); more are answered `503`. Far above
/// what `npm install` opens (its default `maxsockets` is 15 per host).
pub const MAX_CONNECTIONS: usize = 256;
/// Bytes moved per splice (and the size asked for each direction's pipe) while relaying: large
/// enough that a loopback download costs few system calls, small enough for `MAX_CONNECTIONS`.
/// Also the buffer of a direction that cannot splice (heap, two per connection).
const RELAY_BUFFER_BYTES: usize = 256 << 10;
/// A direction that has moved this much is a bulk transfer: its pipe grows to `BULK_SPLICE_BYTES`.
/// Pipe sizes count against the user's pipe quota (`fs.pipe-user-pages-soft`, 64 MiB by default),
/// past which every new pipe of that user gets a minimal buffer, so only bulk directions take more.
const BULK_AFTER_BYTES: u64 = 4 << 20;
/// The splice and pipe size of a bulk direction: 1 MiB, the default `fs.pipe-max-size` (the most
/// an unprivileged process may ask). Against 256 KiB, the relay thread's CPU per 100 MB on
/// loopback fell from about 30 ms to about 20 ms (fewer wake-ups and calls; `measure_relay`,
/// bench/NOTES.md 2026-12-05 03:50).
const BULK_SPLICE_BYTES: usize = 1 << 20;
/// Stack of each connection thread: the relay's buffer is on the heap; `getaddrinfo` needs a few
/// pages.
const THREAD_STACK_BYTES: usize = 256 << 10;
/// After an error answer, how long and how much of the client's further bytes are read and
/// dropped before closing (see `reply_and_linger`): a refused upload's rest, briefly.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;
/// Connection events one command may report, as many as the guard reports refusals: a command
/// that connects in a loop must not fill the agent's queue (each event is a JS object).
/// Connections past this are still decided, unreported.
pub const MAX_EVENTS_PER_COMMAND: usize = 1000;
/// The backlog of the listening sockets inside the sandbox.
pub(super) const LISTEN_BACKLOG: i32 = 128;

/// A running command whose connections this proxy reports.
struct Active {
    id: u64,
    command: String,
    sink: Option<EventSink>,
    /// Its supervisor's pid (0 until forked): the root of its process tree.
    supervisor: libc::pid_t,
    /// Events reported so far (at most `MAX_EVENTS_PER_COMMAND`).
    events: usize,
}

/// The most processes one search for a connection's owner looks at: bounds what a connection
/// costs when commands run at once (a command's tree rarely has more than a few dozen).
const MAX_OWNER_SCAN: usize = 4096;

/// `/proc/net/tcp`'s form of an address and port: the address's 32-bit words in host byte order,
/// then the port, in upper-case hex.
fn proc_net_addr(addr: SocketAddr) -> String {
    let words: Vec<u8> = match addr.ip() {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let mut out = String::new();
    for word in words.chunks(4) {
        let word = u32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
        out.push_str(&format!("{word:08X}"));
    }
    out.push_str(&format!(":{:04X}", addr.port()));
    out
}

/// The inode of the sandbox's end of `client` (a connection we accepted), from the TCP table of
/// the sandbox's network namespace as `pid`, a process in it, sees it.
fn peer_inode(client: &TcpStream, pid: libc::pid_t) -> Option<u64> {
    let (peer, local) = (client.peer_addr().ok()?, client.local_addr().ok()?);
    let table = if peer.is_ipv4() { "tcp" } else { "tcp6" };
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok()?;
    let (want_local, want_remote) = (proc_net_addr(peer), proc_net_addr(local));
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 9 && fields[1] == want_local && fields[2] == want_remote)
            .then(|| fields[9].parse().ok())
            .flatten()
    })
}

/// Whether a process of the tree under `root` holds the socket `link` (`socket:[inode]`).
fn tree_holds(root: libc::pid_t, link: &str) -> bool {
    let mut queue = vec![root];
    let mut seen = 0;
    while let Some(pid) = queue.pop() {
        seen += 1;
        if seen > MAX_OWNER_SCAN {
            return false;
        }
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            if fds
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link))
            {
                return true;
            }
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                    queue.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<libc::pid_t>().ok()),
                    );
                }
            }
        }
    }
    false
}

/// How long a connection may wait: `HEAD_TIMEOUT` and `IDLE_TIMEOUT` (tests shorten them).
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    head: Duration,
    idle: Duration,
}

impl Timeouts {
    const DEFAULT: Timeouts = Timeouts {
        head: HEAD_TIMEOUT,
        idle: IDLE_TIMEOUT,
    };
}

/// Resolves a name at a port (the host's resolver; tests give names other addresses).
type Resolver = fn(&str, u16) -> io::Result<Vec<SocketAddr>>;

fn system_resolver(name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((name, port).to_socket_addrs()?.collect())
}

/// What the accept thread and the connection threads share (each holds it while it runs).
pub(crate) struct Shared {
    rules: Rules,
    timeouts: Timeouts,
    resolve: Resolver,
    active: Mutex<Vec<Active>>,
    next_id: AtomicU64,
    connections: AtomicUsize,
    /// The read end of the stop pipe: readable (end-of-file) once the proxy is dropped.
    stop: OwnedFd,
}

impl Shared {
    /// Sends the event of one connection decision to the sink of the command it came from. The
    /// sandbox's commands share one network namespace: with one running, it is that one; with
    /// several, the one whose process tree holds the connection's other end (found in `/proc`),
    /// else the latest started.
    /// Past `MAX_EVENTS_PER_COMMAND` events of that command, nothing is sent.
    fn report(&self, client: &TcpStream, host: &str, port: u16, rule: Option<&str>) {
        let (running, reporting): (Vec<(u64, libc::pid_t)>, bool) = {
            let active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
            let reporting = active
                .iter()
                .any(|a| a.sink.is_some() && a.events < MAX_EVENTS_PER_COMMAND);
            (
                active.iter().map(|a| (a.id, a.supervisor)).collect(),
                reporting,
            )
        };
        // No command would take the event: no owner to look for.
        if !reporting {
            return;
        }
        let owner = if running.len() > 1 {
            running
                .iter()
                .find_map(|(_, pid)| (*pid > 0).then(|| peer_inode(client, *pid)).flatten())
                .and_then(|inode| {
                    let link = format!("socket:[{inode}]");
                    running
                        .iter()
                        .find(|(_, pid)| *pid > 0 && tree_holds(*pid, &link))
                        .map(|(id, _)| *id)
                })
        } else {
            None
        };
        let Some(owner) = owner.or(running.last().map(|(id, _)| *id)) else {
            return;
        };
        let (command, sink) = {
            let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
            match active.iter_mut().find(|a| a.id == owner) {
                Some(a) if a.events < MAX_EVENTS_PER_COMMAND => {
                    a.events += 1;
                    (Some(a.command.clone()), a.sink.clone())
                }
                _ => return,
            }
        };
        if let Some(sink) = sink {
            sink(PolicyEvent {
                tool: "bash",
                command,
                target: EventTarget::Connect {
                    host: host.to_string(),
                    port,
                },
                rule: rule.map(str::to_string),
                allowed: rule.is_some(),
                time_ms: now_ms(),
            });
        }
    }
}

/// The proxy of one sandbox: an accept thread on the sandbox's listening sockets and a thread
/// per connection. Dropping it stops them all: the accept thread is joined; each connection
/// thread sees the stop pipe hang up and ends (at the latest after `CONNECT_TIMEOUT`, if it is
/// resolving or connecting).
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    port: u16,
    #[cfg(test)]
    listener: RawFd,
    stop: Option<OwnedFd>,
    accept: Option<JoinHandle<()>>,
}

/// A command's registration with the proxy: its connections are reported to its sink until this
/// is dropped.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Registration {
    /// The command's supervisor was forked: its tree is where the command's connections come
    /// from.
    pub(crate) fn started(&self, supervisor: libc::pid_t) {
        let mut active = self
            .shared
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = active.iter_mut().find(|a| a.id == self.id) {
            a.supervisor = supervisor;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut active = self
            .shared
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        active.retain(|a| a.id != self.id);
    }
}

impl Proxy {
    /// Starts the accept thread on `listeners` (the sandbox's listening sockets, all on one port).
    pub(crate) fn start(rules: Rules, listeners: Vec<OwnedFd>) -> io::Result<Proxy> {
        Proxy::start_with(rules, listeners, Timeouts::DEFAULT, system_resolver)
    }

    fn start_with(
        rules: Rules,
        listeners: Vec<OwnedFd>,
        timeouts: Timeouts,
        resolve: Resolver,
    ) -> io::Result<Proxy> {
        let port = listeners
            .first()
            .map(|fd| local_port(fd.as_raw_fd()))
            .transpose()?
            .ok_or_else(|| io::Error::other("the sandbox sent no listening socket"))?;
        for fd in &listeners {
            set_nonblocking(fd.as_raw_fd())?;
        }
        let (stop_read, stop_write) = pipe()?;
        let shared = Arc::new(Shared {
            rules,
            timeouts,
            resolve,
            active: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            stop: stop_read,
        });
        #[cfg(test)]
        let listener = listeners[0].as_raw_fd();
        let accepting = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("pi-sandbox-proxy".into())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || accept_loop(&accepting, &listeners))?;
        Ok(Proxy {
            shared,
            port,
            #[cfg(test)]
            listener,
            stop: Some(stop_write),
            accept: Some(accept),
        })
    }

    /// The port the proxy listens on inside the sandbox.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The IPv4 listening socket (tests: to see it closed once the proxy is dropped).
    #[cfg(test)]
    pub(crate) fn listener_fd(&self) -> RawFd {
        self.listener
    }

    /// What every thread of the proxy holds (tests: gone once they all ended).
    #[cfg(test)]
    pub(crate) fn threads_hold(&self) -> std::sync::Weak<Shared> {
        Arc::downgrade(&self.shared)
    }

    /// The compiled rules.
    pub(crate) fn rules(&self) -> &Rules {
        &self.shared.rules
    }

    /// Reports the connections made from now on to `sink`, as `command`'s.
    pub(crate) fn register(&self, command: &str, sink: Option<EventSink>) -> Registration {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Active {
                id,
                command: command.to_string(),
                sink,
                supervisor: 0,
                events: 0,
            });
        Registration {
            shared: Arc::clone(&self.shared),
            id,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain fcntl on a descriptor the caller holds.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

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

/// Whether the stop pipe hung up (the proxy was dropped).
fn stopped(revents: libc::c_short) -> bool {
    revents != 0
}

fn accept_loop(shared: &Arc<Shared>, listeners: &[OwnedFd]) {
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

/// One direction of a relay: from `src` to `dst`, through a pipe with `splice` (the bytes stay
/// in the kernel: no copy through this process), or through a buffer where a pipe cannot be had.
struct Mover {
    pipe: Option<(OwnedFd, OwnedFd)>,
    buf: Vec<u8>,
    /// Bytes moved so far, until the pipe was offered `BULK_SPLICE_BYTES` (then `None`).
    moved: Option<u64>,
    /// Bytes asked of each splice: the pipe's size.
    splice_bytes: usize,
}

impl Mover {
    fn new() -> Mover {
        let pipe = if std::env::var_os("PNO_NO_SPLICE").is_some() {
            None
        } else {
            pipe().ok()
        };
        if let Some((_, write)) = &pipe {
            // A larger pipe moves a download in fewer calls; refused (the user's pipe memory is
            // used up), the default size still works.
            // SAFETY: plain fcntl on our own pipe.
            unsafe {
                libc::fcntl(
                    write.as_raw_fd(),
                    libc::F_SETPIPE_SZ,
                    RELAY_BUFFER_BYTES as libc::c_int,
                )
            };
        }
        Mover {
            pipe,
            buf: Vec::new(),
            moved: Some(0),
            splice_bytes: RELAY_BUFFER_BYTES,
        }
    }

    /// Counts `n` bytes moved; past `BULK_AFTER_BYTES`, asks once for the bulk pipe size (the
    /// pipe is empty between moves, so the kernel can resize it).
    fn count(&mut self, n: usize) {
        let Some(moved) = self.moved.as_mut() else {
            return;
        };
        *moved += n as u64;
        if *moved < BULK_AFTER_BYTES {
            return;
        }
        self.moved = None;
        if let Some((_, write)) = &self.pipe {
            // SAFETY: plain fcntl on our own pipe.
            let size = unsafe {
                libc::fcntl(
                    write.as_raw_fd(),
                    libc::F_SETPIPE_SZ,
                    BULK_SPLICE_BYTES as libc::c_int,
                )
            };
            // Refused (the quota), the pipe keeps its size.
            if size >= BULK_SPLICE_BYTES as libc::c_int {
                self.splice_bytes = BULK_SPLICE_BYTES;
            }
        }
    }

    /// Moves what `src` has, at most `max` bytes, all of it to `dst`: the count, 0 at
    /// end-of-file.
    fn move_once(&mut self, src: &TcpStream, dst: &TcpStream, max: usize) -> io::Result<usize> {
        if let Some((read, write)) = &self.pipe {
            let max = max.min(self.splice_bytes);
            // SAFETY: descriptors we hold; null offsets (sockets and pipes have none).
            let n = unsafe {
                libc::splice(
                    src.as_raw_fd(),
                    std::ptr::null_mut(),
                    write.as_raw_fd(),
                    std::ptr::null_mut(),
                    max,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                )
            };
            if n >= 0 {
                let n = n as usize;
                let mut left = n;
                while left > 0 {
                    // SAFETY: as above; the pipe holds `left` bytes, all of them this call's.
                    let m = unsafe {
                        libc::splice(
                            read.as_raw_fd(),
                            std::ptr::null_mut(),
                            dst.as_raw_fd(),
                            std::ptr::null_mut(),
                            left,
                            libc::SPLICE_F_MOVE,
                        )
                    };
                    if m < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(e);
                    }
                    if m == 0 {
                        return Err(io::Error::from(io::ErrorKind::WriteZero));
                    }
                    left -= m as usize;
                }
                self.count(n);
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
            // This pair cannot be spliced: the buffer from now on.
            self.pipe = None;
        }
        if self.buf.is_empty() {
            self.buf = vec![0u8; RELAY_BUFFER_BYTES];
        }
        let mut reader = src;
        let n = reader.read(&mut self.buf[..max.min(RELAY_BUFFER_BYTES)])?;
        let mut writer = dst;
        writer.write_all(&self.buf[..n])?;
        Ok(n)
    }
}

/// Moves bytes both ways until both directions ended, either side failed, nothing moved for
/// `idle` (`IDLE_TIMEOUT`), or the proxy stopped. `to_upstream_left`: how many more bytes of the client's
/// go upstream (`None`: all, a tunnel).
fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    mut to_upstream_left: Option<u64>,
    stop: RawFd,
    idle: Duration,
) {
    let mut up = Mover::new();
    let mut down = Mover::new();
    // A request body fully sent: the client's further bytes are not read (not forwarded either).
    let mut client_open = to_upstream_left != Some(0);
    let mut upstream_open = true;
    let idle_ms = idle.as_millis().min(i32::MAX as u128) as i32;
    while client_open || upstream_open {
        // Once the response ended, the request side is over too (one request per connection).
        if !upstream_open && to_upstream_left.is_some() {
            break;
        }
        let mut fds = [
            libc::pollfd {
                fd: if client_open { client.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if upstream_open {
                    upstream.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: a valid array of three pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, idle_ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n == 0 || stopped(fds[2].revents) {
            return;
        }
        if fds[0].revents != 0 {
            let want = match to_upstream_left {
                Some(left) => usize::try_from(left).unwrap_or(usize::MAX),
                None => usize::MAX,
            };
            match up.move_once(client, upstream, want) {
                Ok(0) => {
                    client_open = false;
                    if to_upstream_left.is_none() {
                        let _ = upstream.shutdown(Shutdown::Write);
                    }
                }
                Ok(n) => {
                    if let Some(left) = to_upstream_left.as_mut() {
                        *left -= n as u64;
                        client_open = *left > 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if fds[1].revents != 0 {
            match down.move_once(upstream, client, usize::MAX) {
                Ok(0) => {
                    upstream_open = false;
                    let _ = client.shutdown(Shutdown::Write);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxy on a listener of the host's loopback (the sandbox's is the same kind of socket).
    /// Allow entries for a test server on the host's loopback at `port`: its name and its
    /// addresses (loopback is reached only when an entry is the address).
    fn loopback(port: u16) -> Vec<String> {
        ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|host| format!("{host}:{port}"))
            .collect()
    }

    /// Where a head ends in `buf` (tests: what an upstream server received).
    fn head_end(buf: &[u8]) -> Option<usize> {
        memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4)
    }

    fn proxy_on_host<S: AsRef<str>>(allow: &[S]) -> (Proxy, u16) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy::start(rules(allow), vec![OwnedFd::from(listener)]).unwrap();
        (proxy, port)
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn connections_beyond_the_bound_get_503_and_every_thread_ends_with_the_proxy() {
        let (proxy, port) = proxy_on_host(&["localhost"]);
        let held = proxy.threads_hold();
        let open = |proxy: &Proxy| proxy.shared.connections.load(Ordering::Acquire);
        // Connections that never send their head hold a thread each, up to the bound.
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        until("the idle connections were accepted", || {
            open(&proxy) == MAX_CONNECTIONS
        });
        let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut answer = String::new();
        extra.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        // Once they are gone, a fresh connection is served: an address not listed is refused.
        drop(idle);
        until("the idle connections ended", || open(&proxy) == 0);
        let mut refused = TcpStream::connect(("127.0.0.1", port)).unwrap();
        refused
            .write_all(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        refused.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        drop(refused);
        // Dropped with connections waiting for their heads: every thread ends.
        let waiting: Vec<TcpStream> = (0..8)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        until("the waiting connections were accepted", || {
            open(&proxy) == 8
        });
        drop(proxy);
        until("every proxy thread ended", || held.upgrade().is_none());
        drop(waiting);
    }

    #[test]
    fn a_forwarded_request_carries_its_body_and_nothing_after_it() {
        // The upstream: reads the head and the 5-byte body, answers, then reads whatever else the
        // proxy sends until the proxy closes.
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n")
                || got.len() < head_end(&got).unwrap_or(usize::MAX).saturating_add(5)
            {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            let end = head_end(&got).unwrap() + 5;
            let request = String::from_utf8_lossy(&got[..end]).into_owned();
            let mut after = got[end..].to_vec();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            conn.shutdown(Shutdown::Write).unwrap();
            conn.read_to_end(&mut after).unwrap();
            (request, after)
        });
        let (proxy, port) = proxy_on_host(&loopback(upstream_port));
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let smuggled = "GET http://elsewhere.example/ HTTP/1.1\r\n\r\n";
        client
            .write_all(
                format!(
                    "POST http://localhost:{upstream_port}/up HTTP/1.1\r\nContent-Length: 5\r\n\
                     Proxy-Connection: keep-alive\r\n\r\nhello{smuggled}"
                )
                .as_bytes(),
            )
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        let (request, after) = server.join().unwrap();
        assert_eq!(
            request,
            format!(
                "POST /up HTTP/1.1\r\nHost: localhost:{upstream_port}\r\nContent-Length: 5\r\n\
                 Connection: close\r\n\r\nhello"
            )
        );
        assert_eq!(String::from_utf8_lossy(&after), "");
        drop(proxy);
    }

    /// `len` bytes that differ by `seed` and by position (so a lost, repeated or reordered
    /// chunk shows).
    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
            .collect()
    }

    /// Opens a tunnel through the proxy on `port` to `localhost:target`.
    fn open_tunnel(port: u16, target: u16) -> TcpStream {
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        client
            .write_all(format!("CONNECT localhost:{target} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let answer = b"HTTP/1.1 200 Connection Established\r\n\r\n";
        let mut got = vec![0u8; answer.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, answer);
        client
    }

    /// Past `BULK_AFTER_BYTES` each way (the pipes grow mid-transfer): every byte arrives, and
    /// each side's end-of-file reaches the other; the client sends only after the server's
    /// end-of-file arrived, so the tunnel must keep that direction open past it.
    #[test]
    fn a_tunnel_carries_bulk_both_ways_and_each_half_close() {
        const DOWN: usize = 3 * BULK_AFTER_BYTES as usize;
        const UP: usize = 2 * BULK_AFTER_BYTES as usize;
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            conn.write_all(&pattern(1, DOWN)).unwrap();
            conn.shutdown(Shutdown::Write).unwrap();
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            got
        });
        let (proxy, port) = proxy_on_host(&loopback(upstream_port));
        let mut client = open_tunnel(port, upstream_port);
        let mut down = Vec::new();
        client.read_to_end(&mut down).unwrap();
        assert!(down == pattern(1, DOWN), "{} bytes down", down.len());
        client.write_all(&pattern(2, UP)).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let up = server.join().unwrap();
        assert!(up == pattern(2, UP), "{} bytes up", up.len());
        drop(proxy);
    }

    #[test]
    fn many_tunnels_at_once_each_get_their_own_bytes() {
        const TUNNELS: u8 = 24;
        const BYTES: usize = 1 << 20;
        let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let echo_port = echo.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in echo.incoming().take(TUNNELS as usize).flatten() {
                std::thread::spawn(move || {
                    let mut reader = conn.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut &conn);
                    let _ = conn.shutdown(Shutdown::Write);
                });
            }
        });
        let (proxy, port) = proxy_on_host(&loopback(echo_port));
        let tunnels: Vec<_> = (0..TUNNELS)
            .map(|seed| {
                std::thread::spawn(move || {
                    let client = open_tunnel(port, echo_port);
                    let mut writer = client.try_clone().unwrap();
                    let sending = std::thread::spawn(move || {
                        writer.write_all(&pattern(seed, BYTES)).unwrap();
                        writer.shutdown(Shutdown::Write).unwrap();
                    });
                    let mut back = Vec::new();
                    (&client).read_to_end(&mut back).unwrap();
                    sending.join().unwrap();
                    back == pattern(seed, BYTES)
                })
            })
            .collect();
        for (seed, tunnel) in tunnels.into_iter().enumerate() {
            assert!(tunnel.join().unwrap(), "tunnel {seed} got other bytes");
        }
        drop(proxy);
    }

    /// A proxy dropped in the middle of a bulk download closes both sides and every thread
    /// ends (with it, each socket and pipe it held).
    #[test]
    fn a_proxy_dropped_mid_transfer_closes_both_sides() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            let chunk = pattern(3, 64 << 10);
            // Sends until the proxy's end of the connection is gone.
            while conn.write_all(&chunk).is_ok() {}
        });
        let (proxy, port) = proxy_on_host(&loopback(upstream_port));
        let held = proxy.threads_hold();
        let mut client = open_tunnel(port, upstream_port);
        let mut buf = vec![0u8; 64 << 10];
        let mut got = 0;
        while got < 2 * BULK_AFTER_BYTES as usize {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            got += n;
        }
        drop(proxy);
        // The client reads on until the proxy closed its end (end-of-file or a reset): what was
        // in flight, far less than a relay that kept going would deliver.
        let mut after = 0;
        while let Ok(n @ 1..) = client.read(&mut buf) {
            after += n;
            assert!(
                after < 256 << 20,
                "the relay went on after the proxy was dropped"
            );
        }
        server.join().unwrap();
        until("every proxy thread ended", || held.upgrade().is_none());
    }

    #[test]
    fn a_silent_client_and_an_idle_tunnel_are_closed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let short = Timeouts {
            head: Duration::from_millis(50),
            idle: Duration::from_millis(50),
        };
        // A server that never speaks.
        let quiet = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let quiet_port = quiet.local_addr().unwrap().port();
        let proxy = Proxy::start_with(
            rules(&loopback(quiet_port)),
            vec![OwnedFd::from(listener)],
            short,
            system_resolver,
        )
        .unwrap();
        // No head: closed without an answer.
        let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut got = Vec::new();
        silent.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
        // A tunnel to it, and a client that says nothing more: closed.
        let mut tunnel = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tunnel
            .write_all(format!("CONNECT localhost:{quiet_port} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let (_held, _) = quiet.accept().unwrap();
        let mut answer = String::new();
        tunnel.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "HTTP/1.1 200 Connection Established\r\n\r\n");
        drop(proxy);
    }

    /// A loopback server that records every connection's bytes (until the client's end or a
    /// blank line) and answers each `200`; the record of each accepted connection.
    fn recording_server() -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while head_end(&got).is_none() {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                record.lock().unwrap().push(got);
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
        });
        (port, seen)
    }

    /// Sends `request` through the proxy on `port`; its whole answer.
    fn ask(port: u16, request: &[u8]) -> String {
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        client.write_all(request).unwrap();
        let mut answer = String::new();
        let _ = client.read_to_string(&mut answer);
        answer
    }

    #[test]
    fn a_bare_lf_cannot_put_a_host_before_the_proxys_nor_take_the_configured_header() {
        let (up, seen) = recording_server();
        let rules = Rules::new(&super::super::NetworkAllow {
            allow: loopback(up),
            headers: vec![(format!("localhost:{up}"), "X-Token".into(), "secret".into())],
        })
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy::start(rules, vec![OwnedFd::from(listener)]).unwrap();
        for smuggling in [
            format!("GET http://localhost:{up}/a\nHost: other.example HTTP/1.1\r\n\r\n"),
            format!("GET http://localhost:{up}/a HTTP/1.1\nHost: other.example\r\n\r\n"),
            format!("GET http://localhost:{up}/a HTTP/1.1\r\nA: b\nHost: other.example\r\n\r\n"),
        ] {
            let answer = ask(port, smuggling.as_bytes());
            assert!(
                answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
                "{answer}"
            );
        }
        // The server is reached by a well-formed request only: the proxy's Host first, then the
        // header, which went nowhere else.
        let answer = ask(
            port,
            format!("GET http://localhost:{up}/b HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(answer.ends_with("ok"), "{answer}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].starts_with(
                format!("GET /b HTTP/1.1\r\nHost: localhost:{up}\r\nX-Token: secret\r\n")
                    .as_bytes()
            ),
            "{}",
            String::from_utf8_lossy(&seen[0])
        );
        drop(proxy);
    }

    #[test]
    fn headers_go_to_the_port_their_entry_names_and_not_another_port_of_the_name() {
        let (a, seen_a) = recording_server();
        let (b, seen_b) = recording_server();
        let rules = Rules::new(&super::super::NetworkAllow {
            allow: [loopback(a), loopback(b)].concat(),
            headers: vec![
                (format!("localhost:{a}"), "X-Token".into(), "secret".into()),
                ("localhost".into(), "X-Default".into(), "80-and-443".into()),
            ],
        })
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy::start(rules, vec![OwnedFd::from(listener)]).unwrap();
        for up in [a, b] {
            let answer = ask(
                port,
                format!("GET http://localhost:{up}/ HTTP/1.1\r\n\r\n").as_bytes(),
            );
            assert!(answer.ends_with("ok"), "{answer}");
        }
        let to_a = String::from_utf8(seen_a.lock().unwrap().pop().unwrap()).unwrap();
        let to_b = String::from_utf8(seen_b.lock().unwrap().pop().unwrap()).unwrap();
        assert!(to_a.contains("X-Token: secret\r\n"), "{to_a}");
        assert!(
            !to_b.contains("secret") && !to_b.contains("X-Token"),
            "{to_b}"
        );
        assert!(!to_a.contains("X-Default") && !to_b.contains("X-Default"));
        drop(proxy);
    }

    /// A resolver that gives `*.test` names the addresses their first label spells (`private`:
    /// 10.0.0.1, `metadata`: 169.254.169.254, `v6`: fd00::1, `mixed`: those and the loopback
    /// server `up` names, `loop`: the loopback server), counting its calls.
    static LOOKUPS: AtomicUsize = AtomicUsize::new(0);
    fn test_resolver(name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        LOOKUPS.fetch_add(1, Ordering::SeqCst);
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), port);
        Ok(match name.split('.').next().unwrap() {
            "private" => vec![at("10.0.0.1")],
            "metadata" => vec![at("169.254.169.254")],
            "v6" => vec![at("fd00::1"), at("fe80::1")],
            "unspecified" => vec![at("0.0.0.0"), at("::")],
            "mixed" => vec![at("10.0.0.1"), at("169.254.169.254"), at("127.0.0.1")],
            "loop" => vec![at("127.0.0.1")],
            _ => return Err(io::Error::other("no such name")),
        })
    }

    #[test]
    fn names_reach_non_public_addresses_only_where_an_entry_is_the_address() {
        let (up, seen) = recording_server();
        let mut allow: Vec<String> = ["private", "metadata", "v6", "unspecified", "mixed", "loop"]
            .iter()
            .map(|n| format!("{n}.test:{up}"))
            .collect();
        allow.push("metadata.test".into());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy::start_with(
            rules(&allow),
            vec![OwnedFd::from(listener)],
            Timeouts::DEFAULT,
            test_resolver,
        )
        .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink_events = Arc::clone(&events);
        let _registration = proxy.register(
            "cmd",
            Some(Arc::new(move |e: PolicyEvent| {
                sink_events.lock().unwrap().push(e)
            })),
        );
        // Refused after the lookup, before any connection (none of these addresses is dialed).
        for host in ["private", "v6", "unspecified", "loop"] {
            let answer = ask(
                port,
                format!("CONNECT {host}.test:{up} HTTP/1.1\r\n\r\n").as_bytes(),
            );
            assert!(
                answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
                "{host}: {answer}"
            );
            assert!(
                answer.contains("resolves to no address the sandbox may reach"),
                "{answer}"
            );
        }
        let answer = ask(
            port,
            b"GET http://metadata.test/latest/meta-data/ HTTP/1.1\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        // The loopback address listed: the mixed name reaches it, and only it.
        let rules_with = |extra: &str| {
            let mut allow = allow.clone();
            allow.push(extra.to_string());
            rules(&allow)
        };
        drop(proxy);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy::start_with(
            rules_with(&format!("127.0.0.1:{up}")),
            vec![OwnedFd::from(listener)],
            Timeouts::DEFAULT,
            test_resolver,
        )
        .unwrap();
        let before = LOOKUPS.load(Ordering::SeqCst);
        for host in ["mixed", "loop"] {
            let answer = ask(
                port,
                format!("GET http://{host}.test:{up}/ HTTP/1.1\r\n\r\n").as_bytes(),
            );
            assert!(answer.ends_with("ok"), "{host}: {answer}");
        }
        // One lookup per connection: the address checked is the address connected to.
        assert_eq!(LOOKUPS.load(Ordering::SeqCst) - before, 2);
        assert_eq!(seen.lock().unwrap().len(), 2);
        let events = events.lock().unwrap();
        let refused: Vec<_> = events.iter().map(|e| (e.allowed, e.rule.clone())).collect();
        assert_eq!(refused, vec![(false, None); 5]);
        drop(proxy);
    }

    #[test]
    fn a_command_reports_at_most_max_events_connections() {
        let (proxy, port) = proxy_on_host(&["x.org"]);
        let count = Arc::new(AtomicUsize::new(0));
        let counting = Arc::clone(&count);
        let registration = proxy.register(
            "loop",
            Some(Arc::new(move |_: PolicyEvent| {
                counting.fetch_add(1, Ordering::SeqCst);
            })),
        );
        for _ in 0..MAX_EVENTS_PER_COMMAND + 20 {
            let answer = ask(port, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
            assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
        }
        assert_eq!(count.load(Ordering::SeqCst), MAX_EVENTS_PER_COMMAND);
        // Another command has its own count.
        drop(registration);
        let other = Arc::new(AtomicUsize::new(0));
        let counting = Arc::clone(&other);
        let _registration = proxy.register(
            "next",
            Some(Arc::new(move |_: PolicyEvent| {
                counting.fetch_add(1, Ordering::SeqCst);
            })),
        );
        ask(port, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
        assert_eq!(other.load(Ordering::SeqCst), 1);
        drop(proxy);
    }

    /// The relay's throughput and CPU against a direct loopback read, 100 MB each (check: every
    /// byte as sent), by path: `direct` (no proxy), `splice` (`relay`, what the proxy runs),
    /// `sockmap` (both directions linked with `redirect`: egress redirect, the kernel's psock
    /// worker sends) and `sockmap-ingress` (the upstream's segments queued straight onto the
    /// reader's own socket, which a real proxy could only do by taking the sandboxed process's
    /// socket). `PNO_ROUNDS` rounds (default 5), `PNO_PATHS=direct,splice` for some paths only;
    /// the sockmap paths need CAP_BPF + CAP_NET_ADMIN:
    /// `cargo test --release -p pi-native-ops-core measure_relay -- --ignored --nocapture`.
    /// CPU: the server, relay and reader threads' own (`RUSAGE_THREAD`); the psock worker's runs
    /// in a kworker and shows only in the machine's busy time (`/proc/stat`, everyone's).
    #[test]
    #[ignore]
    fn measure_relay() {
        use std::sync::mpsc::{channel, Receiver, Sender};
        const BYTES: usize = 100_000_000;
        fn thread_cpu_ms() -> f64 {
            // SAFETY: `rusage` is plain data, filled by the call.
            let u = unsafe {
                let mut u: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_THREAD, &mut u);
                u
            };
            let us = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
            us(u.ru_utime) + us(u.ru_stime)
        }
        fn machine_busy_ms() -> f64 {
            let stat = std::fs::read_to_string("/proc/stat").unwrap();
            let cpu: Vec<f64> = stat
                .lines()
                .next()
                .unwrap()
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect();
            // user nice system idle iowait irq softirq steal: all but idle and iowait, in ticks.
            let busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + cpu[7];
            busy * 1000.0 / 100.0
        }
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sp = server.local_addr().unwrap().port();
        let (server_cpu, server_cpu_rx) = channel::<f64>();
        std::thread::spawn(move || {
            let body: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
            for mut c in server.incoming().flatten() {
                let t = thread_cpu_ms();
                let _ = c.write_all(&body);
                let _ = server_cpu.send(thread_cpu_ms() - t);
            }
        });
        /// The reader's own socket, where to say it is linked (the reader reads only then), and
        /// where the reader says it has all (the relay's end-of-file, on the plain queue, would
        /// overtake redirected bytes still queued).
        type Reader = (TcpStream, Sender<()>, Receiver<()>);
        // A relay listener: each connection is relayed to the server by `how` on its own thread,
        // which reports its CPU. `reader`: the reader's own socket, for the ingress path.
        type How = fn(&TcpStream, &TcpStream, Option<&Reader>);
        let relay_on = |how: How, readers: Option<Receiver<Reader>>| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let (cpu, cpu_rx) = channel::<f64>();
            std::thread::spawn(move || {
                for c in listener.incoming().flatten() {
                    let reader = readers.as_ref().map(|r| r.recv().unwrap());
                    let up = TcpStream::connect(("127.0.0.1", sp)).unwrap();
                    let t = thread_cpu_ms();
                    how(&c, &up, reader.as_ref());
                    let _ = cpu.send(thread_cpu_ms() - t);
                }
            });
            (port, cpu_rx)
        };
        fn splice(client: &TcpStream, up: &TcpStream, _: Option<&Reader>) {
            let (_, stop_w) = pipe().unwrap();
            let (stop_r, _keep) = pipe().unwrap();
            std::mem::forget(stop_w);
            relay(client, up, None, stop_r.as_raw_fd(), IDLE_TIMEOUT);
        }
        /// Until the server's end-of-file, then long enough for the kernel to deliver the rest
        /// (a measurement, not a relay: the reader stops at `BYTES`).
        fn wait_upstream_end(up: &TcpStream) {
            let mut fds = [libc::pollfd {
                fd: up.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            }];
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
            std::thread::sleep(Duration::from_millis(500));
        }
        fn sockmap(client: &TcpStream, up: &TcpStream, _: Option<&Reader>) {
            static K: std::sync::OnceLock<redirect::Kernel> = std::sync::OnceLock::new();
            let k = K.get_or_init(|| redirect::Kernel::load(false).expect("CAP_BPF"));
            // Both directions: a target without its own verdict keeps its default write-space
            // callback, and the worker then retries a full socket only a jiffy later.
            let _down = k.link(up, client).unwrap();
            let _up = k.link(client, up).unwrap();
            wait_upstream_end(up);
        }
        fn sockmap_ingress(_: &TcpStream, up: &TcpStream, reader: Option<&Reader>) {
            static K: std::sync::OnceLock<redirect::Kernel> = std::sync::OnceLock::new();
            let k = K.get_or_init(|| redirect::Kernel::load(true).expect("CAP_BPF"));
            let (reader, linked, done) = reader.unwrap();
            let _down = k.link(up, reader).unwrap();
            linked.send(()).unwrap();
            done.recv().unwrap();
        }
        let (readers_tx, readers_rx) = channel::<Reader>();
        /// A path: its name, where the reader connects, the relay's CPU per transfer, where the
        /// reader hands over its own socket (the ingress path).
        type Path = (
            &'static str,
            u16,
            Option<Receiver<f64>>,
            Option<Sender<Reader>>,
        );
        let paths: Vec<Path> = {
            let (splice_port, splice_cpu) = relay_on(splice, None);
            let (map_port, map_cpu) = relay_on(sockmap, None);
            let (ingress_port, ingress_cpu) = relay_on(sockmap_ingress, Some(readers_rx));
            vec![
                ("direct", sp, None, None),
                ("splice", splice_port, Some(splice_cpu), None),
                ("sockmap", map_port, Some(map_cpu), None),
                (
                    "sockmap-ingress",
                    ingress_port,
                    Some(ingress_cpu),
                    Some(readers_tx),
                ),
            ]
        };
        let rounds = std::env::var("PNO_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(5);
        let expected: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
        for round in 0..rounds {
            let only = std::env::var("PNO_PATHS").ok();
            for (name, port, relay_cpu, readers) in &paths {
                if only
                    .as_ref()
                    .is_some_and(|o| !o.split(',').any(|p| p == *name))
                {
                    continue;
                }
                let busy = machine_busy_ms();
                let t = Instant::now();
                let reader_cpu = thread_cpu_ms();
                let mut c = TcpStream::connect(("127.0.0.1", *port)).unwrap();
                let done = if let Some(readers) = readers {
                    let (linked, linked_rx) = channel();
                    let (done, done_rx) = channel();
                    readers
                        .send((c.try_clone().unwrap(), linked, done_rx))
                        .unwrap();
                    linked_rx.recv().unwrap();
                    Some(done)
                } else {
                    None
                };
                let mut buf = vec![0u8; 1 << 20];
                let mut got = 0;
                while got < BYTES {
                    let n = c.read(&mut buf).unwrap();
                    assert!(n > 0, "{name}: end of file after {got} bytes");
                    // Round 0 checks every byte; later rounds only measure.
                    assert!(
                        round > 0 || buf[..n] == expected[got..got + n],
                        "{name}: bytes at {got}"
                    );
                    got += n;
                }
                let wall = t.elapsed().as_secs_f64();
                let reader_cpu = thread_cpu_ms() - reader_cpu;
                let busy = machine_busy_ms() - busy;
                drop(c);
                if let Some(done) = done {
                    done.send(()).unwrap();
                }
                let relay_cpu = relay_cpu.as_ref().map_or(0.0, |r| r.recv().unwrap());
                let server_cpu = server_cpu_rx.recv().unwrap();
                eprintln!(
                    "{round} {name:16} {:5.0} MB/s  wall {:4.0} ms  cpu: server {server_cpu:3.0} relay \
                     {relay_cpu:3.0} reader {reader_cpu:3.0} ms  machine busy {busy:4.0} ms",
                    BYTES as f64 / 1e6 / wall,
                    wall * 1e3
                );
            }
        }
    }

    fn rules<S: AsRef<str>>(allow: &[S]) -> Rules {
        Rules::new(&super::super::NetworkAllow {
            allow: allow.iter().map(|s| s.as_ref().to_string()).collect(),
            headers: Vec::new(),
        })
        .unwrap()
    }
}
