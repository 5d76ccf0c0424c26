//! `--listen HOST:PORT`: the protocol over a WebSocket (docs/protocol.md, "Over a WebSocket").
//!
//! Plain WebSocket over TCP: TLS is the job of the platform's proxy in front of the port. A
//! connection gets a thread once its upgrade request shows the token (admission.rs): the thread
//! completes the upgrade within a deadline, admits one session at a time (409 for a second), then
//! drives the WebSocket for the session (session.rs) with poll(2) until the connection drops, a
//! newer one of the same session replaces it, or the session ends. The protocol layer
//! (`conn::serve`) runs on the main thread over the session's byte streams, unaware of any of this.

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::{header, HeaderValue, StatusCode};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{Error as WsError, HandshakeError, Message, WebSocket};

use crate::admission::{self, UpgradeRequest};
use crate::conn::{self, Lanes, Site};
use crate::secret::TokenDigest;
use crate::session::{self, End, Session, SessionId, Stop, MAX_DATA};

const NAME: &str = "pi-native-ops-server";
/// The subprotocol the server speaks (and selects when offered).
pub const SUBPROTOCOL: &str = "pi-native-ops.v1";
/// An admitted upgrade must be answered within this (its request is already read).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Admitted upgrades in progress at once at most (each a thread); more are closed at once. Only
/// holders of the token get here, and the one real client needs one.
const MAX_HANDSHAKES: usize = 32;
/// Bytes waiting to go out on a connection beyond which the driver stops reading it: one largest
/// DATA message with its frame head (the session sends the next only when the last has gone) and
/// room for the small messages that answer reads (ACKs, pongs). A client that sends but never reads is then held back
/// by TCP instead of growing the server.
const MAX_BACKLOG: usize = 1 + MAX_DATA + 10 + (64 << 10);
/// A connection silent this long is taken as dropped (the client pings every 15 s).
const SILENCE: Duration = Duration::from_secs(45);
/// How long a closing connection may take to send its last bytes and its close frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Options {
    pub address: String,
    pub grace: Duration,
    pub idle_timeout: Duration,
    pub token: TokenDigest,
}

/// The entries of every `Sec-WebSocket-Protocol` header of the request.
fn offered_protocols(request: &Request) -> impl Iterator<Item = &str> {
    request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The `session` query parameter, if any.
fn session_param(request: &Request) -> Option<&str> {
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("session="))
}

fn refusal(status: StatusCode) -> ErrorResponse {
    let mut response = ErrorResponse::new(None);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What an admitted upgrade is for.
enum Claim {
    /// A new session: the slot is reserved (`Lobby::pending`) until the upgrade completes or fails.
    New,
    Resume(Arc<Session>),
}

#[derive(Default)]
struct Lobby {
    session: Option<Arc<Session>>,
    /// A new session's upgrade is in progress.
    pending: bool,
}

struct Server {
    lobby: Mutex<Lobby>,
    /// A session was created.
    started: Condvar,
    handshakes: AtomicUsize,
}

impl Server {
    fn admit(
        &self,
        request: &Request,
        mut response: Response,
    ) -> Result<(Response, Claim), StatusCode> {
        // The token was checked before the connection got here (admission.rs).
        let mut lobby = self.lobby.lock().unwrap_or_else(PoisonError::into_inner);
        let claim = match session_param(request) {
            None if lobby.session.is_some() || lobby.pending => return Err(StatusCode::CONFLICT),
            None => {
                lobby.pending = true;
                Claim::New
            }
            Some(id) => match &lobby.session {
                Some(s) if s.id_hex().eq_ignore_ascii_case(id) && s.ended().is_none() => {
                    Claim::Resume(Arc::clone(s))
                }
                _ => return Err(StatusCode::NOT_FOUND),
            },
        };
        drop(lobby);
        if offered_protocols(request).any(|p| p == SUBPROTOCOL) {
            response.headers_mut().insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_static(SUBPROTOCOL),
            );
        }
        Ok((response, claim))
    }

    fn release(&self, claim: Option<Claim>) {
        if let Some(Claim::New) = claim {
            self.lobby
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pending = false;
        }
    }
}

/// The TCP stream under the WebSocket. During the upgrade every read and write is held to one
/// deadline; after it, the socket is nonblocking and driven by poll(2), and writes go through
/// `out`: what the socket does not take at once waits there, whole frames in order, and leaves
/// from `out_at` on (tungstenite's own buffer would move its whole rest forward after every
/// partial write of a megabyte message). DATA messages are framed into it directly.
struct Socket {
    tcp: TcpStream,
    /// The upgrade request, already read (admission.rs): read before the socket.
    request: Option<(UpgradeRequest, usize)>,
    deadline: Option<Instant>,
    /// Writes go through `out` (set once the upgrade is done).
    buffered: bool,
    out: Vec<u8>,
    out_at: usize,
}

