//! The opt-in sandbox of a shell (`ExecRequest::sandbox`). Two modes, both Linux-only:
//!
//! - **Namespaces**: a template built once per `Prepared` sandbox holds a user, a mount (the
//!   finished root: the workspace read-write at `runtime_root`, system directories read-only,
//!   secrets masked, a minimal `/dev`) and, without network, a network namespace. For each command
//!   the supervisor joins them and starts a small init in new mount, PID, IPC and UTS namespaces,
//!   which adds a fresh `/proc` and a private `/tmp` and `/dev/shm` and starts the shell as its
//!   PID 2. When the shell exits, init exits with its code and the kernel kills whatever is left
//!   in the namespace.
//! - **Landlock**: no namespaces and no path remapping; the shell is confined by a Landlock
//!   ruleset (reads and writes only where allowed) and seccomp (no `socket` but `AF_UNIX` when the
//!   network is off).
//!
//! Both drop every capability, set `no_new_privs` and install the seccomp filter of `seccomp.rs`
//! just before `execve`. Everything the helper's processes use (paths, map contents, the BPF
//! program, the Landlock ruleset's descriptor) is built here, in Node, and handed to the sandbox
//! helper (`exec::helper`) as plain data: nothing of Node goes into the sandbox.
//!
//! ```
//! use pi_native_ops_core::exec::sandbox::{Prepared, Sandbox};
//!
//! let dir = tempfile::tempdir()?;
//! let spec = Sandbox::new(dir.path());
//! // The face names the sandbox helper first (`exec::helper::set_path`: the napi face gives the
//! // platform's pi-native-ops-server; the server uses its own executable). Without one, no
//! // sandbox is made: refused when it is prepared, never run unconfined.
//! assert!(Prepared::open(spec).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;

/// Where the workspace appears inside the namespaces sandbox unless told otherwise.
pub const DEFAULT_RUNTIME_ROOT: &str = "/workspace";
/// Processes a sandbox may hold at once unless told otherwise: far above what a build or test
/// run forks, far below what exhausts a machine.
pub const DEFAULT_MAX_PROCESSES: u32 = 512;
/// The default size of each private tmpfs (`/tmp`, `/dev/shm`) of a namespaces command is the
/// machine's RAM divided by this, at most `DEFAULT_TMP_SIZE_MAX`: both full take a quarter of the
/// RAM of a small machine, and `HOME=/tmp` still holds a package manager's cache.
pub const DEFAULT_TMP_RAM_SHARE: u64 = 8;
/// The most the default size of each private tmpfs is, in bytes (2 GiB).
pub const DEFAULT_TMP_SIZE_MAX: u64 = 2 << 30;

/// `tmpSize` unless told otherwise: `min(RAM / DEFAULT_TMP_RAM_SHARE, DEFAULT_TMP_SIZE_MAX)` bytes.
pub fn default_tmp_size() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysinfo fills the struct it is given.
        let ram = unsafe {
            let mut info: libc::sysinfo = std::mem::zeroed();
            (libc::sysinfo(&mut info) == 0)
                .then(|| (info.totalram as u64).saturating_mul(u64::from(info.mem_unit)))
        };
        if let Some(ram) = ram.filter(|&r| r > 0) {
            return (ram / DEFAULT_TMP_RAM_SHARE).min(DEFAULT_TMP_SIZE_MAX);
        }
    }
    DEFAULT_TMP_SIZE_MAX
}

/// Which sandbox to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Namespaces when this machine allows them, else Landlock; an error when neither works.
    #[default]
    Auto,
    /// User, mount, PID, IPC and network namespaces: the shell sees only the bound paths.
    Namespaces,
    /// Landlock and seccomp on the host's filesystem view: writes only to the writable paths.
    Landlock,
}

