//! napi binding for `pi_native_ops_core::exec`: starts an execution and streams its events to one JS callback.
//!
//! One threadsafe function carries both the chunks and the final result, so the result can never
//! overtake a chunk. At most `CHUNKS_IN_FLIGHT` chunks wait for JS at a time: the reader thread
//! blocks until JS has consumed them, the pipe fills up, and the command is slowed instead of
//! buffered.

use std::sync::{Arc, Condvar, Mutex};

use napi::bindgen_prelude::{FnArgs, Function, ToNapiValue};
use napi::sys;
use napi::threadsafe_function::{ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::{Env, Error, Result, Status};
use napi_derive::napi;

use crate::error::to_js;
use crate::policy_events::PolicyEventObject;
use pi_native_ops_core::error::errno_of;
use pi_native_ops_core::exec;
use pi_native_ops_core::exec::sandbox;
use pi_native_ops_core::policy::EventSink;
use pi_native_ops_core::Error as CoreError;

const CHUNKS_IN_FLIGHT: usize = 1;

#[napi(object)]
pub struct BashSpawnRequest {
    /// pi's `shellPath`; absent: found as pi finds one (`exec::preflight`).
    pub shell: Option<String>,
    pub command: String,
    /// As the agent gave it (runtime form in a sandbox).
    pub cwd: String,
    /// `KEY=VALUE` entries forming the whole environment; absent inherits Node's.
    pub env: Option<Vec<String>>,
    /// Run the shell sandboxed (then `env` is ignored and `cwd` is in runtime form).
    pub sandbox: Option<BashSandbox>,
    /// Which of pi's shell tools: `"bash"` (default) or `"powershell"` (pi 1.6's, Windows only;
    /// `shell` is ignored, the core finds PowerShell as pi does).
    #[napi(ts_type = "'bash' | 'powershell'")]
    pub kind: Option<String>,
}

/// The core's shell kind of a request's `kind`.
fn shell_kind(kind: Option<&str>) -> Result<exec::ShellKind> {
    match kind {
        None | Some("bash") => Ok(exec::ShellKind::Bash),
        Some("powershell") => Ok(exec::ShellKind::PowerShell),
        Some(other) => Err(Error::new(
            Status::InvalidArg,
            format!("kind must be \"bash\" or \"powershell\", got {other:?}"),
        )),
    }
}

/// The sandbox of a `bashSpawn` (see `pi_native_ops_core::exec::sandbox::Sandbox`).
#[napi(object)]
pub struct BashSandbox {
    /// The host workspace.
    pub root: String,
    /// Where the root appears inside; absent: the core's default (`sandbox::DEFAULT_RUNTIME_ROOT`).
    pub runtime_root: Option<String>,
    /// Share the host's network; default false.
    pub network: Option<bool>,
    /// With `network` off: the hosts reachable through the sandbox's proxy (namespaces mode).
    pub network_allow: Option<Vec<String>>,
    /// `[host pattern, header name, value]` triples added to plain `http://` requests.
    pub network_headers: Option<Vec<Vec<String>>>,
    pub read_only: Option<Vec<String>>,
    pub read_write: Option<Vec<String>>,
    /// `KEY=VALUE` entries added to the sandbox's clean environment.
    pub env: Option<Vec<String>>,
    /// `"auto"` (default), `"namespaces"` or `"landlock"`.
    pub mode: Option<String>,
    /// Most processes at once; default 512.
    pub max_processes: Option<u32>,
    /// Bytes each private tmpfs (`/tmp`, `/dev/shm`) may hold (namespaces mode); default
    /// `min(RAM / 8, 2 GiB)`.
    pub tmp_size: Option<i64>,
    /// The workspace policy the shell is held to; absent: the protected defaults.
    pub policy: Option<crate::fs::PolicyConfig>,
}

impl From<BashSandbox> for sandbox::RawSandbox {
    fn from(js: BashSandbox) -> sandbox::RawSandbox {
        sandbox::RawSandbox {
            root: js.root,
            runtime_root: js.runtime_root,
            network: js.network,
            network_allow: js.network_allow,
            network_headers: js.network_headers,
            read_only: js.read_only,
            read_write: js.read_write,
            env: js.env,
            mode: js.mode,
            max_processes: js.max_processes,
            tmp_size: js.tmp_size,
            policy: js.policy.map(Into::into),
        }
    }
}

fn core_sandbox(js: BashSandbox) -> std::result::Result<sandbox::Sandbox, CoreError> {
    sandbox::Sandbox::from_raw(js.into())
}

/// The sandbox modes by name, as `sandbox.mode` takes them (the core's `Mode::NAMES`).
#[napi]
pub fn sandbox_modes() -> Vec<&'static str> {
    sandbox::Mode::NAMES.iter().map(|(_, name)| *name).collect()
}

