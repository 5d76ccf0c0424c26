//! The operations, each a blocking call into the core that converts its arguments and its result
//! and decides nothing itself. They run on the blocking pool (`conn.rs`).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use serde_json::{json, Map, Value};

use pi_native_ops_core::error::errno_of;
use pi_native_ops_core::exec::{self, Control};
use pi_native_ops_core::grep::{self, RawQuery};
use pi_native_ops_core::image::{detect_image_mime, SNIFF_BYTES};
use pi_native_ops_core::root::{Access, Root};
use pi_native_ops_core::{find, Cancel, Error as CoreError};

use crate::index::SearchIndex;
use crate::outbox::Outbox;
use crate::wire::{Answer, ExecRequest, Failure, Op, WireError};

/// `data` payload a stream may have sent and not yet had credited (docs/protocol.md, "Streams
/// and flow control"): four of the largest chunks, so a consumer that keeps up never stalls the
/// command, and one that does not holds at most this much.
pub const WINDOW: u64 = 4 << 20;
/// Largest `data` payload: the exec pipe's largest chunk on Linux, and what the protocol allows.
pub const MAX_DATA: usize = 1 << 20;

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn empty() -> Answer {
    (Map::new(), Vec::new())
}

/// Names the way Node shows a name that is not UTF-8 (U+FFFD replacements), as the binding does.
fn lossy(path: impl AsRef<std::ffi::OsStr>) -> String {
    path.as_ref().to_string_lossy().into_owned()
}

/// The one-shot operations (every op but readStream, grep, exec and the index's); find reads
/// `index` when it can answer.
pub fn simple(
    root: &Root,
    index: SearchIndex<'_>,
    op: Op,
    payload: Vec<u8>,
) -> Result<Answer, Failure> {
    let answer = match op {
        Op::ReadFile { path } => {
            // Refused before it is read when one answer cannot carry it.
            let max = u64::from(crate::frame::MAX_PAYLOAD);
            (Map::new(), root.read_file_within(Path::new(&path), max)?)
        }
        Op::Access { path, mode } => {
            root.access(Path::new(&path), Access::from_mode(&mode))?;
            empty()
        }
        Op::DetectImageMimeType { path } => {
            let head = root.read_head(Path::new(&path), SNIFF_BYTES)?;
            let mime = detect_image_mime(&head);
            (fields(json!({ "mime": mime })), Vec::new())
        }
        Op::WriteFile { path } => {
            root.write_file(Path::new(&path), &payload)?;
            empty()
        }
        Op::Mkdir { path } => {
            root.mkdir_all(Path::new(&path))?;
            empty()
        }
        Op::Exists { path } | Op::FindExists { path } => {
            let exists = root.exists_inside(Path::new(&path))?;
            (fields(json!({ "exists": exists })), Vec::new())
        }
        Op::Stat { path } => {
            let s = root.stat(Path::new(&path))?;
            let stat = json!({
                "isDirectory": s.is_dir,
                "isFile": s.is_file,
                "isSymbolicLink": s.is_symlink,
                "size": s.size,
                "mtimeMs": s.mtime_ms,
                "mode": s.mode,
            });
            (fields(stat), Vec::new())
        }
        Op::Readdir { path } => {
            let names: Vec<String> = root
                .read_dir(Path::new(&path))?
                .into_iter()
                .map(lossy)
                .collect();
            (fields(json!({ "names": names })), Vec::new())
        }
        Op::Glob {
            pattern,
            cwd,
            ignore,
            limit,
        } => {
            let search = find::Search::new(&pattern, &ignore, limit);
            let paths: Vec<String> = find::glob(root, Path::new(&cwd), &search, index)?
                .into_iter()
                .map(lossy)
                .collect();
            (fields(json!({ "paths": paths })), Vec::new())
        }
        Op::ReadStream { .. }
        | Op::Grep(_)
        | Op::Exec(_)
        | Op::IndexStart { .. }
        | Op::IndexReady
        | Op::IndexStats
        | Op::IndexClose
        | Op::Policy { .. } => {
            return Err(WireError::protocol("not a one-shot operation").into());
        }
    };
    Ok(answer)
}