impl Mode {
    /// Every mode, by the name the faces take (`"auto"`, `"namespaces"`, `"landlock"`), in the
    /// order their refusals list them.
    pub const NAMES: [(Mode, &'static str); 3] = [
        (Mode::Auto, "auto"),
        (Mode::Namespaces, "namespaces"),
        (Mode::Landlock, "landlock"),
    ];

    /// The mode named `name`, or the sandbox's refusal of a name it does not know.
    pub fn from_name(name: &str) -> Result<Mode, crate::error::Error> {
        Mode::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(mode, _)| *mode)
            .ok_or_else(|| {
                crate::error::Error::sandbox_unavailable(format!(
                    "mode must be \"auto\", \"namespaces\" or \"landlock\", got {name:?}"
                ))
            })
    }

    /// The mode's name, as `from_name` takes it.
    pub fn name(self) -> &'static str {
        Mode::NAMES
            .iter()
            .find(|(mode, _)| *mode == self)
            .map_or("auto", |(_, name)| name)
    }
}

/// A sandbox for one exec. `ExecRequest::cwd` is in runtime form (under `runtime_root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The host workspace, bound read-write.
    pub root: PathBuf,
    /// Where `root` appears inside (namespaces mode); Landlock mode requires it to equal `root`.
    pub runtime_root: PathBuf,
    /// Share the host's network (`false`: no network at all but a private loopback).
    pub network: bool,
    /// With `network` off: the hosts the sandbox may still reach, through the proxy this package
    /// runs (`proxy/`; namespaces mode only, Landlock mode refuses it).
    pub network_allow: Option<NetworkAllow>,
    /// Host paths bound read-only at the same path.
    pub read_only: Vec<PathBuf>,
    /// Host paths bound read-write at the same path.
    pub read_write: Vec<PathBuf>,
    /// `KEY=VALUE` entries (as `ExecRequest::env`) added to the sandbox's clean environment,
    /// replacing a default of the same name (the request's `env` is ignored).
    pub env: Vec<String>,
    /// Which mode to build.
    pub mode: Mode,
    /// Most processes at once (`None`: `DEFAULT_MAX_PROCESSES`).
    pub max_processes: Option<u32>,
    /// Bytes each private tmpfs (`/tmp`, `/dev/shm`) of a namespaces command may hold (`None`:
    /// `default_tmp_size()`). Landlock mode's temp dir is on the host's `/tmp`.
    pub tmp_size: Option<u64>,
    /// The workspace policy the shell is held to (`crate::policy`): its denied-read and
    /// denied-write paths, and the protected defaults unless `protect` is false. Compiled when the
    /// sandbox is prepared (a bad rule is refused then); enforced in both modes by the
    /// notification handler (`notify/guard/`).
    pub policy: crate::policy::PolicySpec,
}

impl Sandbox {
    /// The default sandbox of `root`: at `/workspace`, no network, auto mode.
    pub fn new(root: impl Into<PathBuf>) -> Sandbox {
        Sandbox {
            root: root.into(),
            runtime_root: PathBuf::from(DEFAULT_RUNTIME_ROOT),
            network: false,
            network_allow: None,
            read_only: Vec::new(),
            read_write: Vec::new(),
            env: Vec::new(),
            mode: Mode::Auto,
            max_processes: None,
            tmp_size: None,
            policy: crate::policy::PolicySpec::from_raw(None, None, None),
        }
    }

