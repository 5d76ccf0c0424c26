//! The server's side of stdout: every thread queues whole frames on one channel, and one writer
//! thread owns stdout, writing whatever is queued as one gathered write (so frames produced
//! together leave in one system call, and no payload is copied on its way out).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::budget::{Budget, Permit};
use crate::frame::{encode_head, MAX_HEADER, MAX_PAYLOAD};
use crate::wire::{Outgoing, WireError};

/// Bytes of frames queued for stdout and not yet written, beyond which a call waits before
/// queueing another large one: a client that stops reading holds the server's answers to this
/// (docs/protocol.md, "Limits"). Sixteen of the largest `data` frames; one answer larger than
/// this still goes, alone.
pub const OUTPUT_BUDGET: u64 = 64 << 20;
/// A call's answer up to this size (a `stat`'s, an `ok`, most errors) is queued without waiting:
/// one per call in flight, so they hold at most `conn::MAX_IN_FLIGHT` times this (64 MiB) beyond
/// the budget. Larger frames, and the reader's own refusals (not bounded by the calls in flight),
/// wait for room.
pub const SMALL_FRAME: usize = 4 << 10;

/// Frames gathered into one write at most: two slices each (head, payload), within the 1024
/// slices `writev` takes at once on Linux and macOS (`IOV_MAX`).
const MAX_BATCH: usize = 512;
/// Bytes gathered into one write at most: an urgent answer queued meanwhile waits behind no more
/// than this (one largest data frame).
const BATCH_BYTES: usize = 1 << 20;

pub enum Out {
    Frame {
        head: Vec<u8>,
        payload: Vec<u8>,
        /// The frame's share of the output budget, freed once it is written.
        permit: Permit,
        /// Written before every frame not urgent that is still queued: a small answer of a
        /// one-shot call (nothing of its call precedes it), so a `stat` does not wait behind
        /// megabytes of other calls' answers and streams. Data frames, large answers and a
        /// stream's answer keep their order.
        urgent: bool,
    },
    /// A frame whose payload is the next `len` bytes of the pipe `from` (a duplicate of the
    /// command's), which holds at least that many: the writer moves them to the output after
    /// `head` (without copying them where it can), then answers on `done`. Nobody reads the pipe
    /// meanwhile.
    // Only Linux streams output by pipe (ops.rs); elsewhere every piece is a `Frame`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Piped {
        head: Vec<u8>,
        from: OwnedFd,
        len: usize,
        done: mpsc::Sender<io::Result<()>>,
    },
    /// Everything queued before it has been written and flushed.
    Flushed(mpsc::Sender<()>),
}

/// What the writer writes frames to: any `Write`, and a way to pass on bytes waiting in a pipe.
pub trait Output: Write {
    /// Writes the next `len` bytes of the pipe `from` (which holds at least that many).
    fn write_from_pipe(&mut self, from: BorrowedFd<'_>, len: usize) -> io::Result<()> {
        copy_from_pipe(self, from, len)
    }

    /// Readies the output for a stream of large frames, where it can be (best effort).
    fn widen(&mut self) {}
}

/// The tests' output.
impl Output for Vec<u8> {}

/// Send buffer asked for when stdout is a socket (Node gives a child's stdio as Unix sockets): the
/// whole 4 MiB credit window (`ops::WINDOW`), so the writer hands a frame to the kernel and goes on
/// instead of waiting for the client's 64 KiB reads; the kernel caps it at `net.core.wmem_max`.
#[cfg(target_os = "linux")]
const SOCKET_SEND_BUFFER: libc::c_int = 4 << 20;

impl Output for File {
    #[cfg(target_os = "linux")]
    fn widen(&mut self) {
        let size = SOCKET_SEND_BUFFER;
        // SAFETY: setsockopt reads one int; on anything but a socket it fails and nothing changes.
        unsafe {
            libc::setsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }

    /// `splice`: the pipe's pages go to stdout (a socket or a pipe) by reference, never through
    /// this process's memory; where stdout takes no splice, a plain copy.
    #[cfg(target_os = "linux")]
    fn write_from_pipe(&mut self, from: BorrowedFd<'_>, mut len: usize) -> io::Result<()> {
        while len > 0 {
            // SAFETY: both descriptors are open (`from` borrowed, `self` owned); null offsets
            // splice at the current positions.
            let n = unsafe {
                libc::splice(
                    from.as_raw_fd(),
                    std::ptr::null_mut(),
                    self.as_raw_fd(),
                    std::ptr::null_mut(),
                    len,
                    libc::SPLICE_F_MOVE,
                )
            };
            if n > 0 {
                len -= n as usize;
                continue;
            }
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // Nothing moved by this call: the rest goes the plain way (a terminal, a file).
                Some(libc::EINVAL | libc::ENOSYS) => return copy_from_pipe(self, from, len),
                _ => return Err(e),
            }
        }
        Ok(())
    }
}

