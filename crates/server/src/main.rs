//! pi-native-ops-server: serves one workspace's native Operations over stdin/stdout, with the
//! protocol of docs/protocol.md. A second face on `pi_native_ops_core`, beside the napi binding:
//! it converts and dispatches, and the core decides (bounds, rules, errors, messages).

#![deny(clippy::all)]
// Every unsafe operation sits in an `unsafe` block with a `// SAFETY:` comment giving its reason,
// also inside an `unsafe fn` (whose `# Safety` section states what its callers must keep).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(unix)]
mod budget;
#[cfg(unix)]
mod conn;
#[cfg(unix)]
mod frame;
#[cfg(all(unix, test))]
mod fuzz;
#[cfg(unix)]
mod index;
#[cfg(unix)]
mod ops;
#[cfg(unix)]
mod outbox;
#[cfg(unix)]
mod wire;

use std::path::PathBuf;

const NAME: &str = "pi-native-ops-server";

const USAGE: &str = "\
usage: pi-native-ops-server --root DIR [--runtime-root PATH] [--index]

Serves the workspace DIR to one pi-native-ops client over stdin and stdout
(the protocol of docs/protocol.md); logs go to stderr.

  --root DIR            the workspace directory on this machine
  --runtime-root PATH   the absolute path the agent sees the workspace as
                        (default: DIR)
  --index               start the warm search index of DIR at once (Linux),
                        so find and grep are fast from the first calls on;
                        a client may also start it (connect's index option)
  --version             print the version
  --help                print this help";

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Serve {
        root: PathBuf,
        runtime_root: Option<PathBuf>,
        index: bool,
    },
    Version,
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut root = None;
    let mut runtime_root = None;
    let mut index = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        let slot = match name.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--version" | "-V" => return Ok(Command::Version),
            "--index" if inline.is_none() => {
                index = true;
                continue;
            }
            "--index" => return Err("--index takes no value".into()),
            "--root" => &mut root,
            "--runtime-root" => &mut runtime_root,
            _ => return Err(format!("unknown argument \"{arg}\"")),
        };
        let value = match inline {
            Some(value) => value.to_string(),
            None => args.next().ok_or_else(|| format!("{name} needs a value"))?,
        };
        if value.is_empty() || value.contains('\0') {
            return Err(format!("{name} needs a non-empty path"));
        }
        if slot.replace(PathBuf::from(value)).is_some() {
            return Err(format!("{name} is given twice"));
        }
    }
    let root = root.ok_or("--root DIR is required")?;
    if let Some(runtime) = &runtime_root {
        if !runtime.is_absolute() {
            return Err(format!(
                "--runtime-root must be an absolute path, got \"{}\"",
                runtime.display()
            ));
        }
    }
    Ok(Command::Serve {
        root,
        runtime_root,
        index,
    })
}

fn usage_error(message: &str) -> ! {
    eprintln!("{NAME}: {message}\n\n{USAGE}");
    std::process::exit(2);
}