    /// The one place a face's sandbox options become a `Sandbox`: every default (`new`'s) and
    /// every refusal of their values (ESANDBOX), for the napi binding and the server alike.
    pub fn from_raw(raw: RawSandbox) -> Result<Sandbox, crate::error::Error> {
        let invalid = |why: String| crate::error::Error::sandbox_unavailable(why);
        let mode = match raw.mode.as_deref() {
            None => Mode::default(),
            Some(name) => Mode::from_name(name)?,
        };
        let paths = |list: Option<Vec<String>>| {
            list.unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect()
        };
        let mut spec = Sandbox::new(raw.root);
        if let Some(runtime_root) = raw.runtime_root {
            spec.runtime_root = runtime_root.into();
        }
        spec.network = raw.network.unwrap_or(false);
        if raw.network_allow.is_some() || raw.network_headers.is_some() {
            let mut headers = Vec::new();
            for triple in raw.network_headers.unwrap_or_default() {
                let [host, name, value]: [String; 3] = triple.try_into().map_err(|_| {
                    invalid("network headers must be [host, name, value] triples".into())
                })?;
                headers.push((host, name, value));
            }
            spec.network_allow = Some(NetworkAllow {
                allow: raw.network_allow.unwrap_or_default(),
                headers,
            });
        }
        spec.read_only = paths(raw.read_only);
        spec.read_write = paths(raw.read_write);
        spec.env = raw.env.unwrap_or_default();
        spec.mode = mode;
        spec.max_processes = raw.max_processes;
        spec.tmp_size =
            match raw.tmp_size {
                Some(bytes) => Some(u64::try_from(bytes).map_err(|_| {
                    invalid(format!("tmpSize must be a number of bytes, got {bytes}"))
                })?),
                None => None,
            };
        if let Some(policy) = raw.policy {
            spec.policy = policy;
        }
        Ok(spec)
    }
}

/// A sandbox's options as a face receives them (JS's `sandbox` option, the server's `--sandbox`):
/// absent is the default, `Sandbox::from_raw` decides the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSandbox {
    /// The host workspace.
    pub root: String,
    /// Where the root appears inside; absent: `DEFAULT_RUNTIME_ROOT`.
    pub runtime_root: Option<String>,
    /// Share the host's network; absent: no.
    pub network: Option<bool>,
    /// With `network` off: the hosts reachable through the sandbox's proxy (namespaces mode).
    pub network_allow: Option<Vec<String>>,
    /// `[host pattern, header name, value]` triples added to plain `http://` requests.
    pub network_headers: Option<Vec<Vec<String>>>,
    /// Host paths bound read-only.
    pub read_only: Option<Vec<String>>,
    /// Host paths bound read-write.
    pub read_write: Option<Vec<String>>,
    /// `KEY=VALUE` entries added to the sandbox's clean environment.
    pub env: Option<Vec<String>>,
    /// A name of `Mode::NAMES`; absent: `"auto"`.
    pub mode: Option<String>,
    /// Most processes at once; absent: `DEFAULT_MAX_PROCESSES`.
    pub max_processes: Option<u32>,
    /// Bytes of each private tmpfs; absent: `default_tmp_size()`.
    pub tmp_size: Option<i64>,
    /// The workspace policy the shell is held to; absent: the protected defaults.
    pub policy: Option<crate::policy::PolicySpec>,
}

/// Why `network.allow` is refused in Landlock mode (said once, wherever it is found out).
#[cfg(target_os = "linux")]
pub(crate) fn network_allow_needs_namespaces() -> String {
    "network.allow needs namespaces mode: Landlock confines connections by port, not by host, so \
     a Landlock sandbox cannot keep the shell to the allowed hosts (use mode \"namespaces\" where \
     user namespaces are allowed, or network: true/false)"
        .into()
}

/// `network: { allow, headers }`: what the sandbox may reach through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkAllow {
    /// Host names (`registry.npmjs.org`), subdomain patterns (`*.github.com`: subdomains only)
    /// and IP addresses (allowed only when listed literally).
    pub allow: Vec<String>,
    /// `(host pattern, header name, value)`: added to plain `http://` requests to matching hosts
    /// (a tunnel's TLS is never touched), replacing a header of the same name.
    pub headers: Vec<(String, String, String)>,
}

/// A sandbox prepared for any number of execs (clones share it). Its configured paths are
/// resolved, to descriptors, when it is made (`paths.rs`); its plan, and in namespaces mode the
/// template, are built on the first exec and kept until the last clone is dropped. Each exec first
/// checks that every configured path still names what it named, and is refused if not.
#[derive(Clone)]
pub struct Prepared(std::sync::Arc<Shared>);

