//! The built server over pipes, as a client drives it (docs/protocol.md).
#![cfg(unix)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod common;
use common::noise;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_pi-native-ops-server");

/// The binary under test: this build's, or another given by `PI_NATIVE_OPS_E2E_SERVER` (to watch
/// a test fail on an older build).
fn bin() -> String {
    std::env::var("PI_NATIVE_OPS_E2E_SERVER").unwrap_or_else(|_| BIN.to_string())
}
/// A server that stops answering fails its test after this long instead of hanging the run.
const WATCHDOG: Duration = Duration::from_secs(120);

struct Server {
    child: Arc<Mutex<Child>>,
    stdin: Option<File>,
    stdout: File,
    /// The server's `hello`.
    hello: Value,
}

impl Server {
    fn start(root: &Path, runtime_root: Option<&str>) -> Server {
        Server::start_with(root, runtime_root, false)
    }

    /// A server given more arguments (`--policy FILE`).
    fn start_args(root: &Path, args: &[&std::ffi::OsStr]) -> Server {
        Server::spawn(root, None, false, args)
    }

    /// `sockets`: stdin and stdout are Unix stream sockets, as Node gives a child's stdio pipes;
    /// else plain pipes (ssh, docker exec).
    fn start_with(root: &Path, runtime_root: Option<&str>, sockets: bool) -> Server {
        Server::spawn(root, runtime_root, sockets, &[])
    }

    fn spawn(
        root: &Path,
        runtime_root: Option<&str>,
        sockets: bool,
        args: &[&std::ffi::OsStr],
    ) -> Server {
        let mut cmd = Command::new(bin());
        cmd.arg("--root").arg(root).args(args);
        if let Some(runtime) = runtime_root {
            cmd.args(["--runtime-root", runtime]);
        }
        let mut ours = None;
        if sockets {
            let (stdin, their_stdin) = UnixStream::pair().unwrap();
            let (stdout, their_stdout) = UnixStream::pair().unwrap();
            cmd.stdin(OwnedFd::from(their_stdin))
                .stdout(OwnedFd::from(their_stdout));
            ours = Some((
                File::from(OwnedFd::from(stdin)),
                File::from(OwnedFd::from(stdout)),
            ));
        } else {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        }
        let mut child = cmd
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server starts");
        // The child's ends close with `cmd`: our reads see the end when the server exits.
        drop(cmd);
        let (stdin, stdout) = match ours {
            Some((stdin, stdout)) => (Some(stdin), stdout),
            None => (
                child.stdin.take().map(|s| File::from(OwnedFd::from(s))),
                File::from(OwnedFd::from(child.stdout.take().expect("stdout"))),
            ),
        };
        let child = Arc::new(Mutex::new(child));
        let watched = Arc::downgrade(&child);
        std::thread::spawn(move || {
            std::thread::sleep(WATCHDOG);
            if let Some(child) = watched.upgrade() {
                let _ = child.lock().unwrap().kill();
            }
        });
        let mut server = Server {
            child,
            stdin,
            stdout,
            hello: Value::Null,
        };
        let (hello, _) = server.recv();
        server.hello = hello.clone();
        assert_eq!(hello["t"], "hello");
        assert_eq!(hello["protocol"], 1);
        assert_eq!(hello["server"], env!("CARGO_PKG_VERSION"));
        server.send_raw(&frame(
            &json!({"t":"hello","protocol":1,"client":"0.1.0"}),
            b"",
        ));
        server
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, header: Value, payload: &[u8]) {
        self.send_raw(&frame(&header, payload));
    }

    fn recv(&mut self) -> (Value, Vec<u8>) {
        let mut prefix = [0u8; 8];
        self.stdout.read_exact(&mut prefix).expect("a frame");
        let h = u32::from_be_bytes(prefix[..4].try_into().unwrap()) as usize;
        let p = u32::from_be_bytes(prefix[4..].try_into().unwrap()) as usize;
        let mut header = vec![0; h];
        self.stdout.read_exact(&mut header).unwrap();
        let mut payload = vec![0; p];
        self.stdout.read_exact(&mut payload).unwrap();
        (serde_json::from_slice(&header).unwrap(), payload)
    }

