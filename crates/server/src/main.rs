//! pi-native-ops-server: serves one workspace's native Operations over stdin/stdout, with the
//! protocol of docs/protocol.md. A second face on `pi_native_ops_core`, beside the napi binding:
//! it converts and dispatches, and the core decides (bounds, rules, errors, messages).

#![deny(clippy::all)]
// Every unsafe operation sits in an `unsafe` block with a `// SAFETY:` comment giving its reason,
// also inside an `unsafe fn` (whose `# Safety` section states what its callers must keep).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(unix)]
mod admission;
#[cfg(unix)]
mod budget;
#[cfg(unix)]
mod conn;
#[cfg(unix)]
mod events;
#[cfg(unix)]
mod frame;
#[cfg(all(unix, test))]
mod fuzz;
#[cfg(unix)]
mod index;
#[cfg(unix)]
mod listen;
#[cfg(unix)]
mod ops;
#[cfg(unix)]
mod outbox;
#[cfg(unix)]
mod secret;
#[cfg(unix)]
mod session;
#[cfg(unix)]
mod wire;

use std::path::PathBuf;
use std::time::Duration;

use pi_native_ops_core::exec::sandbox::Mode;

const NAME: &str = "pi-native-ops-server";

const USAGE: &str = "\
usage: pi-native-ops-server --root DIR [--runtime-root PATH] [--index]
                            [--pin-root] [--policy FILE]
                            [--sandbox [MODE] [--sandbox-network NET]]
                            [--listen HOST:PORT [--grace S] [--idle-timeout S]]

