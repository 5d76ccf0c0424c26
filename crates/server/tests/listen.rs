//! The built server with `--listen` (docs/protocol.md, "Over a WebSocket"): the upgrade's
//! refusals, one session at a time, resume after cuts, the grace period and the idle timeout,
//! driven by a client of the session layer written here. Loopback only.
#![cfg(unix)]

mod common;
use common::noise;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

const BIN: &str = env!("CARGO_BIN_EXE_pi-native-ops-server");
const TOKEN: &str = "test-token_0123456789.abc~";
/// A server that stops answering fails its test after this long instead of hanging the run.
const WATCHDOG: Duration = Duration::from_secs(120);
/// The unprivileged user the root-only tests run the server as.
const NOBODY: u32 = 65534;

/// The binary under test: this build's, or another given by `PI_NATIVE_OPS_E2E_SERVER` (another
/// architecture's under an emulator, or an older build to watch a test fail).
fn bin() -> String {
    std::env::var("PI_NATIVE_OPS_E2E_SERVER").unwrap_or_else(|_| BIN.to_string())
}

struct Listening {
    child: Arc<Mutex<Child>>,
    addr: String,
    /// Where a server run as `nobody` was copied to (see `start_as_nobody`).
    _staged: Option<tempfile::TempDir>,
}

impl Listening {
    fn start(root: &Path, args: &[&str]) -> Listening {
        Self::start_with(root, args, |_| {})
    }

    /// `start`, with the command changed by `configure` first (its user, stderr...).
    fn start_with(root: &Path, args: &[&str], configure: impl FnOnce(&mut Command)) -> Listening {
        Self::start_program(Path::new(&bin()), root, args, configure)
    }