    /// Runs an exec to its end, crediting each chunk: the output and the `ok` answer.
    fn exec(&mut self, id: u64, command: &str, cwd: &str) -> (Vec<u8>, Value) {
        self.send(
            json!({"t":"call","id":id,"op":"exec","command":command,"cwd":cwd,"env":null,"shell":null}),
            b"",
        );
        let mut output = Vec::new();
        loop {
            let (msg, payload) = self.recv();
            assert_eq!(msg["id"], id);
            if msg["t"] != "data" {
                return (output, msg);
            }
            assert!(payload.len() <= 1 << 20);
            self.send(json!({"t":"credit","id":id,"bytes":payload.len()}), b"");
            output.extend_from_slice(&payload);
        }
    }

    /// Closes stdin and returns the exit code.
    fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        let _ = self.stdout.read_to_end(&mut rest);
        let status = self.child.lock().unwrap().wait().unwrap();
        status.code()
    }
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

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    dir
}

#[test]
fn serves_files_in_runtime_form_and_refuses_outside_paths() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), Some("/workspace"));
    server.send(
        json!({"t":"call","id":1,"op":"readFile","path":"/workspace/a.txt"}),
        b"",
    );
    let (ok, bytes) = server.recv();
    assert_eq!(ok, json!({"t":"ok","id":1}));
    assert_eq!(bytes, b"alpha\n");

    server.send(
        json!({"t":"call","id":2,"op":"readFile","path":"/etc/passwd"}),
        b"",
    );
    let (err, _) = server.recv();
    assert_eq!(
        err,
        json!({"t":"error","id":2,"error":{"kind":"Outside","message":"path \"/etc/passwd\" is outside workspace"}})
    );

    // Nothing of the host path leaks into an error.
    server.send(
        json!({"t":"call","id":3,"op":"readdir","path":"/workspace/none"}),
        b"",
    );
    let (err, _) = server.recv();
    assert_eq!(err["error"]["code"], "ENOENT");
    assert_eq!(err["error"]["path"], "/workspace/none");
    assert!(!err.to_string().contains(&*dir.path().to_string_lossy()));
    assert_eq!(server.close(), Some(0));
}

#[test]
fn exec_streams_output_and_answers_the_exit_code() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), Some("/workspace"));
    // A runtime cwd runs in the host directory it stands for.
    let (output, ok) = server.exec(1, "pwd; echo err >&2; exit 3", "/workspace/sub");
    let host_sub = dir.path().join("sub");
    assert_eq!(
        String::from_utf8(output).unwrap(),
        format!("{}\nerr\n", host_sub.display())
    );
    assert_eq!(ok, json!({"t":"ok","id":1,"exitCode":3,"killed":false}));

    // A flood larger than the window arrives whole as the client credits it.
    let (output, ok) = server.exec(2, "head -c 10000000 /dev/zero", "/workspace");
    assert_eq!(output.len(), 10_000_000);
    assert_eq!(ok["exitCode"], 0);

    let (_, err) = server.exec(3, "true", "/workspace/missing");
    assert_eq!(
        err["error"],
        json!({"kind":"WorkingDirectory","message":"Working directory does not exist: /workspace/missing\nCannot execute bash commands."})
    );

    // Cancel kills the tree; the answer says so.
    server.send(
        json!({"t":"call","id":4,"op":"exec","command":"echo started; sleep 1000","cwd":"/workspace"}),
        b"",
    );
    let (data, payload) = server.recv();
    assert_eq!(
        (data["t"].as_str(), payload.as_slice()),
        (Some("data"), &b"started\n"[..])
    );
    server.send(json!({"t":"cancel","id":4}), b"");
    let (ok, _) = server.recv();
    assert_eq!(ok["killed"], true);
    assert_eq!(ok["t"], "ok");
    assert_eq!(server.close(), Some(0));
}