Serves the workspace DIR to one pi-native-ops client over stdin and stdout
(the protocol of docs/protocol.md), or with --listen over a WebSocket; logs
go to stderr.

  --root DIR            the workspace directory on this machine
  --runtime-root PATH   the absolute path the agent sees the workspace as
                        (default: DIR)
  --pin-root            keep the workspace directory opened at start even when
                        DIR comes to name another (default: each call
                        follows DIR, as Node's fs does)
  --index               start the warm search index of DIR at once (Linux),
                        so find and grep are fast from the first calls on
                        (started again under a client's own policy);
                        a client may also start it (connect's index option)
  --policy FILE         a policy no client can loosen: JSON
                        {\"denyRead\": [...], \"denyWrite\": [...], \"protect\": bool}
                        (rules are gitignore lines relative to DIR); a
                        client's policy (connect's policy option) only adds
                        rules to it
  --sandbox [MODE]      run every command (the bash tool) in the sandbox
                        of this package (Linux), MODE auto (default),
                        namespaces or landlock, with the workspace as its
                        root, held to the connection's policy (refusals go
                        to the client's onPolicyEvent). Without it,
                        commands run unconfined: the policy holds for the
                        file tools only. A sandbox this machine cannot
                        make fails each command with ESANDBOX; no command
                        ever runs unsandboxed
  --sandbox-network NET the sandboxed commands' network: false (default:
                        none but a private loopback), true (the host's),
                        or a JSON array of hosts reachable through the
                        package's proxy, such as
                        '[\"registry.npmjs.org\",\"*.github.com\"]'
                        (namespaces mode)
  --listen HOST:PORT    serve one client session over a WebSocket on this
                        address (port 0: any free port) instead of stdio;
                        prints `listening on HOST:PORT` to stdout once bound.
                        The client must present the token in the environment
                        variable PI_NATIVE_OPS_TOKEN (required; never an
                        argument), as `Authorization: Bearer TOKEN` or a
                        Sec-WebSocket-Protocol entry pi-native-ops.token.TOKEN.
                        Plain ws:// only: put TLS in front (the platform's
                        proxy does) before the port leaves the machine.
  --grace S             after a dropped connection, keep the session S
                        seconds for the client to resume it (default 60);
                        then stop its calls, kill its commands and exit
  --idle-timeout S      exit when no session has started within S seconds
                        (default 300)
  --version             print the version
  --help                print this help";

/// `--grace` by default: long enough for a client to notice a drop and redial through a proxy.
const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// `--idle-timeout` by default: a server started for a client that never came does not stay.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest `--grace` or `--idle-timeout` taken: a day.
const MAX_SECONDS: f64 = 86_400.0;

#[derive(Debug, PartialEq, Eq)]
struct Listen {
    address: String,
    grace: Duration,
    idle_timeout: Duration,
}

/// `--sandbox` and `--sandbox-network`: how every command of every connection is sandboxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellSandbox {
    pub mode: Mode,
    /// The host's network (`--sandbox-network true`).
    pub network: bool,
    /// Hosts reachable through the proxy (`--sandbox-network '[...]'`).
    pub allow: Option<Vec<String>>,
}

/// The core's sandbox mode names as `--sandbox` lists them: `auto, namespaces or landlock`.
fn mode_names() -> String {
    let names: Vec<&str> = Mode::NAMES.iter().map(|(_, name)| *name).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `--sandbox-network`'s value: `false`, `true` or a JSON array of host patterns.
fn sandbox_network(value: &str) -> Result<(bool, Option<Vec<String>>), String> {
    match value {
        "false" => Ok((false, None)),
        "true" => Ok((true, None)),
        _ => serde_json::from_str::<Vec<String>>(value)
            .map(|hosts| (false, Some(hosts)))
            .map_err(|_| {
                format!(
                    "--sandbox-network takes false, true or a JSON array of hosts, got \"{value}\""
                )
            }),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Serve {
        root: PathBuf,
        runtime_root: Option<PathBuf>,
        index: bool,
        policy: Option<PathBuf>,
        listen: Option<Listen>,
        sandbox: Option<ShellSandbox>,
        /// `--pin-root`: the root stays the directory opened at start.
        pin_root: bool,
    },
    Version,
    Help,
}

fn seconds(name: &str, value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| (0.0..=MAX_SECONDS).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{name} takes seconds from 0 to {MAX_SECONDS}, got \"{value}\""))
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut root = None;
    let mut runtime_root = None;
    let mut policy = None;
    let mut index = false;
    let mut pin_root = false;
    let mut address: Option<String> = None;
    let mut grace = None;
    let mut idle_timeout = None;
    let mut sandbox: Option<pi_native_ops_core::exec::sandbox::Mode> = None;
    let mut network: Option<(bool, Option<Vec<String>>)> = None;
    let mut args = args.into_iter().peekable();
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
            "--pin-root" if inline.is_none() => {
                pin_root = true;
                continue;
            }
            "--pin-root" => return Err("--pin-root takes no value".into()),
            "--sandbox" => {
                // The mode is optional: the next argument is taken only when it names one.
                let named = |v: &str| Mode::from_name(v).ok();
                let mode = match inline {
                    Some(value) => named(value).ok_or_else(|| {
                        format!("--sandbox takes {}, got \"{value}\"", mode_names())
                    })?,
                    None => match args.peek().and_then(|next| named(next)) {
                        Some(mode) => {
                            args.next();
                            mode
                        }
                        None => Mode::Auto,
                    },
                };
                if sandbox.replace(mode).is_some() {
                    return Err("--sandbox is given twice".into());
                }
                continue;
            }
            "--sandbox-network" => {
                let value = match inline {
                    Some(value) => value.to_string(),
                    None => args.next().ok_or("--sandbox-network needs a value")?,
                };
                if network.replace(sandbox_network(&value)?).is_some() {
                    return Err("--sandbox-network is given twice".into());
                }
                continue;
            }
            "--listen" | "--grace" | "--idle-timeout" => {
                let value = match inline {
                    Some(value) => value.to_string(),
                    None => args.next().ok_or_else(|| format!("{name} needs a value"))?,
                };
                let twice = match name.as_str() {
                    "--listen" => address.replace(value).is_some(),
                    "--grace" => grace.replace(seconds(&name, &value)?).is_some(),
                    _ => idle_timeout.replace(seconds(&name, &value)?).is_some(),
                };
                if twice {
                    return Err(format!("{name} is given twice"));
                }
                continue;
            }
            "--root" => &mut root,
            "--runtime-root" => &mut runtime_root,
            "--policy" => &mut policy,
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
    let listen = match address {
        Some(address) if !address.contains(':') => {
            return Err(format!("--listen takes HOST:PORT, got \"{address}\""))
        }
        Some(address) => Some(Listen {
            address,
            grace: grace.unwrap_or(DEFAULT_GRACE),
            idle_timeout: idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT),
        }),
        None if grace.is_some() || idle_timeout.is_some() => {
            return Err("--grace and --idle-timeout go with --listen".into())
        }
        None => None,
    };
    let sandbox = match (sandbox, network) {
        (Some(mode), network) => {
            let (network, allow) = network.unwrap_or((false, None));
            Some(ShellSandbox {
                mode,
                network,
                allow,
            })
        }
        (None, Some(_)) => return Err("--sandbox-network goes with --sandbox".into()),
        (None, None) => None,
    };
    Ok(Command::Serve {
        root,
        runtime_root,
        index,
        policy,
        listen,
        sandbox,
        pin_root,
    })
}