/// What `sandboxSupport()` reports.
#[napi(object)]
pub struct SandboxSupport {
    pub platform: String,
    pub kernel: Option<String>,
    /// Namespaces mode works here (probed once by running a sandboxed `:`).
    pub namespaces: bool,
    pub namespaces_error: Option<String>,
    /// 0 without Landlock.
    pub landlock_abi: u32,
    pub landlock_error: Option<String>,
    pub seccomp: bool,
    /// seccomp user notification works here (metadata outside the writable paths in Landlock
    /// mode, locks on host files in both modes).
    pub user_notification: bool,
    /// The mode `"auto"` picks: `"namespaces"`, `"landlock"`, or null when no sandbox is possible.
    #[napi(ts_type = "'namespaces' | 'landlock' | null")]
    pub auto: Option<String>,
    /// What each mode confines here (absent: the mode is unavailable).
    pub enforces: SandboxEnforces,
}

/// What each sandbox mode confines on this machine.
#[napi(object)]
pub struct SandboxEnforces {
    pub namespaces: Option<SandboxGuarantees>,
    pub landlock: Option<SandboxGuarantees>,
}

/// The guarantees of one mode here (the core's `sandbox::Guarantees`, field for field).
#[napi(object)]
pub struct SandboxGuarantees {
    pub files: bool,
    pub truncate: bool,
    pub device_ioctl: bool,
    pub network: bool,
    pub signals: bool,
    pub abstract_unix_sockets: bool,
    pub other_processes: bool,
    pub set_id_bits: bool,
    pub process_lifetime: bool,
    pub metadata: bool,
    pub locks: bool,
}

impl From<sandbox::Guarantees> for SandboxGuarantees {
    fn from(g: sandbox::Guarantees) -> Self {
        SandboxGuarantees {
            files: g.files,
            truncate: g.truncate,
            device_ioctl: g.device_ioctl,
            network: g.network,
            signals: g.signals,
            abstract_unix_sockets: g.abstract_unix_sockets,
            other_processes: g.other_processes,
            set_id_bits: g.set_id_bits,
            process_lifetime: g.process_lifetime,
            metadata: g.metadata,
            locks: g.locks,
        }
    }
}

