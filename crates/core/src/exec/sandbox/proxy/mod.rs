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

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
#[cfg(test)]
use std::os::fd::RawFd;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

mod attribution;
#[cfg(test)]
mod fuzz;
mod head;
mod relay;
mod rules;
mod serve;

pub(crate) use rules::Rules;

use crate::policy::{now_ms, EventSink, EventTarget, PolicyEvent};
use crate::sys::pipe;
use attribution::{peer_inode, tree_holds};
use head::{upstream_head, HeadError, Parsed, Target};
use relay::set_nonblocking;
use rules::Host;
use serve::{accept_loop, local_port};

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
/// loopback fell from about 30 ms to about 20 ms (fewer wake-ups and calls; bench/NOTES.md
/// 2026-12-05 03:50).
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

/// Whether the stop pipe hung up (the proxy was dropped).
pub(super) fn stopped(revents: libc::c_short) -> bool {
    revents != 0
}

#[cfg(test)]
mod tests;
