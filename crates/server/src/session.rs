//! The resumable session under `--listen` (docs/protocol.md, "Over a WebSocket"): the protocol's
//! two ordered byte streams, kept whole across dropped connections.
//!
//! The protocol layer (`conn::serve`) reads `Input` and writes `Output` as it would stdin and
//! stdout. Bytes it writes wait in a bounded replay buffer until the client acknowledges them, so a
//! connection that drops loses none: the next connection of the session resends what the client
//! says it has not received. The connection driver (listen.rs) moves bytes between the session
//! and the WebSocket through `work`, `received`, `peer_hello` and `peer_ack`; only the connection
//! attached last (its generation) may.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Message types: the first byte of every binary message.
pub const HELLO: u8 = 0x01;
pub const DATA: u8 = 0x02;
pub const ACK: u8 = 0x03;
/// Stream bytes in one DATA message at most (the contract's bound, which the client keeps too).
pub const MAX_DATA: usize = 1 << 20;
/// Sent bytes kept until the client acknowledges them: a few seconds of output on a slow link,
/// and the whole credit window of two streams (`ops::WINDOW` is 4 MiB). When full, the protocol
/// layer's writes wait (its own output budget then holds it back).
pub const REPLAY_BYTES: usize = 8 << 20;
/// Written bytes not yet sent beyond which a write wakes the driver without waiting for the
/// writer's flush: two of the largest DATA messages (the writer flushes at least every megabyte
/// or so, `outbox::BATCH_BYTES` plus a frame).
const WAKE_UNSENT: u64 = 2 * MAX_DATA as u64;
/// Received bytes not yet read by the protocol layer beyond which the driver stops reading the
/// socket (TCP then holds the client back): two of the largest DATA messages.
pub const INBOX_BYTES: usize = 2 * MAX_DATA;
/// An ACK goes out at least every this many received bytes...
pub const ACK_EVERY: u64 = 256 << 10;
/// ...and once received bytes have waited this long unacknowledged.
pub const ACK_DELAY: Duration = Duration::from_millis(50);

pub type SessionId = [u8; 16];

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The client closed its WebSocket normally (1000): the end of the session.
    ClientClosed,
    /// No connection came back within the grace period.
    GraceExpired,
    /// The client broke the session layer's rules (the driver closed with this code).
    Broken(u16),
    /// The protocol layer ended (a protocol violation closes it, as on stdin).
    ServerDone,
}

/// The connection currently carrying the session.
struct Attached {
    generation: u64,
    /// Wakes the connection's driver out of poll(2) (it holds the other end).
    waker: UnixStream,
    /// A wake-up is pending: the driver has not yet gathered its work since.
    woken: bool,
}

struct State {
    /// Bytes written by the protocol layer and not yet acknowledged: stream offsets
    /// `out_base..out_base + out.len()`.
    out: VecDeque<u8>,
    out_base: u64,
    /// Up to where the current connection has sent.
    out_sent: u64,
    /// The most ever sent, on any connection: a client cannot have received more.
    out_high: u64,
    /// Received bytes the protocol layer has not read yet.
    inbox: VecDeque<u8>,
    in_received: u64,
    /// The last count told to the client (in a HELLO or an ACK).
    in_acked: u64,
    unacked_since: Option<Instant>,
    generation: u64,
    conn: Option<Attached>,
    /// When the last connection went (none attached since).
    dropped_at: Option<Instant>,
    ended: Option<End>,
}

impl State {
    fn wake(&mut self) {
        if let Some(conn) = &mut self.conn {
            if !conn.woken {
                conn.woken = true;
                // Nonblocking: a full socket already holds a wake-up.
                let _ = (&conn.waker).write(&[1]);
            }
        }
    }

    /// Written bytes the current connection has not sent yet.
    fn unsent(&self) -> u64 {
        self.out_base + self.out.len() as u64 - self.out_sent
    }

    fn current(&self, generation: u64) -> bool {
        self.generation == generation && self.conn.is_some()
    }
}

pub struct Session {
    pub id: SessionId,
    state: Mutex<State>,
    /// The inbox got bytes, or the session ended.
    readable: Condvar,
    /// The replay buffer got room, or the session ended.
    writable: Condvar,
    /// A connection came or went, or the session ended.
    lifecycle: Condvar,
}