/// The sandbox helper of this process: the platform's `pi-native-ops-server` (JS finds it with
/// `serverBinaryPath()`), or none found. Never throws: a sandbox made without a usable one is
/// refused (`ESANDBOX`) with the core's reason.
#[napi]
pub fn sandbox_helper(path: Option<String>) {
    #[cfg(target_os = "linux")]
    let _ = pi_native_ops_core::exec::helper::set_path(path.as_deref().map(std::path::Path::new));
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// What this machine offers for sandboxed bash (probed on the first call, then cached).
#[napi]
pub fn sandbox_support() -> SandboxSupport {
    let s = sandbox::support();
    SandboxSupport {
        platform: s.platform.to_string(),
        kernel: s.kernel.clone(),
        namespaces: s.namespaces.is_ok(),
        namespaces_error: s.namespaces.clone().err(),
        landlock_abi: s.landlock_abi,
        landlock_error: s.landlock_error.clone(),
        seccomp: s.seccomp,
        user_notification: s.user_notification,
        auto: s.auto().map(|mode| mode.name().to_string()),
        enforces: SandboxEnforces {
            namespaces: s.guarantees(sandbox::Mode::Namespaces).map(Into::into),
            landlock: s.guarantees(sandbox::Mode::Landlock).map(Into::into),
        },
    }
}

/// The per-command `EventSink` of `onPolicyEvent` (the proxy's connections), when given.
fn event_sink(
    on_policy_event: Option<Function<'_, PolicyEventObject, UnknownReturnValue>>,
) -> Result<Option<EventSink>> {
    on_policy_event
        .map(crate::policy_events::event_sink)
        .transpose()
}

/// JS arguments of one event: (chunk, exitCode, killed).
type EventArgs = (Option<NodeOwnedChunk>, Option<i32>, bool);

/// A chunk copied into a Buffer that Node allocates and accounts for, so the garbage collector sees
/// the memory pressure of a flood; the Rust buffer is freed as soon as it is copied.
pub(crate) struct NodeOwnedChunk(Vec<u8>);

impl ToNapiValue for NodeOwnedChunk {
    /// # Safety
    ///
    /// As `ToNapiValue::to_napi_value`: `env` is the live environment of the current call on the
    /// JS thread.
    unsafe fn to_napi_value(env: sys::napi_env, chunk: Self) -> Result<sys::napi_value> {
        let mut data = std::ptr::null_mut();
        let mut buffer = std::ptr::null_mut();
        // SAFETY: `env` is live (our contract); Node copies `len` bytes from the chunk, which
        // outlives the call, and writes the two out-pointers.
        let status = unsafe {
            sys::napi_create_buffer_copy(
                env,
                chunk.0.len(),
                chunk.0.as_ptr().cast(),
                &mut data,
                &mut buffer,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Error::new(
                Status::from(status),
                "cannot create an output Buffer",
            ));
        }
        Ok(buffer)
    }
}

enum ExecEvent {
    Data(Vec<u8>),
    Done(exec::Outcome),
}

/// A running command; `kill()` takes its whole process tree down.
#[napi]
pub struct BashExecution {
    control: Arc<exec::Control>,
}

#[napi]
impl BashExecution {
    /// Kill the whole tree with SIGKILL; the completion event follows once it is reaped.
    #[napi]
    pub fn kill(&self) {
        self.control.kill();
    }
}

/// Starts `[shell, "-c", command]`. `onEvent(chunk, null, false)` delivers output;
/// `onEvent(null, exitCode, killed)` comes last, exactly once.
#[napi(
    ts_args_type = "request: BashSpawnRequest, onEvent: (chunk: Buffer | null, exitCode: number | null, killed: boolean) => void, onPolicyEvent?: (event: PolicyEventObject) => void"
)]
pub fn bash_spawn(
    env: &Env,
    request: BashSpawnRequest,
    on_event: Function<'_, FnArgs<EventArgs>, UnknownReturnValue>,
    on_policy_event: Option<Function<'_, PolicyEventObject, UnknownReturnValue>>,
) -> Result<BashExecution> {
    let sandbox = match request.sandbox {
        Some(js) => Some(core_sandbox(js).map_err(|e| to_js(env, &e))?.into()),
        None => None,
    };
    let kind = shell_kind(request.kind.as_deref())?;
    spawn(
        env,
        kind,
        request.shell,
        request.command,
        request.cwd,
        request.env,
        sandbox,
        on_event,
        event_sink(on_policy_event)?,
    )
}

/// A sandbox for many commands: its configured paths are resolved when it is made (a path that
/// cannot be used throws here); what is the same for each command (namespaces mode: the template,
/// a user, mount and network namespace with the root already built) is built on the first `spawn`
/// and kept until this object is garbage-collected.
#[napi]
pub struct BashSandboxHandle {
    sandbox: sandbox::Prepared,
}

#[napi]
impl BashSandboxHandle {
    /// `onPolicyEvent` receives each refusal of the policy (and what else the sandbox reports)
    /// as a `PolicyEventObject`; it must not throw (the face wraps the caller's function).
    #[napi(constructor)]
    pub fn new(
        env: Env,
        spec: BashSandbox,
        on_policy_event: Option<
            Function<
                '_,
                crate::policy_events::PolicyEventObject,
                napi::threadsafe_function::UnknownReturnValue,
            >,
        >,
    ) -> Result<Self> {
        let spec = core_sandbox(spec).map_err(|e| to_js(&env, &e))?;
        let events = on_policy_event
            .map(crate::policy_events::event_sink)
            .transpose()?;
        Ok(BashSandboxHandle {
            sandbox: sandbox::Prepared::open_with_events(spec, events)
                .map_err(|e| to_js(&env, &e))?,
        })
    }