/// The largest `--policy` file read: far beyond any list of rules a person writes, and bounded
/// before it is read.
#[cfg(unix)]
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The `--policy` file: the options a client's `policy` takes, as JSON.
#[cfg(unix)]
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    deny_read: Option<Vec<String>>,
    deny_write: Option<Vec<String>>,
    protect: Option<bool>,
}

/// Reads and compiles the `--policy` file (the core decides what a rule is).
#[cfg(unix)]
fn read_policy(path: &std::path::Path) -> Result<pi_native_ops_core::policy::Policy, String> {
    use std::io::Read;
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("--policy {name}: {e}"))?;
    let mut text = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("--policy {name}: {e}"))?;
    if text.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!(
            "--policy {name}: larger than {MAX_POLICY_BYTES} bytes"
        ));
    }
    let file: PolicyFile =
        serde_json::from_slice(&text).map_err(|e| format!("--policy {name}: {e}"))?;
    let spec = pi_native_ops_core::policy::PolicySpec::from_raw(
        file.deny_read,
        file.deny_write,
        file.protect,
    );
    pi_native_ops_core::policy::Policy::new(&spec).map_err(|e| format!("--policy {name}: {e}"))
}

fn usage_error(message: &str) -> ! {
    eprintln!("{NAME}: {message}\n\n{USAGE}");
    std::process::exit(2);
}

fn main() {
    // Before anything else: a command the server runs may be of its user ("Secrets").
    #[cfg(unix)]
    secret::forbid_dumps();
    // This binary is also the sandbox helper (its supervisor, init and template builder): that
    // role runs and exits here; the server's own sandboxes use this executable as their helper.
    #[cfg(target_os = "linux")]
    {
        pi_native_ops_core::exec::helper::main_if_helper();
        pi_native_ops_core::exec::helper::use_current_exe();
    }
    let command = parse_args(std::env::args().skip(1)).unwrap_or_else(|e| usage_error(&e));
    let (root, runtime_root, index, policy, listen, sandbox, pin_root) = match command {
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
            policy,
            listen,
            sandbox,
            pin_root,
        } => (root, runtime_root, index, policy, listen, sandbox, pin_root),
    };
    std::process::exit(serve(
        root,
        runtime_root,
        index,
        policy,
        listen,
        sandbox,
        pin_root,
    ));
}

/// The token a `--listen` client must present, from the environment only (an argument would show
/// in every process listing and in the sandbox SDKs' command logs); the server keeps its digest
/// and nothing the commands it runs could read (secret.rs).
#[cfg(unix)]
fn take_token() -> secret::TokenDigest {
    use secret::{TokenError, TOKEN_VAR};
    // Still one thread: nothing reads the environment meanwhile.
    secret::take_token().unwrap_or_else(|e| match e {
        TokenError::Missing => usage_error(&format!(
            "--listen needs a token in the environment variable {TOKEN_VAR} (never an argument)"
        )),
        TokenError::Invalid => usage_error(&format!(
            "{TOKEN_VAR} may hold only letters, digits and . _ ~ - (it must fit a Sec-WebSocket-Protocol entry)"
        )),
    })
}