    /// `start` as the `nobody` user, from a copy of the binary that user can reach: the checkout
    /// (and so the build) may be private to root (0700).
    fn start_as_nobody(
        root: &Path,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Listening {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let staged = tempfile::tempdir().unwrap();
        let public = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(staged.path(), public.clone()).unwrap();
        let copy = staged.path().join("pi-native-ops-server");
        std::fs::copy(bin(), &copy).unwrap();
        std::fs::set_permissions(&copy, public).unwrap();
        let mut server = Self::start_program(&copy, root, args, |cmd| {
            cmd.uid(NOBODY).gid(NOBODY);
            configure(cmd);
        });
        server._staged = Some(staged);
        server
    }

    fn start_program(
        program: &Path,
        root: &Path,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Listening {
        let mut cmd = Command::new(program);
        cmd.arg("--root")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("PI_NATIVE_OPS_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        configure(&mut cmd);
        let mut child = cmd.spawn().expect("the server starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .trim_end()
            .to_string();
        // Nothing else comes on stdout.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            assert_eq!(rest, "", "stdout carries only the listening line");
        });
        let child = Arc::new(Mutex::new(child));
        let watched = Arc::downgrade(&child);
        std::thread::spawn(move || {
            std::thread::sleep(WATCHDOG);
            if let Some(child) = watched.upgrade() {
                let _ = child.lock().unwrap().kill();
            }
        });
        Listening {
            child,
            addr,
            _staged: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Waits for the server to exit on its own.
    fn exit_code(&self) -> Option<i32> {
        loop {
            if let Some(status) = self.child.lock().unwrap().try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    dir
}

fn frame(header: &Value, payload: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(header).unwrap();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(header.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(payload);
    bytes
}

/// The next whole frame at the start of `bytes`, and its length.
fn parse_frame(bytes: &[u8]) -> Option<((Value, Vec<u8>), usize)> {
    if bytes.len() < 8 {
        return None;
    }
    let h = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let p = u32::from_be_bytes(bytes[4..8].try_into().unwrap()) as usize;
    if bytes.len() < 8 + h + p {
        return None;
    }
    let header = serde_json::from_slice(&bytes[8..8 + h]).unwrap();
    Some(((header, bytes[8 + h..8 + h + p].to_vec()), 8 + h + p))
}

/// An HTTP upgrade written by hand; returns the status code the server answers (0 for none).
fn raw_upgrade(addr: &str, path: &str, extra_headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    if answer.starts_with("HTTP/1.1 101") {
        return 101;
    }
    // A refusal says nothing else: no body.
    assert!(answer.ends_with("\r\n\r\n"), "{answer:?}");
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// How the client presents the token.
#[derive(Clone, Copy)]
enum Auth {
    Bearer,
    Subprotocol,
}

/// Upgrades a TCP connection: the WebSocket, or the HTTP status of the refusal.
fn upgrade(addr: &str, query: &str, auth: Auth) -> Result<WebSocket<TcpStream>, u16> {
    let mut request = format!("ws://{addr}/{query}")
        .into_client_request()
        .unwrap();
    let headers = request.headers_mut();
    match auth {
        Auth::Bearer => {
            headers.insert("Authorization", format!("Bearer {TOKEN}").parse().unwrap());
            headers.insert(
                "Sec-WebSocket-Protocol",
                "pi-native-ops.v1".parse().unwrap(),
            );
        }
        Auth::Subprotocol => {
            let offered = format!("pi-native-ops.v1, pi-native-ops.token.{TOKEN}");
            headers.insert("Sec-WebSocket-Protocol", offered.parse().unwrap());
        }
    }
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    match tungstenite::client(request, tcp) {
        Ok((ws, response)) => {
            // The server selects the protocol, never the token entry.
            assert_eq!(
                response.headers()["Sec-WebSocket-Protocol"],
                "pi-native-ops.v1"
            );
            Ok(ws)
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("upgrade failed: {e}"),
    }
}

/// Resets the connection (RST, no close frame): whatever either side had in flight on it is lost.
fn reset(tcp: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads one linger struct from a live local.
    unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// A client of the session layer, with the protocol's frames on top. It keeps every byte it sent
/// (a test's streams are small) so a resume can resend from wherever the server says.
struct Client {
    addr: String,
    id: Option<[u8; 16]>,
    ws: Option<WebSocket<TcpStream>>,
    sent: Vec<u8>,
    got: Vec<u8>,
    parsed: usize,
    /// Cuts the connection at random points when set (xorshift state), one in `cut_one_in`.
    rng: Option<u64>,
    cut_one_in: u64,
    cuts: usize,
    resumes: Vec<Duration>,
}

impl Client {
    fn connect(addr: &str, auth: Auth) -> Client {
        let mut client = Client {
            addr: addr.to_string(),
            id: None,
            ws: None,
            sent: Vec::new(),
            got: Vec::new(),
            parsed: 0,
            rng: None,
            cut_one_in: 1,
            cuts: 0,
            resumes: Vec::new(),
        };
        client.dial(auth);
        let (hello, _) = client.next_frame();
        assert_eq!(hello["t"], "hello");
        client.send(&frame(
            &json!({"t":"hello","protocol":1,"client":"0.1.0"}),
            b"",
        ));
        client
    }

    fn ws(&mut self) -> &mut WebSocket<TcpStream> {
        self.ws.as_mut().expect("connected")
    }

    /// Opens a connection of the session (a new one the first time) and exchanges HELLOs; the
    /// server's tells where to resend from.
    fn dial(&mut self, auth: Auth) {
        let query = match self.id {
            Some(id) => format!(
                "?session={}",
                id.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            None => String::new(),
        };
        let mut ws = upgrade(&self.addr, &query, auth).expect("the upgrade is accepted");
        let mut hello = vec![1u8];
        hello.extend_from_slice(&(self.got.len() as u64).to_le_bytes());
        ws.send(Message::Binary(hello.into())).unwrap();
        let Message::Binary(theirs) = ws.read().unwrap() else {
            panic!("the server's first message is not binary");
        };
        assert_eq!((theirs.len(), theirs[0]), (25, 1), "the server's HELLO");
        let id: [u8; 16] = theirs[1..17].try_into().unwrap();
        if let Some(known) = self.id {
            assert_eq!(id, known, "the same session");
        }
        self.id = Some(id);
        let received = u64::from_le_bytes(theirs[17..25].try_into().unwrap()) as usize;
        assert!(received <= self.sent.len());
        for chunk in self.sent[received..].chunks(1 << 20) {
            let mut data = vec![2u8];
            data.extend_from_slice(chunk);
            ws.send(Message::Binary(data.into())).unwrap();
        }
        self.ws = Some(ws);
    }

    fn chance(&mut self) -> bool {
        let Some(state) = &mut self.rng else {
            return false;
        };
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state % self.cut_one_in == 0
    }

    /// Cuts the connection (sometimes in the middle of a WebSocket frame) and resumes at once.
    fn cut_and_resume(&mut self) {
        let mut ws = self.ws.take().unwrap();
        reset(ws.get_ref());
        if self.cuts % 2 == 1 {
            // Half a binary frame's header: the server is left inside a frame.
            let _ = ws.get_mut().write_all(&[0x82, 0xfe, 0x10]);
        }
        drop(ws);
        self.cuts += 1;
        let start = Instant::now();
        self.dial(Auth::Bearer);
        self.resumes.push(start.elapsed());
    }

    fn send(&mut self, bytes: &[u8]) {
        self.sent.extend_from_slice(bytes);
        // A DATA message carries 1 MiB at most.
        for chunk in bytes.chunks(1 << 20) {
            let mut data = vec![2u8];
            data.extend_from_slice(chunk);
            if self.chance() {
                // Part of the message reaches the socket, then the connection goes (the resume
                // resends everything the server did not get, this chunk's rest included).
                let _ = self.ws().get_mut().write_all(&data[..data.len() / 2]);
                return self.cut_and_resume();
            }
            self.ws().send(Message::Binary(data.into())).unwrap();
        }
    }

    fn call(&mut self, header: Value, payload: &[u8]) {
        self.send(&frame(&header, payload));
    }

    fn next_frame(&mut self) -> (Value, Vec<u8>) {
        loop {
            if let Some((frame, len)) = parse_frame(&self.got[self.parsed..]) {
                self.parsed += len;
                return frame;
            }
            if self.chance() {
                self.cut_and_resume();
                continue;
            }
            match self.ws().read().expect("a message") {
                Message::Binary(bytes) if bytes[0] == 2 => {
                    self.got.extend_from_slice(&bytes[1..]);
                    let mut ack = vec![3u8];
                    ack.extend_from_slice(&(self.got.len() as u64).to_le_bytes());
                    self.ws().send(Message::Binary(ack.into())).unwrap();
                }
                Message::Binary(bytes) if bytes[0] == 3 && bytes.len() == 9 => {}
                other => panic!("unexpected message {other:?}"),
            }
        }
    }

    /// Ends the session: a normal close.
    fn close(mut self) {
        let mut ws = self.ws.take().unwrap();
        ws.close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "done".into(),
        }))
        .unwrap();
        while ws.read().is_ok() {}
    }
}

/// A workload of streaming and one-shot calls in both directions; each call's frames, in order
/// (data payloads and the answer, header and payload).
fn workload(client: &mut Client, cwd: &str, upload: &[u8]) -> Vec<(u64, Vec<u8>, Value, Vec<u8>)> {
    client.call(
        json!({"t":"call","id":1,"op":"exec","command":"seq 1 1200000","cwd":cwd,"env":null,"shell":null}),
        b"",
    );
    client.call(
        json!({"t":"call","id":2,"op":"grep","pattern":"needle [0-9]+","path":format!("{cwd}/s"),"displayName":"w","limit":100000,"context":1,"ignoreCase":false,"literal":false,"glob":null,"storeCap":null}),
        b"",
    );
    client.call(
        json!({"t":"call","id":3,"op":"writeFile","path":format!("{cwd}/up.bin")}),
        upload,
    );
    let mut results: Vec<(u64, Vec<u8>, Value, Vec<u8>)> = (1..=4)
        .map(|id| (id, Vec::new(), Value::Null, Vec::new()))
        .collect();
    let mut open = 4;
    while open > 0 {
        let (header, payload) = client.next_frame();
        let id = header["id"].as_u64().expect("an id");
        let slot = &mut results[id as usize - 1];
        if header["t"] == "data" {
            client.call(json!({"t":"credit","id":id,"bytes":payload.len()}), b"");
            slot.1.extend_from_slice(&payload);
            continue;
        }
        slot.2 = header;
        slot.3 = payload;
        open -= 1;
        if id == 3 {
            client.call(
                json!({"t":"call","id":4,"op":"readFile","path":format!("{cwd}/up.bin")}),
                b"",
            );
        }
    }
    results
}

fn searchable(dir: &Path) {
    let dir = dir.join("s");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..200 {
        let text: String = (0..50)
            .map(|l| {
                if (i + l) % 7 == 0 {
                    format!("line {l} needle {i}\n")
                } else {
                    format!("line {l} hay\n")
                }
            })
            .collect();
        std::fs::write(dir.join(format!("f{i:03}.txt")), text).unwrap();
    }
}

#[test]
fn calls_in_flight_survive_cuts_byte_for_byte() {
    let dir = workspace();
    searchable(dir.path());
    let cwd = dir.path().to_string_lossy().into_owned();
    let upload = noise((3 << 20) + 77, 0x1234_5678_9abc_def1);

    let server = Listening::start(dir.path(), &[]);
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    // For scale (printed, not asserted): sequential round trips of a small call.
    let start = Instant::now();
    for id in 0..300 {
        client.call(
            json!({"t":"call","id":100 + id,"op":"stat","path":format!("{cwd}/a.txt")}),
            b"",
        );
        assert_eq!(client.next_frame().0["isFile"], true);
    }
    eprintln!(
        "stat round trip over the WebSocket: {:?}",
        start.elapsed() / 300
    );
    let uncut = workload(&mut client, &cwd, &upload);
    client.close();
    assert_eq!(server.exit_code(), Some(0));
    assert_eq!(uncut[0].2["exitCode"], 0);
    let seq: String = (1..=1_200_000).map(|n| format!("{n}\n")).collect();
    assert!(uncut[0].1 == seq.as_bytes(), "the exec's output");
    assert_eq!(uncut[1].2["matchCount"], 1429);
    assert!(uncut[3].3 == upload, "the upload read back");

    let server = Listening::start(dir.path(), &[]);
    let mut client = Client::connect(&server.addr, Auth::Subprotocol);
    client.rng = Some(0x9e37_79b9_7f4a_7c15);
    client.cut_one_in = 3;
    // Rounds of the same calls (ids are free again once answered), cut everywhere.
    for round in 0..4 {
        let cut = workload(&mut client, &cwd, &upload);
        let cuts = client.cuts;
        for (a, b) in uncut.iter().zip(&cut) {
            assert!(a.2 == b.2, "call {}'s answer differs (round {round})", a.0);
            assert!(a.1 == b.1, "call {}'s data differs after {cuts} cuts", a.0);
            assert!(
                a.3 == b.3,
                "call {}'s payload differs after {cuts} cuts",
                a.0
            );
        }
    }
    let (cuts, mut resumes) = (client.cuts, client.resumes.clone());
    client.close();
    assert_eq!(server.exit_code(), Some(0));
    assert!(cuts >= 30, "only {cuts} cuts");
    resumes.sort();
    eprintln!(
        "{cuts} cuts; resume (cut to HELLOs exchanged) median {:?}, max {:?}",
        resumes[resumes.len() / 2],
        resumes[resumes.len() - 1]
    );
}

#[test]
fn a_wrong_or_missing_token_gets_401_and_a_good_client_still_connects() {
    let dir = workspace();
    let server = Listening::start(dir.path(), &[]);
    let addr = &server.addr;
    assert_eq!(raw_upgrade(addr, "/", ""), 401);
    assert_eq!(
        raw_upgrade(addr, "/", "Authorization: Bearer nope\r\n"),
        401
    );
    assert_eq!(
        raw_upgrade(addr, "/", &format!("Authorization: Bearer {TOKEN}x\r\n")),
        401
    );
    assert_eq!(
        raw_upgrade(
            addr,
            "/",
            &format!("Authorization: Basic {TOKEN}\r\nSec-WebSocket-Protocol: pi-native-ops.v1, pi-native-ops.token.{}\r\n", &TOKEN[1..])
        ),
        401
    );
    // A resume with a wrong token is refused before the session is even looked up.
    assert_eq!(
        raw_upgrade(addr, "/?session=00000000000000000000000000000000", ""),
        401
    );
    let mut client = Client::connect(addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"readFile","path":format!("{}/a.txt", dir.path().display())}),
        b"",
    );
    let (ok, bytes) = client.next_frame();
    assert_eq!(
        (ok["t"].as_str(), bytes.as_slice()),
        (Some("ok"), &b"alpha\n"[..])
    );
    client.close();
    assert_eq!(server.exit_code(), Some(0));
}

#[test]
fn one_session_at_a_time() {
    let dir = workspace();
    let server = Listening::start(dir.path(), &[]);
    let addr = &server.addr;
    let mut client = Client::connect(addr, Auth::Bearer);
    assert_eq!(upgrade(addr, "", Auth::Bearer).err(), Some(409));
    assert_eq!(upgrade(addr, "", Auth::Subprotocol).err(), Some(409));
    assert_eq!(
        upgrade(
            addr,
            "?session=0123456789abcdef0123456789abcdef",
            Auth::Bearer
        )
        .err(),
        Some(404)
    );
    assert_eq!(
        upgrade(addr, "?session=nothex", Auth::Bearer).err(),
        Some(404)
    );
    // The same session's id takes over from a socket that still looks alive.
    let old = client.ws.take().unwrap();
    client.dial(Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"stat","path":format!("{}/a.txt", dir.path().display())}),
        b"",
    );
    let (ok, _) = client.next_frame();
    assert_eq!(ok["isFile"], true);
    // The server closed the replaced one.
    let mut old = old;
    loop {
        match old.read() {
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    client.close();
    assert_eq!(server.exit_code(), Some(0));
}

#[test]
fn garbage_and_stalled_upgrades_are_refused_and_harm_nothing() {
    let dir = workspace();
    let server = Listening::start(dir.path(), &[]);
    let addr = &server.addr;
    // Never says anything; sends half a request and stops; sends garbage.
    let silent = TcpStream::connect(addr).unwrap();
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgr")
        .unwrap();
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage
        .write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = garbage.read_to_end(&mut answer);
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A plain GET without an upgrade gets a 400 too, once it shows the token (the token is
    // checked first: without it, 401).
    for (auth, status) in [
        (format!("Authorization: Bearer {TOKEN}\r\n"), "400"),
        (String::new(), "401"),
    ] {
        let mut plain = TcpStream::connect(addr).unwrap();
        write!(plain, "GET / HTTP/1.1\r\nHost: x\r\n{auth}\r\n").unwrap();
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer);
        assert!(
            answer.starts_with(format!("HTTP/1.1 {status}").as_bytes()),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    // Meanwhile a good client connects and is served.
    let mut client = Client::connect(addr, Auth::Subprotocol);
    client.call(
        json!({"t":"call","id":1,"op":"exists","path":format!("{}/a.txt", dir.path().display())}),
        b"",
    );
    assert_eq!(client.next_frame().0["exists"], true);
    // The stalled ones are closed by the upgrade's deadline.
    for mut stalled in [silent, half] {
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    client.call(
        json!({"t":"call","id":2,"op":"exists","path":format!("{}/b.txt", dir.path().display())}),
        b"",
    );
    assert_eq!(client.next_frame().0["exists"], false);
    client.close();
    assert_eq!(server.exit_code(), Some(0));
}

fn alive(pid: &str) -> bool {
    // A zombie no longer runs: only its entry waits for a parent to read it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn when_the_grace_period_passes_the_sessions_commands_are_killed_and_the_server_exits() {
    let dir = workspace();
    let cwd = dir.path().to_string_lossy().into_owned();
    let server = Listening::start(dir.path(), &["--grace", "1"]);
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"exec","command":"sleep 1000 & echo $!; wait","cwd":cwd,"env":null,"shell":null}),
        b"",
    );
    let (data, payload) = client.next_frame();
    assert_eq!(data["t"], "data");
    let pid = String::from_utf8(payload).unwrap().trim().to_string();
    assert!(alive(&pid), "sleep {pid} runs");
    // A resume within the grace period keeps the command; then the client vanishes for good.
    client.cut_and_resume();
    assert!(alive(&pid), "sleep {pid} runs after a resume");
    reset(client.ws.as_ref().unwrap().get_ref());
    drop(client);
    assert_eq!(server.exit_code(), Some(0));
    assert!(!alive(&pid), "sleep {pid} outlived the session");
    // The server's pid is gone too (reaped by exit_code's wait).
    assert!(!alive(&server.pid().to_string()));
}

#[test]
fn a_normal_close_ends_the_session_and_its_commands() {
    let dir = workspace();
    let cwd = dir.path().to_string_lossy().into_owned();
    let server = Listening::start(dir.path(), &[]);
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"exec","command":"sleep 1000 & echo $!; wait","cwd":cwd,"env":null,"shell":null}),
        b"",
    );
    let (_, payload) = client.next_frame();
    let pid = String::from_utf8(payload).unwrap().trim().to_string();
    assert!(alive(&pid));
    client.close();
    assert_eq!(server.exit_code(), Some(0));
    assert!(!alive(&pid), "sleep {pid} outlived the session");
}

#[test]
fn the_token_is_required_and_not_inherited() {
    let dir = workspace();
    let out = Command::new(bin())
        .arg("--root")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("PI_NATIVE_OPS_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PI_NATIVE_OPS_TOKEN"));
    assert!(out.stdout.is_empty());
    let out = Command::new(bin())
        .arg("--root")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .env("PI_NATIVE_OPS_TOKEN", "has space")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Commands do not see it.
    let cwd = dir.path().to_string_lossy().into_owned();
    let server = Listening::start(dir.path(), &[]);
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"exec","command":"echo \"[$PI_NATIVE_OPS_TOKEN]\"","cwd":cwd,"env":null,"shell":null}),
        b"",
    );
    let (_, payload) = client.next_frame();
    assert_eq!(payload, b"[]\n");
    client.close();
}