#[test]
fn exec_output_arrives_byte_for_byte_over_pipes_and_sockets() {
    let dir = workspace();
    // Many largest frames and a ragged end.
    let noise = noise((24 << 20) + 12_345, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(dir.path().join("noise.bin"), &noise).unwrap();
    let cwd = dir.path().to_string_lossy().into_owned();
    for sockets in [false, true] {
        let mut server = Server::start_with(dir.path(), None, sockets);
        let (output, ok) = server.exec(1, "cat noise.bin", &cwd);
        assert_eq!(ok["exitCode"], 0);
        assert!(output == noise, "the flood differs (sockets: {sockets})");
        // Pieces of many sizes with pauses between them, stdout and stderr: each whole, in order.
        let sizes = [1, 4096, 65_536, (1 << 20) + 1, 3];
        let command =
            "for n in 1 4096 65536 1048577 3; do head -c $n noise.bin; sleep 0.01; done; \
                       head -c 5 noise.bin >&2";
        let (output, ok) = server.exec(2, command, &cwd);
        assert_eq!(ok["exitCode"], 0);
        let mut want = Vec::new();
        for n in sizes.into_iter().chain([5]) {
            want.extend_from_slice(&noise[..n]);
        }
        assert!(output == want, "the pieces differ (sockets: {sockets})");
        assert_eq!(server.close(), Some(0));
    }
}

fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

#[test]
fn closing_stdin_kills_every_running_tree_before_exit() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), None);
    let cwd = dir.path().to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for id in [1, 2] {
        server.send(
            json!({"t":"call","id":id,"op":"exec","command":"sleep 1000 & echo $!; wait","cwd":cwd}),
            b"",
        );
        let (data, payload) = server.recv();
        assert_eq!(data["t"], "data");
        let pid = String::from_utf8(payload).unwrap().trim().to_string();
        assert!(alive(&pid), "sleep {pid} runs");
        pids.push(pid);
    }
    assert_eq!(server.close(), Some(0));
    for pid in pids {
        assert!(!alive(&pid), "sleep {pid} outlived the connection");
    }
}

#[test]
fn bad_frames_get_an_error_or_close_the_connection() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), None);
    // A header that is not JSON: an error without id, and the connection goes on.
    let mut garbage = Vec::new();
    garbage.extend_from_slice(&3u32.to_be_bytes());
    garbage.extend_from_slice(&0u32.to_be_bytes());
    garbage.extend_from_slice(b"\xff{[");
    server.send_raw(&garbage);
    let (err, _) = server.recv();
    assert_eq!(err["t"], "error");
    assert_eq!(err.get("id"), None);
    server.send(json!({"t":"call","id":5,"op":"unlink","path":"/"}), b"");
    let (err, _) = server.recv();
    assert_eq!(
        (err["id"].as_u64(), err["error"]["kind"].as_str()),
        (Some(5), Some("Protocol"))
    );
    // A length out of range: the next frame cannot be found, so the server says why and leaves.
    server.send_raw(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    let (err, _) = server.recv();
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("header length 4294967295 is out of range"));
    assert_eq!(server.close(), Some(1));
}

/// Over pipes (ssh, docker exec), the server widens them so a 1 MiB data frame goes in one write.
#[cfg(target_os = "linux")]
#[test]
fn pipes_are_widened_to_a_whole_data_frame() {
    use std::os::fd::AsRawFd;
    let dir = workspace();
    let server = Server::start(dir.path(), None);
    // SAFETY: F_GETPIPE_SZ on a descriptor we own.
    let size = unsafe { libc::fcntl(server.stdout.as_raw_fd(), libc::F_GETPIPE_SZ) };
    assert_eq!(size, 1 << 20);
    let stdin = server.stdin.as_ref().unwrap();
    assert_eq!(
        // SAFETY: as above.
        unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETPIPE_SZ) },
        1 << 20
    );
    assert_eq!(server.close(), Some(0));
}

#[test]
fn a_socket_stdout_gets_a_send_buffer_of_the_whole_window() {
    use std::os::fd::{AsRawFd, FromRawFd};
    let dir = workspace();
    let server = Server::start_with(dir.path(), None, true);
    let pid = server.child.lock().unwrap().id() as libc::c_int;
    // The server's own stdout, duplicated into this process (its parent may).
    // SAFETY: plain system calls; each returned descriptor is owned below.
    let stdout = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), 1, 0) as libc::c_int;
        assert!(fd >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
        OwnedFd::from_raw_fd(fd)
    };
    let mut size: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int.
    let r = unsafe {
        libc::getsockopt(
            stdout.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut size as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0);
    // Our copy would keep the server's output open past its exit.
    drop(stdout);
    // 4 MiB asked, capped at net.core.wmem_max, doubled by the kernel for its bookkeeping.
    let max: libc::c_int = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(size, 2 * max.min(4 << 20));
    assert_eq!(server.close(), Some(0));
}