    /// `bashSpawn` in this sandbox (`request.sandbox` is ignored).
    // The event arguments' types are the binding's own, as for `bash_spawn`.
    #[allow(private_interfaces)]
    #[napi(
        ts_args_type = "request: BashSpawnRequest, onEvent: (chunk: Buffer | null, exitCode: number | null, killed: boolean) => void, onPolicyEvent?: (event: PolicyEventObject) => void"
    )]
    pub fn spawn(
        &self,
        env: &Env,
        request: BashSpawnRequest,
        on_event: Function<'_, FnArgs<EventArgs>, UnknownReturnValue>,
        on_policy_event: Option<Function<'_, PolicyEventObject, UnknownReturnValue>>,
    ) -> Result<BashExecution> {
        let sandbox = Some(self.sandbox.clone());
        let kind = shell_kind(request.kind.as_deref())?;
        spawn(
            env,
            kind,
            request.shell,
            request.command,
            request.cwd,
            request.env,
            sandbox,
            on_event,
            event_sink(on_policy_event)?,
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn(
    env: &Env,
    kind: exec::ShellKind,
    shell: Option<String>,
    command: String,
    cwd: String,
    exec_env: Option<Vec<String>>,
    sandbox: Option<sandbox::Prepared>,
    on_event: Function<'_, FnArgs<EventArgs>, UnknownReturnValue>,
    policy_events: Option<EventSink>,
) -> Result<BashExecution> {
    let events = on_event
        .build_threadsafe_function::<ExecEvent>()
        .callee_handled::<false>()
        .build_callback(|ctx| -> Result<FnArgs<EventArgs>> {
            Ok(match ctx.value {
                ExecEvent::Data(chunk) => (Some(NodeOwnedChunk(chunk)), None, false).into(),
                ExecEvent::Done(outcome) => (None, outcome.exit_code, outcome.killed).into(),
            })
        })?;
    let mut execution = exec::spawn_shell(
        &exec::ExecRequest {
            shell,
            command,
            cwd,
            env: exec_env,
            cwd_map: None,
            sandbox,
            events: policy_events,
        },
        kind,
    )
    .map_err(|e| to_js(env, &e))?;
    // Node's `spawn <shell> <CODE>` error, for a failure to follow the command.
    let shell = execution.shell().to_string();
    let follow_error = |err: std::io::Error| to_js(env, &CoreError::spawn(&shell, errno_of(&err)));
    let control = execution.control();

    std::thread::Builder::new()
        .name("pi-native-ops-exec".into())
        .spawn(move || {
            let in_flight = Arc::new((Mutex::new(0usize), Condvar::new()));
            let outcome = execution.pump(&mut |chunk| {
                let (count, consumed) = &*in_flight;
                if let Ok(mut n) = count.lock() {
                    *n += 1;
                }
                let in_flight_now = Arc::clone(&in_flight);
                let status = events.call_with_return_value(
                    ExecEvent::Data(chunk),
                    ThreadsafeFunctionCallMode::Blocking,
                    move |_, _| {
                        let (count, consumed) = &*in_flight_now;
                        if let Ok(mut n) = count.lock() {
                            *n -= 1;
                        }
                        consumed.notify_one();
                        Ok(())
                    },
                );
                if status != Status::Ok {
                    return false; // Node is shutting down: stop and kill
                }
                // Wait before reading on: meanwhile the pipe fills, the next read is large, and a
                // producer faster than JS blocks on the full pipe.
                let Ok(guard) = count.lock() else {
                    return false;
                };
                consumed
                    .wait_while(guard, |n| *n >= CHUNKS_IN_FLIGHT)
                    .is_ok()
            });
            events.call(
                ExecEvent::Done(outcome),
                ThreadsafeFunctionCallMode::Blocking,
            );
            // Reaps the supervisor, after JS already has the result (the stub of
            // unsupported platforms has nothing to drop).
            #[allow(clippy::drop_non_drop)]
            drop(execution);
            drop(events);
        })
        .map_err(follow_error)?;
    Ok(BashExecution { control })
}