struct Shared {
    spec: Sandbox,
    /// Where the shell's policy events go (`Prepared::with_events`).
    events: Option<crate::policy::EventSink>,
    /// The compiled policy (`None`: it restricts nothing), or why it cannot be.
    #[cfg(target_os = "linux")]
    guard: Result<Option<std::sync::Arc<notify::guard::Guard>>, crate::error::Error>,
    #[cfg(target_os = "linux")]
    paths: Result<paths::Resolved, crate::error::Error>,
    #[cfg(unix)]
    built: std::sync::Mutex<Option<std::sync::Arc<Plan>>>,
}

impl From<Sandbox> for Prepared {
    fn from(spec: Sandbox) -> Prepared {
        Prepared::new(spec)
    }
}

impl Prepared {
    /// Resolves the configured paths now; what fails is reported by every exec.
    pub fn new(spec: Sandbox) -> Prepared {
        Prepared::with_events(spec, None)
    }

    /// `new`, with the sink the shell's policy events go to: each refusal of the policy in a
    /// command is one `PolicyEvent { tool: "bash", command: Some(the command), target:
    /// Read(path) | Write(path) (runtime form), rule, allowed: false }`, called on the
    /// sandbox's handler thread (the sink must not block). What else a sandbox reports (the
    /// network proxy's `Connect` events) goes to the same sink: `Prepared::events`.
    pub fn with_events(spec: Sandbox, events: Option<crate::policy::EventSink>) -> Prepared {
        let policy = crate::policy::Policy::new(&spec.policy).map(std::sync::Arc::new);
        Prepared::build(spec, policy, events)
    }

    /// `open_with_events`, holding the shell to `policy`, already compiled, instead of compiling
    /// `spec.policy` (which is then ignored): the remote server's policy, a client's over the
    /// operator's `--policy` floor, which no spec expresses.
    pub fn open_with_policy(
        spec: Sandbox,
        policy: std::sync::Arc<crate::policy::Policy>,
        events: Option<crate::policy::EventSink>,
    ) -> Result<Prepared, crate::error::Error> {
        let prepared = Prepared::build(spec, Ok(policy), events);
        #[cfg(target_os = "linux")]
        if let Err(e) = prepared.0.paths.as_ref().and(prepared.0.guard.as_ref()) {
            return Err(e.clone());
        }
        Ok(prepared)
    }

    fn build(
        spec: Sandbox,
        policy: Result<std::sync::Arc<crate::policy::Policy>, crate::error::Error>,
        events: Option<crate::policy::EventSink>,
    ) -> Prepared {
        #[cfg(not(target_os = "linux"))]
        let _ = policy;
        #[cfg(target_os = "linux")]
        let paths = {
            // Which nestings can be enforced depends on the mode; only readOnly paths have any.
            let mode = match spec.mode {
                Mode::Auto if !spec.read_only.is_empty() => support().auto(),
                Mode::Auto => None,
                mode => Some(mode),
            };
            check_network(&spec).and_then(|()| paths::Resolved::open(&spec, mode))
        };
        #[cfg(target_os = "linux")]
        let guard = policy.and_then(|policy| {
            let Ok(paths) = &paths else {
                return Ok(None);
            };
            let root = paths.root();
            notify::guard::Guard::new(
                policy,
                (&root.real, std::os::fd::AsFd::as_fd(&root.fd)),
                &spec.runtime_root,
                events.clone(),
            )
            .map(|g| g.map(std::sync::Arc::new))
            .map_err(|e| {
                crate::error::Error::sandbox_unavailable(format!("cannot hold the workspace: {e}"))
            })
            .and_then(|guard| match guard {
                // Refused now rather than enforced less: every rule rests on user notification.
                Some(_) if !notify::available() => Err(crate::error::Error::sandbox_unavailable(
                    plan::policy_unenforceable(spec.mode),
                )),
                guard => Ok(guard),
            })
        });
        Prepared(std::sync::Arc::new(Shared {
            spec,
            events,
            #[cfg(target_os = "linux")]
            guard,
            #[cfg(target_os = "linux")]
            paths,
            #[cfg(unix)]
            built: std::sync::Mutex::new(None),
        }))
    }