/// pi's grep, bounded by the root, reading `index` when it can answer. A cancelled search fails
/// with `Aborted`, carrying how many files it had begun to read.
pub fn grep(
    root: &Root,
    index: SearchIndex<'_>,
    req: RawQuery,
    cancel: &Cancel,
) -> Result<Answer, Failure> {
    let aborted = || {
        let mut e = WireError::from(CoreError::aborted());
        e.files_searched = Some(cancel.files_searched());
        Failure::from(e)
    };
    let result = grep::search(Some(root), req, cancel, index);
    if cancel.is_cancelled() {
        return Err(aborted());
    }
    let out = result?;
    let lines: Vec<Value> = out
        .lines
        .into_iter()
        .map(|l| {
            json!({
                "path": l.path.to_string(),
                "lineNumber": l.line_number,
                "text": l.text,
                "isMatch": l.is_match,
            })
        })
        .collect();
    let answer = json!({
        "lines": lines,
        "matchCount": out.match_count,
        "limit": out.limit,
        "matchLimitReached": out.match_limit_reached,
        "linesTruncated": out.lines_truncated,
        "outputBytes": out.output_bytes,
        "outputLines": out.output_lines,
        // As the binding's `GrepAbort.filesSearched` once settled: the files it read (with the
        // index, only the candidates).
        "filesSearched": cancel.files_searched(),
    });
    Ok((fields(answer), Vec::new()))
}

/// A streaming call's flow control and cancellation, shared by the thread producing its data
/// and the reader of the connection (credits, cancel).
#[derive(Default)]
pub struct Stream {
    state: Mutex<StreamState>,
    changed: Condvar,
}

#[derive(Default)]
struct StreamState {
    /// Payload bytes sent and not yet credited.
    unacked: u64,
    cancelled: bool,
    /// The running command, once started.
    control: Option<Arc<Control>>,
    /// Whether the producer waits for credit (observed by tests).
    waiting: bool,
}

impl Stream {
    fn lock(&self) -> MutexGuard<'_, StreamState> {
        // The state stays consistent whatever panicked while holding it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `bytes` more fit in the window and counts them; false once cancelled.
    pub fn acquire(&self, bytes: u64) -> bool {
        let mut state = self.lock();
        while !state.cancelled && state.unacked + bytes > WINDOW {
            state.waiting = true;
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting = false;
        }
        if state.cancelled {
            return false;
        }
        state.unacked += bytes;
        true
    }

    pub fn credit(&self, bytes: u64) {
        let mut state = self.lock();
        state.unacked = state.unacked.saturating_sub(bytes);
        self.changed.notify_all();
    }

    /// Stops the stream: kills its command (now, or as soon as it starts) and wakes its producer.
    pub fn cancel(&self) {
        let mut state = self.lock();
        state.cancelled = true;
        if let Some(control) = &state.control {
            control.kill();
        }
        self.changed.notify_all();
    }

    pub fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    #[cfg(test)]
    pub fn is_waiting(&self) -> bool {
        self.lock().waiting
    }

    fn attach(&self, control: Arc<Control>) {
        let mut state = self.lock();
        if state.cancelled {
            control.kill();
        }
        state.control = Some(control);
    }
}

/// Sends `bytes` as `data` frames of at most `MAX_DATA`, each once the window has room; false
/// once the stream is cancelled.
fn send_data(out: &Outbox, id: u64, stream: &Stream, bytes: Vec<u8>) -> bool {
    if bytes.len() <= MAX_DATA {
        if !stream.acquire(bytes.len() as u64) {
            return false;
        }
        out.data(id, bytes);
        return true;
    }
    for piece in bytes.chunks(MAX_DATA) {
        if !stream.acquire(piece.len() as u64) {
            return false;
        }
        out.data(id, piece.to_vec());
    }
    true
}

/// Bytes read from a file per `data` frame.
const READ_CHUNK: usize = MAX_DATA;
/// Buffer for a file whose size is not known up front (not a regular file, or reported empty):
/// the size of Node's stream chunks, so a pipe-like file costs no large allocation per read.
const UNSIZED_CHUNK: usize = 64 << 10;