impl Socket {
    fn timed<T>(
        &mut self,
        op: impl FnOnce(&mut TcpStream) -> io::Result<T>,
        set: fn(&TcpStream, Option<Duration>) -> io::Result<()>,
    ) -> io::Result<T> {
        let Some(deadline) = self.deadline else {
            return op(&mut self.tcp);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "the upgrade took too long");
        if left.is_zero() {
            return Err(timed_out());
        }
        set(&self.tcp, Some(left))?;
        match op(&mut self.tcp) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(timed_out())
            }
            other => other,
        }
    }

    /// Bytes waiting in `out`.
    fn backlog(&self) -> usize {
        self.out.len() - self.out_at
    }

    /// Writes what waits in `out` until the socket takes no more (WouldBlock) or all has gone.
    fn write_out(&mut self) -> io::Result<()> {
        while self.out_at < self.out.len() {
            let (out, at) = (std::mem::take(&mut self.out), self.out_at);
            let written = self.timed(|tcp| tcp.write(&out[at..]), TcpStream::set_write_timeout);
            self.out = out;
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_at = 0;
        Ok(())
    }

    /// Sends one whole unmasked binary message made of `parts` (RFC 6455 5.2), gathered straight
    /// to the socket when nothing waits before it; what the socket does not take waits in `out`.
    fn send_binary(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = [0u8; 10];
        head[0] = 0x82;
        let head = match len {
            0..=125 => {
                head[1] = len as u8;
                &head[..2]
            }
            126..=0xffff => {
                head[1] = 126;
                head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                &head[..4]
            }
            _ => {
                head[1] = 127;
                head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
                &head[..10]
            }
        };
        let all = std::iter::once(head).chain(parts.iter().copied());
        let mut skip = 0;
        if self.out_at == self.out.len() && self.deadline.is_none() {
            let slices: Vec<IoSlice<'_>> = all.clone().map(IoSlice::new).collect();
            // An error other than WouldBlock shows again on the next write or flush.
            skip = self.tcp.write_vectored(&slices).unwrap_or(0);
        }
        for part in all {
            let taken = skip.min(part.len());
            skip -= taken;
            self.out.extend_from_slice(&part[taken..]);
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((request, at)) = &mut self.request {
            let n = (&request.bytes()[*at..]).read(buf)?;
            *at += n;
            if *at == request.bytes().len() {
                self.request = None;
            }
            if n > 0 {
                return Ok(n);
            }
        }
        self.timed(|tcp| tcp.read(buf), TcpStream::set_read_timeout)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.buffered {
            return self.timed(|tcp| tcp.write(buf), TcpStream::set_write_timeout);
        }
        // Taken whole (so tungstenite never holds a partly written frame): straight to the socket
        // when nothing waits before it, the rest after what waits.
        let mut rest = buf;
        if self.out_at == self.out.len() {
            match self.timed(|tcp| tcp.write(buf), TcpStream::set_write_timeout) {
                Ok(n) => rest = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        self.out.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buffered {
            self.write_out()?;
        }
        self.tcp.flush()
    }
}

fn random_id() -> io::Result<SessionId> {
    let mut id = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut id)?;
    Ok(id)
}

/// Counts one upgrade in progress until dropped.
struct HandshakeSlot<'a>(&'a AtomicUsize);

impl Drop for HandshakeSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves the protocol to one client session over a WebSocket on `options.address`; returns the
/// process's exit code.
pub fn serve(options: Options, site: Arc<Site>, lanes: Lanes) -> i32 {
    let listener = match TcpListener::bind(&options.address) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("{NAME}: cannot listen on {}: {e}", options.address);
            return 1;
        }
    };
    let bound = match listener.local_addr() {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("{NAME}: cannot listen on {}: {e}", options.address);
            return 1;
        }
    };
    // The one line stdout carries: a launcher waits for it to learn the port.
    {
        let mut stdout = io::stdout().lock();
        if writeln!(stdout, "listening on {bound}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            eprintln!("{NAME}: listening on {bound} (stdout is closed)");
        }
    }
    let server = Arc::new(Server {
        lobby: Mutex::default(),
        started: Condvar::new(),
        handshakes: AtomicUsize::new(0),
    });
    let accepting = Arc::clone(&server);
    let token = options.token;
    let spawned = std::thread::Builder::new()
        .name("pi-native-ops-server-accept".into())
        .spawn(move || {
            admission::run(listener, token, |tcp, request| {
                start_connection(&accepting, tcp, request)
            })
        });
    if let Err(e) = spawned {
        eprintln!("{NAME}: cannot start the listener: {e}");
        return 1;
    }
    // The first session, or the idle timeout.
    let session = {
        let until = Instant::now() + options.idle_timeout;
        let mut lobby = server.lobby.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(session) = &lobby.session {
                break Arc::clone(session);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!(
                    "{NAME}: no session within the idle timeout ({} s): exiting",
                    options.idle_timeout.as_secs_f64()
                );
                return 0;
            }
            lobby = server
                .started
                .wait_timeout(lobby, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    };
    let watched = Arc::clone(&session);
    let grace = options.grace;
    let spawned = std::thread::Builder::new()
        .name("pi-native-ops-server-grace".into())
        .spawn(move || watched.watch_grace(grace));
    if let Err(e) = spawned {
        eprintln!("{NAME}: cannot start the session's watch: {e}");
        return 1;
    }
    let input = io::BufReader::with_capacity(MAX_DATA, session::Input(Arc::clone(&session)));
    let code = conn::serve(site, input, session::Output(Arc::clone(&session)), lanes);
    // The protocol layer has ended (its calls are stopped): what it wrote last goes out, then a
    // close frame, if a connection is there to take them.
    session.end(End::ServerDone);
    session.wait_detached(CLOSE_TIMEOUT);
    let why = match session.ended() {
        Some(End::ClientClosed) => "the client closed it".to_string(),
        Some(End::GraceExpired) => format!(
            "no connection came back within the grace period ({} s)",
            grace.as_secs_f64()
        ),
        Some(End::Broken(code)) => format!("the client broke the session layer (close {code})"),
        Some(End::ServerDone) | None => "the protocol connection closed".to_string(),
    };
    eprintln!("{NAME}: session ended: {why}");
    code
}