    /// `new`, with its error now: a configured path that cannot be opened, passes through a
    /// symlink where the sandbox's commands can write, or nests where the mode cannot enforce it.
    pub fn open(spec: Sandbox) -> Result<Prepared, crate::error::Error> {
        // No helper, no sandbox: refused when it is made, never run unconfined.
        #[cfg(target_os = "linux")]
        crate::exec::launch::image()?;
        let prepared = Prepared::new(spec);
        #[cfg(target_os = "linux")]
        if let Err(e) = &prepared.0.paths {
            return Err(e.clone());
        }
        #[cfg(target_os = "linux")]
        if let Err(e) = &prepared.0.guard {
            return Err(e.clone());
        }
        Ok(prepared)
    }

    /// `with_events`, with its error now (as `open`).
    pub fn open_with_events(
        spec: Sandbox,
        events: Option<crate::policy::EventSink>,
    ) -> Result<Prepared, crate::error::Error> {
        #[cfg(target_os = "linux")]
        crate::exec::launch::image()?;
        let prepared = Prepared::with_events(spec, events);
        #[cfg(target_os = "linux")]
        if let Err(e) = prepared.0.paths.as_ref().and(prepared.0.guard.as_ref()) {
            return Err(e.clone());
        }
        Ok(prepared)
    }

    /// The sink this sandbox's events go to, if any: what reports for the sandbox (the policy's
    /// guard, the network proxy) calls it.
    pub fn events(&self) -> Option<&crate::policy::EventSink> {
        self.0.events.as_ref()
    }

    /// The guard's side of one exec of `command` (`None`: the policy restricts nothing).
    #[cfg(target_os = "linux")]
    pub(super) fn guard_session(&self, command: &str) -> Option<notify::guard::Session> {
        match &self.0.guard {
            Ok(Some(guard)) => Some(notify::guard::Session::new(
                std::sync::Arc::clone(guard),
                command,
            )),
            _ => None,
        }
    }

    /// The sandbox this was prepared from.
    pub fn spec(&self) -> &Sandbox {
        &self.0.spec
    }

    /// The plan of one exec, and (Landlock mode) its private temp dir to remove afterwards.
    #[cfg(unix)]
    pub(super) fn plan(&self) -> std::io::Result<(std::sync::Arc<Plan>, Option<TempDir>)> {
        #[cfg(target_os = "linux")]
        let paths = {
            let paths = self
                .0
                .paths
                .as_ref()
                .map_err(|e| std::io::Error::other(e.clone()))?;
            paths.check().map_err(std::io::Error::other)?;
            paths
        };
        #[cfg(target_os = "linux")]
        let guard = match &self.0.guard {
            Ok(guard) => guard.as_ref().map(|g| g.filter()),
            Err(e) => return Err(std::io::Error::other(e.clone())),
        };
        let mut built = self
            .0
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(plan) = built.as_ref() {
            return Ok((std::sync::Arc::clone(plan), None));
        }
        #[cfg(target_os = "linux")]
        let mode = match self.0.spec.mode {
            Mode::Auto => {
                let support = support();
                support
                    .auto()
                    .ok_or_else(|| setup::unavailable(support.explain()))?
            }
            mode => mode,
        };
        #[cfg(target_os = "linux")]
        let mut plan = Plan::new(&self.0.spec, paths, guard, mode)?;
        #[cfg(not(target_os = "linux"))]
        let mut plan = Plan::new(&self.0.spec)?;
        let temp = plan.take_temp_dir();
        let plan = std::sync::Arc::new(plan);
        if plan.reusable() {
            *built = Some(std::sync::Arc::clone(&plan));
        }
        Ok((plan, temp))
    }
}

/// `network_allow` is usable: its entries are valid, `network` is off, and the mode is namespaces
/// (Landlock rules name ports, not hosts: the allow-list is refused there, never ignored).
#[cfg(target_os = "linux")]
fn check_network(spec: &Sandbox) -> Result<(), crate::error::Error> {
    let Some(allow) = &spec.network_allow else {
        return Ok(());
    };
    let refuse = |why: String| Err(crate::error::Error::sandbox_unavailable(why));
    if spec.network {
        return refuse("network is either true, false or { allow }, not both".into());
    }
    if let Err(why) = proxy::Rules::new(allow) {
        return refuse(why);
    }
    let mode = match spec.mode {
        Mode::Auto => support().auto(),
        mode => Some(mode),
    };
    if mode == Some(Mode::Landlock) {
        return refuse(network_allow_needs_namespaces());
    }
    Ok(())
}

