//! What a `--listen` connection must show before it gets a thread (docs/protocol.md, "Over a
//! WebSocket").
//!
//! The accept thread reads each connection's upgrade request itself, without blocking, and checks
//! the token the moment the headers are whole; only a connection presenting the token is handed
//! on. Connections still sending their request wait in a bounded set under a short deadline: the
//! client's request comes whole in its first bytes (and Linux accepts a connection only once bytes
//! have come), so no number of unauthenticated connections stands between it and the server. The
//! token is blanked in the request before anything else reads it, and the request's bytes are
//! zeroed when done with (secret.rs).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::secret::TokenDigest;

const NAME: &str = "pi-native-ops-server";
/// A `Sec-WebSocket-Protocol` entry carrying the token, for clients that cannot set headers.
pub const TOKEN_PREFIX: &str = "pi-native-ops.token.";
/// Connections whose request is not yet whole, at most: beyond them, such a connection is closed at
/// once. Each holds one `MAX_REQUEST_BYTES` buffer and a descriptor.
const MAX_WAITING: usize = 64;
/// A request not whole within this is dropped: the client sends its own at once.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest upgrade request taken: a browser's with many cookies fits; larger gets 431.
const MAX_REQUEST_BYTES: usize = 16 << 10;
/// Header lines of a request at most, as the WebSocket library's own parser allows.
const MAX_HEADERS: usize = 124;

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const UNAUTHORIZED: &[u8] =
    b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// The bytes of an admitted upgrade request, the token blanked; zeroed when dropped.
pub struct UpgradeRequest {
    buf: Vec<u8>,
    len: usize,
}

