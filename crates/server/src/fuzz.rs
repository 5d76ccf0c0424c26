//! Randomized tests that run in `cargo test` for a bounded time (no nightly, no cargo-fuzz): the
//! frame decoder over mutated and random byte streams, and every request's arguments decoded and
//! run with random values. Nothing may panic, hang, or answer a call other than once.
//!
//! The seed is printed; `PI_NATIVE_OPS_FUZZ_SEED` replays one, `PI_NATIVE_OPS_FUZZ_MS` runs longer.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use pi_native_ops_core::root::Root;

use crate::conn::{Connection, Flow, Pools, Site};
use crate::frame::{encode_head, read_frame, Frame, ReadError, MAX_HEADER};
use crate::outbox::{Out, Outbox};
use crate::wire;

/// How long each randomized test runs by default: a few seconds of CI for both.
const DEFAULT_BUDGET: Duration = Duration::from_millis(1500);
/// A call not answered within this long is a hang (far above any answer on a busy machine).
const ANSWER_DEADLINE: Duration = Duration::from_secs(60);

/// xorshift64*: small, seedable, good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn seeded() -> (Rng, u64) {
        let seed = std::env::var("PI_NATIVE_OPS_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64);
                t | 1
            });
        (Rng(seed.max(1)), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn budget() -> Duration {
    std::env::var("PI_NATIVE_OPS_FUZZ_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(DEFAULT_BUDGET, Duration::from_millis)
}

fn frame_bytes(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = encode_head(header, payload.len());
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn the_frame_decoder_takes_any_bytes() {
    let (mut rng, seed) = Rng::seeded();
    eprintln!("frame decoder fuzz: seed {seed}");
    let valid = [
        frame_bytes(br#"{"t":"call","id":1,"op":"stat","path":"/w"}"#, b""),
        frame_bytes(br#"{"t":"credit","id":2,"bytes":5}"#, b""),
        frame_bytes(b"{}", &[0xff; 300]),
    ];
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < budget() {
        rounds += 1;
        let mut bytes: Vec<u8> = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let piece: &Vec<u8> = rng.pick(&valid);
            bytes.extend_from_slice(piece);
        }
        match rng.below(4) {
            // Flipped bytes anywhere, lengths included.
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                }
            }
            // Cut anywhere.
            1 => bytes.truncate(rng.below(bytes.len() + 1)),
            // Random lengths, some near the limits, and a few bytes.
            2 => {
                let lengths = [
                    0,
                    1,
                    2,
                    MAX_HEADER - 1,
                    MAX_HEADER,
                    MAX_HEADER + 1,
                    u32::MAX,
                ];
                let h = if rng.chance(50) {
                    *rng.pick(&lengths)
                } else {
                    rng.next() as u32
                };
                let p = if rng.chance(50) {
                    rng.below(64) as u32
                } else {
                    rng.next() as u32
                };
                bytes = h
                    .to_be_bytes()
                    .iter()
                    .chain(&p.to_be_bytes())
                    .copied()
                    .collect();
                bytes.extend((0..rng.below(256)).map(|_| rng.next() as u8));
            }
            // Pure noise.
            _ => bytes = (0..rng.below(512)).map(|_| rng.next() as u8).collect(),
        }
        let mut input = &bytes[..];
        loop {
            match read_frame(&mut input) {
                Ok(frame) => {
                    assert!(!frame.header.is_empty() && frame.header.len() <= MAX_HEADER as usize);
                    // Whatever the header says, parsing it answers, never panics.
                    let _ = wire::parse(&frame.header);
                }
                Err(ReadError::Closed | ReadError::Truncated | ReadError::BadLength(_)) => break,
                Err(ReadError::Io(e)) => panic!("reading a slice failed: {e}"),
            }
        }
    }
    eprintln!("frame decoder fuzz: {rounds} rounds");
}

/// The ops and their arguments, with values of the right type a client might send. Exec is decoded
/// only (it would run random commands); `readStream` reads small files that fit its window.
const OPS: &[(&str, &[(&str, Kind)])] = &[
    ("readFile", &[("path", Kind::Path)]),
    ("readStream", &[("path", Kind::Path)]),
    ("access", &[("path", Kind::Path), ("mode", Kind::Mode)]),
    ("detectImageMimeType", &[("path", Kind::Path)]),
    ("writeFile", &[("path", Kind::Path)]),
    ("mkdir", &[("path", Kind::Path)]),
    ("exists", &[("path", Kind::Path)]),
    ("stat", &[("path", Kind::Path)]),
    ("readdir", &[("path", Kind::Path)]),
    ("findExists", &[("path", Kind::Path)]),
    (
        "glob",
        &[
            ("pattern", Kind::Pattern),
            ("cwd", Kind::Path),
            ("ignore", Kind::Patterns),
            ("limit", Kind::Number),
        ],
    ),
    (
        "grep",
        &[
            ("pattern", Kind::Pattern),
            ("path", Kind::Path),
            ("displayName", Kind::Text),
            ("ignoreCase", Kind::Bool),
            ("literal", Kind::Bool),
            ("glob", Kind::Pattern),
            ("context", Kind::Number),
            ("limit", Kind::Number),
            ("storeCap", Kind::Number),
        ],
    ),
    (
        "exec",
        &[
            ("command", Kind::Text),
            ("cwd", Kind::Path),
            ("env", Kind::Patterns),
            ("shell", Kind::Path),
        ],
    ),
    (
        "indexStart",
        &[("maxWatches", Kind::Number), ("maxFileBytes", Kind::Number)],
    ),
    (
        "policy",
        &[
            ("denyRead", Kind::Patterns),
            ("denyWrite", Kind::Patterns),
            ("protect", Kind::Bool),
            ("events", Kind::Bool),
        ],
    ),
    ("indexReady", &[]),
    ("indexStats", &[]),
    ("chmod", &[("path", Kind::Path)]),
];

#[derive(Clone, Copy)]
enum Kind {
    Path,
    Mode,
    Pattern,
    Patterns,
    Number,
    Bool,
    Text,
}

fn any_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => json!(rng.next() as i64),
        3 => json!(*rng.pick(&[0.5, -1.0, 1e308, -0.0, 4294967296.5, f64::MIN_POSITIVE])),
        4 => json!(text(rng)),
        5 => json!(u64::MAX),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| any_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(4) {
                map.insert(text(rng), any_value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

fn text(rng: &mut Rng) -> String {
    let pieces = [
        "",
        "a",
        "\0",
        "é",
        "..",
        "/",
        "*",
        "**",
        "[",
        "\\",
        "{a,b}",
        "(",
        "?",
        "\n",
        "\u{fffd}",
        "needle",
        "x".repeat(300).leak(),
    ];
    (0..rng.below(5)).map(|_| *rng.pick(&pieces)).collect()
}

fn typed_value(rng: &mut Rng, kind: Kind) -> Value {
    match kind {
        Kind::Path => json!(rng.pick(&[
            "/workspace",
            "/workspace/a.txt",
            "/workspace/sub",
            "/workspace/sub/b.rs",
            "/workspace/new/dir",
            "/workspace/../etc/passwd",
            "/etc",
            "/workspace/link",
            "/workspace/a.txt/x",
            "relative",
            "",
            "/workspace/\0",
            "/workspace/./sub/../a.txt",
        ])),
        Kind::Mode => json!(rng.pick(&["r", "rw", "", "x"])),
        Kind::Pattern => {
            if rng.chance(50) {
                json!(rng.pick(&["*.rs", "**/*", "a", "(", "[", "wor", "\\", "{", "sub/**"]))
            } else {
                json!(text(rng))
            }
        }
        Kind::Patterns => json!((0..rng.below(3)).map(|_| text(rng)).collect::<Vec<_>>()),
        Kind::Number => json!(*rng.pick(&[0.0, 1.0, 5.5, 100.0, -3.0, 1e308, 1e19])),
        Kind::Bool => json!(rng.chance(50)),
        Kind::Text => json!(text(rng)),
    }
}

/// A call header with random arguments: mostly well typed, sometimes missing, mistyped or extra.
fn random_call(rng: &mut Rng, id: u64) -> (Value, &'static str) {
    let (op, args) = *rng.pick(OPS);
    let mut map = Map::new();
    map.insert("t".into(), json!("call"));
    map.insert("id".into(), json!(id));
    if !rng.chance(3) {
        map.insert("op".into(), json!(op));
    }
    for (name, kind) in args {
        if rng.chance(5) {
            continue;
        }
        let value = if rng.chance(15) {
            any_value(rng, 0)
        } else {
            typed_value(rng, *kind)
        };
        map.insert((*name).into(), value);
    }
    if rng.chance(5) {
        map.insert(text(rng), any_value(rng, 0));
    }
    (Value::Object(map), op)
}

fn fixture() -> (tempfile::TempDir, Connection, Receiver<Out>, Pools) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\nworld\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b.rs"), "fn main() {}\n").unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("link")).unwrap();
    let root = Root::open(dir.path(), Some(std::path::Path::new("/workspace"))).unwrap();
    let site = Site::new(root, dir.path().to_path_buf(), None, false, None).unwrap();
    let (out, queue) = Outbox::new();
    let pools = Pools::new().unwrap();
    let conn = Connection::new(site, out, pools.lanes());
    (dir, conn, queue, pools)
}

#[test]
fn every_request_decodes_and_answers_once_whatever_its_arguments() {
    let (mut rng, seed) = Rng::seeded();
    eprintln!("request fuzz: seed {seed}");
    let (_dir, mut conn, queue, _pools) = fixture();
    let start = Instant::now();
    let mut id = 0u64;
    let mut kinds: HashMap<String, usize> = HashMap::new();
    while start.elapsed() < budget() {
        // A round of calls in flight at once, then every answer.
        let mut waiting = std::collections::HashSet::new();
        for _ in 0..1 + rng.below(32) {
            id += 1;
            let (header, op) = random_call(&mut rng, id);
            if op == "exec" {
                // Decoded only: a random command is not run.
                let _ = wire::parse(&serde_json::to_vec(&header).unwrap());
                continue;
            }
            let payload: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
            let frame = Frame {
                header: serde_json::to_vec(&header).unwrap(),
                payload,
            };
            assert_eq!(conn.handle(frame), Flow::Continue);
            waiting.insert(id);
            if rng.chance(10) {
                let cancel = json!({"t":"cancel","id":id.saturating_sub(rng.below(3) as u64)});
                let frame = Frame {
                    header: serde_json::to_vec(&cancel).unwrap(),
                    payload: Vec::new(),
                };
                assert_eq!(conn.handle(frame), Flow::Continue);
            }
        }
        while !waiting.is_empty() {
            let out = match queue.recv_timeout(ANSWER_DEADLINE) {
                Ok(out) => out,
                Err(RecvTimeoutError::Timeout) => panic!("calls {waiting:?} never answered"),
                Err(RecvTimeoutError::Disconnected) => unreachable!(),
            };
            let Out::Frame { head, payload, .. } = out else {
                continue;
            };
            let header: Value = serde_json::from_slice(&head[8..]).unwrap();
            let id = header["id"].as_u64().expect("every answer names its call");
            match header["t"].as_str() {
                Some("data") => {
                    let credit = json!({"t":"credit","id":id,"bytes":payload.len()});
                    conn.handle(Frame {
                        header: serde_json::to_vec(&credit).unwrap(),
                        payload: Vec::new(),
                    });
                }
                Some("ok") => assert!(waiting.remove(&id), "a second answer for {id}"),
                Some("error") => {
                    assert!(waiting.remove(&id), "a second answer for {id}: {header}");
                    let kind = header["error"]["kind"].as_str().unwrap().to_string();
                    assert_ne!(kind, "Internal", "{header}");
                    *kinds.entry(kind).or_default() += 1;
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }
    eprintln!("request fuzz: {id} calls; errors by kind {kinds:?}");
}

/// Sends a frame of `header` (no payload) to the connection.
fn send(conn: &mut Connection, header: Value) {
    let frame = Frame {
        header: serde_json::to_vec(&header).unwrap(),
        payload: Vec::new(),
    };
    assert_eq!(conn.handle(frame), Flow::Continue);
}

/// Writers opened and closed on a FIFO until no reader waits on it: each blocked read ends.
#[cfg(target_os = "linux")]
fn release_fifo(path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening for writing fails (ENXIO) once no reader is left.
    while std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .is_ok()
    {}
}

/// A stress test: rounds of calls that block (reads of a FIFO no one writes, commands that run
/// until cancelled, searches, streams) mixed with short ones, each round's short calls answered
/// whatever blocks; at the end every call answers exactly once.
#[cfg(target_os = "linux")]
#[test]
fn blocking_and_short_calls_mixed_all_answer() {
    let (mut rng, seed) = Rng::seeded();
    eprintln!("stress: seed {seed}");
    let (dir, mut conn, queue, _pools) = fixture();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let start = Instant::now();
    let mut id = 0u64;
    // Calls not yet answered: whether each is short (must answer within its round).
    let mut open: HashMap<u64, &str> = HashMap::new();
    let mut execs = Vec::new();
    let mut rounds = 0;
    while start.elapsed() < budget() {
        rounds += 1;
        let mut short = std::collections::HashSet::new();
        for _ in 0..1 + rng.below(64) {
            id += 1;
            let (call, kind) = match rng.below(8) {
                0 => (
                    json!({"t":"call","id":id,"op":"readFile","path":"/workspace/fifo"}),
                    "fifo",
                ),
                1 => (
                    json!({"t":"call","id":id,"op":"exec","command":"sleep 100","cwd":"/workspace"}),
                    "exec",
                ),
                2 => (
                    json!({"t":"call","id":id,"op":"grep","pattern":"o","path":"/workspace","displayName":"w","limit":100}),
                    "grep",
                ),
                3 => (
                    json!({"t":"call","id":id,"op":"readStream","path":"/workspace/a.txt"}),
                    "stream",
                ),
                4 => (
                    json!({"t":"call","id":id,"op":"exists","path":"/workspace/a.txt"}),
                    "short",
                ),
                5 => (
                    json!({"t":"call","id":id,"op":"readdir","path":"/workspace"}),
                    "short",
                ),
                _ => (
                    json!({"t":"call","id":id,"op":"stat","path":"/workspace/sub"}),
                    "short",
                ),
            };
            send(&mut conn, call);
            open.insert(id, kind);
            match kind {
                "short" => {
                    short.insert(id);
                }
                "exec" => execs.push(id),
                _ => {}
            }
            if !execs.is_empty() && rng.chance(20) {
                let victim = execs.swap_remove(rng.below(execs.len()));
                send(&mut conn, json!({"t":"cancel","id":victim}));
            }
        }
        // Every short call of the round answers, whatever blocks meanwhile.
        while !short.is_empty() {
            let out = queue
                .recv_timeout(ANSWER_DEADLINE)
                .unwrap_or_else(|_| panic!("short calls {short:?} never answered"));
            take(&mut conn, out, &mut open, &mut short);
        }
    }
    // The end: every command cancelled, every FIFO read released; every call answers once.
    for victim in execs.drain(..) {
        send(&mut conn, json!({"t":"cancel","id":victim}));
    }
    let mut none = std::collections::HashSet::new();
    while !open.is_empty() {
        release_fifo(&fifo);
        match queue.recv_timeout(Duration::from_millis(100)) {
            Ok(out) => take(&mut conn, out, &mut open, &mut none),
            Err(RecvTimeoutError::Timeout) => {
                assert!(
                    start.elapsed() < budget() + ANSWER_DEADLINE,
                    "{open:?} never answered"
                )
            }
            Err(RecvTimeoutError::Disconnected) => unreachable!(),
        }
    }
    eprintln!("stress: {id} calls in {rounds} rounds");
}

/// Acts on one frame from the connection: credits data, checks an answer is the only one.
#[cfg(target_os = "linux")]
fn take(
    conn: &mut Connection,
    out: Out,
    open: &mut HashMap<u64, &str>,
    short: &mut std::collections::HashSet<u64>,
) {
    let Out::Frame { head, payload, .. } = out else {
        return;
    };
    let header: Value = serde_json::from_slice(&head[8..]).unwrap();
    let id = header["id"].as_u64().expect("every answer names its call");
    if header["t"] == "data" {
        send(conn, json!({"t":"credit","id":id,"bytes":payload.len()}));
        return;
    }
    let kind = open
        .remove(&id)
        .unwrap_or_else(|| panic!("a second answer: {header}"));
    short.remove(&id);
    match kind {
        "short" | "stream" => assert_eq!(header["t"], "ok", "{header}"),
        // A FIFO is refused at once, as the core refuses every read of a special file.
        "fifo" => assert_eq!(header["error"]["code"], "ESPIPE", "{header}"),
        "exec" => assert_eq!(header["killed"], true, "{header}"),
        _ => assert_ne!(header["error"]["kind"], "Internal", "{header}"),
    }
}