/// What this machine offers, for an agent's startup check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// `std::env::consts::OS`.
    pub platform: &'static str,
    /// The kernel release (`uname -r`), where there is one.
    pub kernel: Option<String>,
    /// Namespaces mode works (probed by running a sandboxed `:`), or why not.
    pub namespaces: Result<(), String>,
    /// The Landlock ABI version; 0 without Landlock.
    pub landlock_abi: u32,
    /// Why Landlock is missing, if it is.
    pub landlock_error: Option<String>,
    /// seccomp filters can be installed.
    pub seccomp: bool,
    /// seccomp user notification works here (a filter with a listener can be installed): what
    /// refuses metadata changes outside the writable areas in Landlock mode, and locks on host
    /// files in both modes.
    pub user_notification: bool,
}

/// What one mode confines on this machine: each field is a guarantee the tests show, `false`
/// where this kernel lacks what it needs (an agent can refuse to start without one it needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarantees {
    /// Files are read, written, created and removed only where allowed.
    pub files: bool,
    /// Truncating a file outside the writable paths is refused (Landlock ABI 3).
    pub truncate: bool,
    /// `ioctl` on devices outside the allowed few is refused (Landlock ABI 5).
    pub device_ioctl: bool,
    /// No socket reaches the host's network unless `network` is on; never `AF_VSOCK` or another
    /// family outside the allow-list (seccomp).
    pub network: bool,
    /// Signals reach only the sandbox's own processes (namespaces: a PID namespace; Landlock:
    /// signal scoping, ABI 6).
    pub signals: bool,
    /// Abstract Unix sockets outside the sandbox cannot be reached (a network namespace; Landlock
    /// ABI 6).
    pub abstract_unix_sockets: bool,
    /// Other processes' limits, priorities, CPU placement and I/O class, and the host's System V
    /// IPC objects, are out of reach (a PID and an IPC namespace; in Landlock mode, seccomp).
    pub other_processes: bool,
    /// No setuid or setgid bit is ever set (seccomp).
    pub set_id_bits: bool,
    /// Everything the command started ends when it does.
    pub process_lifetime: bool,
    /// Modes, owners, times and xattrs change only inside the writable paths (namespaces: the
    /// rest is mounted read-only; Landlock: seccomp user notification).
    pub metadata: bool,
    /// No lock (`flock`, `fcntl`, OFD) is taken on a file outside the writable paths, where it
    /// could stop host programs (seccomp user notification).
    pub locks: bool,
}

impl Support {
    /// What `mode` confines here; `None` when the mode is unavailable (`Auto`: the mode it picks).
    pub fn guarantees(&self, mode: Mode) -> Option<Guarantees> {
        let seccomp = self.seccomp;
        match mode {
            Mode::Auto => self.auto().and_then(|mode| self.guarantees(mode)),
            Mode::Namespaces => self.namespaces.is_ok().then_some(Guarantees {
                files: true,
                truncate: true,
                device_ioctl: true,
                network: seccomp,
                signals: true,
                abstract_unix_sockets: true,
                other_processes: true,
                set_id_bits: seccomp,
                process_lifetime: true,
                metadata: true,
                locks: self.user_notification,
            }),
            Mode::Landlock => {
                let abi = self.landlock_abi;
                (abi >= 1 && seccomp).then_some(Guarantees {
                    files: true,
                    truncate: abi >= 3,
                    device_ioctl: abi >= 5,
                    network: true,
                    signals: abi >= 6,
                    abstract_unix_sockets: abi >= 6,
                    other_processes: true,
                    set_id_bits: true,
                    process_lifetime: true,
                    metadata: self.user_notification,
                    locks: self.user_notification,
                })
            }
        }
    }