/// Gives an admitted connection its thread, within `MAX_HANDSHAKES`.
fn start_connection(server: &Arc<Server>, tcp: TcpStream, request: UpgradeRequest) {
    if server.handshakes.fetch_add(1, Ordering::Relaxed) >= MAX_HANDSHAKES {
        server.handshakes.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let server = Arc::clone(server);
    let spawned = std::thread::Builder::new()
        .name("pi-native-ops-server-conn".into())
        .spawn(move || connection(&server, tcp, request));
    if let Err(e) = spawned {
        eprintln!("{NAME}: cannot start a connection's thread: {e}");
    }
}

// The upgrade callback's error type is the WebSocket library's (an HTTP response).
#[allow(clippy::result_large_err)]
fn connection(server: &Server, tcp: TcpStream, request: UpgradeRequest) {
    let slot = HandshakeSlot(&server.handshakes);
    let _ = tcp.set_nodelay(true);
    if tcp.set_nonblocking(false).is_err() {
        return;
    }
    let spare = tcp.try_clone().ok();
    let socket = Socket {
        tcp,
        request: Some((request, 0)),
        deadline: Some(Instant::now() + HANDSHAKE_TIMEOUT),
        buffered: false,
        out: Vec::new(),
        out_at: 0,
    };
    let config = WebSocketConfig::default()
        // The type byte and one largest DATA message.
        .max_message_size(Some(1 + MAX_DATA))
        .max_frame_size(Some(1 + MAX_DATA));
    let mut claim = None;
    let mut answered = false;
    let upgraded = tungstenite::accept_hdr_with_config(
        socket,
        |request: &Request, response: Response| {
            answered = true;
            let (response, admitted) = server.admit(request, response).map_err(refusal)?;
            claim = Some(admitted);
            Ok(response)
        },
        Some(config),
    );
    let mut ws = match upgraded {
        Ok(ws) => ws,
        Err(e) => {
            // A request the WebSocket library could not take as an upgrade (garbage, a plain GET)
            // gets a 400 rather than silence; the others were answered or timed out.
            let malformed = matches!(
                &e,
                HandshakeError::Failure(
                    WsError::Protocol(_) | WsError::HttpFormat(_) | WsError::Utf8(_)
                )
            );
            drop(e);
            server.release(claim);
            if malformed && !answered {
                if let Some(mut spare) = spare {
                    let _ = spare.set_write_timeout(Some(CLOSE_TIMEOUT));
                    let _ = spare.write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
            return;
        }
    };
    drop(slot);
    let Ok((waker, woken)) = UnixStream::pair() else {
        server.release(claim);
        return;
    };
    if waker.set_nonblocking(true).is_err() || woken.set_nonblocking(true).is_err() {
        server.release(claim);
        return;
    }
    let (session, attached) = match claim {
        Some(Claim::New) => {
            let session = match random_id() {
                Ok(id) => Session::new(id),
                Err(e) => {
                    eprintln!("{NAME}: cannot make a session id: {e}");
                    server.release(Some(Claim::New));
                    return;
                }
            };
            let attached = session.attach(waker);
            let mut lobby = server.lobby.lock().unwrap_or_else(PoisonError::into_inner);
            lobby.pending = false;
            lobby.session = Some(Arc::clone(&session));
            server.started.notify_all();
            drop(lobby);
            eprintln!("{NAME}: session {} started", session.id_hex());
            (session, attached)
        }
        Some(Claim::Resume(session)) => {
            let attached = session.attach(waker);
            eprintln!("{NAME}: session {} resumed", session.id_hex());
            (session, attached)
        }
        // The callback admitted nothing, yet the upgrade went through: cannot happen.
        None => return,
    };
    let Some((generation, received)) = attached else {
        close(&mut ws, CloseCode::Away, "the session has ended");
        return;
    };
    /// Detaches the connection however the driver leaves (a panic included), so the grace period
    /// starts.
    struct Detach<'a>(&'a Session, u64);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            self.0.detach(self.1);
        }
    }
    let detach = Detach(&session, generation);
    let why = drive(&mut ws, &session, generation, received, &woken);
    drop(detach);
    if let Some(why) = why {
        if session.ended().is_none() {
            eprintln!("{NAME}: session {} dropped: {why}", session.id_hex());
        }
    }
}