#[test]
fn a_read_file_no_answer_can_carry_is_refused_before_it_is_read() {
    let dir = workspace();
    // Sparse: a gibibyte and a byte that costs no disk, but would cost memory if read.
    let big = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    let size = (1u64 << 30) + 1;
    big.set_len(size).unwrap();
    let mut server = Server::start(dir.path(), Some("/workspace"));
    server.send(
        json!({"t":"call","id":1,"op":"readFile","path":"/workspace/big.bin"}),
        b"",
    );
    let (err, _) = server.answer(1);
    assert_eq!(err["t"], "error", "{err}");
    assert_eq!(err["error"]["kind"], "FileTooLarge", "{err}");
    assert_eq!(err["error"]["code"], "ERR_FS_FILE_TOO_LARGE", "{err}");
    assert_eq!(
        err["error"]["message"],
        format!("File size ({size}) is greater than 1073741824 bytes, the most one answer carries")
    );
    let peak = status_field(server.pid(), "VmHWM:");
    assert!(peak < MEMORY_BOUND_KIB, "the server's peak was {peak} KiB");
    // A file within the bound reads as before.
    std::fs::write(dir.path().join("small.txt"), "small\n").unwrap();
    server.send(
        json!({"t":"call","id":2,"op":"readFile","path":"/workspace/small.txt"}),
        b"",
    );
    let (ok, bytes) = server.answer(2);
    assert_eq!(ok["t"], "ok", "{ok}");
    assert_eq!(bytes, b"small\n");
    assert_eq!(server.close(), Some(0));
}