#[test]
fn without_a_session_the_server_exits_after_the_idle_timeout() {
    let dir = workspace();
    let server = Listening::start(dir.path(), &["--idle-timeout", "0.2"]);
    assert_eq!(server.exit_code(), Some(0));
}

#[test]
fn violations_of_the_session_layer_close_with_their_code_and_end_the_session() {
    let dir = workspace();
    let big = vec![2u8; (1 << 20) + 2];
    let cases: [(&str, Message, u16); 4] = [
        ("a text message", Message::Text("hi".into()), 1003),
        ("DATA over 1 MiB", Message::Binary(big.into()), 1009),
        ("a second HELLO", Message::Binary(vec![1u8; 9].into()), 1008),
        (
            "an ACK beyond what was sent",
            Message::Binary([&[3u8][..], &u64::MAX.to_le_bytes()].concat().into()),
            1008,
        ),
    ];
    for (what, message, code) in cases {
        let server = Listening::start(dir.path(), &[]);
        let mut client = Client::connect(&server.addr, Auth::Bearer);
        let ws = client.ws();
        let _ = ws.send(message);
        let closed = loop {
            match ws.read() {
                Ok(Message::Close(frame)) => break frame.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(e) => panic!("{what}: no close frame ({e})"),
            }
        };
        assert_eq!(closed, Some(code), "{what}");
        // The session is over: the server exits, and a resume finds nothing.
        assert_eq!(server.exit_code(), Some(0), "{what}");
    }
}