/// What the current connection's driver should do next.
#[derive(Debug, Default)]
pub struct Work {
    /// Stream bytes of the DATA message appended to the driver's output (0: none).
    pub data: usize,
    /// An ACK to send: the bytes received so far.
    pub ack: Option<u64>,
    /// Whether to read more from the socket (the inbox has room).
    pub want_read: bool,
    /// When to look again without any event (the ACK delay).
    pub deadline: Option<Instant>,
}

/// Why a driver stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A newer connection of the session took over.
    Replaced,
    /// The session ended (for `ServerDone`, once everything written has been sent).
    Ended(End),
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    pub fn new(id: SessionId) -> Arc<Session> {
        Arc::new(Session {
            id,
            state: Mutex::new(State {
                out: VecDeque::new(),
                out_base: 0,
                out_sent: 0,
                out_high: 0,
                inbox: VecDeque::new(),
                in_received: 0,
                in_acked: 0,
                unacked_since: None,
                generation: 0,
                conn: None,
                dropped_at: None,
                ended: None,
            }),
            readable: Condvar::new(),
            writable: Condvar::new(),
            lifecycle: Condvar::new(),
        })
    }

    pub fn id_hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn ended(&self) -> Option<End> {
        lock(&self.state).ended
    }

    /// Whether the driver should read on: the inbox has room and the session goes on.
    pub fn wants_input(&self) -> bool {
        let s = lock(&self.state);
        s.inbox.len() < INBOX_BYTES && s.ended.is_none()
    }

    /// Makes a new connection the session's: returns its generation and the client bytes received
    /// so far (for the server's HELLO), or None once the session has ended. An older connection
    /// still attached is woken to find itself replaced.
    pub fn attach(&self, waker: UnixStream) -> Option<(u64, u64)> {
        let mut s = lock(&self.state);
        if s.ended.is_some() {
            return None;
        }
        s.wake();
        s.generation += 1;
        s.conn = Some(Attached {
            generation: s.generation,
            waker,
            woken: false,
        });
        s.dropped_at = None;
        // The HELLO tells the client everything received.
        s.in_acked = s.in_received;
        s.unacked_since = None;
        self.lifecycle.notify_all();
        Some((s.generation, s.in_received))
    }

    /// The connection `generation` is gone; if it was the current one, the grace period starts.
    pub fn detach(&self, generation: u64) {
        let mut s = lock(&self.state);
        if s.conn.as_ref().map(|c| c.generation) == Some(generation) {
            s.conn = None;
            s.dropped_at = Some(Instant::now());
            self.lifecycle.notify_all();
        }
    }

    /// Ends the session (the first reason stays): the protocol layer's input ends, its writes fail.
    pub fn end(&self, why: End) {
        self.end_locked(&mut lock(&self.state), why);
    }

    fn end_locked(&self, s: &mut State, why: End) {
        if s.ended.is_none() {
            s.ended = Some(why);
            s.wake();
            self.readable.notify_all();
            self.writable.notify_all();
            self.lifecycle.notify_all();
        }
    }

    /// Ends the session once no connection has come back within `grace` of a drop; returns when
    /// the session has ended, for whatever reason.
    pub fn watch_grace(&self, grace: Duration) {
        let mut s = lock(&self.state);
        loop {
            if s.ended.is_some() {
                return;
            }
            match (s.conn.is_some(), s.dropped_at) {
                (false, Some(dropped)) => {
                    let left = (dropped + grace).saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // Under the same lock as the check: a resume cannot slip in between.
                        self.end_locked(&mut s, End::GraceExpired);
                        return;
                    }
                    s = self
                        .lifecycle
                        .wait_timeout(s, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                _ => {
                    s = self
                        .lifecycle
                        .wait(s)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
    }

    /// Waits up to `timeout` until no connection is attached (the last one has closed).
    pub fn wait_detached(&self, timeout: Duration) {
        let until = Instant::now() + timeout;
        let mut s = lock(&self.state);
        while s.conn.is_some() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            s = self
                .lifecycle
                .wait_timeout(s, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The driver's next work. `hello_done`: the client's HELLO has come on this connection (no
    /// DATA goes before it); `flushed`: the socket took everything written so far (one DATA
    /// message at a time waits in the driver's output at most). The next DATA message goes to
    /// `send` as its parts (type byte, then the payload as it lies in the replay buffer), under
    /// the session's lock: the driver writes them straight to the socket, with no copy between.
    pub fn work(
        &self,
        generation: u64,
        hello_done: bool,
        flushed: bool,
        now: Instant,
        send: &mut dyn FnMut(&[&[u8]]),
    ) -> Result<Work, Stop> {
        let mut s = lock(&self.state);
        if !s.current(generation) {
            return Err(Stop::Replaced);
        }
        if let Some(conn) = &mut s.conn {
            conn.woken = false;
        }
        let end = s.out_base + s.out.len() as u64;
        match s.ended {
            Some(End::ServerDone) if !(flushed && s.out_sent == end) && hello_done => {}
            Some(why) => return Err(Stop::Ended(why)),
            None => {}
        }
        let mut work = Work {
            want_read: s.inbox.len() < INBOX_BYTES && s.ended.is_none(),
            ..Work::default()
        };
        if !(hello_done && flushed) {
            return Ok(work);
        }
        if s.out_sent < end {
            let from = (s.out_sent - s.out_base) as usize;
            let len = ((end - s.out_sent) as usize).min(MAX_DATA);
            let (a, b) = s.out.as_slices();
            let first = &a[from.min(a.len())..(from + len).min(a.len())];
            let rest = len - first.len();
            let b_from = from.saturating_sub(a.len());
            send(&[&[DATA], first, &b[b_from..b_from + rest]]);
            s.out_sent += len as u64;
            s.out_high = s.out_high.max(s.out_sent);
            work.data = len;
        }
        if let Some(since) = s.unacked_since {
            if s.in_received - s.in_acked >= ACK_EVERY || now >= since + ACK_DELAY {
                work.ack = Some(s.in_received);
                s.in_acked = s.in_received;
                s.unacked_since = None;
            } else {
                work.deadline = Some(since + ACK_DELAY);
            }
        }
        Ok(work)
    }

    /// The client's HELLO: it has received `received` bytes; resend from there. An impossible count
    /// breaks the session.
    pub fn peer_hello(&self, generation: u64, received: u64) -> Result<bool, String> {
        let mut s = lock(&self.state);
        if !s.current(generation) {
            return Ok(false);
        }
        if received < s.out_base || received > s.out_high {
            return Err(format!(
                "HELLO says {received} bytes received; the server has sent {} and the client acknowledged {}",
                s.out_high, s.out_base
            ));
        }
        let drop = (received - s.out_base) as usize;
        s.out.drain(..drop);
        s.out_base = received;
        s.out_sent = received;
        self.writable.notify_all();
        Ok(true)
    }

    /// The client's ACK: it has received `received` bytes; they leave the replay buffer.
    pub fn peer_ack(&self, generation: u64, received: u64) -> Result<bool, String> {
        let mut s = lock(&self.state);
        if !s.current(generation) {
            return Ok(false);
        }
        if received > s.out_sent {
            return Err(format!(
                "ACK of {received} bytes; the server has sent {}",
                s.out_sent
            ));
        }
        // An ACK can only go forward; one behind the base acknowledges nothing new.
        if received > s.out_base {
            let drop = (received - s.out_base) as usize;
            s.out.drain(..drop);
            s.out_base = received;
            self.writable.notify_all();
        }
        Ok(true)
    }

    /// Stream bytes from the client, in order. False when this connection is no longer current.
    pub fn received(&self, generation: u64, bytes: &[u8], now: Instant) -> bool {
        let mut s = lock(&self.state);
        if !s.current(generation) || s.ended.is_some() {
            return false;
        }
        s.inbox.extend(bytes);
        s.in_received += bytes.len() as u64;
        s.unacked_since.get_or_insert(now);
        self.readable.notify_all();
        true
    }
}

fn ended_error() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the session ended")
}

/// The protocol layer's input: the client's stream. Ends when the session does.
pub struct Input(pub Arc<Session>);

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut s = lock(&self.0.state);
        loop {
            if s.ended.is_some() {
                return Ok(0);
            }
            if !s.inbox.is_empty() {
                let was_full = s.inbox.len() >= INBOX_BYTES;
                let n = s.inbox.read(buf)?;
                if was_full && s.inbox.len() < INBOX_BYTES {
                    s.wake();
                }
                return Ok(n);
            }
            s = self
                .0
                .readable
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The protocol layer's output: the server's stream, kept for replay until acknowledged. Writes
/// wait while the replay buffer is full and fail once the session has ended.
pub struct Output(pub Arc<Session>);

impl Output {
    /// Waits for room; returns the session locked and the bytes it may take.
    fn room(&self) -> io::Result<(MutexGuard<'_, State>, usize)> {
        let mut s = lock(&self.0.state);
        loop {
            if s.ended.is_some() {
                return Err(ended_error());
            }
            let room = REPLAY_BYTES.saturating_sub(s.out.len());
            if room > 0 {
                return Ok((s, room));
            }
            // Only what the driver sends makes room: it must know of everything written.
            s.wake();
            s = self
                .0
                .writable
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        let (mut s, mut room) = self.room()?;
        let mut n = 0;
        for buf in bufs {
            let take = buf.len().min(room);
            s.out.extend(&buf[..take]);
            n += take;
            room -= take;
            if room == 0 {
                break;
            }
        }
        if s.unsent() >= WAKE_UNSENT {
            s.wake();
        }
        Ok(n)
    }

    /// The writer flushes after each batch of frames: the driver is woken once for the batch (a
    /// command's output piece and its frame head go as one message, not two).
    fn flush(&mut self) -> io::Result<()> {
        let mut s = lock(&self.0.state);
        if s.unsent() > 0 {
            s.wake();
        }
        Ok(())
    }
}

impl crate::outbox::Output for Output {
    /// A command's output piece (up to a megabyte) is read whole, then taken in one write: the
    /// driver is woken once for it and sends it as one message, not as one per pipe read.
    fn write_from_pipe(&mut self, from: BorrowedFd<'_>, len: usize) -> io::Result<()> {
        let mut buf = Vec::with_capacity(len);
        File::from(from.try_clone_to_owned()?)
            .take(len as u64)
            .read_to_end(&mut buf)?;
        if buf.len() < len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.write_all(&buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached() -> (Arc<Session>, u64, UnixStream) {
        let session = Session::new([7; 16]);
        let (tx, rx) = UnixStream::pair().unwrap();
        tx.set_nonblocking(true).unwrap();
        let (generation, received) = session.attach(tx).unwrap();
        assert_eq!(received, 0);
        (session, generation, rx)
    }

    /// The driver's next work with `hello_done` and `flushed` as given, and the DATA message it
    /// got (type byte included).
    fn work(
        session: &Session,
        generation: u64,
        hello_done: bool,
        flushed: bool,
        now: Instant,
    ) -> Result<(Work, Vec<u8>), Stop> {
        let mut sent = Vec::new();
        let mut messages = 0;
        let work = session.work(generation, hello_done, flushed, now, &mut |parts| {
            messages += 1;
            sent.extend(parts.concat());
        })?;
        assert_eq!(messages, usize::from(work.data > 0));
        assert_eq!(sent.len(), if work.data > 0 { 1 + work.data } else { 0 });
        Ok((work, sent))
    }

    /// Everything the driver would send now, as stream bytes.
    fn drain(session: &Session, generation: u64) -> Vec<u8> {
        let mut sent = Vec::new();
        loop {
            let (_, data) = work(session, generation, true, true, Instant::now()).unwrap();
            if data.is_empty() {
                return sent;
            }
            assert_eq!(data[0], DATA);
            assert!(data.len() - 1 <= MAX_DATA);
            sent.extend_from_slice(&data[1..]);
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn a_resume_resends_exactly_what_the_client_lacks() {
        let (session, g1, _rx) = attached();
        let bytes = pattern(3 * MAX_DATA + 12345);
        Output(Arc::clone(&session)).write_all(&bytes).unwrap();
        // Nothing goes before the client's HELLO.
        assert!(work(&session, g1, false, true, Instant::now())
            .unwrap()
            .1
            .is_empty());
        assert_eq!(session.peer_hello(g1, 0), Ok(true));
        let sent = drain(&session, g1);
        assert_eq!(sent, bytes);
        session.peer_ack(g1, 1000).unwrap();
        // The client got 2 MiB + 7 before the drop; the next connection resends the rest.
        session.detach(g1);
        let (tx, _rx2) = UnixStream::pair().unwrap();
        let (g2, _) = session.attach(tx).unwrap();
        assert!(work(&session, g1, true, true, Instant::now()).is_err());
        let got = 2 * MAX_DATA + 7;
        assert_eq!(session.peer_hello(g2, got as u64), Ok(true));
        assert_eq!(drain(&session, g2), bytes[got..]);
        // An impossible HELLO breaks the session: beyond what was sent, or before what was
        // acknowledged.
        let (tx, _rx3) = UnixStream::pair().unwrap();
        let (g3, _) = session.attach(tx).unwrap();
        assert!(session.peer_hello(g3, bytes.len() as u64 + 1).is_err());
        assert!(session.peer_hello(g3, 999).is_err());
        assert!(session.peer_ack(g3, bytes.len() as u64 + 1).is_err());
    }

    #[test]
    fn writes_wait_while_the_replay_buffer_is_full_until_an_ack() {
        let (session, g, _rx) = attached();
        session.peer_hello(g, 0).unwrap();
        let writer = {
            let session = Arc::clone(&session);
            std::thread::spawn(move || {
                Output(session)
                    .write_all(&pattern(REPLAY_BYTES + 10))
                    .unwrap();
            })
        };
        let mut sent = Vec::new();
        while sent.len() < REPLAY_BYTES {
            sent.extend(drain(&session, g));
            std::thread::yield_now();
        }
        // Full: the writer waits, holding the last 10 bytes.
        assert_eq!(sent.len(), REPLAY_BYTES);
        assert!(!writer.is_finished());
        session.peer_ack(g, 10).unwrap();
        writer.join().unwrap();
        sent.extend(drain(&session, g));
        assert_eq!(sent, pattern(REPLAY_BYTES + 10));
    }

    /// Whether the driver has been woken since the last look (and clears it).
    fn woken(session: &Session, generation: u64, rx: &UnixStream) -> bool {
        rx.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 8];
        let was = (&*rx).read(&mut byte).is_ok();
        // The driver gathers its work after a wake-up.
        let _ = work(session, generation, false, false, Instant::now());
        was
    }

    #[test]
    fn the_driver_is_woken_per_flushed_batch_and_before_a_write_waits() {
        let (session, g, rx) = attached();
        let mut output = Output(Arc::clone(&session));
        output.write_all(b"head").unwrap();
        output.write_all(&pattern(1000)).unwrap();
        assert!(!woken(&session, g, &rx));
        output.flush().unwrap();
        assert!(woken(&session, g, &rx));
        // Past two messages' worth unsent, a write wakes without a flush.
        output.write_all(&pattern(WAKE_UNSENT as usize)).unwrap();
        assert!(woken(&session, g, &rx));
        // A write that waits for room wakes the driver, though nothing is left unsent: only
        // the driver's sending brings the ACKs that make room.
        session.peer_hello(g, 0).unwrap();
        let mut written = drain(&session, g).len();
        output.write_all(&pattern(REPLAY_BYTES - written)).unwrap();
        written += drain(&session, g).len();
        assert_eq!(written, REPLAY_BYTES);
        woken(&session, g, &rx);
        let writer = std::thread::spawn(move || output.write_all(b"x"));
        while !woken(&session, g, &rx) {
            std::thread::yield_now();
        }
        assert!(!writer.is_finished());
        session.peer_ack(g, 1).unwrap();
        writer.join().unwrap().unwrap();
    }

    #[test]
    fn received_bytes_reach_the_input_and_are_acknowledged() {
        let (session, g, _rx) = attached();
        let now = Instant::now();
        assert!(session.received(g, b"abc", now));
        let (next, _) = work(&session, g, true, true, now).unwrap();
        // Acknowledged after the delay, or at once past ACK_EVERY.
        assert_eq!((next.ack, next.deadline), (None, Some(now + ACK_DELAY)));
        let later = now + ACK_DELAY;
        assert_eq!(work(&session, g, true, true, later).unwrap().0.ack, Some(3));
        assert!(session.received(g, &vec![0; ACK_EVERY as usize], now));
        assert_eq!(
            work(&session, g, true, true, now).unwrap().0.ack,
            Some(3 + ACK_EVERY)
        );
        let mut got = [0; 3];
        Input(Arc::clone(&session)).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abc");
        // Ended: the input ends, the output fails.
        session.end(End::GraceExpired);
        assert_eq!(Input(Arc::clone(&session)).read(&mut got).unwrap(), 0);
        assert!(Output(Arc::clone(&session)).write(b"x").is_err());
        assert_eq!(
            work(&session, g, true, true, now).unwrap_err(),
            Stop::Ended(End::GraceExpired)
        );
    }

    #[test]
    fn the_grace_period_ends_a_session_without_a_connection() {
        let (session, g, _rx) = attached();
        session.detach(g);
        session.watch_grace(Duration::ZERO);
        assert_eq!(session.ended(), Some(End::GraceExpired));
        let (tx, _rx) = UnixStream::pair().unwrap();
        assert!(session.attach(tx).is_none());
    }
}