/// Streams a file as pi's reader reads it (js/fs.js's `createReadStream`): a regular file up to
/// its size at open time, anything else to its end.
pub fn read_stream(
    root: &Root,
    path: &str,
    out: &Outbox,
    id: u64,
    stream: &Stream,
) -> Result<Answer, Failure> {
    let p = Path::new(path);
    let mut file: File = root.open_read(p)?;
    let meta = file
        .metadata()
        .map_err(|e| CoreError::from(e).at("open", p))?;
    let mut left = (meta.is_file() && meta.len() > 0).then_some(meta.len());
    loop {
        if stream.is_cancelled() {
            return Err(CoreError::aborted().into());
        }
        let want = match left {
            Some(0) => break,
            Some(n) => n.min(READ_CHUNK as u64) as usize,
            None => UNSIZED_CHUNK,
        };
        let mut buf = vec![0u8; want];
        let n = loop {
            match file.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CoreError::read(errno_of(&e)).into()),
            }
        };
        if n == 0 {
            break;
        }
        buf.truncate(n);
        left = left.map(|l| l.saturating_sub(n as u64));
        if !send_data(out, id, stream, buf) {
            return Err(CoreError::aborted().into());
        }
    }
    Ok(empty())
}

/// Where an exec runs and how it reaches the host.
pub struct ExecSite<'a> {
    /// The workspace root as given on the command line (absolute).
    pub host_root: &'a Path,
    /// The root the agent sees.
    pub runtime_root: &'a Path,
    /// With `--sandbox`: the connection's sandbox, or why it cannot be made.
    pub shell: Option<&'a Result<exec::sandbox::Prepared, pi_native_ops_core::Error>>,
}

impl ExecSite<'_> {
    /// How the core maps the agent's `cwd` to the host.
    fn cwd_map(&self) -> pi_native_ops_core::root::RuntimeMap {
        pi_native_ops_core::root::RuntimeMap::new(self.host_root, self.runtime_root)
    }
}

/// Runs a command, streaming its output, until it ends or is killed; answers `exitCode` and
/// `killed` once its whole tree is gone.
pub fn exec(
    site: &ExecSite<'_>,
    req: ExecRequest,
    out: &Outbox,
    id: u64,
    stream: &Stream,
) -> Result<Answer, Failure> {
    if stream.is_cancelled() {
        // Cancelled while it waited for a thread of its lane: it never starts.
        return Ok((
            fields(json!({ "exitCode": null, "killed": true })),
            Vec::new(),
        ));
    }
    // With `--sandbox`, never unsandboxed: a sandbox that cannot be made fails the command.
    let sandbox = site
        .shell
        .map(Result::as_ref)
        .transpose()
        .map_err(Clone::clone)?;
    // The core's preflight (shell, cwd on the host or in the sandbox) and start: its errors as
    // they are.
    let mut execution = exec::spawn(&exec::ExecRequest {
        shell: req.shell,
        command: req.command,
        cwd: req.cwd,
        env: req.env,
        cwd_map: Some(site.cwd_map()),
        events: sandbox.and_then(|s| s.events().cloned()),
        sandbox: sandbox.cloned(),
    })?;
    stream.attach(execution.control());
    #[cfg(target_os = "linux")]
    let outcome = execution.pump_with(&mut |pipe| take_output(out, id, stream, pipe));
    #[cfg(not(target_os = "linux"))]
    let outcome = execution.pump(&mut |chunk| send_data(out, id, stream, chunk));
    // Reaps the supervisor, so the answer means the command is over.
    drop(execution);
    let answer = json!({ "exitCode": outcome.exit_code, "killed": outcome.killed });
    Ok((fields(answer), Vec::new()))
}

/// How long output that keeps coming gathers in a command's pipe before it is sent, at most:
/// as long as the local exec lets a short read linger, unnoticeable for an interactive command.
#[cfg(target_os = "linux")]
const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(1);
/// Between two looks at the pipe while output gathers: a producer writing 1 GB/s adds about
/// 200 KB meanwhile (a few frames per MiB), and a paused one is answered one step later.
#[cfg(target_os = "linux")]
const GATHER_STEP: std::time::Duration = std::time::Duration::from_micros(200);