/// Sends a close frame and what is still buffered, within `CLOSE_TIMEOUT`, then reads until the
/// client answers it.
fn close(ws: &mut WebSocket<Socket>, code: CloseCode, reason: &str) {
    close_unread(ws, code, reason);
    while ws.read().is_ok() {}
}

/// `close` without reading on: after a read error the WebSocket's input may be left inconsistent.
fn close_unread(ws: &mut WebSocket<Socket>, code: CloseCode, reason: &str) {
    let socket = ws.get_mut();
    let _ = socket.tcp.set_nonblocking(false);
    socket.deadline = Some(Instant::now() + CLOSE_TIMEOUT);
    let _ = ws.close(Some(CloseFrame {
        code,
        reason: reason.to_string().into(),
    }));
}

/// What a received message means for the session.
enum Heard {
    Go,
    /// The client closed normally: the session ends.
    Closed,
    /// The connection dropped (a close other than normal).
    Dropped(String),
    /// A violation of the session layer: close with this code.
    Violation(CloseCode, String),
}

fn u64_of(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.try_into().ok()?))
}

/// Moves bytes between the WebSocket and the session until the connection drops (returns why),
/// or is replaced or the session ends (returns None).
fn drive(
    ws: &mut WebSocket<Socket>,
    session: &Session,
    generation: u64,
    received: u64,
    woken: &UnixStream,
) -> Option<String> {
    {
        let socket = ws.get_mut();
        socket.deadline = None;
        socket.buffered = true;
        if let Err(e) = socket.tcp.set_nonblocking(true) {
            return Some(e.to_string());
        }
    }
    let fd = ws.get_ref().tcp.as_raw_fd();
    let mut hello = Vec::with_capacity(25);
    hello.push(session::HELLO);
    hello.extend_from_slice(&session.id);
    hello.extend_from_slice(&received.to_le_bytes());
    let mut pending = vec![hello];
    let mut hello_done = false;
    let mut flushed = true;
    let mut last_heard = Instant::now();
    loop {
        let now = Instant::now();
        let socket = ws.get_mut();
        let work = match session.work(generation, hello_done, flushed, now, &mut |parts| {
            socket.send_binary(parts)
        }) {
            Ok(work) => work,
            Err(Stop::Replaced) => return None,
            Err(Stop::Ended(End::ClientClosed)) => {
                // The close reply is queued: send it.
                let _ = ws.get_mut().tcp.set_nonblocking(false);
                ws.get_mut().deadline = Some(Instant::now() + CLOSE_TIMEOUT);
                let _ = ws.flush();
                return None;
            }
            Err(Stop::Ended(End::Broken(_))) => return None,
            Err(Stop::Ended(End::GraceExpired | End::ServerDone)) => {
                close(ws, CloseCode::Normal, "the session has ended");
                return None;
            }
        };
        let mut busy = false;
        if let Some(ack) = work.ack {
            let mut message = vec![session::ACK];
            message.extend_from_slice(&ack.to_le_bytes());
            pending.push(message);
        }
        busy |= work.data > 0;
        for message in pending.drain(..) {
            busy = true;
            match ws.write(Message::Binary(message.into())) {
                Ok(()) => {}
                Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Some(e.to_string()),
            }
        }
        match ws.flush() {
            Ok(()) => flushed = true,
            Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => flushed = false,
            Err(e) => return Some(e.to_string()),
        }
        // Every message read may queue an answer (a pong, an ACK): none is read while too much
        // waits to go out.
        let want_read = work.want_read && ws.get_ref().backlog() <= MAX_BACKLOG;
        if want_read {
            loop {
                let message = match ws.read() {
                    Ok(message) => message,
                    Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e @ WsError::Capacity(_)) => {
                        let why = format!("{e} (DATA carries {MAX_DATA} bytes at most)");
                        eprintln!("{NAME}: session {}: {why}", session.id_hex());
                        session.end(End::Broken(CloseCode::Size.into()));
                        close_unread(ws, CloseCode::Size, &why);
                        return None;
                    }
                    Err(e) => return Some(e.to_string()),
                };
                busy = true;
                last_heard = Instant::now();
                match heard(session, generation, &mut hello_done, message, last_heard) {
                    Heard::Go => {}
                    Heard::Closed => {
                        session.end(End::ClientClosed);
                        break;
                    }
                    Heard::Dropped(why) => return Some(why),
                    Heard::Violation(code, why) => {
                        eprintln!("{NAME}: session {}: {why}", session.id_hex());
                        session.end(End::Broken(code.into()));
                        close(ws, code, &why);
                        return None;
                    }
                }
                if !session.wants_input() || ws.get_ref().backlog() > MAX_BACKLOG {
                    break;
                }
            }
        }
        if busy {
            continue;
        }
        let silent_until = last_heard + SILENCE;
        if now >= silent_until {
            return Some(format!("no message for {} s", SILENCE.as_secs()));
        }
        let until = work.deadline.map_or(silent_until, |d| d.min(silent_until));
        let mut events = 0;
        if want_read {
            events |= libc::POLLIN;
        }
        if !flushed {
            events |= libc::POLLOUT;
        }
        wait(
            fd,
            events,
            woken.as_raw_fd(),
            until.saturating_duration_since(now),
        );
        let mut drain = [0u8; 64];
        while let Ok(n) = (&*woken).read(&mut drain) {
            if n == 0 {
                break;
            }
        }
    }
}

