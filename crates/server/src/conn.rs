//! One connection: frames in, calls dispatched to the blocking pool, answers out in any order.
//!
//! Three kinds of thread: the reader (the caller of `serve`) decodes frames and dispatches them,
//! four lanes of blocking threads run the core calls, and one writer owns stdout. A call so
//! crosses two thread hand-offs: reader to lane, lane to writer.
//!
//! The lanes keep calls that can block for long (a read of a FIFO, a search, a command, a stream
//! waiting for credit) from taking the threads short calls need: each lane has its own bounded
//! threads and queues the calls beyond them (docs/protocol.md, "Limits").

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use pi_native_ops_core::exec::sandbox::{Prepared, RawSandbox, Sandbox};
use pi_native_ops_core::policy::{EventSink, Policy, PolicySpec};
use pi_native_ops_core::root::Root;
use pi_native_ops_core::{Cancel, Error as CoreError};

use crate::budget::{Budget, Permit};
use crate::events::Events;
use crate::frame::{read_frame, Frame, ReadError, MAX_PAYLOAD};
use crate::index::WarmIndex;
use crate::ops::{self, ExecSite, Registry, Running};
use crate::outbox::{write_frames, Outbox, Output, SMALL_FRAME};
use crate::wire::{self, Answer, Failure, Incoming, Op, WireError};

/// Calls in flight on one connection at most (answered or queued); one more is refused with a
/// `Busy` error. Far above what an agent runs at once, and it bounds what queued calls hold
/// along with `INPUT_BUDGET`.
pub const MAX_IN_FLIGHT: usize = 16_384;
/// Bytes of incoming frames (headers and `writeFile` payloads) held by calls not yet answered,
/// beyond which the reader stops reading until some are: back-pressure on a client that sends
/// faster than the lanes run.
pub const INPUT_BUDGET: u64 = 64 << 20;
/// Threads of the quick lane: the fs calls that answer from metadata or write a given payload
/// (`stat`, `exists`, `access`, `mkdir`, `readdir`, `findExists`, `writeFile`, the index's
/// `indexStart`, `indexStats`, `indexClose`). A few cover the disk's parallelism.
const QUICK_THREADS: usize = 8;
/// Threads of the read lane: calls that read a named file's contents, which blocks for as long as
/// the file makes it (a FIFO no one writes): `readFile`, `detectImageMimeType`.
const READ_THREADS: usize = 16;
/// Threads of the search lane: calls that walk and may run long (`glob`, `grep`, `indexReady`).
/// Each search walks on the core's own threads too, so a few saturate the machine.
const SEARCH_THREADS: usize = 8;
/// Threads of the stream lane: `exec` and `readStream`, which hold their thread for as long as
/// the command runs or the client takes the data. Commands beyond these wait for one to end.
const STREAM_THREADS: usize = 128;
/// How long an idle lane thread stays for the next call.
const LANE_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The runtimes whose blocking threads are the lanes; they live as long as the server.
pub struct Pools {
    quick: Runtime,
    read: Runtime,
    search: Runtime,
    stream: Runtime,
}

impl Pools {
    pub fn new() -> std::io::Result<Pools> {
        let lane = |name: &str, threads: usize| {
            tokio::runtime::Builder::new_current_thread()
                .thread_name(format!("pi-native-ops-server-{name}"))
                .max_blocking_threads(threads)
                .thread_keep_alive(LANE_KEEP_ALIVE)
                .build()
        };
        Ok(Pools {
            quick: lane("quick", QUICK_THREADS)?,
            read: lane("read", READ_THREADS)?,
            search: lane("search", SEARCH_THREADS)?,
            stream: lane("stream", STREAM_THREADS)?,
        })
    }

    pub fn lanes(&self) -> Lanes {
        Lanes {
            quick: self.quick.handle().clone(),
            read: self.read.handle().clone(),
            search: self.search.handle().clone(),
            stream: self.stream.handle().clone(),
        }
    }
}

/// Where calls run (`Pools`).
#[derive(Clone)]
pub struct Lanes {
    quick: Handle,
    read: Handle,
    search: Handle,
    stream: Handle,
}

/// At exit, how long the answers already queued may take to reach a client that still reads.
const FINAL_FLUSH: Duration = Duration::from_secs(1);

/// What the server was started with: its root and the operator's policy. A connection's calls see
/// the root only as a `Workspace`, under the policy the connection fixed.
pub struct Site {
    /// The workspace under the default policy (no rules of the client's), made at start so that
    /// `--index` warms up before the client comes: taken by a connection that keeps the default,
    /// dropped by one that sets a policy of its own.
    default: Mutex<Option<Workspace>>,
    /// The root as given on the command line, made absolute.
    host_root: PathBuf,
    /// The path the agent sees the root as (`hello`'s `root`).
    runtime_root: PathBuf,
    /// `--policy`: beneath every client's policy, which can only add to it.
    pinned: Option<Arc<Policy>>,
    /// `--index`: every workspace starts the index (in the background).
    index: bool,
    /// `--pin-root`: every workspace's root stays the directory opened at start.
    pin_root: bool,
    /// `--sandbox`: every command runs in the core's sandbox, held to its connection's policy.
    shell: Option<crate::ShellSandbox>,
}

impl Site {
    pub fn new(
        root: Root,
        host_root: PathBuf,
        pinned: Option<Policy>,
        index: bool,
        shell: Option<crate::ShellSandbox>,
    ) -> Result<Arc<Site>, CoreError> {
        let site = Site {
            default: Mutex::new(None),
            runtime_root: root.runtime().to_path_buf(),
            host_root,
            pinned: pinned.map(Arc::new),
            index,
            pin_root: root.is_pinned(),
            shell,
        };
        let policy = site.policy(&PolicySpec::from_raw(None, None, None))?;
        let workspace = site.build(root, policy);
        *site.lock_default() = Some(workspace);
        Ok(Arc::new(site))
    }

    fn lock_default(&self) -> std::sync::MutexGuard<'_, Option<Workspace>> {
        self.default.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `spec`, a client's policy, compiled by the core over `--policy`.
    fn policy(&self, spec: &PolicySpec) -> Result<Arc<Policy>, CoreError> {
        let policy = Policy::new(spec)?;
        Ok(Arc::new(match &self.pinned {
            Some(floor) => policy.over(Arc::clone(floor)),
            None => policy,
        }))
    }

    fn build(&self, root: Root, policy: Arc<Policy>) -> Workspace {
        // The root enforces the policy in every fs call, find, grep and the index.
        let workspace = Workspace {
            root: Arc::new(root.with_policy(Arc::clone(&policy))),
            host_root: self.host_root.clone(),
            index: WarmIndex::default(),
            policy,
            shell: None,
        };
        if self.index {
            // In the background: searches walk until it is ready.
            workspace.index.start(&workspace.root, None, None);
        }
        workspace
    }