#[test]
fn hello_says_how_commands_are_sandboxed() {
    use pi_native_ops_core::exec::sandbox::support;
    // `support()` here probes with the sandbox helper the server uses: its own binary.
    #[cfg(target_os = "linux")]
    pi_native_ops_core::exec::helper::set_path(Some(Path::new(env!(
        "CARGO_BIN_EXE_pi-native-ops-server"
    ))))
    .unwrap();
    let dir = workspace();
    let server = Server::start(dir.path(), None);
    assert_eq!(server.hello["sandbox"], Value::Null, "{}", server.hello);
    assert_eq!(server.close(), Some(0));

    let os = std::ffi::OsStr::new;
    let args = [
        os("--sandbox"),
        os("namespaces"),
        os("--sandbox-network"),
        os(r#"["localhost","*.example.org"]"#),
    ];
    // The mode is what the server's machine can make: this one's, unless the server is another
    // build run elsewhere (PI_NATIVE_OPS_E2E_SERVER: under qemu-user, which makes none).
    let foreign = std::env::var_os("PI_NATIVE_OPS_E2E_SERVER").is_some();
    let mode_is = |hello: &Value, here: Option<&str>| {
        let mode = &hello["sandbox"]["mode"];
        let expected = here.map_or(Value::Null, |m| json!(m));
        assert!(
            *mode == expected || (foreign && mode.is_null()),
            "{hello} (expected mode {expected})"
        );
    };
    let server = Server::start_args(dir.path(), &args);
    let available = support().namespaces.is_ok();
    mode_is(&server.hello, available.then_some("namespaces"));
    assert_eq!(
        server.hello["sandbox"]["network"],
        json!(["localhost", "*.example.org"])
    );
    assert_eq!(server.close(), Some(0));

    let args = [os("--sandbox"), os("--sandbox-network"), os("true")];
    let server = Server::start_args(dir.path(), &args);
    mode_is(&server.hello, support().auto().map(|m| m.name()));
    assert_eq!(server.hello["sandbox"]["network"], json!(true));
    assert_eq!(server.close(), Some(0));
}

#[test]
fn the_policy_call_fixes_the_policy_over_the_pinned_one() {
    let dir = workspace();
    let file = dir.path().join("policy.json");
    std::fs::write(&file, r#"{"denyRead":["secrets/"],"protect":true}"#).unwrap();
    let args = [std::ffi::OsStr::new("--policy"), file.as_os_str()];
    let mut server = Server::start_args(dir.path(), &args);
    // A bad rule: the core's error, as the local face gives it; the policy stays unset.
    server.send(
        json!({"t":"call","id":1,"op":"policy","denyWrite":["ok","[z-a]"]}),
        b"",
    );
    let (err, _) = server.recv();
    assert_eq!(err["id"], 1);
    assert_eq!(err["error"]["kind"], "InvalidGlob");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("policy.denyWrite: invalid rule \"[z-a]\""),
        "{message}"
    );
    server.send(
        json!({"t":"call","id":2,"op":"policy","denyRead":[".env"],"protect":false,"events":true}),
        b"",
    );
    let (ok, _) = server.recv();
    assert_eq!(
        ok,
        json!({"t":"ok","id":2,"pinned":{"denyRead":["secrets/"],"denyWrite":[],"protect":true}})
    );
    server.send(json!({"t":"call","id":3,"op":"policy"}), b"");
    let (err, _) = server.recv();
    assert_eq!(err["error"]["kind"], "Protocol");
    server.send(
        json!({"t":"call","id":4,"op":"readFile","path":format!("{}/a.txt", dir.path().display())}),
        b"",
    );
    let (ok, bytes) = server.recv();
    assert_eq!(
        (ok["t"].as_str(), &bytes[..]),
        (Some("ok"), &b"alpha\n"[..])
    );
    assert_eq!(server.close(), Some(0));
}

/// Every fs call, find and grep refuse what the policy denies, with the core's `Protected`
/// error and its rule; denied entries are not listed, found or searched.
#[test]
fn the_policy_is_enforced_on_every_fs_call() {
    let dir = workspace();
    std::fs::write(dir.path().join(".env"), "KEY=1\n").unwrap();
    std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
    let file = dir.path().join("policy.json");
    std::fs::write(dir.path().join("sub/x.key"), "KEY\n").unwrap();
    std::fs::write(&file, r#"{"denyRead":["*.key"],"denyWrite":["sub/"]}"#).unwrap();
    let args = [std::ffi::OsStr::new("--policy"), file.as_os_str()];
    let mut server = Server::start_args(dir.path(), &args);
    server.send(
        json!({"t":"call","id":1,"op":"policy","denyRead":[".env","!x.key"],"denyWrite":["!sub/"]}),
        b"",
    );
    assert_eq!(server.recv().0["t"], "ok");
    let w = |rel: &str| format!("{}/{rel}", dir.path().display());
    let protected = |path: String, rule: &str| json!({"kind":"Protected","message":format!("path \"{path}\" is protected by policy"),"rule":rule});
    server.send(
        json!({"t":"call","id":2,"op":"readFile","path":w(".env")}),
        b"",
    );
    assert_eq!(server.recv().0["error"], protected(w(".env"), ".env"));
    server.send(
        json!({"t":"call","id":3,"op":"writeFile","path":w(".git/hooks/pre-commit")}),
        b"#!/bin/sh\n",
    );
    assert_eq!(
        server.recv().0["error"],
        protected(w(".git/hooks/pre-commit"), "**/.git/hooks/")
    );
    // The pinned rule holds whatever the client's `!sub/` says.
    server.send(
        json!({"t":"call","id":4,"op":"writeFile","path":w("sub/x")}),
        b"x",
    );
    assert_eq!(server.recv().0["error"], protected(w("sub/x"), "sub/"));
    server.send(json!({"t":"call","id":5,"op":"readdir","path":w("")}), b"");
    let (ok, _) = server.recv();
    assert!(!ok["names"].as_array().unwrap().contains(&json!(".env")));
    // The pinned read rule holds in listings and walks too.
    server.send(
        json!({"t":"call","id":7,"op":"readdir","path":w("sub")}),
        b"",
    );
    assert_eq!(server.recv().0["names"], json!([]));
    server.send(
        json!({"t":"call","id":8,"op":"glob","pattern":"*.key","cwd":w(""),"ignore":[],"limit":null}),
        b"",
    );
    assert_eq!(server.recv().0["paths"], json!([]));
    server.send(
        json!({"t":"call","id":6,"op":"grep","pattern":"KEY","path":w(""),"displayName":"w","limit":100}),
        b"",
    );
    assert_eq!(server.recv().0["matchCount"], 0);
    assert!(!dir.path().join(".git/hooks/pre-commit").exists());
    assert!(!dir.path().join("sub/x").exists());
    assert_eq!(server.close(), Some(0));
}

#[test]
fn command_line() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("pi-native-ops-server {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new(BIN).arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("pi-native-ops-server: unknown argument \"--bogus\""));
    assert!(stderr.contains("usage: pi-native-ops-server --root DIR"));
    let out = Command::new(BIN)
        .args(["--root", "/no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(
        "pi-native-ops-server: cannot open workspace root \"/no/such/dir\": No such file or directory"
    ));
    // A --policy file that is no policy: a usage error naming it, before anything is served.
    let dir = workspace();
    let file = dir.path().join("policy.json");
    for (text, says) in [
        (
            r#"{"denyRead":["a{b"]}"#,
            "policy.denyRead: invalid rule \"a{b\"",
        ),
        (r#"{"denyRaed":[".env"]}"#, "unknown field `denyRaed`"),
        (r#"{"protect":"yes"}"#, "invalid type"),
        ("[", "EOF while parsing"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = Command::new(BIN)
            .arg("--root")
            .arg(dir.path())
            .arg("--policy")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let head = format!("pi-native-ops-server: --policy {}: ", file.display());
        assert!(
            stderr.starts_with(&head) && stderr.contains(says),
            "{stderr}"
        );
    }
    let out = Command::new(BIN)
        .args(["--root", "/", "--policy", "/no/such/policy.json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("pi-native-ops-server: --policy /no/such/policy.json: No such file"));
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// The next frame answering `id` (`ok` or `error`), skipping every other.
    fn answer(&mut self, id: u64) -> (Value, Vec<u8>) {
        loop {
            let (msg, payload) = self.recv();
            if msg["id"] == id && msg["t"] != "data" {
                return (msg, payload);
            }
        }
    }
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

/// Bytes the process has read from files and pipes so far.
fn read_chars(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_reused_id_is_refused_without_touching_the_call_that_owns_it() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), None);
    let cwd = dir.path().to_string_lossy().into_owned();
    server.send(
        json!({"t":"call","id":5,"op":"exec","command":"sleep 1000 & echo $!; wait","cwd":cwd}),
        b"",
    );
    let (data, payload) = server.recv();
    assert_eq!(data, json!({"t":"data","id":5}));
    let pid = String::from_utf8(payload).unwrap().trim().to_string();
    // A one-shot call, then a streaming one and a grep, each with the running id: refused.
    let a = dir.path().join("a.txt").to_string_lossy().into_owned();
    for call in [
        json!({"t":"call","id":5,"op":"stat","path":a}),
        json!({"t":"call","id":5,"op":"exec","command":"true","cwd":cwd}),
        json!({"t":"call","id":5,"op":"readStream","path":a}),
        json!({"t":"call","id":5,"op":"grep","pattern":"x","path":cwd,"displayName":"w","limit":5}),
    ] {
        server.send(call, b"");
        let (err, _) = server.recv();
        assert_eq!(
            err,
            json!({"t":"error","id":5,"error":{"kind":"Protocol","message":"call id 5 is already in flight"}})
        );
    }
    // Nothing else came for id 5 (no second, spurious answer): the next frame is id 6's.
    server.send(json!({"t":"call","id":6,"op":"exists","path":a}), b"");
    let (ok, _) = server.recv();
    assert_eq!(ok, json!({"t":"ok","id":6,"exists":true}));
    // The exec still owns id 5: a cancel kills its tree.
    assert!(alive(&pid));
    server.send(json!({"t":"cancel","id":5}), b"");
    let (ok, _) = server.answer(5);
    assert_eq!(ok["killed"], true, "{ok}");
    assert!(!alive(&pid), "sleep {pid} outlived the cancel");
    // And the id is free again.
    let (_, ok) = server.exec(5, "echo again", &cwd);
    assert_eq!(ok["exitCode"], 0);
    assert_eq!(server.close(), Some(0));
}

#[test]
fn a_reused_id_does_not_keep_the_server_waiting_for_its_command_at_exit() {
    let dir = workspace();
    let mut server = Server::start(dir.path(), None);
    let cwd = dir.path().to_string_lossy().into_owned();
    server.send(
        json!({"t":"call","id":5,"op":"exec","command":"sleep 1000 & echo $!; wait","cwd":cwd}),
        b"",
    );
    let (_, payload) = server.recv();
    let pid = String::from_utf8(payload).unwrap().trim().to_string();
    server.send(json!({"t":"call","id":5,"op":"stat","path":cwd}), b"");
    let (err, _) = server.recv();
    assert_eq!(err["t"], "error");
    // Input ends: the command is killed (not waited for), and the server exits.
    assert_eq!(server.close(), Some(0));
    assert!(!alive(&pid), "sleep {pid} outlived the connection");
}

#[test]
fn answers_over_the_header_limit_travel_in_the_payload() {
    // The answer's size is what matters: 6,000 names of 200 bytes, 1.2 MB of JSON (files are
    // slow to create on CI's disks).
    const ENTRIES: usize = 6_000;
    // On a memory file system where there is one: thousands of files are slow to make on disk.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        workspace()
    };
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let many = dir.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..ENTRIES {
        std::fs::write(many.join(format!("entry-{i:05}-{}", "p".repeat(188))), "").unwrap();
    }
    let mut server = Server::start(dir.path(), Some("/workspace"));
    let calls = [
        json!({"t":"call","id":1,"op":"readdir","path":"/workspace/many"}),
        json!({"t":"call","id":2,"op":"glob","pattern":"many/*","cwd":"/workspace","ignore":[],"limit":null}),
    ];
    for (call, field) in calls.into_iter().zip(["names", "paths"]) {
        let id = call["id"].clone();
        server.send(call, b"");
        let (small, payload) = server.recv();
        assert_eq!(small, json!({"t":"ok","id":id,"inPayload":true}));
        let answer: Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!((&answer["t"], &answer["id"]), (&json!("ok"), &id));
        let list = answer[field].as_array().unwrap();
        assert_eq!(list.len(), ENTRIES);
    }
    // The connection goes on.
    server.send(
        json!({"t":"call","id":3,"op":"exists","path":"/workspace/a.txt"}),
        b"",
    );
    assert_eq!(server.recv().0, json!({"t":"ok","id":3,"exists":true}));
    assert_eq!(server.close(), Some(0));
}

/// Peak resident memory allowed a server whose client reads nothing (docs/protocol.md, "Limits").
const MEMORY_BOUND_KIB: u64 = 256 << 10;

/// Waits until the server's reads stop for a second (or `done`, or its peak passes the bound),
/// then asserts its peak resident memory stayed under the bound.
fn assert_memory_bound_while_idle(pid: u32, what: &str, done: impl Fn() -> bool) {
    let mut last = read_chars(pid);
    let mut still = 0;
    while still < 20 && !done() && status_field(pid, "VmHWM:") < MEMORY_BOUND_KIB {
        std::thread::sleep(Duration::from_millis(50));
        let now = read_chars(pid);
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    let peak = status_field(pid, "VmHWM:");
    eprintln!(
        "{what}: peak RSS {} MiB, {} MiB read before it stopped",
        peak >> 10,
        last >> 20
    );
    assert!(
        peak < MEMORY_BOUND_KIB,
        "peak RSS {peak} KiB over the bound"
    );
}

#[test]
fn a_client_that_never_reads_holds_the_server_to_its_memory_bound() {
    // The report's 64 MiB file; 8 calls (512 MiB of answers) are enough to pass the bound.
    const FILE: usize = 64 << 20;
    const CALLS: u64 = 8;
    let dir = workspace();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![7u8; FILE]).unwrap();
    let path = big.to_string_lossy().into_owned();
    let mut server = Server::start(dir.path(), None);
    let pid = server.pid();
    for id in 1..=CALLS {
        server.send(json!({"t":"call","id":id,"op":"readFile","path":path}), b"");
    }
    // Nothing is read until the server has done all it will: its reads of the files stop (it
    // would read all 40 unbounded) or it is already past the bound.
    assert_memory_bound_while_idle(pid, "never-reading client", || false);
    // Every answer still comes, whole, once read (in any order).
    let mut answered = std::collections::HashSet::new();
    while answered.len() < CALLS as usize {
        let (ok, payload) = server.recv();
        assert_eq!(ok["t"], "ok");
        assert_eq!(payload.len(), FILE);
        assert!(answered.insert(ok["id"].as_u64().unwrap()));
    }
    let peak = status_field(pid, "VmHWM:");
    assert!(
        peak < MEMORY_BOUND_KIB,
        "peak RSS {peak} KiB over the bound"
    );
    assert_eq!(server.close(), Some(0));
}

#[test]
fn short_calls_answer_while_blocking_calls_fill_the_server() {
    const FIFO_READS: u64 = 520;
    const EXECS: u64 = 4_740;
    const GREPS: u64 = 4_740;
    const STATS: usize = 20;
    let dir = workspace();
    for i in 0..50 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            "needle\nhay\n".repeat(50),
        )
        .unwrap();
    }
    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let mut server = Server::start(dir.path(), None);
    let pid = server.pid();
    let cwd = dir.path().to_string_lossy().into_owned();
    let fifo_path = fifo.to_string_lossy().into_owned();
    // Reads of a FIFO no one writes, commands that never end, and searches: 10,000 calls.
    let mut batch = Vec::new();
    let mut id = 0;
    for i in 0..FIFO_READS + EXECS + GREPS {
        id += 1;
        let call = if i < FIFO_READS {
            json!({"t":"call","id":id,"op":"readFile","path":fifo_path})
        } else if i % 2 == 0 {
            json!({"t":"call","id":id,"op":"exec","command":"sleep 1000","cwd":cwd})
        } else {
            json!({"t":"call","id":id,"op":"grep","pattern":"ne+dle","path":cwd,"displayName":"w","limit":100})
        };
        batch.extend(frame(&call, b""));
    }
    server.send_raw(&batch);
    // Stats one after the other while they are in flight; the first waits for the reader to
    // take in the 10,000 before it.
    let a = dir.path().join("a.txt").to_string_lossy().into_owned();
    let mut waits = Vec::new();
    for _ in 0..STATS {
        id += 1;
        let sent = std::time::Instant::now();
        server.send(json!({"t":"call","id":id,"op":"stat","path":a}), b"");
        let (ok, _) = server.answer(id);
        waits.push(sent.elapsed().as_secs_f64() * 1e3);
        assert_eq!(ok["isFile"], true);
    }
    let threads = status_field(pid, "Threads:");
    let rss = status_field(pid, "VmRSS:");
    let first = waits.remove(0);
    waits.sort_by(f64::total_cmp);
    eprintln!(
        "stat under {} calls in flight: first {first:.1} ms (behind them all), then median {:.1} ms, max {:.1} ms; server threads {threads}, RSS {} MiB",
        FIFO_READS + EXECS + GREPS,
        waits[waits.len() / 2],
        waits[waits.len() - 1],
        rss >> 10
    );
    // The lanes' threads (8 + 16 + 8 + 128), the reader, the writer, and each search's walkers.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(threads <= 170 + 8 * cores, "{threads} threads");
    // Input ends: every command is killed, and the server exits though reads of the FIFO block.
    assert_eq!(server.close(), Some(0));
}

#[test]
fn refusals_to_a_client_that_never_reads_stop_its_input_not_the_memory_bound() {
    // Headers the reader refuses itself, each answered with an error echoing 100 KB: 300 MB of
    // refusals if all were queued.
    const FRAMES: usize = 3_000;
    let dir = workspace();
    let mut server = Server::start(dir.path(), None);
    let pid = server.pid();
    let bad = frame(&json!({"t": "x".repeat(100_000)}), b"");
    let mut stdin = server.stdin.take().unwrap();
    // The server stops reading once its queued answers fill the budget: the writes then block
    // until the server is killed.
    let writer = std::thread::spawn(move || {
        for _ in 0..FRAMES {
            if stdin.write_all(&bad).is_err() {
                break;
            }
        }
    });
    assert_memory_bound_while_idle(pid, "refusals to a never-reading client", || {
        writer.is_finished()
    });
    server.child.lock().unwrap().kill().unwrap();
    writer.join().unwrap();
}

#[test]
fn a_client_version_cannot_forge_a_log_line() {
    let forged = "pi-native-ops-server: forged";
    let dir = workspace();
    let out = {
        let mut child = Command::new(bin())
            .arg("--root")
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Another protocol: the server logs the mismatch, the client's version in it, and closes.
        let hello = json!({"t":"hello","protocol":99,"client":format!("9.9\n{forged}")});
        stdin.write_all(&frame(&hello, b"")).unwrap();
        child.wait_with_output().unwrap()
    };
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("remote protocol mismatch"), "{log}");
    assert!(!log.lines().any(|l| l.starts_with(forged)), "{log}");
    assert!(log.contains(r"9.9\n"), "{log}");
}