/// Takes a command's output from its readable pipe: lets it gather (up to a largest frame, while
/// it grows, at most `GATHER_MAX`), waits for the window, then has the writer move it to stdout
/// as one `data` frame without reading it here. `None` at end-of-file; false to stop.
#[cfg(target_os = "linux")]
fn take_output(
    out: &Outbox,
    id: u64,
    stream: &Stream,
    pipe: std::os::fd::BorrowedFd<'_>,
) -> Option<bool> {
    if stream.is_cancelled() {
        return Some(false);
    }
    let mut ready = pipe_len(pipe);
    if ready == 0 {
        // Readable and empty is end-of-file; a pipe FIONREAD cannot measure is read plainly.
        return read_output(out, id, stream, pipe);
    }
    let start = std::time::Instant::now();
    while ready < MAX_DATA && start.elapsed() < GATHER_MAX {
        std::thread::sleep(GATHER_STEP);
        let now = pipe_len(pipe);
        if now == ready {
            break;
        }
        ready = now;
    }
    let len = ready.min(MAX_DATA);
    // The writer's own descriptor: a cancelled stream leaves before its piece is written.
    let Ok(from) = pipe.try_clone_to_owned() else {
        return read_output(out, id, stream, pipe);
    };
    if !stream.acquire(len as u64) {
        return Some(false);
    }
    let stopped = || stream.is_cancelled();
    Some(out.data_from_pipe(id, from, len, &stopped).is_ok())
}

/// Bytes waiting in a pipe (0 when it cannot tell).
#[cfg(target_os = "linux")]
fn pipe_len(pipe: std::os::fd::BorrowedFd<'_>) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if r < 0 {
        0
    } else {
        n.max(0) as usize
    }
}

/// One plain read of a command's pipe, sent as a `data` frame; `None` at end-of-file.
#[cfg(target_os = "linux")]
fn read_output(
    out: &Outbox,
    id: u64,
    stream: &Stream,
    pipe: std::os::fd::BorrowedFd<'_>,
) -> Option<bool> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a `File` over the borrowed descriptor, never dropped (so never closed by us).
    let mut file = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(pipe.as_raw_fd()) });
    let mut buf = vec![0u8; UNSIZED_CHUNK];
    let n = loop {
        match file.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break 0,
        }
    };
    if n == 0 {
        return None;
    }
    buf.truncate(n);
    Some(send_data(out, id, stream, buf))
}

/// What a running call can be stopped through.
#[derive(Clone)]
pub enum Running {
    Stream(Arc<Stream>),
    Grep(Cancel),
    /// A one-shot call: in flight, not cancellable.
    Plain,
}

impl Running {
    pub fn cancel(&self) {
        match self {
            Running::Stream(stream) => stream.cancel(),
            Running::Grep(grep) => grep.cancel(),
            Running::Plain => {}
        }
    }
}

/// Every call in flight, by id: its id stays taken until its answer is queued.
pub type Registry = Arc<Mutex<HashMap<u64, Running>>>;

pub fn lock(registry: &Registry) -> MutexGuard<'_, HashMap<u64, Running>> {
    registry.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts `acquire(bytes)` on a thread and returns once it waits for credit.
    fn blocked_acquire(stream: &Arc<Stream>, bytes: u64) -> std::thread::JoinHandle<bool> {
        let waiter = {
            let stream = Arc::clone(stream);
            std::thread::spawn(move || stream.acquire(bytes))
        };
        while !stream.is_waiting() {
            assert!(!waiter.is_finished(), "acquire did not wait for credit");
            std::thread::yield_now();
        }
        waiter
    }

    #[test]
    fn the_window_blocks_until_credited_and_cancel_releases_it() {
        let stream = Arc::new(Stream::default());
        assert!(stream.acquire(WINDOW - 1));
        let waiter = blocked_acquire(&stream, 2);
        stream.credit(1);
        assert!(waiter.join().unwrap());
        let waiter = blocked_acquire(&stream, 1);
        stream.cancel();
        assert!(!waiter.join().unwrap());
        assert!(!stream.acquire(0));
    }
}