    /// With `--sandbox`, the sandbox every command of `workspace` runs in: the workspace as its
    /// root (at the runtime root, in namespaces mode), held to the workspace's policy, its
    /// refusals and connections reported to `events`. Its error is every command's.
    fn shell(
        &self,
        workspace: &Workspace,
        events: EventSink,
    ) -> Option<Result<Prepared, CoreError>> {
        let shell = self.shell.as_ref()?;
        let raw = RawSandbox {
            root: self.host_root.to_string_lossy().into_owned(),
            runtime_root: Some(workspace.root.runtime().to_string_lossy().into_owned()),
            mode: Some(shell.mode.name().to_string()),
            network: Some(shell.network),
            network_allow: shell.allow.clone(),
            // For the record only: the compiled policy (with its floor) is the one held.
            policy: Some(workspace.policy.spec().clone()),
            ..RawSandbox::default()
        };
        let made = Sandbox::from_raw(raw).and_then(|spec| {
            Prepared::open_with_policy(spec, Arc::clone(&workspace.policy), Some(events))
        });
        if let Err(e) = &made {
            eprintln!("pi-native-ops-server: --sandbox: {e} (every command fails with it)");
        }
        Some(made)
    }

    /// `hello`'s `sandbox`, so a client can require one: null without `--sandbox`, else the mode
    /// commands run in (`auto` resolved; null when this machine can make neither, and then every
    /// command fails with ESANDBOX: none ever runs unconfined) and their network (`false`,
    /// `true`, or the proxy's allow-list).
    pub fn hello_sandbox(&self) -> Option<serde_json::Value> {
        use pi_native_ops_core::exec::sandbox::{support, Mode};
        let shell = self.shell.as_ref()?;
        let support = support();
        let mode = match shell.mode {
            Mode::Auto => support.auto(),
            mode => support.guarantees(mode).map(|_| mode),
        };
        let network = match &shell.allow {
            Some(allow) => serde_json::json!(allow),
            None => serde_json::json!(shell.network),
        };
        Some(serde_json::json!({
            "mode": mode.map(Mode::name),
            "network": network,
        }))
    }

    /// The workspace under `spec`, a client's policy.
    fn workspace(&self, spec: &PolicySpec) -> Result<Workspace, CoreError> {
        if *spec == PolicySpec::from_raw(None, None, None) {
            if let Some(workspace) = self.lock_default().take() {
                return Ok(workspace);
            }
        }
        let policy = self.policy(spec)?;
        if let Some(unused) = self.lock_default().take() {
            // Its index searched under another policy, for no one.
            unused.index.close();
        }
        let root = Root::open(&self.host_root, Some(&self.runtime_root))?.pinned(self.pin_root);
        Ok(self.build(root, policy))
    }
}

/// What a connection's calls serve: the root under the connection's policy.
pub struct Workspace {
    pub root: Arc<Root>,
    /// The root as given on the command line, made absolute.
    pub host_root: PathBuf,
    /// The root's warm search index, once started (`--index`, `indexStart`).
    pub index: WarmIndex,
    /// The policy the root enforces: the client's over `--policy`.
    pub policy: Arc<Policy>,
    /// With `--sandbox`: the sandbox of every command, or why it cannot be made (`Site::shell`).
    pub shell: Option<Result<Prepared, CoreError>>,
}

/// `{"denyRead":…,"denyWrite":…,"protect":…}`, as the client gives a policy.
fn spec_json(spec: &PolicySpec) -> serde_json::Value {
    serde_json::json!({
        "denyRead": spec.deny_read,
        "denyWrite": spec.deny_write,
        "protect": spec.protect,
    })
}

/// Whether the connection goes on after a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// A protocol violation: the connection closes.
    Close,
}

/// How many commands run, to wait for them at exit.
#[derive(Default)]
struct Execs {
    running: Mutex<usize>,
    ended: Condvar,
}

/// Counts one running command until dropped (even by a panic).
struct ExecGuard(Arc<Execs>);

impl ExecGuard {
    fn new(execs: &Arc<Execs>) -> ExecGuard {
        *execs.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        ExecGuard(Arc::clone(execs))
    }
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        let mut running = self
            .0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running -= 1;
        self.0.ended.notify_all();
    }
}

/// What stops every call: shared by the reader and the writer (whichever sees the connection end).
#[derive(Clone)]
struct Stopper {
    running: Registry,
    execs: Arc<Execs>,
}

impl Stopper {
    /// Stops every cancellable call, kills every command tree, and waits until each tree is gone.
    fn stop_all(&self) {
        let running: Vec<Running> = ops::lock(&self.running).values().cloned().collect();
        for call in running {
            call.cancel();
        }
        let mut count = self
            .execs
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *count > 0 {
            count = self
                .execs
                .ended
                .wait(count)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Sends a call's one answer. The call leaves the registry before its answer goes out, so the
/// client may reuse its id as soon as it has the answer. Dropped unsent (the call panicked, a bug),
/// it answers an `Internal` error, so no call waits forever.
struct Answerer {
    id: u64,
    out: Outbox,
    running: Registry,
    done: bool,
    /// The call streams `data` frames, which its answer must follow.
    streams: bool,
    /// The request's share of the input budget, freed with the answer.
    _held: Permit,
}

impl Answerer {
    fn send(self, result: Result<Answer, Failure>) {
        self.send_with(result, None);
    }

    /// Sends the answer, whose payload's bytes `permit` may already hold in the output budget.
    fn send_with(mut self, result: Result<Answer, Failure>, permit: Option<Permit>) {
        self.done = true;
        ops::lock(&self.running).remove(&self.id);
        match result {
            Ok((fields, payload)) => self.out.ok(self.id, fields, payload, permit, self.streams),
            Err(error) => self.out.answer_error(self.id, &error, self.streams),
        }
    }
}

/// The answer of a call that panicked (a bug).
fn failed_inside() -> WireError {
    WireError::plain(
        wire::kind::INTERNAL,
        "pi-native-ops-server failed inside this call (its stderr says why)",
    )
}

impl Drop for Answerer {
    fn drop(&mut self) {
        if !self.done {
            ops::lock(&self.running).remove(&self.id);
            self.out
                .answer_error(self.id, &failed_inside(), self.streams);
        }
    }
}

pub struct Connection {
    site: Arc<Site>,
    /// Fixed by the `policy` call, or by the first other call (the default policy).
    workspace: Option<Arc<Workspace>>,
    out: Outbox,
    lanes: Lanes,
    stopper: Stopper,
    /// What incoming frames of calls not yet answered hold (`INPUT_BUDGET`).
    input: Arc<Budget>,
    events: Arc<Events>,
}

impl Connection {
    pub fn new(site: Arc<Site>, out: Outbox, lanes: Lanes) -> Connection {
        Connection {
            site,
            workspace: None,
            events: Events::new(out.clone()),
            out,
            lanes,
            stopper: Stopper {
                running: Registry::default(),
                execs: Arc::default(),
            },
            input: Budget::new(INPUT_BUDGET),
        }
    }

    /// Waits until the calls in flight hold less than the input budget.
    pub fn wait_for_input_room(&self) {
        self.input.wait_room();
    }

    /// Acts on one frame.
    pub fn handle(&mut self, frame: Frame) -> Flow {
        let held = self
            .input
            .force((frame.header.len() + frame.payload.len()) as u64);
        let message = match wire::parse(&frame.header) {
            Ok(message) => message,
            Err(bad) => {
                self.out
                    .refuse(bad.id, &WireError::protocol(bad.message.clone()));
                return Flow::Continue;
            }
        };
        match message {
            Incoming::Hello { protocol, client } => {
                if protocol == Some(wire::PROTOCOL) {
                    return Flow::Continue;
                }
                let message = format!(
                    "remote protocol mismatch: client pi-native-ops {} speaks protocol {}, server pi-native-ops-server {} speaks protocol {}",
                    // Escaped: the peer's words never make a line of the log.
                    client.map_or_else(
                        || "(unknown version)".to_string(),
                        |c| c.escape_debug().to_string()
                    ),
                    protocol.map_or_else(|| "(none)".to_string(), |p| p.to_string()),
                    wire::SERVER_VERSION,
                    wire::PROTOCOL,
                );
                eprintln!("pi-native-ops-server: {message}");
                self.out.error(None, &WireError::protocol(message));
                Flow::Close
            }
            Incoming::Call { id, op } => {
                match op {
                    Ok(Op::Policy {
                        deny_read,
                        deny_write,
                        protect,
                        events,
                    }) => {
                        let spec = PolicySpec::from_raw(deny_read, deny_write, protect);
                        // Compiled here, on the connection's thread: a panic (a bug) would end
                        // the server, so it answers the call instead. Other calls run on the
                        // pool, where their `Answerer` answers for a panic.
                        let set = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            self.set_policy(id, &spec, events)
                        }));
                        if set.is_err() {
                            self.out.refuse(Some(id), &failed_inside());
                        }
                    }
                    Ok(op) => self.call(id, op, frame.payload, held),
                    Err(message) => self.out.refuse(Some(id), &WireError::protocol(message)),
                }
                Flow::Continue
            }
            Incoming::Credit { id, bytes } => {
                if let Some(Running::Stream(stream)) = ops::lock(&self.stopper.running).get(&id) {
                    stream.credit(bytes);
                }
                Flow::Continue
            }
            Incoming::Cancel { id } => {
                if let Some(running) = ops::lock(&self.stopper.running).get(&id) {
                    running.cancel();
                }
                Flow::Continue
            }
        }
    }