#[cfg(unix)]
fn serve(
    root: PathBuf,
    runtime_root: Option<PathBuf>,
    index: bool,
    policy: Option<PathBuf>,
    listen: Option<Listen>,
    sandbox: Option<ShellSandbox>,
    pin_root: bool,
) -> i32 {
    use std::os::fd::AsFd;

    use pi_native_ops_core::root::Root;

    /// Bytes read from stdin at once: many small frames per read, and a large payload in few.
    const INPUT_BUFFER: usize = 64 << 10;
    /// Bytes asked of a stdin/stdout pipe: one largest data frame, and the most an unprivileged
    /// process may ask for by default (`/proc/sys/fs/pipe-max-size`).
    #[cfg(target_os = "linux")]
    const PIPE_BYTES: libc::c_int = 1 << 20;

    let token = listen.as_ref().map(|_| take_token());
    let pinned = policy.map(|path| read_policy(&path).unwrap_or_else(|e| usage_error(&e)));
    // Relative to where the server starts, made absolute lexically (as js/fs.js's path.resolve),
    // so no relative alias of the root exists.
    let host_root = std::path::absolute(&root).unwrap_or(root);
    let runtime_root = runtime_root.map(|r| std::path::absolute(&r).unwrap_or(r));
    let root = match Root::open(&host_root, runtime_root.as_deref()) {
        Ok(root) => root.pinned(pin_root),
        Err(e) => usage_error(&e.to_string()),
    };
    // With `--index`, the index starts at once under the default policy, and again under a
    // client's own policy if it sets one.
    let site = conn::Site::new(root, host_root, pinned, index, sandbox)
        .unwrap_or_else(|e| usage_error(&e.to_string()));
    // The lanes every core call runs on; the reader (this thread) and the writer are plain
    // threads, so a call crosses only two hand-offs.
    let pools = match conn::Pools::new() {
        Ok(pools) => pools,
        Err(e) => {
            eprintln!("{NAME}: cannot start: {e}");
            return 1;
        }
    };
    if let (Some(listen), Some(token)) = (listen, token) {
        let options = listen::Options {
            address: listen.address,
            grace: listen.grace,
            idle_timeout: listen.idle_timeout,
            token,
        };
        let code = listen::serve(options, site, pools.lanes());
        // As below: no waiting for the blocking pool.
        std::process::exit(code);
    }
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
    let code = conn::serve(site, input, output, pools.lanes());
    // Leave without waiting for the blocking pool: a call stuck in the kernel (a read of a FIFO)
    // must not keep the process alive once the connection is gone; command trees are already
    // reaped by `serve`.
    std::process::exit(code);
}