fn heard(
    session: &Session,
    generation: u64,
    hello_done: &mut bool,
    message: Message,
    now: Instant,
) -> Heard {
    let bytes = match message {
        Message::Binary(bytes) => bytes,
        Message::Text(_) => {
            return Heard::Violation(
                CloseCode::Unsupported,
                "a text message (the session layer takes binary messages only)".into(),
            )
        }
        Message::Close(Some(frame)) if frame.code == CloseCode::Normal => return Heard::Closed,
        Message::Close(frame) => {
            return Heard::Dropped(match frame {
                // Quoted and escaped: the peer's words never make a line of the log.
                Some(frame) => format!("closed with {} {:?}", frame.code, frame.reason.as_str()),
                None => "closed without a code".into(),
            });
        }
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return Heard::Go,
    };
    let violation = |why: String| Heard::Violation(CloseCode::Policy, why);
    let Some((&kind, payload)) = bytes.split_first() else {
        return violation("an empty message".into());
    };
    let result = match (kind, *hello_done) {
        (session::HELLO, false) => match u64_of(payload) {
            Some(received) => {
                *hello_done = true;
                session.peer_hello(generation, received)
            }
            None => return violation("a HELLO of the wrong size".into()),
        },
        (session::HELLO, true) => return violation("a second HELLO".into()),
        (_, false) => return violation("a message before the HELLO".into()),
        (session::DATA, true) => Ok(session.received(generation, payload, now)),
        (session::ACK, true) => match u64_of(payload) {
            Some(received) => session.peer_ack(generation, received),
            None => return violation("an ACK of the wrong size".into()),
        },
        (other, true) => return violation(format!("unknown message type {other}")),
    };
    match result {
        Ok(_) => Heard::Go,
        Err(why) => violation(why),
    }
}

/// Waits until the socket is ready for `events`, the waker has a byte, or `timeout` passes.
fn wait(fd: RawFd, events: libc::c_short, woken: RawFd, timeout: Duration) {
    let mut fds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: woken,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Rounded up: a deadline 0.4 ms away must not become a busy loop of zero-timeout polls.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: poll reads and writes the two pollfd entries of a live array of that length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}