fn main() {
    let command = parse_args(std::env::args().skip(1)).unwrap_or_else(|e| usage_error(&e));
    let (root, runtime_root, index) = match command {
        Command::Help => {
            println!("{USAGE}");
            return;
        }
        Command::Version => {
            println!("{NAME} {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Command::Serve {
            root,
            runtime_root,
            index,
        } => (root, runtime_root, index),
    };
    std::process::exit(serve(root, runtime_root, index));
}

#[cfg(unix)]
fn serve(root: PathBuf, runtime_root: Option<PathBuf>, index: bool) -> i32 {
    use std::os::fd::AsFd;
    use std::sync::Arc;

    use pi_native_ops_core::root::Root;

    /// Bytes read from stdin at once: many small frames per read, and a large payload in few.
    const INPUT_BUFFER: usize = 64 << 10;
    /// Bytes asked of a stdin/stdout pipe: one largest data frame, and the most an unprivileged
    /// process may ask for by default (`/proc/sys/fs/pipe-max-size`).
    #[cfg(target_os = "linux")]
    const PIPE_BYTES: libc::c_int = 1 << 20;

    // Relative to where the server starts, made absolute lexically (as js/fs.js's path.resolve),
    // so no relative alias of the root exists.
    let host_root = std::path::absolute(&root).unwrap_or(root);
    let runtime_root = runtime_root.map(|r| std::path::absolute(&r).unwrap_or(r));
    let root = match Root::open(&host_root, runtime_root.as_deref()) {
        Ok(root) => root,
        Err(e) => usage_error(&e.to_string()),
    };
    let workspace = Arc::new(conn::Workspace {
        root: Arc::new(root),
        host_root,
        index: index::WarmIndex::default(),
    });
    if index {
        // In the background: the hello goes out at once, and searches walk until it is ready.
        workspace.index.start(&workspace.root, None, None);
    }
    // The lanes every core call runs on; the reader (this thread) and the writer are plain
    // threads, so a call crosses only two hand-offs.
    let pools = match conn::Pools::new() {
        Ok(pools) => pools,
        Err(e) => {
            eprintln!("{NAME}: cannot start: {e}");
            return 1;
        }
    };
    // Our own descriptors for fds 0 and 1: std's handles add a buffer (and stdout a line buffer,
    // which would split frames at newlines).
    let (input, output) = match (
        std::io::stdin().as_fd().try_clone_to_owned(),
        std::io::stdout().as_fd().try_clone_to_owned(),
    ) {
        (Ok(input), Ok(output)) => (std::fs::File::from(input), std::fs::File::from(output)),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{NAME}: cannot use stdin and stdout: {e}");
            return 1;
        }
    };
    #[cfg(target_os = "linux")]
    for fd in [&input, &output] {
        use std::os::fd::AsRawFd;
        // When stdin/stdout are pipes (a child process of the client, ssh, docker exec), a larger
        // pipe lets a 1 MiB data frame go in one write instead of sixteen 64 KiB handoffs; on
        // anything else the call fails and nothing changes.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    }
    let input = std::io::BufReader::with_capacity(INPUT_BUFFER, input);
    let code = conn::serve(workspace, input, output, pools.lanes());
    // Leave without waiting for the blocking pool: a call stuck in the kernel (a read of a FIFO)
    // must not keep the process alive once the connection is gone; command trees are already
    // reaped by `serve`.
    std::process::exit(code);
}

#[cfg(not(unix))]
fn serve(_root: PathBuf, _runtime_root: Option<PathBuf>, _index: bool) -> i32 {
    eprintln!("{NAME}: not supported on this platform (the bounded root needs unix descriptors)");
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse(&["--root", "/w"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: false
            })
        );
        assert_eq!(
            parse(&["--index", "--root", "/w"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: true
            })
        );
        assert_eq!(
            parse(&["--root", "/w", "--index=yes"]),
            Err("--index takes no value".into())
        );
        assert_eq!(
            parse(&["--runtime-root=/workspace", "--root=w"]),
            Ok(Command::Serve {
                root: "w".into(),
                runtime_root: Some("/workspace".into()),
                index: false
            })
        );
        assert_eq!(parse(&["--version"]), Ok(Command::Version));
        assert_eq!(parse(&["--root", "/w", "--help"]), Ok(Command::Help));
        assert_eq!(parse(&[]), Err("--root DIR is required".into()));
        assert_eq!(parse(&["--root"]), Err("--root needs a value".into()));
        assert_eq!(
            parse(&["--root", ""]),
            Err("--root needs a non-empty path".into())
        );
        assert_eq!(
            parse(&["--root", "/a", "--root", "/b"]),
            Err("--root is given twice".into())
        );
        assert_eq!(parse(&["/w"]), Err("unknown argument \"/w\"".into()));
        assert!(parse(&["--root", "/w", "--runtime-root", "rel"])
            .unwrap_err()
            .contains("absolute"));
    }
}