    /// What `Mode::Auto` picks: `None` when no sandbox can be built here.
    pub fn auto(&self) -> Option<Mode> {
        if self.namespaces.is_ok() {
            Some(Mode::Namespaces)
        } else if self.landlock_abi >= 1 && self.seccomp {
            Some(Mode::Landlock)
        } else {
            None
        }
    }

    /// Why no sandbox is possible, and what to do: for `SandboxUnavailable`.
    pub fn explain(&self) -> String {
        let kernel = self.kernel.as_deref().unwrap_or("unknown");
        let namespaces = match &self.namespaces {
            Ok(()) => "usable".to_string(),
            Err(why) => why.clone(),
        };
        let landlock = match (&self.landlock_error, self.landlock_abi) {
            (Some(why), _) => why.clone(),
            (None, abi) => format!("ABI {abi}"),
        };
        format!(
            "no sandbox mode works on this machine ({}, kernel {kernel}; user namespaces: \
             {namespaces}; Landlock: {landlock}; seccomp: {}). Allow unprivileged user namespaces \
             (e.g. sysctl kernel.apparmor_restrict_unprivileged_userns=0 or \
             kernel.unprivileged_userns_clone=1), or use a Linux kernel >= 5.13 with Landlock \
             enabled (lsm= boot parameter), or run pi inside a container or VM",
            self.platform,
            if self.seccomp { "yes" } else { "no" }
        )
    }
}

#[cfg(target_os = "linux")]
mod bpf;
#[cfg(target_os = "linux")]
mod landlock;
#[cfg(target_os = "linux")]
mod namespaces;
#[cfg(target_os = "linux")]
pub(super) mod notify;
#[cfg(target_os = "linux")]
mod paths;
#[cfg(target_os = "linux")]
mod plan;
#[cfg(target_os = "linux")]
mod policy;
#[cfg(target_os = "linux")]
pub(crate) mod proxy;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
pub(super) mod setup;
#[cfg(target_os = "linux")]
mod support;

#[cfg(target_os = "linux")]
pub(super) use plan::Plan;
#[cfg(target_os = "linux")]
pub use support::support;

/// A private temp dir of the sandbox (Landlock mode), removed with everything in it on drop.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    /// A fresh `pi-sandbox-XXXXXX` directory (mode 0700) in the system temp dir.
    #[cfg(target_os = "linux")]
    fn new() -> std::io::Result<TempDir> {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let mut template = std::env::temp_dir()
            .join("pi-sandbox-XXXXXX")
            .into_os_string()
            .into_vec();
        template.push(0);
        // SAFETY: a NUL-terminated template mkdtemp rewrites in place.
        if unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) }.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        template.pop();
        Ok(TempDir(PathBuf::from(std::ffi::OsStr::from_bytes(
            &template,
        ))))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Off Linux no plan can exist: asking for one fails with the reason.
#[cfg(all(unix, not(target_os = "linux")))]
pub(super) enum Plan {}

#[cfg(all(unix, not(target_os = "linux")))]
impl Plan {
    pub(super) fn new(_sandbox: &Sandbox) -> std::io::Result<Plan> {
        Err(std::io::Error::other(
            crate::error::Error::sandbox_unavailable(support().explain()),
        ))
    }
    pub(super) fn env(&self) -> &[String] {
        match *self {}
    }
    pub(super) fn take_temp_dir(&mut self) -> Option<TempDir> {
        match *self {}
    }
    pub(super) fn reusable(&self) -> bool {
        match *self {}
    }
    pub(super) fn setup_error(&self, _value: i32) -> Option<std::io::Error> {
        match *self {}
    }
}

/// What this machine offers: nothing, off Linux.
#[cfg(not(target_os = "linux"))]
pub fn support() -> Support {
    Support {
        platform: std::env::consts::OS,
        kernel: None,
        namespaces: Err("the sandbox is only implemented on Linux".into()),
        landlock_abi: 0,
        landlock_error: Some("Landlock is a Linux security module".into()),
        seccomp: false,
        user_notification: false,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