/// While the writer moves a stream's piece, how often its producer looks whether the stream was
/// cancelled: a client that stopped reading must not hold the command's thread (and so the
/// server's exit, which waits for every command) until the transport breaks.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Bytes a plain copy from a pipe moves per read.
const COPY_STEP: usize = 64 << 10;

/// Reads the next `len` bytes of the pipe `from` and writes them to `output`.
fn copy_from_pipe<W: Write + ?Sized>(
    output: &mut W,
    from: BorrowedFd<'_>,
    mut len: usize,
) -> io::Result<()> {
    // SAFETY: a `File` over the borrowed descriptor, never dropped (so never closed by us).
    let mut pipe = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(from.as_raw_fd()) });
    let mut buf = vec![0u8; len.min(COPY_STEP)];
    while len > 0 {
        let want = len.min(buf.len());
        match pipe.read(&mut buf[..want]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                output.write_all(&buf[..n])?;
                len -= n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A cheap handle any thread sends frames through. Sending after the writer has gone (stdout
/// broken) does nothing: the connection is ending.
#[derive(Clone)]
pub struct Outbox(mpsc::Sender<Out>, Arc<Budget>);

impl Outbox {
    pub fn new() -> (Outbox, mpsc::Receiver<Out>) {
        let (tx, rx) = mpsc::channel();
        (Outbox(tx, Budget::new(OUTPUT_BUDGET)), rx)
    }

    /// Holds `bytes` of the output budget for an answer about to be made (a file about to be
    /// read), waiting for room: its memory is then bounded before it is reserved.
    pub fn reserve(&self, bytes: u64) -> Permit {
        self.1.acquire(bytes)
    }

    /// Queues a frame, waiting for room in the output budget when it is large (unless `permit`
    /// already holds its bytes). A header over the protocol's limit travels as the payload of a
    /// small one, `{"t":…,"id":…,"inPayload":true}`: the client parses it in its place.
    /// Queues a frame: urgent (when small) unless it is stream data.
    fn send(&self, message: &Outgoing<'_>, payload: Vec<u8>, permit: Option<Permit>) {
        let urgent = !matches!(message, Outgoing::Data { .. });
        self.send_as(message, payload, permit, false, urgent)
    }

    /// `send`; `always_wait`: wait for room in the output budget even when the frame is small;
    /// `urgent`: see `Out::Frame`.
    fn send_as(
        &self,
        message: &Outgoing<'_>,
        mut payload: Vec<u8>,
        permit: Option<Permit>,
        always_wait: bool,
        urgent: bool,
    ) {
        let mut header = match serde_json::to_vec(message) {
            Ok(header) => header,
            // Our own messages are maps with string keys: serializing them cannot fail.
            Err(e) => return eprintln!("pi-native-ops-server: cannot encode a message: {e}"),
        };
        if header.len() > MAX_HEADER as usize {
            let (t, id) = match message {
                Outgoing::Ok { id, .. } => ("ok", Some(*id)),
                Outgoing::Error { id, .. } => ("error", *id),
                // Hello and data headers are small.
                _ => return eprintln!("pi-native-ops-server: a header over the limit"),
            };
            if !payload.is_empty() || header.len() > MAX_PAYLOAD as usize {
                let message = format!(
                    "the answer is {} bytes, more than a frame carries",
                    header.len() + payload.len()
                );
                return self.error(id, &WireError::protocol(message));
            }
            payload = header;
            let small = match id {
                Some(id) => json!({"t": t, "id": id, "inPayload": true}),
                None => json!({"t": t, "inPayload": true}),
            };
            header = serde_json::to_vec(&small).unwrap_or_default();
        }
        let head = encode_head(&header, payload.len());
        let size = (head.len() + payload.len()) as u64;
        let permit = match permit {
            Some(mut permit) => {
                if size > permit.bytes() {
                    permit.grow(size - permit.bytes());
                }
                permit
            }
            None if always_wait || size as usize > SMALL_FRAME => self.1.acquire(size),
            None => self.1.force(size),
        };
        let _ = self.0.send(Out::Frame {
            head,
            payload,
            permit,
            urgent: urgent && size as usize <= SMALL_FRAME,
        });
    }

    /// Bytes `message` takes as a frame with no payload (its permit's size).
    pub fn frame_size(&self, message: &Outgoing<'_>) -> u64 {
        let header = serde_json::to_vec(message).map_or(0, |h| h.len());
        encode_head(&[], 0).len() as u64 + header as u64
    }

    /// Queues an event frame whose bytes `permit` holds (`events.rs`): never waits, and keeps
    /// its place behind the stream data already queued.
    pub fn queue_event(&self, message: &Outgoing<'_>, permit: Permit) {
        self.send_as(message, Vec::new(), Some(permit), false, false);
    }

    pub fn hello(&self, root: &str, platform: &str, sandbox: Option<Value>) {
        let hello = Outgoing::Hello {
            protocol: crate::wire::PROTOCOL,
            server: crate::wire::SERVER_VERSION,
            root,
            platform,
            sandbox,
        };
        self.send(&hello, Vec::new(), None);
    }

    /// The answer of call `id`: its fields and payload (whose bytes `permit` may hold already).
    /// `after_data`: the call streamed `data` frames, which its answer must follow.
    pub fn ok(
        &self,
        id: u64,
        answer: Map<String, Value>,
        payload: Vec<u8>,
        permit: Option<Permit>,
        after_data: bool,
    ) {
        if payload.len() > MAX_PAYLOAD as usize {
            let message = format!(
                "the answer is {} bytes, more than a frame carries ({MAX_PAYLOAD} bytes)",
                payload.len()
            );
            return self.answer_error(id, &WireError::protocol(message), after_data);
        }
        let ok = Outgoing::Ok { id, answer };
        self.send_as(&ok, payload, permit, false, !after_data);
    }

    /// The error of call `id`; `after_data` as for `ok`.
    pub fn answer_error(&self, id: u64, error: &WireError, after_data: bool) {
        let error = Outgoing::Error {
            id: Some(id),
            error,
        };
        self.send_as(&error, Vec::new(), None, false, !after_data);
    }

    pub fn error(&self, id: Option<u64>, error: &WireError) {
        self.send(&Outgoing::Error { id, error }, Vec::new(), None);
    }

    /// A refusal the reader answers itself (a bad header, a bad call, a reused id, too many
    /// calls): it waits for room, so a client that sends them without reading stops being read.
    pub fn refuse(&self, id: Option<u64>, error: &WireError) {
        self.send_as(&Outgoing::Error { id, error }, Vec::new(), None, true, true);
    }

    /// One chunk of a stream; the caller keeps it within a frame's and the window's size.
    pub fn data(&self, id: u64, chunk: Vec<u8>) {
        self.send(&Outgoing::Data { id }, chunk, None);
    }

    /// One chunk of a stream, the next `len` bytes waiting in the pipe `from` (a duplicate of
    /// the command's, which holds at least that many and which nobody else reads): returns once
    /// they are written, so the stream's later frames follow them, or early with `Interrupted`
    /// once `stopped()` (the writer still moves them, from its own descriptor, before any frame
    /// queued later). Fails when the output does (the connection is ending).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn data_from_pipe(
        &self,
        id: u64,
        from: OwnedFd,
        len: usize,
        stopped: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let header = serde_json::to_vec(&Outgoing::Data { id })?;
        let (done, written) = mpsc::channel();
        let piped = Out::Piped {
            head: encode_head(&header, len),
            from,
            len,
            done,
        };
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "the output has closed");
        self.0.send(piped).map_err(|_| gone())?;
        loop {
            match written.recv_timeout(STOP_CHECK) {
                Ok(moved) => return moved,
                Err(mpsc::RecvTimeoutError::Timeout) if stopped() => {
                    return Err(io::ErrorKind::Interrupted.into())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(gone()),
            }
        }
    }

    /// Answers once every frame queued before it is written (the sender drops unanswered when the
    /// writer is gone).
    pub fn flushed(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let _ = self.0.send(Out::Flushed(tx));
        rx
    }
}

/// Writes queued frames to `output` until every sender is gone; fails when `output` does. Urgent
/// frames go before the others still queued (which keep their order).
pub fn write_frames<W: Output>(queue: mpsc::Receiver<Out>, mut output: W) -> io::Result<()> {
    output.widen();
    let mut urgent: VecDeque<Out> = VecDeque::new();
    let mut normal: VecDeque<Out> = VecDeque::new();
    let sort = |out: Out, urgent: &mut VecDeque<Out>, normal: &mut VecDeque<Out>| match out {
        Out::Frame { urgent: true, .. } => urgent.push_back(out),
        _ => normal.push_back(out),
    };
    let mut batch: Vec<(Vec<u8>, Vec<u8>, Permit)> = Vec::new();
    let mut waiting = Vec::new();
    loop {
        if urgent.is_empty() && normal.is_empty() {
            match queue.recv() {
                Ok(out) => sort(out, &mut urgent, &mut normal),
                Err(_) => break,
            }
        }
        // Everything queued is already in memory (within the output budget): taking it all
        // lets an urgent frame pass the others.
        while let Ok(out) = queue.try_recv() {
            sort(out, &mut urgent, &mut normal);
        }
        let mut bytes = 0;
        while let Some(out) = urgent.pop_front().or_else(|| normal.pop_front()) {
            match out {
                Out::Frame {
                    head,
                    payload,
                    permit,
                    ..
                } => {
                    bytes += head.len() + payload.len();
                    batch.push((head, payload, permit));
                }
                Out::Piped {
                    head,
                    from,
                    len,
                    done,
                } => {
                    batch.push((head, Vec::new(), Permit::none()));
                    write_batch(&mut output, &batch)?;
                    batch.clear();
                    let moved = output.write_from_pipe(from.as_fd(), len);
                    // After a failure the frame is cut short: the connection cannot go on.
                    let failed = moved
                        .as_ref()
                        .err()
                        .map(|e| io::Error::new(e.kind(), e.to_string()));
                    let _ = done.send(moved);
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    break;
                }
                Out::Flushed(done) => waiting.push(done),
            }
            if batch.len() == MAX_BATCH || bytes >= BATCH_BYTES {
                break;
            }
        }
        write_batch(&mut output, &batch)?;
        batch.clear();
        output.flush()?;
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    output.flush()
}

/// Writes every frame of `batch`, heads and payloads in order, with as few `writev` as the output
/// takes.
fn write_batch<W: Write>(output: &mut W, batch: &[(Vec<u8>, Vec<u8>, Permit)]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = batch
        .iter()
        .flat_map(|(head, payload, _)| [IoSlice::new(head), IoSlice::new(payload)])
        .filter(|slice| !slice.is_empty())
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match output.write_vectored(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An output the test reads back after the writer is done with it.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Output for Shared {}

    #[test]
    fn a_one_shot_answer_passes_queued_stream_frames_which_keep_their_order() {
        let (out, queue) = Outbox::new();
        for i in 0..3u8 {
            out.data(1, vec![i; 100]);
        }
        out.ok(1, Map::new(), Vec::new(), None, true);
        // A large one-shot answer keeps its place; a small one passes it.
        out.ok(3, Map::new(), vec![3; SMALL_FRAME], None, false);
        out.ok(2, Map::new(), Vec::new(), None, false);
        drop(out);
        let written = Shared::default();
        write_frames(queue, written.clone()).unwrap();
        let written = written.0.lock().unwrap().clone();
        let mut frames = Vec::new();
        let mut rest = &written[..];
        while !rest.is_empty() {
            let h = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let p = u32::from_be_bytes(rest[4..8].try_into().unwrap()) as usize;
            let header: Value = serde_json::from_slice(&rest[8..8 + h]).unwrap();
            frames.push((header, rest[8 + h..8 + h + p].first().copied()));
            rest = &rest[8 + h + p..];
        }
        assert_eq!(
            frames,
            [
                (json!({"t":"ok","id":2}), None),
                (json!({"t":"data","id":1}), Some(0)),
                (json!({"t":"data","id":1}), Some(1)),
                (json!({"t":"data","id":1}), Some(2)),
                (json!({"t":"ok","id":1}), None),
                (json!({"t":"ok","id":3}), Some(3)),
            ]
        );
    }
}