    /// Fixes the connection's policy, answering the `policy` call `id`: its rules' error (the
    /// core's, as a local face gives it) leaves it unfixed; once fixed, it never changes.
    fn set_policy(&mut self, id: u64, spec: &PolicySpec, events: bool) {
        if self.workspace.is_some() {
            let why = "the policy is set once, by the first call of a connection";
            return self.out.refuse(Some(id), &WireError::protocol(why));
        }
        match self.site.workspace(spec) {
            Ok(workspace) => {
                if events {
                    self.events.want();
                }
                let workspace = self.fix(workspace);
                let pinned = workspace
                    .policy
                    .floor()
                    .map(|floor| spec_json(floor.spec()));
                let mut answer = serde_json::Map::new();
                answer.insert("pinned".into(), pinned.unwrap_or_default());
                self.out.ok(id, answer, Vec::new(), None, false);
            }
            Err(e) => self.out.refuse(Some(id), &WireError::from(e)),
        }
    }

    /// The connection's workspace, under the default policy unless a `policy` call fixed one.
    fn workspace(&mut self) -> Result<Arc<Workspace>, CoreError> {
        if let Some(workspace) = &self.workspace {
            return Ok(Arc::clone(workspace));
        }
        let workspace = self
            .site
            .workspace(&PolicySpec::from_raw(None, None, None))?;
        Ok(self.fix(workspace))
    }

    /// Fixes the connection's workspace, with its sandbox (one per connection, made now).
    fn fix(&mut self, mut workspace: Workspace) -> Arc<Workspace> {
        workspace.shell = self.site.shell(&workspace, self.events.sink());
        let workspace = Arc::new(workspace);
        self.workspace = Some(Arc::clone(&workspace));
        workspace
    }

    /// Registers a call; false (answered, and the call that owns the id untouched) when its id is
    /// already in flight or too many calls are.
    fn register(&self, id: u64, running: Running) -> bool {
        let mut registry = ops::lock(&self.stopper.running);
        let refusal = if registry.contains_key(&id) {
            WireError::protocol(format!("call id {id} is already in flight"))
        } else if registry.len() >= MAX_IN_FLIGHT {
            WireError::plain(
                wire::kind::BUSY,
                format!("too many calls in flight: the server takes {MAX_IN_FLIGHT} at once"),
            )
        } else {
            registry.insert(id, running);
            return true;
        };
        drop(registry);
        self.out.refuse(Some(id), &refusal);
        false
    }

    fn call(&mut self, id: u64, op: Op, payload: Vec<u8>, held: Permit) {
        let workspace = match self.workspace() {
            Ok(workspace) => workspace,
            Err(e) => return self.out.refuse(Some(id), &WireError::from(e)),
        };
        let running = match &op {
            Op::Exec(_) | Op::ReadStream { .. } => Running::Stream(Arc::default()),
            Op::Grep(_) => Running::Grep(Cancel::default()),
            _ => Running::Plain,
        };
        if !self.register(id, running.clone()) {
            return;
        }
        let answerer = Answerer {
            id,
            out: self.out.clone(),
            running: Arc::clone(&self.stopper.running),
            done: false,
            streams: matches!(running, Running::Stream(_)),
            _held: held,
        };
        match (op, running) {
            (Op::Exec(req), Running::Stream(stream)) => {
                let out = self.out.clone();
                let guard = ExecGuard::new(&self.stopper.execs);
                self.lanes.stream.spawn_blocking(move || {
                    let _running = guard;
                    let site = ExecSite {
                        host_root: &workspace.host_root,
                        runtime_root: workspace.root.runtime(),
                        shell: workspace.shell.as_ref(),
                    };
                    answerer.send(ops::exec(&site, req, &out, id, &stream));
                });
            }
            (Op::ReadStream { path }, Running::Stream(stream)) => {
                let out = self.out.clone();
                self.lanes.stream.spawn_blocking(move || {
                    answerer.send(ops::read_stream(&workspace.root, &path, &out, id, &stream));
                });
            }
            (Op::Grep(req), Running::Grep(cancel)) => {
                self.lanes.search.spawn_blocking(move || {
                    let index = workspace.index.search();
                    answerer.send(ops::grep(&workspace.root, index, req, &cancel));
                });
            }
            (op @ Op::IndexReady, _) => {
                self.lanes.search.spawn_blocking(move || {
                    answerer.send(workspace.index.call(&workspace.root, op));
                });
            }
            (op @ (Op::IndexStart { .. } | Op::IndexStats | Op::IndexClose), _) => {
                self.lanes.quick.spawn_blocking(move || {
                    answerer.send(workspace.index.call(&workspace.root, op));
                });
            }
            (Op::ReadFile { path }, _) => {
                let out = self.out.clone();
                self.lanes.read.spawn_blocking(move || {
                    // The file's bytes are held in the output budget before they are read, so
                    // answers a client does not take stay within it.
                    let size = workspace
                        .root
                        .stat(Path::new(&path))
                        .ok()
                        .filter(|s| s.is_file)
                        .map_or(0, |s| s.size.min(u64::from(MAX_PAYLOAD)));
                    let permit = out.reserve(size + SMALL_FRAME as u64);
                    let result = ops::simple(&workspace.root, None, Op::ReadFile { path }, payload);
                    answerer.send_with(result, Some(permit));
                });
            }
            (op @ Op::DetectImageMimeType { .. }, _) => {
                self.lanes.read.spawn_blocking(move || {
                    answerer.send(ops::simple(&workspace.root, None, op, payload));
                });
            }
            (op @ Op::Glob { .. }, _) => {
                self.lanes.search.spawn_blocking(move || {
                    let index = workspace.index.search();
                    answerer.send(ops::simple(&workspace.root, index, op, payload));
                });
            }
            (op, _) => {
                self.lanes.quick.spawn_blocking(move || {
                    let index = workspace.index.search();
                    answerer.send(ops::simple(&workspace.root, index, op, payload));
                });
            }
        }
    }