/// An unsandboxed command's hunt for the token in the server and in its own supervisor (a fork of
/// the server): their environment blocks, `ps e`, and all of their memory. Prints one line per
/// place: `<place> token=<lines holding it> mark=<lines holding a marker>`, the marker showing the
/// place could be read at all. The token travels as `printf` escapes, so the request holding this
/// script does not hold it.
fn hunt(server_pid: u32, marker: &str) -> String {
    let escaped: String = TOKEN.bytes().map(|b| format!("\\x{b:02x}")).collect();
    format!(
        r#"tok=$(printf '{escaped}'); mark='{marker}'
count() {{ grep -a -c -F -e "$1" || true; }}
echo "supervisor $(cat /proc/$PPID/comm) server $(cat /proc/{server_pid}/comm)"
for who in server:{server_pid} supervisor:$PPID; do
  name=${{who%%:*}}; pid=${{who#*:}}
  env=$(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null)
  echo "$name-environ token=$(printf '%s\n' "$env" | count "$tok") mark=$(printf '%s\n' "$env" | count PROBE_MARK=)"
  ps=$(ps e -ww -p $pid 2>/dev/null)
  echo "$name-ps token=$(printf '%s\n' "$ps" | count "$tok") mark=$(printf '%s\n' "$ps" | count PROBE_MARK=)"
  mem=$(mktemp)
  while read -r range perms rest; do
    case $perms in r*) ;; *) continue ;; esac
    case $rest in *'[vvar'*|*'[vsyscall]'*) continue ;; esac
    start=$((16#${{range%-*}})); end=$((16#${{range#*-}}))
    dd if=/proc/$pid/mem bs=4096 skip=$((start / 4096)) count=$(((end - start) / 4096)) status=none 2>/dev/null
  done < /proc/$pid/maps > "$mem" 2>/dev/null
  echo "$name-mem token=$(count "$tok" < "$mem") mark=$(count "$mark" < "$mem")"
  rm -f "$mem"
done"#
    )
}

/// The counts `hunt` printed for `place`.
fn found(report: &str, place: &str) -> (u64, u64) {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("{place} ")))
        .unwrap_or_else(|| panic!("no {place} in {report}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("token="), field("mark="))
}

#[test]
fn no_command_finds_the_token_in_the_server_or_its_supervisor() {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let mut users = vec![None];
    if root {
        users.insert(0, Some(NOBODY));
    } else {
        eprintln!("not root: the server runs as this user only");
    }
    for user in users {
        let dir = workspace();
        let marker = format!("marker-{}", std::process::id());
        std::fs::create_dir(dir.path().join(&marker)).unwrap();
        let cwd = dir.path().join(&marker).to_string_lossy().into_owned();
        if user.is_some() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mark = |cmd: &mut Command| {
            cmd.env("PROBE_MARK", "1");
        };
        let server = match user {
            Some(_) => Listening::start_as_nobody(dir.path(), &[], mark),
            None => Listening::start_with(dir.path(), &[], mark),
        };
        let mut client = Client::connect(&server.addr, Auth::Bearer);
        client.call(
            json!({"t":"call","id":1,"op":"exec","command":hunt(server.pid(), &marker),"cwd":cwd,"env":null,"shell":null}),
            b"",
        );
        let mut report = Vec::new();
        loop {
            let (header, payload) = client.next_frame();
            if header["t"] == "data" {
                report.extend_from_slice(&payload);
                client.call(json!({"t":"credit","id":1,"bytes":payload.len()}), b"");
                continue;
            }
            assert_eq!(header["t"], "ok", "{header}");
            break;
        }
        let report = String::from_utf8(report).unwrap();
        eprintln!("as {user:?}:\n{report}");
        // The command's parent is the supervisor, a fork of the server.
        let names: Vec<&str> = report.lines().next().unwrap().split(' ').collect();
        assert_eq!(names[1], names[3], "{report}");
        for who in ["server", "supervisor"] {
            for place in ["environ", "ps", "mem"] {
                let place = format!("{who}-{place}");
                let (token, mark) = found(&report, &place);
                assert_eq!(token, 0, "the token in {place} (as {user:?}):\n{report}");
                // Root reads everything: the hunt did look (the marker is there); another user
                // reads nothing of it, though it is the server's own user (non-dumpable).
                if user.is_none() && root {
                    assert!(mark > 0, "{place} unread as root:\n{report}");
                }
                if user.is_some() {
                    assert_eq!(mark, 0, "{place} readable as {user:?}:\n{report}");
                }
            }
        }
        client.close();
        assert_eq!(server.exit_code(), Some(0));
    }
}

/// A connection that sends half an upgrade request and stops.
fn half_request(addr: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgr").unwrap();
    tcp.set_nonblocking(true).unwrap();
    tcp
}

#[test]
fn unauthenticated_connections_cannot_lock_out_the_client_or_its_resume() {
    // Beyond every bound the server puts on upgrades under way.
    const ATTACKERS: usize = 100;
    let dir = workspace();
    let server = Listening::start(dir.path(), &["--grace", "8"]);
    // Readable by root only: the server is non-dumpable.
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
            .map(|fds| fds.count())
            .unwrap_or(0)
    };
    let idle = descriptors();
    let stop = Arc::new(AtomicBool::new(false));
    let turned_away = Arc::new(AtomicU64::new(0));
    // Each connection the server closes is opened again at once, half-sent again.
    let attacker = {
        let (addr, stop, turned_away) = (server.addr.clone(), stop.clone(), turned_away.clone());
        std::thread::spawn(move || {
            let mut conns: Vec<TcpStream> = (0..ATTACKERS).map(|_| half_request(&addr)).collect();
            while !stop.load(Ordering::Relaxed) {
                for conn in &mut conns {
                    let mut byte = [0u8; 1];
                    match conn.read(&mut byte) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        _ => {
                            turned_away.fetch_add(1, Ordering::Relaxed);
                            *conn = half_request(&addr);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // The server has turned some away: every place it keeps for them is taken.
    while turned_away.load(Ordering::Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // They hold 64 connections at most (docs/protocol.md, "Admission").
    let held = descriptors().saturating_sub(idle);
    assert!(
        held <= 64,
        "{held} connections held for unauthenticated peers"
    );
    eprintln!("{held} connections held for unauthenticated peers");
    let exists = |client: &mut Client, id: u64| {
        client.call(
            json!({"t":"call","id":id,"op":"exists","path":format!("{}/a.txt", dir.path().display())}),
            b"",
        );
        assert_eq!(client.next_frame().0["exists"], true);
    };
    // A new session comes in at its first try, and so does its resume after a cut.
    let mut client = Client::connect(&server.addr, Auth::Subprotocol);
    exists(&mut client, 1);
    for _ in 0..3 {
        client.cut_and_resume();
        exists(&mut client, 2);
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    eprintln!(
        "{} attacker connections turned away",
        turned_away.load(Ordering::Relaxed)
    );
    client.close();
    assert_eq!(server.exit_code(), Some(0));
}

/// A field of /proc/PID/status, in its unit (kB for memory).
fn status_field(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_client_flooding_pings_that_never_reads_holds_the_server_to_its_bound() {
    // Far more than the bound: a server that answered every ping would hold most of it.
    const FLOOD: u64 = 512 << 20;
    /// Growth allowed the server's peak resident memory: generous beside the 1 MiB and a bit it
    /// keeps for a connection's output (docs/protocol.md, "Over a WebSocket").
    const GROWTH_BOUND_KIB: u64 = 64 << 10;
    let dir = workspace();
    let server = Listening::start(dir.path(), &[]);
    let pid = server.pid();
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"exists","path":format!("{}/a.txt", dir.path().display())}),
        b"",
    );
    assert_eq!(client.next_frame().0["exists"], true);
    let before = status_field(pid, "VmHWM:");
    // Masked pings of 125 bytes, the most a control frame carries, a megabyte of them at a time.
    let ping: Vec<u8> = [&[0x89u8, 0x80 | 125, 0, 0, 0, 0][..], &[b'p'; 125]].concat();
    let chunk: Vec<u8> = ping.repeat((1 << 20) / ping.len());
    let mut tcp = client.ws().get_ref().try_clone().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let flooder = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            while sent.load(Ordering::Relaxed) < FLOOD && tcp.write_all(&chunk).is_ok() {
                sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        })
    };
    // Until the server stops taking the flood (the flooder's writes stop for a second), takes
    // it all, or passes the bound.
    let mut last = 0;
    let mut still = 0;
    while still < 20
        && !flooder.is_finished()
        && status_field(pid, "VmHWM:") < before + GROWTH_BOUND_KIB
    {
        std::thread::sleep(Duration::from_millis(50));
        let now = sent.load(Ordering::Relaxed);
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    let peak = status_field(pid, "VmHWM:");
    eprintln!(
        "ping flood: peak RSS {} -> {} MiB after {} MiB of pings",
        before >> 10,
        peak >> 10,
        last >> 20
    );
    assert!(
        peak < before + GROWTH_BOUND_KIB,
        "peak RSS {before} -> {peak} KiB"
    );
    let _ = client.ws().get_ref().shutdown(std::net::Shutdown::Both);
    flooder.join().unwrap();
}

#[test]
fn a_close_reason_cannot_forge_a_log_line() {
    let forged = "pi-native-ops-server: session ended: the client closed it";
    let dir = workspace();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = Listening::start_with(dir.path(), &[], |cmd| {
        cmd.stderr(log);
    });
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client
        .ws()
        .close(Some(CloseFrame {
            code: CloseCode::Away,
            reason: format!("bye\n{forged}\r\n").into(),
        }))
        .unwrap();
    while client.ws().read().is_ok() {}
    let text = loop {
        let text = std::fs::read_to_string(&log_path).unwrap();
        if text.contains("dropped") {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("{text}");
    assert!(!text.lines().any(|l| l.starts_with(forged)), "{text}");
    assert!(text.contains(r#"bye\n"#), "{text}");
}

#[test]
fn a_non_dumpable_server_not_run_by_root_still_makes_its_namespaces_sandbox() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return eprintln!("not root: cannot start the server as another user");
    }
    if pi_native_ops_core::exec::sandbox::support()
        .namespaces
        .is_err()
    {
        return eprintln!("no namespaces sandbox on this machine");
    }
    let dir = workspace();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cwd = dir.path().to_string_lossy().into_owned();
    let server = Listening::start_as_nobody(dir.path(), &["--sandbox", "namespaces"], |_| {});
    let mut client = Client::connect(&server.addr, Auth::Bearer);
    client.call(
        json!({"t":"call","id":1,"op":"exec","command":"id -u; cat a.txt","cwd":cwd,"env":null,"shell":null}),
        b"",
    );
    let mut output = Vec::new();
    let answer = loop {
        let (header, payload) = client.next_frame();
        if header["t"] != "data" {
            break header;
        }
        client.call(json!({"t":"credit","id":1,"bytes":payload.len()}), b"");
        output.extend_from_slice(&payload);
    };
    assert_eq!(answer["t"], "ok", "{answer}");
    assert_eq!(String::from_utf8_lossy(&output), "65534\nalpha\n");
    client.close();
    assert_eq!(server.exit_code(), Some(0));
}