#[cfg(not(unix))]
fn serve(
    _root: PathBuf,
    _runtime_root: Option<PathBuf>,
    _index: bool,
    _policy: Option<PathBuf>,
    _listen: Option<Listen>,
    _sandbox: Option<ShellSandbox>,
    _pin_root: bool,
) -> i32 {
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
    fn pin_root_is_a_flag() {
        assert!(matches!(
            parse(&["--root", "/w", "--pin-root"]),
            Ok(Command::Serve { pin_root: true, .. })
        ));
        assert_eq!(
            parse(&["--root", "/w", "--pin-root=yes"]),
            Err("--pin-root takes no value".into())
        );
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse(&["--root", "/w"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: false,
                policy: None,
                listen: None,
                sandbox: None,
                pin_root: false,
            })
        );
        assert_eq!(
            parse(&["--index", "--root", "/w"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: true,
                policy: None,
                listen: None,
                sandbox: None,
                pin_root: false,
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
                index: false,
                policy: None,
                listen: None,
                sandbox: None,
                pin_root: false,
            })
        );
        assert_eq!(
            parse(&["--root", "/w", "--policy", "p.json"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: false,
                policy: Some("p.json".into()),
                listen: None,
                sandbox: None,
                pin_root: false,
            })
        );
        assert_eq!(
            parse(&["--root", "/w", "--policy=a", "--policy=b"]),
            Err("--policy is given twice".into())
        );
        assert_eq!(parse(&["--version"]), Ok(Command::Version));
        let sandbox = |args: &[&str]| match parse(args) {
            Ok(Command::Serve { sandbox, .. }) => Ok(sandbox),
            other => Err(format!("{other:?}")),
        };
        use pi_native_ops_core::exec::sandbox::Mode;
        let plain = |mode| ShellSandbox {
            mode,
            network: false,
            allow: None,
        };
        assert_eq!(sandbox(&["--root", "/w"]), Ok(None));
        assert_eq!(
            sandbox(&["--root", "/w", "--sandbox"]),
            Ok(Some(plain(Mode::Auto)))
        );
        // The mode is optional: what follows is an argument of its own unless it names one.
        assert_eq!(
            sandbox(&["--sandbox", "--root", "/w"]),
            Ok(Some(plain(Mode::Auto)))
        );
        assert_eq!(
            sandbox(&["--sandbox", "landlock", "--root", "/w"]),
            Ok(Some(plain(Mode::Landlock)))
        );
        assert_eq!(
            sandbox(&["--root", "/w", "--sandbox=namespaces"]),
            Ok(Some(plain(Mode::Namespaces)))
        );
        assert_eq!(
            sandbox(&["--root", "/w", "--sandbox", "--sandbox-network", "true"]),
            Ok(Some(ShellSandbox {
                network: true,
                ..plain(Mode::Auto)
            }))
        );
        assert_eq!(
            sandbox(&[
                "--root",
                "/w",
                "--sandbox",
                "--sandbox-network=[\"localhost\",\"*.github.com\"]"
            ]),
            Ok(Some(ShellSandbox {
                allow: Some(vec!["localhost".into(), "*.github.com".into()]),
                ..plain(Mode::Auto)
            }))
        );
        assert_eq!(
            parse(&["--root", "/w", "--sandbox=chroot"]),
            Err("--sandbox takes auto, namespaces or landlock, got \"chroot\"".into())
        );
        assert_eq!(
            parse(&["--root", "/w", "--sandbox", "--sandbox"]),
            Err("--sandbox is given twice".into())
        );
        assert_eq!(
            parse(&["--root", "/w", "--sandbox-network", "false"]),
            Err("--sandbox-network goes with --sandbox".into())
        );
        assert!(
            parse(&["--root", "/w", "--sandbox", "--sandbox-network", "yes"])
                .unwrap_err()
                .contains("JSON array of hosts")
        );
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
        assert_eq!(
            parse(&["--root", "/w", "--listen", "127.0.0.1:0", "--grace=0.5"]),
            Ok(Command::Serve {
                root: "/w".into(),
                runtime_root: None,
                index: false,
                policy: None,
                listen: Some(Listen {
                    address: "127.0.0.1:0".into(),
                    grace: Duration::from_millis(500),
                    idle_timeout: DEFAULT_IDLE_TIMEOUT,
                }),
                sandbox: None,
                pin_root: false,
            })
        );
        assert_eq!(
            parse(&["--root", "/w", "--grace", "5"]),
            Err("--grace and --idle-timeout go with --listen".into())
        );
        assert_eq!(
            parse(&["--root", "/w", "--listen", "8080"]),
            Err("--listen takes HOST:PORT, got \"8080\"".into())
        );
        for bad in ["-1", "nan", "1e9", "x"] {
            assert!(
                parse(&["--root", "/w", "--listen", ":0", "--idle-timeout", bad])
                    .unwrap_err()
                    .contains("seconds from 0"),
                "{bad}"
            );
        }
    }
}