    /// The connection has ended: stops every call, kills every command tree, and waits until
    /// each tree is gone.
    pub fn shutdown(&self) {
        self.stopper.stop_all();
    }
}

/// Serves one connection until `input` ends; returns the process's exit code (0 when the input
/// ended, 1 after a protocol violation). If `output` breaks first (the client no longer reads),
/// every command tree is killed and the process exits 0 from the writer thread.
pub fn serve<R, W>(site: Arc<Site>, mut input: R, output: W, lanes: Lanes) -> i32
where
    R: Read,
    W: Output + Send + 'static,
{
    let (out, queue) = Outbox::new();
    out.hello(
        &site.runtime_root.to_string_lossy(),
        &wire::platform(),
        site.hello_sandbox(),
    );
    let mut conn = Connection::new(site, out.clone(), lanes);
    let stopper = conn.stopper.clone();
    let writer = std::thread::Builder::new()
        .name("pi-native-ops-server-writer".into())
        .spawn(move || {
            if let Err(e) = write_frames(queue, output) {
                eprintln!("pi-native-ops-server: output error: {e}; closing the connection");
                stopper.stop_all();
                std::process::exit(0);
            }
        });
    if let Err(e) = writer {
        eprintln!("pi-native-ops-server: cannot start the writer: {e}");
        return 1;
    }
    let code = loop {
        conn.wait_for_input_room();
        match read_frame(&mut input) {
            Ok(frame) => {
                if conn.handle(frame) == Flow::Close {
                    break 1;
                }
            }
            Err(ReadError::Closed) => break 0,
            Err(ReadError::BadLength(why)) => {
                eprintln!("pi-native-ops-server: {why}; closing the connection");
                out.error(None, &WireError::protocol(why));
                break 1;
            }
            Err(e) => {
                eprintln!("pi-native-ops-server: {e}");
                break 0;
            }
        }
    };
    conn.shutdown();
    let _ = out.flushed().recv_timeout(FINAL_FLUSH);
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode_head;
    use serde_json::{json, Value};
    use std::sync::mpsc::Receiver;

    use crate::ops::Stream;
    use crate::outbox::{Out, Output};
    use std::os::fd::AsFd;

    fn frame(header: Value, payload: &[u8]) -> Frame {
        Frame {
            header: serde_json::to_vec(&header).unwrap(),
            payload: payload.to_vec(),
        }
    }

    /// The next frame the connection sends: its header and payload.
    fn next(queue: &mut Receiver<Out>) -> (Value, Vec<u8>) {
        loop {
            match queue.recv().expect("a frame") {
                Out::Frame { head, payload, .. } => {
                    let header: Value = serde_json::from_slice(&head[8..]).unwrap();
                    let lengths = encode_head(&head[8..], payload.len());
                    assert_eq!(lengths[..8], head[..8]);
                    return (header, payload);
                }
                Out::Piped { .. } | Out::Flushed(_) => {}
            }
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        conn: Connection,
        queue: Receiver<Out>,
        _pools: Pools,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello\nworld\n").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.rs"), "fn main() {}\n").unwrap();
        let root = Root::open(dir.path(), Some(std::path::Path::new("/workspace"))).unwrap();
        let site = Site::new(root, dir.path().to_path_buf(), None, false, None).unwrap();
        let (out, queue) = Outbox::new();
        let pools = Pools::new().unwrap();
        Fixture {
            _dir: dir,
            conn: Connection::new(site, out, pools.lanes()),
            queue,
            _pools: pools,
        }
    }

    fn fixture_pinned(pinned: PolicySpec) -> Fixture {
        let mut f = fixture();
        let root = Root::open(f._dir.path(), Some(Path::new("/workspace"))).unwrap();
        let pinned = Policy::new(&pinned).unwrap();
        let site = Site::new(root, f._dir.path().to_path_buf(), Some(pinned), false, None).unwrap();
        let (out, queue) = Outbox::new();
        f.conn = Connection::new(site, out, f._pools.lanes());
        f.queue = queue;
        f
    }

    fn call(f: &mut Fixture, header: Value, payload: &[u8]) -> (Value, Vec<u8>) {
        assert_eq!(f.conn.handle(frame(header, payload)), Flow::Continue);
        next(&mut f.queue)
    }

    #[test]
    fn ops_answer_in_runtime_form_and_refuse_outside_paths() {
        let mut f = fixture();
        let (ok, bytes) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"readFile","path":"/workspace/a.txt"}),
            b"",
        );
        assert_eq!(ok, json!({"t":"ok","id":1}));
        assert_eq!(bytes, b"hello\nworld\n");

        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":2,"op":"readFile","path":"/workspace/../etc/passwd"}),
            b"",
        );
        assert_eq!(err["error"]["kind"], "Outside");
        assert_eq!(err["id"], 2);

        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":3,"op":"stat","path":"/workspace/nope"}),
            b"",
        );
        assert_eq!(
            err["error"],
            json!({"kind":"Os","message":"ENOENT: no such file or directory, stat '/workspace/nope'","code":"ENOENT","errno":-2,"syscall":"stat","path":"/workspace/nope"})
        );

        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":4,"op":"writeFile","path":"/workspace/sub/c.txt"}),
            b"\0bytes\xff",
        );
        assert_eq!(ok, json!({"t":"ok","id":4}));
        let (_, bytes) = call(
            &mut f,
            json!({"t":"call","id":5,"op":"readFile","path":"/workspace/sub/c.txt"}),
            b"",
        );
        assert_eq!(bytes, b"\0bytes\xff");

        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":6,"op":"glob","pattern":"*.rs","cwd":"/workspace","ignore":[],"limit":null}),
            b"",
        );
        assert_eq!(ok["paths"], json!(["/workspace/sub/b.rs"]));

        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":7,"op":"exists","path":"/workspace/missing"}),
            b"",
        );
        assert_eq!(ok["exists"], false);
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":8,"op":"exists","path":"/etc"}),
            b"",
        );
        assert_eq!(
            err["error"]["message"],
            "path \"/etc\" is outside workspace"
        );

        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":9,"op":"grep","pattern":"wor","path":"/workspace","displayName":"workspace","limit":100,"context":0,"ignoreCase":false,"literal":false,"glob":null,"storeCap":null}),
            b"",
        );
        assert_eq!(
            ok["lines"],
            json!([{"path":"a.txt","lineNumber":2,"text":"world","isMatch":true}])
        );
        assert_eq!(ok["matchCount"], 1);
    }

    #[test]
    fn the_policy_is_set_by_the_first_call_and_bad_rules_fail_as_locally() {
        let mut f = fixture();
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":["a{b"]}),
            b"",
        );
        let local = Policy::new(&PolicySpec::from_raw(Some(vec!["a{b".into()]), None, None))
            .unwrap_err()
            .to_string();
        assert_eq!(err["error"], json!({"kind":"InvalidGlob","message":local}));
        assert!(local.starts_with("policy.denyRead: invalid rule \"a{b\""));
        // A rule past the regex size bound (globset would panic compiling it): the core's error,
        // and the connection goes on.
        let huge = format!("{}/x", "*".repeat(100_000));
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":[huge.clone()]}),
            b"",
        );
        let local = Policy::new(&PolicySpec::from_raw(Some(vec![huge]), None, None))
            .unwrap_err()
            .to_string();
        assert_eq!(err["error"], json!({"kind":"InvalidGlob","message":local}));
        assert!(local.ends_with("Compiled regex exceeds size limit of 10485760 bytes."));
        // The failed call fixed nothing: the next one sets it.
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":2,"op":"policy","denyRead":[".env"],"denyWrite":["locked/"],"protect":false}),
            b"",
        );
        assert_eq!(ok, json!({"t":"ok","id":2,"pinned":null}));
        let policy = Arc::clone(&f.conn.workspace().unwrap().policy);
        assert_eq!(
            policy.spec(),
            &PolicySpec::from_raw(
                Some(vec![".env".into()]),
                Some(vec!["locked/".into()]),
                Some(false)
            )
        );
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":3,"op":"policy","protect":false}),
            b"",
        );
        assert_eq!(
            err["error"],
            json!({"kind":"Protocol","message":"the policy is set once, by the first call of a connection"})
        );
        // After any other call, the default policy is fixed: the protected defaults apply.
        let mut f = fixture();
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"stat","path":"/workspace"}),
            b"",
        );
        assert_eq!(ok["isDirectory"], true);
        let workspace = f.conn.workspace().unwrap();
        assert!(workspace
            .policy
            .write_denial(Path::new(".git/hooks/pre-commit"), false)
            .is_some());
        let (err, _) = call(&mut f, json!({"t":"call","id":2,"op":"policy"}), b"");
        assert_eq!(err["error"]["kind"], "Protocol");
    }

    #[test]
    fn a_pinned_policy_is_beneath_the_clients_which_only_adds_to_it() {
        let pinned = PolicySpec::from_raw(Some(vec!["secrets/".into()]), None, Some(true));
        let mut f = fixture_pinned(pinned);
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":["!secrets/a.txt",".env"],"protect":false}),
            b"",
        );
        assert_eq!(
            ok["pinned"],
            json!({"denyRead":["secrets/"],"denyWrite":[],"protect":true})
        );
        let policy = Arc::clone(&f.conn.workspace().unwrap().policy);
        let read = |rel: &str| policy.read_denial(Path::new(rel), false).map(|d| d.rule);
        assert_eq!(read("secrets/a.txt").as_deref(), Some("secrets/"));
        assert_eq!(read("x/.env").as_deref(), Some(".env"));
        assert!(policy
            .write_denial(Path::new(".git/config"), false)
            .is_some());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_index_warms_from_start_under_the_default_policy_and_starts_again_under_a_clients_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
        let site = || {
            let root = Root::open(dir.path(), None).unwrap();
            Site::new(root, dir.path().to_path_buf(), None, true, None).unwrap()
        };
        let prestarted = |site: &Site| {
            let default = site.lock_default();
            let workspace = default.as_ref().unwrap();
            assert!(workspace.index.search().is_some());
            Arc::clone(&workspace.root)
        };
        let warm = site();
        let before = prestarted(&warm);
        let kept = warm
            .workspace(&PolicySpec::from_raw(None, None, None))
            .unwrap();
        assert!(Arc::ptr_eq(&kept.root, &before) && warm.lock_default().is_none());
        assert_eq!(kept.index.search().unwrap().wait_ready().files, 1);
        let own = site();
        let before = prestarted(&own);
        let spec = PolicySpec::from_raw(Some(vec!["*.pem".into()]), None, None);
        let set = own.workspace(&spec).unwrap();
        assert!(own.lock_default().is_none() && !Arc::ptr_eq(&set.root, &before));
        assert_eq!(set.policy.spec(), &spec);
        assert_eq!(set.index.search().unwrap().wait_ready().files, 1);
        // A bad rule takes nothing: the warm workspace stays for the next call.
        let again = site();
        assert!(again
            .workspace(&PolicySpec::from_raw(Some(vec!["a{b".into()]), None, None))
            .is_err());
        assert!(again.lock_default().is_some());
    }

    #[test]
    fn events_go_once_asked_and_beyond_their_budget_are_dropped_and_counted() {
        use pi_native_ops_core::policy::{EventTarget, PolicyEvent};
        let event = |n: usize| PolicyEvent {
            tool: "bash",
            command: Some(format!("cat secret{n}")),
            target: EventTarget::Read(format!("/workspace/secret{n}")),
            rule: Some("secret*".into()),
            allowed: false,
            time_ms: 1.0,
        };
        let mut f = fixture();
        let sink = f.conn.events.sink();
        sink(event(0));
        assert!(
            f.queue.try_recv().is_err(),
            "an event nobody asked for was sent"
        );
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","events":true}),
            b"",
        );
        assert_eq!(ok["t"], "ok");
        // A client that does not read: the events queued stay within their budget.
        let sent = 10_000;
        for n in 0..sent {
            sink(event(n));
        }
        let mut queued = Vec::new();
        while let Ok(out) = f.queue.try_recv() {
            queued.push(out);
        }
        let held: usize = queued
            .iter()
            .map(|out| match out {
                Out::Frame { head, payload, .. } => head.len() + payload.len(),
                _ => 0,
            })
            .sum();
        assert!(
            held as u64 <= crate::events::EVENT_BUDGET,
            "{held} bytes queued"
        );
        let kept = queued.len();
        assert!(kept > 100 && kept < sent, "{kept} of {sent} events queued");
        let Out::Frame { head, .. } = &queued[0] else {
            panic!("not a frame")
        };
        let first: Value = serde_json::from_slice(&head[8..]).unwrap();
        assert_eq!(
            first,
            json!({"t":"event","tool":"bash","access":"read","path":"/workspace/secret0","rule":"secret*","allowed":false,"time":1.0,"command":"cat secret0"})
        );
        // Written (dropped here), their room returns: the count goes first, then the event.
        drop(queued);
        sink(event(sent));
        let (notice, _) = next(&mut f.queue);
        assert_eq!(notice, json!({"t":"eventsDropped","count": sent - kept}));
        let (last, _) = next(&mut f.queue);
        assert_eq!(last["path"], format!("/workspace/secret{sent}"));
    }

    #[test]
    fn the_index_starts_once_answers_its_stats_and_closes() {
        let mut f = fixture();
        let (err, _) = call(&mut f, json!({"t":"call","id":1,"op":"indexStats"}), b"");
        assert_eq!(
            err["error"],
            json!({"kind":"NoIndex","message":"no index: send indexStart first (or start the server with --index)"})
        );
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":2,"op":"indexStart","maxWatches":null,"maxFileBytes":null}),
            b"",
        );
        assert_eq!(ok["t"], "ok");
        let (ready, _) = call(&mut f, json!({"t":"call","id":3,"op":"indexReady"}), b"");
        let keys: Vec<&str> = ready
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "buildMs",
                "bytesIndexed",
                "directories",
                "dirtyFiles",
                "files",
                "id",
                "lastRefresh",
                "memoryBytes",
                "reason",
                "state",
                "t",
                "unfilteredFiles",
                "watches"
            ]
        );
        assert_eq!(
            (&ready["state"], &ready["files"], &ready["directories"]),
            (&json!("ready"), &json!(2), &json!(2))
        );
        // A second start keeps the running index (a file size limit of 0 would have emptied it).
        let (again, _) = call(
            &mut f,
            json!({"t":"call","id":4,"op":"indexStart","maxFileBytes":0}),
            b"",
        );
        assert_eq!(again["bytesIndexed"], ready["bytesIndexed"]);
        // grep reads only the candidate file once the index is ready (`searched` counts reads).
        let workspace = f.conn.workspace().unwrap();
        let grep_reads = |index| {
            let cancel = Cancel::new();
            let request: pi_native_ops_core::grep::RawQuery = serde_json::from_value(json!({
                "pattern": "world", "path": "/workspace", "displayName": "workspace", "limit": 100
            }))
            .unwrap();
            let (answer, _) = ops::grep(&workspace.root, index, request, &cancel).unwrap();
            assert_eq!(answer["matchCount"], 1);
            cancel.files_searched()
        };
        assert_eq!(grep_reads(None), 2);
        assert_eq!(grep_reads(workspace.index.search()), 1);
        // The connection hands it its index too.
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":8,"op":"grep","pattern":"world","path":"/workspace","displayName":"workspace","limit":100}),
            b"",
        );
        assert_eq!(
            (&ok["matchCount"], &ok["filesSearched"]),
            (&json!(1), &json!(1))
        );
        let (ok, _) = call(&mut f, json!({"t":"call","id":5,"op":"indexClose"}), b"");
        assert_eq!(ok, json!({"t":"ok","id":5}));
        let (stats, _) = call(&mut f, json!({"t":"call","id":6,"op":"indexStats"}), b"");
        assert_eq!(stats["state"], "closed");
        // Searches walk once it is closed.
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":7,"op":"glob","pattern":"*.rs","cwd":"/workspace","ignore":[],"limit":null}),
            b"",
        );
        assert_eq!(ok["paths"], json!(["/workspace/sub/b.rs"]));
    }

    #[test]
    fn bad_messages_get_error_replies_and_the_connection_goes_on() {
        let mut f = fixture();
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":11,"op":"chmod","path":"/"}),
            b"",
        );
        assert_eq!(err["id"], 11);
        assert_eq!(err["error"]["kind"], "Protocol");
        let (err, _) = call(&mut f, json!({"t":"call","id":12,"op":"readFile"}), b"");
        assert_eq!(err["id"], 12);
        assert!(err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `path`"));
        let raw = Frame {
            header: b"not json".to_vec(),
            payload: Vec::new(),
        };
        assert_eq!(f.conn.handle(raw), Flow::Continue);
        let (err, _) = next(&mut f.queue);
        assert!(err.get("id").is_none());
        assert_eq!(err["error"]["kind"], "Protocol");
        // Still serving.
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":13,"op":"stat","path":"/workspace/sub"}),
            b"",
        );
        assert_eq!(ok["isDirectory"], true);
        // A hello of another protocol closes the connection, naming both versions.
        assert_eq!(
            f.conn.handle(frame(
                json!({"t":"hello","protocol":2,"client":"0.2.0"}),
                b""
            )),
            Flow::Close
        );
        let (err, _) = next(&mut f.queue);
        assert_eq!(
            err["error"]["message"],
            format!("remote protocol mismatch: client pi-native-ops 0.2.0 speaks protocol 2, server pi-native-ops-server {} speaks protocol 1", wire::SERVER_VERSION)
        );
    }

    #[test]
    fn the_reader_waits_while_unanswered_input_fills_its_budget() {
        let mut f = fixture();
        // One writeFile whose payload is the whole input budget: until it is answered, the
        // reader takes in nothing more.
        let payload = vec![b'w'; INPUT_BUDGET as usize];
        assert_eq!(
            f.conn.handle(frame(
                json!({"t":"call","id":1,"op":"writeFile","path":"/workspace/w.bin"}),
                &payload
            )),
            Flow::Continue
        );
        f.conn.wait_for_input_room();
        // Room again only once the call has answered (its bytes are freed with the answer).
        let Ok(Out::Frame { head, .. }) = f.queue.try_recv() else {
            panic!("the reader went on before the call answered");
        };
        let ok: Value = serde_json::from_slice(&head[8..]).unwrap();
        assert_eq!(ok, json!({"t":"ok","id":1}));
        assert_eq!(f.conn.input.used(), 0);
    }

    #[test]
    fn calls_beyond_the_limit_in_flight_are_refused_as_busy() {
        let mut f = fixture();
        {
            let mut registry = ops::lock(&f.conn.stopper.running);
            for id in 0..MAX_IN_FLIGHT as u64 {
                registry.insert(1_000_000 + id, Running::Plain);
            }
        }
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"stat","path":"/workspace"}),
            b"",
        );
        assert_eq!(
            err["error"],
            json!({"kind":"Busy","message":"too many calls in flight: the server takes 16384 at once"})
        );
        ops::lock(&f.conn.stopper.running).remove(&1_000_000);
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"stat","path":"/workspace"}),
            b"",
        );
        assert_eq!(ok["isDirectory"], true);
    }

    #[test]
    fn a_call_that_never_answers_answers_an_internal_error() {
        let f = fixture();
        let registry = Arc::clone(&f.conn.stopper.running);
        let stream = Arc::new(Stream::default());
        ops::lock(&registry).insert(9, Running::Stream(stream));
        let answerer = Answerer {
            id: 9,
            out: f.conn.out.clone(),
            running: Arc::clone(&registry),
            done: false,
            streams: true,
            _held: Permit::none(),
        };
        // As when the call's thread unwinds: the answer is queued by then.
        drop(answerer);
        let Ok(Out::Frame { head, .. }) = f.queue.try_recv() else {
            panic!("no answer");
        };
        let err: Value = serde_json::from_slice(&head[8..]).unwrap();
        assert_eq!(
            (err["id"].as_u64(), err["error"]["kind"].as_str()),
            (Some(9), Some("Internal"))
        );
        assert!(ops::lock(&registry).is_empty());
    }

    /// A fixture whose commands run in `--sandbox`'s `mode`, with `.env` and `.git/hooks` in it.
    fn fixture_sandboxed(mode: pi_native_ops_core::exec::sandbox::Mode) -> Fixture {
        // The sandbox helper is this package's binary, which cargo builds beside the test binary
        // (`target/<profile>/`); the server itself uses its own executable.
        let exe = std::env::current_exe().unwrap();
        let built = exe
            .parent()
            .and_then(Path::parent)
            .unwrap()
            .join("pi-native-ops-server");
        pi_native_ops_core::exec::helper::set_path(Some(&built)).unwrap();
        let mut f = fixture();
        std::fs::write(f._dir.path().join(".env"), "KEY=secret\n").unwrap();
        std::fs::create_dir_all(f._dir.path().join(".git/hooks")).unwrap();
        let host = f._dir.path().to_path_buf();
        // Landlock mode sees the host's paths: its runtime root is the root itself.
        let runtime = match mode {
            pi_native_ops_core::exec::sandbox::Mode::Landlock => host.clone(),
            _ => PathBuf::from("/workspace"),
        };
        let root = Root::open(&host, Some(&runtime)).unwrap();
        let shell = crate::ShellSandbox {
            mode,
            network: false,
            allow: None,
        };
        let site = Site::new(root, host, None, false, Some(shell)).unwrap();
        let (out, queue) = Outbox::new();
        f.conn = Connection::new(site, out, f._pools.lanes());
        f.queue = queue;
        f
    }

    /// Runs `command` as call `id` in `cwd`: its output, its answer, and the event frames sent
    /// meanwhile.
    fn exec_collect(
        f: &mut Fixture,
        id: u64,
        command: &str,
        cwd: &str,
    ) -> (Vec<u8>, Value, Vec<Value>) {
        f.conn.handle(frame(
            json!({"t":"call","id":id,"op":"exec","command":command,"cwd":cwd}),
            b"",
        ));
        let (mut output, mut events) = (Vec::new(), Vec::new());
        loop {
            let out = f.queue.recv().expect("a frame");
            let Some((header, payload)) = move_piped(out, &mut output) else {
                continue;
            };
            match header["t"].as_str() {
                Some("event") => events.push(header),
                Some("data") => {
                    output.extend_from_slice(&payload);
                    let credit = json!({"t":"credit","id":id,"bytes":payload.len()});
                    f.conn.handle(frame(credit, b""));
                }
                _ if header["id"] == json!(id) => return (output, header, events),
                _ => {}
            }
        }
    }

    fn sandbox_holds_the_connections_policy(mode: pi_native_ops_core::exec::sandbox::Mode) {
        let mut f = fixture_sandboxed(mode);
        let cwd = f.conn.site.runtime_root.display().to_string();
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":[".env"],"events":true}),
            b"",
        );
        assert_eq!(ok["t"], "ok", "{ok}");
        let command = "cat .env; echo x > .git/hooks/pre-commit; echo done";
        let (output, answer, events) = exec_collect(&mut f, 2, command, &cwd);
        let output = String::from_utf8_lossy(&output);
        assert_eq!(answer["t"], "ok", "{answer}");
        assert!(!output.contains("secret"), "{output}");
        assert!(output.ends_with("done\n"), "{output}");
        assert!(!f._dir.path().join(".git/hooks/pre-commit").exists());
        let seen: Vec<_> = events
            .iter()
            .map(|e| {
                (
                    e["tool"].clone(),
                    e["access"].clone(),
                    e["path"].clone(),
                    e["command"].clone(),
                )
            })
            .collect();
        let at = |rel: &str| json!(format!("{cwd}/{rel}"));
        assert_eq!(
            seen,
            [
                (json!("bash"), json!("read"), at(".env"), json!(command)),
                (
                    json!("bash"),
                    json!("write"),
                    at(".git/hooks/pre-commit"),
                    json!(command)
                ),
            ]
        );
    }

    #[test]
    fn with_sandbox_namespaces_the_shell_holds_the_connections_policy_and_reports_it() {
        sandbox_holds_the_connections_policy(pi_native_ops_core::exec::sandbox::Mode::Namespaces);
    }

    #[test]
    fn with_sandbox_landlock_the_shell_holds_the_connections_policy_and_reports_it() {
        sandbox_holds_the_connections_policy(pi_native_ops_core::exec::sandbox::Mode::Landlock);
    }

    #[test]
    fn the_sandbox_holds_the_operators_floor_beneath_the_clients_policy() {
        use pi_native_ops_core::exec::sandbox::Mode;
        let mut f = fixture_sandboxed(Mode::Namespaces);
        let root = Root::open(f._dir.path(), Some(Path::new("/workspace"))).unwrap();
        let floor = Policy::new(&PolicySpec::from_raw(Some(vec![".env".into()]), None, None));
        let shell = crate::ShellSandbox {
            mode: Mode::Namespaces,
            network: false,
            allow: None,
        };
        let host = f._dir.path().to_path_buf();
        let site = Site::new(root, host, Some(floor.unwrap()), false, Some(shell)).unwrap();
        let (out, queue) = Outbox::new();
        f.conn = Connection::new(site, out, f._pools.lanes());
        f.queue = queue;
        call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":["!.env"],"protect":false,"events":true}),
            b"",
        );
        let (output, answer, events) = exec_collect(&mut f, 2, "cat .env", "/workspace");
        assert_ne!(answer["exitCode"], 0, "{answer}");
        assert!(!String::from_utf8_lossy(&output).contains("secret"));
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["rule"], ".env");
    }

    #[test]
    fn without_sandbox_the_shell_is_not_held_to_the_policy() {
        let mut f = fixture();
        std::fs::write(f._dir.path().join(".env"), "KEY=secret\n").unwrap();
        call(
            &mut f,
            json!({"t":"call","id":1,"op":"policy","denyRead":[".env"],"events":true}),
            b"",
        );
        let (output, answer, events) = exec_collect(&mut f, 2, "cat .env", "/workspace");
        assert_eq!(answer["exitCode"], 0, "{answer}");
        assert_eq!(output, b"KEY=secret\n");
        assert!(events.is_empty());
    }

    #[test]
    fn a_sandbox_that_cannot_be_made_fails_every_command_which_never_runs() {
        // Landlock mode cannot move the workspace to the runtime root /workspace.
        let mut f = fixture_sandboxed(pi_native_ops_core::exec::sandbox::Mode::Landlock);
        let root = Root::open(f._dir.path(), Some(Path::new("/workspace"))).unwrap();
        let shell = crate::ShellSandbox {
            mode: pi_native_ops_core::exec::sandbox::Mode::Landlock,
            network: false,
            allow: None,
        };
        let site = Site::new(root, f._dir.path().to_path_buf(), None, false, Some(shell)).unwrap();
        let (out, queue) = Outbox::new();
        f.conn = Connection::new(site, out, f._pools.lanes());
        f.queue = queue;
        for id in [1, 2] {
            let (err, _) = call(
                &mut f,
                json!({"t":"call","id":id,"op":"exec","command":"touch ran","cwd":"/workspace"}),
                b"",
            );
            assert_eq!(err["t"], "error", "{err}");
            assert_eq!(err["error"]["code"], "ESANDBOX", "{err}");
        }
        assert!(!f._dir.path().join("ran").exists());
        // The file tools go on.
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":3,"op":"exists","path":"/workspace/a.txt"}),
            b"",
        );
        assert_eq!(ok["t"], "ok", "{ok}");
    }

    #[test]
    fn exec_failures_read_as_locally() {
        let mut f = fixture();
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"exec","command":"true","cwd":"/workspace","shell":"/"}),
            b"",
        );
        assert_eq!(
            err["error"],
            json!({"kind":"Spawn","message":"spawn / EACCES","code":"EACCES","errno":-13,"syscall":"spawn /","path":"/"})
        );
        let (err, _) = call(
            &mut f,
            json!({"t":"call","id":2,"op":"exec","command":"true","cwd":"/workspace","shell":"/no/sh"}),
            b"",
        );
        assert_eq!(
            err["error"],
            json!({"kind":"ShellNotFound","message":"Custom shell path not found: /no/sh"})
        );
    }

    #[test]
    fn a_cancelled_grep_is_aborted_with_its_progress() {
        let mut f = fixture();
        let cancel = Cancel::new();
        cancel.cancel();
        let request: pi_native_ops_core::grep::RawQuery = serde_json::from_value(json!({
            "pattern": "x", "path": "/workspace", "displayName": "workspace", "limit": 100
        }))
        .unwrap();
        let root = &f.conn.workspace().unwrap().root;
        let err = ops::grep(root, None, request, &cancel).unwrap_err();
        assert_eq!(
            serde_json::to_value(&*err).unwrap(),
            json!({"kind":"Aborted","message":"Operation aborted","filesSearched":0})
        );
    }

    #[test]
    fn nul_bytes_in_arguments_are_errors_not_crashes() {
        let mut f = fixture();
        for (id, header) in [
            (
                1,
                json!({"t":"call","id":1,"op":"readFile","path":"/workspace/a\0b"}),
            ),
            (
                2,
                json!({"t":"call","id":2,"op":"stat","path":"/workspace/\0"}),
            ),
            (
                3,
                json!({"t":"call","id":3,"op":"glob","pattern":"a\0","cwd":"/workspace","limit":null}),
            ),
            (
                4,
                json!({"t":"call","id":4,"op":"exec","command":"echo \0","cwd":"/workspace"}),
            ),
            (
                5,
                json!({"t":"call","id":5,"op":"exec","command":"true","cwd":"/workspace","env":["A=\0"]}),
            ),
            (
                6,
                json!({"t":"call","id":6,"op":"writeFile","path":"/workspace/\0x"}),
            ),
        ] {
            let (answer, _) = call(&mut f, header, b"");
            assert_eq!(answer["id"], id);
            assert!(answer["t"] == "error" || answer["t"] == "ok", "{answer}");
        }
    }

    #[test]
    fn streams_wait_for_credit_and_stop_on_cancel() {
        let mut f = fixture();
        let big = vec![b'x'; (ops::WINDOW as usize) + 3 * ops::MAX_DATA];
        let (ok, _) = call(
            &mut f,
            json!({"t":"call","id":1,"op":"writeFile","path":"/workspace/big"}),
            &big,
        );
        assert_eq!(ok["t"], "ok");
        f.conn.handle(frame(
            json!({"t":"call","id":2,"op":"readStream","path":"/workspace/big"}),
            b"",
        ));
        let mut got = 0;
        while got < ops::WINDOW as usize {
            let (data, chunk) = next(&mut f.queue);
            assert_eq!(data, json!({"t":"data","id":2}));
            assert!(chunk.len() <= ops::MAX_DATA);
            got += chunk.len();
        }
        assert_eq!(got, ops::WINDOW as usize);
        // The window is full: the reader waits for credit, and nothing more has come.
        let stream = match ops::lock(&f.conn.stopper.running).get(&2) {
            Some(Running::Stream(stream)) => Arc::clone(stream),
            _ => panic!("the stream ended without credit"),
        };
        while !stream.is_waiting() {
            assert!(
                ops::lock(&f.conn.stopper.running).contains_key(&2),
                "the stream ran past its window"
            );
            std::thread::yield_now();
        }
        assert!(f.queue.try_recv().is_err());
        f.conn.handle(frame(
            json!({"t":"credit","id":2,"bytes":ops::MAX_DATA}),
            b"",
        ));
        let (data, chunk) = next(&mut f.queue);
        assert_eq!(
            (data["t"].as_str(), chunk.len()),
            (Some("data"), ops::MAX_DATA)
        );
        f.conn.handle(frame(json!({"t":"cancel","id":2}), b""));
        let (err, _) = next(&mut f.queue);
        assert_eq!(err["error"]["kind"], "Aborted");
        assert_eq!(err["id"], 2);
    }

    /// Plays the writer for a command's output passed on from its pipe: moves each piece (the
    /// plain way, into a Vec) and answers it. Returns the bytes moved, or the first other frame.
    fn move_piped(out: Out, moved: &mut Vec<u8>) -> Option<(Value, Vec<u8>)> {
        match out {
            Out::Piped {
                head,
                from,
                len,
                done,
            } => {
                let header: Value = serde_json::from_slice(&head[8..]).unwrap();
                assert_eq!(header["t"], "data");
                assert_eq!(head[..8], encode_head(&head[8..], len)[..8]);
                assert!(len <= ops::MAX_DATA);
                let _ = done.send(moved.write_from_pipe(from.as_fd(), len));
                None
            }
            Out::Frame { head, payload, .. } => {
                Some((serde_json::from_slice(&head[8..]).unwrap(), payload))
            }
            Out::Flushed(_) => None,
        }
    }

    #[test]
    fn exec_output_waits_for_credit_in_its_pipe_and_stops_on_cancel() {
        let mut f = fixture();
        f.conn.handle(frame(
            json!({"t":"call","id":1,"op":"exec","command":"head -c 100000000 /dev/zero","cwd":"/workspace"}),
            b"",
        ));
        let stream = loop {
            if let Some(Running::Stream(stream)) = ops::lock(&f.conn.stopper.running).get(&1) {
                break Arc::clone(stream);
            }
            std::thread::yield_now();
        };
        let mut moved = Vec::new();
        // Uncredited, the output stops within the window and waits in the command's pipe.
        while !stream.is_waiting() {
            match f.queue.try_recv() {
                Ok(out) => assert!(move_piped(out, &mut moved).is_none(), "the exec ended"),
                Err(_) => std::thread::yield_now(),
            }
            assert!(moved.len() as u64 <= ops::WINDOW, "ran past the window");
        }
        assert!(moved.len() as u64 > ops::WINDOW - ops::MAX_DATA as u64);
        let before = moved.len();
        f.conn
            .handle(frame(json!({"t":"credit","id":1,"bytes":before}), b""));
        while moved.len() == before {
            let out = f.queue.recv().unwrap();
            assert!(move_piped(out, &mut moved).is_none(), "the exec ended");
        }
        assert!(moved.iter().all(|&b| b == 0));
        f.conn.handle(frame(json!({"t":"cancel","id":1}), b""));
        let (ok, _) = loop {
            if let Some(answer) = move_piped(f.queue.recv().unwrap(), &mut moved) {
                break answer;
            }
        };
        assert_eq!(
            (ok["t"].as_str(), ok["killed"].as_bool()),
            (Some("ok"), Some(true))
        );
    }

    #[test]
    fn a_cancelled_exec_ends_while_the_writer_still_holds_its_piece() {
        let mut f = fixture();
        f.conn.handle(frame(
            json!({"t":"call","id":1,"op":"exec","command":"head -c 100000000 /dev/zero","cwd":"/workspace"}),
            b"",
        ));
        // A writer stuck on a client that no longer reads: the first piece is never answered.
        let stuck = loop {
            match f.queue.recv().unwrap() {
                out @ Out::Piped { .. } => break out,
                Out::Frame { head, .. } => panic!("{}", String::from_utf8_lossy(&head[8..])),
                Out::Flushed(_) => {}
            }
        };
        f.conn.handle(frame(json!({"t":"cancel","id":1}), b""));
        let (ok, _) = next(&mut f.queue);
        assert_eq!(
            (ok["t"].as_str(), ok["killed"].as_bool()),
            (Some("ok"), Some(true))
        );
        // The piece is still whole in the writer's own descriptor of the pipe.
        let mut moved = Vec::new();
        assert!(move_piped(stuck, &mut moved).is_none());
        assert!(!moved.is_empty() && moved.iter().all(|&b| b == 0));
    }
}