impl UpgradeRequest {
    fn new() -> UpgradeRequest {
        // Full size at once: the buffer never moves, so no stale copy of its bytes is left.
        UpgradeRequest {
            buf: vec![0; MAX_REQUEST_BYTES],
            len: 0,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for UpgradeRequest {
    fn drop(&mut self) {
        self.buf.fill(0);
        // The zeroes must be written, though the buffer is freed next.
        std::hint::black_box(&mut self.buf);
    }
}

struct Waiting {
    tcp: TcpStream,
    request: UpgradeRequest,
    deadline: Instant,
}

enum Progress {
    /// The request is not whole yet.
    More,
    /// The token is right: hand the connection on.
    Admit,
    /// Answer this and close.
    Refuse(&'static [u8]),
    /// The peer went, or its time is up.
    Gone,
}

/// The given token's places in the request: an `Authorization: Bearer` value, or a
/// `Sec-WebSocket-Protocol` entry after `TOKEN_PREFIX`.
fn presented<'a>(headers: &[httparse::Header<'a>]) -> Vec<&'a [u8]> {
    let mut given = Vec::new();
    for header in headers {
        if header.name.eq_ignore_ascii_case("authorization") {
            let value = header.value.trim_ascii();
            if let Some(space) = value.iter().position(|&b| b == b' ') {
                if value[..space].eq_ignore_ascii_case(b"bearer") {
                    given.push(value[space + 1..].trim_ascii());
                }
            }
        } else if header.name.eq_ignore_ascii_case("sec-websocket-protocol") {
            for entry in header.value.split(|&b| b == b',') {
                if let Some(token) = entry.trim_ascii().strip_prefix(TOKEN_PREFIX.as_bytes()) {
                    given.push(token);
                }
            }
        }
    }
    given
}

/// Reads what the connection has sent and judges the request once whole.
fn read_request(waiting: &mut Waiting, token: &TokenDigest) -> Progress {
    let request = &mut waiting.request;
    let mut ended = false;
    while request.len < MAX_REQUEST_BYTES {
        match waiting.tcp.read(&mut request.buf[request.len..]) {
            Ok(0) => {
                // A whole request may end with the peer's half-close: it is still answered.
                ended = true;
                break;
            }
            Ok(n) => request.len += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Progress::Gone,
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let places: Vec<std::ops::Range<usize>> = match parsed.parse(request.bytes()) {
        Ok(httparse::Status::Partial) if ended => return Progress::Gone,
        Ok(httparse::Status::Partial) if request.len < MAX_REQUEST_BYTES => return Progress::More,
        Ok(httparse::Status::Partial) => return Progress::Refuse(TOO_LARGE),
        Err(_) => return Progress::Refuse(BAD_REQUEST),
        Ok(httparse::Status::Complete(_)) => {
            let given = presented(parsed.headers);
            if !given.iter().fold(false, |ok, g| ok | token.matches(g)) {
                return Progress::Refuse(UNAUTHORIZED);
            }
            let base = request.buf.as_ptr() as usize;
            given
                .iter()
                .map(|g| {
                    let at = g.as_ptr() as usize - base;
                    at..at + g.len()
                })
                .collect()
        }
    };
    // Nothing after this point (the WebSocket library, its logs) ever holds the token.
    for place in places {
        request.buf[place].fill(b'x');
    }
    Progress::Admit
}

/// Linux hands a connection to accept(2) only once its first bytes have come (or after about
/// `REQUEST_TIMEOUT`), so the client's request is there to read the moment it is accepted.
fn defer_accept(listener: &TcpListener) {
    #[cfg(target_os = "linux")]
    {
        let seconds = REQUEST_TIMEOUT.as_secs() as libc::c_int;
        // SAFETY: setsockopt reads one c_int from a live local.
        unsafe {
            libc::setsockopt(
                listener.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&seconds as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = listener;
}

/// Accepts connections for ever, handing each one that presents the token to `admit` with its
/// request.
pub fn run(
    listener: TcpListener,
    token: TokenDigest,
    mut admit: impl FnMut(TcpStream, UpgradeRequest),
) {
    if let Err(e) = listener.set_nonblocking(true) {
        eprintln!("{NAME}: accept: {e}");
        return;
    }
    defer_accept(&listener);
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        let now = Instant::now();
        // Closed without an answer, as a stalled upgrade always was.
        waiting.retain(|w| w.deadline > now);
        let timeout = waiting
            .iter()
            .map(|w| w.deadline.saturating_duration_since(now))
            .min();
        fds.clear();
        fds.push(pollfd(listener.as_raw_fd()));
        fds.extend(waiting.iter().map(|w| pollfd(w.tcp.as_raw_fd())));
        // Rounded up: a deadline 0.4 ms away must not become a busy loop of zero-timeout polls.
        let ms = timeout.map_or(-1, |t| {
            t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
        });
        // SAFETY: poll reads and writes the entries of a live vector of that length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        // Requests under way first, then new connections.
        for i in (0..waiting.len()).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            match read_request(&mut waiting[i], &token) {
                Progress::More => {}
                progress => {
                    let w = waiting.swap_remove(i);
                    finish(w, progress, &mut admit);
                }
            }
        }
        loop {
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("{NAME}: accept: {e}");
                    // Out of descriptors or the like: let some go before trying again.
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            };
            if tcp.set_nonblocking(true).is_err() {
                continue;
            }
            let mut w = Waiting {
                tcp,
                request: UpgradeRequest::new(),
                deadline: Instant::now() + REQUEST_TIMEOUT,
            };
            match read_request(&mut w, &token) {
                // Full: closed at once, to the cost of its sender only.
                Progress::More if waiting.len() >= MAX_WAITING => {}
                Progress::More => waiting.push(w),
                progress => finish(w, progress, &mut admit),
            }
        }
    }
}

fn pollfd(fd: libc::c_int) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn finish(w: Waiting, progress: Progress, admit: &mut impl FnMut(TcpStream, UpgradeRequest)) {
    match progress {
        Progress::Admit => admit(w.tcp, w.request),
        Progress::Refuse(answer) => {
            // A few dozen bytes into a fresh socket's buffer: taken at once, or never.
            let _ = (&w.tcp).write(answer);
        }
        Progress::More | Progress::Gone => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_in_either_place_and_only_there() {
        let request = b"GET /?x HTTP/1.1\r\nHost: h\r\nAUTHORIZATION:  bearer  abc \r\n\
            Sec-WebSocket-Protocol: pi-native-ops.v1, pi-native-ops.token.def ,x\r\n\
            Authorization: Basic ghi\r\nX-Token: pi-native-ops.token.no\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        assert!(parsed.parse(request).unwrap().is_complete());
        assert_eq!(presented(parsed.headers), [&b"abc"[..], b"def"]);
    }
}
